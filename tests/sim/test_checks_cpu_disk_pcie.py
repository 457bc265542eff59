"""cpu, disk and gpu_pcie checks on simulated nodes: pass, warn and fail, with their evidence and remedies."""

from __future__ import annotations

import os

import pytest
from nodeagent_sim import SimKernel
from nodeagent_sim.hardware import set_usage

from nodeagent.host import open_host
from nodeagent.util.errors import MissingError
from tests.checks_helpers import messages, one, set_file

CPU = {"require_flags": ["avx2", "fma"], "reject_virtual_models": True}


def _cpuinfo(root, model: str, flags: str) -> None:
    text = SimKernel(root).tree.read("/proc/cpuinfo")
    lines = []
    for line in text.splitlines():
        if line.startswith("model name"):
            line = f"model name\t: {model}"
        elif line.startswith("flags"):
            line = f"flags\t\t: {flags}"
        lines.append(line)
    set_file(root, "/proc/cpuinfo", "\n".join(lines))


# -- cpu ---------------------------------------------------------------------------------------------------------

def test_cpu_fails_on_kvm64_naming_model_flags_and_fix(make_node) -> None:
    r = one(make_node("l40-kvm64"), "cpu", CPU)
    assert r.status == "fail"
    text = messages(r)
    assert "'Common KVM processor' is QEMU's kvm64 model" in text
    assert "missing CPU flags: avx2, fma" in text
    assert "host-passthrough" in r.remedies[0] and "cold boot" in r.remedies[0]
    assert r.evidence["virtualization"] == "kvm"
    assert any("systemd-detect-virt --vm: kvm" in e for e in r.evidence["virtualization_evidence"])
    assert any("DMI: sys_vendor 'QEMU'" in e for e in r.evidence["virtualization_evidence"])
    assert r.evidence["present_flags"] == []


def test_cpu_passes_on_bare_metal(make_node) -> None:
    r = one(make_node("workstation"), "cpu", {**CPU, "require_flags": ["avx2", "fma", "avx512f"]})
    assert r.status == "pass" and r.evidence["virtualization"] == "none"
    assert "required flags present: avx2, fma, avx512f" in messages(r)


def test_a_vm_with_a_host_passthrough_cpu_passes(make_node) -> None:
    root = make_node("l40-kvm64")
    host_flags = SimKernel(make_node("workstation")).tree.read("/proc/cpuinfo").split("flags\t\t: ")[1].split("\n")[0]
    _cpuinfo(root, "AMD EPYC 9654 96-Core Processor", host_flags + " hypervisor")
    r = one(root, "cpu", CPU)
    assert r.status == "pass", messages(r)
    assert "runs in a kvm VM with a host-like CPU" in messages(r)


def test_named_qemu_model_warns_and_warning_severity_downgrades_a_failure(make_node) -> None:
    root = make_node("l40-kvm64")
    _cpuinfo(root, "Intel Xeon Processor (Skylake, IBRS)", "fpu sse sse2 avx avx2 fma hypervisor")
    r = one(root, "cpu", CPU)
    assert r.status == "warn" and "a named QEMU CPU model" in messages(r)
    r = one(make_node("l40-kvm64"), "cpu", {**CPU, "severity": "warning"})
    assert r.status == "warn" and r.severity == "warning"
    r = one(make_node("l40-kvm64"), "cpu", {"reject_virtual_models": False})
    assert r.status == "warn" and "allowed by reject_virtual_models: false" in messages(r)


def test_missing_flag_on_bare_metal_points_at_the_command_line_when_it_hides_features(make_node) -> None:
    root = make_node("workstation")
    r = one(root, "cpu", {"require_flags": ["amx_tile"]})
    assert r.status == "fail" and "BIOS" in r.remedies[0]
    set_file(root, "/proc/cmdline", "root=/dev/nvme0n1p2 ro clearcpuid=avx512f")
    r = one(root, "cpu", {"require_flags": ["amx_tile"]})
    assert "clearcpuid=avx512f" in r.remedies[0] and r.evidence["cmdline_hides_features"] == ["clearcpuid=avx512f"]


def test_flags_are_those_every_cpu_has(make_node) -> None:
    root = make_node("workstation")
    text = SimKernel(root).tree.read("/proc/cpuinfo")
    first, rest = text.split("\n\n", 1)
    set_file(root, "/proc/cpuinfo", first.replace(" avx2", "") + "\n\n" + rest)
    r = one(root, "cpu", {"require_flags": ["avx2"]})
    assert r.status == "fail" and "missing CPU flags: avx2" in messages(r)


# -- disk --------------------------------------------------------------------------------------------------------

DISK = {"paths": [{"path": "/models", "min_free": "200GiB", "max_used_percent": 90},
                  {"path": "/", "min_free": "10GiB", "min_free_inodes": 100000}]}


def test_disk_fails_on_the_full_model_disk_and_names_the_fix(make_node) -> None:
    r = one(make_node("l40-kvm64"), "disk", DISK)
    assert r.status == "fail"
    fail = [f for f in r.findings if f.status == "fail"]
    assert len(fail) == 1
    assert fail[0].message.startswith("/models: 94% used, 120GiB (128.8 GB) free of 2000GiB")
    assert "on /models (/dev/vdb, ext4) — above max_used_percent 90% and free space below min_free 200GiB" \
        in fail[0].message
    assert "remove unused model checkpoints" in fail[0].remedy
    models = r.evidence["paths"][0]
    assert models["device"] == "/dev/vdb" and models["used_percent"] == 94.0
    assert models["free"] == 120 * 1024**3


