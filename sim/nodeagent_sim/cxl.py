"""Emulated CXL bus: ``/sys/bus/cxl/devices`` as the kernel's CXL drivers lay it out (the region ABI's rules and
errnos are in :mod:`nodeagent_sim.cxl_region`).

Layout as captured on a real 6.12 guest (QEMU 10, two cxl-type3 memdevs behind one host bridge;
``tests/realkernel/captured/cxl-*``): ``root0`` (ACPI0017) with one root decoder ``decoder0.N`` per window (CFMWS)
and a ``dportUID`` per host bridge; a port per host bridge with 4 switch decoders when it has more than one root
port; an endpoint per memdev (numbered after the host bridges, in probe order) with 4 endpoint decoders; the
memdev ``memN`` under its PCI function with ``serial``, ``ram/size``, ``pmem/size``, ``firmware_version``;
``cxl_core`` and ``cxl_port`` built in (``modules.builtin``), the rest loaded modules.
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass

from . import devnodes
from .kernel import SimKernel, einval
from .tree import RO, RW, WO

BUS = "/sys/bus/cxl"
DEV = f"{BUS}/devices"
ROOT = "/sys/devices/platform/ACPI0017:00/root0"
#: Where a rule's attribute is: through the bus's links (``/sys/bus/cxl/devices/region0/commit``) or where they
#: lead (``/sys/devices/platform/ACPI0017:00/root0/decoder0.0/region0/commit``) — the kernel takes both spellings.
AT = rf"(?:{DEV}|/sys/devices/platform/ACPI0017:[0-9]+/root[0-9]+(?:/[a-z]+[0-9.]+)*)"
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
    memdevs: tuple[MemdevDef, ...]  # in cxl_pci's probe order: memN is numbered in this order
    #: the memdevs (indices into ``memdevs``) in cxl_mem's probe order, which numbers the endpoints: a probe of its
    #: own, so on a real boot it need not follow the memdevs' (seen in the 6.12 guest); None: the same order
    endpoint_order: tuple[int, ...] | None = None
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


def bind(k: SimKernel, path: str, driver: str) -> None:
    """The driver core's links for device ``path`` bound to ``driver``: ``driver`` and the driver's link back."""
    k.tree.link(f"{path}/driver", f"{_up(path)}bus/cxl/drivers/{driver}")
    k.tree.link(f"{BUS}/drivers/{driver}/{os.path.basename(path)}", "../../../.." + path[4:])


def port(k: SimKernel, path: str, uport: str) -> None:
    """A port (host bridge or endpoint) as cxl_port leaves it: bound (cxl-cli lists a port without a driver as
    disabled and hides its memdev from ``cxl list -M``)."""
    t = k.tree
    _files(k, path, {"decoders_committed": (0, RO), "devtype": ("cxl_port", RO), "modalias": ("cxl:t3", RO),
                     "uevent": ("", RW)})
    t.link(f"{path}/uport", _up(path) + uport[5:])
    t.link(f"{path}/subsystem", f"{_up(path)}bus/cxl")
    _link_bus(k, os.path.basename(path), path)
    bind(k, path, "cxl_port")


#: the cxl memdev class's char major (dynamic: /dev/cxl/memN)
MEM_MAJOR = 250


def memdev(k: SimKernel, path: str, index: int, *, serial: int, ram_size: int, pmem_size: int = 0,
           numa_node: int = -1) -> None:
    """``memN`` under its PCI function as cxl_pci makes it and cxl_mem binds it: what libcxl's ``add_cxl_memdev``
    needs (``/dev/cxl/memN``, ``payload_max``, ``label_storage_size``, ``serial``, ``firmware_version``...)."""
    t = k.tree
    t.new_dir(path, {"dev": (f"{MEM_MAJOR}:{index}", RO), "firmware_version": ("BWFW VERSION 00", RO),
                     "label_storage_size": (0, RO), "numa_node": (numa_node, RO), "payload_max": (2048, RO),
                     "serial": (_hex(serial), RO),
                     "uevent": (f"MAJOR={MEM_MAJOR}\nMINOR={index}\nDEVNAME=cxl/mem{index}", RW)})
    t.file(f"{path}/ram/size", _hex(ram_size), RO)
    t.file(f"{path}/pmem/size", _hex(pmem_size), RO)
    t.link(f"{path}/subsystem", f"{_up(path)}bus/cxl")
    _link_bus(k, f"mem{index}", path)
    bind(k, path, "cxl_mem")
    devnodes.add(k, path, MEM_MAJOR, index, f"cxl/mem{index}")


def base(k: SimKernel, modules: tuple[str, ...]) -> None:
    """root0 (ACPI0017), the CXL drivers, the loaded and built-in modules, and the bus's private state."""
    t = k.tree
    t.dir(ROOT)
    t.file(f"{ROOT}/devtype", "cxl_port", RO)
    t.file(f"{ROOT}/decoders_committed", 0, RO)
    t.link(f"{ROOT}/uport", "../../ACPI0017:00")
    t.link(f"{ROOT}/subsystem", f"{_up(ROOT)}bus/cxl")
    _link_bus(k, "root0", ROOT)
    for d in DRIVERS:
        for attr in ("bind", "unbind"):
            t.file(f"{BUS}/drivers/{d}/{attr}", "", WO)
    bind(k, ROOT, "cxl_port")
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


