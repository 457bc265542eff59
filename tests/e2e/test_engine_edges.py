"""Engine edge cases: verify catches a value the kernel silently refuses; corrupt state; not root; root refusal."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel
from nodeagent_sim import kernel as simkernel

from nodeagent.cli.main import main
from nodeagent.engine.core import Engine
from nodeagent.host import open_host
from nodeagent.profile import load_profile_text

REPO = Path(__file__).resolve().parents[2]
PROFILE = str(REPO / "profiles" / "cxl-inference.yaml")
HEAD = "apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: t}\n"


@pytest.fixture
def silent_zone_reclaim():
    """A kernel that answers success to zone_reclaim_mode writes but keeps its old value."""

    def ignore(k: SimKernel, path: str, value: str) -> None:
        return None

    simkernel._RULES.append((__import__("re").compile(r"/proc/sys/vm/zone_reclaim_mode"), ignore))
    yield
    simkernel._RULES.pop()


def test_verify_reports_a_value_the_kernel_silently_refused(make_node, silent_zone_reclaim) -> None:
    root = make_node("workstation")
    eng = Engine(open_host(root))
    loaded = load_profile_text(HEAD + "kernel: {zone_reclaim_mode: 1, numa_balancing: 1}\n")
    result = eng.apply(loaded)
    assert result.status == "partial"
    assert result.verify_errors == ("kernel.zone_reclaim_mode: wrote 1, but the node now reads 0",)
    last = json.loads((root / "var/lib/nodeagent/last-applied.json").read_text())
    assert last["status"] == "partial" and last["verify_errors"]


def test_verify_failure_exits_5(make_node, silent_zone_reclaim, tmp_path: Path, capsys) -> None:
    root = make_node("workstation")
    prof = tmp_path / "p.yaml"
    prof.write_text(HEAD + "kernel: {zone_reclaim_mode: 1}\n")
    assert main(["--root", str(root), "apply", "--yes", str(prof)]) == 5
    assert "verify: kernel.zone_reclaim_mode" in capsys.readouterr().out


def test_failed_write_is_recorded_and_others_still_applied(make_node, tmp_path: Path, capsys) -> None:
    root = make_node("workstation")
    # Make THP's defrag attribute read-only: the kernel answers EACCES.
    # (a new inode: make_node clones nodes with hard links, so a chmod in place would leak into other tests)
    attr = root / "sys/kernel/mm/transparent_hugepage/defrag"
    text = attr.read_text()
    attr.unlink()
    attr.write_text(text)
    attr.chmod(0o444)
    prof = tmp_path / "p.yaml"
    prof.write_text(HEAD + "kernel:\n  transparent_hugepage: {defrag: never}\n  numa_balancing: 1\n")
    assert main(["--root", str(root), "apply", "--yes", str(prof)]) == 5
    out = capsys.readouterr().out
    assert "✗ kernel.transparent_hugepage.defrag: failed" in out and "EACCES" in out
    assert "✓ kernel.numa_balancing: applied" in out
    last = json.loads((root / "var/lib/nodeagent/last-applied.json").read_text())
    assert {o["target"]: o["status"] for o in last["outcomes"]} == {
        "kernel.transparent_hugepage.defrag": "failed", "kernel.numa_balancing": "applied"}


def test_corrupt_state_is_reported_by_plan_and_set_aside_by_apply(make_node, capsys) -> None:
    root = make_node("h100-cxl")
    state = root / "var/lib/nodeagent"
    state.mkdir(parents=True)
    (state / "originals.json").write_text("{not json")
    assert main(["--root", str(root), "plan", PROFILE]) == 0
    out = capsys.readouterr().out
    assert "originals.json is corrupt" in out and "set aside by the next apply" in out
    assert (state / "originals.json").read_text() == "{not json"  # plan never writes
    assert main(["--root", str(root), "apply", "--yes", PROFILE]) == 0
    aside = [p.name for p in state.iterdir() if p.name.startswith("originals.json.corrupt-")]
    assert len(aside) == 1 and (state / aside[0]).read_text() == "{not json"
    assert json.loads((state / "originals.json").read_text())["originals"]["kernel.numa_balancing"]["value"] == 0


def test_apply_as_non_root_on_the_real_root_exits_77_before_touching_anything(monkeypatch, capsys) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert main(["apply", "--yes", PROFILE]) == 77
    assert "needs root" in capsys.readouterr().err


def test_interactive_apply_asks_and_declining_writes_nothing(make_node, monkeypatch) -> None:
    from click.testing import CliRunner

    from nodeagent.cli.main import cli

    root = make_node("h100-cxl")
    before = SimKernel(root).journal()
    monkeypatch.setattr("nodeagent.cli.main._is_interactive", lambda: True)
    res = CliRunner().invoke(cli, ["--root", str(root), "apply", PROFILE], input="n\n")
    assert "~ kernel.numa_balancing  0 (disabled) → 2 (memory-tiering)" in res.output
    assert "Apply these changes? [y/N]: n" in res.output
    assert SimKernel(root).journal() == before
    res = CliRunner().invoke(cli, ["--root", str(root), "apply", PROFILE], input="y\n")
    assert "Result: converged." in res.output
    # Nothing left to change: no question at all.
    res = CliRunner().invoke(cli, ["--root", str(root), "apply", PROFILE], input="")
    assert "Apply these changes?" not in res.output and "No changes" in res.output


def test_an_unexpected_error_is_one_line_not_a_traceback(monkeypatch, capsys) -> None:
    def boom(*a, **k):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr("nodeagent.cli.main._load", boom)
    assert main(["validate", PROFILE]) == 1
    err = capsys.readouterr().err
    assert "internal error: RuntimeError: simulated bug" in err and "Traceback" not in err
    monkeypatch.setenv("NODEAGENT_DEBUG", "1")
    with pytest.raises(RuntimeError):
        main(["validate", PROFILE])
