"""The simulated kernel reacts to writes the way the captured real kernels do (shared/reference)."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel
from nodeagent_sim import dax as simdax

from nodeagent.facts import Facts, gather
from nodeagent.host import open_host
from nodeagent.util.errors import BusyError, MissingError, NotAllowedError, RejectedError


def oserr(k: SimKernel, path: str, value: str) -> int:
    with pytest.raises(OSError) as exc:
        k.write(path, value)
    return exc.value.errno


def test_numa_balancing_accepts_0_to_4_on_612_and_rejects_others(make_node) -> None:
    k = SimKernel(make_node("qemu-3node"))
    path = "/proc/sys/kernel/numa_balancing"
    assert k.tree.read(path) == "1"  # multi-node default, as the real 6.12 guest booted
    for v in ("2", "3", "1", "0", "4"):
        k.write(path, v + "\n")
        assert k.tree.read(path) == v
    for bad in ("7", "-1", "abc"):
        assert oserr(k, path, bad) == errno.EINVAL
        assert k.tree.read(path) == "4"  # unchanged


def test_numa_balancing_range_follows_kernel_version(make_node) -> None:
    k = SimKernel(make_node("l40-kvm64"))  # 6.8: tiering modes, no 4
    assert oserr(k, "/proc/sys/kernel/numa_balancing", "4") == errno.EINVAL
    old = SimKernel(make_node("h100-cxl", kernel="5.10.0"))
    assert oserr(old, "/proc/sys/kernel/numa_balancing", "2") == errno.EINVAL
    assert not old.tree.exists("/sys/kernel/mm/numa/demotion_enabled")
    assert not old.tree.exists("/proc/sys/kernel/numa_balancing_promote_rate_limit_MBps")


def test_demotion_enabled_is_kstrtobool_and_reads_back_true_false(make_node) -> None:
    k = SimKernel(make_node("qemu-3node"))
    path = "/sys/kernel/mm/numa/demotion_enabled"
    assert k.tree.read(path) == "false"
    for word in ("true", "1", "yes", "on", "Y"):
        k.write(path, word)
        assert k.tree.read(path) == "true"
        k.write(path, "off")
        assert k.tree.read(path) == "false"
    for bad in ("7", "maybe"):
        assert oserr(k, path, bad) == errno.EINVAL


def test_node_reclaim_floors_are_percentages(make_node) -> None:
    """vm.min_unmapped_ratio and vm.min_slab_ratio boot at 1 and 5 and take 0..100 (proc_dointvec_minmax)."""
    k = SimKernel(make_node("qemu-3node"))
    for path, boot in (("/proc/sys/vm/min_unmapped_ratio", "1"), ("/proc/sys/vm/min_slab_ratio", "5")):
        assert k.tree.read(path) == boot
        for v in ("0", "100", "37"):
            k.write(path, v)
            assert k.tree.read(path) == v
        for v in ("101", "-1", "five"):
            assert oserr(k, path, v) == errno.EINVAL
        assert k.tree.read(path) == "37"


def test_watermark_scale_factor_takes_1_to_3000(make_node) -> None:
    """vm.watermark_scale_factor boots at 10 and takes 1..3000 (proc_dointvec_minmax, SYSCTL_ONE..THREE_THOUSAND)."""
    k = SimKernel(make_node("qemu-3node"))
    path = "/proc/sys/vm/watermark_scale_factor"
    assert k.tree.read(path) == "10"
    for v in ("1", "3000", "1000"):
        k.write(path, v)
        assert k.tree.read(path) == v
    for v in ("0", "3001", "-5", "ten"):
        assert oserr(k, path, v) == errno.EINVAL
    assert k.tree.read(path) == "1000"


def test_watermark_scale_factor_stopped_at_1000_before_5_17(make_node) -> None:
    k = SimKernel(make_node("qemu-3node", kernel="5.15.0-nodeagent-sim"))
    path = "/proc/sys/vm/watermark_scale_factor"
    k.write(path, "1000")
    assert oserr(k, path, "1001") == errno.EINVAL
    assert k.tree.read(path) == "1000"


def test_min_free_kbytes_boots_from_memory_and_takes_any_non_negative_int(make_node) -> None:
    """init_per_zone_wmark_min: sqrt(16 x lowmem KiB) clamped to 128 KiB..256 MiB, raised by khugepaged's
    recommendation while THP is not `never` (11 pageblocks per populated zone up to ZONE_NORMAL: the Debian 6.12
    QEMU guest, DMA + DMA32 on node 0 and DMA32 on node 1, shows 67584); proc_dointvec_minmax from 0."""
    path = "/proc/sys/vm/min_free_kbytes"
    assert SimKernel(make_node("qemu-3node")).tree.read(path) == "67584"  # as the real guest shows it
    k = SimKernel(make_node("workstation"))  # 256 GiB on one node: sqrt(16 x 268435456 KiB) = 65536, below the
    assert k.tree.read(path) == "67584"  # recommendation for its DMA, DMA32 and Normal zones
    k.write(path, "0")
    k.write(path, str(2**31 - 1))
    assert k.tree.read(path) == str(2**31 - 1)
    for v in ("-1", str(2**31), "lots"):
        assert oserr(k, path, v) == errno.EINVAL


def test_lru_gen_enabled_takes_y_n_and_feature_bits(make_node) -> None:
    """enabled_store: 'y'/'n' by their first letter, else kstrtouint(buf, 0); shown as 0x%04x."""
    k = SimKernel(make_node("qemu-3node"))
    path = "/sys/kernel/mm/lru_gen/enabled"
    assert k.tree.read(path) == "0x0007"
    for v, shown in (("n", "0x0000"), ("yes", "0x0007"), ("No", "0x0000"), ("0x0003", "0x0003"), ("1", "0x0001"),
                     ("0xff", "0x0007")):
        k.write(path, v)
        assert k.tree.read(path) == shown
    for v in ("maybe", "-1", str(2**32)):
        assert oserr(k, path, v) == errno.EINVAL


def test_lru_gen_min_ttl_ms_reads_back_in_whole_jiffies(make_node) -> None:
    """min_ttl_ms_store keeps msecs_to_jiffies (rounded up; HZ=250 here); the show converts back."""
    k = SimKernel(make_node("qemu-3node"))
    path = "/sys/kernel/mm/lru_gen/min_ttl_ms"
    assert k.tree.read(path) == "0"
    for v, shown in (("1000", "1000"), ("1001", "1004"), ("1", "4"), ("0x10", "16"), ("0", "0")):
        k.write(path, v)
        assert k.tree.read(path) == shown
    for v in ("-1", "1s", str(2**32)):
        assert oserr(k, path, v) == errno.EINVAL


def test_thp_shows_the_selected_word_in_brackets(make_node) -> None:
    k = SimKernel(make_node("workstation"))
    k.write("/sys/kernel/mm/transparent_hugepage/defrag", "defer+madvise")
    assert k.tree.read("/sys/kernel/mm/transparent_hugepage/defrag") == \
        "always defer [defer+madvise] madvise never"
    assert oserr(k, "/sys/kernel/mm/transparent_hugepage/enabled", "sometimes") == errno.EINVAL


def test_read_only_and_missing_attributes(make_node) -> None:
    k = SimKernel(make_node("qemu-3node"))
    assert oserr(k, "/sys/devices/system/node/node0/meminfo", "x") == errno.EACCES
    assert oserr(k, "/sys/kernel/mm/nope", "x") == errno.ENOENT
    assert oserr(k, "/sys/devices/system/memory/auto_online_blocks", "sometimes") == errno.EINVAL


def test_onlining_dax_memory_makes_a_cpuless_node_in_a_lower_tier(make_node) -> None:
    root = make_node("qemu-3node")
    k = SimKernel(root)
    before = gather(open_host(root))
    assert [n.id for n in before.nodes] == [0, 1] and before.tiers == {4: [0, 1]}
    with k.locked():
        ids = simdax.to_system_ram(k, "dax0.0", None)
    assert ids == list(range(49, 56))  # 0x181200000 + 1006 MiB, rounded inwards to 128 MiB blocks (real: 49..55)
    for n in ids:
        k.write(f"/sys/devices/system/memory/memory{n}/state", "online_movable")
    f = gather(open_host(root))
    node2 = f.node(2)
    assert node2 is not None and not node2.has_cpu and node2.has_memory and not node2.has_normal_memory
    assert node2.mem_total == 7 * 128 * 1024**2  # MemTotal 917504 kB, as the real guest showed
    assert f.tiers == {4: [0, 1], 22: [2]}
    assert k.tree.read("/sys/devices/system/memory/memory49/valid_zones") == "Movable"
    # Offlining everything takes the node out of its tier again.
    for n in ids:
        k.write(f"/sys/devices/system/memory/memory{n}/state", "offline")
    f = gather(open_host(root))
    assert f.tiers == {4: [0, 1]} and not f.node(2).has_memory
    assert oserr(k, "/sys/devices/system/memory/memory49/state", "offline") == errno.EINVAL


def test_offlining_a_block_with_unmovable_pages_is_ebusy(make_node) -> None:
    root = make_node("h100-cxl-autoonline")
    k = SimKernel(root)
    block = simdax.block_range(k, "dax0.0")[0]
    state = k.state()
    state["unmovable_blocks"] = [block]
    k.save_state(state)
    assert oserr(k, f"/sys/devices/system/memory/memory{block}/state", "offline") == errno.EBUSY
    # nodeagent itself never writes a memory block (daxctl does): its host layer refuses the path, and maps the
    # kernel's EBUSY where daxctl's answer or a kdamond's write carries it
    host = open_host(root)
    with pytest.raises(NotAllowedError):
        host.write(f"/sys/devices/system/memory/memory{block}/state", "offline")
    from nodeagent.host.fs import map_oserror

    assert isinstance(map_oserror(OSError(errno.EBUSY, "busy"), "/sys/kernel/mm/damon/admin/kdamonds/0/state",
                                  "write"), BusyError)


def test_host_maps_errno_and_guards_paths(make_node) -> None:
    root = make_node("qemu-3node")
    host = open_host(root)
    with pytest.raises(RejectedError) as exc:
        host.write("/proc/sys/kernel/numa_balancing", "7")
    assert "EINVAL" in str(exc.value)
    with pytest.raises(NotAllowedError):
        host.write("/etc/passwd", "x")
    with pytest.raises(NotAllowedError):
        host.write("/sys/devices/system/node/node0/meminfo", "x")
    with pytest.raises(MissingError):
        host.write("/sys/kernel/mm/damon/admin/kdamonds/99/state", "on")
    # A symlink that leads out of the root is never followed for a write.
    (root / "proc/sys/vm/zone_reclaim_mode").unlink()
    (root / "proc/sys/vm/zone_reclaim_mode").symlink_to("/etc/hostname")
    with pytest.raises(NotAllowedError):
        host.write("/proc/sys/vm/zone_reclaim_mode", "0")
    assert [w.ok for w in host.fs.write_log] == [False, False]


def test_writes_from_other_processes_see_the_same_node(make_node) -> None:
    root = make_node("qemu-3node")
    code = ("import sys; from nodeagent_sim import SimKernel; "
            "SimKernel(sys.argv[1]).write('/proc/sys/kernel/numa_balancing', '3')")
    subprocess.run([sys.executable, "-c", code, str(root)], check=True)
    assert open_host(root).read("/proc/sys/kernel/numa_balancing") == "3"
    assert SimKernel(root).journal()[-1]["value"] == "3"


def test_facts_round_trip_json_and_never_write(make_node) -> None:
    root = make_node("h100-cxl-autoonline")
    before = SimKernel(root).journal()
    host = open_host(root)
    f = gather(host)
    assert Facts.from_dict(json.loads(f.to_json())) == f
    assert host.fs.write_log == [] and SimKernel(root).journal() == before
    assert f.tiers == {4: [0, 1], 22: [2, 3]}
    assert [n.id for n in f.nodes if not n.has_cpu] == [2, 3]
    assert f.node(2).has_normal_memory  # auto-onlined by the kernel into ZONE_NORMAL


def test_host_commands_resolve_inside_a_simulated_root_only(make_node, tmp_path: Path) -> None:
    from nodeagent.util.errors import CommandError

    plain = tmp_path / "plainroot"
    plain.mkdir()
    with pytest.raises(CommandError) as exc:
        open_host(plain).run(["true"])
    assert "refusing to run true" in str(exc.value)
    root = make_node("qemu-3node")
    tool = root / "usr/bin/hello"
    tool.parent.mkdir(parents=True, exist_ok=True)
    tool.write_text("#!/bin/sh\necho \"hi $LANG\"; echo oops >&2; exit 3\n")
    tool.chmod(0o755)
    host = open_host(root)
    res = host.run(["hello"])
    assert (res.returncode, res.stdout.strip(), res.stderr.strip()) == (3, "hi C", "oops")
    with pytest.raises(CommandError) as exc:
        host.run(["hello"], ok_codes=(0,))
    assert "exited 3: oops" in str(exc.value)
    with pytest.raises(CommandError) as exc:
        host.run(["no-such-tool"])
    assert "command not found" in str(exc.value)


# -- what the real-kernel scenarios (tests/realkernel/test_scenarios.py) showed the 6.12 guest doing ------------

NODE = "/sys/devices/system/node"
MEMB = "/sys/devices/system/memory"


def test_qemu_3node_boots_with_the_guest_knobs(make_node) -> None:
    k = SimKernel(make_node("qemu-3node"))
    assert k.tree.read("/proc/sys/kernel/numa_balancing") == "1"
    assert k.tree.read("/sys/kernel/mm/transparent_hugepage/enabled") == "[always] madvise never"  # Debian's build
    assert k.tree.read("/sys/kernel/mm/transparent_hugepage/defrag") == "always defer defer+madvise [madvise] never"


def test_distance_has_one_entry_per_online_node(make_node) -> None:
    k = SimKernel(make_node("qemu-3node"))
    assert k.tree.read(f"{NODE}/node0/distance") == "10 20" and not k.tree.exists(f"{NODE}/node2")
    with k.locked():
        ids = simdax.to_system_ram(k, "dax0.0", "Movable")
    assert [k.tree.read(f"{NODE}/node{n}/distance") for n in range(3)] == ["10 20 20", "20 10 20", "20 20 10"]
    for n in ids:
        k.write(f"{MEMB}/memory{n}/state", "offline")
    k.write("/sys/bus/dax/drivers/kmem/unbind", "dax0.0")  # hot-remove: node2 goes offline again
    assert k.tree.read(f"{NODE}/node0/distance") == "10 20" and not k.tree.exists(f"{NODE}/node2")


def test_distance_skips_offline_nodes_in_the_middle(make_node) -> None:
    root = make_node("h100-cxl")
    k = SimKernel(root)
    with k.locked():
        simdax.to_system_ram(k, "dax1.0", "Movable")  # node3 online, node2 not
    assert k.tree.read(f"{NODE}/node3/distance") == "24 14 10"  # to nodes 0, 1, 3
    assert k.tree.read(f"{NODE}/node0/distance") == "10 21 24"
    f = gather(open_host(root))
    assert [n.id for n in f.nodes] == [0, 1, 3] and f.node(3).distances == [24, 14, 10]


def test_an_offline_block_lists_the_default_zone_first(make_node) -> None:
    k = SimKernel(make_node("qemu-3node"))
    with k.locked():
        ids = simdax.to_system_ram(k, "dax0.0", "Movable")
    k.write(f"{MEMB}/memory{ids[3]}/state", "offline")  # the rest of node2 is Movable: plain online goes there
    assert k.tree.read(f"{MEMB}/memory{ids[3]}/valid_zones") == "Movable Normal"
    for n in ids[:3] + ids[4:]:
        k.write(f"{MEMB}/memory{n}/state", "offline")
    k.write(f"{MEMB}/memory{ids[0]}/state", "online_kernel")
    k.write(f"{MEMB}/memory{ids[1]}/state", "online_kernel")
    k.write(f"{MEMB}/memory{ids[1]}/state", "offline")
    assert k.tree.read(f"{MEMB}/memory{ids[1]}/valid_zones") == "Normal Movable"


def test_kmem_takes_a_devdax_device_and_the_kernel_onlines_it(make_node) -> None:
    """unbind from device_dax + kmem/new_id, with auto_online_blocks=online: hot-added AND onlined in ZONE_NORMAL
    at once; the bind that follows is EBUSY (the guest's bash: `write error: Device or resource busy`)."""
    k = SimKernel(make_node("qemu-3node"))
    k.write("/sys/bus/dax/drivers/device_dax/unbind", "dax0.0")
    k.write("/sys/bus/dax/drivers/kmem/new_id", "dax0.0")
    assert oserr(k, "/sys/bus/dax/drivers/kmem/bind", "dax0.0") == errno.EBUSY
    assert {k.tree.read(f"{NODE}/node2/memory{n}/valid_zones") for n in range(49, 56)} == {"Normal"}
    assert k.tree.read(f"{NODE}/has_normal_memory") == "0-2"
