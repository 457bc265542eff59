"""Attributes with the kernel's semantics and version gates, as the peer tools found them wrong (issue 48)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest
from nodeagent_sim import PRESETS, SimKernel

from nodeagent.host.fs import RootedFS
from nodeagent.util.errors import PermissionDeniedError

STATE = "/sys/kernel/mm/damon/admin/kdamonds/0/state"
SCHEME = "/sys/kernel/mm/damon/admin/kdamonds/0/contexts/0/schemes/0"


def test_reading_a_store_only_attribute_is_eacces_as_kernfs_says(make_node) -> None:
    """kernfs_fop_open refuses a read-open of an attribute without a read bit, root or not (the captures show
    ``Permission denied`` for ``delete_region``); a readable one next to it reads."""
    root = make_node("qemu-cxl")
    fs = RootedFS(root)
    with pytest.raises(PermissionDeniedError) as exc:
        fs.read("/sys/bus/cxl/devices/decoder0.0/delete_region")
    assert "EACCES" in str(exc.value)
    with pytest.raises(PermissionDeniedError):
        fs.read_tree("/sys/bus/cxl/drivers/cxl_region")
    assert fs.read("/sys/bus/cxl/devices/decoder0.0/size") == "0x100000000"


@pytest.mark.parametrize(("kernel", "accepted"), [("6.12.0", False), ("6.15.0", True)])
def test_update_tuned_intervals_is_a_6_15_command(make_node, kernel: str, accepted: bool) -> None:
    """On 6.12 the running kdamond's ``state`` refuses the command with EINVAL (damon_sysfs_handle_cmd knows no
    such word there) and keeps running; 6.15 takes it."""
    k = SimKernel(make_node("h100-cxl-foreign-kdamond", kernel=kernel))
    assert k.tree.read(STATE) == "on"
    if accepted:
        k.write(STATE, "update_tuned_intervals")
    else:
        with pytest.raises(OSError) as exc:
            k.write(STATE, "update_tuned_intervals")
        assert exc.value.errno == errno.EINVAL
    assert k.tree.read(STATE) == "on"


@pytest.mark.parametrize(("kernel", "total_bytes"), [("6.5.0", False), ("6.6.0", True)])
def test_tried_regions_total_bytes_arrives_in_6_6(make_node, kernel: str, total_bytes: bool) -> None:
    """The tried_regions directory is 6.2's; its total_bytes 6.6's (damo's schemes_tried_regions_sz), and the
    facts' capability probe takes the directory for the 6.2 feature."""
    from nodeagent.facts.damon_caps import derive

    root = make_node("h100-cxl-foreign-kdamond", kernel=kernel)
    assert (root / SCHEME.lstrip("/") / "tried_regions").is_dir()
    assert (root / SCHEME.lstrip("/") / "tried_regions/total_bytes").is_file() == total_bytes
    caps = derive((6, 5), set(), {"contexts/*/schemes/*", "contexts/*/schemes/*/tried_regions"}, None)
    assert caps["features"]["tried_regions"] == {"present": True, "since": "6.2", "source": "tree"}


def test_dax_devices_and_memdevs_have_their_dev_t(make_node) -> None:
    """What libdaxctl/libcxl resolve: /sys/dev/char/MAJ:MIN leads to the device (whose subsystem is its bus), and
    the root's dev/ holds the node udev names (a character device where the simulator may make one)."""
    root = make_node("h100-cxl-committed")
    for name, bus, node in (("dax0.0", "dax", "dax0.0"), ("mem1", "cxl", "cxl/mem1")):
        dev = root / "sys/bus" / bus / "devices" / name
        majmin = (dev / "dev").read_text().strip()
        link = root / "sys/dev/char" / majmin
        assert os.path.realpath(link) == os.path.realpath(dev)
        assert os.path.realpath(link / "subsystem") == os.path.realpath(root / "sys/bus" / bus)
        if os.geteuid() == 0:
            st = os.lstat(root / "dev" / node)
            assert stat.S_ISCHR(st.st_mode)
            assert f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}" == majmin


def _dangling(root: Path) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root / "sys"):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            if os.path.islink(p) and not os.path.exists(p):
                out.append(p.removeprefix(str(root)))
    return sorted(out)


@pytest.mark.parametrize("preset", sorted(set(PRESETS) - {"stress"}))
def test_every_sysfs_link_leads_somewhere(make_node, preset: str) -> None:
    """Driver back-links, subsystem links, uport and dev/char links resolve inside the tree: the peer tools
    follow them (a dax driver's daxN.M link had an extra sys/, memory_tierN/subsystem led to a missing bus)."""
    root = make_node(preset)
    assert _dangling(root) == []


@pytest.mark.parametrize("preset", ["qemu-cxl", "h100-cxl", "qemu-3node"])
def test_links_still_lead_somewhere_after_apply(make_node, preset: str) -> None:
    """After regions are made, DAX devices hot-added and tiers changed through the kernel's ABI."""
    from nodeagent.cli.main import main

    root = make_node(preset)
    profile = str(Path(__file__).resolve().parents[2] / "profiles" / "cxl-inference.yaml")
    assert main(["--root", str(root), "apply", "--yes", "--skip-checks", "all", "--allow-disruptive", profile]) == 0
    assert _dangling(root) == []


