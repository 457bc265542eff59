"""Advisories once: each of a profile's advisories is shown in full the first time for that profile (name and
digest) on that kernel release, then counted in one line naming `nodeagent plan --advice` (`drift -v` for drift).
Only the commands that write the state anyway record what was shown (apply, drift --record): plan and drift read
it. A new kernel or a changed profile shows them again; -v and `plan --advice` show them all; JSON always carries
them all."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel

from .cli_helpers import run

SHIPPED = Path(__file__).resolve().parents[2] / "profiles" / "cxl-inference.yaml"
GUARD = "no `nodeagent guard` keeps them"
OOM = "advisory oom-guard-kills-on-a-full-node"
COUNTED = "(2 advisories already shown for this profile and kernel; see `nodeagent {}`)"
RECORD = "var/lib/nodeagent/advisories.json"


def in_full(out: str) -> bool:
    return GUARD in out and OOM in out and "already shown" not in out


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The shipped profile with MGLRU's min_ttl_ms at 1000: two advisories to show and count on a node without
    swap (the OOM guard that kills when the CXL node fills, and the dest_free one; the shipped profile keeps the
    kernel's 0 and draws only the dest_free one)."""
    text = SHIPPED.read_text()
    assert "  lru_gen:" not in text and text.count("  demotion_enabled: true\n") == 1
    path = tmp_path_factory.mktemp("profile") / "cxl-inference.yaml"
    guard = "  demotion_enabled: true\n  lru_gen: {min_ttl_ms: 1000}\n"
    path.write_text(text.replace("  demotion_enabled: true\n", guard)
                    .replace("extends: [base.yaml]", f"extends: [{SHIPPED.parent / 'base.yaml'}]"))
    return str(path)


def test_each_advisory_in_full_once_then_counted(make_node, profile: str, capsys) -> None:
    root = make_node("h100-cxl")
    r = str(root)
    for _ in range(2):  # plan writes nothing: before the first apply it says them in full every time
        code, out, _ = run(["--root", r, "plan", profile], capsys)
        assert "to change" in out and in_full(out)
    assert not (root / RECORD).exists()
    code, out, _ = run(["--root", r, "apply", "--dry-run", profile], capsys)  # a dry run records nothing either
    assert in_full(out) and not (root / RECORD).exists()
    code, out, _ = run(["--root", r, "apply", "--yes", profile], capsys)
    assert code == 0 and in_full(out)  # the first apply for this profile and kernel says them
    shown = json.loads((root / RECORD).read_text())
    (entry,) = shown["shown"].values()
    assert entry["profile"] == "cxl-inference" and entry["kernel"] == "6.12.0-nodeagent-sim"
    assert len(entry["advisories"]) == 2 and shown["format"] == 2

    code, out, _ = run(["--root", r, "plan", profile], capsys)
    assert GUARD not in out and "warning:" not in out and COUNTED.format("plan --advice") in out
    code, out, _ = run(["--root", r, "apply", "--yes", profile], capsys)  # the boot unit's converged apply
    assert code == 0 and GUARD not in out and COUNTED.format("plan --advice") in out
    code, out, _ = run(["--root", r, "drift"], capsys)
    assert code == 0 and GUARD not in out and COUNTED.format("drift -v") in out and "No drift" in out

    # asked for: in full
    code, out, _ = run(["--root", r, "plan", "-v", profile], capsys)
    assert in_full(out) and "min_ttl_ms" in out
    code, out, _ = run(["--root", r, "drift", "--verbose"], capsys)
    assert in_full(out)
    code, out, _ = run(["--root", r, "plan", "--advice", profile], capsys)  # what the counting line names
    assert code == 0 and out.startswith("Advisories for profile cxl-inference on ") and GUARD in out
    assert "min_ttl_ms" in out and "to change" not in out
    assert len([line for line in out.splitlines() if line.startswith("  - ")]) == 2
    code, out, _ = run(["--root", r, "--format", "json", "plan", "--advice", profile], capsys)
    assert len(json.loads(out)["advisories"]) == 2
    code, _, err = run(["--root", r, "plan", "--advice", "--detailed-exitcode", profile], capsys)
    assert code == 64 and "--advice prints the advisories alone" in err
    # machines always get them
    code, out, _ = run(["--root", r, "--format", "json", "plan", profile], capsys)
    assert len(json.loads(out)["warnings"]) == 2
    code, out, _ = run(["--root", r, "--format", "json", "drift"], capsys)
    assert any(GUARD in a for a in json.loads(out)["advisories"])


def test_a_drifted_node_says_its_drift_and_counts_what_was_said(make_node, profile: str, capsys) -> None:
    root = make_node("h100-cxl")
    assert run(["--root", str(root), "apply", "--yes", profile], capsys)[0] == 0
    SimKernel(root).write("/proc/sys/kernel/numa_balancing", "1")  # a sysctl reload
    code, out, _ = run(["--root", str(root), "drift"], capsys)
    assert code == 3 and "kernel.numa_balancing" in out and GUARD not in out and COUNTED.format("drift -v") in out
    code, out, _ = run(["--root", str(root), "plan", profile], capsys)
    assert "1 to change" in out and GUARD not in out and COUNTED.format("plan --advice") in out


