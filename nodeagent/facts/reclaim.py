"""Reclaim state per NUMA node, and the interfaces that trigger a reclaim (fact section ``reclaim``).

Why it matters: a fast node that filled up while demotion was off is given up by kswapd after 16 runs that
reclaimed nothing — ``/proc/zoneinfo`` then shows ``node_unreclaimable: 1`` for it, and the kernel no longer wakes
kswapd for that node. Switching demotion and NUMA balancing's memory-tiering mode on at that point does nothing
(no demotion, no promotion) until some reclaim on the node succeeds. nodeagent's demotion pass
(:mod:`nodeagent.resources.placement`) uses what is gathered here:

- per node: ``unreclaimable`` and the zone watermarks (``min``/``low``/``high``/``promo``, pages summed over the
  node's zones) from ``/proc/zoneinfo``;
- ``memcg_reclaim``: the root cgroup's ``memory.reclaim`` exists (cgroup v2 with the memory controller, 5.19);
- ``node_reclaim``: nodes with ``/sys/devices/system/node/nodeN/reclaim`` (per-node proactive reclaim, 6.17);
- ``swap_total_kb`` from ``/proc/meminfo``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..host import Host
from ..kfmt import parse_list, parse_meminfo
from . import SECTIONS, Facts

NODE = "/sys/devices/system/node"
MEMCG_RECLAIM = "/sys/fs/cgroup/memory.reclaim"
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


def gather(host: Host) -> dict[str, Any]:
    zones = parse_zoneinfo(host.read_opt("/proc/zoneinfo") or "")
    online = parse_list(host.read_opt(f"{NODE}/online") or "")
    swap = parse_meminfo(host.read_opt("/proc/meminfo") or "").get("SwapTotal", 0)
    return {
        "nodes": {str(n): z for n, z in sorted(zones.items())},
        "memcg_reclaim": host.fs.exists(MEMCG_RECLAIM),
        "node_reclaim": [n for n in online if host.fs.exists(f"{NODE}/node{n}/reclaim")],
        "swap_total_kb": swap,
    }


def from_facts(facts: Facts) -> ReclaimFacts:
    data = facts.sections.get("reclaim")
    if not data:
        return ReclaimFacts({}, False, (), 0, known=False)
    nodes = {int(n): NodeReclaim(bool(z.get("unreclaimable")), {k: int(z.get(k, 0)) for k in WATERMARKS})
             for n, z in data.get("nodes", {}).items()}
    return ReclaimFacts(nodes, bool(data.get("memcg_reclaim")), tuple(data.get("node_reclaim", ())),
                        int(data.get("swap_total_kb", 0)))


SECTIONS["reclaim"] = gather
