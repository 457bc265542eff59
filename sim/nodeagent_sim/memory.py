"""Emulated memory hot-plug: NUMA node directories, memory blocks, per-node meminfo and memory tiers.

Follows the layouts captured from real kernels (``shared/reference``): ``memoryN/{state,online,valid_zones,
phys_index,phys_device,removable,nodeK}``, ``nodeN/{cpulist,meminfo,distance,memoryN,...}``, node state lists,
``memory_tiering/memory_tierN/nodelist``. Onlining a block moves the node's MemTotal/MemFree, sets
``has_memory`` (and ``has_normal_memory`` unless the block went to ZONE_MOVABLE) and puts the node in its tier;
offlining the last block undoes it. A block with unmovable pages refuses to go offline with EBUSY.
"""

from __future__ import annotations

import errno
import os
import re

from nodeagent.util.kfmt import format_list, parse_list

from .kernel import SimKernel, ebusy, einval, flusher, rule
from .tree import RO, RW, WO
from .vmstat import node_vmstat

MEM = "/sys/devices/system/memory"
NODE = "/sys/devices/system/node"
TIERS = "/sys/devices/virtual/memory_tiering"
#: The tier the kernel gives DRAM (adistance 512 → tier 4) and kmem/dax memory (its default adistance → 22).
DRAM_TIER = 4
KMEM_TIER = 22

MEMINFO_KEYS = [
    "MemTotal", "MemFree", "MemUsed", "SwapCached", "Active", "Inactive", "Active(anon)", "Inactive(anon)",
    "Active(file)", "Inactive(file)", "Unevictable", "Mlocked", "Dirty", "Writeback", "FilePages", "Mapped",
    "AnonPages", "Shmem", "KernelStack", "PageTables", "SecPageTables", "NFS_Unstable", "Bounce",
    "WritebackTmp", "KReclaimable", "Slab", "SReclaimable", "SUnreclaim", "AnonHugePages", "ShmemHugePages",
    "ShmemPmdMapped", "FileHugePages", "FilePmdMapped",
]


#: A device's ``power/`` directory (drivers/base/power/sysfs.c, runtime PM never enabled for it), as the 6.18
#: captures show it under nodes, memory blocks and memory tiers (node0-tree, memory-block, memory-tiering).
#: Left out: ``autosuspend_delay_ms``, which reads EIO on such a device (a plain file cannot), and the
#: CONFIG_PM_ADVANCED_DEBUG files a Debian kernel adds (async, runtime_active_kids, runtime_enabled, runtime_usage).
POWER: dict[str, tuple[str | int, int]] = {
    "power/control": ("auto", RW), "power/runtime_active_time": (0, RO), "power/runtime_status": ("unsupported", RO),
    "power/runtime_suspended_time": (0, RO)}


def power(k: SimKernel, base: str) -> None:
    for name, (value, mode) in POWER.items():
        k.tree.file(f"{base}/{name}", value, mode)


def node_meminfo(node: int, total_kb: int, used_kb: int) -> str:
    values = dict.fromkeys(MEMINFO_KEYS, 0)
    values.update(MemTotal=total_kb, MemFree=max(total_kb - used_kb, 0), MemUsed=min(used_kb, total_kb))
    lines = [f"Node {node} {k + ':':<16}{v:>9} kB" for k, v in values.items()]
    lines += [f"Node {node} HugePages_Total:     0", f"Node {node} HugePages_Free:      0",
              f"Node {node} HugePages_Surp:      0"]
    return "\n".join(lines)


def block_size(k: SimKernel) -> int:
    return int(k.tree.read(f"{MEM}/block_size_bytes"), 16)


def _set_list(k: SimKernel, name: str, node: int, present: bool) -> None:
    path = f"{NODE}/{name}"
    ids = set(parse_list(k.tree.read(path)))
    ids.add(node) if present else ids.discard(node)
    k.tree.set(path, format_list(sorted(ids)))


def _node_state(state: dict, node: int) -> dict:
    return state.setdefault("nodes", {}).setdefault(str(node), {"used_kb": 0, "online": {}})