def test_disk_passes_and_warns_under_warning_severity(make_node) -> None:
    assert one(make_node("h100-cxl"), "disk", DISK).status == "pass"
    r = one(make_node("l40-kvm64"), "disk", {**DISK, "severity": "warning"})
    assert r.status == "warn"


def test_disk_inodes(make_node) -> None:
    root = make_node("h100-cxl")
    set_usage(root, "/", inodes_used=9_950_000)
    r = one(root, "disk", DISK)
    assert r.status == "fail" and "/: 50,000 free inodes of 10,000,000, below min_free_inodes 100,000" in messages(r)


def test_a_path_that_does_not_exist(make_node) -> None:
    root = make_node("workstation")
    r = one(root, "disk", {"paths": [{"path": "/models/llama", "min_free": "1TiB"}]})
    assert r.status == "pass"
    assert "/models/llama (missing; measured on /)" in messages(r)
    assert r.evidence["paths"][0]["exists"] is False and r.evidence["paths"][0]["measured"] == "/"
    r = one(root, "disk", {"paths": [{"path": "/models/llama", "must_exist": True}]})
    assert r.status == "fail" and "/models/llama does not exist" in messages(r)


def test_statvfs_of_a_simulated_root_never_asks_this_machine(make_node, monkeypatch) -> None:
    root = make_node("l40-kvm64")
    host = open_host(root)

    def refuse(path):  # type: ignore[no-untyped-def]
        raise AssertionError(f"os.statvfs({path}) on a simulated root")

    monkeypatch.setattr(os, "statvfs", refuse)
    st = host.statvfs("/models")
    assert st.size == 2000 * 1024**3 and round(st.used_percent) == 94
    with pytest.raises(MissingError):
        host.statvfs("/nowhere")


def test_statvfs_of_the_real_root() -> None:
    st = open_host("/").statvfs("/")
    assert st.size > 0 and 0 <= st.used_percent <= 100


# -- gpu_pcie ----------------------------------------------------------------------------------------------------

PCIE = {"min_gen": 4, "min_width": 16}


def _device(root, addr: str) -> str:
    """The kernel path of a PCI device's directory (where /sys/bus/pci/devices/<addr> points)."""
    return "/sys/" + os.readlink(root / "sys/bus/pci/devices" / addr).removeprefix("../../../")


def test_pcie_passes_with_full_links(make_node) -> None:
    r = one(make_node("h100-cxl"), "gpu_pcie", PCIE)
    assert r.status == "pass" and len(r.evidence["gpus"]) == 5
    g = r.evidence["gpus"][0]
    assert g["address"] == "0000:17:00.0" and g["link"] == "Gen5 x16" and g["vendor"] == "NVIDIA"
    assert all(x["class"] in ("0x030200", "0x030000") for x in r.evidence["gpus"])  # the NVMe is not a GPU


def test_pcie_fails_on_a_link_trained_down_to_x8(make_node) -> None:
    root = make_node("l40-kvm64")
    set_file(root, _device(root, "0000:07:00.0") + "/current_link_width", "8")
    r = one(root, "gpu_pcie", PCIE)
    assert r.status == "fail"
    assert "GPU 0000:07:00.0 (NVIDIA 0x26b5): link trained at Gen4 x8, narrower than min_width x16" in messages(r)
    assert "reseat" in r.remedies[0]


def test_pcie_speed_below_max_warns_and_below_min_fails_with_the_idle_caveat(make_node) -> None:
    root = make_node("h100-cxl")
    dev = _device(root, "0000:17:00.0")
    set_file(root, f"{dev}/current_link_speed", "16.0 GT/s PCIe")
    r = one(root, "gpu_pcie", PCIE)
    assert r.status == "warn" and "link running at Gen4 x16, below the device's Gen5 x16" in messages(r)
    set_file(root, f"{dev}/current_link_speed", "2.5 GT/s PCIe")
    r = one(root, "gpu_pcie", PCIE)
    assert r.status == "fail" and "Gen1 x16, below min_gen Gen4" in messages(r)
    assert "idle GPUs lower their link speed" in r.remedies[0]


def test_pcie_without_gpus(make_node) -> None:
    root = make_node("qemu-3node")
    r = one(root, "gpu_pcie", PCIE)
    # QEMU's standard VGA (1234:1111, bochs-drm) is the guest's console, not a GPU
    assert r.status == "skipped" and r.reason == ("no GPU on the PCI bus (not GPUs: 0000:00:01.0 is bound to "
                                                  "bochs-drm, a display-only driver)")
    r = one(root, "gpu_pcie", {**PCIE, "min_count": 1})
    assert r.status == "fail" and "no GPU on the PCI bus (min_count 1)" in messages(r)


def test_sysfs_walk_matches_udev_on_the_real_host() -> None:
    """The rooted walk and pyudev see the same PCI bus here (read-only; skipped where udev is unavailable)."""
    from nodeagent.facts.hardware import pci_devices
    from nodeagent.host.udev import udev_pci_devices

    udev = udev_pci_devices()
    if udev is None:
        pytest.skip("udev is not available on this machine")
    walk = pci_devices(open_host("/"))
    assert set(walk) == set(udev)
    assert all(walk[a] == udev[a] for a in walk)
