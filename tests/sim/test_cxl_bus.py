"""The simulated CXL bus beyond what the real-kernel capture covers (tests/realkernel/test_cxl.py replays that):
windows interleaved across host bridges, x3 windows, region ids shared with nvdimm and given back, the presets,
and the facts nodeagent reads from them."""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel
from nodeagent_sim import cxl as simcxl

from nodeagent.facts import cxl as cxlfacts
from nodeagent.facts import dax as daxfacts
from nodeagent.facts import gather
from nodeagent.host import open_host
from tests.e2e.cli_helpers import run

MiB = 1024**2
GiB = 1024**3
DEV = simcxl.DEV
MEM = "/sys/devices/system/memory"


def _spec(bridges: int, nvdimm: int = 0, size: int = 256 * MiB) -> simcxl.CxlDef:
    """``bridges`` host bridges, one memdev of ``size`` each, one window at 16 GiB interleaved across all of them."""
    hbs = tuple(simcxl.HostBridgeDef(f"pci0000:{0x20 + 0x10 * i:02x}", 20 + i, (f"0000:{0x20 + 0x10 * i:02x}:00.0",))
                for i in range(bridges))
    mems = tuple(simcxl.MemdevDef(0xA000 + i, hb.root_ports[0], f"0000:{0x21 + 0x10 * i:02x}:00.0", size)
                 for i, hb in enumerate(hbs))
    return simcxl.CxlDef(windows=(simcxl.WindowDef(16 * GiB, 4 * GiB, tuple(h.name for h in hbs), node=2),),
                         host_bridges=hbs, memdevs=mems, nvdimm_regions=nvdimm)


@pytest.fixture
def bus(make_node: Callable[..., Path]) -> Callable[..., SimKernel]:
    """A qemu-cxl-like node (no DAX device) with a CXL bus laid out from ``_spec``."""

    def make(bridges: int, nvdimm: int = 0, size: int = 256 * MiB) -> SimKernel:
        root = make_node("qemu-cxl")
        k = SimKernel(root)
        shutil.rmtree(root / "sys/bus/cxl")
        shutil.rmtree(root / "sys/devices/platform/ACPI0017:00")
        state = k.state()
        state.pop("cxl")
        k.save_state(state)
        simcxl.lay_out(k, _spec(bridges, nvdimm, size))
        return k

    return make


def errno_of(k: SimKernel, path: str, value: str) -> int:
    try:
        k.write(path, value)
    except OSError as exc:
        return exc.errno or -1
    return 0


def _endpoint_decoders(k: SimKernel) -> list[str]:
    """decoderN.0 of each endpoint, in host-bridge order."""
    facts = cxlfacts.read(open_host(k.root))
    return [f"decoder{m.endpoint[8:]}.0" for m in facts.memdevs]


def _region_to_size(k: SimKernel, ways: int, gran: int = 256) -> str:
    name = k.tree.read(f"{DEV}/decoder0.0/create_ram_region").strip()
    for path, value in ((f"{DEV}/decoder0.0/create_ram_region", name), (f"{DEV}/{name}/interleave_granularity",
                        str(gran)), (f"{DEV}/{name}/interleave_ways", str(ways)),
                        (f"{DEV}/{name}/size", str(ways * 256 * MiB))):
        k.write(path, value)
    return name


