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
in the kernel's order: before a rebuild), ``revert`` (a region nodeagent made, torn down by ``nodeagent revert``).
Each change names the memdevs, the region and the DAX devices it concerns in :attr:`Change.devices` (what
``apply --device memN`` reads), the window's node in :attr:`Change.nodes`; an ``online`` ``needs`` its region's
``create``. The regions nodeagent made are typed records of :class:`nodeagent.state.Ownership` (``regions``).
Plan: :mod:`.plan`; apply: :mod:`.apply`; revert (:meth:`CxlRegionResource.revert`): :mod:`.revert`; the boot
wait for memdevs: :mod:`.wait`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...facts import Facts
from ...host import Host
from ...plan import Change
from ...state import Original, Ownership, PlanState
from ..base import ApplyContext, Kind, PlanContext, ResourcePlan, projection_of
from .names import CXL, KIND, rules_of

if TYPE_CHECKING:
    from ...profile import LoadedProfile

__all__ = ["KIND", "CxlRegionResource", "planned_dax", "planned_teardowns"]


def planned_dax(loaded: Any, facts: Facts, allow_disruptive: bool = False) -> list[Any]:
    """The DAX devices the regions this plan creates will have (for the projection: their nodes come online)."""
    if not rules_of(loaded) or "cxl" not in facts.sections:
        return []
    from .plan import plan

    return plan(loaded, facts, {}, allow_disruptive, None).planned_dax


def planned_teardowns(loaded: Any, facts: Facts, allow_disruptive: bool = False) -> list[Change]:
    """The region teardowns this plan carries out (a rebuild's ``delete``; not one held back as disruptive):
    the kinds acting on their nodes stop before them (:mod:`nodeagent.kinds.damon`)."""
    if not rules_of(loaded) or "cxl" not in facts.sections:
        return []
    from .plan import plan

    changes = plan(loaded, facts, {}, allow_disruptive, None).changes
    return [c for c in changes if c.op == "delete" and (allow_disruptive or not c.disruptive)]


class CxlRegionResource(Kind):
    kind = KIND
    revertible = True
    #: What its apply writes (drivers/cxl/core/region.c's ABI): a root decoder's create_ram_region and
    #: delete_region, a region's geometry, size, targets and commit, an endpoint decoder's mode and dpa_size, and
    #: cxl_region's bind — by the bus's names and where those links lead (the CXL root's ACPI0017 device tree, the
    #: ports and endpoints below it). Its DAX device is onlined by daxctl, as the DAX kind does it.
    writes: tuple[str, ...] = (
        rf"{CXL}/decoder[0-9]+\.[0-9]+/(create_ram_region|delete_region|mode|dpa_size)",
        rf"{CXL}/region[0-9]+/(interleave_ways|interleave_granularity|size|target[0-9]+|commit)",
        r"/sys/bus/cxl/drivers/cxl_region/bind",
        r"/sys/devices/platform/ACPI0017:[0-9]+/root[0-9]+/([a-z]+[0-9]+/)*decoder[0-9]+\.[0-9]+/"
        r"(create_ram_region|delete_region|mode|dpa_size)",
        r"/sys/devices/platform/ACPI0017:[0-9]+/root[0-9]+/decoder[0-9]+\.[0-9]+/region[0-9]+/"
        r"(interleave_ways|interleave_granularity|size|target[0-9]+|commit)",
    )

    #: Facts sections its revert plans from that planning gathers only for a profile with memory.cxl.
    revert_sections = frozenset({"cxl"})

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
        c = plan(loaded, facts, ctx.state.ownership.regions, ctx.allow_disruptive, policy)
        out.changes, out.problems, out.warnings, out.unchanged = c.changes, c.problems, c.warnings, c.unchanged
        return out

    def apply(self, host: Host, change: Change, actx: ApplyContext) -> str:
        from .apply import apply

        return apply(host, change, actx)

    def original(self, change: Change, facts: Facts) -> tuple[str, Original] | None:
        """Before a region is made: that the memdevs had none (revert tears it down). Before one is torn down:
        what it was (revert cannot make it again: it says so)."""
        if change.op not in ("create", "delete"):
            return None
        made = change.op == "delete" and not change.detail("leftovers", False)  # (leftovers: nodeagent's own)
        return change.target, Original(KIND, change.path, {
            "region": change.before_label if made else None,
            "serials": list(change.detail("serials", ())), "members": list(change.detail("idents", ()))})

    def revert(self, target: str, original: Original, facts: Facts, state: PlanState) -> list[Change]:
        """Pure: a region nodeagent made torn down in the kernel's order (disruptive while its memory is online);
        none when it is gone already. A region nodeagent tore down is not made again (ValueError says how)."""
        from .names import key_of
        from .revert import plan_revert

        return plan_revert(facts, target, original, state.ownership.regions.get(key_of(target)))

    def forget(self, target: str, ownership: Ownership) -> None:
        """After a revert: the region's ownership record, and those of the DAX devices it had, go."""
        from .apply import forget_region
        from .names import key_of

        forget_region(ownership, key_of(target))

    def rezones(self, change: Change) -> bool:
        """Whether ``change`` takes DAX memory away or onlines it (the executor stops the kdamonds pinned to that
        memory first): a teardown, and the onlining of a new region's DAX device."""
        return change.op in ("delete", "revert", "online")
