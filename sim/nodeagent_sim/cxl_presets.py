"""Simulated nodes with a CXL bus (:mod:`nodeagent_sim.cxl`), registered in :data:`nodeagent_sim.presets.PRESETS`.

=======================  ============================================================================================
``qemu-cxl``             the real-kernel tier's CXL guest (``tests/realkernel``, layout ``cxl``): node 0 with 2 CPUs,
                         node 1 CPU-less DRAM, one 4 GiB window (decoder0.0 at 0x190000000, node 2) over host bridge
                         ``pci0000:0c`` with two root ports, two 256 MiB volatile memdevs (serials 0x4c454f0002 on
                         0c:01.0 = mem0, 0x4c454f0001 on 0c:00.0 = mem1, in the guest's probe order); no region.
``qemu-cxl-rp0first``    the same guest when the other memdev probed first (mem0 = serial 0x4c454f0001).
``qemu-cxl-ep-swapped``  qemu-cxl's memdev order, but cxl_mem attached them the other way round (endpoint2 is
                         mem1's): the endpoints are a probe of their own (seen on a second boot of the guest).
``qemu-cxl-rp0first-ep-swapped``  the same for qemu-cxl-rp0first.
``qemu-cxl-2hb``         the real-kernel tier's two-bridge CXL guest (layout ``cxl-2hb``): node 0 with 2 CPUs, node 1
                         CPU-less DRAM, node 2 an SRAT node covered by legacy pmem (fsdax, offline; nvdimm region0),
                         two host bridges (``pci0000:14``, ``pci0000:0c``: cxl_acpi's port order) with one root port and
                         one 256 MiB memdev each, three 4 GiB windows: decoder0.0 over 0c (node 3), decoder0.1 over
                         14 (node 4), decoder0.2 interleaving both (node 5); no region. mem0 = serial 0x4c454f0002
                         (under 14), as the guest probed them; ``-rp0first``: the other memdev first, ``-ep-swapped``:
                         the endpoints the other way.
``qemu-cxl-1md``         the real-kernel tier's one-memdev CXL guest (layout ``cxl-1md``, issue 51's shape): nodes 0-2
                         as ``qemu-cxl-2hb``'s (node 2 SRAT's legacy pmem, offline), one host bridge ``pci0000:0c``
                         with one root port and one 256 MiB memdev (serial 0x4c454f0001), one 4 GiB window
                         (decoder0.0, node 3: past SRAT's); no region.
``h100-cxl-memdevs``     h100-cxl with its two 2 TiB expanders as bare memdevs, one per socket's host bridge and
                         window (nodes 2, 3): the firmware left the HDM decoders to the OS, no region, no DAX device.
``h100-cxl-committed``   the same node as 6.3+ kernels boot it when the firmware committed the regions: region0 and
                         region1 committed and bound, dax0.0/dax1.0 taken by kmem and online (auto_online_blocks=online
                         → ZONE_NORMAL).
``h100-cxl-hmem``        socket 0's expander a bare memdev; socket 1's range soft-reserved (EFI_MEMORY_SP) without a
                         memdev the OS can manage, handed to ``dax_hmem`` as devdax ``dax1.0`` (target node 3).
``h100-cxl-slots``       two CXL root ports a socket, one 256 GiB bare memdev in the first of each, the second empty: a
                         memdev hot-plugged later (``sim hot-add --memdev``) needs a region of its own.
=======================  ============================================================================================
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import replace

from . import cxl as simcxl
from . import dax as simdax
from . import devnodes
from .kernel import SimKernel
from .presets import LAYERS, GiB, Preset, TiB, _h100, _qemu_3node
from .tree import RO, RW

MiB = 1024**2

QEMU_CXL = simcxl.CxlDef(
    windows=(simcxl.WindowDef(0x190000000, 4 * GiB, ("pci0000:0c",), node=2),),
    host_bridges=(simcxl.HostBridgeDef("pci0000:0c", 12, ("0000:0c:00.0", "0000:0c:01.0")),),
    memdevs=(simcxl.MemdevDef(0x4C454F0002, "0000:0c:01.0", "0000:0e:00.0", 256 * MiB),
             simcxl.MemdevDef(0x4C454F0001, "0000:0c:00.0", "0000:0d:00.0", 256 * MiB)),
)

#: The guest's two memdevs probe in either order (cxl_pci probes asynchronously): mem0/endpoint2 is the first one
#: probed. ``qemu-cxl`` is the order seen most (the second root port's device first), this one the other.
QEMU_CXL_RP0_FIRST = replace(QEMU_CXL, memdevs=QEMU_CXL.memdevs[::-1])

#: cxl_mem numbers the endpoints in a probe of its own: either memdev order can meet either endpoint order.
QEMU_CXL_EP_SWAPPED = replace(QEMU_CXL, endpoint_order=(1, 0))
QEMU_CXL_RP0_FIRST_EP_SWAPPED = replace(QEMU_CXL_RP0_FIRST, endpoint_order=(1, 0))

#: The two-bridge guest (tests/realkernel layout ``cxl-2hb``), as 6.12 laid it out: cxl_acpi made port1 for
#: pci0000:14 (ACPI0016:00) and port2 for pci0000:0c; the windows follow the CFMWS order, each on a node past SRAT's
#: (0-2): 3, 4, 5. libnvdimm's region0 (the legacy pmem) took region id 0, so the first CXL region is region1.
QEMU_CXL_2HB = simcxl.CxlDef(
    windows=(simcxl.WindowDef(0x1D0000000, 4 * GiB, ("pci0000:0c",), node=3),
             simcxl.WindowDef(0x2D0000000, 4 * GiB, ("pci0000:14",), node=4),
             simcxl.WindowDef(0x3D0000000, 4 * GiB, ("pci0000:0c", "pci0000:14"), node=5)),
    host_bridges=(simcxl.HostBridgeDef("pci0000:14", 20, ("0000:14:00.0",)),
                  simcxl.HostBridgeDef("pci0000:0c", 12, ("0000:0c:00.0",))),
    memdevs=(simcxl.MemdevDef(0x4C454F0002, "0000:14:00.0", "0000:15:00.0", 256 * MiB),
             simcxl.MemdevDef(0x4C454F0001, "0000:0c:00.0", "0000:0d:00.0", 256 * MiB)),
    nvdimm_regions=1,
)

#: The one-memdev guest (tests/realkernel layout ``cxl-1md``): one window past SRAT's nodes 0-2 (node 3), one host
#: bridge with one root port (cxl_port's passthrough decoder) and one memdev; the legacy pmem took region id 0.
QEMU_CXL_1MD = simcxl.CxlDef(
    windows=(simcxl.WindowDef(0x1D0000000, 4 * GiB, ("pci0000:0c",), node=3),),
    host_bridges=(simcxl.HostBridgeDef("pci0000:0c", 12, ("0000:0c:00.0",)),),
    memdevs=(simcxl.MemdevDef(0x4C454F0001, "0000:0c:00.0", "0000:0d:00.0", 256 * MiB),),
    nvdimm_regions=1,
)

#: h100-cxl's expanders (Astera Leo class, PCIe 5 x16): one host bridge and one window per socket.
H100_CXL = simcxl.CxlDef(
    windows=(simcxl.WindowDef(1 * TiB, 2 * TiB, ("pci0000:30",), node=2),
             simcxl.WindowDef(3 * TiB, 2 * TiB, ("pci0000:b0",), node=3)),
    host_bridges=(simcxl.HostBridgeDef("pci0000:30", 48, ("0000:30:01.0",), numa_node=0),
                  simcxl.HostBridgeDef("pci0000:b0", 176, ("0000:b0:01.0",), numa_node=1)),
    memdevs=(simcxl.MemdevDef(0x1D7E0000A001, "0000:30:01.0", "0000:31:00.0", 2 * TiB),
             simcxl.MemdevDef(0x1D7E0000A002, "0000:b0:01.0", "0000:b1:00.0", 2 * TiB)),
)

#: preset name → (its CXL bus, what happened at boot after the bus came up).
BUSES: dict[str, tuple[simcxl.CxlDef, Callable[[SimKernel], None] | None]] = {}


def _qemu_cxl() -> Preset:
    base = _qemu_3node()
    return replace(base, name="qemu-cxl", description="the real-kernel CXL guest: two 256 MiB memdevs, no region",
                   dax=(), cmdline="console=ttyS0", hostname="qemu-cxl", daxctl=True,  # the guest has ndctl 76.1
                   # -cpu max,hypervisor=off: no hypervisor CPUID bit (else a region commit fails)
                   cpu_flags=tuple(f for f in base.cpu_flags if f != "hypervisor"), hypervisor=None)


def _qemu_cxl_2hb(name: str = "qemu-cxl-2hb", how: str = "") -> Preset:
    base = _qemu_cxl()
    # nodes 0-1 online, node 2 an SRAT node whose memory is all legacy pmem (fsdax: no DAX device), and one node per
    # CXL window (3-5); the kernel has no SLIT entry past SRAT's nodes, so every distance is 20
    return replace(base, name=name, hostname="qemu-cxl-2hb", possible_nodes=6, cmdline="console=ttyS0 memmap=1G!6G",
                   description="the real-kernel CXL guest with two host bridges, one 256 MiB memdev each" + how,
                   distances={n: tuple(10 if m == n else 20 for m in range(6)) for n in range(6)}, node_tier={})


def _qemu_cxl_1md() -> Preset:
    base = _qemu_cxl_2hb()
    return replace(base, name="qemu-cxl-1md", hostname="qemu-cxl-1md", possible_nodes=4,
                   description="the real-kernel CXL guest with one 256 MiB memdev, its window past SRAT's node 2",
                   distances={n: tuple(10 if m == n else 20 for m in range(4)) for n in range(4)})


def _h100_memdevs(name: str, description: str) -> Preset:
    base = _h100(False)
    # Only the two windows reserve nodes past the SRAT ones (acpi_parse_cfmws): possible 0-3, not h100's 0-5.
    return replace(base, name=name, description=description, dax=(), daxctl=True, possible_nodes=4)


def _committed(k: SimKernel) -> None:
    """Firmware-committed regions as the kernel shows them after boot (the decoders, then kmem onlining)."""
    for root, endpoint in (("decoder0.0", 3), ("decoder0.1", 4)):
        simcxl.create_region(k, root, [f"decoder{endpoint}.0"], 2 * TiB)


def _hmem(k: SimKernel) -> None:
    """A soft-reserved range with no manageable memdev: dax_hmem makes ``hmem.1`` and a devdax device of it."""
    hmem(k, 1, 3 * TiB, 2 * TiB, node=3, host=1)


def hmem(k: SimKernel, region: int, start: int, size: int, node: int, host: int) -> str:
    """A soft-reserved (EFI_MEMORY_SP) range SRAT gives to ``node``, hanging off ``host``: dax_hmem makes
    ``hmem.<region>`` and a devdax device ``dax<region>.0`` of it. Returns the device's name."""
    name = f"dax{region}.0"
    dev = f"/sys/devices/platform/hmem.{region}/{name}"
    t = k.tree
    t.new_dir(dev, {"align": (2 * MiB, RW), "dev": (f"{simdax.DAX_MAJOR}:{region}", RO), "memmap_on_memory": (0, RW),
                    "modalias": ("dax:t0*", RO), "numa_node": (host, RO), "resource": (hex(start), RO),
                    "size": (size, RO), "target_node": (node, RO), "uevent": (f"DEVNAME={name}\nDEVTYPE=dax", RW)})
    for attr, value in (("start", hex(start)), ("end", hex(start + size - 1)), ("page_offset", "0x0")):
        t.file(f"{dev}/mapping0/{attr}", value, RO)
    # dax_hmem's region is static (IORESOURCE_DAX_STATIC): no available_size/create/seed/delete, size read-only
    simdax.region_files(k, f"/sys/devices/platform/hmem.{region}", region, start, size, 2 * MiB, dynamic=False)
    t.link(f"{dev}/subsystem", "../../../../bus/dax")
    t.link(f"{simdax.BUS}/devices/{name}", f"../../../devices/platform/hmem.{region}/{name}")
    devnodes.add(k, dev, simdax.DAX_MAJOR, region, name)
    t.file("/sys/module/dax_hmem/initstate", "live", RO)
    state = k.state()
    state.setdefault("dax", {})[name] = {"start": start, "size": size, "node": node}
    if "cxl" in state and region not in state["cxl"]["ids"]:  # one id pool (memregion) with the CXL regions
        state["cxl"]["ids"].append(region)
    k.save_state(state)
    simdax.bind(k, name, "device_dax")
    return name


