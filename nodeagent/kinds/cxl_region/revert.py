"""Revert for CXL regions, pure on the facts: a region nodeagent made is torn down in the kernel's order (its memory
offline first: disruptive when any is online); a region nodeagent tore down is not made again (it says how)."""

from __future__ import annotations

from dataclasses import replace

from ...facts import Facts
from ...facts.cxl import from_facts as cxl_facts
from ...plan import Change
from ...state import Original, OwnedRegion
from .names import KIND, ident
from .plan import Ctx, Pool, plan_leftovers, plan_teardown, windows


def plan_revert(facts: Facts, target: str, rec: Original, owned: OwnedRegion | None = None) -> list[Change]:
    """``owned``: the region's ownership record; one that says ``building`` (nodeagent's creation of it stopped
    half-way) has what it left torn down, as an apply does before it makes the region again."""
    was = rec.value if isinstance(rec.value, dict) else {}
    serials = list(was.get("serials") or ())
    if was.get("region"):
        raise ValueError(f"{target}: nodeagent tore down {was['region']} to rebuild it; it does not make the old "
                         "region again: `cxl create-region` it by hand if it is wanted")
    if "cxl" not in facts.sections or "dax" not in facts.sections:
        raise ValueError(f"{target}: the CXL bus or DAX facts are missing, so the region cannot be found")
    cxl = cxl_facts(facts)
    members = list(was.get("members") or [f"{s:#x}" for s in serials])
    by_ident = {ident(m, cxl.memdevs): m.name for m in cxl.memdevs}
    names = [by_ident.get(x) for x in members]
    c = Ctx(None, facts, cxl, windows(cxl, facts), Pool.of(cxl), {}, True, facts.block_size_bytes, None)
    if owned is not None and owned.building is not None:
        plan_leftovers(c, owned)
        return [replace(ch, op="revert") for ch in c.changes if ch.kind == KIND]
    region = next((r for r in cxl.regions if names and r.memdevs == names), None)
    if region is None:
        return []  # already gone: as it was
    plan_teardown(c, region, "revert: nodeagent made it")
    return [replace(ch, op="revert", reason=ch.reason.replace("; not done without --allow-disruptive", ""))
            for ch in c.changes if ch.kind == KIND]
