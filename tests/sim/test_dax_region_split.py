"""The simulator's dynamic DAX regions (drivers/dax/bus.c) and the fake daxctl's create/destroy/resize: a CXL
region's device can be shrunk and a second device made in the freed space; static (hmem, pmem) regions cannot."""

from __future__ import annotations

import errno
from pathlib import Path

from nodeagent_sim import fake_daxctl
from nodeagent_sim.kernel import SimKernel

GiB = 1024**3
TiB = 1024**4
REG1 = "/sys/devices/platform/ACPI0017:00/root0/decoder0.1/region1/dax_region1"


def _write_errno(k: SimKernel, path: str, value: str) -> int:
    try:
        k.write(path, value)
    except OSError as exc:
        return exc.errno or 0
    return 0


def test_the_kernel_rules_of_a_dynamic_region(make_node) -> None:
    k = SimKernel(make_node("h100-cxl"))  # dax1.0: 2 TiB, devdax (bound to device_dax)
    attrs = f"{REG1}/dax_region"
    assert k.tree.read(f"{attrs}/available_size") == "0" and k.tree.read(f"{attrs}/seed") == ""
    assert _write_errno(k, f"{attrs}/create", "1") == errno.ENOSPC  # nothing available
    assert _write_errno(k, "/sys/bus/dax/devices/dax1.0/size", str(TiB)) == errno.EBUSY  # bound
    k.write("/sys/bus/dax/drivers/device_dax/unbind", "dax1.0")
    assert _write_errno(k, "/sys/bus/dax/devices/dax1.0/size", str(TiB + 4096)) == errno.EINVAL  # misaligned
    k.write("/sys/bus/dax/devices/dax1.0/size", str(TiB + 512 * GiB))
    assert k.tree.read(f"{attrs}/available_size") == str(512 * GiB)
    assert _write_errno(k, f"{attrs}/create", "2") == errno.EINVAL
    k.write(f"{attrs}/create", "1")
    assert k.tree.read(f"{attrs}/seed") == "dax1.1" and k.tree.read(f"{attrs}/create") == "dax1.1"
    assert _write_errno(k, "/sys/bus/dax/devices/dax1.1/size", str(TiB)) == errno.ENOSPC  # more than available
    k.write("/sys/bus/dax/devices/dax1.1/size", str(512 * GiB))
    assert int(k.tree.read("/sys/bus/dax/devices/dax1.1/resource"), 16) == 3 * TiB + TiB + 512 * GiB
    assert k.tree.read(f"{attrs}/available_size") == "0"
    k.write("/sys/bus/dax/drivers/device_dax/bind", "dax1.1")
    assert k.tree.read(f"{attrs}/seed") == ""  # a bound seed is no longer the seed
    assert _write_errno(k, f"{attrs}/delete", "dax1.1") == errno.EBUSY  # bound
    assert _write_errno(k, f"{attrs}/delete", "dax1.0") == errno.EBUSY  # device 0 stays
    assert _write_errno(k, f"{attrs}/delete", "dax0.0") == errno.ENXIO  # another region's
    k.write("/sys/bus/dax/drivers/device_dax/unbind", "dax1.1")
    k.write("/sys/bus/dax/devices/dax1.1/size", "0")
    k.write(f"{attrs}/delete", "dax1.1")
    assert not k.tree.exists("/sys/bus/dax/devices/dax1.1")
    k.write("/sys/bus/dax/devices/dax1.0/size", str(2 * TiB))  # grows back into the space right after it
    assert k.tree.read(f"{attrs}/available_size") == "0"


def test_a_static_region_has_no_create_and_a_read_only_size(make_node) -> None:
    root = make_node("h100-cxl-hmem")
    k = SimKernel(root)
    assert not k.tree.exists("/sys/devices/platform/hmem.1/dax_region/create")
    assert _write_errno(k, "/sys/devices/platform/hmem.1/dax_region/create", "1") == errno.ENOENT
    assert _write_errno(k, "/sys/bus/dax/devices/dax1.0/size", str(TiB)) == errno.EACCES


def _daxctl(root: Path, *argv: str) -> tuple[int, str, str]:
    return fake_daxctl.run(root, list(argv))


def test_daxctl_splits_a_region_in_the_kernels_order(make_node) -> None:
    root = make_node("h100-cxl")
    rc, _, err = _daxctl(root, "reconfigure-device", "-s", "1536g", "dax1.0")
    assert rc == 240 and "failed to set size" in err  # EBUSY: still bound
    assert _daxctl(root, "disable-device", "dax1.0")[0] == 0
    assert _daxctl(root, "reconfigure-device", "-s", "1536g", "dax1.0")[0] == 0
    rc, out, err = _daxctl(root, "create-device", "-r", "1", "-s", "512g")
    assert rc == 0 and '"chardev":"dax1.1"' in out and '"mode":"devdax"' in out and "created 1 device" in err
    rc, out, err = _daxctl(root, "create-device", "-r", "1", "-s", "1g")
    assert rc == 228 and "created 0 devices" in err  # ENOSPC
    assert _daxctl(root, "destroy-device", "dax1.1")[0] == 250  # ENXIO: active, needs --force
    assert _daxctl(root, "destroy-device", "--force", "dax1.1")[0] == 0
    assert _daxctl(root, "reconfigure-device", "-s", "2t", "dax1.0")[0] == 0
    assert _daxctl(root, "enable-device", "dax1.0")[0] == 0
    rc, _, err = _daxctl(root, "disable-device", "dax0.0")
    assert rc == 0
    assert _daxctl(root, "reconfigure-device", "--mode=system-ram", "--no-movable", "dax0.0")[0] == 0
    rc, _, err = _daxctl(root, "disable-device", "dax0.0")
    assert rc == 250 and "only applicable in devdax mode" in err