H100_HMEM = replace(H100_CXL, windows=H100_CXL.windows[:1], host_bridges=H100_CXL.host_bridges[:1],
                    memdevs=H100_CXL.memdevs[:1])

#: h100-cxl-memdevs with two CXL slots per socket, one of them filled: a 256 GiB memdev in each socket's first root
#: port, the second empty for a memdev hot-plugged later (``nodeagent sim hot-add DIR --memdev``).
H100_SLOTS = replace(
    H100_CXL,
    host_bridges=(simcxl.HostBridgeDef("pci0000:30", 48, ("0000:30:01.0", "0000:30:02.0"), numa_node=0),
                  simcxl.HostBridgeDef("pci0000:b0", 176, ("0000:b0:01.0", "0000:b0:02.0"), numa_node=1)),
    memdevs=(simcxl.MemdevDef(0x1D7E0000A001, "0000:30:01.0", "0000:31:00.0", 256 * GiB),
             simcxl.MemdevDef(0x1D7E0000A002, "0000:b0:01.0", "0000:b1:00.0", 256 * GiB)))

PRESETS: dict[str, Callable[[], Preset]] = {
    "qemu-cxl": _qemu_cxl,
    "qemu-cxl-rp0first": lambda: replace(_qemu_cxl(), name="qemu-cxl-rp0first",
                                         description="the real-kernel CXL guest, the other memdev probed first"),
    "qemu-cxl-ep-swapped": lambda: replace(_qemu_cxl(), name="qemu-cxl-ep-swapped", description=(
        "the real-kernel CXL guest, its endpoints probed in the other order")),
    "qemu-cxl-rp0first-ep-swapped": lambda: replace(_qemu_cxl(), name="qemu-cxl-rp0first-ep-swapped", description=(
        "the real-kernel CXL guest, the other memdev first and the endpoints the other way")),
    "qemu-cxl-2hb": _qemu_cxl_2hb,
    "qemu-cxl-2hb-rp0first": lambda: _qemu_cxl_2hb("qemu-cxl-2hb-rp0first", ", the other memdev probed first"),
    "qemu-cxl-2hb-ep-swapped": lambda: _qemu_cxl_2hb("qemu-cxl-2hb-ep-swapped", ", its endpoints the other way"),
    "qemu-cxl-2hb-rp0first-ep-swapped": lambda: _qemu_cxl_2hb(
        "qemu-cxl-2hb-rp0first-ep-swapped", ", the other memdev first and the endpoints the other way"),
    "qemu-cxl-1md": _qemu_cxl_1md,
    "h100-cxl-memdevs": lambda: _h100_memdevs(
        "h100-cxl-memdevs", "2-socket H100 server whose two 2 TiB CXL expanders are bare memdevs (no region)"),
    "h100-cxl-committed": lambda: _h100_memdevs(
        "h100-cxl-committed", "2-socket H100 server whose firmware committed both CXL regions (kmem online)"),
    "h100-cxl-hmem": lambda: _h100_memdevs(
        "h100-cxl-hmem", "2-socket H100 server: one bare CXL memdev, one soft-reserved range under dax_hmem"),
    "h100-cxl-slots": lambda: _h100_memdevs(
        "h100-cxl-slots", "2-socket H100 server, two CXL slots a socket: one 256 GiB bare memdev each, one slot free"),
}
BUSES.update({"qemu-cxl": (QEMU_CXL, None), "qemu-cxl-rp0first": (QEMU_CXL_RP0_FIRST, None),
              "qemu-cxl-ep-swapped": (QEMU_CXL_EP_SWAPPED, None),
              "qemu-cxl-rp0first-ep-swapped": (QEMU_CXL_RP0_FIRST_EP_SWAPPED, None),
              "qemu-cxl-2hb": (QEMU_CXL_2HB, None),
              "qemu-cxl-2hb-rp0first": (replace(QEMU_CXL_2HB, memdevs=QEMU_CXL_2HB.memdevs[::-1]), None),
              "qemu-cxl-2hb-ep-swapped": (replace(QEMU_CXL_2HB, endpoint_order=(1, 0)), None),
              "qemu-cxl-2hb-rp0first-ep-swapped": (
                  replace(QEMU_CXL_2HB, memdevs=QEMU_CXL_2HB.memdevs[::-1], endpoint_order=(1, 0)), None),
              "qemu-cxl-1md": (QEMU_CXL_1MD, None),
              "h100-cxl-memdevs": (H100_CXL, None),
              "h100-cxl-committed": (H100_CXL, _committed), "h100-cxl-hmem": (H100_HMEM, _hmem),
              "h100-cxl-slots": (H100_SLOTS, None)})