def nvdimm_bridge(k: SimKernel) -> None:
    """``nvdimm-bridge0`` under root0: cxl_acpi adds it when a root decoder is pmem-capable
    (``add_root_nvdimm_bridge`` in drivers/cxl/acpi.c, ``devm_cxl_add_nvdimm_bridge``); the 6.12 QEMU guest
    shows it beside root0 with ``devtype`` ``cxl_nvdimm_bridge`` (realkernel/cxl-bus-6.12-qemu10.txt)."""
    path = f"{ROOT}/nvdimm-bridge0"
    _files(k, path, {"devtype": ("cxl_nvdimm_bridge", RO), "modalias": ("cxl:t1", RO), "uevent": ("", RW)})
    k.tree.link(f"{path}/subsystem", f"{_up(path)}bus/cxl")
    _link_bus(k, "nvdimm-bridge0", path)


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
    if any(w.pmem for w in spec.windows):
        nvdimm_bridge(k)
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
        if len(hb.root_ports) > 1:
            for d in range(spec.decoders_per_port):
                decoder(k, f"{path}/decoder{n}.{d}", "switch", targets="0")
        else:  # cxl_port's passthrough decoder: interleave granularity PAGE_SIZE until a region programs it
            decoder(k, f"{path}/decoder{n}.0", "switch", gran=4096, targets="0")
        hb_port[hb.name] = (f"port{n}", path)
        if len(hb.root_ports) == 1:
            passthrough(k, f"port{n}")
        n += 1
    rp_bridge = {rp: hb for hb in spec.host_bridges for rp in hb.root_ports}
    mems = []
    for i, m in enumerate(spec.memdevs):
        hb = rp_bridge[m.root_port]
        mems.append((hb, _pci_memdev(k, i, m, hb.name, hb.numa_node)))
    order = spec.endpoint_order if spec.endpoint_order is not None else tuple(range(len(spec.memdevs)))
    for i in order:
        m, (hb, mem) = spec.memdevs[i], mems[i]
        port_name, port_path = hb_port[hb.name]
        _endpoint(k, n, i, m, mem, hb.name, hb.root_ports.index(m.root_port), port_name, port_path,
                  spec.decoders_per_port)
        n += 1


def _pci_memdev(k: SimKernel, i: int, m: MemdevDef, hb: str, numa_node: int) -> str:
    """Memdev ``memI`` under its PCI function behind root port ``m.root_port`` of host bridge ``hb`` (cxl_pci's
    probe); returns its path."""
    t = k.tree
    pci_dir = f"/sys/devices/{hb}/{m.root_port}/{m.pci}"
    mem = f"{pci_dir}/mem{i}"
    memdev(k, mem, i, serial=m.serial, ram_size=m.ram_size, pmem_size=m.pmem_size, numa_node=numa_node)
    for attr, value in (("current_link_speed", m.link[0]), ("current_link_width", m.link[1]),
                        ("max_link_speed", m.link[0]), ("max_link_width", m.link[1]),
                        ("numa_node", numa_node), ("vendor", "0x8086"), ("class", "0x050210")):
        t.file(f"{pci_dir}/{attr}", value, RO)
    t.link(f"/sys/bus/pci/devices/{m.pci}", "../../.." + pci_dir[4:])
    return mem


def _endpoint(k: SimKernel, n: int, i: int, m: MemdevDef, mem: str, hb: str, dport: int, port_name: str,
              port_path: str, decoders: int) -> list[str]:
    """Endpoint port ``endpointN`` of memdev ``memI`` under its host bridge's port (cxl_mem's probe); returns the
    names of the devices it added (the endpoint, then its decoders)."""
    t = k.tree
    ep = f"{port_path}/endpoint{n}"
    port(k, ep, mem)
    t.link(f"{ep}/parent_dport", f"../../../../../{hb}/{m.root_port}")
    for d in range(decoders):
        decoder(k, f"{ep}/decoder{n}.{d}", "endpoint")
    state = k.state()
    state["cxl"]["hdm_end"][f"endpoint{n}"] = -1
    state["cxl"]["endpoints"][f"endpoint{n}"] = {
        "memdev": f"mem{i}", "ram": m.ram_size, "pmem": m.pmem_size, "hb": hb, "dport": dport, "port": port_name}
    k.save_state(state)
    return [f"endpoint{n}"] + [f"decoder{n}.{d}" for d in range(decoders)]


