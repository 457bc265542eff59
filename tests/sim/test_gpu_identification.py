"""A BMC's display controller is not a GPU: compute devices by class and vendor, display-only devices by vendor or
bound driver (the driver decides where there is one), GPUs behind PCIe switches judged by their narrowest hop.

The shapes are those of real servers and guests; each is added to a simulated node the way the kernel lays it
out (``/sys/devices/pci…`` with ``/sys/bus/pci/devices`` links and, where bound, a ``driver`` link).
"""

from __future__ import annotations

import os

import pytest
from nodeagent_sim import SimKernel
from nodeagent_sim.hardware import add_pci_device
from nodeagent_sim.presets import PRESETS, GpuDef, PciDef, gpu_pci, pcie_switch, root_port

from nodeagent.facts.hardware import PciLink, classify, read_pci_displays
from nodeagent.host import open_host
from tests.checks_helpers import messages, one, set_file

#: The shipped profile's gpu_pcie section.
PCIE = {"min_gen": 4, "min_width": 16}
GEN1_X1 = ("2.5 GT/s PCIe", 1, "2.5 GT/s PCIe", 1)
GEN2_X1 = ("5.0 GT/s PCIe", 1, "5.0 GT/s PCIe", 1)

#: (vendor, device, class, driver or None, link or None): display controllers that are never GPUs.
DISPLAY_SHAPES = {
    "aspeed-ast2600-ast": ("0x1a03", "0x2000", "0x030000", "ast", None),
    "aspeed-ast2500-no-driver": ("0x1a03", "0x2000", "0x030000", None, None),
    "matrox-g200er2-mgag200": ("0x102b", "0x0534", "0x030000", "mgag200", GEN1_X1),
    "matrox-g200eh3-no-driver": ("0x102b", "0x0538", "0x030000", None, GEN1_X1),
    "huawei-ibmc-hibmc": ("0x19e5", "0x1711", "0x030000", "hibmc-drm", GEN2_X1),
    "nuvoton-bmc": ("0x1050", "0x0750", "0x030000", None, GEN2_X1),
    "xgi-z9s": ("0x18ca", "0x0020", "0x030000", None, None),
    "silicon-motion-sm750": ("0x126f", "0x0750", "0x030000", "sm750fb", GEN1_X1),
    "qemu-std-vga-bochs": ("0x1234", "0x1111", "0x030000", "bochs-drm", None),
    "qemu-cirrus": ("0x1013", "0x00b8", "0x030000", "cirrus-qemu", None),
    "qemu-qxl": ("0x1b36", "0x0100", "0x030000", "qxl", None),
    "virtio-gpu-no-vga": ("0x1af4", "0x1050", "0x038000", "virtio-pci", GEN1_X1),
    "vmware-svga": ("0x15ad", "0x0405", "0x030000", "vmwgfx", None),
    "hyperv-video": ("0x1414", "0x5353", "0x030000", "hyperv_drm", None),
    # a GPU vendor's device bound to a firmware framebuffer driver: the driver decides
    "nvidia-under-simpledrm": ("0x10de", "0x2330", "0x030200", "simpledrm", GEN1_X1),
}


def _add(root, d: PciDef, rp: str = "0000:00:1f.0") -> None:
    """Plug ``d`` into a new root port of the node's first root bus."""
    add_pci_device(SimKernel(root), "/sys/devices/pci0000:00", root_port(rp, d, link=d.link or GEN2_X1))


@pytest.mark.parametrize("shape", sorted(DISPLAY_SHAPES))
@pytest.mark.parametrize("preset", ["h100-cxl", "workstation"])
def test_display_controllers_are_listed_never_judged(make_node, preset: str, shape: str) -> None:
    root = make_node(preset)
    vendor, device, cls, driver, link = DISPLAY_SHAPES[shape]
    _add(root, PciDef("0000:70:00.0", vendor, device, cls, driver, link, 0))
    r = one(root, "gpu_pcie", PCIE)
    assert r.status == "pass", messages(r)
    assert "0000:70:00.0" not in messages(r)
    shown = {d["address"]: d for d in r.evidence["display_only"]}
    assert shown["0000:70:00.0"]["kind"] == "display" and shown["0000:70:00.0"]["driver"] == driver
    assert all(g["kind"] == "gpu" for g in r.evidence["gpus"])


