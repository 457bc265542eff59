"""Emulated device-DAX: ``/sys/bus/dax/devices/daxX.Y`` as device_dax or kmem (system-ram) devices.

Layout as captured on a real 6.12 kernel (``realkernel/out-dax-3node.txt``): the device lives under its region
(``.../regionN/daxN.0/daxN.0`` for legacy pmem, ``.../regionN/dax_regionN/daxN.0`` for CXL) with ``align dev
driver mapping0 memmap_on_memory modalias numa_node power resource size subsystem target_node uevent``, and
``/sys/bus/dax/devices/daxN.0`` links to it. A CXL device also gets the CXL objects behind it: its region
(``/sys/bus/cxl/devices/regionN``), the endpoint decoder the region targets and the memdev behind that.

The driver files behave as the dax bus does (what ``daxctl reconfigure-device`` writes, in its order):
``<driver>/remove_id`` and ``<driver>/unbind`` detach a device; ``<driver>/new_id`` adds the device to the
driver's id table, which attaches it at once, so the ``<driver>/bind`` that follows fails with EBUSY (daxctl
ignores that). Attaching kmem hot-adds the device's range, rounded inwards to whole memory blocks, to the
target node — online in the zone the kernel's ``auto_online_blocks`` policy chooses, or offline — and puts the
struct pages of the new memory (64 bytes per 4 KiB page) in the DRAM of the nearest node unless the device's
``memmap_on_memory`` is set. Detaching kmem hot-removes the blocks; with any block online it fails with EBUSY
(the real kernel would detach and strand the memory until reboot: daxctl never lets that happen).

A DAX region is *static* (pmem, dax_hmem: ``IORESOURCE_DAX_STATIC``) or *dynamic* (dax_cxl). As
``drivers/dax/bus.c`` does, a static region's ``dax_region`` group has no ``available_size``, ``create``, ``seed``
or ``delete`` (``dax_region_visible`` hides them: writing one fails with ENOENT) and its devices' ``size`` is
read-only (EACCES). A dynamic region can be split: a device's ``size`` (``size_store``) takes a multiple of its
``align`` (EINVAL otherwise), fails with EBUSY while the device is bound to a driver and with ENOSPC when growing
it needs more than ``available_size``; shrinking gives back the end of its range. Writing ``1`` to ``create``
(``create_store``) makes a new device of size 0 with the lowest free id (ENOSPC when nothing is available),
which becomes the region's ``seed`` until it is bound; ``create`` reads back the youngest device. ``delete``
(``delete_store``) removes a device that is unbound and of size 0 (EBUSY otherwise, and always for id 0; ENXIO
for a name that is not in the region). Emulated with one range per device: a grow that would need a second
range (``mapping1``) fails with ENOSPC here, where the kernel would add one.
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass

from . import devnodes, memory, nd
from .kernel import SimKernel, ebusy, einval, rule
from .tree import RO, RW, WO

BUS = "/sys/bus/dax"
CXL_BUS = "/sys/bus/cxl"
DRIVERS = ("device_dax", "kmem")
#: the dax class's char major (dynamic; what the captured 6.12 guest gave it)
DAX_MAJOR = 252
#: struct page bytes per 4 KiB page (x86-64).
STRUCT_PAGE = 64
PAGE = 4096


@dataclass(frozen=True)
class DaxDef:
    name: str  # dax0.0
    region: int
    target_node: int
    start: int  # physical address of the range (``resource``)
    size: int
    align: int = 2 * 1024**2
    kind: str = "cxl"  # cxl | pmem
    numa_node: int = 0  # the node of the device itself (its host bridge), not where its memory goes


def device_dir(d: DaxDef) -> str:
    if d.kind == "pmem":
        return f"/sys/devices/platform/e820_pmem/ndbus0/region{d.region}/{d.name}/{d.name}"
    return f"/sys/devices/platform/ACPI0017:00/root0/decoder0.{d.region}/region{d.region}/dax_region{d.region}/{d.name}"


def _up(path: str) -> str:
    """The ``../`` prefix that leads from directory ``path`` back to ``/sys``."""
    return "../" * (len(path.strip("/").split("/")) - 1)


def lay_out(k: SimKernel, d: DaxDef) -> None:
    """Create the device in devdax mode, bound to device_dax."""
    t = k.tree
    base = device_dir(d)
    t.dir(base)
    t.file(f"{base}/align", d.align, RW)
    t.file(f"{base}/dev", f"{DAX_MAJOR}:{d.region}", RO)
    t.file(f"{base}/memmap_on_memory", 0, RW)
    t.file(f"{base}/modalias", "dax:t0*", RO)
    t.file(f"{base}/numa_node", d.numa_node, RO)
    t.file(f"{base}/resource", hex(d.start), RO)
    t.file(f"{base}/size", d.size, RW if d.kind == "cxl" else RO)
    t.file(f"{base}/target_node", d.target_node, RO)
    t.file(f"{base}/uevent", f"MAJOR={DAX_MAJOR}\nMINOR={d.region}\nDEVNAME={d.name}\nDEVTYPE=dax", RW)
    t.file(f"{base}/mapping0/start", hex(d.start), RO)
    t.file(f"{base}/mapping0/end", hex(d.start + d.size - 1), RO)
    t.file(f"{base}/mapping0/page_offset", "0x0", RO)
    region = base.rsplit("/", 1)[0]
    # the dax_region's attributes live in its ``dax_region`` group, for pmem's ``daxN.0`` and CXL's ``dax_regionN``
    # alike (``daxctl`` reads ``<region>/dax_region/size``)
    region_files(k, region, d.region, d.start, d.size, d.align, dynamic=d.kind == "cxl")
    up = _up(base)
    t.link(f"{base}/subsystem", f"{up}bus/dax")
    t.link(f"{BUS}/devices/{d.name}", f"../../..{device_dir(d)[4:]}")
    devnodes.add(k, base, DAX_MAJOR, d.region, d.name)
    for drv in DRIVERS:
        for attr in ("bind", "unbind", "new_id", "remove_id"):
            if not t.exists(f"{BUS}/drivers/{drv}/{attr}"):
                t.file(f"{BUS}/drivers/{drv}/{attr}", "", WO)
    if d.kind == "cxl":
        _cxl_dax_region(k, d)
    else:
        nd.lay_out(k, d)
    state = k.state()
    state.setdefault("dax", {})[d.name] = {"start": d.start, "size": d.size, "node": d.target_node}
    k.save_state(state)
    bind(k, d.name, "device_dax")


def _cxl_dax_region(k: SimKernel, d: DaxDef) -> None:
    """The ``dax_regionN`` device dax_cxl makes under the CXL region (bound to ``cxl_dax_region``); the region and
    the rest of the bus are :func:`nodeagent_sim.cxl_presets.expanders`'."""
    from . import cxl as simcxl

    t = k.tree
    dreg = device_dir(d).rsplit("/", 1)[0]
    for attr, value, mode in (("devtype", "cxl_dax_region", RO), ("modalias", "cxl:t8", RO), ("uevent", "", RW)):
        t.file(f"{dreg}/{attr}", value, mode)
    t.link(f"{dreg}/subsystem", f"{_up(dreg)}bus/cxl")
    simcxl.bind(k, dreg, "cxl_dax_region")
    t.link(f"{CXL_BUS}/devices/dax_region{d.region}", "../../.." + dreg[4:])


