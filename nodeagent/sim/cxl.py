"""Emulated CXL bus: ``/sys/bus/cxl/devices`` with the kernel's region ABI, its rules and its errnos.

Layout and behaviour as captured on a real 6.12 guest (QEMU 10, two cxl-type3 memdevs behind one host bridge;
``tests/realkernel/captured/cxl-*``), and ``drivers/cxl/core/{region,hdm,port}.c`` where the captures are silent:

- ``create_ram_region`` reads the next name (ids come from one pool shared with nvdimm regions); writing that name
  creates the region, any other ``regionN`` is EBUSY, anything else EINVAL. Deleting a region gives its id back
  when it is lower than the one handed out next (``cxl_region_release``).
- ``interleave_ways``: 1, 2, 4, 8, 16, 3, 6, 12 and a power-of-two multiple of the root decoder's ways (EINVAL);
  ``interleave_granularity``: a power of two from 256 to 16384 (EINVAL), equal to the root decoder's when that one
  interleaves (EINVAL); both EBUSY once the region has its size. ``targetN`` files exist for N < ways.
- ``size``: ENXIO before ways and granularity, EINVAL unless a multiple of 256 MiB × ways, ENOSPC beyond the
  window, EBUSY to change it or (0) to free it once every target is attached.
- Endpoint decoders: ``mode`` ram|pmem (EINVAL), ENXIO for a partition the device does not have, EBUSY once it has
  DPA; ``dpa_size``: EINVAL before ``mode`` or unless a multiple of 256 MiB, EBUSY out of id order (allocation and
  release are stacks per endpoint) or while the decoder is in a region, ENOSPC beyond the partition.
- ``targetN``: ENODEV for no such device, EINVAL for a mode mismatch, ENXIO before the size is set, without DPA,
  for a host bridge not in the window or at a position the window's host-bridge order does not give it (x2 and
  more windows), EBUSY for a decoder already in a region, a position taken or a memdev already in the region
  through another of its decoders, EINVAL if its DPA × ways is not the
  region's size. Writing an empty value detaches; a committed region is reset (``commit`` reads 0) first.
- ``commit=1``: ENXIO until every position is filled, and ENXIO on a CPU with the hypervisor bit (the kernel
  cannot invalidate caches there: a QEMU guest needs ``-cpu max,hypervisor=off``); programs the host-bridge and
  endpoint decoders. It makes no DAX device: binding the region to ``cxl_region`` (ENXIO before commit) does —
  ``daxN.0`` (N = region id) with ``memmap_on_memory`` 1, which kmem takes at once and hot-adds as
  ``auto_online_blocks`` says. ``commit=0`` releases the region driver (the DAX device goes) and resets the
  decoders.
- ``delete_region`` (ENODEV for a name that is not a region of this window) tears the region down whatever its
  state. Where the kernel would strand online memory (kmem losing a device with online blocks) the simulator
  refuses with EBUSY, as ``sim.dax`` does.
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass

from . import dax as simdax
from .kernel import SimKernel, ebusy, einval, kstrtobool, rule
from .tree import RO, RW, WO

BUS = "/sys/bus/cxl"
DEV = f"{BUS}/devices"
ROOT = "/sys/devices/platform/ACPI0017:00/root0"
MiB256 = 256 * 1024**2
NO_ADDR = 2**64 - 1
WAYS = (1, 2, 3, 4, 6, 8, 12, 16)
#: What a loaded CXL stack shows under /sys/module (cxl_core and cxl_port are built in on Debian's 6.12).
MODULES = ("cxl_acpi", "cxl_pci", "cxl_mem", "dax_cxl", "kmem", "device_dax")
BUILTIN = ("cxl_core", "cxl_port")
DRIVERS = ("cxl_region", "cxl_port", "cxl_mem", "cxl_dax_region")
# region config states (drivers/cxl/cxl.h)
IDLE, INTERLEAVE_ACTIVE, ACTIVE, COMMIT = 0, 1, 2, 3


@dataclass(frozen=True)
class MemdevDef:
    serial: int
    root_port: str  # the root port's PCI address, 0000:0c:00.0
    pci: str  # the memdev's PCI function, 0000:0d:00.0
    ram_size: int
    pmem_size: int = 0
    link: tuple[str, int] = ("32.0 GT/s PCIe", 16)


@dataclass(frozen=True)
class HostBridgeDef:
    name: str  # pci0000:0c
    uid: int  # the ACPI0016 _UID: the id in the root decoder's target_list
    root_ports: tuple[str, ...]  # PCI addresses, dport ids 0..
    numa_node: int = -1


@dataclass(frozen=True)
class WindowDef:
    start: int
    size: int
    host_bridges: tuple[str, ...]  # interleave order (the CFMWS target list)
    node: int  # the proximity domain's node: where region memory goes
    granularity: int = 256
    ram: bool = True
    pmem: bool = True


@dataclass(frozen=True)
class CxlDef:
    windows: tuple[WindowDef, ...]
    host_bridges: tuple[HostBridgeDef, ...]
    memdevs: tuple[MemdevDef, ...]  # in probe order: memN and its endpoint are numbered in this order
    nvdimm_regions: int = 0  # region ids libnvdimm already took (one id pool)
    decoders_per_port: int = 4
    modules: tuple[str, ...] = MODULES


def _up(path: str) -> str:
    return "../" * (len(path.strip("/").split("/")) - 1)


def _link_bus(k: SimKernel, name: str, target: str) -> None:
    k.tree.link(f"{DEV}/{name}", "../../.." + target[4:])


def _files(k: SimKernel, path: str, files: dict[str, tuple[str | int, int]]) -> None:
    """A new device directory with its attributes (or the attributes added to one that exists)."""
    if not k.tree.exists(path):
        k.tree.new_dir(path, files)
        return
    for name, (value, mode) in files.items():
        k.tree.file(f"{path}/{name}", value, mode)


def _hex(n: int, width: int = 0) -> str:
    return f"0x{n:0{width}x}"


def decoder(k: SimKernel, path: str, kind: str, ways: int = 1, gran: int = 256, targets: str = "") -> None:
    t = k.tree
    files = {"devtype": (f"cxl_decoder_{kind}", RO), "interleave_granularity": (gran, RO),
             "interleave_ways": (ways, RO), "locked": (0, RO), "modalias": ("cxl:t0", RO),
             "size": ("0x0", RO), "start": ("0x0", RO), "uevent": ("", RW)}
    if kind != "root":
        files |= {"region": ("", RO), "target_type": ("expander", RO)}
    if kind != "endpoint":
        files["target_list"] = (targets, RO)
    if kind == "endpoint":
        files |= {"dpa_resource": (_hex(NO_ADDR), RO), "dpa_size": (_hex(0, 16), RW), "mode": ("none", RW)}
    _files(k, path, files)
    t.link(f"{path}/subsystem", f"{_up(path)}bus/cxl")
    _link_bus(k, os.path.basename(path), path)


def port(k: SimKernel, path: str, uport: str) -> None:
    t = k.tree
    _files(k, path, {"decoders_committed": (0, RO), "devtype": ("cxl_port", RO), "modalias": ("cxl:t3", RO),
                     "uevent": ("", RW)})
    t.link(f"{path}/uport", _up(path) + uport[5:])
    t.link(f"{path}/subsystem", f"{_up(path)}bus/cxl")
    _link_bus(k, os.path.basename(path), path)


def base(k: SimKernel, modules: tuple[str, ...]) -> None:
    """root0 (ACPI0017), the CXL drivers, the loaded and built-in modules, and the bus's private state."""
    t = k.tree
    t.dir(ROOT)
    t.file(f"{ROOT}/devtype", "cxl_port", RO)
    t.file(f"{ROOT}/decoders_committed", 0, RO)
    t.link(f"{ROOT}/uport", "../../ACPI0017:00")
    _link_bus(k, "root0", ROOT)
    for d in DRIVERS:
        for attr in ("bind", "unbind"):
            t.file(f"{BUS}/drivers/{d}/{attr}", "", WO)
    for m in modules:
        t.file(f"/sys/module/{m}/initstate", "live", RO)
    for m in BUILTIN:  # built into Debian's kernel: /sys/module/NAME without initstate, listed in modules.builtin
        t.dir(f"/sys/module/{m}/drivers")
    t.file(f"/lib/modules/{k.meta['kernel']}/modules.builtin",
           "".join(f"kernel/drivers/cxl/{'core/' if m == 'cxl_core' else ''}{m}.ko\n" for m in BUILTIN), RO)
    state = k.state()
    state["cxl"] = {"ids": [], "next": {}, "windows": {}, "regions": {}, "hdm_end": {}, "endpoints": {}}
    k.save_state(state)