def test_every_server_and_guest_preset_has_a_console_that_is_not_a_gpu(make_node) -> None:
    for preset in ("h100-cxl", "h100-cxl-autoonline", "workstation", "hgx-h100", "l40-kvm64", "qemu-3node"):
        devices = read_pci_displays(open_host(make_node(preset)))
        consoles = [d for d in devices if d.kind == "display"]
        assert len(consoles) == 1, preset
        c = consoles[0]
        assert (c.vendor, c.driver) in (("0x1a03", "ast"), ("0x1234", "bochs-drm")), preset
        gpus = [d for d in devices if d.kind == "gpu"]
        assert all(g.vendor == "0x10de" and g.driver == "nvidia" for g in gpus), preset


@pytest.mark.parametrize("vendor, device, cls, driver, address, kind", [
    ("0x10de", "0x2330", "0x030200", None, "0000:17:00.0", "gpu"),          # no driver: the vendor decides
    ("0x10de", "0x26b5", "0x030000", "vfio-pci", "0000:17:00.0", "gpu"),    # handed to a VM: still a GPU
    ("0x1002", "0x74a1", "0x120000", "amdgpu", "0000:17:00.0", "gpu"),      # AMD Instinct MI300X
    ("0x1002", "0x740f", "0x038000", None, "0000:17:00.0", "gpu"),          # MI210, no driver
    ("0x1da3", "0x1020", "0x120000", "habanalabs", "0000:17:00.0", "gpu"),  # Gaudi2
    ("0x8086", "0x0bd5", "0x038000", "i915", "0000:17:00.0", "gpu"),        # Data Center GPU Max behind a port
    ("0x8086", "0x56a0", "0x030000", "i915", "0000:03:00.0", "gpu"),        # Arc A770: discrete, has a link
    ("0x8086", "0x4680", "0x030000", "i915", "0000:00:02.0", "display"),    # Alder Lake iGPU: integrated
    ("0x8086", "0xa780", "0x030000", "xe", "0000:00:02.0", "display"),      # Raptor Lake iGPU under xe
    ("0x8086", "0x4680", "0x030000", None, "0000:00:02.0", "display"),      # iGPU without a driver
    ("0x1ae0", "0x0027", "0x120000", None, "0000:17:00.0", "other"),        # an accelerator of another vendor
    ("0x1a03", "0x2000", "0x030000", "vfio-pci", "0000:03:00.0", "display"),  # BMC VGA, driver not deciding
])
def test_classification(vendor, device, cls, driver, address, kind) -> None:
    integrated = address.endswith(":00:02.0")
    link = PciLink(None, None, None, None) if integrated else PciLink("16.0 GT/s PCIe", 16, "16.0 GT/s PCIe", 16)
    assert classify(address, vendor, cls, driver, link)[0] == kind


def test_intel_gpu_judged_when_discrete_left_alone_when_integrated(make_node) -> None:
    root = make_node("workstation")
    # the iGPU is a root-bus function at 00:02.0 with no link; a discrete Arc sits on a root port
    add_pci_device(SimKernel(root), "/sys/devices/pci0000:00",
                   PciDef("0000:00:02.0", "0x8086", "0x4680", "0x030000", "i915", None, -1))
    _add(root, PciDef("0000:71:00.0", "0x8086", "0x56a0", "0x030000", "i915",
                      ("16.0 GT/s PCIe", 8, "16.0 GT/s PCIe", 16), 0), rp="0000:00:1e.0")
    r = one(root, "gpu_pcie", PCIE)
    assert r.status == "fail"
    assert "GPU 0000:71:00.0 (Intel 0x56a0): link trained at Gen4 x8, narrower than min_width x16" in messages(r)
    assert "0000:00:02.0" not in messages(r)
    assert any(d["address"] == "0000:00:02.0" for d in r.evidence["display_only"])


