"""Proactive reclaim from the mount table: the root cgroup's ``memory.reclaim`` is found where
``/proc/self/mountinfo`` says cgroup v2 is mounted, and the write allow-list follows it — no path outside a
cgroup2 mount, never a v1 hierarchy, never a child cgroup, never a cgroup mount something was mounted over."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel, presets

from nodeagent.cli.main import main
from nodeagent.facts import gather
from nodeagent.facts.reclaim import from_facts
from nodeagent.host import open_host
from nodeagent.host.mountinfo import cgroup2_mounts, is_cgroup2_root_file, memcg_reclaim, parse_mountinfo
from nodeagent.util.errors import NotAllowedError
from tests.e2e.test_placement import free_kb, plan_json, profile, stuck

#: This shape is real: a Debian 11-era systemd host in the hybrid layout (the machine these tests were written
#: on), v1 controllers under a tmpfs and a controller-less cgroup2 at /sys/fs/cgroup/unified.
HYBRID = """\
23 27 0:22 / /sys rw,relatime - sysfs sysfs rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""


def _node(sim_base: Path, tmp: str, **changes: object) -> Path:
    preset = replace(presets.get("qemu-placement-full"), **changes)
    return presets.build(preset, sim_base / tmp)


def test_mountinfo_parsing_of_a_hybrid_host() -> None:
    mounts = parse_mountinfo(HYBRID + "garbage line\n")
    assert [m.mount_point for m in cgroup2_mounts(mounts)] == ["/sys/fs/cgroup/unified"]
    assert not is_cgroup2_root_file(mounts, "/sys/fs/cgroup/memory/memory.reclaim")  # v1
    assert not is_cgroup2_root_file(mounts, "/sys/fs/cgroup/memory.reclaim")  # a tmpfs
    assert is_cgroup2_root_file(mounts, "/sys/fs/cgroup/unified/memory.reclaim")
    assert not is_cgroup2_root_file(mounts, "/sys/fs/cgroup/unified/system.slice/memory.reclaim")  # a child
    # octal escapes of the kernel, and a later mount over the cgroup2 one hides it
    more = parse_mountinfo("50 27 0:40 / /srv/cg\\040v2 rw - cgroup2 cgroup2 rw\n"
                           "51 27 0:41 / /sys/fs/cgroup/unified rw - tmpfs tmpfs rw\n" + HYBRID.splitlines()[-1])
    assert is_cgroup2_root_file(more[:1], "/srv/cg v2/memory.reclaim")
    child = parse_mountinfo("52 27 0:38 /system.slice /run/slice rw - cgroup2 cgroup2 rw\n")
    assert not is_cgroup2_root_file(child, "/run/slice/memory.reclaim") and cgroup2_mounts(child) == []
    assert not is_cgroup2_root_file(more[:2], "/sys/fs/cgroup/unified/memory.reclaim")


def test_unified_default_is_found_from_mountinfo(make_node) -> None:
    host = open_host(make_node("qemu-placement-full"))
    assert memcg_reclaim(host.fs) == ("/sys/fs/cgroup/memory.reclaim", "/sys/fs/cgroup")
    rf = from_facts(gather(host))
    assert rf.memcg_reclaim and rf.memcg_reclaim_path == "/sys/fs/cgroup/memory.reclaim"


def test_cgroup2_mounted_elsewhere_gets_the_pass_there(scratch_dir: Path, tmp_path: Path, capsys) -> None:
    root = _node(scratch_dir, "n", cgroup2_mount="/run/cgroup2")
    prof = profile(tmp_path)
    change = next(c for c in plan_json(root, prof, capsys)["changes"] if c["target"] == "placement.node0")
    assert change["path"] == "/run/cgroup2/memory.reclaim"
    host = open_host(root)
    assert host.fs.allowed("/run/cgroup2/memory.reclaim")
    assert not host.fs.allowed("/sys/fs/cgroup/memory.reclaim")  # no cgroup2 mount there on this node
    assert not host.fs.allowed("/run/cgroup2/system.slice/memory.reclaim")  # nodeagent never configures cgroups
    assert not host.fs.allowed("/tmp/memory.reclaim")
    assert main(["--root", str(root), "apply", "--yes", prof]) == 0
    assert stuck(root)[0] is False and free_kb(root, 0) >= 256 * 1024
    assert any(e["path"] == "/run/cgroup2/memory.reclaim" and e["result"] == "ok" for e in SimKernel(root).journal())


def test_hybrid_hierarchy_offers_no_reclaim_and_v1_is_never_written(scratch_dir: Path, tmp_path: Path, capsys) -> None:
    root = _node(scratch_dir, "n", cgroup_hybrid=True)
    # a memory.reclaim-looking file in the v1 memory hierarchy must not make it writable
    SimKernel(root).tree.file("/sys/fs/cgroup/memory/memory.reclaim", "", 0o200)
    host = open_host(root)
    rf = from_facts(gather(host))
    assert (rf.memcg_reclaim, rf.cgroup2_mount) == (False, "/sys/fs/cgroup/unified")
    with pytest.raises(NotAllowedError, match="not in nodeagent's write allow-list"):
        host.write("/sys/fs/cgroup/memory/memory.reclaim", "64M")
    plan = plan_json(root, profile(tmp_path), capsys)
    (problem,) = [p for p in plan["problems"] if p["target"] == "placement.node0"]
    assert "no memory.reclaim on the cgroup v2 mount /sys/fs/cgroup/unified" in problem["message"]


def test_no_cgroup2_at_all_says_so(scratch_dir: Path, tmp_path: Path, capsys) -> None:
    root = _node(scratch_dir, "n", cgroup2_mount=None)
    plan = plan_json(root, profile(tmp_path), capsys)
    (problem,) = [p for p in plan["problems"] if p["target"] == "placement.node0"]
    assert "no cgroup v2 mount in /proc/self/mountinfo" in problem["message"]