def add_node(k: SimKernel, node: int, cpus: list[int], distances: list[int], used_kb: int = 0) -> None:
    """Register NUMA node ``node`` (it comes online, CPU-less when ``cpus`` is empty).

    ``distances`` is the node's row of the SLIT for every possible node (kept by the simulator); its
    ``distance`` file shows the online nodes only (see :func:`refresh_distances`). ``used_kb`` is what the
    node's workload already uses once it has memory (kept by the simulator).
    """
    state = k.state()
    ns = _node_state(state, node)
    ns["used_kb"] = used_kb
    ns["distances"] = list(distances)
    k.save_state(state)
    t = k.tree
    base = f"{NODE}/node{node}"
    t.dir(base)
    t.file(f"{base}/cpulist", format_list(cpus), RO)
    mask = sum(1 << c for c in cpus)
    t.file(f"{base}/cpumap", f"{mask:08x}", RO)
    t.file(f"{base}/distance", "", RO)
    t.file(f"{base}/meminfo", node_meminfo(node, 0, 0), RO)
    t.file(f"{base}/numastat", "numa_hit 0\nnuma_miss 0\nnuma_foreign 0\ninterleave_hit 0\nlocal_node 0\n"
           "other_node 0", RO)
    t.file(f"{base}/vmstat", node_vmstat(k), RO)
    t.file(f"{base}/compact", "", WO)
    t.file(f"{base}/uevent", "", RW)
    t.link(f"{base}/subsystem", "../../../../bus/node")
    power(k, base)
    t.dir(f"{base}/hugepages")
    if k.at_least(6, 17):
        t.file(f"{base}/reclaim", "", WO)
    for c in cpus:
        t.link(f"{base}/cpu{c}", f"../../cpu/cpu{c}")
    _set_list(k, "online", node, True)
    if cpus:
        _set_list(k, "has_cpu", node, True)
    refresh_distances(k)


def refresh_distances(k: SimKernel) -> None:
    """Rewrite every online node's ``distance``: one entry per ONLINE node, in node order.

    The real kernel prints ``node_distance(nid, i)`` for_each_online_node (drivers/base/node.c). Seen in the
    6.12 guest (tests/realkernel): at boot node0/distance is ``10 20`` while node2 is only possible; once kmem
    onlines dax0.0 as node2 it is ``10 20 20`` and node2/distance appears (``20 20 10``).
    """
    state = k.state()
    online = parse_list(k.tree.read(f"{NODE}/online"))
    for node in online:
        path = f"{NODE}/node{node}/distance"
        if not k.tree.exists(path):
            continue
        row = _node_state(state, node).get("distances") or []
        k.tree.set(path, " ".join(str(row[i]) if i < len(row) else str(10 if i == node else 20) for i in online))