def _device_rel(k: SimKernel, name: str) -> str:
    real = os.path.realpath(k.tree.local(f"{BUS}/devices/{name}"))
    return "/" + os.path.relpath(real, k.tree.root)


def device_path(k: SimKernel, name: str) -> str:
    """The device's own directory under /sys/devices (where ``/sys/bus/dax/devices/<name>`` leads)."""
    return _device_rel(k, name)


def driver_of(k: SimKernel, name: str) -> str | None:
    link = k.tree.local(f"{BUS}/devices/{name}/driver")
    return os.path.basename(os.readlink(link)) if link.is_symlink() else None


def bind(k: SimKernel, name: str, driver: str) -> None:
    """Attach ``name`` to ``driver`` (links only; :func:`attach` also does what the driver does)."""
    rel = _device_rel(k, name)
    k.tree.link(f"{rel}/driver", f"{_up(rel)}bus/dax/drivers/{driver}")
    k.tree.link(f"{BUS}/drivers/{driver}/{name}", f"../../../..{rel[4:]}")
    other = "kmem" if driver == "device_dax" else "device_dax"
    stale = k.tree.local(f"{BUS}/drivers/{other}/{name}")
    if stale.is_symlink():
        stale.unlink()
    _probed(k, name)


def unbind(k: SimKernel, name: str) -> None:
    rel = _device_rel(k, name)
    drv = driver_of(k, name)
    link = k.tree.local(f"{rel}/driver")
    if link.is_symlink():
        link.unlink()
    if drv:
        back = k.tree.local(f"{BUS}/drivers/{drv}/{name}")
        if back.is_symlink():
            back.unlink()


