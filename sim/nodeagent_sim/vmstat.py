"""Per-node ``/sys/devices/system/node/nodeN/vmstat`` and page migration between tiers, as the kernel counts it.

The tiering counters are node statistics: ``pgpromote_success`` is counted on the node pages were promoted
*to* (5.18; ``pgpromote_candidate`` 6.1), ``pgdemote_kswapd/direct/khugepaged`` on the node they were demoted
*from* (per node since 6.9, as a 6.12 guest shows; ``pgdemote_proactive`` 6.14). ``/proc/vmstat`` shows their
sums over all nodes, and ``pgmigrate_success`` counts every migrated page.
:func:`migrate` is "time passes with tiering at work" for tests: it moves the counters of both files together.
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


def migrate(k: SimKernel, src: int, dst: int, pages: int, cause: str) -> None:
    """``pages`` moved from node ``src`` to node ``dst``: ``cause`` is ``promote`` (NUMA balancing) or a
    demotion counter's suffix (``kswapd``, ``direct``, ``khugepaged``, ``proactive``)."""
    if cause == "promote":
        node, deltas = dst, {"pgpromote_success": pages, "pgpromote_candidate": pages}
    else:
        node, deltas = src, {f"pgdemote_{cause}": pages}
    per_node = f"{NODE}/node{node}/vmstat"
    if k.tree.exists(per_node) and k.at_least(6, 9 if cause != "promote" else 5):
        _bump(k, per_node, {key: v for key, v in deltas.items() if key in tiering_keys(k)})
    _bump(k, "/proc/vmstat", {**deltas, "pgmigrate_success": pages})  # a vm event: system-wide only