@pytest.mark.parametrize(("kernel", "present"), [("6.18.0", False), ("6.19.0", True)])
def test_6_19_has_obsolete_target_and_goal_path(make_node, kernel: str, present: bool) -> None:
    """damo's sysfs/obsolete_target and schemes_quota_goal_node_memcg_used_free (6.19): a target's
    ``obsolete_target``, a goal's ``path`` and the node_memcg_{used,free}_bp metrics."""
    k = SimKernel(make_node("h100-cxl", kernel=kernel))
    admin = "/sys/kernel/mm/damon/admin/kdamonds"
    for path, value in ((f"{admin}/nr_kdamonds", "1"), (f"{admin}/0/contexts/nr_contexts", "1"),
                        (f"{admin}/0/contexts/0/targets/nr_targets", "1"),
                        (f"{admin}/0/contexts/0/schemes/nr_schemes", "1"),
                        (f"{SCHEME}/quotas/goals/nr_goals", "1")):
        k.write(path, value)
    assert k.tree.exists(f"{admin}/0/contexts/0/targets/0/obsolete_target") == present
    assert k.tree.exists(f"{SCHEME}/quotas/goals/0/path") == present
    if present:
        k.write(f"{SCHEME}/quotas/goals/0/target_metric", "node_memcg_used_bp")
    else:
        with pytest.raises(OSError) as exc:
            k.write(f"{SCHEME}/quotas/goals/0/target_metric", "node_memcg_used_bp")
        assert exc.value.errno == errno.EINVAL


#: /proc/vmstat's tiering counters on 6.18, in order (shared/reference/vmstat-tiering-keys-6.18.txt)
VMSTAT_6_18 = ("numa_hit numa_miss numa_foreign numa_interleave numa_local numa_other pgpromote_success "
               "pgpromote_candidate pgpromote_candidate_nrl pgdemote_kswapd pgdemote_direct pgdemote_khugepaged "
               "pgdemote_proactive numa_pte_updates numa_huge_pte_updates numa_hint_faults numa_hint_faults_local "
               "numa_pages_migrated").split()


@pytest.mark.parametrize(("kernel", "absent"), [("6.18.0", set()), ("6.14.0", {"pgpromote_candidate_nrl"}),
                                                ("6.12.0", {"pgpromote_candidate_nrl", "pgdemote_proactive"})])
def test_proc_vmstat_has_the_tiering_counters_of_its_release(make_node, kernel: str, absent: set[str]) -> None:
    keys = [line.split()[0] for line in (make_node("workstation", kernel=kernel) / "proc/vmstat").read_text()
            .splitlines()]
    assert keys[:len(VMSTAT_6_18) - len(absent)] == [key for key in VMSTAT_6_18 if key not in absent]


def test_nodes_memory_blocks_and_tiers_have_power_and_subsystem(make_node) -> None:
    """node0-tree-6.18, memory-block-6.18 and memory-tiering-6.18 show a ``power/`` directory (runtime PM
    attributes) and a ``subsystem`` link in each device directory; ``power/control`` takes ``on`` or ``auto``."""
    root = make_node("qemu-3node")
    k = SimKernel(root)
    want = {"control", "runtime_active_time", "runtime_status", "runtime_suspended_time"}
    devices = {"/sys/devices/system/node/node0": "node", "/sys/devices/system/memory/memory0": "memory",
               "/sys/devices/virtual/memory_tiering/memory_tier4": "memory_tiering"}
    for path, bus in devices.items():
        assert set(os.listdir(root / path.lstrip("/") / "power")) == want, path
        assert k.tree.read(f"{path}/power/runtime_status") == "unsupported"
        assert os.path.realpath(root / path.lstrip("/") / "subsystem") == os.path.realpath(root / "sys/bus" / bus)
        assert stat.S_IMODE(os.stat(root / path.lstrip("/") / "power/runtime_status").st_mode) == 0o444
    k.write("/sys/devices/system/memory/memory0/power/control", "on\n")
    assert k.tree.read("/sys/devices/system/memory/memory0/power/control") == "on"
    assert k.tree.read("/sys/devices/system/memory/memory1/power/control") == "auto"  # pooled, not shared state
    with pytest.raises(OSError) as exc:
        k.write("/sys/devices/system/node/node0/power/control", "off")
    assert exc.value.errno == errno.EINVAL


def test_a_pmem_capable_cxl_window_brings_nvdimm_bridge0(make_node) -> None:
    """cxl_acpi adds nvdimm-bridge0 under root0 when a root decoder is pmem-capable, as the 6.12 QEMU guest shows
    (realkernel/cxl-bus-6.12-qemu10.txt); a node without a CXL bus has none."""
    root = make_node("qemu-cxl")
    k = SimKernel(root)
    assert k.tree.read("/sys/bus/cxl/devices/decoder0.0/cap_pmem") == "1"
    bridge = "/sys/devices/platform/ACPI0017:00/root0/nvdimm-bridge0"
    assert k.tree.read(f"{bridge}/devtype") == "cxl_nvdimm_bridge"
    assert os.path.realpath(root / "sys/bus/cxl/devices/nvdimm-bridge0") == str(root / bridge.lstrip("/"))
    assert os.path.realpath(root / bridge.lstrip("/") / "subsystem") == os.path.realpath(root / "sys/bus/cxl")
    assert not (make_node("qemu-3node") / "sys/bus/cxl/devices/nvdimm-bridge0").exists()