def test_a_json_apply_records_nothing_a_person_did_not_read(make_node, profile: str, capsys) -> None:
    root = make_node("h100-cxl")
    assert run(["--root", str(root), "--format", "json", "apply", "--yes", profile], capsys)[0] == 0
    assert not (root / RECORD).exists()
    code, out, _ = run(["--root", str(root), "plan", profile], capsys)
    assert "No changes" in out and in_full(out)


def test_a_new_kernel_release_says_them_again(make_node, profile: str, capsys) -> None:
    root = make_node("h100-cxl")
    assert run(["--root", str(root), "apply", "--yes", profile], capsys)[0] == 0
    assert COUNTED.format("drift -v") in run(["--root", str(root), "drift"], capsys)[1]
    release = root / "proc/sys/kernel/osrelease"  # the node reboots into another kernel: its state stays
    release.unlink()
    release.write_text("6.12.9-upgraded\n")
    code, out, _ = run(["--root", str(root), "plan", profile], capsys)
    assert "No changes" in out and in_full(out)
    code, out, _ = run(["--root", str(root), "drift"], capsys)  # plain drift reads; it records nothing
    assert code == 0 and in_full(out)
    code, out, _ = run(["--root", str(root), "drift", "--record"], capsys)  # the timer's run: says them, records
    assert code == 0 and in_full(out)
    code, out, _ = run(["--root", str(root), "drift"], capsys)
    assert COUNTED.format("drift -v") in out and GUARD not in out
    kernels = {e["kernel"] for e in json.loads((root / RECORD).read_text())["shown"].values()}
    assert kernels == {"6.12.0-nodeagent-sim", "6.12.9-upgraded"}


def test_a_changed_profile_says_them_again(make_node, profile: str, tmp_path: Path, capsys) -> None:
    root = make_node("h100-cxl")
    assert run(["--root", str(root), "apply", "--yes", profile], capsys)[0] == 0
    edited = tmp_path / "cxl-inference.yaml"
    edited.write_text(Path(profile).read_text().replace("watermark_scale_factor: 400", "watermark_scale_factor: 300"))
    code, out, _ = run(["--root", str(root), "plan", str(edited)], capsys)
    assert "kernel.watermark_scale_factor  400 → 300" in out and in_full(out)
    code, out, _ = run(["--root", str(root), "apply", "--yes", str(edited)], capsys)
    assert code == 0 and in_full(out)
    code, out, _ = run(["--root", str(root), "plan", str(edited)], capsys)
    assert "No changes" in out and COUNTED.format("plan --advice") in out


def test_a_state_directory_of_an_older_nodeagent_or_a_bad_record_reads_as_nothing_shown(make_node, profile: str,
                                                                                          capsys) -> None:
    root = make_node("h100-cxl")
    assert run(["--root", str(root), "apply", "--yes", profile], capsys)[0] == 0
    (root / RECORD).unlink()  # what an older nodeagent left: every other state file, not this one
    code, out, _ = run(["--root", str(root), "plan", profile], capsys)
    assert code == 0 and "No changes" in out and in_full(out)
    (root / RECORD).write_text('{"format": 2, "shown": []}')
    code, out, _ = run(["--root", str(root), "plan", profile], capsys)
    assert code == 0 and in_full(out)
    code, out, _ = run(["--root", str(root), "apply", "--yes", profile], capsys)  # sets it aside, records anew
    assert code == 0 and "advisories.json was corrupt" in out and GUARD in out
    assert COUNTED.format("plan --advice") in run(["--root", str(root), "plan", profile], capsys)[1]


@pytest.mark.skipif(not shutil.which("unshare"), reason="needs unshare(1)")
def test_plan_and_drift_on_a_read_only_state_directory(make_node, profile: str, capsys) -> None:
    """The whole simulated node mounted read-only (a rehearsal on a node whose state nodeagent may not write):
    plan and drift read what was shown, write nothing, and still work."""
    root = make_node("h100-cxl")
    assert run(["--root", str(root), "apply", "--yes", profile], capsys)[0] == 0
    fresh = make_node("h100-cxl")
    ro = f"mount --bind {root} {root} && mount -o remount,bind,ro {root} && " \
         f"mount --bind {fresh} {fresh} && mount -o remount,bind,ro {fresh}"
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", ro], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("private read-only bind mounts are not allowed here")
    na = f"{sys.executable} -m nodeagent"
    script = (f"{ro} && {na} --root {root} plan {profile} && echo ---- && {na} --root {root} drift && echo ---- && "
              f"{na} --root {fresh} plan {profile}")
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    plan, drift, first = proc.stdout.split("----\n")
    assert "No changes" in plan and COUNTED.format("plan --advice") in plan
    assert "No drift" in drift and COUNTED.format("drift -v") in drift
    assert "to change" in first and in_full(first)  # nothing recorded there: said in full