def root_decoder(k: SimKernel, path: str, start: int, size: int, ways: int, gran: int, targets: str,
                 ram: bool = True, pmem: bool = True) -> None:
    """A CXL window (CFMWS) as cxl_acpi shows it."""
    decoder(k, path, "root", ways, gran, targets)
    for name, value, mode in (("cap_pmem", int(pmem), RO), ("cap_ram", int(ram), RO), ("cap_type2", 1, RO),
                              ("cap_type3", 1, RO), ("qos_class", 0, RO), ("create_ram_region", "", RW),
                              ("create_pmem_region", "", RW), ("delete_region", "", WO)):
        k.tree.file(f"{path}/{name}", value, mode)
    k.tree.set(f"{path}/start", _hex(start))
    k.tree.set(f"{path}/size", _hex(size))


def lay_out(k: SimKernel, spec: CxlDef) -> None:
    """The bus as cxl_acpi, cxl_pci, cxl_port and cxl_mem leave it at boot: windows, ports, memdevs, no region."""
    t = k.tree
    base(k, spec.modules)
    bridges = {hb.name: hb for hb in spec.host_bridges}
    for hb in spec.host_bridges:
        t.link(f"{ROOT}/dport{hb.uid}", f"../../../{hb.name}")
    for i, w in enumerate(spec.windows):
        root_decoder(k, f"{ROOT}/decoder0.{i}", w.start, w.size, len(w.host_bridges), w.granularity,
                     ",".join(str(bridges[h].uid) for h in w.host_bridges), w.ram, w.pmem)
    state = k.state()
    cx = state["cxl"]
    cx["ids"] = list(range(spec.nvdimm_regions))
    cx["next"] = {f"decoder0.{i}": alloc_id(cx) for i in range(len(spec.windows))}
    cx["windows"] = {f"decoder0.{i}": {"node": w.node, "hbs": list(w.host_bridges)}
                     for i, w in enumerate(spec.windows)}
    k.save_state(state)
    for i in range(len(spec.windows)):
        next_names(k, f"decoder0.{i}")
    # ports: host bridges first, then one endpoint per memdev, numbered from 1
    n = 1
    hb_port = {}
    for hb in spec.host_bridges:
        path = f"{ROOT}/port{n}"
        port(k, path, f"/sys/devices/{hb.name}")
        t.link(f"{path}/parent_dport", f"../../../../{hb.name}")
        for j, rp in enumerate(hb.root_ports):
            t.link(f"{path}/dport{j}", f"../../../../{hb.name}/{rp}")
            t.file(f"/sys/devices/{hb.name}/{rp}/numa_node", hb.numa_node, RO)
        for d in range(spec.decoders_per_port if len(hb.root_ports) > 1 else 1):
            decoder(k, f"{path}/decoder{n}.{d}", "switch", targets="0")
        hb_port[hb.name] = (f"port{n}", path)
        n += 1
    rp_bridge = {rp: hb for hb in spec.host_bridges for rp in hb.root_ports}
    for i, m in enumerate(spec.memdevs):
        hb = rp_bridge[m.root_port]
        pci_dir = f"/sys/devices/{hb.name}/{m.root_port}/{m.pci}"
        mem = f"{pci_dir}/mem{i}"
        t.new_dir(mem, {"dev": (f"250:{i}", RO), "firmware_version": ("BWFW VERSION 00", RO),
                        "label_storage_size": (0, RO), "numa_node": (hb.numa_node, RO), "payload_max": (2048, RO),
                        "serial": (_hex(m.serial), RO), "uevent": ("", RW)})
        t.file(f"{mem}/ram/size", _hex(m.ram_size), RO)
        t.file(f"{mem}/pmem/size", _hex(m.pmem_size), RO)
        t.link(f"{mem}/driver", f"{_up(mem)}bus/cxl/drivers/cxl_mem")
        t.link(f"{mem}/subsystem", f"{_up(mem)}bus/cxl")
        for attr, value in (("current_link_speed", m.link[0]), ("current_link_width", m.link[1]),
                            ("max_link_speed", m.link[0]), ("max_link_width", m.link[1]),
                            ("numa_node", hb.numa_node), ("vendor", "0x8086"), ("class", "0x050210")):
            t.file(f"{pci_dir}/{attr}", value, RO)
        t.link(f"/sys/bus/pci/devices/{m.pci}", "../../.." + pci_dir[4:])
        _link_bus(k, f"mem{i}", mem)
        port_name, port_path = hb_port[hb.name]
        ep = f"{port_path}/endpoint{n}"
        port(k, ep, mem)
        t.link(f"{ep}/parent_dport", f"../../../../../{hb.name}/{m.root_port}")
        for d in range(spec.decoders_per_port):
            decoder(k, f"{ep}/decoder{n}.{d}", "endpoint")
        state = k.state()
        state["cxl"]["hdm_end"][f"endpoint{n}"] = -1
        state["cxl"]["endpoints"][f"endpoint{n}"] = {
            "memdev": f"mem{i}", "ram": m.ram_size, "pmem": m.pmem_size, "hb": hb.name,
            "dport": hb.root_ports.index(m.root_port), "port": port_name}
        k.save_state(state)
        n += 1


