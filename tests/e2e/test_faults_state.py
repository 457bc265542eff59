"""State that survives: intent before action, room for the records before the first change, bad state set aside.
Faults come from the simulator's hook (`nodeagent sim fault`), bad files are written the way a disk or a person
leaves them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel, faults

from tests.e2e import fault_sweep as fs
from tests.e2e.cli_helpers import run

PROFILE = fs.PROFILE
APPLY = ["apply", "--yes", "--skip-checks", "all", PROFILE]
KDAMONDS = "/sys/kernel/mm/damon/admin/kdamonds"


def _state(root: Path, name: str) -> dict:
    p = root / fs.STATE / name
    return json.loads(p.read_text()) if p.exists() else {}


def _nodeagent(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nodeagent", "--root", str(root), *args], capture_output=True,
                          text=True, timeout=600, check=False)


def test_a_kdamond_killed_half_built_is_nodeagents_and_the_next_apply_finishes_it(make_node, capsys) -> None:
    root = make_node("qemu-3node")
    faults.add(root, faults.Rule(f"^{KDAMONDS}/1/contexts/0/schemes/0/action$", signal="SIGKILL"))
    r = _nodeagent(root, *APPLY)
    assert r.returncode == -signal.SIGKILL
    owned = _state(root, "ownership.json")["damon"]["kdamonds"]
    assert owned["1"]["building"] is True and owned["1"]["name"] == "demote-cold-node1"  # before its first write
    progress = _state(root, "progress.json")
    assert progress["in_flight"]["target"] == "damon.kdamonds"
    faults.clear(root)
    code, out, err = run(["--root", str(root), "plan", PROFILE], capsys)
    assert "not managed by nodeagent" not in out + err and "did not finish" in out, out
    code, out, err = run(["--root", str(root), "--format", "json", *APPLY], capsys)
    assert code == 0 and json.loads(out)["status"] == "converged", out + err
    kds = _state(root, "ownership.json")["damon"]["kdamonds"]
    assert all(not rec.get("building") and rec["pid"] for rec in kds.values())
    events = [e for e in fs._journal(root) if e.get("event") == "apply"]
    assert events[-2]["status"] == "incomplete" and events[-2]["in_flight"]["target"] == "damon.kdamonds"
    assert "memory.auto_online_blocks" in events[-2]["message"]
    assert not (root / fs.STATE / "progress.json").exists()


def test_a_state_directory_that_cannot_hold_the_records_refuses_before_the_first_change(make_node, capsys) -> None:
    root = make_node("qemu-3node")
    faults.add(root, faults.Rule(r"/\.reserve$", errno="ENOSPC"))
    code, out, err = run(["--root", str(root), *APPLY], capsys)
    assert code == 1, out + err
    assert "cannot record what this apply does" in err and "nothing was changed" in err
    assert "No space left on device" in err and "free space in /var/lib/nodeagent" in err
    assert not [e for e in SimKernel(root).journal() if e["result"] == "ok"]
    assert not (root / fs.STATE / "progress.json").exists() and not (root / fs.STATE / ".reserve").exists()


def test_a_full_disk_mid_run_gives_back_the_reserve_and_records_everything(make_node, capsys) -> None:
    """The first ENOSPC of a record write (another program filled the disk meanwhile) is met with the space held
    up front: the apply goes on and records all it did."""
    root = make_node("qemu-3node")
    faults.add(root, faults.Rule("/var/lib/nodeagent/(progress|last-applied|ownership)", errno="ENOSPC", after=4))
    code, out, err = run(["--root", str(root), *APPLY], capsys)
    assert code == 0, out + err
    assert faults.load(root).rules[0].fired == 1
    assert _state(root, "last-applied.json")["status"] == "converged"
    assert not (root / fs.STATE / ".reserve").exists()


@pytest.mark.parametrize(("name", "bad", "lost"), [
    ("ownership.json", {"damon": {"kdamonds": {"9": "running"}}, "dax": []},
     "damon.kdamonds.9, dax (not an object) (the rest is kept)"),
    ("originals.json", {"kernel.numa_balancing": 1, "kernel.demotion_enabled": {"path": "/x", "value": False}},
     "originals.kernel.numa_balancing (the rest is kept)"),
    ("drift.json", {"items": ["numa"], "cannot_be_done": {}}, "items (not an object)"),
    ("last-applied.json", {"profile": 3, "status": "converged", "outcomes": "all"}, "the record of the last apply"),
    ("drift.json", "[1, 2", "every record in it"),
])
def test_state_of_the_wrong_shape_is_set_aside_with_what_was_lost(make_node, capsys, name: str, bad, lost: str) -> None:
    root = make_node("qemu-3node")
    assert run(["--root", str(root), *APPLY], capsys)[0] == 0
    if name == "ownership.json":  # nodeagent's own records kept, a bad one beside them
        good = _state(root, name)
        bad = {**good, **bad, "damon": {"kdamonds": {**good["damon"]["kdamonds"], **bad["damon"]["kdamonds"]}}}
    (root / fs.STATE / name).write_text(bad if isinstance(bad, str) else json.dumps(bad))
    SimKernel(root).write("/proc/sys/kernel/numa_balancing", "0")  # drift, so apply has work to do
    code, out, err = run(["--root", str(root), "plan", PROFILE], capsys)
    assert code == 0 and f"{name}" in out and "set aside by the next apply" in out, out + err
    code, out, err = run(["--root", str(root), "--format", "json", *APPLY], capsys)
    assert code == 0, out + err
    doc = json.loads(out)
    warning = next(w for w in doc["plan"]["warnings"] if name in w)
    assert "set aside as" in warning and lost in warning
    aside = [p.name for p in (root / fs.STATE).iterdir() if p.name.startswith(f"{name}.corrupt-")]
    assert len(aside) == 1 and (root / fs.STATE / aside[0]).read_text() == (bad if isinstance(bad, str)
                                                                             else json.dumps(bad))
    code, out, err = run(["--root", str(root), "--format", "json", *APPLY], capsys)
    assert code == 0 and not [w for w in json.loads(out)["plan"]["warnings"] if name in w], out + err


def test_revert_with_originals_lost_names_them_and_still_stops_nodeagents_kdamonds(make_node, capsys) -> None:
    root = make_node("qemu-3node")
    assert run(["--root", str(root), *APPLY], capsys)[0] == 0
    originals = root / fs.STATE / "originals.json"
    originals.write_text(originals.read_text()[:40])  # truncated
    code, out, err = run(["--root", str(root), "--format", "json", "revert", "--yes"], capsys)
    doc = json.loads(out)
    problems = [p["message"] for p in doc["plan"]["problems"]]
    lost = ("kernel.numa_balancing: the value it had before nodeagent changed it is not recorded (lost with "
            "/var/lib/nodeagent/originals.json, which was corrupt")
    assert any(p.startswith(lost) for p in problems), problems
    assert any("damon.kdamonds: how many kdamond slots" in p for p in problems), problems
    k = SimKernel(root)
    running = [i for i in range(3) if k.tree.read(f"{KDAMONDS}/{i}/state") == "on"]
    assert running == [], out + err
    assert code == 5, out + err  # partial: what it could not restore is said
