"""Which nodes ``fast`` and ``slow`` mean on this node, how sources pair with destinations, and the physical
ranges a paddr target monitors. Pure functions of the node's projection (:mod:`nodeagent.kinds.projection`).

- ``fast``: the nodes of the top memory tier (lowest ``memory_tier<N>``); ``slow``: the nodes of every lower
  tier, ordered by tier then id, plus the nodes the profile's ``memory.dax`` rules bring online in the same
  apply (devdax devices, and kmem-bound devices whose blocks are offline) — their ranges are the devices'
  ``resource``/``size`` rounded inwards to whole memory blocks, what kmem hot-adds; pinned-pool nodes are
  neither. CPU presence plays no part (a CPU-less node can be DRAM).
- Pairing keys on firmware proximity, which onlining does not change: a DAX-backed node is as near a node as the
  node its device hangs off (``numa_node``); other nodes by NUMA distance; the lowest id breaks ties
  (:meth:`nodeagent.kinds.projection.NodeProjection.proximity`).
"""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING

from ...util.dataclass import dataclass

if TYPE_CHECKING:
    from ..projection import NodeProjection

FAR = 255


@dataclass(frozen=True)
class NodeClasses:
    fast: tuple[int, ...]
    slow: tuple[int, ...]
    tier: dict[int, int]  # node → tier number (pending DAX nodes: a number below every real tier)
    ranges: dict[int, tuple[tuple[int, int], ...]]
    pending: dict[int, str] = field(default_factory=dict)  # node → DAX device not yet online
    near: dict[int, int] = field(default_factory=dict)  # DAX-backed node → node its device hangs off
    distances: dict[tuple[int, int], int] = field(default_factory=dict)  # between nodes online now
    notes: tuple[str, ...] = ()

    def resolve(self, ref: int | str) -> tuple[int, ...]:
        if isinstance(ref, int):
            return (ref,)
        return self.fast if ref == "fast" else self.slow

    def distance(self, a: int, b: int) -> int:
        """Pairing distance, the same before and after onlining: a DAX-backed node counts as its host node."""
        ha, hb = self.near.get(a, a), self.near.get(b, b)
        if ha == hb:
            return 0 if a == b else 10
        return self.distances.get((ha, hb), FAR)

    def nearest(self, source: int, candidates: tuple[int, ...]) -> int | None:
        """The candidate closest to ``source`` (ties: lower id); never ``source`` itself."""
        pool = [c for c in candidates if c != source]
        if not pool:
            return None
        return min(pool, key=lambda c: (self.distance(source, c), c))

    def label(self, node: int) -> str:
        return f"node{node}" + (f" ({self.pending[node]}, not yet online)" if node in self.pending else "")


def classes(proj: NodeProjection) -> NodeClasses:
    """The node classes of the projected node."""
    return NodeClasses(proj.fast, proj.slow, dict(proj.tier), dict(proj.ranges), dict(proj.pending),
                       dict(proj.host), dict(proj.distances), proj.notes)


@dataclass(frozen=True)
class Pairing:
    """One kdamond to build: which nodes it monitors and where each migrate scheme sends pages."""

    name: str
    sources: tuple[int, ...]
    dests: tuple[tuple[int, ...], ...]  # per profile scheme: destination nodes (empty for non-migrate)
    how: str  # human explanation, shown in the plan


def pair(name: str, pairing: str, sources: tuple[int, ...], scheme_dests: list[tuple[int, ...] | None],
         nc: NodeClasses) -> tuple[list[Pairing], list[str]]:
    """Expand one profile kdamond into the kdamonds to build.

    ``nearest``: one kdamond per source node (named ``<name>-node<N>`` when there are several), each migrate
    scheme going to the destination nearest that source. ``gather``: the same destinations, but one kdamond per
    destination (``<name>-to-node<D>`` when there are several), monitoring every source whose nearest
    destination it is — for sources that come and go (hot-added expanders): a new one joins an existing kdamond
    as one more region, a commit, where ``nearest`` needs a new kdamond slot, which rewrites ``nr_kdamonds`` and
    so stops every kdamond. ``split``: one kdamond over all sources; a migrate scheme with several destinations
    becomes one scheme per destination (``target_nid`` each).
    """
    skipped: list[str] = []
    out: list[Pairing] = []
    if pairing in ("nearest", "gather"):
        groups: dict[tuple[tuple[int, ...], ...], tuple[list[tuple[int, ...]], list[int]]] = {}
        for src in sources:
            dests: list[tuple[int, ...]] = []
            for cand in scheme_dests:
                if cand is None:
                    dests.append(())
                    continue
                best = nc.nearest(src, cand)
                if best is None:
                    break
                if (check := _cross_check(nc, src, best, cand)) and check not in skipped:
                    skipped.append(check)
                dests.append((best,))
            else:
                groups.setdefault(tuple(dests) if pairing == "gather" else ((src,),), (dests, []))[1].append(src)
                continue
            skipped.append(f"{name}: no destination node for source node{src}: kdamond not created")
        for dests, srcs in groups.values():
            if pairing == "nearest":
                kd = name if len(sources) == 1 else f"{name}-node{srcs[0]}"
            else:
                to = "-".join(f"node{d}" for d in dict.fromkeys(d[0] for d in dests if d))
                kd = name if len(groups) == 1 else f"{name}-to-{to}"
            moves = [f"node{s} → {nc.label(d[0])} ({_dist(nc, s, d[0])})" for s in srcs for d in dests if d]
            how = f"{pairing}: " + ("; ".join(dict.fromkeys(moves)) if moves else
                                    f"monitors {', '.join(f'node{s}' for s in srcs)}")
            out.append(Pairing(kd, tuple(srcs), tuple(dests), how))
        return out, skipped
    dests = []
    for cand in scheme_dests:
        if cand is None:
            dests.append(())
            continue
        pool = tuple(d for d in cand if d not in sources)
        if not pool:
            return [], [f"{name}: no destination node outside its sources: kdamond not created"]
        dests.append(pool)
    srcs = ",".join(f"node{s}" for s in sources)
    moves = sorted({nc.label(d) for ds in dests for d in ds})
    how = f"split: one kdamond over {srcs}" + (f"; one scheme per destination: {', '.join(moves)}" if moves else "")
    return [Pairing(name, sources, tuple(dests), how)], skipped


def _dist(nc: NodeClasses, a: int, b: int) -> str:
    via = [f"node{n} hangs off node{nc.near[n]}" for n in (a, b) if n in nc.near]
    if via:
        return "firmware proximity: " + ", ".join(via)
    if (a, b) in nc.distances:
        return f"distance {nc.distances[(a, b)]}"
    return "distance unknown"


def _cross_check(nc: NodeClasses, source: int, chosen: int, candidates: tuple[int, ...]) -> str | None:
    """A note when the NUMA distances of nodes online now disagree with the firmware-proximity choice."""
    known = [c for c in candidates if c != source and (source, c) in nc.distances]
    if chosen not in known or len(known) < 2:
        return None
    best = min(nc.distances[(source, c)] for c in known)
    if nc.distances[(source, chosen)] <= best:
        return None
    other = min(c for c in known if nc.distances[(source, c)] == best)
    return (f"node{source} pairs with node{chosen} by firmware proximity (the node a DAX device hangs off), although "
            f"its NUMA distance to node{other} is shorter ({best} < {nc.distances[(source, chosen)]}): check the "
            "firmware's numa_node and SLIT tables")