def add_blocks(k: SimKernel, node: int, start: int, size: int, zone: str | None) -> list[int]:
    """Hot-add ``[start, start+size)`` to ``node`` as memory blocks; online them in ``zone`` unless None."""
    bs = block_size(k)
    if start % bs or size % bs:
        raise einval("range not aligned to block_size_bytes")
    first = start // bs
    ids = list(range(first, first + size // bs))
    t = k.tree
    node_dir = t.local(f"{NODE}/node{node}")
    t.guard(node_dir / "memory")  # never link blocks into a node directory that leads out of the root
    zones = zone or offline_valid_zones(k, node)
    for n in ids:
        t.new_dir(f"{MEM}/memory{n}", {
            "state": ("online" if zone else "offline", RW), "online": (1 if zone else 0, RW),
            "phys_index": (f"{n:08x}", RO), "phys_device": (0, RO), "removable": (1, RO),
            "valid_zones": (zones, RO), "uevent": ("", RW), **POWER,
        }, {f"node{node}": f"../../node/node{node}", "subsystem": "../../../../bus/memory"},
            shared=("state", "online", "phys_device", "removable", "valid_zones", "uevent", *POWER))
        os.symlink(f"../../memory/memory{n}", node_dir / f"memory{n}")
    if zone is not None:
        _account(k, node, zone, len(ids), ids[0], ids[-1] + 1)
    return ids


def remove_blocks(k: SimKernel, ids: list[int]) -> None:
    """Hot-remove offline blocks (what kmem does when a device leaves system-ram mode)."""
    for n in ids:
        b = f"{MEM}/memory{n}"
        if k.tree.read(f"{b}/state") != "offline":
            raise ebusy(f"memory{n} is online")
        node = block_node(k, n)
        k.tree.remove_tree(b)
        link = k.tree.local(f"{NODE}/node{node}/memory{n}")
        if link.is_symlink():
            link.unlink()


def block_node(k: SimKernel, n: int) -> int:
    for name in os.listdir(k.tree.local(f"{MEM}/memory{n}")):
        if re.fullmatch(r"node\d+", name):
            return int(name[4:])
    raise OSError(errno.ENOENT, "block has no node link")


def _account(k: SimKernel, node: int, zone: str, nblocks: int, lo: int | None = None, hi: int | None = None) -> None:
    """``nblocks`` blocks of ``node`` came online in ``zone`` (negative: went offline): derived files follow.

    ``[lo, hi)``: the block ids concerned; they keep the zone's span (``/proc/zoneinfo``'s ``start_pfn`` and
    ``spanned``) as the kernel does: onlining grows it, offlining shrinks it only from its ends."""
    state = k.state()
    ns = _node_state(state, node)
    ns["online"][zone] = ns["online"].get(zone, 0) + nblocks
    spans = ns.setdefault("spans", {})
    if lo is not None and hi is not None:
        if ns["online"][zone] <= 0:
            spans.pop(zone, None)
        elif nblocks > 0:
            old = spans.get(zone)
            spans[zone] = [min(lo, old[0]), max(hi, old[1])] if old else [lo, hi]
        elif zone in spans:
            spans[zone] = _shrunk(k, node, zone, *spans[zone])
    k.save_state(state)
    if not k.defer("memory", node):
        derive(k, {node})


def _shrunk(k: SimKernel, node: int, zone: str, lo: int, hi: int) -> list[int]:
    """The span ``[lo, hi)`` without the offline blocks at its ends (shrink_zone_span)."""
    def kept(b: int) -> bool:
        base = f"{MEM}/memory{b}"
        return (k.tree.exists(f"{NODE}/node{node}/memory{b}") and k.tree.read(f"{base}/state") == "online"
                and k.tree.read(f"{base}/valid_zones") == zone)

    while lo < hi and not kept(lo):
        lo += 1
    while hi > lo and not kept(hi - 1):
        hi -= 1
    return [lo, hi]


@flusher("memory")
def derive(k: SimKernel, nodes: set) -> None:
    """Recompute what the kernel derives from the online blocks of ``nodes``: each node's meminfo, the
    system's ``/proc/meminfo``, ``has_memory``/``has_normal_memory`` and the node's memory tier."""
    state = k.state()
    bs_kb = block_size(k) // 1024
    for node in sorted(nodes):
        ns = _node_state(state, node)
        online = {z: c for z, c in ns["online"].items() if c > 0}
        if k.tree.exists(f"{NODE}/node{node}/meminfo"):
            k.tree.set(f"{NODE}/node{node}/meminfo", node_meminfo(node, sum(online.values()) * bs_kb, ns["used_kb"]))
        _set_list(k, "has_memory", node, bool(online))
        _set_list(k, "has_normal_memory", node, any(z != "Movable" for z in online))
        tier = int(k.meta.get("node_tier", {}).get(str(node), state.get("node_tier", {}).get(str(node), DRAM_TIER)))
        set_tier(k, node, tier if online else None)
    total = free = 0
    for ns in state.get("nodes", {}).values():
        node_kb = sum(c for c in ns["online"].values() if c > 0) * bs_kb
        total += node_kb
        free += max(node_kb - ns["used_kb"], 0)
    out = []
    for line in k.tree.read("/proc/meminfo").splitlines():
        key = line.split(":", 1)[0]
        if key in ("MemTotal", "MemFree", "MemAvailable"):
            line = f"{key + ':':<16}{total if key == 'MemTotal' else free:>8} kB"
        out.append(line)
    k.tree.set("/proc/meminfo", "\n".join(out))
    from .reclaim import write_zoneinfo  # the zones follow the online blocks too (reclaim imports this module)

    if k.tree.exists("/proc/zoneinfo"):
        write_zoneinfo(k)
    from .mempolicy import follow_memory  # weighted interleave's node files follow the memory (6.16+)

    follow_memory(k, nodes)


def charge(k: SimKernel, node: int, kb: int) -> None:
    """The kernel's own use of ``kb`` more (negative: less) memory on ``node`` (e.g. struct pages)."""
    state = k.state()
    ns = _node_state(state, node)
    ns["used_kb"] = max(ns["used_kb"] + kb, 0)
    ns["hot_kb"] = min(ns.get("hot_kb", 0), ns["used_kb"])
    k.save_state(state)
    if not k.defer("memory", node):
        derive(k, {node})


PAGE_KB = 4  # the simulated machine's base page (x86-64)


def usage(state: dict, bs_kb: int, node: int) -> tuple[int, int, int]:
    """(total, used, hot) kB of ``node``: its online memory, what is allocated there, and the part of that the
    workload touches (the pages DAMON sees accessed and NUMA balancing's hinting faults promote)."""
    ns = state.get("nodes", {}).get(str(node))
    if ns is None:
        return 0, 0, 0
    total = sum(c for c in ns["online"].values() if c > 0) * bs_kb
    used = int(ns["used_kb"])
    return total, used, min(int(ns.get("hot_kb", 0)), used)


def move(k: SimKernel, src: int, dst: int, kb: int, *, take: str, land_hot: bool,
         state: dict | None = None) -> int:
    """Migrate up to ``kb`` of allocated memory from node ``src`` to node ``dst``; the kB moved (whole pages).

    What the kernel's migration does to the memory (mm/migrate.c ``migrate_pages``): each page that moves is
    freed on ``src`` and allocated on ``dst``, so the used memory of the system does not change. Only pages
    that exist move: at most what ``src`` holds of the kind ``take`` names (``hot``, ``cold``, ``cold-first`` as
    reclaim picks its victims from the inactive end of the LRU, ``hot-first``). The allocation on ``dst`` does
    not wait for memory: DAMON's ``__damon_pa_migrate_folio_list`` (mm/damon/paddr.c) allocates "from 'node',
    or fail quickly and quietly" (``GFP_NOWAIT``, no reclaim) and demotion's ``alloc_migrate_folio``
    (mm/vmscan.c) tries ``__GFP_THISNODE`` first; so at most what ``dst`` has free moves and the rest stays
    where it was (the kernel counts it in ``pgmigrate_fail``). ``land_hot``: the pages are accessed on arrival
    (a promotion follows an access) rather than cold.

    ``state`` is the caller's copy of the simulator state when it holds one (it is saved here); the derived
    files (both nodes' meminfo, ``/proc/meminfo``, zoneinfo) follow."""
    if src == dst or kb <= 0:
        return 0
    state = k.state() if state is None else state
    bs_kb = block_size(k) // 1024
    _, s_used, s_hot = usage(state, bs_kb, src)
    d_total, d_used, d_hot = usage(state, bs_kb, dst)
    avail = {"hot": s_hot, "cold": s_used - s_hot, "cold-first": s_used, "hot-first": s_used}[take]
    moved = min(kb, avail, max(d_total - d_used, 0))
    moved -= moved % PAGE_KB
    if moved <= 0:
        return 0
    hot_out = {"hot": moved, "cold": 0, "cold-first": max(moved - (s_used - s_hot), 0),
               "hot-first": min(moved, s_hot)}[take]
    ns, nd = _node_state(state, src), _node_state(state, dst)
    ns["used_kb"], ns["hot_kb"] = s_used - moved, s_hot - hot_out
    nd["used_kb"], nd["hot_kb"] = d_used + moved, d_hot + (moved if land_hot else 0)
    k.save_state(state)
    for node in (src, dst):
        if not k.defer("memory", node):
            derive(k, {node})
    return moved


def swap_out(k: SimKernel, node: int, kb: int, *, take: str, state: dict | None = None) -> int:
    """Reclaim up to ``kb`` of ``node``'s allocated memory to swap; the kB reclaimed (whole pages).

    The simulated workload's memory is anonymous (see :mod:`.reclaim`): reclaim frees a page only by writing it
    to swap (``shrink_folio_list`` in mm/vmscan.c; ``pswpout`` counts each page written), so at most what swap
    has free goes — nothing on a node without swap. ``take``: ``cold`` or ``hot`` pages, as :func:`move`. The
    node's meminfo, ``/proc/meminfo`` (MemFree, SwapFree) and zoneinfo follow."""
    state = k.state() if state is None else state
    swap_total = _meminfo_kb(k, "SwapTotal")
    swap_used = int(state.get("swap_used_kb", 0))
    _, used, hot = usage(state, block_size(k) // 1024, node)
    out = min(kb, {"hot": hot, "cold": used - hot}[take], max(swap_total - swap_used, 0))
    out -= out % PAGE_KB
    if out <= 0:
        return 0
    ns = _node_state(state, node)
    ns["used_kb"] = used - out
    ns["hot_kb"] = hot - (out if take == "hot" else 0)
    state["swap_used_kb"] = swap_used + out
    k.save_state(state)
    _set_meminfo_kb(k, "SwapFree", swap_total - state["swap_used_kb"])
    if not k.defer("memory", node):
        derive(k, {node})
    return out


def _meminfo_kb(k: SimKernel, key: str) -> int:
    for line in k.tree.read("/proc/meminfo").splitlines():
        name, _, value = line.partition(":")
        if name == key:
            return int(value.split()[0])
    return 0


def _set_meminfo_kb(k: SimKernel, key: str, kb: int) -> None:
    lines = k.tree.read("/proc/meminfo").splitlines()
    out = [f"{key + ':':<16}{kb:>8} kB" if line.partition(":")[0] == key else line for line in lines]
    if out == lines and not any(line.partition(":")[0] == key for line in lines):
        out.append(f"{key + ':':<16}{kb:>8} kB")
    k.tree.set("/proc/meminfo", "\n".join(out))


def touch(k: SimKernel, node: int, kb: int) -> int:
    """The workload starts accessing ``kb`` more of what it holds on ``node`` (negative: stops); the hot kB now."""
    state = k.state()
    _, used, hot = usage(state, block_size(k) // 1024, node)
    ns = _node_state(state, node)
    ns["hot_kb"] = min(max(hot + kb, 0), used)
    k.save_state(state)
    return int(ns["hot_kb"])


def set_free(k: SimKernel, node: int, free_kb: int) -> tuple[int, int]:
    """Leave ``free_kb`` of ``node``'s online memory free (the rest used, as a workload's pages would): its
    meminfo, ``/proc/meminfo`` and zoneinfo follow. Returns (MemTotal, MemFree) in kB."""
    state = k.state()
    ns = _node_state(state, node)
    total_kb = sum(c for c in ns["online"].values() if c > 0) * (block_size(k) // 1024)
    if not k.tree.exists(f"{NODE}/node{node}/meminfo"):
        raise OSError(errno.ENOENT, f"node{node} is not online")
    free_kb = min(max(free_kb, 0), total_kb)
    charge(k, node, total_kb - free_kb - ns["used_kb"])
    return total_kb, free_kb


def remove_node(k: SimKernel, node: int) -> None:
    """A CPU-less node whose last memory was hot-removed goes offline and its directory disappears."""
    base = f"{NODE}/node{node}"
    if not k.tree.exists(base) or parse_list(k.tree.read(f"{base}/cpulist")):
        return
    if any(name.startswith("memory") and name[6:].isdigit() for name in os.listdir(k.tree.local(base))):
        return
    set_tier(k, node, None)
    for name in ("online", "has_memory", "has_normal_memory"):
        _set_list(k, name, node, False)
    k.tree.remove_tree(base)
    state = k.state()
    state.get("nodes", {}).pop(str(node), None)
    k.save_state(state)
    refresh_distances(k)


def online_zones(k: SimKernel, node: int) -> dict[str, int]:
    """Blocks of ``node`` online per zone."""
    return {z: c for z, c in _node_state(k.state(), node)["online"].items() if c > 0}


def set_tier(k: SimKernel, node: int, tier: int | None) -> None:
    """Put ``node`` in ``memory_tier<tier>`` (None: in no tier); empty tiers disappear as in the kernel."""
    base = k.tree.local(TIERS)
    for name in os.listdir(base):
        if not name.startswith("memory_tier"):
            continue
        path = f"{TIERS}/{name}/nodelist"
        ids = set(parse_list(k.tree.read(path)))
        if node in ids and name != f"memory_tier{tier}":
            ids.discard(node)
            if ids:
                k.tree.set(path, format_list(sorted(ids)))
            else:
                k.tree.remove_tree(f"{TIERS}/{name}")
                k.tree.local(f"/sys/bus/memory_tiering/devices/{name}").unlink(missing_ok=True)
    if tier is None:
        return
    path = f"{TIERS}/memory_tier{tier}/nodelist"
    if not k.tree.exists(path):
        make_tier(k, tier, [node])
    else:
        ids = set(parse_list(k.tree.read(path))) | {node}
        k.tree.set(path, format_list(sorted(ids)))


def make_tier(k: SimKernel, tier: int, nodes: list[int]) -> None:
    base = f"{TIERS}/memory_tier{tier}"
    k.tree.file(f"{base}/nodelist", format_list(nodes), RO)
    k.tree.file(f"{base}/uevent", "", RW)
    power(k, base)
    k.tree.link(f"{base}/subsystem", "../../../../bus/memory_tiering")
    # memory_tiering is a bus (subsys_virtual_register): its devices list the tiers
    k.tree.link(f"/sys/bus/memory_tiering/devices/memory_tier{tier}", f"../../../devices/virtual/memory_tiering/"
                f"memory_tier{tier}")


ZONE_OF = {"online_movable": "Movable", "online_kernel": "Normal"}


def _online(k: SimKernel, n: int, zone: str) -> None:
    b = f"{MEM}/memory{n}"
    if k.tree.read(f"{b}/state") == "online":
        raise einval(f"memory{n} already online")
    if n in k.state().get("online_fail_blocks", []):
        # A test's knob: onlining this block fails as when the kernel cannot allocate what it needs.
        raise OSError(errno.ENOMEM, os.strerror(errno.ENOMEM) + f" (memory{n})")
    # The block's files first, its state last: ``state`` is the commit point a writer killed half-way is
    # recovered from (nodeagent_sim.recovery); offlining changes it first for the same reason.
    k.tree.set(f"{b}/valid_zones", zone)
    k.tree.set(f"{b}/online", 1)
    k.tree.set(f"{b}/state", "online")
    _account(k, block_node(k, n), zone, 1, n, n + 1)


def set_block(k: SimKernel, n: int, zone: str | None) -> None:
    """Online block ``n`` in ``zone``, or offline it (None), as a write to its ``state`` would (kernel errors)."""
    if zone is None:
        _offline(k, n)
    else:
        _online(k, n, zone)


def _offline(k: SimKernel, n: int) -> None:
    b = f"{MEM}/memory{n}"
    if k.tree.read(f"{b}/state") == "offline":
        raise einval(f"memory{n} already offline")
    if n in k.state().get("unmovable_blocks", []):
        raise ebusy(f"memory{n} holds unmovable pages")
    k.tree.set(f"{b}/state", "offline")
    k.tree.set(f"{b}/online", 0)
    zone = k.tree.read(f"{b}/valid_zones")
    node = block_node(k, n)
    k.tree.set(f"{b}/valid_zones", "")  # while the span shrinks: this block is in no zone
    _account(k, node, zone, -1, n, n + 1)
    k.tree.set(f"{b}/valid_zones", offline_valid_zones(k, node))


def _node_default_zone(k: SimKernel, node: int) -> str:
    # The kernel's default for plain "online": ZONE_NORMAL unless the node already has only movable memory.
    zones = online_zones(k, node)
    return "Movable" if zones and all(z == "Movable" for z in zones) else "Normal"


def _default_zone(k: SimKernel, n: int) -> str:
    return _node_default_zone(k, block_node(k, n))


def offline_valid_zones(k: SimKernel, node: int) -> str:
    """``valid_zones`` of an offline block: the zone a plain ``online`` would choose first, then the other.

    The kernel prints the default zone and then each other zone the block may go to (valid_zones_show). Seen
    in the 6.12 guest: a block offlined out of node2's all-Movable memory reads ``Movable Normal``.
    """
    first = _node_default_zone(k, node)
    return f"{first} {'Normal' if first == 'Movable' else 'Movable'}"


@rule(r"/sys/devices/system/memory/memory\d+/state")
def _block_state(k: SimKernel, path: str, value: str) -> None:
    n = int(path.split("/")[-2][6:])
    word = value.strip()
    if word == "offline":
        _offline(k, n)
    elif word in ("online", "online_movable", "online_kernel"):
        _online(k, n, ZONE_OF.get(word) or _default_zone(k, n))
    else:
        raise einval()


@rule(r"/sys/devices/system/memory/memory\d+/online")
def _block_online(k: SimKernel, path: str, value: str) -> None:
    n = int(path.split("/")[-2][6:])
    word = value.strip()
    if word not in ("0", "1"):
        raise einval()
    online = k.tree.read(path.rsplit("/", 1)[0] + "/state") == "online"
    if word == "1" and not online:
        _online(k, n, _default_zone(k, n))
    elif word == "0" and online:
        _offline(k, n)


def hotplug_policy_zone(k: SimKernel) -> str | None:
    """The zone the kernel's auto-online policy puts new blocks in (None: they stay offline)."""
    policy = k.tree.read(f"{MEM}/auto_online_blocks")
    return {"offline": None, "online": "Normal", "online_kernel": "Normal", "online_movable": "Movable"}[policy]


@rule(r"/sys/devices/(system/(node/node|memory/memory)\d+|virtual/memory_tiering(/memory_tier\d+)?)/power/control")
def _power_control(k: SimKernel, path: str, value: str) -> None:
    """``control_store`` (drivers/base/power/sysfs.c): ``on`` forbids runtime PM, ``auto`` allows it; else EINVAL."""
    word = value.strip()
    if word not in ("on", "auto"):
        raise einval(f"{word!r}: power/control takes on or auto")
    k.tree.set(path, word)