def test_hgx_eight_gpus_behind_four_switches_pass_and_report_oversubscription(make_node) -> None:
    r = one(make_node("hgx-h100"), "gpu_pcie", {**PCIE, "min_count": 8})
    assert r.status == "pass", messages(r)
    assert len(r.evidence["gpus"]) == 8
    g = r.evidence["gpus"][0]
    assert g["path"] == ["0000:18:01.0", "0000:19:00.0", "0000:1a:00.0"] and g["root_port"] == "0000:18:01.0"
    assert [h["port_role"] for h in g["hops"]] == ["switch downstream port", "root port"]
    assert g["narrowest_hop"]["link"] == "Gen5 x16"
    over = r.evidence["oversubscription"]
    assert len(over) == 4 and all(o["ratio"] == "2:1" and o["uplink_lanes"] == 16 for o in over)
    assert "2 GPUs (0000:1b:00.0, 0000:1c:00.0) share the Gen5 x16 uplink of switch port 0000:19:00.0" \
        in messages(r)
    assert "behind switch 0000:19:00.0, uplink Gen5 x16 to root port 0000:18:01.0" in messages(r)
    # the NICs and NVMe drives behind the same switches are not display-class devices at all
    assert {d["address"] for d in r.evidence["display_only"]} == {"0000:05:00.0"}


def _kernel_dir(root, addr: str) -> str:
    return "/sys/" + os.readlink(root / "sys/bus/pci/devices" / addr).removeprefix("../../../")


def test_a_switch_uplink_trained_down_fails_every_gpu_behind_it(make_node) -> None:
    root = make_node("hgx-h100")
    set_file(root, _kernel_dir(root, "0000:99:00.0") + "/current_link_width", "8")
    r = one(root, "gpu_pcie", PCIE)
    assert r.status == "fail"
    text = messages(r)
    for gpu in ("0000:9b:00.0", "0000:9c:00.0"):
        assert (f"GPU {gpu} (NVIDIA 0x2330): its own link is Gen5 x16, but the narrowest hop to the CPU, "
                "0000:99:00.0 → 0000:98:01.0 (root port), is Gen5 x8 (31.51 GB/s), below min_width x16") in text
        assert f"GPU {gpu} (NVIDIA 0x2330): the link 0000:99:00.0 → 0000:98:01.0 (root port) trained at Gen5 x8" \
            in text
    assert "0000:1b:00.0 (NVIDIA 0x2330): its own link" not in text
    assert "uplink or riser" in " ".join(r.remedies)
    # a slower (not narrower) uplink, under a profile that asks only for Gen4: a warning, not a failure
    set_file(root, _kernel_dir(root, "0000:99:00.0") + "/current_link_width", "16")
    set_file(root, _kernel_dir(root, "0000:99:00.0") + "/current_link_speed", "16.0 GT/s PCIe")
    r = one(root, "gpu_pcie", PCIE)
    assert r.status == "warn" and "runs at Gen4 x16, below its Gen5 x16" in messages(r)