def alloc_id(cx: dict) -> int:
    used = set(cx["ids"])
    i = 0
    while i in used:
        i += 1
    cx["ids"].append(i)
    return i


def _einval_int(value: str, base: int = 0) -> int:
    try:
        return int(value.strip(), base)
    except ValueError:
        raise einval(f"not a number: {value.strip()!r}") from None


def _err(code: int, msg: str) -> OSError:
    return OSError(code, os.strerror(code) + f" ({msg})")


def _path(k: SimKernel, name: str) -> str:
    """The /sys/devices path of bus device ``name``."""
    real = os.path.realpath(k.tree.local(f"{DEV}/{name}"))
    return "/" + os.path.relpath(real, k.tree.root)


def _read(k: SimKernel, name: str, attr: str) -> str:
    return k.tree.read(f"{_path(k, name)}/{attr}").strip()


def _set(k: SimKernel, name: str, attr: str, value: str | int) -> None:
    k.tree.set(f"{_path(k, name)}/{attr}", value)


def _root_of(k: SimKernel, region: str) -> str:
    return os.path.basename(os.path.dirname(_path(k, region)))


def _region_state(k: SimKernel, region: str) -> dict:
    try:
        return k.state()["cxl"]["regions"][region]
    except KeyError:
        raise _err(errno.ENODEV, f"{region} is gone") from None