def expanders(k: SimKernel, devs: Sequence[simdax.DaxDef]) -> None:
    """CXL expanders behind DAX devices, laid out by :mod:`nodeagent_sim.cxl` as for the CXL-bus presets and as a
    6.x kernel shows regions the firmware committed (h100-cxl, h100-cxl-autoonline, the benchmark nodes, a
    ``nodeagent sim hot-add``): per device its window ``decoder0.R`` (R = its region id), a host bridge
    ``pci0000:BB`` with one root port (one switch decoder, as cxl_port gives a single-dport bridge), the memdev
    ``memR`` under it and its endpoint with 4 decoders; region R committed over the endpoint's first decoder and
    bound to ``cxl_region``, whose ``dax_regionR`` holds the device (:func:`nodeagent_sim.dax.lay_out`, devdax).
    Ports take the next ids as cxl_acpi and cxl_mem add them: the host bridges first, then the endpoints."""
    devs = [d for d in devs if d.kind == "cxl"]
    if not devs:
        return
    t = k.tree
    if not t.exists(f"{simcxl.ROOT}/devtype"):
        simcxl.base(k, simcxl.MODULES)
    for d in devs:
        if t.exists(f"{simcxl.ROOT}/decoder0.{d.region}"):
            raise ValueError(f"{d.name}: the CXL window decoder0.{d.region} exists already")
    taken = [int(m[2]) for m in (re.fullmatch(r"(port|endpoint)(\d+)", n) for n in os.listdir(t.local(simcxl.DEV)))
             if m]
    n = max(taken, default=0) + 1
    state = k.state()
    cx = state["cxl"]
    hb_port: dict[int, tuple[str, str]] = {}
    for d in devs:  # cxl_acpi: the windows and host bridges
        r, bus = d.region, 0x30 + 0x10 * d.region
        hb, rp = f"pci0000:{bus:02x}", f"0000:{bus:02x}:00.0"
        simcxl.root_decoder(k, f"{simcxl.ROOT}/decoder0.{r}", d.start, d.size, 1, 256, str(bus))
        t.link(f"{simcxl.ROOT}/dport{bus}", f"../../../{hb}")
        if r not in cx["ids"]:
            cx["ids"].append(r)
        cx["windows"][f"decoder0.{r}"] = {"node": d.target_node, "hbs": [hb]}
        path = f"{simcxl.ROOT}/port{n}"
        simcxl.port(k, path, f"/sys/devices/{hb}")
        t.link(f"{path}/parent_dport", f"../../../../{hb}")
        t.link(f"{path}/dport0", f"../../../../{hb}/{rp}")
        t.file(f"/sys/devices/{hb}/{rp}/numa_node", d.numa_node, RO)
        simcxl.decoder(k, f"{path}/decoder{n}.0", "switch", gran=4096, targets="0")
        hb_port[r] = (f"port{n}", path)
        cx.setdefault("passthrough", []).append(f"port{n}")  # one root port: simcxl.passthrough
        n += 1
    eps: dict[int, int] = {}
    for d in devs:  # cxl_pci and cxl_mem: the memdevs and their endpoints
        r, bus = d.region, 0x30 + 0x10 * d.region
        hb, rp, pci = f"pci0000:{bus:02x}", f"0000:{bus:02x}:00.0", f"0000:{bus + 1:02x}:00.0"
        pci_dir = f"/sys/devices/{hb}/{rp}/{pci}"
        mem = f"{pci_dir}/mem{r}"
        simcxl.memdev(k, mem, r, serial=0x1000 + r, ram_size=d.size, numa_node=d.numa_node)
        for attr, value in (("current_link_speed", "32.0 GT/s PCIe"), ("current_link_width", 16),
                            ("max_link_speed", "32.0 GT/s PCIe"), ("max_link_width", 16),
                            ("numa_node", d.numa_node), ("vendor", "0x8086"), ("class", "0x050210")):
            t.file(f"{pci_dir}/{attr}", value, RO)
        t.link(f"/sys/bus/pci/devices/{pci}", "../../.." + pci_dir[4:])
        port_name, port_path = hb_port[r]
        ep = f"{port_path}/endpoint{n}"
        simcxl.port(k, ep, mem)
        t.link(f"{ep}/parent_dport", f"../../../../../{hb}/{rp}")
        for i in range(4):
            simcxl.decoder(k, f"{ep}/decoder{n}.{i}", "endpoint")
        cx["hdm_end"][f"endpoint{n}"] = 0
        cx["endpoints"][f"endpoint{n}"] = {"memdev": f"mem{r}", "ram": d.size, "pmem": 0, "hb": hb, "dport": 0,
                                           "port": port_name}
        eps[r] = n
        n += 1
    for d in devs:  # the committed regions
        r, ep = d.region, eps[d.region]
        port_name, port_path = hb_port[r]
        switch = f"decoder{port_name.removeprefix('port')}.0"
        region = f"{simcxl.ROOT}/decoder0.{r}/region{r}"
        for attr, value, mode in (("commit", 1, RW), ("devtype", "cxl_region", RO), ("interleave_granularity", 256, RW),
                                  ("interleave_ways", 1, RW), ("modalias", "cxl:t6", RO), ("mode", "ram", RO),
                                  ("resource", hex(d.start), RO), ("size", hex(d.size), RW), ("target0",
                                  f"decoder{ep}.0", RW), ("uuid", "", RO),
                                  ("uevent", "DEVTYPE=cxl_region\nMODALIAS=cxl:t6", RW)):
            t.file(f"{region}/{attr}", value, mode)
        for a in ("access0", "access1"):
            t.dir(f"{region}/{a}")
        t.link(f"{region}/subsystem", f"{simcxl._up(region)}bus/cxl")
        t.link(f"{simcxl.DEV}/region{r}", "../../.." + region[4:])
        simcxl.bind(k, region, "cxl_region")
        dec = f"{port_path}/endpoint{ep}/decoder{ep}.0"
        for name, value in (("mode", "ram"), ("dpa_resource", "0x0"), ("dpa_size", f"0x{d.size:016x}")):
            t.set(f"{dec}/{name}", value)
        t.set(f"{port_path}/{switch}/target_list", "0")
        t.set(f"{port_path}/endpoint{ep}/decoders_committed", 1)  # the host bridge's passthrough decoder: none
        cx["regions"][f"region{r}"] = {"state": simcxl.COMMIT, "mode": "ram", "id": r, "ways": 1,
                                       "targets": {"0": f"decoder{ep}.0"}, "switch": {port_name: switch}}
    for d in devs:
        cx["next"][f"decoder0.{d.region}"] = simcxl.alloc_id(cx)
    k.save_state(state)
    for d in devs:
        r, ep = d.region, eps[d.region]
        switch = f"decoder{hb_port[r][0].removeprefix('port')}.0"
        simcxl.program(k, [f"decoder{ep}.0", switch], f"region{r}", d.start, d.size)
        simcxl.next_names(k, f"decoder0.{r}")
        simdax.lay_out(k, d)


def _layer(k: SimKernel, preset: Preset) -> None:
    bus = BUSES.get(preset.name)
    if bus is None:  # CXL DAX devices (if any) were laid out with their bus by expanders()
        return
    spec, boot = bus
    simcxl.lay_out(k, spec)
    if boot is not None:
        boot(k)


LAYERS.append(_layer)
