"""Which nodes ``fast`` and ``slow`` mean on this node, how sources pair with destinations, and the physical
ranges a paddr target monitors. Pure functions of the facts.

- ``fast``: the nodes of the top memory tier (lowest ``memory_tier<N>``); ``slow``: the nodes of every lower
  tier, ordered by tier then id. CPU presence plays no part (a CPU-less node can be DRAM).
- A DAX device still in devdax mode becomes a ``slow`` node *only* when the profile also manages DAX (a
  ``dax:`` section, applied before DAMON): its node is then pending, and its ranges are the device's
  ``resource``/``size`` rounded inwards to whole memory blocks — what kmem will hot-add. A device whose node
  is online already (a second expander on the same node) adds its range to that node's.
- Distances come from ``nodeN/distance`` (one entry per online node, in node order); a pending DAX node has
  none yet, so it counts as near the node its device hangs off (``numa_node``) and far from the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...facts import Facts
from ...facts.damon import DamonFacts

FAR = 255


@dataclass(frozen=True)
class NodeClasses:
    fast: tuple[int, ...]
    slow: tuple[int, ...]
    tier: dict[int, int]  # node → tier number (pending DAX nodes: a number below every real tier)
    ranges: dict[int, tuple[tuple[int, int], ...]]
    pending: dict[int, str] = field(default_factory=dict)  # node → DAX device not yet online
    near: dict[int, int] = field(default_factory=dict)  # pending node → node its device is attached to
    distances: dict[tuple[int, int], int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def resolve(self, ref: int | str) -> tuple[int, ...]:
        if isinstance(ref, int):
            return (ref,)
        return self.fast if ref == "fast" else self.slow

    def distance(self, a: int, b: int) -> int:
        if (a, b) in self.distances:
            return self.distances[(a, b)]
        if b in self.near:
            return self._pending_distance(a) if self.near[b] == a else FAR
        if a in self.near:
            return self._pending_distance(b) if self.near[a] == b else FAR
        return FAR

    def _pending_distance(self, socket: int) -> int:
        """The distance a not-yet-online node will have from the socket its device hangs off: unknown until the
        kernel registers the node, so take that of the nearest lower-tier node already online there (an expander
        beside it), else 0. Guessing closer than the online ones would pair a kdamond with the new node now and
        back with the old one once real distances (often equal) are known: the next apply would flip it."""
        known = [d for (x, y), d in self.distances.items() if x == socket and y != socket and y in self.slow]
        return min(known) if known else 0

    def nearest(self, source: int, candidates: tuple[int, ...]) -> int | None:
        """The candidate closest to ``source`` (ties: faster tier, then lower id); never ``source`` itself."""
        pool = [c for c in candidates if c != source]
        if not pool:
            return None
        return min(pool, key=lambda c: (self.distance(source, c), self.tier.get(c, FAR), c))

    def label(self, node: int) -> str:
        return f"node{node}" + (f" ({self.pending[node]}, not yet online)" if node in self.pending else "")


def _distances(facts: Facts) -> dict[tuple[int, int], int]:
    online = [n.id for n in facts.nodes]
    out: dict[tuple[int, int], int] = {}
    for n in facts.nodes:
        row = n.distances
        ids = online if len(row) == len(online) else list(range(len(row)))
        for other, d in zip(ids, row, strict=False):
            out[(n.id, other)] = d
    return out


def classes(facts: Facts, damon: DamonFacts, onlined: frozenset[str] = frozenset()) -> NodeClasses:
    """Node classes from memory tiers; DAX devices in ``onlined`` (which the profile brings online as system-ram)
    count as slow nodes already, with their range rounded inwards to whole blocks."""
    tiers = sorted(facts.tiers.items())
    tier_of = {n: t for t, nodes in tiers for n in nodes}
    fast = tuple(sorted(tiers[0][1])) if tiers else ()
    slow = [n for _, nodes in tiers[1:] for n in sorted(nodes)]
    ranges = {n: tuple(r) for n, r in damon.node_ranges.items() if r}
    pending: dict[int, str] = {}
    near: dict[int, int] = {}
    notes: list[str] = []
    bs = damon.block_size or 0
    lowest = (tiers[-1][0] + 1) if tiers else 0
    for dev in damon.dax:
        node = int(dev["target_node"])
        if dev["mode"] == "system-ram" or not bs:
            continue
        first = -(-dev["start"] // bs)
        last = (dev["start"] + dev["size"]) // bs
        if node in tier_of or node in pending:
            if dev["name"] in onlined and last > first:  # more memory for a node that is there already
                ranges[node] = _merged((*ranges.get(node, ()), (first * bs, last * bs)))
            continue
        if dev["name"] not in onlined:
            notes.append(f"node{node} ({dev['name']}, {dev['mode']}) is not online and no memory.dax rule of this "
                         "profile brings it online: it is not used as a slow node")
            continue
        if last <= first:
            continue
        pending[node] = dev["name"]
        near[node] = int(dev.get("numa_node", -1))
        ranges[node] = ((first * bs, last * bs),)
        tier_of[node] = lowest
        slow.append(node)
    return NodeClasses(fast, tuple(slow), tier_of, ranges, pending, near, _distances(facts), tuple(notes))


def _merged(ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """Sorted, with touching or overlapping ranges joined: how the facts show a node's memory blocks."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(end, out[-1][1]))
        else:
            out.append((start, end))
    return tuple(out)


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
    if (a, b) in nc.distances:
        return f"distance {nc.distances[(a, b)]}"
    pend, other = (b, a) if b in nc.near else (a, b)
    if nc.near.get(pend) == other:
        return f"distance known once online; the device hangs off node{other}"
    return "distance unknown"