def _save_region(k: SimKernel, region: str, info: dict) -> None:
    state = k.state()
    state["cxl"]["regions"][region] = info
    k.save_state(state)


# -- root decoder: create / delete -------------------------------------------------------------------------

@rule(rf"{DEV}/decoder0\.\d+/create_(ram|pmem)_region")
def _create_region(k: SimKernel, path: str, value: str) -> None:
    root = path.split("/")[-2]
    mode = "ram" if path.endswith("create_ram_region") else "pmem"
    m = re.fullmatch(r"region(\d+)", value.strip())
    if not m:
        raise einval(f"expected regionN, got {value.strip()!r}")
    state = k.state()
    cx = state["cxl"]
    want = cx["next"][root]
    if int(m.group(1)) != want:
        raise ebusy(f"the next region of {root} is region{want}")
    name = f"region{want}"
    cx["next"][root] = alloc_id(cx)
    cx["regions"][name] = {"state": IDLE, "mode": mode, "id": want, "ways": 0, "targets": {}}
    k.save_state(state)
    base = f"{_path(k, root)}/{name}"
    k.tree.new_dir(base, {"commit": (0, RW), "devtype": ("cxl_region", RO), "interleave_granularity": (0, RW),
                          "interleave_ways": (0, RW), "modalias": ("cxl:t6", RO), "mode": (mode, RO),
                          "resource": (_hex(NO_ADDR), RO), "size": ("0x0", RW),
                          "uevent": ("DEVTYPE=cxl_region\nMODALIAS=cxl:t6", RW),
                          "uuid": ("", RO if mode == "ram" else RW)})
    for a in ("access0", "access1"):
        k.tree.dir(f"{base}/{a}")
    k.tree.link(f"{base}/subsystem", f"{_up(base)}bus/cxl")
    _link_bus(k, name, base)
    next_names(k, root)


def next_names(k: SimKernel, root: str) -> None:
    nxt = f"region{k.state()['cxl']['next'][root]}"
    for attr in ("create_ram_region", "create_pmem_region"):
        _set(k, root, attr, nxt)


@rule(rf"{DEV}/decoder0\.\d+/delete_region")
def _delete_region(k: SimKernel, path: str, value: str) -> None:
    root = path.split("/")[-2]
    name = value.strip()
    if name not in k.state()["cxl"]["regions"] or _root_of(k, name) != root:
        raise _err(errno.ENODEV, f"{name!r} is not a region of {root}")
    info = _region_state(k, name)
    if info["state"] == COMMIT:
        _decommit(k, name)
    for pos in sorted(_region_state(k, name)["targets"], key=int):
        _detach(k, name, int(pos))
    base = _path(k, name)
    k.tree.remove_tree(base)
    k.tree.local(f"{DEV}/{name}").unlink()
    state = k.state()
    cx = state["cxl"]
    del cx["regions"][name]
    rid, nxt = info["id"], cx["next"][root]
    if rid < nxt:  # cxl_region_release: reuse the idled id rather than the cached next one
        cx["ids"].remove(nxt)
        cx["next"][root] = rid
    else:
        cx["ids"].remove(rid)
    k.save_state(state)
    next_names(k, root)


# -- region attributes --------------------------------------------------------------------------------------

def _region_of(path: str) -> str:
    return path.split("/")[-2]


def _root_geometry(k: SimKernel, region: str) -> tuple[str, int, int]:
    root = _root_of(k, region)
    return root, int(_read(k, root, "interleave_ways")), int(_read(k, root, "interleave_granularity"))


@rule(rf"{DEV}/region\d+/interleave_ways")
def _ways(k: SimKernel, path: str, value: str) -> None:
    region = _region_of(path)
    val = _einval_int(value)
    _, rways, _ = _root_geometry(k, region)
    if val not in WAYS:
        raise einval(f"interleave_ways {val}: one of {', '.join(map(str, WAYS))}")
    q, r = divmod(val, rways)
    if r or q & (q - 1):
        raise einval(f"interleave_ways {val}: not a power-of-two multiple of the window's {rways}")
    info = _region_state(k, region)
    if info["state"] >= INTERLEAVE_ACTIVE:
        raise ebusy("the region's size is set")
    base = _path(k, region)
    for i in range(max(info["ways"], val)):
        target = f"{base}/target{i}"
        if i < val and not k.tree.exists(target):
            k.tree.file(target, "", RW)
        elif i >= val and k.tree.exists(target):
            k.tree.local(target).unlink()
    info["ways"] = val
    _save_region(k, region, info)
    k.tree.set(path, val)


