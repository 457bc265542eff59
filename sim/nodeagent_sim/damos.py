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

The other actions, as ``damon_pa_apply_scheme`` runs them on ``paddr``:

- ``pageout`` (``damon_pa_pageout``) reclaims the in-use pages of a tried region that are not young: it skips
  accessed pages itself (an implicit young filter from 6.10, reclaim's own reference check before), unless the
  scheme has a young filter of its own. ``reclaim_pages`` never demotes; the simulated workload's memory is
  anonymous, so a page leaves only to swap: the node's used memory and ``SwapFree`` drop, ``pswpout`` counts
  the pages, and on a node without swap nothing is applied (applied 0, tried as ever). Like the migrations it
  works one quota interval per refresh.
- ``lru_prio``/``lru_deprio`` (``damon_pa_mark_accessed_or_deactivate``) re-sort every in-use page of a tried
  region that passes the filters on its LRU list: applied = those pages, no memory moves. ``stat`` applies
  nothing; it reports the in-use bytes that pass its filters only when it has filters (``damon_pa_stat``,
  6.14). Actions ``paddr`` does not implement (``hugepage``, ``nohugepage``, ``willneed``, ``cold``) are tried
  and apply nothing. These move no memory, so a refresh stands for a whole pass over the matched regions (the
  young-filter walk nodeagent primes a kdamond with covers 2 TiB in one refresh, where the real kernel,
  charged 1 GiB per quota interval, takes minutes); the quota counts as exceeded once per refresh where the
  pass is larger.

A scheme matches pages by its access pattern (``nr_accesses``): a minimum above 0 matches the hot pages, a
maximum of 0 the cold pages and the free memory, a range over both everything (the migrate actions match by
what they are, hot or cold, as above). Filters: a ``young`` filter passes either the young (hot) pages or the
others (``matching == allow``: only the young); the other filter types pass every page. ``vaddr`` targets are
process address spaces the simulator does not place on nodes: their schemes find no page to apply to (tried
as the pattern matches, applied 0), and a pattern that wants accessed pages finds no region.
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
        if snap["operations"] != "paddr":
            _unplaced(s, st, monitored, region_sz)
            continue
        _physical(k, state, s, st, regions, region_sz)


def _match(s: dict[str, Any]) -> str:
    """Which pages the scheme's access pattern matches: ``hot``, ``cold`` (and free memory) or ``all``."""
    if s["action"] in MIGRATE:
        return "hot" if s["action"] == "migrate_hot" else "cold"
    lo, hi = s.get("nr_accesses") or ([0, 0] if s["action"] in ("pageout", "lru_deprio", "cold") else [1, 2**32])
    return "hot" if lo > 0 else "cold" if hi == 0 else "all"


def _passes(s: dict[str, Any]) -> tuple[bool, bool]:
    """Whether the ops filters pass (hot pages, cold pages): only ``young`` filters tell them apart here."""
    young = [(matching, allow) for t, matching, allow in s.get("filters", []) if t == "young"]
    if young:
        matching, allow = young[0]
        return (True, False) if matching == allow else (False, True)
    if s["action"] == "pageout":
        return False, True  # pageout's own page-level access check skips young pages
    return True, True


def _unplaced(s: dict[str, Any], st: dict[str, int], monitored: int, region_sz: int) -> None:
    """A ``vaddr`` target: address space the simulator places on no node holds no page it could apply to, and
    nothing in it is accessed."""
    if _match(s) == "hot":
        return
    st["nr_tried"] += _ceil_div(monitored, region_sz)
    st["sz_tried"] += monitored
    st["qt_exceeds"] += int(bool(s["bytes"]) and monitored > s["bytes"])


def _physical(k: SimKernel, state: dict[str, Any], s: dict[str, Any], st: dict[str, int],
              regions: list[tuple[int, int]], region_sz: int) -> None:
    bs = memory.block_size(k)
    action, quota = s["action"], int(s["bytes"])
    match = _match(s)
    pass_hot, pass_cold = _passes(s)
    one_interval = action in MIGRATE or action == "pageout"  # the others: a whole pass per refresh
    dst = int(s.get("target_nid", -1))
    left = quota if quota and one_interval else None
    matched = 0
    for node, ranges in sorted(_extents(state, bs).items()):
        ov = _overlap(regions, ranges)
        extent = sum(b - a for a, b in ranges)
        if not ov or not extent:
            continue
        _, used_kb, hot_kb = memory.usage(state, bs // 1024, node)
        hot, used = hot_kb * 1024 * ov // extent, used_kb * 1024 * ov // extent
        # damon_hot_score / damon_cold_score: the pages accessed, or the cold pages and the free memory beside them
        eligible, in_hot, in_cold = {"hot": (hot, hot, 0), "cold": (ov - hot, 0, used - hot),
                                     "all": (ov, hot, used - hot)}[match]
        matched += eligible
        tried = eligible if left is None else min(eligible, left)
        tried -= tried % PAGE
        if tried <= 0:
            continue
        if left is not None:
            left -= tried
        # the in-use pages of what was tried (a free page has no folio), those the filters pass
        hot_c = _pages(in_hot * tried // eligible) if pass_hot else 0
        cold_c = _pages(in_cold * tried // eligible) if pass_cold else 0
        candidates = hot_c + cold_c
        nr_tried = _ceil_div(tried, region_sz)
        st["nr_tried"] += nr_tried
        st["sz_tried"] += tried
        if action in (*MIGRATE, "pageout", "lru_prio", "lru_deprio") or (action == "stat" and s.get("filters")):
            st["sz_ops_filter_passed"] += candidates  # damon_pa_stat looks at no page of a filterless scheme
        applied = _act(k, state, s, node, dst, hot_c, cold_c)
        if applied:
            st["nr_applied"] += min(nr_tried, _ceil_div(nr_tried * applied, candidates))
            st["sz_applied"] += applied
    if quota and matched > quota:
        st["qt_exceeds"] += 1


def _pages(n: int) -> int:
    return n - n % PAGE


def _act(k: SimKernel, state: dict[str, Any], s: dict[str, Any], node: int, dst: int, hot_c: int,
         cold_c: int) -> int:
    """What the action does to the candidate pages (bytes of hot and of cold ones); the bytes applied."""
    action = s["action"]
    candidates = hot_c + cold_c
    if not candidates:
        return 0
    if action in MIGRATE:
        if dst < 0 or dst == node:  # damon_pa_migrate_folio_list: NUMA_NO_NODE or the same node moves nothing
            return 0
        applied = memory.move(k, node, dst, candidates // 1024, take="hot" if action == "migrate_hot" else "cold",
                              land_hot=action == "migrate_hot", state=state) * 1024
        vmstat.record(k, node, dst, applied // PAGE, "damon", failed=(candidates - applied) // PAGE)
        return applied
    if action == "pageout":
        applied = 0
        for take, size in (("cold", cold_c), ("hot", hot_c)):
            if size:
                applied += memory.swap_out(k, node, size // 1024, take=take, state=state) * 1024
        if applied:
            vmstat.count(k, None, {"pswpout": applied // PAGE})
        return applied
    if action in ("lru_prio", "lru_deprio"):
        return candidates
    return 0  # stat counts only; paddr implements no other action
