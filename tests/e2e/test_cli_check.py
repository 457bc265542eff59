"""`nodeagent check` and the checks inside `apply`, through the CLI, on the presets of the field reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel

from nodeagent.cli.main import main

REPO = Path(__file__).resolve().parents[2]
PROFILE = str(REPO / "profiles" / "cxl-inference.yaml")


def cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_done_when_l40_kvm64_names_cpu_flags_disk_and_fixes_exit_4(capsys) -> None:
    code, out, err = cli(["--simulate", "l40-kvm64", "check", PROFILE], capsys)
    assert code == 4, out + err
    assert "✗ cpu [error] FAIL" in out and "✗ disk [error] FAIL" in out
    assert "CPU model 'Common KVM processor' is QEMU's kvm64 model" in out
    assert "missing CPU flags: avx2, fma" in out
    assert "/models: 94% used" in out and "above max_used_percent 90%" in out
    assert "fix: give the VM the host's CPU: CPU type 'host'" in out and "host-passthrough" in out
    assert "fix: free space on /models" in out
    assert "nodeagent: error-severity checks failed: cpu, disk" in err
    # The hint names every failed check: following it goes ahead instead of failing again on the next one.
    assert "--skip-checks cpu --skip-checks disk to go ahead anyway" in err
    assert "To go ahead anyway: --skip-checks cpu --skip-checks disk." in out


def test_done_when_workstation_passes_and_says_it_lacks_a_cxl_tier(make_node, capsys) -> None:
    root = make_node("workstation")
    code, out, err = cli(["--root", str(root), "check", PROFILE], capsys)
    assert code == 0, out + err
    for name in ("cpu", "disk", "gpu_pcie"):
        assert f"✓ {name} [error] pass" in out
    assert "! capacity [warning] warn" in out
    assert "it needs a CXL tier of at least 460.9GiB, which this node lacks" in out


def test_h100_cxl_tells_the_capacity_story(make_node, capsys) -> None:
    code, out, _ = cli(["--root", str(make_node("h100-cxl")), "check", PROFILE], capsys)
    assert code == 0
    assert "80.0GiB to DRAM, 88.5GiB to CXL" in out and "set max_batch ≤ 62" in out


def test_json_output(make_node, capsys) -> None:
    code, out, _ = cli(["--root", str(make_node("l40-kvm64")), "--format", "json", "check", PROFILE], capsys)
    assert code == 4
    doc = json.loads(out)
    assert doc["ok"] is False and doc["failed"] == ["cpu", "disk"]
    assert doc["skip_hint"] == "--skip-checks cpu --skip-checks disk"
    by = {r["name"]: r for r in doc["results"]}
    assert by["cpu"]["status"] == "fail" and by["cpu"]["evidence"]["model"] == "Common KVM processor"
    assert by["cpu"]["remedies"] and by["disk"]["evidence"]["paths"][0]["used_percent"] == 94.0
    assert by["capacity"]["status"] == "warn" and by["capacity"]["severity"] == "warning"
    assert by["placement"]["status"] == "pass"  # one NUMA node: no tiering setting can misfire here
    assert doc["counts"] == {"pass": 2, "warn": 2, "fail": 2, "skipped": 0}


def test_apply_stops_before_writing_when_an_error_check_fails(make_node, capsys) -> None:
    root = make_node("l40-kvm64")
    before = SimKernel(root).journal()
    code, out, err = cli(["--root", str(root), "apply", "--yes", PROFILE], capsys)
    assert code == 4
    assert "Error-severity checks failed (cpu, disk): nothing was written." in out
    assert SimKernel(root).journal() == before
    assert not (root / "var/lib/nodeagent/last-applied.json").exists()
    code, out, err = cli(["--root", str(root), "--format", "json", "apply", "--yes", PROFILE], capsys)
    doc = json.loads(out)
    assert code == 4 and doc["status"] == "checks-failed"
    assert doc["checks"]["skip_hint"] == "--skip-checks cpu --skip-checks disk"


def test_skip_checks_lets_apply_go_ahead(make_node, capsys) -> None:
    root = make_node("l40-kvm64")
    code, out, err = cli(["--root", str(root), "apply", "--yes", "--skip-checks", "cpu", "--skip-checks", "disk",
                          PROFILE], capsys)
    assert code == 0, out + err
    assert "- cpu [error] skipped: skipped by --skip-checks" in out and "converged" in out
    assert SimKernel(root).tree.read("/proc/sys/kernel/numa_balancing") == "2"
    code, out, err = cli(["--root", str(root), "apply", "--yes", "--skip-checks", "cpus", PROFILE], capsys)
    assert code == 64 and "unknown check 'cpus'" in err


def test_dry_run_reports_the_checks_too(make_node, capsys) -> None:
    root = make_node("h100-cxl")
    code, out, _ = cli(["--root", str(root), "apply", "--dry-run", PROFILE], capsys)
    assert code == 0 and "Checks for profile cxl-inference" in out and "dry run: nothing was written" in out


def test_the_shipped_profile_fails_a_node_that_lost_its_gpus(make_node, capsys) -> None:
    """An inference node whose GPUs fell off the bus must not pass gpu_pcie as "no GPU to judge": the shipped
    profile expects at least one (min_count: 1), and apply writes nothing."""
    root = make_node("h100-cxl")
    code, out, _ = cli(["--root", str(root), "--format", "json", "check", PROFILE], capsys)
    gpus = {r["name"]: r for r in json.loads(out)["results"]}["gpu_pcie"]["evidence"]["gpus"]
    assert gpus  # the node has them: the check passes
    for g in gpus:  # lost: gone from the PCI bus, as after "fallen off the bus" and a rescan
        (root / "sys/bus/pci/devices" / g["address"]).unlink()
    code, out, err = cli(["--root", str(root), "check", PROFILE], capsys)
    assert code == 4, out + err
    assert "✗ gpu_pcie [error] FAIL" in out and "no GPU on the PCI bus (min_count 1)" in out
    assert "check that the GPUs are seated and powered" in out
    before = SimKernel(root).journal()
    code, out, err = cli(["--root", str(root), "apply", "--yes", PROFILE], capsys)
    assert code == 4 and "error-severity checks failed: gpu_pcie; nothing was written" in err
    assert SimKernel(root).journal() == before