@rule(rf"{DEV}/region\d+/interleave_granularity")
def _granularity(k: SimKernel, path: str, value: str) -> None:
    region = _region_of(path)
    val = _einval_int(value)
    if val < 256 or val > 16384 or val & (val - 1):
        raise einval(f"interleave_granularity {val}: a power of two from 256 to 16384")
    _, rways, rgran = _root_geometry(k, region)
    if rways > 1 and val != rgran:
        raise einval(f"interleave_granularity {val}: the window interleaves at {rgran}")
    if _region_state(k, region)["state"] >= INTERLEAVE_ACTIVE:
        raise ebusy("the region's size is set")
    k.tree.set(path, val)


@rule(rf"{DEV}/region\d+/size")
def _size(k: SimKernel, path: str, value: str) -> None:
    region = _region_of(path)
    val = _einval_int(value)
    info = _region_state(k, region)
    current = int(_read(k, region, "size"), 0)
    if val == 0:
        if info["state"] >= ACTIVE:
            raise ebusy("every target is attached")
        info["state"] = IDLE
        _save_region(k, region, info)
        _set(k, region, "resource", _hex(NO_ADDR))
        k.tree.set(path, "0x0")
        return
    if current == val:
        return
    if current:
        raise ebusy("free the size first (size=0)")
    ways, gran = info["ways"], int(_read(k, region, "interleave_granularity"))
    if not ways or not gran or (info["mode"] == "pmem" and not _read(k, region, "uuid")):
        raise _err(errno.ENXIO, "interleave_ways and interleave_granularity first")
    if val % (MiB256 * ways):
        raise einval(f"size {val}: a multiple of 256 MiB x {ways}")
    root = _root_of(k, region)
    start = int(_read(k, root, "start"), 0)
    end = start + int(_read(k, root, "size"), 0)
    taken = sorted((int(_read(k, r, "resource"), 0), int(_read(k, r, "size"), 0))
                   for r in k.state()["cxl"]["regions"] if r != region and _root_of(k, r) == root
                   and int(_read(k, r, "size"), 0))
    at = start
    for s, n in taken:
        if at + val <= s:
            break
        at = max(at, s + n)
    if at + val > end:
        raise _err(errno.ENOSPC, f"no {val} bytes free in {root}")
    _set(k, region, "resource", _hex(at))
    k.tree.set(path, _hex(val))
    info["state"] = INTERLEAVE_ACTIVE
    _save_region(k, region, info)


@rule(rf"{DEV}/region\d+/target\d+")
def _target(k: SimKernel, path: str, value: str) -> None:
    region = _region_of(path)
    pos = int(path.rsplit("target", 1)[1])
    name = value.strip()
    if not name:
        info = _region_state(k, region)
        if pos >= info["ways"]:
            raise _err(errno.ENXIO, f"position {pos} out of range")
        if str(pos) in info["targets"]:
            if info["state"] == COMMIT:
                _decommit(k, region)
            _detach(k, region, pos)
        return
    _attach(k, region, pos, name)


def _attach(k: SimKernel, region: str, pos: int, name: str) -> None:
    if not k.tree.local(f"{DEV}/{name}").is_symlink():
        raise _err(errno.ENODEV, f"no {name} on the CXL bus")
    if _read(k, name, "devtype") != "cxl_decoder_endpoint":
        raise einval(f"{name} is not an endpoint decoder")
    info = _region_state(k, region)
    if _read(k, name, "mode") != info["mode"]:
        raise einval(f"{name} is in mode {_read(k, name, 'mode')}, the region is {info['mode']}")
    if info["state"] > INTERLEAVE_ACTIVE:
        raise ebusy(f"{region} already has every target")
    if info["state"] < INTERLEAVE_ACTIVE:
        raise _err(errno.ENXIO, f"{region}: set interleave_ways, interleave_granularity and size first")
    if pos >= info["ways"]:
        raise _err(errno.ENXIO, f"position {pos} out of range")
    if info["targets"].get(str(pos)) == name:
        return
    if str(pos) in info["targets"] or _read(k, name, "region"):
        raise ebusy(f"{name} or position {pos} is taken")
    if int(_read(k, name, "dpa_size"), 0) == 0:
        raise _err(errno.ENXIO, f"{name} has no DPA (dpa_size)")
    endpoint = os.path.basename(os.path.dirname(_path(k, name)))
    for other_pos, other in info["targets"].items():  # cxl_region_validate_position: one memdev, one position
        if os.path.basename(os.path.dirname(_path(k, other))) == endpoint:
            raise ebusy(f"{endpoint}'s memdev is already at position {other_pos} via {other}")
    ep = k.state()["cxl"]["endpoints"][endpoint]
    root = _root_of(k, region)
    hbs = k.state()["cxl"]["windows"][root]["hbs"]
    if ep["hb"] not in hbs:
        raise _err(errno.ENXIO, f"{name}: its host bridge {ep['hb']} is not in {root}")
    if hbs[pos % len(hbs)] != ep["hb"]:
        raise _err(errno.ENXIO, f"{name}: position {pos} belongs to host bridge {hbs[pos % len(hbs)]}")
    if int(_read(k, name, "dpa_size"), 0) * info["ways"] != int(_read(k, region, "size"), 0):
        raise einval(f"{name}: dpa_size x {info['ways']} is not the region's size")
    info["targets"][str(pos)] = name
    _set(k, name, "region", region)
    _set(k, name, "interleave_ways", info["ways"])
    _set(k, name, "interleave_granularity", _read(k, region, "interleave_granularity"))
    k.tree.set(f"{_path(k, region)}/target{pos}", name)
    if len(info["targets"]) == info["ways"]:
        info["state"] = ACTIVE
        _setup_targets(k, region, info)
    _save_region(k, region, info)


