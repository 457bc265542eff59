"""A converged node's plan, apply and drift do not repeat the profile's warnings every time: they are shown in full
when there is something to change (the moment to act on them) or with -v, and counted in one line otherwise. JSON
always carries them."""

from __future__ import annotations

import json
from pathlib import Path

from nodeagent_sim import SimKernel

from .cli_helpers import run

PROFILE = str(Path(__file__).resolve().parents[2] / "profiles" / "cxl-inference.yaml")
GUARD = "no `nodeagent guard` keeps them"
COUNTED = "(2 advisories, shown in full when there is something to change; see `nodeagent {}`)"


def test_warnings_in_full_while_something_changes_then_counted(make_node, capsys) -> None:
    root = str(make_node("h100-cxl"))
    code, out, _ = run(["--root", root, "plan", PROFILE], capsys)
    assert "to change" in out and "  warning: damon: demote-cold-node0, demote-cold-node1" in out and GUARD in out
    code, out, _ = run(["--root", root, "apply", "--yes", PROFILE], capsys)
    assert code == 0 and GUARD in out  # the apply that changes the node says them

    code, out, _ = run(["--root", root, "plan", PROFILE], capsys)
    assert GUARD not in out and "warning:" not in out and COUNTED.format("plan --advice") in out
    code, out, _ = run(["--root", root, "apply", "--yes", PROFILE], capsys)  # the boot unit's converged apply
    assert code == 0 and GUARD not in out and COUNTED.format("plan --advice") in out
    code, out, _ = run(["--root", root, "drift"], capsys)
    assert code == 0 and GUARD not in out and COUNTED.format("drift -v") in out and "No drift" in out

    # asked for: in full
    code, out, _ = run(["--root", root, "plan", "-v", PROFILE], capsys)
    assert GUARD in out and "min_ttl_ms" in out and "(2 advisories" not in out
    code, out, _ = run(["--root", root, "drift", "--verbose"], capsys)
    assert GUARD in out and "(2 advisories" not in out
    code, out, _ = run(["--root", root, "plan", "--advice", PROFILE], capsys)  # what the counting line names
    assert code == 0 and out.startswith("Advisories for profile cxl-inference on ") and GUARD in out
    assert "min_ttl_ms" in out and "to change" not in out
    assert len([line for line in out.splitlines() if line.startswith("  - ")]) == 2
    code, out, _ = run(["--root", root, "--format", "json", "plan", "--advice", PROFILE], capsys)
    assert len(json.loads(out)["advisories"]) == 2
    code, _, err = run(["--root", root, "plan", "--advice", "--detailed-exitcode", PROFILE], capsys)
    assert code == 64 and "--advice prints the advisories alone" in err
    # machines always get them
    code, out, _ = run(["--root", root, "--format", "json", "plan", PROFILE], capsys)
    assert len(json.loads(out)["warnings"]) == 2
    code, out, _ = run(["--root", root, "--format", "json", "drift"], capsys)
    assert any(GUARD in a for a in json.loads(out)["advisories"])


def test_drift_shows_them_in_full_when_the_node_drifted(make_node, capsys) -> None:
    root = make_node("h100-cxl")
    assert run(["--root", str(root), "apply", "--yes", PROFILE], capsys)[0] == 0
    SimKernel(root).write("/proc/sys/kernel/numa_balancing", "1")  # a sysctl reload
    code, out, _ = run(["--root", str(root), "drift"], capsys)
    assert code == 3 and GUARD in out and "(2 advisories" not in out
