"""CXL RAM regions as a managed resource: from bare memdevs to committed regions whose DAX devices the DAX rules
online — declared by memdev serial, recreated at every boot.

Profile::

    memory:
      auto_online_blocks: offline        # kmem takes a region's DAX device at commit: the kernel must not online it
      cxl:
        regions:
          - name: each-memdev
            memdevs: {without_region: true}   # or {serials: [0x4c454f0001, ...]} | {host_bridges: [pci0000:0c]}
            type: ram
            ways: 1                            # a region per memdev; N: one region interleaving N memdevs
            granularity: 256                   # optional: the window's when absent

Changes (kind ``cxl_region``): ``create`` (the region, committed, with its DAX device), ``online`` (that DAX
device, as the first matching ``memory.dax`` rule says, by the DAX kind's apply), ``delete`` (a region torn down
in the kernel's order: before a rebuild, or by ``revert``). Plan: :mod:`.plan`; apply: :mod:`.apply`; revert:
:mod:`.revert`; the boot wait for memdevs: :mod:`.wait`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...facts import Facts
from ...host import Host
from ...plan import Change
from ..base import ApplyContext, PlanContext, ResourcePlan, projection_of
from .names import KIND, rules_of

if TYPE_CHECKING:
    from ...profile import LoadedProfile

__all__ = ["KIND", "CxlRegionResource", "planned_dax"]


def owned(state: dict[str, Any]) -> dict[str, Any]:
    return dict((state.get("ownership") or {}).get(KIND, {}))


def planned_dax(loaded: Any, facts: Facts, allow_disruptive: bool = False) -> list[Any]:
    """The DAX devices the regions this plan creates will have (for the projection: their nodes come online)."""
    if not rules_of(loaded) or "cxl" not in facts.sections:
        return []
    from .plan import plan

    return plan(loaded, facts, {}, allow_disruptive, None).planned_dax


class CxlRegionResource:
    kind = KIND

    def plan(self, loaded: LoadedProfile, facts: Facts, ctx: PlanContext) -> ResourcePlan:
        out = ResourcePlan()
        if not rules_of(loaded):
            return out
        if "cxl" not in facts.sections:  # facts gathered for another profile, or saved by an older nodeagent
            out.warnings.append("memory.cxl.regions: these facts have no CXL bus section, so no region is planned "
                                "(gather them again for this profile)")
            return out
        from .plan import plan

        policy = projection_of(loaded, facts, ctx).knob("memory.auto_online_blocks")
        c = plan(loaded, facts, owned(ctx.state), ctx.allow_disruptive, policy)
        out.changes, out.problems, out.warnings, out.unchanged = c.changes, c.problems, c.warnings, c.unchanged
        return out

    def apply(self, host: Host, change: Change, actx: ApplyContext) -> str:
        from .apply import apply

        return apply(host, change, actx)

    def original(self, change: Change, facts: Facts) -> tuple[str, dict[str, Any]] | None:
        """Before a region is made: that the memdevs had none (revert tears it down). Before one is torn down:
        what it was (revert cannot make it again: it says so)."""
        if change.op == "create":
            return change.target, {"kind": KIND, "path": change.path,
                                   "value": {"region": None, "serials": list(change.detail("serials", ())),
                                             "members": list(change.detail("idents", ()))}}
        if change.op == "delete":
            return change.target, {"kind": KIND, "path": change.path,
                                   "value": {"region": change.before_label,
                                             "serials": list(change.detail("serials", ())),
                                             "members": list(change.detail("idents", ()))}}
        return None