def _switch_decoder(k: SimKernel, region: str, port: str) -> str:
    """The switch decoder of ``port`` that decodes ``region`` (the first free one, in id order)."""
    n = port.removeprefix("port")
    names = sorted((d for d in os.listdir(k.tree.local(_path(k, port))) if d.startswith(f"decoder{n}.")),
                   key=lambda d: int(d.split(".")[1]))
    for d in names:
        if _read(k, d, "region") in ("", region):
            return d
    raise _err(errno.ENXIO, f"{port} has no free decoder")


def _setup_targets(k: SimKernel, region: str, info: dict) -> None:
    """Every position filled: the host bridges' decoders get the region's dports in position order."""
    eps = k.state()["cxl"]["endpoints"]
    by_port: dict[str, list[int]] = {}
    _, rways, _ = _root_geometry(k, region)
    gran = int(_read(k, region, "interleave_granularity"))
    start, size = _read(k, region, "resource"), _read(k, region, "size")
    for pos in range(info["ways"]):
        dec = info["targets"][str(pos)]
        ep = eps[os.path.basename(os.path.dirname(_path(k, dec)))]
        by_port.setdefault(ep["port"], []).append(ep["dport"])
        _set(k, dec, "start", start)
        _set(k, dec, "size", size)
    for port, dports in by_port.items():
        d = _switch_decoder(k, region, port)
        _set(k, d, "region", region)
        _set(k, d, "interleave_ways", len(dports))
        _set(k, d, "interleave_granularity", gran * rways)
        _set(k, d, "target_list", ",".join(map(str, dports)))
    info["switch"] = {p: _switch_decoder(k, region, p) for p in by_port}


def program(k: SimKernel, decoders: list[str], region: str, start: int, size: int) -> None:
    """What a committed region leaves in its decoders: the region, its HPA range (firmware-committed regions)."""
    for d in decoders:
        _set(k, d, "region", region)
        _set(k, d, "start", _hex(start))
        _set(k, d, "size", _hex(size))


def _detach(k: SimKernel, region: str, pos: int) -> None:
    info = _region_state(k, region)
    name = info["targets"].pop(str(pos))
    _set(k, name, "region", "")
    _set(k, name, "start", "0x0")
    _set(k, name, "size", "0x0")
    k.tree.set(f"{_path(k, region)}/target{pos}", "")
    if not info["targets"]:
        for d in info.pop("switch", {}).values():
            _set(k, d, "region", "")
    info["state"] = INTERLEAVE_ACTIVE
    _save_region(k, region, info)


def _ports_of(k: SimKernel, info: dict) -> list[str]:
    eps = k.state()["cxl"]["endpoints"]
    names = [os.path.basename(os.path.dirname(_path(k, d))) for d in info["targets"].values()]
    return sorted({eps[e]["port"] for e in names}) + names


@rule(rf"{DEV}/region\d+/commit")
def _commit(k: SimKernel, path: str, value: str) -> None:
    region = _region_of(path)
    on = kstrtobool(value)
    info = _region_state(k, region)
    if on and info["state"] >= COMMIT or not on and info["state"] < COMMIT:
        return
    if on and info["state"] < ACTIVE:
        raise _err(errno.ENXIO, f"{region}: not every target is attached")
    if on and _hypervisor(k):
        # cxl_region_invalidate_memregion(): no cache invalidation under a hypervisor (without
        # CONFIG_CXL_REGION_INVALIDATION_TEST, as Debian builds it) — "Failed to synchronize CPU cache state"
        raise _err(errno.ENXIO, "Failed to synchronize CPU cache state (the CPU has the hypervisor bit)")
    if not on:
        _decommit(k, region)
        return
    for d in info.get("switch", {}).values():
        _set(k, d, "start", _read(k, region, "resource"))
        _set(k, d, "size", _read(k, region, "size"))
    for port in _ports_of(k, info):
        _set(k, port, "decoders_committed", int(_read(k, port, "decoders_committed")) + 1)
    info["state"] = COMMIT
    _save_region(k, region, info)
    k.tree.set(path, 1)


