"""Recovering a simulated node from a writer killed in the middle of a write (see :mod:`.kernel`).

A real kernel finishes a write before the writer dies; the emulated one is a writer's own code, so ``kill -9`` can
stop it between two of the files one write changes. Each write (and each batch of the fake daxctl) leaves an
in-flight record, ``.nodeagent-machine/inflight.<pid>.json``, until it is complete, and keeps the private state
(``state.json``) in memory until its end: a record whose process is gone marks a write cut short, and the private
state is as it was before that write (or before the batch's last flush).

:func:`recover` (the machine plugin's ``recover``, which nodeagent's host layer calls when it opens a simulated
root that has a record) then, under the kernel's lock and only while no live writer holds a record:

1. does the interrupted write again, when it is a DAMON attribute (its handler recomputes from the private state
   and the staged files, so a second run finishes what the first began) or a plain attribute;
2. rolls back a DAX device's hot-add that did not reach its last step (the device is not bound to kmem, yet some
   of its blocks exist) and finishes a hot-remove that did not (bound to kmem, some of its blocks gone);
3. makes every memory block agree with its ``state`` file (the commit point of onlining and offlining) and derives
   the block accounting again from the tree — online blocks per node and zone, zone spans — and from it every
   derived file (node meminfo, ``has_memory``/``has_normal_memory``, memory tiers, ``/proc/meminfo``, zoneinfo).

Each recovery is journaled in ``writes.log`` as a ``recover`` line naming the records it closed.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from nodeagent.util.kfmt import parse_list

from . import dax, memory, ownfiles
from .kernel import MARKER, SimKernel

_RECORD = re.compile(r"inflight\.(\d+)\.json")
#: Writes recovery does again: DAMON's files and the plain knobs. Memory blocks, DAX and CXL bus writes are
#: repaired from the tree instead.
_BIND_REGION = re.compile(r"/drivers/cxl_region/bind$")
_REDO = re.compile(r"^/(sys/kernel/mm/damon/|proc/sys/|sys/kernel/mm/(numa|transparent_hugepage|lru_gen)/"
                   r"|sys/devices/system/memory/auto_online_blocks$|sys/module/)")


def records(root: Path | str) -> list[str]:
    """The names of the in-flight records under ``root`` (cheap: one listdir)."""
    try:
        return [n for n in os.listdir(Path(root) / MARKER) if _RECORD.fullmatch(n)]
    except FileNotFoundError:
        return []


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # (a record of a process that had our pid before us)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recover(root: Path | str) -> list[dict[str, Any]]:
    """Repair what writers that died in a write left (see the module); the records closed (empty: none)."""
    if not records(root):
        return []
    k = SimKernel(root)
    with k.locked():
        found: list[tuple[str, dict[str, Any]]] = []
        for name in records(root):
            text = ownfiles.read_text(root, name)
            try:
                rec = json.loads(text) if text else {}
            except ValueError:
                rec = {}  # (written atomically: never torn; an unreadable one is closed all the same)
            pid = int(_RECORD.fullmatch(name)[1])  # type: ignore[index]
            if _alive(pid):
                return []  # a writer is at work: its records are its own; the next open looks again
            found.append((name, rec))
        if not found:
            return []
        with k.transaction({"recovering": [n for n, _ in found]}):
            for _, rec in found:
                path = rec.get("path")
                if isinstance(path, str) and _REDO.match(path):
                    try:
                        k._write_locked(path, str(rec.get("value", "")))
                    except OSError:
                        pass  # it would have failed: nothing of it took effect but what the repairs below mend
            repair_region_positions(k)
            for _, rec in found:
                path = rec.get("path")
                if isinstance(path, str) and _BIND_REGION.search(path):
                    redo_region_bind(k, path, str(rec.get("value", "")).strip())
            repair_dax(k)
            repair_memory(k)
        with ownfiles.marker_dir(root) as dfd:
            for name, _ in found:
                try:
                    os.unlink(name, dir_fd=dfd)
                except FileNotFoundError:
                    pass
        ownfiles.append(root, "writes.log", json.dumps({"recover": [r for _, r in found]}) + "\n")
    return [r for _, r in found]


def repair_region_positions(k: SimKernel) -> None:
    """A CXL region write cut short (``targetN``, ``size``) changes the tree before the private state: each region's
    ``targetN`` files, the endpoint decoders' ``region`` and the region's size and HPA are made what the private state
    (of before that write) says, so the write reads as never made — never a decoder in a region that does not hold
    it (which no ``dpa_size`` write could free)."""
    from . import cxl

    regions = (k.state().get("cxl") or {}).get("regions") or {}
    held: dict[str, str] = {}
    for region, info in regions.items():
        if not k.tree.local(f"{cxl.DEV}/{region}").is_symlink():
            continue
        base = cxl._path(k, region)
        targets = info.get("targets") or {}
        held.update({name: region for name in targets.values()})
        for pos in range(int(info.get("ways") or 0)):
            path, want = f"{base}/target{pos}", targets.get(str(pos), "")
            if k.tree.exists(path) and k.tree.read(path).strip() != want:
                k.tree.set(path, want)
        if info.get("state", cxl.IDLE) < cxl.INTERLEAVE_ACTIVE and int(cxl._read(k, region, "size") or "0", 0):
            cxl._set(k, region, "size", "0x0")
            cxl._set(k, region, "resource", cxl._hex(cxl.NO_ADDR))
    base = k.tree.local(cxl.DEV)
    for name in sorted(os.listdir(base)) if base.is_dir() else ():
        if not re.fullmatch(r"decoder\d+\.\d+", name) or not k.tree.exists(f"{cxl.DEV}/{name}/dpa_size"):
            continue  # (an endpoint decoder has DPA)
        now, want = cxl._read(k, name, "region"), held.get(name, "")
        if now != want and (now in regions or want):  # (a region firmware committed is no state's: left alone)
            cxl._set(k, name, "region", want)


def redo_region_bind(k: SimKernel, path: str, region: str) -> None:
    """A ``cxl_region`` bind cut short: what it had made of the region's DAX device (dax_region, the device, its
    links and blocks) is removed, and the bind done again from the private state of before it."""
    from . import cxl, devnodes

    regions = (k.state().get("cxl") or {}).get("regions") or {}
    if region not in regions or not k.tree.local(f"{cxl.DEV}/{region}").is_symlink():
        return
    base = cxl._path(k, region)
    rid = regions[region]["id"]
    name = f"dax{rid}.0"
    dreg = f"{base}/dax_region{rid}"
    if k.tree.exists(f"{dreg}/{name}/resource") and k.tree.exists(f"{dreg}/{name}/size"):
        start, size = int(k.tree.read(f"{dreg}/{name}/resource"), 0), int(k.tree.read(f"{dreg}/{name}/size"))
        bs = memory.block_size(k)
        ids = [n for n in range(-(-start // bs), (start + size) // bs) if k.tree.exists(f"{memory.MEM}/memory{n}")]
        nodes = set()
        for n in ids:
            node = memory.block_node(k, n) if _has_node_link(k, n) else None
            if node is None:
                k.tree.remove_tree(f"{memory.MEM}/memory{n}")
            else:
                nodes.add(node)
                _drop_blocks(k, node, [n])
        for node in nodes:
            memory.remove_node(k, node)
    for link in (f"{dax.BUS}/devices/{name}", f"{dax.BUS}/drivers/kmem/{name}",
                 f"{dax.BUS}/drivers/device_dax/{name}", f"{cxl.DEV}/dax_region{rid}", f"{base}/driver"):
        k.tree.local(link).unlink(missing_ok=True)
    devnodes.remove(k, dax.DAX_MAJOR, rid, name)
    if k.tree.local(dreg).exists():
        k.tree.remove_tree(dreg)
    try:
        k._write_locked(path, region)
    except OSError:
        pass


def _has_node_link(k: SimKernel, n: int) -> bool:
    return any(re.fullmatch(r"node\d+", e) for e in os.listdir(k.tree.local(f"{memory.MEM}/memory{n}")))


def repair_dax(k: SimKernel) -> None:
    """Finish or roll back a DAX device's hot-add or hot-remove cut short (see the module)."""
    for name in sorted(k.state().get("dax") or {}):
        if not k.tree.local(f"{dax.BUS}/devices/{name}").is_symlink():
            continue
        ids = dax.block_range(k, name)
        present = [n for n in ids if k.tree.exists(f"{memory.MEM}/memory{n}")]
        driver = dax.driver_of(k, name)
        node = int(k.state()["dax"][name]["node"])
        if driver != "kmem" and present:  # a hot-add that never bound kmem: undo it
            _drop_blocks(k, node, present)
            stale = k.tree.local(f"{dax.BUS}/drivers/kmem/{name}")
            if stale.is_symlink():
                stale.unlink()
            memory.remove_node(k, node)
        elif driver == "kmem" and present and len(present) < len(ids):  # a hot-remove cut short: finish it
            _drop_blocks(k, node, present)
            info = k.state()["dax"][name]
            memory.charge(k, info.get("memmap_node", node), -dax.memmap_kb(k, name))
            dax.unbind(k, name)
            memory.remove_node(k, node)


