"""Read-only cross-check on the machine running the tests: the rooted sysfs walk agrees with pyudev.

pyudev cannot be rooted at a simulated tree, so it serves as an independent oracle on the real host only:
it never writes, and the walk it checks is the same code that reads a simulated root.
"""

from __future__ import annotations

import os

import pytest

from nodeagent.facts.dax import gather
from nodeagent.host import open_host

pyudev = pytest.importorskip("pyudev")


@pytest.fixture(scope="module")
def udev():  # type: ignore[no-untyped-def]
    try:
        return pyudev.Context()
    except Exception as exc:  # no libudev on this machine
        pytest.skip(f"pyudev cannot open a udev context here: {exc}")


def test_dax_devices_match_udev(udev) -> None:  # type: ignore[no-untyped-def]
    walk = {d["name"]: d for d in gather(open_host("/"))["devices"]}
    seen = {d.sys_name: d for d in udev.list_devices(subsystem="dax") if d.sys_name.startswith("dax")}
    assert set(walk) == set(seen)
    for name, dev in seen.items():
        assert walk[name]["size"] == int(dev.attributes.asstring("size"))
        target = int(dev.attributes.asstring("target_node"))
        assert walk[name]["target_node"] == (target if target >= 0 else None)
        driver = {"kmem": "system-ram", "device_dax": "devdax", None: "disabled"}.get(dev.driver, dev.driver)
        assert walk[name]["mode"] == driver


def test_memory_blocks_read_through_the_host_match_udev(udev) -> None:  # type: ignore[no-untyped-def]
    host = open_host("/")
    blocks = [d for d in udev.list_devices(subsystem="memory") if d.sys_name.startswith("memory")]
    if not blocks:
        pytest.skip("no memory blocks in sysfs here")
    for dev in blocks[:256]:
        base = f"/sys/devices/system/memory/{dev.sys_name}"
        assert host.read(f"{base}/state") == dev.attributes.asstring("state")
        if os.path.exists(f"{base}/valid_zones"):
            assert host.read(f"{base}/valid_zones") == dev.attributes.asstring("valid_zones")
        assert int(host.read(f"{base}/phys_index"), 16) == int(dev.sys_name[6:])