def _hypervisor(k: SimKernel) -> bool:
    cpuinfo = k.tree.local("/proc/cpuinfo")
    return cpuinfo.exists() and any(line.startswith("flags") and " hypervisor" in line
                                    for line in cpuinfo.read_text().splitlines())


def _decommit(k: SimKernel, region: str) -> None:
    """commit=0: release the region driver (its DAX device goes), then reset the decoders."""
    if k.tree.local(f"{_path(k, region)}/driver").is_symlink():
        _unbind_region(k, region)
    info = _region_state(k, region)
    for d in info.get("switch", {}).values():
        _set(k, d, "start", "0x0")
        _set(k, d, "size", "0x0")
    for port in _ports_of(k, info):
        _set(k, port, "decoders_committed", max(0, int(_read(k, port, "decoders_committed")) - 1))
    info["state"] = ACTIVE
    _save_region(k, region, info)
    _set(k, region, "commit", 0)


# -- the cxl_region driver: the DAX device ------------------------------------------------------------------

@rule(rf"{BUS}/drivers/cxl_region/bind")
def _bind_region(k: SimKernel, path: str, value: str) -> None:
    region = value.strip()
    if region not in k.state()["cxl"]["regions"]:
        raise _err(errno.ENODEV, f"no region {region!r}")
    base = _path(k, region)
    if k.tree.local(f"{base}/driver").is_symlink():
        raise ebusy(f"{region} is bound")
    info = _region_state(k, region)
    if info["state"] != COMMIT:
        raise _err(errno.ENXIO, f"{region} is not committed")
    k.tree.link(f"{base}/driver", f"{_up(base)}bus/cxl/drivers/cxl_region")
    if info["mode"] == "ram":
        add_dax(k, region)


def add_dax(k: SimKernel, region: str) -> str:
    """What cxl_region + dax_cxl do for a RAM region: ``dax_regionN`` and ``daxN.0`` (memmap_on_memory 1),
    taken by kmem at once and hot-added as the kernel's auto-online policy says."""
    info = _region_state(k, region)
    rid = info["id"]
    base = _path(k, region)
    dreg = f"{base}/dax_region{rid}"
    k.tree.new_dir(dreg, {"devtype": ("cxl_dax_region", RO), "modalias": ("cxl:t8", RO), "uevent": ("", RW)})
    k.tree.link(f"{dreg}/driver", f"{_up(dreg)}bus/cxl/drivers/cxl_dax_region")
    _link_bus(k, f"dax_region{rid}", dreg)
    start, size = int(_read(k, region, "resource"), 0), int(_read(k, region, "size"), 0)
    for attr, value in (("id", rid), ("size", size), ("align", 2 * 1024**2), ("available_size", 0)):
        k.tree.file(f"{dreg}/dax_region/{attr}", value, RO)
    name = f"dax{rid}.0"
    dev = f"{dreg}/{name}"
    node = k.state()["cxl"]["windows"][_root_of(k, region)]["node"]
    k.tree.new_dir(dev, {"align": (2 * 1024**2, RW), "dev": (f"252:{rid}", RO), "memmap_on_memory": (1, RW),
                         "modalias": ("dax:t0*", RO), "numa_node": (-1, RO), "resource": (_hex(start), RO),
                         "size": (size, RW), "target_node": (node, RO),
                         "uevent": (f"MAJOR=252\nMINOR={rid}\nDEVNAME={name}\nDEVTYPE=dax", RW)})
    for attr, value in (("start", _hex(start)), ("end", _hex(start + size - 1)), ("page_offset", "0x0")):
        k.tree.file(f"{dev}/mapping0/{attr}", value, RO)
    k.tree.link(f"{dev}/subsystem", f"{_up(dev)}bus/dax")
    k.tree.link(f"{simdax.BUS}/devices/{name}", "../../.." + dev[4:])
    for drv in simdax.DRIVERS:
        for attr in ("bind", "unbind", "new_id", "remove_id"):
            if not k.tree.exists(f"{simdax.BUS}/drivers/{drv}/{attr}"):
                k.tree.file(f"{simdax.BUS}/drivers/{drv}/{attr}", "", WO)
    state = k.state()
    state.setdefault("dax", {})[name] = {"start": start, "size": size, "node": node}
    k.save_state(state)
    simdax.attach(k, name, "kmem")  # dax_cxl marks the range kmem's: it binds at once
    return name


def _unbind_region(k: SimKernel, region: str) -> None:
    info = _region_state(k, region)
    base = _path(k, region)
    name = f"dax{info['id']}.0"
    if k.tree.local(f"{simdax.BUS}/devices/{name}").is_symlink():
        simdax.unplug(k, name)  # EBUSY while kmem has it (the kernel would strand its memory)
    dreg = f"{base}/dax_region{info['id']}"
    if k.tree.exists(dreg):
        k.tree.remove_tree(dreg)
        k.tree.local(f"{DEV}/dax_region{info['id']}").unlink(missing_ok=True)
    k.tree.local(f"{base}/driver").unlink()