def test_switch_shapes_deeper_and_uneven(make_node) -> None:
    """Two switches cascaded (a GPU two switches down) and a switch with three GPUs below an x8 uplink."""
    root = make_node("workstation")
    k = SimKernel(root)
    inner = pcie_switch(0x83, [gpu_pci(GpuDef(pci="0000:86:00.0", numa_node=0))], 0)
    # the inner switch's upstream port hangs off a downstream port of the outer switch
    outer = pcie_switch(0x80, [inner.children[0]], 0)
    add_pci_device(k, "/sys/devices/pci0000:80", outer)
    three = [gpu_pci(GpuDef(pci=f"0000:{0x93 + i:02x}:00.0", numa_node=0)) for i in range(3)]
    add_pci_device(k, "/sys/devices/pci0000:90",
                   pcie_switch(0x90, three, 0, uplink=("32.0 GT/s PCIe", 8, "32.0 GT/s PCIe", 8)))
    devs = {d.address: d for d in read_pci_displays(open_host(root))}
    deep = devs["0000:86:00.0"]
    assert [h.port_role for h in deep.hops] == ["switch downstream port", "switch downstream port", "root port"]
    assert deep.path == ("0000:80:01.0", "0000:81:00.0", "0000:82:00.0", "0000:84:00.0", "0000:85:00.0")
    assert deep.root_port == "0000:80:01.0"
    r = one(root, "gpu_pcie", {"min_gen": 4})
    over = {o["uplink"]: o for o in r.evidence["oversubscription"]}
    assert over["0000:91:00.0"]["ratio"] == "6:1" and over["0000:91:00.0"]["downstream_lanes"] == 48
    # min_width x16 fails the three GPUs on the x8 uplink (an x8 max is the slot's design, not a fault)
    r = one(root, "gpu_pcie", PCIE)
    assert r.status == "fail" and messages(r).count("below min_width x16") == 3


def test_numa_node_minus_one_takes_the_root_ports(make_node) -> None:
    root = make_node("hgx-h100")
    set_file(root, _kernel_dir(root, "0000:bb:00.0") + "/numa_node", "-1")
    for port in ("0000:ba:00.0", "0000:b9:00.0"):
        set_file(root, _kernel_dir(root, port) + "/numa_node", "-1")
    g = {d.address: d for d in read_pci_displays(open_host(root))}["0000:bb:00.0"]
    assert (g.numa_node, g.numa_node_from) == (1, "0000:b8:01.0")
    set_file(root, _kernel_dir(root, "0000:b8:01.0") + "/numa_node", "-1")
    g = {d.address: d for d in read_pci_displays(open_host(root))}["0000:bb:00.0"]
    assert g.numa_node is None  # nothing above knows its node either (a single-node platform)


def test_the_simulated_layout_is_the_kernels(make_node) -> None:
    """Formats a parser must meet on a real kernel: link speeds as pci_speed_string() prints them, widths as
    numbers, numa_node -1 or a node, driver links into /sys/bus/pci/drivers, every function in bus/pci/devices."""
    root = make_node("hgx-h100")
    k = SimKernel(root)
    dev = _kernel_dir(root, "0000:1b:00.0")
    assert dev == "/sys/devices/pci0000:18/0000:18:01.0/0000:19:00.0/0000:1a:00.0/0000:1b:00.0"
    assert k.tree.read(f"{dev}/current_link_speed") == "32.0 GT/s PCIe"
    assert k.tree.read(f"{dev}/max_link_width") == "16"
    assert os.readlink(k.tree.local(f"{dev}/driver")) == "../../../../../../bus/pci/drivers/nvidia"
    assert (root / "sys/bus/pci/drivers/ast/0000:05:00.0").resolve() == k.tree.local(_kernel_dir(root,
                                                                                                "0000:05:00.0"))
    vga = _kernel_dir(root, "0000:05:00.0")
    assert not k.tree.exists(f"{vga}/current_link_speed")  # conventional PCI behind the AST bridge
    assert k.tree.read(f"{os.path.dirname(vga)}/current_link_speed") == "5.0 GT/s PCIe"
    listed = set(os.listdir(root / "sys/bus/pci/devices"))
    assert {"0000:18:01.0", "0000:19:00.0", "0000:1a:00.0", "0000:04:00.0"} <= listed  # bridges too
    assert "hgx-h100" in PRESETS
