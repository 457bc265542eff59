"""End to end through the CLI on every preset: apply, apply again → empty plan; dry run writes nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel

from nodeagent.cli.main import main

REPO = Path(__file__).resolve().parents[2]
PROFILE = str(REPO / "profiles" / "cxl-inference.yaml")
PRESETS = ["h100-cxl", "h100-cxl-autoonline", "l40-kvm64", "workstation", "qemu-3node"]


def cli_main(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("preset", PRESETS)
def test_apply_then_second_plan_is_empty(preset: str, make_node, capsys) -> None:
    root = make_node(preset)
    # The preflight checks have their own tests (some presets fail them on purpose): this one is about apply.
    # --allow-disruptive: h100-cxl-autoonline's expanders are online in the wrong zone (see test_dax_apply.py)
    code, out, err = cli_main(["--root", str(root), "apply", "--yes", "--skip-checks", "all", "--allow-disruptive",
                               PROFILE], capsys)
    assert code == 0, out + err
    assert "converged" in out
    code, out, err = cli_main(["--root", str(root), "--format", "json", "plan", "--detailed-exitcode", PROFILE],
                              capsys)
    assert code == 0, out + err
    plan = json.loads(out)
    assert plan["changes"] == [] and plan["problems"] == []
    # The kernel really holds the profile's values.
    k = SimKernel(root)
    assert k.tree.read("/proc/sys/kernel/numa_balancing") == "2"
    assert k.tree.read("/sys/kernel/mm/numa/demotion_enabled") == "true"
    assert k.tree.read("/sys/devices/system/memory/auto_online_blocks") == "offline"


def test_plan_detailed_exitcode_reports_pending_changes(make_node, capsys) -> None:
    root = make_node("h100-cxl")
    code, out, _ = cli_main(["--root", str(root), "plan", "--detailed-exitcode", PROFILE], capsys)
    assert code == 2
    assert "~ kernel.numa_balancing  0 (disabled) → 2 (memory-tiering)" in out
    assert "~ memory.auto_online_blocks  online → offline" in out


def test_dry_run_prints_the_plan_and_writes_nothing(make_node, capsys) -> None:
    root = make_node("h100-cxl")
    before = SimKernel(root).journal()
    code, out_dry, _ = cli_main(["--root", str(root), "apply", "--dry-run", PROFILE], capsys)
    assert code == 0
    assert SimKernel(root).journal() == before
    assert not (root / "var/lib/nodeagent/last-applied.json").exists()
    code, out_plan, _ = cli_main(["--root", str(root), "plan", PROFILE], capsys)
    assert out_plan.strip() in out_dry  # after the preflight checks' report
    assert "dry run: nothing was written" in out_dry


def test_apply_writes_auto_online_first_and_records_state(make_node, capsys) -> None:
    root = make_node("h100-cxl")
    code, _, _ = cli_main(["--root", str(root), "apply", "--yes", PROFILE], capsys)
    assert code == 0
    writes = [w["path"] for w in SimKernel(root).journal()]
    assert writes[0] == "/sys/devices/system/memory/auto_online_blocks"
    originals = json.loads((root / "var/lib/nodeagent/originals.json").read_text())
    assert originals["format"] == 2 and originals["originals"]["kernel.numa_balancing"]["value"] == 0
    last = json.loads((root / "var/lib/nodeagent/last-applied.json").read_text())
    assert last["profile"] == "cxl-inference" and last["status"] == "converged"


def test_unsupported_knob_on_old_kernel_fails_before_any_write(make_node, capsys) -> None:
    root = make_node("h100-cxl", kernel="5.10.0-old")
    before = SimKernel(root).journal()
    code, out, err = cli_main(["--root", str(root), "apply", "--yes", PROFILE], capsys)
    assert code == 1
    assert "kernel.demotion_enabled: /sys/kernel/mm/numa/demotion_enabled does not exist on kernel 5.10.0-old " \
           "(introduced in 5.15)" in out
    assert "kernel.numa_balancing: value 2 (memory-tiering) needs kernel 5.18" in out
    assert "nothing was applied" in err
    assert SimKernel(root).journal() == before


def test_simulate_option_uses_a_cached_node(capsys) -> None:
    code, out, _ = cli_main(["--simulate", "qemu-3node", "facts"], capsys)
    assert code == 0
    assert "qemu-3node" in out and "memory_tier4=[0,1]" in out


def test_two_concurrent_applies_are_serialized_by_the_lock(make_node) -> None:
    root = make_node("h100-cxl")
    lock = root / "var/lib/nodeagent/lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    # Hold the lock from another process, then apply with a short timeout: it must wait, then fail naming us.
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl,os,sys,time\n"
        f"fd=os.open({str(lock)!r}, os.O_RDWR|os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX); os.pwrite(fd, f'{os.getpid()}\\n'.encode(), 0)\n"
        "print('locked', flush=True); time.sleep(30)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        proc = subprocess.run([sys.executable, "-m", "nodeagent", "--root", str(root), "--lock-timeout", "0.5",
                               "apply", "--yes", PROFILE], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 75  # ExitCode.BUSY: distinct from a failed apply, so a caller can retry
        assert f"another nodeagent run (pid {holder.pid}) holds /var/lib/nodeagent/lock" in proc.stderr
    finally:
        holder.kill()
        holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()
    # Two real applies at once: both succeed, one after the other, and the node ends converged.
    procs = [subprocess.Popen([sys.executable, "-m", "nodeagent", "--root", str(root), "apply", "--yes", PROFILE],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    writes = [w["path"] for w in SimKernel(root).journal() if w["path"].startswith("/proc/sys/kernel/numa")]
    assert writes.count("/proc/sys/kernel/numa_balancing") == 1