def free_slots(k: SimKernel) -> list[tuple[str, str]]:
    """The root ports (host bridge, root port PCI address) with no memdev behind them: hot-plug slots."""
    t = k.tree
    taken = {(e["hb"], e["dport"]) for e in k.state()["cxl"]["endpoints"].values()}
    out = []
    for name in sorted(t.listdir(ROOT), key=lambda s: (len(s), s)):
        if not (name.startswith("port") and name[4:].isdigit()):
            continue
        hb = os.path.basename(t.readlink(f"{ROOT}/{name}/uport"))
        dports = sorted((int(d[5:]), os.path.basename(t.readlink(f"{ROOT}/{name}/{d}")))
                        for d in t.listdir(f"{ROOT}/{name}") if d.startswith("dport") and d[5:].isdigit())
        out += [(hb, rp) for j, rp in dports if (hb, j) not in taken]
    return out


def hot_add_memdev(k: SimKernel, serial: int, ram_size: int, slot: tuple[str, str] | None = None) -> list[str]:
    """A type-3 memdev hot-plugged into an empty root port (``slot``, or the first free one), as cxl_pci and
    cxl_mem probe it: ``memN`` (the next free id), its endpoint (the next port id) with its decoders, no region.
    Returns the names of the devices added, in the order the kernel announces them (memdev, endpoint, decoders).
    ValueError when no root port is free or ``slot`` is taken."""
    free = free_slots(k)
    if slot is None and not free:
        raise ValueError("no empty root port: every CXL root port has a memdev behind it")
    if slot is not None and slot not in free:
        raise ValueError(f"root port {slot[1]} of {slot[0]} is not an empty slot "
                         f"(free: {', '.join(rp for _, rp in free) or 'none'})")
    hb, rp = slot or free[0]
    t = k.tree
    port_name = next(n for n in t.listdir(ROOT) if n.startswith("port")
                     and os.path.basename(t.readlink(f"{ROOT}/{n}/uport")) == hb)
    port_path = f"{ROOT}/{port_name}"
    dport = next(int(d[5:]) for d in t.listdir(port_path)
                 if d.startswith("dport") and os.path.basename(t.readlink(f"{port_path}/{d}")) == rp)
    names = t.listdir(DEV)
    i = next(j for j in range(len(names) + 1) if f"mem{j}" not in names)
    n = 1 + max((int(re.sub(r"\D", "", d)) for d in names if re.fullmatch(r"(?:port|endpoint)\d+", d)), default=0)
    bus = int(rp.split(":")[1], 16)
    pci = f"{rp.split(':')[0]}:{(bus + 1 + dport) % 256:02x}:00.0"
    numa = int(t.read(f"/sys/devices/{hb}/{rp}/numa_node").strip())
    m = MemdevDef(serial, rp, pci, ram_size)
    mem = _pci_memdev(k, i, m, hb, numa)
    # as many decoders as the other endpoints have (the device's HDM decoder count; 4 on QEMU's type-3)
    decoders = max((len([d for d in t.listdir(_path(k, e)) if re.fullmatch(r"decoder\d+\.\d+", d)])
                    for e in k.state()["cxl"]["endpoints"]), default=4)
    return [f"mem{i}"] + _endpoint(k, n, i, m, mem, hb, dport, port_name, port_path, decoders)


def passthrough(k: SimKernel, port: str) -> None:
    """``port`` (a host bridge with one root port) has cxl_port's passthrough decoder: a region through it programs
    nothing there, so its ``decoders_committed`` stays 0 (6.12 guest, layout cxl-2hb: decoder1.0 shows the region,
    its range and granularity 256 — 4096 at boot — and port1/decoders_committed reads 0 after the commit)."""
    state = k.state()
    ports = state["cxl"].setdefault("passthrough", [])
    if port not in ports:
        ports.append(port)
        k.save_state(state)


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


def next_names(k: SimKernel, root: str) -> None:
    nxt = f"region{k.state()['cxl']['next'][root]}"
    for attr in ("create_ram_region", "create_pmem_region"):
        _set(k, root, attr, nxt)


def program(k: SimKernel, decoders: list[str], region: str, start: int, size: int) -> None:
    """What a committed region leaves in its decoders: the region, its HPA range (firmware-committed regions)."""
    for d in decoders:
        _set(k, d, "region", region)
        _set(k, d, "start", _hex(start))
        _set(k, d, "size", _hex(size))


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


from . import cxl_region as _cxl_region  # noqa: E402,F401  (registers the region ABI)