def block_range(k: SimKernel, name: str) -> list[int]:
    """The memory blocks that the device's range covers once hot-added (rounded inwards to blocks)."""
    info = k.state()["dax"][name]
    bs = memory.block_size(k)
    first = -(-info["start"] // bs)
    last = (info["start"] + info["size"]) // bs
    return list(range(first, last))


def memmap_kb(k: SimKernel, name: str) -> int:
    """DRAM the struct pages of the device's hot-added blocks take (kB)."""
    return len(block_range(k, name)) * memory.block_size(k) // PAGE * STRUCT_PAGE // 1024


def _memmap_node(k: SimKernel, target: int) -> int:
    """Where the kernel puts the memmap of memory hot-added to ``target``: the nearest node with normal memory."""
    normal = memory.parse_list(k.tree.read(f"{memory.NODE}/has_normal_memory"))
    if target in normal or not normal:
        return target
    dist = _distances(k, target)
    return min(normal, key=lambda n: (dist[n] if n < len(dist) else 255, n))


def hot_add(k: SimKernel, name: str, zone: str | None) -> list[int]:
    """What kmem does on attach: hot-add the blocks to the target node, online in ``zone`` (None: offline)."""
    info = k.state()["dax"][name]
    node = info["node"]
    if not k.tree.exists(f"{memory.NODE}/node{node}"):
        memory.add_node(k, node, [], _distances(k, node))
        # kmem registers its memory type for a node that has none: the node joins the default DAX tier.
        state = k.state()
        state.setdefault("node_tier", {}).setdefault(str(node), memory.KMEM_TIER)
        k.save_state(state)
    ids = block_range(k, name)
    bs = memory.block_size(k)
    # the struct pages go on the device only when the device and memory_hotplug.memmap_on_memory both ask
    param = "/sys/module/memory_hotplug/parameters/memmap_on_memory"
    allowed = k.tree.exists(param) and k.tree.read(param).strip() in ("Y", "y", "1", "force")
    on_device = allowed and k.tree.read(f"{_device_rel(k, name)}/memmap_on_memory").strip() == "1"
    memmap_node = node if on_device else _memmap_node(k, node)
    memory.add_blocks(k, node, ids[0] * bs, len(ids) * bs, zone)
    memory.charge(k, memmap_node, memmap_kb(k, name))
    state = k.state()
    state["dax"][name]["memmap_node"] = memmap_node
    k.save_state(state)
    bind(k, name, "kmem")
    return ids


def hot_remove(k: SimKernel, name: str) -> None:
    """What kmem does on detach: every block must be offline; they disappear and the memmap is freed."""
    ids = [n for n in block_range(k, name) if k.tree.exists(f"{memory.MEM}/memory{n}")]
    online = [n for n in ids if k.tree.read(f"{memory.MEM}/memory{n}/state") != "offline"]
    if online:
        raise ebusy(f"{name}: {len(online)} memory blocks still online (memory{online[0]}...)")
    info = k.state()["dax"][name]
    memory.remove_blocks(k, ids)
    memory.charge(k, info.get("memmap_node", info["node"]), -memmap_kb(k, name))
    unbind(k, name)
    memory.remove_node(k, info["node"])


def to_system_ram(k: SimKernel, name: str, zone: str | None) -> list[int]:
    """Bind to kmem: hot-add the blocks to the target node, online in ``zone`` (None: leave offline)."""
    return hot_add(k, name, zone)


def attach(k: SimKernel, name: str, driver: str) -> None:
    """The driver core attaching ``name`` to ``driver``: kmem hot-adds per the auto-online policy. A device of
    size 0 (a fresh seed) has no range to map: its probe fails with ENXIO."""
    if not k.state()["dax"].get(name, {}).get("size"):
        raise OSError(errno.ENXIO, os.strerror(errno.ENXIO) + f" ({name} has size 0)")
    if driver == "kmem":
        hot_add(k, name, memory.hotplug_policy_zone(k))
    else:
        bind(k, name, driver)


def _remove_files(k: SimKernel, name: str) -> None:
    """A device's sysfs directory, its bus link and its ``/dev`` node go (its state entry is the caller's)."""
    rel = _device_rel(k, name)
    dev = devnodes.dev_of(k, rel)
    if dev is not None:
        devnodes.remove(k, *dev, name)
    k.tree.remove_tree(rel)
    k.tree.local(f"{BUS}/devices/{name}").unlink()


def unplug(k: SimKernel, name: str) -> None:
    """The device goes away (region torn down, expander removed): only a devdax or unbound device can."""
    if driver_of(k, name) == "kmem":
        raise ebusy(f"{name} is system-ram")
    unbind(k, name)
    _remove_files(k, name)
    state = k.state()
    state.get("dax", {}).pop(name, None)
    k.save_state(state)


def _enodev(name: str) -> OSError:
    return OSError(errno.ENODEV, os.strerror(errno.ENODEV) + f" ({name})")


def _device(k: SimKernel, value: str) -> str:
    name = value.strip()
    if not name or not k.tree.local(f"{BUS}/devices/{name}").is_symlink():
        raise _enodev(name)
    return name


@rule(r"/sys/bus/dax/drivers/(device_dax|kmem)/new_id")
def _new_id(k: SimKernel, path: str, value: str) -> None:
    driver = path.split("/")[-2]
    name = value.strip()
    state = k.state()
    ids = state.setdefault("dax_ids", {}).setdefault(driver, [])
    if name not in ids:
        ids.append(name)
    k.save_state(state)
    # new_id attaches matching unbound devices at once (driver_attach).
    if k.tree.local(f"{BUS}/devices/{name}").is_symlink() and driver_of(k, name) is None:
        attach(k, name, driver)


@rule(r"/sys/bus/dax/drivers/(device_dax|kmem)/remove_id")
def _remove_id(k: SimKernel, path: str, value: str) -> None:
    driver = path.split("/")[-2]
    state = k.state()
    ids = state.setdefault("dax_ids", {}).setdefault(driver, [])
    if value.strip() in ids:
        ids.remove(value.strip())
    k.save_state(state)


@rule(r"/sys/bus/dax/drivers/(device_dax|kmem)/bind")
def _bind(k: SimKernel, path: str, value: str) -> None:
    name = _device(k, value)
    if driver_of(k, name) is not None:
        raise ebusy(f"{name} already bound")
    attach(k, name, path.split("/")[-2])


@rule(r"/sys/bus/dax/drivers/(device_dax|kmem)/unbind")
def _unbind(k: SimKernel, path: str, value: str) -> None:
    name = _device(k, value)
    driver = path.split("/")[-2]
    if driver_of(k, name) != driver:
        raise _enodev(name)
    if driver == "kmem":
        hot_remove(k, name)
    else:
        unbind(k, name)


def _distances(k: SimKernel, node: int) -> list[int]:
    possible = memory.parse_list(k.tree.read(f"{memory.NODE}/possible"))
    table = k.meta.get("distances", {})
    row = table.get(str(node))
    return row if row else [10 if n == node else 20 for n in range(max(possible) + 1)]


# -- DAX regions: static or dynamic (drivers/dax/bus.c) ----------------------------------------------------------

#: the smallest mapping granularity of a device (``memremap_compat_align()`` on x86-64: one 2 MiB subsection)
COMPAT_ALIGN = 2 * 1024**2


def region_files(k: SimKernel, region_dir: str, rid: int, start: int, size: int, align: int,
                 dynamic: bool) -> None:
    """The ``dax_region`` attribute group of the device ``region_dir`` (``alloc_dax_region``), and the region's
    state. A static region shows only ``id``, ``size`` and ``align``."""
    t = k.tree
    attrs = f"{region_dir}/dax_region"
    t.file(f"{attrs}/id", rid, RO)
    t.file(f"{attrs}/size", size, RO)
    t.file(f"{attrs}/align", align, RO)
    if dynamic:
        t.file(f"{attrs}/available_size", 0, RO)
        t.file(f"{attrs}/create", "", RW)
        t.file(f"{attrs}/seed", "", RO)
        t.file(f"{attrs}/delete", "", WO)
    state = k.state()
    state.setdefault("dax_regions", {})[str(rid)] = {"dir": region_dir, "start": start, "size": size,
                                                     "align": align, "dynamic": dynamic, "seed": None,
                                                     "youngest": None}
    k.save_state(state)


def _region(k: SimKernel, rid: int) -> dict | None:
    return k.state().get("dax_regions", {}).get(str(rid))


def _rid(name: str) -> int:
    return int(name[3:].split(".")[0])


def _members(k: SimKernel, rid: int) -> dict[str, dict]:
    return {n: v for n, v in k.state().get("dax", {}).items() if _rid(n) == rid}


def _available(k: SimKernel, rid: int) -> int:
    reg = _region(k, rid)
    return 0 if reg is None else reg["size"] - sum(v["size"] for v in _members(k, rid).values())


def _refresh(k: SimKernel, rid: int) -> None:
    """What the region's attributes read now (the kernel computes them on read; the tree keeps text)."""
    reg = _region(k, rid)
    if reg is None or not reg["dynamic"]:
        return
    attrs = f"{reg['dir']}/dax_region"
    k.tree.set(f"{attrs}/available_size", _available(k, rid))
    k.tree.set(f"{attrs}/seed", reg["seed"] or "")
    k.tree.set(f"{attrs}/create", reg["youngest"] or "")


def _set_region(k: SimKernel, rid: int, **values: object) -> None:
    state = k.state()
    state["dax_regions"][str(rid)].update(values)
    k.save_state(state)


def _probed(k: SimKernel, name: str) -> None:
    """``dax_bus_probe``: a dynamic region's seed that is bound stops being the seed."""
    reg = _region(k, _rid(name)) if re.fullmatch(r"dax\d+\.\d+", name) else None
    if reg is not None and reg["dynamic"] and reg["seed"] == name:
        _set_region(k, _rid(name), seed=None)
        _refresh(k, _rid(name))


def _gap(k: SimKernel, rid: int, want: int, after: int | None = None) -> int | None:
    """The start of a free stretch of ``want`` bytes in the region (at ``after`` exactly, when given)."""
    reg = _region(k, rid)
    assert reg is not None
    used = sorted((v["start"], v["start"] + v["size"]) for v in _members(k, rid).values() if v["size"])
    cursor, end = reg["start"], reg["start"] + reg["size"]
    gaps = []
    for a, b in used:
        if a > cursor:
            gaps.append((cursor, a))
        cursor = max(cursor, b)
    if cursor < end:
        gaps.append((cursor, end))
    for a, b in gaps:
        if after is not None:
            if a == after and b - a >= want:
                return a
        elif b - a >= want:
            return a
    return None


def _show_range(k: SimKernel, name: str) -> None:
    """The device's ``size``, ``resource`` and ``mapping0`` as its range now is."""
    info = k.state()["dax"][name]
    rel = _device_rel(k, name)
    k.tree.set(f"{rel}/size", info["size"])
    reg = _region(k, _rid(name))
    k.tree.set(f"{rel}/resource", hex(info["start"] if info["size"] or reg is None else reg["start"]))
    if info["size"]:
        for attr, value in (("start", hex(info["start"])), ("end", hex(info["start"] + info["size"] - 1)),
                            ("page_offset", "0x0")):
            k.tree.file(f"{rel}/mapping0/{attr}", value, RO)
    elif k.tree.exists(f"{rel}/mapping0"):
        k.tree.remove_tree(f"{rel}/mapping0")


@rule(r"/sys/(?:devices/.*|bus/dax/devices)/(dax\d+\.\d+)/size")
def _size(k: SimKernel, path: str, value: str) -> None:
    name = path.rsplit("/", 2)[-2]
    try:
        val = int(value.strip(), 0)
    except ValueError:
        raise einval(f"not a size: {value.strip()!r}") from None
    rel = _device_rel(k, name)
    align = max(int(k.tree.read(f"{rel}/align")), COMPAT_ALIGN)
    if val < 0 or val % align:
        raise einval(f"{val} is not a multiple of {name}'s align {align}")
    if driver_of(k, name) is not None:
        raise ebusy(f"{name} is bound to {driver_of(k, name)}")
    rid = _rid(name)
    info = k.state()["dax"][name]
    if val > info["size"]:
        grow = val - info["size"]
        if grow > _available(k, rid):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC) + f" ({_available(k, rid)} bytes available)")
        start = _gap(k, rid, grow, after=info["start"] + info["size"] if info["size"] else None)
        if start is None:  # the kernel would add a second range (mapping1): not emulated
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC) + " (no free space right after the device)")
        if not info["size"]:
            info["start"] = start
    info["size"] = val
    state = k.state()
    state["dax"][name].update(start=info["start"], size=val)
    k.save_state(state)
    _show_range(k, name)
    _refresh(k, rid)