def _drop_blocks(k: SimKernel, node: int, ids: list[int]) -> None:
    for n in ids:
        k.tree.remove_tree(f"{memory.MEM}/memory{n}")
        link = k.tree.local(f"{memory.NODE}/node{node}/memory{n}")
        if link.is_symlink():
            link.unlink()


def _blocks(k: SimKernel) -> dict[int, list[int]]:
    """Every memory block, by node (from each node directory's ``memoryN`` links)."""
    out: dict[int, list[int]] = {}
    base = k.tree.local(memory.NODE)
    for d in os.listdir(base):
        if d.startswith("node") and d[4:].isdigit():
            out[int(d[4:])] = sorted(int(m[6:]) for m in os.listdir(base / d)
                                     if m.startswith("memory") and m[6:].isdigit()
                                     and k.tree.exists(f"{memory.MEM}/{m}"))
    return out


def repair_memory(k: SimKernel) -> None:
    """Every block as its ``state`` file says, the accounting counted again from the tree, derived files redone."""
    state = k.state()
    by_node = _blocks(k)
    for node, ids in sorted(by_node.items()):
        online: dict[str, list[int]] = {}
        for n in ids:
            b = f"{memory.MEM}/memory{n}"
            if k.tree.read(f"{b}/state") == "online":
                zone = k.tree.read(f"{b}/valid_zones")
                if " " in zone or not zone:  # (onlining sets the zone before its state: never here, but be sure)
                    zone = zone.split(" ")[0] if zone else "Normal"
                    k.tree.set(f"{b}/valid_zones", zone)
                if k.tree.read(f"{b}/online") != "1":
                    k.tree.set(f"{b}/online", 1)
                online.setdefault(zone, []).append(n)
        ns = memory._node_state(state, node)
        ns["online"] = {z: len(b) for z, b in online.items()}
        spans = ns.setdefault("spans", {})
        for z in list(spans):
            if z not in online:
                spans.pop(z)
        for z, b in online.items():
            old = spans.get(z)
            lo, hi = (min(old[0], b[0]), max(old[1], b[-1] + 1)) if old else (b[0], b[-1] + 1)
            spans[z] = memory._shrunk(k, node, z, lo, hi)
    for node_key in list(state.get("nodes", {})):
        if int(node_key) not in by_node:
            state["nodes"][node_key]["online"] = {}
    k.save_state(state)
    for node, ids in sorted(by_node.items()):  # an offline block's files, once the node's zones are known
        for n in ids:
            b = f"{memory.MEM}/memory{n}"
            if k.tree.read(f"{b}/state") != "offline":
                continue
            if k.tree.read(f"{b}/online") != "0":
                k.tree.set(f"{b}/online", 0)
            zones = memory.offline_valid_zones(k, node)
            if k.tree.read(f"{b}/valid_zones") != zones:
                k.tree.set(f"{b}/valid_zones", zones)
    nodes = set(by_node) | {int(n) for n in state.get("nodes", {})}
    memory.derive(k, {n for n in nodes if k.tree.exists(f"{memory.NODE}/node{n}")})
    _lists_follow_nodes(k)


def _lists_follow_nodes(k: SimKernel) -> None:
    """A node directory removed (or not yet made) when the write stopped: the node lists say the same."""
    present = {int(d[4:]) for d in os.listdir(k.tree.local(memory.NODE)) if d.startswith("node") and d[4:].isdigit()}
    for name in ("online", "has_memory", "has_normal_memory"):
        path = f"{memory.NODE}/{name}"
        if not k.tree.exists(path):
            continue
        ids = set(parse_list(k.tree.read(path)))
        if ids - present:
            k.tree.set(path, memory.format_list(sorted(ids & present)))
