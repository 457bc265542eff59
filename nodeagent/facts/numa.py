"""NUMA nodes and memory tiers, from per-node summaries (never block by block on the common path)."""

from __future__ import annotations

import re
from contextvars import ContextVar
from dataclasses import dataclass, field

from ..host import Host
from ..kfmt import parse_list, parse_meminfo

NODE = "/sys/devices/system/node"
TIERS = "/sys/devices/virtual/memory_tiering"


@dataclass(frozen=True)
class NumaNode:
    id: int
    cpulist: str  # as the kernel prints it: "0-47,96-143"; empty for a CPU-less node
    has_memory: bool
    has_normal_memory: bool
    mem_total: int  # bytes
    mem_free: int  # bytes
    tier: int | None  # memory_tier<N> the node is in; lower N = faster
    distances: list[int] = field(default_factory=list)

    @property
    def cpus(self) -> list[int]:
        return parse_list(self.cpulist)

    @property
    def has_cpu(self) -> bool:
        return bool(self.cpulist)


#: Within one facts gather (:func:`nodeagent.facts.gather`), each node directory is listed once; outside it
#: every call lists afresh (an apply must see blocks that came and went).
_BLOCKS: ContextVar[dict[int, list[int]] | None] = ContextVar("node_blocks", default=None)


def node_blocks(host: Host, nid: int) -> list[int]:
    """The ids of the memory blocks under ``nodeN``, sorted (a node of 2 TiB in 128 MiB blocks has 16,384)."""
    cache = _BLOCKS.get()
    if cache is not None and nid in cache:
        return cache[nid]
    blocks = sorted(int(e[6:]) for e in host.fs.listdir(f"{NODE}/node{nid}")
                    if e.startswith("memory") and e[6:].isdigit())
    if cache is not None:
        cache[nid] = blocks
    return blocks


def read_tiers(host: Host) -> dict[int, list[int]]:
    """``{tier number: [nodes]}`` ordered by tier number; numbers are whatever the kernel chose."""
    tiers: dict[int, list[int]] = {}
    for name in host.fs.listdir(TIERS):
        m = re.fullmatch(r"memory_tier(\d+)", name)
        if m:
            tiers[int(m.group(1))] = parse_list(host.read_opt(f"{TIERS}/{name}/nodelist") or "")
    return dict(sorted(tiers.items()))


def read_nodes(host: Host, tiers: dict[int, list[int]]) -> list[NumaNode]:
    tier_of = {n: t for t, nodes in tiers.items() for n in nodes}
    has_memory = set(parse_list(host.read_opt(f"{NODE}/has_memory") or ""))
    has_normal = set(parse_list(host.read_opt(f"{NODE}/has_normal_memory") or ""))
    nodes = []
    for nid in parse_list(host.read_opt(f"{NODE}/online") or ""):
        base = f"{NODE}/node{nid}"
        info = parse_meminfo(host.read_opt(f"{base}/meminfo") or "")
        distances = [int(x) for x in (host.read_opt(f"{base}/distance") or "").split()]
        nodes.append(NumaNode(nid, host.read_opt(f"{base}/cpulist") or "", nid in has_memory,
                              nid in has_normal, info.get("MemTotal", 0) * 1024, info.get("MemFree", 0) * 1024,
                              tier_of.get(nid), distances))
    return nodes
