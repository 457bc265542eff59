"""The node as it will be once a plan's earlier kinds are done: one projection every later decision reads.

Changes are applied in kind order (knobs, DAX, placement, DAMON, the late knobs): DAMON's node classes and
ranges, the placement pass, the DAX preconditions and the preflight checks all need to know what the node will
look like *after* the changes before them — not what it looks like now. :func:`project` works that out once,
purely from the profile and the facts:

- **knobs**: each knob the profile sets at the value it sets, the others as the node has them;
- **DAX devices**: the mode, zone and online state each will have once the ``memory.dax`` rules are applied
  (the same matching and diff the DAX resource plans with), including devices bound to kmem with their blocks
  offline (``memhp_default_state=offline``, a hot-add with ``auto_online_blocks: offline``): a rule that
  onlines them makes their node a future slow node;
- **node classes**: ``fast`` (the top memory tier), ``slow`` (lower tiers, plus the nodes the DAX rules bring
  online), ``pinned`` (the nodes of devices a rule declares ``use: pinned-pool``: not a tier for pageable memory,
  so not ``slow``), each node's physical ranges (rounded inwards to whole blocks, as kmem adds them);
- **proximity**: for each DAX-backed node the node its device hangs off (``numa_node``: the host bridge's node,
  from firmware), which is the same before and after onlining, unlike NUMA distances (a node that is not online
  has none yet).

Pairing rule (:meth:`nodeagent.kinds.damon.nodes.NodeClasses.distance`): a node reached through a DAX device is
as far from a node as its host node is — ``distance(a, host(b))`` between two online nodes, which onlining does
not change; between two nodes neither reached through a DAX device, their NUMA distance. The lowest node id
breaks remaining ties. Where both nodes are online, their own NUMA distance is the cross-check: a disagreement
is noted in the plan, not followed.
"""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING, Any

from ..facts import Facts
from ..facts.dax import DaxDevice
from ..facts.dax import from_facts as dax_facts
from ..facts.knobs import BY_KEY
from ..plan import Change
from ..util.dataclass import dataclass
from ..util.vocab import ZONE_KERNEL_NAME
from .dax import assign, diff_device
from .knob import desired as desired_knobs

if TYPE_CHECKING:
    from ..profile import LoadedProfile


@dataclass(frozen=True)
class DaxAfter:
    """One DAX device once the plan's DAX changes are made."""

    name: str
    node: int | None  # target_node: the node its memory is (or will be) online in
    host_node: int | None  # numa_node: the node the device itself hangs off (firmware), None when unknown
    mode: str  # after the plan: system-ram | devdax | disabled | another driver
    online: bool  # all of its memory online after the plan
    zone: str | None  # kernel zone name after the plan ("Movable", "Normal"); None when not online
    rule: str | None  # the memory.dax rule that decides it (None: no rule, left as it is)
    use: str | None  # that rule's use (tiered | pinned-pool)
    online_now: bool  # any of its blocks online now
    mode_now: str
    range: tuple[int, int] | None  # the physical range kmem adds (whole blocks), None when it spans none
    size: int = 0  # bytes, after the plan (a size rule's split changes it)

    @property
    def comes_online(self) -> bool:
        return self.online and not self.online_now

    @property
    def kmem_offline(self) -> bool:
        """Bound to kmem now with none of its blocks online (a future node, not a devdax device)."""
        return self.mode_now == "system-ram" and not self.online_now


@dataclass(frozen=True)
class NodeProjection:
    knobs: dict[str, str]  # raw values after the knob changes
    dax: tuple[DaxAfter, ...]
    fast: tuple[int, ...]
    slow: tuple[int, ...]
    pinned: tuple[int, ...]
    tier: dict[int, int]  # node → tier (nodes that come online: a number below every tier there is)
    ranges: dict[int, tuple[tuple[int, int], ...]]
    pending: dict[int, str] = field(default_factory=dict)  # node → a DAX device that brings it online
    host: dict[int, int] = field(default_factory=dict)  # DAX-backed node → the node its device hangs off
    distances: dict[tuple[int, int], int] = field(default_factory=dict)  # between nodes online now
    notes: tuple[str, ...] = ()

    # -- knobs ---------------------------------------------------------------------------------------------
    def knob(self, key: str) -> str | None:
        """A knob's raw value once the knob changes are made (the profile's, else the node's)."""
        return self.knobs.get(key)

    def setting(self, key: str) -> Any:
        """The same, parsed by the knob's codec."""
        raw = self.knobs.get(key)
        return BY_KEY[key].parse(raw) if raw is not None else None

    # -- devices and nodes ---------------------------------------------------------------------------------
    def device(self, name: str) -> DaxAfter | None:
        return next((d for d in self.dax if d.name == name), None)

    def devices_on(self, node: int) -> list[str]:
        return sorted(d.name for d in self.dax if d.node == node)

    def not_online_yet(self) -> list[DaxAfter]:
        """Devices whose memory is not online now: devdax, disabled, or kmem-bound with offline blocks."""
        return [d for d in self.dax if not d.online_now]

    def resolve(self, ref: int | str) -> tuple[int, ...]:
        if isinstance(ref, int):
            return (ref,)
        return self.fast if ref == "fast" else self.slow

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


