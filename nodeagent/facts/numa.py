"""NUMA nodes, their zones and memory tiers, from per-node summaries (never block by block on the common path).

A node's physical ranges come from ``/proc/zoneinfo`` (one read for every node): each populated zone prints
``spanned``, ``present`` and ``managed`` pages and its ``start_pfn``. A zone whose span has no hole
(``spanned == present``) is one range; only a zone with holes (x86's DMA32 below 4 GiB, a block offlined in the
middle) is walked block by block, and only over its own span. So facts cost the same for 1,000 blocks or
1,000,000."""

from __future__ import annotations

import re
from contextvars import ContextVar
from dataclasses import field
from typing import Any

from ..host import Host
from ..util.dataclass import dataclass
from ..util.kfmt import MAX_CPUS, parse_distances, parse_hex, parse_list, parse_meminfo

NODE = "/sys/devices/system/node"
BLOCK_SIZE = "/sys/devices/system/memory/block_size_bytes"
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
        return parse_list(self.cpulist, f"{NODE}/node{self.id}/cpulist", limit=MAX_CPUS)

    @property
    def has_cpu(self) -> bool:
        return bool(self.cpulist)


#: Within one facts gather (:func:`nodeagent.facts.gather`), each node directory is listed once; outside it
#: every call lists afresh (an apply must see blocks that came and went).
_BLOCKS: ContextVar[dict[Any, Any] | None] = ContextVar("node_blocks", default=None)
PAGE = 4096  # zoneinfo counts pages of PAGE_SIZE; 4 KiB on every architecture nodeagent supports (x86-64, arm64 4K)


@dataclass(frozen=True)
class Zone:
    """One populated zone of a node, as ``/proc/zoneinfo`` prints it (page counts)."""

    node: int
    name: str
    start_pfn: int
    spanned: int
    present: int
    managed: int

    @property
    def holes(self) -> bool:
        return self.spanned != self.present



def read_block_size(host: Host) -> int | None:
    """The memory block size in bytes (``block_size_bytes``, hex without 0x); None where the kernel has no memory
    hotplug. A value that is not hex ends in the kernel-format error naming the file, wherever it is read."""
    text = host.read_opt(BLOCK_SIZE)
    return parse_hex(text, BLOCK_SIZE) if text else None

def parse_zones(text: str) -> dict[int, list[Zone]]:
    """``{node: [populated zones by start_pfn]}``. An unpopulated zone prints no ``start_pfn`` and is left out."""
    out: dict[int, list[Zone]] = {}
    cur: dict[str, Any] | None = None

    def close() -> None:
        if cur and cur.get("present") and "start_pfn" in cur:
            out.setdefault(cur["node"], []).append(Zone(cur["node"], cur["name"], cur["start_pfn"],
                                                        cur.get("spanned", 0), cur["present"], cur.get("managed", 0)))

    for line in text.splitlines():
        if line.startswith("Node "):
            close()
            head, _, name = line.partition(", zone")
            cur = {"node": int(head[5:]), "name": name.strip()} if head[5:].isdigit() else None
            continue
        if cur is None:
            continue
        words = line.split()
        if len(words) == 2 and words[0] in ("spanned", "present", "managed", "start_pfn:") and words[1].isdigit():
            cur[words[0].rstrip(":")] = int(words[1])
    close()
    return {n: sorted(z, key=lambda z: z.start_pfn) for n, z in out.items()}


def read_zones(host: Host) -> dict[int, list[Zone]]:
    """The populated zones of every node (read once per facts gather)."""
    cache = _BLOCKS.get()
    if cache is not None and "zones" in cache:
        return cache["zones"]
    zones = parse_zones(host.read_opt("/proc/zoneinfo") or "")
    if cache is not None:
        cache["zones"] = zones
    return zones


def node_ranges(host: Host, nid: int, block_size: int) -> list[list[int]]:
    """``[start, end)`` byte ranges of node ``nid``'s online memory blocks, merged, block aligned.

    From the zones where they say it all; block by block only inside a zone with holes, and for the whole node
    only when zoneinfo does not describe it (no zoneinfo, or less present memory than the node's meminfo
    counts)."""
    zones = read_zones(host).get(nid)
    total_kb = parse_meminfo(host.read_opt(f"{NODE}/node{nid}/meminfo") or "").get("MemTotal", 0)
    if not zones or sum(z.present for z in zones) * PAGE < total_kb * 1024:
        return _merge([[b * block_size, (b + 1) * block_size] for b in node_blocks(host, nid) if _online(host, b)])
    pieces: list[list[int]] = []
    for z in zones:
        first, end = z.start_pfn * PAGE // block_size, -(-(z.start_pfn + z.spanned) * PAGE // block_size)
        if not z.holes:
            pieces.append([first * block_size, end * block_size])
            continue
        pieces += [[b * block_size, (b + 1) * block_size] for b in range(first, end)
                   if host.fs.exists(f"{NODE}/node{nid}/memory{b}") and _online(host, b)]
    return _merge(pieces)


def _online(host: Host, block: int) -> bool:
    return (host.read_opt(f"/sys/devices/system/memory/memory{block}/state") or "").strip() == "online"


def _merge(pieces: list[list[int]]) -> list[list[int]]:
    out: list[list[int]] = []
    for a, b in sorted(pieces):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


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
            path = f"{TIERS}/{name}/nodelist"
            tiers[int(m.group(1))] = parse_list(host.read_opt(path) or "", path)
    return dict(sorted(tiers.items()))


def read_nodes(host: Host, tiers: dict[int, list[int]]) -> list[NumaNode]:
    tier_of = {n: t for t, nodes in tiers.items() for n in nodes}
    has_memory = set(parse_list(host.read_opt(f"{NODE}/has_memory") or "", f"{NODE}/has_memory"))
    has_normal = set(parse_list(host.read_opt(f"{NODE}/has_normal_memory") or "", f"{NODE}/has_normal_memory"))
    nodes = []
    for nid in parse_list(host.read_opt(f"{NODE}/online") or "", f"{NODE}/online"):
        base = f"{NODE}/node{nid}"
        info = parse_meminfo(host.read_opt(f"{base}/meminfo") or "")
        distances = parse_distances(host.read_opt(f"{base}/distance") or "", f"{base}/distance")
        cpulist = host.read_opt(f"{base}/cpulist") or ""
        parse_list(cpulist, f"{base}/cpulist", limit=MAX_CPUS)  # refused here, with its file, not when used
        nodes.append(NumaNode(nid, cpulist, nid in has_memory,
                              nid in has_normal, info.get("MemTotal", 0) * 1024, info.get("MemFree", 0) * 1024,
                              tier_of.get(nid), distances))
    return nodes