@rule(r"/sys/devices/.*/dax_region/create")
def _create(k: SimKernel, path: str, value: str) -> None:
    rid = int(k.tree.read(path.rsplit("/", 1)[0] + "/id"))
    try:
        val = int(value.strip(), 0)
    except ValueError:
        raise einval(f"not an integer: {value.strip()!r}") from None
    if val != 1:
        raise einval("create takes 1")
    if _available(k, rid) == 0:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC) + " (no available capacity in the region)")
    reg = _region(k, rid)
    assert reg is not None
    ids = {int(n.split(".")[1]) for n in _members(k, rid)}
    new = next(i for i in range(len(ids) + 1) if i not in ids)  # the ida's lowest free id
    name = f"dax{rid}.{new}"
    node = next(iter(_members(k, rid).values()), {}).get("node", -1)
    base = f"{reg['dir']}/{name}"
    minor = 1 + max((int(p.split(":")[1]) for p in os.listdir(k.tree.local("/sys/dev/char"))
                     if p.startswith(f"{DAX_MAJOR}:")), default=0)
    align = reg["align"]
    k.tree.new_dir(base, {"align": (align, RW), "dev": (f"{DAX_MAJOR}:{minor}", RO), "memmap_on_memory": (0, RW),
                          "modalias": ("dax:t0*", RO), "numa_node": (-1, RO), "resource": (hex(reg["start"]), RO),
                          "size": (0, RW), "target_node": (node, RO),
                          "uevent": (f"MAJOR={DAX_MAJOR}\nMINOR={minor}\nDEVNAME={name}\nDEVTYPE=dax", RW)})
    k.tree.link(f"{base}/subsystem", f"{_up(base)}bus/dax")
    k.tree.link(f"{BUS}/devices/{name}", f"../../..{base[4:]}")
    devnodes.add(k, base, DAX_MAJOR, minor, name)
    state = k.state()
    state["dax"][name] = {"start": reg["start"], "size": 0, "node": node}
    state["dax_regions"][str(rid)].update(seed=reg["seed"] or name, youngest=name)
    k.save_state(state)
    _refresh(k, rid)


@rule(r"/sys/devices/.*/dax_region/delete")
def _delete(k: SimKernel, path: str, value: str) -> None:
    rid = int(k.tree.read(path.rsplit("/", 1)[0] + "/id"))
    name = value.strip()
    if name not in _members(k, rid):
        raise OSError(errno.ENXIO, os.strerror(errno.ENXIO) + f" ({name!r} is not a device of region {rid})")
    if driver_of(k, name) is not None or k.state()["dax"][name]["size"] or name.endswith(".0"):
        raise ebusy(f"{name} is bound, has a size, or is the region's device 0")
    _remove_files(k, name)
    state = k.state()
    state["dax"].pop(name)
    reg = state["dax_regions"][str(rid)]
    reg.update(seed=None if reg["seed"] == name else reg["seed"],
               youngest=None if reg["youngest"] == name else reg["youngest"])
    k.save_state(state)
    _refresh(k, rid)
