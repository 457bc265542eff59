"""Emulated reclaim: ``/proc/zoneinfo``'s per-node state, proactive reclaim, and a node kswapd gave up on.

What the kernel does (6.12, measured in ``shared/reference/placement/NOTES.md``): when a node's memory is full
of anonymous pages that cannot go anywhere (no swap, demotion off), kswapd runs 16 times without reclaiming
anything and gives up (``node_unreclaimable: 1`` in ``/proc/zoneinfo``); from then on nothing wakes it for that
node. Only a reclaim on the node that succeeds brings it back. Proactive reclaim — the root cgroup's
``memory.reclaim`` (cgroup v2, 5.19) and ``/sys/devices/system/node/nodeN/reclaim`` (6.17) — reclaims a size
written as ``<size>[ swappiness=<n>]``: on a node of the top memory tier with demotion on, by *demoting* pages to
the next tier; a successful reclaim resets the node's flag; a request the kernel cannot fully satisfy fails
with EAGAIN after reclaiming what it could.

The emulation moves "used" memory (memory.py's per-node ``used_kb``, coldest first) from a fast node to its
demotion target (the node of a lower tier with the most free memory), counted in ``pgdemote_proactive`` (6.14+;
``pgdemote_direct`` before) on the node the pages left. Root ``memory.reclaim`` takes from every fast node in
proportion to what each uses above its boot-time baseline; the per-node file takes from that node only.

Presets: ``qemu-placement`` is the placement benchmark's guest (node0: 1 GiB + both CPUs, node1: 1 GiB CPU-less
DRAM, ``dax0.0``: 1.5 GiB of legacy pmem that becomes node2); ``qemu-placement-full`` is that guest as a running
node finds it after a workload filled node0 with demotion off (``dax0.0`` online in ZONE_MOVABLE, node0 at 41 MiB
free and given up by kswapd). :func:`fill` makes any node look like that.
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import replace

from nodeagent.util.kfmt import parse_list

from . import dax as simdax
from . import memory, presets, vmstat
from .kernel import SimKernel, einval, rule
from .tree import RO, WO

ZONEINFO = "/proc/zoneinfo"
MEMCG_RECLAIM = "/sys/fs/cgroup/memory.reclaim"
KiB = 1024
MiB = 1024**2
GiB = 1024**3


def _flags(k: SimKernel) -> dict:
    return k.state().setdefault("reclaim", {"unreclaimable": [], "baseline_kb": {}})


def _used_kb(k: SimKernel, node: int) -> int:
    return int(k.state().get("nodes", {}).get(str(node), {}).get("used_kb", 0))


def _node_kb(k: SimKernel, node: int) -> tuple[int, int]:
    """(MemTotal, MemFree) of ``node`` in kB, from its meminfo."""
    text = k.tree.read(f"{memory.NODE}/node{node}/meminfo") if k.tree.exists(f"{memory.NODE}/node{node}") else ""
    values = {m.group(1): int(m.group(2)) for m in re.finditer(r"Node \d+ (\w+):\s+(\d+) kB", text)}
    return values.get("MemTotal", 0), values.get("MemFree", 0)


def write_zoneinfo(k: SimKernel) -> None:
    """``/proc/zoneinfo`` as the kernel prints it for each populated zone of a node with memory: the per-node
    stats in the first one (``node_unreclaimable`` there), watermarks, ``spanned``/``present``/``managed`` pages
    and ``start_pfn`` (the zone's span grows as blocks are onlined; see memory._account)."""
    flags = set(_flags(k)["unreclaimable"])
    nodes = k.state().get("nodes", {})
    pages_per_block = memory.block_size(k) // 4096
    out = []
    for node in parse_list(k.tree.read(f"{memory.NODE}/has_memory")):
        total, free = _node_kb(k, node)
        ns = nodes.get(str(node), {})
        spans = ns.get("spans", {})
        zones = [(z, c) for z, c in ns.get("online", {}).items() if c > 0 and z in spans] or [("Normal", 0)]
        managed_all = total // 4
        low_all = max(managed_all // 400, 32)  # the kernel's watermarks scale with the zone; of that order
        given = 0
        for i, (zone, count) in enumerate(sorted(zones, key=lambda zc: spans.get(zc[0], [0])[0])):
            lo, hi = spans.get(zone, [0, 0])
            present = count * pages_per_block if zone in spans else managed_all
            low = low_all - given if i == len(zones) - 1 else low_all * present // max(managed_all, 1)
            given += low
            head = ["  per-node stats", f"      nr_free_pages {free // 4}"] if i == 0 else []
            out += [f"Node {node}, zone {zone:>8}", *head, f"  pages free     {free // 4 if i == 0 else 0}",
                    f"        min      {low * 4 // 5}", f"        low      {low}", f"        high     {low * 6 // 5}",
                    f"        promo    {low * 7 // 5}", f"        spanned  {(hi - lo) * pages_per_block or present}",
                    f"        present  {present}", f"        managed  {present}", "        protection: (0, 0, 0, 0)",
                    "  pagesets", f"  node_unreclaimable:  {1 if node in flags else 0}",
                    f"  start_pfn:           {lo * pages_per_block}"]
    k.tree.file(ZONEINFO, "\n".join(out) + "\n", RO)


def fill(k: SimKernel, node: int, free_kb: int, *, stuck: bool = True) -> None:
    """A workload fills ``node`` until ``free_kb`` is left; ``stuck``: kswapd gave up on it (demotion was off)."""
    total, _ = _node_kb(k, node)
    memory.charge(k, node, max(total - free_kb, 0) - _used_kb(k, node))
    state = k.state()
    flags = state.setdefault("reclaim", {"unreclaimable": [], "baseline_kb": {}})
    flags["baseline_kb"].setdefault(str(node), 0)
    if stuck and node not in flags["unreclaimable"]:
        flags["unreclaimable"].append(node)
    k.save_state(state)
    write_zoneinfo(k)


def parse_request(value: str) -> int:
    """``<size>[ swappiness=<0-200|max>]`` as memory.reclaim takes it (memparse suffixes K/M/G/T); bytes."""
    words = value.split()
    if not words:
        raise einval("empty reclaim request")
    m = re.fullmatch(r"(\d+)([KkMmGgTt]?)", words[0])
    if not m:
        raise einval(f"bad size {words[0]!r}")
    for extra in words[1:]:
        key, _, arg = extra.partition("=")
        if key != "swappiness" or not (arg == "max" or (arg.isdigit() and int(arg) <= 200)):
            raise einval(f"unknown argument {extra!r}")
    return int(m.group(1)) * {"": 1, "k": KiB, "m": MiB, "g": GiB, "t": 1024**4}[m.group(2).lower()]


def _tiers(k: SimKernel) -> list[list[int]]:
    tiers = []
    base = k.tree.local(memory.TIERS)
    for name in sorted(os.listdir(base), key=lambda n: int(n[11:]) if n[11:].isdigit() else 0):
        if name.startswith("memory_tier") and name[11:].isdigit():
            tiers.append(parse_list(k.tree.read(f"{memory.TIERS}/{name}/nodelist")))
    return tiers


def _demotion_target(k: SimKernel, node: int) -> int | None:
    if k.tree.read("/sys/kernel/mm/numa/demotion_enabled") != "true":
        return None
    tiers = _tiers(k)
    below = [n for i, t in enumerate(tiers) if any(node in u for u in tiers[:i]) for n in t]
    best = max(below, key=lambda n: (_node_kb(k, n)[1], -n), default=None)
    return best if best is not None and _node_kb(k, best)[1] > 0 else None


def reclaim(k: SimKernel, nodes: list[int], size: int) -> None:
    """Reclaim ``size`` bytes from ``nodes`` (each in proportion to what it uses above its baseline) by
    demotion; EAGAIN when less than asked could be reclaimed."""
    baseline = _flags(k)["baseline_kb"]
    movable = {n: max(_used_kb(k, n) - int(baseline.get(str(n), 0)), 0) for n in nodes}
    total = sum(movable.values())
    want_kb = size // KiB
    done_kb = 0
    for node, kb in movable.items():
        target = _demotion_target(k, node)
        if not kb or target is None:
            continue
        share = min(kb, -(-want_kb * kb // total), _node_kb(k, target)[1])
        share = memory.move(k, node, target, share, take="cold-first", land_hot=False) if share > 0 else 0
        if share <= 0:
            continue
        # demote_folio_list (mm/vmscan.c): the pages moved count as the reclaimer's demotions on their node
        vmstat.record(k, node, target, share // memory.PAGE_KB, "proactive")
        done_kb += share
        state = k.state()
        flags = state.setdefault("reclaim", {"unreclaimable": [], "baseline_kb": {}})
        if node in flags["unreclaimable"]:
            flags["unreclaimable"].remove(node)
        k.save_state(state)
    write_zoneinfo(k)
    if done_kb < want_kb:
        raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN) + f" (reclaimed {done_kb} of {want_kb} kB)")


@rule(r"(/[^/]+)+/memory\.reclaim")  # the root cgroup's, wherever the preset mounts cgroup v2
def _memcg_reclaim(k: SimKernel, path: str, value: str) -> None:
    size = parse_request(value)
    tiers = _tiers(k)
    reclaim(k, [n for n in (tiers[0] if tiers else []) if _used_kb(k, n)], size)


@rule(r"/sys/devices/system/node/node(\d+)/reclaim")
def _node_reclaim(k: SimKernel, path: str, value: str) -> None:
    size = parse_request(value)
    reclaim(k, [int(path.split("/")[-2][4:])], size)


def _step(k: SimKernel, preset: presets.Preset) -> None:
    state = k.state()
    flags = state.setdefault("reclaim", {"unreclaimable": [], "baseline_kb": {}})
    flags["baseline_kb"] = {n: ns.get("used_kb", 0) for n, ns in state.get("nodes", {}).items()}
    k.save_state(state)
    if k.at_least(5, 19) and preset.cgroup2_mount and not preset.cgroup_hybrid:
        k.tree.file(f"{preset.cgroup2_mount.rstrip('/')}/memory.reclaim", "", WO)
    write_zoneinfo(k)
    if preset.name == "qemu-placement-full":
        fill(k, 0, 41 * KiB)


def _placement(full: bool) -> presets.Preset:
    base = presets.get("qemu-3node")
    return replace(
        base, name="qemu-placement-full" if full else "qemu-placement",
        description=("the placement benchmark's guest after a workload filled node0 with demotion off: dax0.0 "
                     "online, node0 41 MiB free and given up by kswapd" if full else
                     "the placement benchmark's guest: node0 1 GiB + CPUs, node1 1 GiB, 1.5 GiB pmem dax0.0"),
        nodes=(presets.NumaDef(0, (0, 1), 0, GiB, used=40 * MiB), presets.NumaDef(1, (), GiB, GiB, used=20 * MiB)),
        # memmap=1536M!4G; the namespace keeps its page map on the device: 11 whole blocks (1408 MiB) online
        dax=(simdax.DaxDef("dax0.0", 0, 2, 4 * GiB + 24 * MiB, 1512 * MiB, kind="pmem", numa_node=0),),
        dax_online_zone="Movable" if full else None,
        knobs={**base.knobs, **({"/sys/devices/system/memory/auto_online_blocks": "offline"} if full else {})},
        cmdline="console=ttyS0 memmap=1536M!4G", hostname="qemu-placement")


presets.LAYERS.append(_step)
presets.PRESETS["qemu-placement"] = lambda: _placement(False)
presets.PRESETS["qemu-placement-full"] = lambda: _placement(True)
