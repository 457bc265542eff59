"""What a DAMON scheme does to the simulated memory between two statistics refreshes (one quota interval).

The kernel's path, as emulated for ``paddr``: ``damon_do_apply_schemes`` (mm/damon/core.c) walks the regions
whose access pattern the scheme matches and tries the action on each until the quota's bytes are charged —
charged by the size *tried*, free pages included; ``damos_apply_scheme`` splits the region that would exceed the
quota. ``damon_pa_migrate`` (mm/damon/paddr.c) then takes the in-use folios of a tried region (a free page has
no folio: ``damon_get_folio`` skips it) and migrates them to ``target_nid``; what it returns (the pages that
moved) is ``sz_applied``, so applied ≤ the pages that exist on the source node ≤ tried, and a destination
without free memory leaves the rest where it was (applied < tried). ``damos_update_stat`` adds one region to
``nr_applied`` only where something was applied. DAMON's migrations count in ``pgmigrate_success`` only
(``migrate_pages(..., MR_DAMON, ...)`` in mm/migrate.c): not in ``pgpromote_*`` or ``pgdemote_*``, which
NUMA balancing and reclaim count (mm/migrate.c ``migrate_misplaced_folio``, mm/vmscan.c ``demote_folio_list``).

The simulator's model of access: each node's used memory (memory.py) has a hot part, the pages the workload
accesses (:func:`.memory.touch`); the rest and the free memory are never accessed. ``migrate_hot``
(``damon_hot_score``) matches the hot pages; ``migrate_cold`` (``damon_cold_score``) matches the cold pages and
the free memory, which a region over a node holds side by side. Pages spread evenly over a node, so a
region set over a part of a node sees that part of each. Pages ``migrate_cold`` moves land cold and
``migrate_hot``'s land hot, so the two do not trade the same pages back and forth. A scheme whose minimum
region size no region reaches (``nodeagent guard``'s pause) matches nothing.

Simplifications: only the migrate actions follow the memory and their quota interval. An action that moves no
memory (``stat``, ``pageout``, ``lru_prio``/``lru_deprio``...) counts one pass over every region per refresh,
a sixteenth of them applied up to the quota — so a priming walk over 2 TiB is done in one refresh, where the
real kernel, charged 1 GiB per 200 ms, would take minutes. ``vaddr`` targets are process address spaces the
simulator does not place on nodes: their migrations move nothing.
"""

from __future__ import annotations

from typing import Any

from . import memory, vmstat
from .kernel import SimKernel

PAGE = memory.PAGE_KB * 1024
MIGRATE = ("migrate_hot", "migrate_cold")
STATS = ("nr_tried", "sz_tried", "nr_applied", "sz_applied", "qt_exceeds", "sz_ops_filter_passed")


def _extents(state: dict[str, Any], bs: int) -> dict[int, list[tuple[int, int]]]:
    """Each node's physical address ranges: the spans of its populated zones (memory._account keeps them)."""
    out = {}
    for n, ns in state.get("nodes", {}).items():
        out[int(n)] = [(lo * bs, hi * bs) for z, (lo, hi) in ns.get("spans", {}).items()
                       if ns.get("online", {}).get(z, 0) > 0]
    return out


def _overlap(regions: list[tuple[int, int]], ranges: list[tuple[int, int]]) -> int:
    return sum(max(min(e, b) - max(s, a), 0) for s, e in regions for a, b in ranges)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def new_stats() -> dict[str, int]:
    return dict.fromkeys(STATS, 0)


def apply(k: SimKernel, state: dict[str, Any], snap: dict[str, Any], stats: dict[str, dict[str, int]]) -> None:
    """One quota interval of every scheme of a running kdamond's configuration ``snap``: ``stats`` (per scheme
    index) and the memory in ``state`` move together."""
    unit = int(snap.get("addr_unit", 1)) or 1
    regions = [(s * unit, e * unit) for s, e in snap["regions"]]
    monitored = sum(e - s for s, e in regions)
    for i, s in enumerate(snap["schemes"]):
        st = stats.setdefault(str(i), new_stats())
        if not monitored:
            continue  # a paddr target without regions monitors nothing
        region_sz = max(monitored // max(int(snap.get("min_regions", 1)), len(regions), 1), PAGE)
        if int(s.get("sz_min", 0)) > region_sz:
            continue  # no region is that large: the scheme matches nothing
        if snap["operations"] != "paddr" or s["action"] not in MIGRATE:
            _pass(s, st, monitored, monitored // region_sz)
            continue
        _physical(k, state, s, st, regions, region_sz)


def _pass(s: dict[str, Any], st: dict[str, int], monitored: int, nr_regions: int) -> None:
    """An action that moves no memory: a refresh stands for one pass over every region (the young-filter walk
    nodeagent primes a kdamond with counts on it), a sixteenth of them applied up to the quota."""
    want = monitored // 16
    done = min(want, s["bytes"]) if s["bytes"] else want
    st["nr_tried"] += nr_regions
    st["sz_tried"] += monitored
    if s["action"] not in ("stat", *MIGRATE):
        st["nr_applied"] += 1
        st["sz_applied"] += done
        st["sz_ops_filter_passed"] += done
        st["qt_exceeds"] += int(bool(s["bytes"]) and want > s["bytes"])


def _physical(k: SimKernel, state: dict[str, Any], s: dict[str, Any], st: dict[str, int],
              regions: list[tuple[int, int]], region_sz: int) -> None:
    bs = memory.block_size(k)
    action, quota = s["action"], int(s["bytes"])
    dst = int(s.get("target_nid", -1))
    left = quota or None
    matched = 0
    for node, ranges in sorted(_extents(state, bs).items()):
        ov = _overlap(regions, ranges)
        extent = sum(b - a for a, b in ranges)
        if not ov or not extent:
            continue
        _, used_kb, hot_kb = memory.usage(state, bs // 1024, node)
        hot, used = hot_kb * 1024 * ov // extent, used_kb * 1024 * ov // extent
        if action == "migrate_hot":  # damon_hot_score: the pages the workload accesses
            eligible, in_use = hot, hot
        else:  # damon_cold_score: the cold pages and the free memory beside them
            eligible, in_use = ov - hot, used - hot
        matched += eligible
        tried = eligible if left is None else min(eligible, left)
        tried -= tried % PAGE
        if tried <= 0:
            continue
        if left is not None:
            left -= tried
        candidates = in_use * tried // eligible
        candidates -= candidates % PAGE
        nr_tried = _ceil_div(tried, region_sz)
        st["nr_tried"] += nr_tried
        st["sz_tried"] += tried
        st["sz_ops_filter_passed"] += candidates
        applied = 0
        if candidates and dst >= 0 and dst != node:  # damon_pa_migrate_folio_list: NUMA_NO_NODE or the same
            applied = memory.move(k, node, dst, candidates // 1024,  # node moves nothing
                                  take="hot" if action == "migrate_hot" else "cold",
                                  land_hot=action == "migrate_hot", state=state) * 1024
            vmstat.record(k, node, dst, applied // PAGE, "damon", failed=(candidates - applied) // PAGE)
        if applied:
            st["nr_applied"] += min(nr_tried, _ceil_div(nr_tried * applied, candidates))
            st["sz_applied"] += applied
    if quota and matched > quota:
        st["qt_exceeds"] += 1
