"""NUMA balancing's scan and promotion tunables: debugfs files since 5.13, managed like any other knob."""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel

from nodeagent.util.errors import PermissionDeniedError

from .cli_helpers import run

D = "/sys/kernel/debug/sched/numa_balancing"
HEAD = "apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: scan}\n"
SCAN = ("kernel:\n  numa_balancing_scan_period_max_ms: 1000\n  numa_balancing_scan_size_mb: 1024\n"
        "  numa_balancing_hot_threshold_ms: 500\n")


def profile(tmp_path: Path, body: str = SCAN) -> str:
    p = tmp_path / "scan.yaml"
    p.write_text(HEAD + body)
    return str(p)


def plan_json(root: Path, prof: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    code, out, err = run(["--root", str(root), "--format", "json", "plan", "--detailed-exitcode", prof], capsys)
    return code, json.loads(out)


def test_set_then_nothing_left_to_do_then_revert(make_node, tmp_path: Path, capsys) -> None:
    root = make_node("qemu-3node")
    prof = profile(tmp_path)
    code, plan = plan_json(root, prof, capsys)
    assert code == 2
    assert {(c["target"], c["before"], c["after"]) for c in plan["changes"]} == {
        ("kernel.numa_balancing_scan_period_max_ms", 60000, 1000),
        ("kernel.numa_balancing_scan_size_mb", 256, 1024),
        ("kernel.numa_balancing_hot_threshold_ms", 1000, 500)}
    code, out, err = run(["--root", str(root), "apply", "--yes", "--skip-checks", "all", prof], capsys)
    assert code == 0, out + err
    k = SimKernel(root)
    assert (k.tree.read(f"{D}/scan_period_max_ms"), k.tree.read(f"{D}/scan_size_mb"),
            k.tree.read(f"{D}/hot_threshold_ms")) == ("1000", "1024", "500")
    assert k.tree.read(f"{D}/scan_period_min_ms") == "1000"  # unmanaged: left as the kernel has it
    code, plan = plan_json(root, prof, capsys)
    assert (code, plan["changes"], plan["problems"]) == (0, [], [])
    code, out, err = run(["--root", str(root), "revert", "--yes"], capsys)
    assert code == 0, out + err
    assert (k.tree.read(f"{D}/scan_period_max_ms"), k.tree.read(f"{D}/scan_size_mb"),
            k.tree.read(f"{D}/hot_threshold_ms")) == ("60000", "256", "1000")


def test_debugfs_not_mounted_leaves_them_out_with_a_warning(make_node, tmp_path: Path, capsys) -> None:
    """debugfs is no ABI: on a kernel that has the files, their absence means debugfs is not mounted, and the plan
    says so and how to mount it — a warning, the rest of the profile is applied, the next plan is empty."""
    root = make_node("qemu-3node")
    shutil.rmtree(root / "sys/kernel/debug/sched")  # what /sys/kernel/debug holds while debugfs is not mounted
    prof = profile(tmp_path, SCAN + "  zone_reclaim_mode: 7\n")
    code, plan = plan_json(root, prof, capsys)
    assert code == 2 and plan["problems"] == []
    assert [c["target"] for c in plan["changes"]] == ["kernel.zone_reclaim_mode"]
    warning = next(w for w in plan["warnings"] if "numa_balancing_scan_period_max_ms" in w)
    assert "debugfs is not mounted at /sys/kernel/debug" in warning and "left out" in warning
    assert "mount -t debugfs debugfs /sys/kernel/debug" in warning
    code, out, err = run(["--root", str(root), "apply", "--yes", "--skip-checks", "all", prof], capsys)
    assert code == 0, out + err
    assert SimKernel(root).tree.read("/proc/sys/vm/zone_reclaim_mode") == "7"
    assert not (root / "sys/kernel/debug/sched").exists()
    code, plan = plan_json(root, prof, capsys)
    assert (code, plan["changes"], plan["problems"]) == (0, [], [])


def test_debugfs_locked_down_does_not_stop_the_facts(make_node, tmp_path: Path, capsys, monkeypatch) -> None:
    """Lockdown (integrity mode, as Secure Boot sets it) makes debugfs answer EPERM for files with a write bit:
    facts and plans go on, the scan knobs are left out with the warning, nothing else changes."""
    from nodeagent.host.fs import RootedFS

    real = RootedFS.read_opt

    def locked(self, path: str):  # type: ignore[no-untyped-def]
        if path.startswith("/sys/kernel/debug/"):
            raise PermissionDeniedError(f"read {path}: Operation not permitted (errno EPERM)")
        return real(self, path)

    monkeypatch.setattr(RootedFS, "read_opt", locked)
    root = make_node("qemu-3node")
    code, out, err = run(["--root", str(root), "facts"], capsys)
    assert code == 0, out + err
    code, plan = plan_json(root, profile(tmp_path), capsys)
    assert code == 0 and plan["problems"] == [] and plan["changes"] == []
    assert sum("left out" in w for w in plan["warnings"]) == 3


@pytest.mark.parametrize("kernel,missing", [("5.10.0", {"scan_period_max_ms", "scan_size_mb", "hot_threshold_ms"}),
                                            ("5.15.0", {"hot_threshold_ms"})])
def test_older_kernels_lack_them_and_the_plan_names_the_release(make_node, tmp_path: Path, capsys, kernel: str,
                                                                missing: set[str]) -> None:
    root = make_node("qemu-3node", kernel=kernel)
    code, plan = plan_json(root, profile(tmp_path), capsys)
    assert plan["problems"] == []
    left = {w.split(":")[0].removeprefix("kernel.numa_balancing_"): w for w in plan["warnings"] if "left out" in w}
    assert set(left) == missing
    for name, w in left.items():
        assert f"introduced in {'6.0' if name == 'hot_threshold_ms' else '5.13'}" in w
    assert {c["target"].removeprefix("kernel.numa_balancing_") for c in plan["changes"]} == (
        {"scan_period_max_ms", "scan_size_mb", "hot_threshold_ms"} - missing)


def test_the_simulated_files_take_what_debugfs_u32_takes(make_node) -> None:
    """kstrtoull(buf, 0) then a store into a u32: hex and octal parse, a sign or a word is EINVAL, a value over
    2^32-1 is truncated (the kernel does not refuse it: the profile does)."""
    k = SimKernel(make_node("qemu-3node"))
    path = f"{D}/scan_size_mb"
    for text, stored in (("512", "512"), ("0x100", "256"), ("010", "8"), ("+64", "64"), ("4294967297", "1")):
        k.write(path, text)
        assert k.tree.read(path) == stored
    for text in ("-1", "ten", "1.5", ""):
        with pytest.raises(OSError) as exc:
            k.write(path, text)
        assert exc.value.errno == errno.EINVAL
    with pytest.raises(OSError) as exc:
        k.write(path, str(2**64))
    assert exc.value.errno == errno.ERANGE


@pytest.mark.parametrize("body,fragment", [
    ("kernel:\n  numa_balancing_scan_size_mb: 0\n",
     "kernel.numa_balancing_scan_size_mb: expected an integer from 1 to 4294967295, got 0"),
    ("kernel:\n  numa_balancing_scan_period_max_ms: -1\n", "expected an integer from 0 to 4294967295, got -1"),
    ("kernel:\n  numa_balancing_scan_period_min_ms: 5000\n  numa_balancing_scan_period_max_ms: 1000\n",
     "numa_balancing_scan_period_min_ms (5000) is above numa_balancing_scan_period_max_ms (1000)"),
])
def test_profile_refuses_what_the_kernel_would_misuse(make_node, tmp_path: Path, capsys, body: str,
                                                      fragment: str) -> None:
    root = make_node("qemu-3node")
    code, out, err = run(["--root", str(root), "plan", profile(tmp_path, body)], capsys)
    assert code != 0 and code != 2
    assert fragment in out + err
    assert "scan.yaml" in out + err