def test_a_window_across_host_bridges_takes_targets_in_their_order(bus: Callable[..., SimKernel]) -> None:
    k = bus(2)
    d0, d1 = _endpoint_decoders(k)
    name = k.tree.read(f"{DEV}/decoder0.0/create_ram_region").strip()
    k.write(f"{DEV}/decoder0.0/create_ram_region", name)
    assert errno_of(k, f"{DEV}/{name}/interleave_ways", "3") == errno.EINVAL  # not a multiple of the x2 window
    assert errno_of(k, f"{DEV}/{name}/interleave_granularity", "512") == errno.EINVAL  # the window interleaves at 256
    k.write(f"{DEV}/{name}/interleave_granularity", "256")
    k.write(f"{DEV}/{name}/interleave_ways", "2")
    k.write(f"{DEV}/{name}/size", str(512 * MiB))
    for d in (d0, d1):
        k.write(f"{DEV}/{d}/mode", "ram")
        k.write(f"{DEV}/{d}/dpa_size", str(256 * MiB))
    assert errno_of(k, f"{DEV}/{name}/target0", d1) == errno.ENXIO  # position 0 is the first host bridge's
    k.write(f"{DEV}/{name}/target0", d0)
    k.write(f"{DEV}/{name}/target1", d1)
    k.write(MEM + "/auto_online_blocks", "offline")
    k.write(f"{DEV}/{name}/commit", "1")
    k.write("/sys/bus/cxl/drivers/cxl_region/bind", name)
    facts = cxlfacts.read(open_host(k.root))
    (region,) = facts.regions
    assert region.memdevs == ["mem0", "mem1"] and region.decode_state == "commit" and region.dax_devices == ["dax0.0"]
    switch = [d for d in facts.decoders if d.kind == "switch" and d.region == name]
    assert [(d.interleave_ways, d.interleave_granularity, d.size) for d in switch] == [(1, 512, 512 * MiB)] * 2
    dev = daxfacts.read_device(open_host(k.root), "dax0.0", 128 * MiB)
    assert dev is not None and (dev.mode, dev.blocks_total, dev.blocks_online, dev.target_node) == \
        ("system-ram", 4, 0, 2)  # kmem took it; auto_online_blocks=offline left the blocks offline
    assert dev.backing == "cxl" and dev.cxl_region == name and dev.cxl_memdevs == ["mem0", "mem1"]


