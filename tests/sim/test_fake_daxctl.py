"""The fake daxctl against the real daxctl v76 captures (shared/reference/realkernel), and the kernel
reactions behind it: kmem hot-add per the auto-online policy, zones, meminfo, tiers, memmap, EBUSY, ENOMEM."""

from __future__ import annotations

import json
import os
from pathlib import Path

from nodeagent_sim import SimKernel
from nodeagent_sim import dax as simdax
from nodeagent_sim.fake_daxctl import commands, run

from nodeagent.util.kfmt import parse_meminfo

GiB = 1024**3


def daxctl(root: Path, *argv: str) -> tuple[int, str, str]:
    """Through the installed launcher, as the agent runs it."""
    import subprocess

    proc = subprocess.run([str(root / "usr/bin/daxctl"), *argv], capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


# Verbatim from realkernel/out-dax-3node.txt (ndctl/daxctl 76.1, kernel 6.12.95, QEMU 3-node guest).
REAL_LIST_DEVDAX = """[
  {
    "chardev":"dax0.0",
    "size":1054867456,
    "target_node":2,
    "align":2097152,
    "mode":"devdax"
  }
]
"""
REAL_ABORT = """dax0.0: error: kernel policy will auto-online memory, aborting
error reconfiguring devices: Device or resource busy
reconfigured 0 devices
"""
REAL_RECONFIGURED = """[
  {
    "chardev":"dax0.0",
    "size":1054867456,
    "target_node":2,
    "align":2097152,
    "mode":"system-ram",
    "online_memblocks":7,
    "total_memblocks":7,
    "movable":true
  }
]
"""
REAL_MAPPINGS = """    "mappings":[
      {
        "page_offset":0,
        "start":6461325312,
        "end":7516192767,
        "size":1054867456
      }
    ]"""
REAL_RACE = """dax0.0:
  WARNING: detected a race while onlining memory
  Some memory may not be in the expected zone. It is
  recommended to disable any other onlining mechanisms,
  and retry. If onlining is to be left to other agents,
  use the --no-online option to suppress this warning
dax0.0: all memory sections (7) already online
onlined memory for 0 devices
"""


def test_qemu_3node_replays_the_real_transcript(make_node) -> None:
    root = make_node("qemu-3node")
    assert daxctl(root, "list", "-D") == (0, REAL_LIST_DEVDAX, "")
    assert daxctl(root, "reconfigure-device", "--mode=system-ram", "dax0.0") == (240, "", REAL_ABORT)
    assert daxctl(root, "list", "-D")[1] == REAL_LIST_DEVDAX  # the abort changed nothing
    k = SimKernel(root)
    k.write("/sys/devices/system/memory/auto_online_blocks", "offline")
    assert daxctl(root, "reconfigure-device", "--mode=system-ram", "dax0.0") == (0, REAL_RECONFIGURED,
                                                                                 "reconfigured 1 device\n")
    code, out, _ = daxctl(root, "list", "-DM")
    assert code == 0 and REAL_MAPPINGS in out
    assert daxctl(root, "online-memory", "dax0.0") == (1, "", REAL_RACE)
    # The kernel side, as captured: node2 CPU-less with 7 x 128 MiB movable, tier 22, driver kmem.
    t = k.tree
    assert t.read("/sys/devices/system/node/online") == "0-2"
    assert t.read("/sys/devices/system/node/has_memory") == "0-2"
    assert t.read("/sys/devices/system/node/has_normal_memory") == "0-1"
    assert t.read("/sys/devices/system/node/node2/cpulist") == ""
    assert parse_meminfo(t.read("/sys/devices/system/node/node2/meminfo"))["MemTotal"] == 917504
    assert t.read("/sys/devices/virtual/memory_tiering/memory_tier22/nodelist") == "2"
    assert t.read("/sys/devices/virtual/memory_tiering/memory_tier4/nodelist") == "0-1"
    assert sorted(n for n in os.listdir(t.local("/sys/devices/system/node/node2")) if n.startswith("memory")) == \
        [f"memory{i}" for i in range(49, 56)]
    assert os.readlink(t.local("/sys/bus/dax/devices/dax0.0/driver")).endswith("bus/dax/drivers/kmem")
    assert {t.read(f"/sys/devices/system/memory/memory{i}/valid_zones") for i in range(49, 56)} == {"Movable"}


def test_writes_follow_daxctl_order(make_node) -> None:
    root = make_node("qemu-3node")
    k = SimKernel(root)
    k.write("/sys/devices/system/memory/auto_online_blocks", "offline")
    mark = len(k.journal())
    daxctl(root, "reconfigure-device", "--mode=system-ram", "dax0.0")
    writes = [(w["path"], w["value"], w["result"]) for w in k.journal()[mark:]]
    assert writes[:4] == [
        ("/sys/bus/dax/drivers/device_dax/remove_id", "dax0.0", "ok"),
        ("/sys/bus/dax/drivers/device_dax/unbind", "dax0.0", "ok"),
        ("/sys/bus/dax/drivers/kmem/new_id", "dax0.0", "ok"),  # attaches at once...
        ("/sys/bus/dax/drivers/kmem/bind", "dax0.0", "EBUSY"),  # ...so the bind daxctl ignores fails
    ]
    assert sorted(p for p, _, _ in writes[4:]) == [f"/sys/devices/system/memory/memory{i}/state" for i in range(49, 56)]
    assert {(v, r) for _, v, r in writes[4:]} == {("online_movable", "ok")}
    assert [c["argv"] for c in commands(root)] == [["daxctl", "reconfigure-device", "--mode=system-ram", "dax0.0"]]


def test_cxl_memory_onlined_at_boot_replays_the_real_transcript(make_node) -> None:
    """realkernel/out-cxl-qemu10-sysfs-nohv.txt: dax_cxl + kmem bound at boot, online in ZONE_NORMAL."""
    root = make_node("h100-cxl-autoonline")
    code, out, err = daxctl(root, "list", "-D", "-d", "dax1.0")
    assert code == 0 and json.loads(out) == [{"chardev": "dax1.0", "size": 2 * 1024**4, "target_node": 3,
                                              "align": 2097152, "mode": "system-ram", "online_memblocks": 1024,
                                              "total_memblocks": 1024, "movable": False}]
    SimKernel(root).write("/sys/devices/system/memory/auto_online_blocks", "offline")
    code, out, err = daxctl(root, "reconfigure-device", "--mode=system-ram", "dax1.0")
    assert code == 0
    assert err.startswith("dax1.0 was already in system-ram mode\ndax1.0:\n  WARNING: detected a race while onlining "
                          "memory\n")
    assert err.endswith("dax1.0: all memory sections (1024) already online\nreconfigured 1 device\n")
    assert json.loads(out)[0]["movable"] is False  # "reconfigured 1 device", and nothing moved


def test_force_and_no_movable_let_the_kernel_online_first(make_node) -> None:
    root = make_node("qemu-3node")
    k = SimKernel(root)
    k.write("/sys/devices/system/memory/auto_online_blocks", "online_movable")
    code, out, err = daxctl(root, "reconfigure-device", "--mode=system-ram", "--no-movable", "dax0.0")
    # No abort with --no-movable: the kernel onlines the memory (Movable, its policy), daxctl warns and exits 0.
    assert code == 0 and "detected a race" in err and err.endswith("reconfigured 1 device\n")
    assert json.loads(out)[0]["movable"] is True


def test_auto_online_abort_also_with_no_online(make_node) -> None:
    root = make_node("qemu-3node")
    code, _, err = daxctl(root, "reconfigure-device", "--mode=system-ram", "--no-online", "dax0.0")
    assert code == 240 and "kernel policy will auto-online memory, aborting" in err


def test_offline_stops_at_a_block_with_unmovable_pages(make_node) -> None:
    root = make_node("qemu-3node")
    k = SimKernel(root)
    k.write("/sys/devices/system/memory/auto_online_blocks", "offline")
    daxctl(root, "reconfigure-device", "--mode=system-ram", "dax0.0")
    state = k.state()
    state["unmovable_blocks"] = [52]
    k.save_state(state)
    code, out, err = daxctl(root, "offline-memory", "dax0.0")
    assert code == 240 and out == ""
    assert ("libdaxctl: offline_one_memblock: dax0.0: Failed to offline "
            "/sys/devices/system/node/node2/memory52/state: Device or resource busy") in err
    assert err.endswith("dax0.0: failed to offline memory: Device or resource busy\n"
                        "error offlining memory: Device or resource busy\nofflined memory for 0 devices\n")
    assert k.tree.read("/sys/devices/system/memory/memory52/state") == "online"
    # mode change refused while memory is online (and the udev-style --force offlines first, then fails too)
    assert daxctl(root, "reconfigure-device", "--mode=devdax", "dax0.0")[0] == 240
    assert daxctl(root, "reconfigure-device", "--mode=devdax", "-f", "dax0.0")[0] == 240


def test_devdax_round_trip_hot_removes_and_frees_the_memmap(make_node) -> None:
    root = make_node("h100-cxl")
    k = SimKernel(root)
    free0 = parse_meminfo(k.tree.read("/sys/devices/system/node/node0/meminfo"))["MemFree"]
    k.write("/sys/devices/system/memory/auto_online_blocks", "offline")
    assert daxctl(root, "reconfigure-device", "-m", "system-ram", "dax0.0")[0] == 0
    # 2 TiB of struct pages (64 B per 4 KiB page) come out of node 0's DRAM, the nearest node with normal memory.
    free1 = parse_meminfo(k.tree.read("/sys/devices/system/node/node0/meminfo"))["MemFree"]
    assert free0 - free1 == 32 * GiB // 1024
    assert daxctl(root, "offline-memory", "dax0.0")[0] == 0
    assert daxctl(root, "reconfigure-device", "--mode=devdax", "dax0.0")[0] == 0
    assert not k.tree.exists("/sys/devices/system/node/node2")  # CPU-less node with no memory left goes away
    assert not k.tree.exists("/sys/devices/system/memory/memory512")
    assert parse_meminfo(k.tree.read("/sys/devices/system/node/node0/meminfo"))["MemFree"] == free0
    assert json.loads(daxctl(root, "list", "-D", "-d", "dax0.0")[1])[0]["mode"] == "devdax"


def test_onlining_that_fails_midway_leaves_what_it_did(make_node) -> None:
    root = make_node("h100-cxl")
    k = SimKernel(root)
    k.write("/sys/devices/system/memory/auto_online_blocks", "offline")
    first = 1024 // 2  # dax0.0 starts at 1 TiB: memory512 onwards
    state = k.state()
    state["online_fail_blocks"] = [first + 300]
    k.save_state(state)
    code, out, err = daxctl(root, "reconfigure-device", "--mode=system-ram", "all")
    # daxctl goes on to the next device; the exit code is the last device's (0): the summary says 1 device.
    assert code == 0 and err.endswith("reconfigured 1 device\n")
    assert "dax0.0: failed to online memory: Cannot allocate memory" in err
    assert [d["chardev"] for d in json.loads(out)] == ["dax1.0"]
    online = sum(k.tree.read(f"/sys/devices/system/memory/memory{n}/state") == "online"
                 for n in range(first, first + 1024))
    assert 0 < online < 1024


def test_missing_device_and_usage_errors(make_node) -> None:
    root = make_node("qemu-3node")
    assert daxctl(root, "reconfigure-device", "--mode=system-ram", "dax9.0") == (
        250, "", "error reconfiguring devices: No such device or address\nreconfigured 0 devices\n")
    code, _, err = daxctl(root, "reconfigure-device", "--mode=system-ram")
    assert code == 129 and 'specify a device to reconfigure, or "all"' in err
    code, _, err = daxctl(root, "reconfigure-device", "--bogus", "dax0.0")
    assert code == 129 and "unknown option `bogus'" in err
    assert daxctl(root, "version") == (0, "76.1\n", "")
    assert run(root, ["offline-memory", "dax0.0"])[0] == 250  # devdax: memory operations do not apply


def test_unplugged_device_is_gone_from_sysfs_and_daxctl(make_node) -> None:
    root = make_node("h100-cxl")
    simdax.unplug(SimKernel(root), "dax1.0")
    assert not (root / "sys/bus/dax/devices/dax1.0").exists()
    assert [d["chardev"] for d in json.loads(daxctl(root, "list")[1])] == ["dax0.0"]
