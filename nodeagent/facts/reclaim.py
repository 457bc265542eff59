"""Reclaim state per NUMA node, and the interfaces that trigger a reclaim (fact section ``reclaim``).

Why it matters: a fast node that filled up while demotion was off is given up by kswapd after 16 runs that
reclaimed nothing — ``/proc/zoneinfo`` then shows ``node_unreclaimable: 1`` for it, and the kernel no longer wakes
kswapd for that node. Switching demotion and NUMA balancing's memory-tiering mode on at that point does nothing
(no demotion, no promotion) until some reclaim on the node succeeds. nodeagent's demotion pass
(:mod:`nodeagent.kinds.placement`) uses what is gathered here:

- per node: ``unreclaimable`` and the zone watermarks (``min``/``low``/``high``/``promo``, pages summed over the
  node's zones) from ``/proc/zoneinfo``;
- ``memcg_reclaim``: the root cgroup's ``memory.reclaim`` exists (cgroup v2 with the memory controller, 5.19),
  and ``memcg_reclaim_path``: where — at the top of the cgroup v2 mount that ``/proc/self/mountinfo`` shows
  (``/sys/fs/cgroup`` on a unified systemd host, anywhere else an administrator mounted it; ``cgroup2_mount``
  names it even when it has no memory controller, as in a hybrid hierarchy);
- ``node_reclaim``: nodes with ``/sys/devices/system/node/nodeN/reclaim`` (per-node proactive reclaim, 6.17);
- ``swap_total_kb`` from ``/proc/meminfo``;
- ``lru_gen``: the multi-gen LRU's feature bits from ``/sys/kernel/mm/lru_gen/enabled`` (6.1; ``None`` where the
  kernel was built without it). Bit 0 on means reclaim — node reclaim included — runs through the multi-gen LRU,
  which scans nothing for a reclaim that may not both write dirty pages and unmap mapped ones
  (``lru_gen_shrink_node``): ``zone_reclaim_mode`` then needs its bits 2 and 4 to do anything.
"""

from __future__ import annotations

import re
from dataclasses import field
from typing import Any

from ..host import Host
from ..host.mountinfo import memcg_reclaim
from ..util.dataclass import dataclass
from ..util.kfmt import parse_list, parse_meminfo
from . import SECTIONS, Facts

NODE = "/sys/devices/system/node"
LRU_GEN = "/sys/kernel/mm/lru_gen/enabled"
MEMCG_RECLAIM = "/sys/fs/cgroup/memory.reclaim"  # where facts gathered before mountinfo was read had it
WATERMARKS = ("min", "low", "high", "promo")


@dataclass(frozen=True)
class NodeReclaim:
    unreclaimable: bool
    watermarks: dict[str, int] = field(default_factory=dict)  # pages, summed over the node's zones


@dataclass(frozen=True)
class ReclaimFacts:
    nodes: dict[int, NodeReclaim]
    memcg_reclaim: bool
    node_reclaim: tuple[int, ...]
    swap_total_kb: int
    known: bool = True  # False: facts gathered before this section existed (offline planning of old facts)
    memcg_reclaim_path: str | None = None  # the root cgroup's memory.reclaim, on the cgroup v2 mount
    cgroup2_mount: str | None = None
    lru_gen: int | None = None  # /sys/kernel/mm/lru_gen/enabled; None: no multi-gen LRU in this kernel

    @property
    def mglru(self) -> bool:
        """Reclaim runs through the multi-gen LRU (its main switch, bit 0, is on)."""
        return bool(self.lru_gen is not None and self.lru_gen & 1)

    def unreclaimable(self, node: int) -> bool:
        info = self.nodes.get(node)
        return bool(info and info.unreclaimable)


def parse_zoneinfo(text: str) -> dict[int, dict[str, Any]]:
    """``{node: {"unreclaimable": bool, "min": pages, "low": ..., "high": ..., "promo": ...}}``.

    ``node_unreclaimable`` is printed once per node, in the per-node statistics of the node's first zone; the
    watermarks once per zone (``promo`` since 6.1).
    """
    out: dict[int, dict[str, Any]] = {}
    node: int | None = None
    for line in text.splitlines():
        m = re.match(r"Node (\d+), zone\s+\S+", line)
        if m:
            node = int(m.group(1))
            out.setdefault(node, {"unreclaimable": False, **dict.fromkeys(WATERMARKS, 0)})
            continue
        if node is None:
            continue
        words = line.split()
        if len(words) == 2 and words[0] == "node_unreclaimable:":
            out[node]["unreclaimable"] = words[1] == "1"
        elif len(words) == 2 and words[0] in WATERMARKS and words[1].isdigit():
            out[node][words[0]] += int(words[1])
    return out


def parse_lru_gen(text: str | None) -> int | None:
    """``/sys/kernel/mm/lru_gen/enabled`` as the kernel prints it (``0x0007``: ``%#06x`` of the feature bits)."""
    if text is None:
        return None
    try:
        return int(text.strip(), 16)
    except ValueError:
        return None


def gather(host: Host) -> dict[str, Any]:
    zones = parse_zoneinfo(host.read_opt("/proc/zoneinfo") or "")
    online = parse_list(host.read_opt(f"{NODE}/online") or "", f"{NODE}/online")
    swap = parse_meminfo(host.read_opt("/proc/meminfo") or "").get("SwapTotal", 0)
    path, mount = memcg_reclaim(host.fs)
    return {
        "nodes": {str(n): z for n, z in sorted(zones.items())},
        "memcg_reclaim": path is not None,
        "memcg_reclaim_path": path,
        "cgroup2_mount": mount,
        "node_reclaim": [n for n in online if host.fs.exists(f"{NODE}/node{n}/reclaim")],
        "swap_total_kb": swap,
        "lru_gen": parse_lru_gen(host.read_opt(LRU_GEN)),
    }


def from_facts(facts: Facts) -> ReclaimFacts:
    data = facts.sections.get("reclaim")
    if not data:
        return ReclaimFacts({}, False, (), 0, known=False)
    nodes = {int(n): NodeReclaim(bool(z.get("unreclaimable")), {k: int(z.get(k, 0)) for k in WATERMARKS})
             for n, z in data.get("nodes", {}).items()}
    has = bool(data.get("memcg_reclaim"))
    return ReclaimFacts(nodes, has, tuple(data.get("node_reclaim", ())), int(data.get("swap_total_kb", 0)),
                        memcg_reclaim_path=(data.get("memcg_reclaim_path") or MEMCG_RECLAIM) if has else None,
                        cgroup2_mount=data.get("cgroup2_mount"),
                        lru_gen=int(lru) if (lru := data.get("lru_gen")) is not None else None)


SECTIONS["reclaim"] = gather