@pytest.mark.parametrize(("param", "self_hosted"), [("N", False), ("Y", True), ("force", True)])
def test_a_regions_struct_pages_go_on_it_only_when_the_kernel_allows(bus: Callable[..., SimKernel], param: str,
                                                                      self_hosted: bool) -> None:
    """dax_cxl asks for the memmap on the region (memmap_on_memory 1); the kernel puts it there only when
    memory_hotplug.memmap_on_memory allows (default N). Seen on 6.12 in QEMU: dax0.0 says 1, the parameter N,
    and node 2's MemTotal is the region's whole 512 MiB, so its struct pages are in DRAM
    (tests/realkernel/captured/cxl-facts-region.json)."""
    k = bus(2, size=256 * MiB)
    k.tree.set("/sys/module/memory_hotplug/parameters/memmap_on_memory", param)
    name = _region_to_size(k, 2)
    d0, d1 = _endpoint_decoders(k)
    for d in (d0, d1):
        k.write(f"{DEV}/{d}/mode", "ram")
        k.write(f"{DEV}/{d}/dpa_size", str(256 * MiB))
    k.write(f"{DEV}/{name}/target0", d0)
    k.write(f"{DEV}/{name}/target1", d1)
    k.write(MEM + "/auto_online_blocks", "offline")
    k.write(f"{DEV}/{name}/commit", "1")
    k.write("/sys/bus/cxl/drivers/cxl_region/bind", name)
    dev = daxfacts.read_device(open_host(k.root), "dax0.0", 128 * MiB)
    assert dev is not None and dev.memmap_on_memory is True  # what the device asks for
    assert dev.memmap_self_hosted is self_hosted
    assert dev.memmap_bytes == (0 if self_hosted else 4 * 128 * MiB // 4096 * 64)  # 8 MiB for 512 MiB
    section = daxfacts.gather(open_host(k.root))
    assert [d["memmap_self_hosted"] for d in section["devices"]] == [self_hosted]


def test_a_memdev_takes_one_position(bus: Callable[..., SimKernel]) -> None:
    k = bus(1, size=512 * MiB)
    name = _region_to_size(k, 2)  # 2-way over one memdev: two of its decoders, 256 MiB each
    (d0,) = _endpoint_decoders(k)
    d1 = d0.replace(".0", ".1")
    for d in (d0, d1):
        k.write(f"{DEV}/{d}/mode", "ram")
        k.write(f"{DEV}/{d}/dpa_size", str(256 * MiB))
    k.write(f"{DEV}/{name}/target0", d0)
    assert errno_of(k, f"{DEV}/{name}/target1", d1) == errno.EBUSY  # the memdev is at position 0 already


def test_x3_windows_take_3_6_and_12_ways(bus: Callable[..., SimKernel]) -> None:
    k = bus(3)
    name = k.tree.read(f"{DEV}/decoder0.0/create_ram_region").strip()
    k.write(f"{DEV}/decoder0.0/create_ram_region", name)
    assert [errno_of(k, f"{DEV}/{name}/interleave_ways", w) for w in ("2", "4", "9", "12", "6", "3")] == \
        [errno.EINVAL, errno.EINVAL, errno.EINVAL, 0, 0, 0]


def test_region_ids_are_shared_with_nvdimm_and_given_back(bus: Callable[..., SimKernel]) -> None:
    k = bus(1, nvdimm=1)  # a legacy pmem region took id 0 (what the 3-node capture showed: region1)
    assert _region_to_size(k, 1) == "region1"
    assert _region_to_size(k, 1) == "region2"
    assert k.tree.read(f"{DEV}/decoder0.0/create_ram_region") == "region3"
    assert errno_of(k, f"{DEV}/decoder0.0/delete_region", "region9") == errno.ENODEV
    k.write(f"{DEV}/decoder0.0/delete_region", "region1")
    assert k.tree.read(f"{DEV}/decoder0.0/create_ram_region") == "region1"  # the idled id, not region3
    k.write(f"{DEV}/decoder0.0/delete_region", "region2")
    assert k.tree.read(f"{DEV}/decoder0.0/create_ram_region") == "region1"
    assert not k.tree.exists(f"{DEV}/region2")


def test_a_second_region_gets_the_next_free_range(bus: Callable[..., SimKernel]) -> None:
    k = bus(1)
    first, second = _region_to_size(k, 1), _region_to_size(k, 1)
    starts = [int(k.tree.read(f"{DEV}/{r}/resource"), 16) for r in (first, second)]
    assert starts == [16 * GiB, 16 * GiB + 256 * MiB]
    assert errno_of(k, f"{DEV}/{second}/size", "0") == 0 and errno_of(k, f"{DEV}/{second}/size", str(8 * GiB)) \
        == errno.ENOSPC  # beyond the 4 GiB window


def test_commit_needs_a_cpu_without_the_hypervisor_bit(bus: Callable[..., SimKernel]) -> None:
    k = bus(1)
    (d,) = _endpoint_decoders(k)
    name = _region_to_size(k, 1)
    k.write(f"{DEV}/{d}/mode", "ram")
    k.write(f"{DEV}/{d}/dpa_size", str(256 * MiB))
    k.write(f"{DEV}/{name}/target0", d)
    cpuinfo = k.root / "proc/cpuinfo"
    text = cpuinfo.read_text()
    cpuinfo.chmod(0o644)
    cpuinfo.write_text(text.replace("flags\t\t: ", "flags\t\t: hypervisor "))
    assert errno_of(k, f"{DEV}/{name}/commit", "1") == errno.ENXIO  # what the guest showed with -cpu max
    cpuinfo.write_text(text)
    assert errno_of(k, f"{DEV}/{name}/commit", "1") == 0


def test_commit_0_refuses_while_kmem_holds_online_memory(make_node: Callable[..., Path]) -> None:
    k = SimKernel(make_node("h100-cxl-committed"))
    before = k.tree.read(f"{DEV}/region0/commit")
    assert errno_of(k, f"{DEV}/region0/commit", "0") == errno.EBUSY  # the kernel would strand the memory
    assert before == k.tree.read(f"{DEV}/region0/commit") == "1"


def test_presets_facts(make_node: Callable[..., Path]) -> None:
    bare = cxlfacts.from_facts(gather(open_host(make_node("h100-cxl-memdevs"))))
    assert [m.name for m in bare.bare_memdevs] == ["mem0", "mem1"] and not bare.regions
    assert [(m.host_bridge, m.numa_node) for m in bare.memdevs] == [("pci0000:30", 0), ("pci0000:b0", 1)]
    assert bare.next_region == {"decoder0.0": "region0", "decoder0.1": "region1"} and bare.missing_modules == []

    f = gather(open_host(make_node("h100-cxl-committed")))
    committed = cxlfacts.from_facts(f)
    assert [(r.name, r.decode_state, r.driver, r.dax_devices) for r in committed.regions] == [
        ("region0", "commit", "cxl_region", ["dax0.0"]), ("region1", "commit", "cxl_region", ["dax1.0"])]
    devs = daxfacts.from_facts(f).devices
    assert [(d.name, d.mode, d.zone, d.fully_online, d.backing) for d in devs] == [
        ("dax0.0", "system-ram", "Normal", True, "cxl"), ("dax1.0", "system-ram", "Normal", True, "cxl")]

    hmem = cxlfacts.from_facts(f := gather(open_host(make_node("h100-cxl-hmem"))))
    assert [(o.device, o.owner, o.driver) for o in hmem.dax] == [("dax1.0", "dax_hmem", "device_dax")]
    assert [m.name for m in hmem.bare_memdevs] == ["mem0"]
    assert [(d.name, d.backing, d.mode) for d in daxfacts.from_facts(f).devices] == [("dax1.0", "hmem", "devdax")]


def test_the_dax_presets_have_a_whole_bus(make_node: Callable[..., Path]) -> None:
    """h100-cxl's DAX devices (laid out by sim.dax) sit on a complete bus: windows, modules, committed and bound
    regions that the region ABI tears down like any other."""
    root = make_node("h100-cxl")
    c = cxlfacts.from_facts(gather(open_host(root)))
    assert [(d.name, d.start, d.size) for d in c.root_decoders()] == [("decoder0.0", 1 << 40, 2 << 40),
                                                                       ("decoder0.1", 3 << 40, 2 << 40)]
    assert c.missing_modules == [] and [(r.name, r.memdevs, r.decode_state, r.driver) for r in c.regions] == [
        ("region0", ["mem0"], "commit", "cxl_region"), ("region1", ["mem1"], "commit", "cxl_region")]
    k = SimKernel(root)
    for path, value in ((f"{DEV}/region0/commit", "0"), (f"{DEV}/region0/target0", "\n"),
                        (f"{DEV}/decoder3.0/dpa_size", "0"), (f"{DEV}/decoder0.0/delete_region", "region0")):
        k.write(path, value)
    after = cxlfacts.from_facts(gather(open_host(root)))
    assert [m.name for m in after.bare_memdevs] == ["mem0"] and after.next_region["decoder0.0"] == "region0"
    assert not (root / "sys/bus/dax/devices/dax0.0").exists()


def test_missing_modules_are_reported(make_node: Callable[..., Path]) -> None:
    root = make_node("qemu-cxl")
    for m in ("cxl_acpi", "dax_cxl"):
        shutil.rmtree(root / f"sys/module/{m}")
    kernel = json.loads((root / ".nodeagent-machine/meta.json").read_text())["kernel"]
    dep = root / f"lib/modules/{kernel}/modules.dep"
    dep.write_text("kernel/drivers/cxl/cxl_acpi.ko.xz: kernel/drivers/cxl/core/cxl_core.ko.xz\n")
    f = gather(open_host(root))
    c = cxlfacts.from_facts(f)
    assert c.missing_modules == ["cxl_acpi", "dax_cxl"]
    assert (c.modules["cxl_acpi"], c.modules["dax_cxl"], c.modules["cxl_port"]) == ("available", "absent", "builtin")
    from nodeagent.render.text import facts_text

    assert "modules not loaded: cxl_acpi (available), dax_cxl (absent); `modprobe -a cxl_acpi`" in facts_text(f)


def test_nodeagent_facts_shows_the_memdevs(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["--simulate", "qemu-cxl", "facts"], capsys)
    assert code == 0, err
    assert "mem0  ram 256MiB  serial 0x4c454f0002" in out and "no region (capacity not in use)" in out
    code, out, err = run(["--simulate", "qemu-cxl", "--format", "json", "facts"], capsys)
    memdevs = json.loads(out)["sections"]["cxl"]["memdevs"]
    assert [(m["name"], m["serial"], m["pci"], m["endpoint"]) for m in memdevs] == [
        ("mem0", 0x4C454F0002, "0000:0e:00.0", "endpoint2"), ("mem1", 0x4C454F0001, "0000:0d:00.0", "endpoint3")]
    assert os.environ.get("NODEAGENT_CACHE")  # --simulate stayed inside the test run's cache
