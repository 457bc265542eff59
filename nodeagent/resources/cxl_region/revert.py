"""Revert for CXL regions: a region nodeagent made is torn down in the kernel's order (its memory offline first:
disruptive when any is online); a region nodeagent tore down is not made again (it says how)."""

from __future__ import annotations

from typing import Any

from ...facts import Facts
from ...facts.cxl import read as read_cxl
from ...host import Host
from ...plan import Change
from .names import KIND, ident
from .plan import Ctx, Pool, plan_teardown, windows


def plan_revert(host: Host, facts: Facts, target: str, rec: dict[str, Any]) -> list[Change]:
    from dataclasses import asdict

    was = rec.get("value") or {}
    serials = list(was.get("serials") or ())
    if was.get("region"):
        raise ValueError(f"{target}: nodeagent tore down {was['region']} to rebuild it; it does not make the old "
                         "region again: `cxl create-region` it by hand if it is wanted")
    cxl = read_cxl(host)
    members = list(was.get("members") or [f"{s:#x}" for s in serials])
    by_ident = {ident(m, cxl.memdevs): m.name for m in cxl.memdevs}
    names = [by_ident.get(x) for x in members]
    region = next((r for r in cxl.regions if names and r.memdevs == names), None)
    if region is None:
        return []  # already gone: as it was
    if "dax" not in facts.sections:
        raise ValueError(f"{target}: the DAX facts are missing")
    facts = Facts(**{**facts.__dict__, "sections": {**facts.sections, "cxl": asdict(cxl)}})
    c = Ctx(None, facts, cxl, windows(cxl, facts), Pool.of(cxl), {}, True, facts.block_size_bytes, None)
    plan_teardown(c, region, "revert: nodeagent made it")
    return [ch if ch.op != "delete" else _as_revert(ch) for ch in c.changes if ch.kind == KIND]


def _as_revert(ch: Change) -> Change:
    from dataclasses import replace

    return replace(ch, op="revert", reason=ch.reason.replace("; not done without --allow-disruptive", ""))