def _knobs(loaded: LoadedProfile, facts: Facts) -> dict[str, str]:
    out = {k: v.strip() for k, v in facts.knobs.items() if v is not None}
    for key, value in desired_knobs(loaded).items():
        out[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


def _whole_blocks(dev: DaxDevice, bs: int | None) -> tuple[int, int] | None:
    if not bs or dev.resource is None:
        return None
    first, last = -(-dev.resource // bs), (dev.resource + dev.size) // bs
    return (first * bs, last * bs) if last > first else None


def _after(dev: DaxDevice, rule: Any, allow_disruptive: bool, bs: int | None) -> DaxAfter:
    online_now = dev.mode == "system-ram" and dev.blocks_online > 0
    mode, online, zone = dev.mode, dev.fully_online, dev.zone if dev.fully_online else None
    if rule is not None:
        result = diff_device(rule, dev)
        if isinstance(result, Change) and (allow_disruptive or not result.disruptive):
            mode = rule.mode
            online = rule.mode == "system-ram"
            zone = ZONE_KERNEL_NAME[rule.zone] if online and rule.zone else None
        elif result is None and rule.mode == "system-ram":
            online, zone = True, ZONE_KERNEL_NAME.get(rule.zone or "", dev.zone)
    host = dev.numa_node if dev.numa_node is not None and dev.numa_node >= 0 else None
    return DaxAfter(dev.name, dev.target_node, host, mode, online, zone, rule.name if rule else None,
                    rule.use if rule else None, online_now, dev.mode, _whole_blocks(dev, bs), dev.size)


def _merged(ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """Sorted, with touching or overlapping ranges joined: how the facts show a node's memory blocks."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(end, out[-1][1]))
        else:
            out.append((start, end))
    return tuple(out)


def project(loaded: LoadedProfile, facts: Facts, allow_disruptive: bool = False) -> NodeProjection:
    """Pure: the node once the profile's knob and DAX changes are made (see the module docs)."""
    from ..facts.damon import from_facts as damon_facts

    dax = dax_facts(facts)
    rules = tuple(loaded.profile.memory.dax or ())
    from .cxl_region import planned_dax  # the DAX devices of the CXL regions the plan creates

    devices = [*dax.devices, *planned_dax(loaded, facts, allow_disruptive)]
    from .dax.split import find, view  # regions a size rule splits: the devices the split makes

    splits = [sp for sp in find(rules, dax) if sp.state == "unsplit" and sp.first is not None
              and (allow_disruptive or not sp.first.blocks_online)]
    devices = view(splits, devices, dax.block_size) if splits else devices
    chosen, _ = assign(rules, devices) if rules else ({}, [])
    damon = damon_facts(facts)
    bs = dax.block_size or damon.block_size
    after = tuple(_after(d, chosen.get(d.name), allow_disruptive, bs) for d in devices)

    tiers = sorted(facts.tiers.items())
    tier_of = {n: t for t, nodes in tiers for n in nodes}
    fast = tuple(sorted(tiers[0][1])) if tiers else ()
    slow = [n for _, nodes in tiers[1:] for n in sorted(nodes)]
    lowest = (tiers[-1][0] + 1) if tiers else 0
    ranges = {n: _merged(tuple(r)) for n, r in damon.node_ranges.items() if r}
    pending: dict[int, str] = {}
    host: dict[int, int] = {}
    notes: list[str] = []
    for d in after:
        if d.node is None:
            continue
        if d.host_node is not None and d.node != d.host_node:
            host.setdefault(d.node, d.host_node)
        if not d.online:
            if d.node not in tier_of and not d.online_now:
                what = "kmem-bound, its blocks offline" if d.kmem_offline else d.mode
                notes.append(f"node{d.node} ({d.name}, {what}) is not online and no memory.dax rule of this profile "
                             "brings it online: it is not used as a slow node")
            continue
        if d.range is None:
            continue
        if d.node not in tier_of:
            pending.setdefault(d.node, d.name)
            tier_of[d.node] = lowest
            slow.append(d.node)
        ranges[d.node] = _merged((*ranges.get(d.node, ()), d.range))
    # A node whose every device goes back to devdax (and that has nothing else) leaves the lower tiers.
    for node in list(slow):
        devs = [d for d in after if d.node == node]
        if devs and all(not d.online for d in devs) and facts.node(node) is not None \
                and not facts.node(node).has_cpu:  # type: ignore[union-attr]
            slow.remove(node)
    pinned = tuple(sorted({d.node for d in after if d.node is not None and d.online and d.use == "pinned-pool"}))
    if pinned:
        notes.append(f"node{', node'.join(map(str, pinned))}: a pinned pool (memory.dax use: pinned-pool), not a "
                     "lower tier for pageable memory: not used as a slow node")
    slow_t = tuple(n for n in dict.fromkeys(slow) if n not in pinned)
    return NodeProjection(_knobs(loaded, facts), after, fast, slow_t, pinned, tier_of, ranges, pending, host,
                          _distances(facts), tuple(notes))