@rule(rf"{BUS}/drivers/cxl_region/unbind")
def _unbind(k: SimKernel, path: str, value: str) -> None:
    region = value.strip()
    if region not in k.state()["cxl"]["regions"] or not k.tree.local(f"{_path(k, region)}/driver").is_symlink():
        raise _err(errno.ENODEV, f"{region!r} is not bound")
    _unbind_region(k, region)


# -- endpoint decoders: mode and DPA -------------------------------------------------------------------------

def _endpoint(k: SimKernel, decoder: str) -> tuple[str, dict]:
    endpoint = os.path.basename(os.path.dirname(_path(k, decoder)))
    return endpoint, k.state()["cxl"]["endpoints"][endpoint]


@rule(rf"{DEV}/decoder\d+\.\d+/mode")
def _mode(k: SimKernel, path: str, value: str) -> None:
    dec = path.split("/")[-2]
    word = value.strip()
    if word not in ("ram", "pmem"):
        raise einval(f"mode {word!r}: ram or pmem")
    if int(_read(k, dec, "size"), 0) and _read(k, dec, "region"):
        raise ebusy(f"{dec} decodes")
    _, ep = _endpoint(k, dec)
    if not ep[word]:
        raise _err(errno.ENXIO, f"the device has no {word} partition")
    if int(_read(k, dec, "dpa_size"), 0):
        raise ebusy(f"{dec} has DPA: free it first (dpa_size=0)")
    k.tree.set(path, word)


@rule(rf"{DEV}/decoder\d+\.\d+/dpa_size")
def _dpa_size(k: SimKernel, path: str, value: str) -> None:
    dec = path.split("/")[-2]
    size = _einval_int(value)
    if size % MiB256:
        raise einval(f"dpa_size {size}: a multiple of 256 MiB")
    endpoint, ep = _endpoint(k, dec)
    did = int(dec.split(".")[1])
    state = k.state()
    end = state["cxl"]["hdm_end"][endpoint]
    if int(_read(k, dec, "dpa_size"), 0):  # free first (cxl_dpa_free)
        if _read(k, dec, "region"):
            raise ebusy(f"{dec} is in {_read(k, dec, 'region')}")
        if did != end:
            raise ebusy(f"free decoder{endpoint[8:]}.{end} first")
        k.tree.set(path, _hex(0, 16))
        _set(k, dec, "dpa_resource", _hex(NO_ADDR))
        state["cxl"]["hdm_end"][endpoint] = end = did - 1
        k.save_state(state)
    if size == 0:
        return
    mode = _read(k, dec, "mode")
    if mode not in ("ram", "pmem"):
        raise einval(f"{dec}: set mode first")
    if did != end + 1:
        raise ebusy(f"{dec}: decoder{endpoint[8:]}.{end + 1} is next")
    used = 0
    for d in range(did):
        other = f"decoder{endpoint[8:]}.{d}"
        if _read(k, other, "mode") == mode:
            used += int(_read(k, other, "dpa_size"), 0)
    base = 0 if mode == "ram" else ep["ram"]
    if used + size > ep[mode]:
        raise _err(errno.ENOSPC, f"{ep[mode] - used} bytes of {mode} left")
    k.tree.set(path, _hex(size, 16))
    _set(k, dec, "dpa_resource", _hex(base + used))
    state["cxl"]["hdm_end"][endpoint] = did
    k.save_state(state)


def node_of_window(k: SimKernel, root: str) -> int:
    return k.state()["cxl"]["windows"][root]["node"]


def create_region(k: SimKernel, root: str, decoders: list[str], size_per_device: int,
                  granularity: int = 256) -> str:
    """A RAM region over ``decoders`` (endpoint decoders in position order) made through the sysfs ABI, committed
    and bound — what firmware (or ``cxl create-region``) leaves at boot. Returns the region's name."""
    name = k.tree.read(f"{_path(k, root)}/create_ram_region").strip()
    writes = [(f"{DEV}/{root}/create_ram_region", name), (f"{DEV}/{name}/interleave_granularity", str(granularity)),
              (f"{DEV}/{name}/interleave_ways", str(len(decoders))),
              (f"{DEV}/{name}/size", str(size_per_device * len(decoders)))]
    for d in decoders:
        writes += [(f"{DEV}/{d}/mode", "ram"), (f"{DEV}/{d}/dpa_size", str(size_per_device))]
    writes += [(f"{DEV}/{name}/target{i}", d) for i, d in enumerate(decoders)]
    writes += [(f"{DEV}/{name}/commit", "1"), (f"{BUS}/drivers/cxl_region/bind", name)]
    for path, value in writes:
        k.write(path, value)
    return name


__all__ = ["CxlDef", "HostBridgeDef", "MemdevDef", "WindowDef", "create_region", "lay_out"]
