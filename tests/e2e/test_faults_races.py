"""Races, signals outside the executor, children, and honest results when the record fails — with the simulator's
fault hook (`nodeagent sim fault`), never a monkeypatch."""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel, faults

from tests.e2e import fault_sweep as fs
from tests.e2e.cli_helpers import run

REPO = Path(__file__).resolve().parents[2]
PROFILE = fs.PROFILE
NUMA = "/proc/sys/kernel/numa_balancing"
NA = [sys.executable, "-m", "nodeagent"]


def _hold_lock(root: Path) -> int:
    d = root / fs.STATE
    d.mkdir(parents=True, exist_ok=True)
    fd = os.open(d / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def _wait_blocked(proc: subprocess.Popen[str], root: Path) -> None:
    """Until ``proc`` waits for the state lock (it holds the lock file open), at most 30 s."""
    lock = os.path.realpath(root / fs.STATE / "lock")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            fds = os.listdir(f"/proc/{proc.pid}/fd")
        except FileNotFoundError:
            return
        for fd in fds:
            try:
                if os.readlink(f"/proc/{proc.pid}/fd/{fd}") == lock:
                    return
            except OSError:
                continue
        time.sleep(0.05)
    raise AssertionError("the command never waited for the lock")


def test_drift_record_measures_under_the_lock_it_records_under(make_node, capsys) -> None:
    root = make_node("h100-cxl")
    assert run(["--root", str(root), "apply", "--yes", "--skip-checks", "all", PROFILE], capsys)[0] == 0
    k = SimKernel(root)
    k.write(NUMA, "0")  # drift...
    fd = _hold_lock(root)  # ...while an apply holds the lock
    proc = subprocess.Popen([*NA, "--root", str(root), "--format", "json", "drift", "--record"], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_blocked(proc, root)
        time.sleep(0.5)  # a drift that measured before waiting has measured by now
        k.write(NUMA, "2")  # the apply repairs it, then lets go
    finally:
        os.close(fd)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err  # measured after the repair: converged, nothing stale recorded
    assert json.loads(out)["items"] == []
    drift = json.loads((root / fs.STATE / "drift.json").read_text())
    assert drift["items"] == {}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_waiting_for_the_lock_stops_before_any_change(make_node, sig: int) -> None:
    root = make_node("qemu-3node")
    fd = _hold_lock(root)
    try:
        proc = subprocess.Popen([*NA, "--root", str(root), "apply", "--yes", PROFILE], text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        _wait_blocked(proc, root)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(fd)
    assert proc.returncode == 128 + sig, out + err
    assert f"stopped by {signal.Signals(sig).name} before any change: nothing was written" in err
    assert "Traceback" not in err
    assert not [e for e in SimKernel(root).journal() if e["result"] == "ok"]  # nothing written


def _running_from(root: Path) -> list[str]:
    """Processes whose command line names the simulated root (its daxctl)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"{root}/usr/bin/daxctl" in cmd:
            found.append(f"{pid}: {cmd}")
    return found


def test_no_daxctl_outlives_a_killed_nodeagent(make_node) -> None:
    root = make_node("h100-cxl")  # 1024 blocks a device: daxctl runs for a while
    faults.add(root, faults.Rule("/memory[0-9]+/state", signal="SIGKILL", after=20))
    r = subprocess.run([*NA, "--root", str(root), "apply", "--yes", "--skip-checks", "all", PROFILE],
                       capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == -signal.SIGKILL, r.stdout + r.stderr
    deadline = time.monotonic() + 10
    while _running_from(root) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running_from(root)
    blocks = [e for e in SimKernel(root).journal() if e["path"].endswith("/state") and "memory" in e["path"]]
    assert 20 <= len(blocks) < 1024  # it died soon after nodeagent did, far from the end of the device


def test_a_journal_that_cannot_be_written_after_changes_exits_5_with_the_result(make_node, capsys) -> None:
    root = make_node("qemu-3node")
    faults.add(root, faults.Rule("journal", errno="ENOSPC", times=0))
    code, out, err = run(["--root", str(root), "apply", "--yes", "--skip-checks", "all", PROFILE], capsys)
    assert code == 5, out + err
    assert "✓ kernel.numa_balancing: applied" in out
    assert "✗ record: append to /var/lib/nodeagent/journal.jsonl: No space left on device" in out
    faults.clear(root)
    code, out, err = run(["--root", str(root), "--format", "json", "apply", "--yes", "--skip-checks", "all",
                          PROFILE], capsys)
    assert code == 0 and json.loads(out)["status"] in ("unchanged", "converged"), out + err


def _ansible_module():  # type: ignore[no-untyped-def]
    path = REPO / "ansible/ansible_collections/nodeagent/tiering/plugins/modules/reconcile.py"
    spec = importlib.util.spec_from_file_location("nodeagent_tiering_reconcile_faults", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ansible_reports_changed_with_the_failure_when_the_record_fails(make_node) -> None:
    pytest.importorskip("ansible")
    from nodeagent.checks import parse_skips
    from nodeagent.engine.core import Engine
    from nodeagent.host import open_host
    from nodeagent.profile import load_profile

    mod = _ansible_module()
    root = make_node("qemu-3node")
    faults.add(root, faults.Rule("journal", errno="ENOSPC", times=0))
    result = Engine(open_host(root)).apply(load_profile(PROFILE), skip_checks=parse_skips(("all",)))
    ret, failed = mod.report(result, False, False, False)
    assert ret["changed"] is True
    assert failed is not None and failed[1] == 5 and "not recorded: append to" in failed[0]


def test_revert_stops_at_a_safe_point_on_sigterm_and_the_next_revert_finishes(make_node, capsys) -> None:
    root = make_node("qemu-3node")
    assert run(["--root", str(root), "apply", "--yes", "--skip-checks", "all", PROFILE], capsys)[0] == 0
    faults.add(root, faults.Rule("/kdamonds/[0-9]+/state$", signal="SIGTERM"))  # stopping the first kdamond
    r = subprocess.run([*NA, "--root", str(root), "revert", "--yes", "--allow-disruptive"], capture_output=True,
                       text=True, timeout=600, check=False)
    assert r.returncode == 128 + signal.SIGTERM, r.stdout + r.stderr
    assert "not done: stopped by SIGTERM before this change" in r.stdout and "Result: interrupted." in r.stdout
    events = [json.loads(line) for line in (root / fs.STATE / "journal.jsonl").read_text().splitlines()]
    assert events[-1]["event"] == "revert" and events[-1]["status"] == "interrupted"
    faults.clear(root)
    code, out, err = run(["--root", str(root), "revert", "--yes", "--allow-disruptive"], capsys)
    assert code == 0, out + err
    code, out, err = run(["--root", str(root), "revert", "--yes"], capsys)
    assert code == 0 and "Nothing to revert" in out, out + err
