"""Per-node ``/sys/devices/system/node/nodeN/vmstat`` and page migration between tiers, as the kernel counts it.

The tiering counters are node statistics: ``pgpromote_success`` is counted on the node pages were promoted
*to* (5.18; ``pgpromote_candidate`` 6.1), ``pgdemote_kswapd/direct/khugepaged`` on the node they were demoted
*from* (per node since 6.9, as a 6.12 guest shows; ``pgdemote_proactive`` 6.14). ``/proc/vmstat`` shows their
sums over all nodes, and ``pgmigrate_success`` counts every migrated page.
:func:`migrate` is "time passes with tiering at work" for tests: the memory moves between the nodes' meminfo
and the counters of both files move with it, by the pages that actually moved.
"""

from __future__ import annotations

from .kernel import SimKernel

NODE = "/sys/devices/system/node"
#: Counters a node's vmstat shows besides the tiering ones (values of an idle node).
BASE = ("nr_free_pages", "nr_inactive_anon", "nr_active_anon", "nr_inactive_file", "nr_active_file",
        "nr_unevictable", "nr_slab_reclaimable", "nr_slab_unreclaimable", "nr_isolated_anon", "nr_isolated_file",
        "nr_anon_pages", "nr_mapped", "nr_file_pages", "nr_dirty", "nr_writeback", "nr_shmem")
PROMOTE = ("pgpromote_success", "pgpromote_candidate")
DEMOTE = ("pgdemote_kswapd", "pgdemote_direct", "pgdemote_khugepaged")


def tiering_keys(k: SimKernel) -> list[str]:
    keys = []
    if k.at_least(5, 18):
        keys.append("pgpromote_success")
    if k.at_least(6, 1):
        keys.append("pgpromote_candidate")
    if k.at_least(6, 9):
        keys += list(DEMOTE)
    if k.at_least(6, 14):
        keys.append("pgdemote_proactive")
    if k.at_least(6, 18):  # seen in 6.18 captures (tests/data/metrics); the release that added it is not pinned
        keys.insert(2, "pgpromote_candidate_nrl")
    return keys


def node_vmstat(k: SimKernel) -> str:
    """The vmstat of a node that just came online: every counter 0."""
    return "\n".join(f"{key} 0" for key in (*BASE, *tiering_keys(k)))


def _bump(k: SimKernel, path: str, deltas: dict[str, int]) -> None:
    lines = []
    seen = set()
    for line in k.tree.read(path).splitlines():
        key, _, value = line.partition(" ")
        if key in deltas:
            value = str(int(value) + deltas[key])
            seen.add(key)
        lines.append(f"{key} {value}")
    lines += [f"{key} {v}" for key, v in deltas.items() if key not in seen and path == "/proc/vmstat"]
    k.tree.set(path, "\n".join(lines))


def count(k: SimKernel, node: int | None, deltas: dict[str, int]) -> None:
    """Add ``deltas`` to the counters of ``/proc/vmstat`` and, for the node statistics among them, to
    ``nodeN/vmstat`` (``node`` None: a vm event, system-wide only)."""
    per_node = f"{NODE}/node{node}/vmstat"
    if node is not None and k.tree.exists(per_node):
        keys = tiering_keys(k)
        node_deltas = {key: v for key, v in deltas.items() if key in keys}
        if node_deltas:
            _bump(k, per_node, node_deltas)
    _bump(k, "/proc/vmstat", deltas)


def demote_key(k: SimKernel, cause: str) -> str:
    """The ``pgdemote_*`` counter a reclaimer's demotions land in: ``reclaimer_offset()`` (mm/vmscan.c) gives
    kswapd, khugepaged and everything else as direct reclaim; proactive reclaim has its own from 6.14."""
    if cause == "proactive" and not k.at_least(6, 14):
        cause = "direct"
    return f"pgdemote_{cause}"


def migrate(k: SimKernel, src: int, dst: int, pages: int, cause: str) -> int:
    """Time passes with tiering at work: up to ``pages`` move from node ``src`` to node ``dst``; the pages moved.

    ``cause`` is ``promote`` (NUMA balancing: ``migrate_misplaced_folio`` in mm/migrate.c counts
    ``pgpromote_success`` on the node the pages went to, and they are hot there) or a reclaimer (``kswapd``,
    ``direct``, ``khugepaged``, ``proactive``: ``demote_folio_list`` in mm/vmscan.c counts ``pgdemote_<cause>``
    on the node they left, coldest first). The memory moves with the counters (:func:`.memory.move`): only pages
    that exist on ``src`` move, and only as many as ``dst`` has room for; ``pgmigrate_success`` counts them
    (``migrate_pages``), ``pgmigrate_fail`` the rest. ``src == dst`` moves nothing but counts, as a test of
    the counters alone wants."""
    from . import memory

    if src == dst:
        moved = pages
    elif cause == "promote":
        moved = memory.move(k, src, dst, pages * memory.PAGE_KB, take="hot-first", land_hot=True) // memory.PAGE_KB
    else:
        moved = memory.move(k, src, dst, pages * memory.PAGE_KB, take="cold-first", land_hot=False) // memory.PAGE_KB
    record(k, src, dst, moved, cause, failed=pages - moved)
    return moved


def record(k: SimKernel, src: int, dst: int, pages: int, cause: str, failed: int = 0) -> None:
    """Count ``pages`` migrated from ``src`` to ``dst`` by ``cause`` (``promote``, a reclaimer, or ``damon``:
    DAMON's migrations are ``MR_DAMON`` and count in ``pgmigrate_*`` only, neither promotions nor demotions)."""
    if cause == "promote":
        node: int | None = dst
        deltas = {"pgpromote_success": pages, "pgpromote_candidate": pages}
    elif cause == "damon":
        node, deltas = None, {}
    else:
        node, deltas = src, {demote_key(k, cause): pages}
    if not k.at_least(6, 9) and cause not in ("promote", "damon"):
        node = None  # before 6.9 demotions are vm events (__count_vm_events): system-wide only
    count(k, node, {**deltas, "pgmigrate_success": pages, **({"pgmigrate_fail": failed} if failed else {})})
