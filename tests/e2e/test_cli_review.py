"""Offline review through the CLI: facts --save, plan --facts FILE|DIR, --baseline, --format markdown."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel

from tests.e2e.cli_helpers import run

REPO = Path(__file__).resolve().parents[2]
PROFILE = str(REPO / "profiles" / "cxl-inference.yaml")
PRESETS = ["h100-cxl", "h100-cxl-autoonline", "l40-kvm64", "workstation", "qemu-3node"]


def save_facts(root: Path, dest: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    code, _, err = run(["--root", str(root), "facts", "--save", str(dest)], capsys)
    assert code == 0, err
    return dest


def old_profile(tmp_path: Path, **replace: str) -> str:
    """A copy of the shipped profiles with some lines replaced: the baseline of a profile change."""
    d = tmp_path / "old-profiles"
    shutil.copytree(REPO / "profiles", d, dirs_exist_ok=True)
    path = d / "cxl-inference.yaml"
    text = path.read_text()
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("preset", PRESETS)
def test_offline_plan_is_the_plan_the_node_makes(preset: str, make_node, tmp_path: Path, capsys) -> None:
    root = make_node(preset)
    facts = save_facts(root, tmp_path / "node.json", capsys)
    code, live, _ = run(["--root", str(root), "--format", "json", "plan", PROFILE], capsys)
    assert code == 0
    shutil.rmtree(root)  # offline means offline: the node is gone
    code, out, err = run(["--format", "json", "plan", PROFILE, "--facts", str(facts)], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert [n["facts_file"] for n in doc["nodes"]] == [str(facts)]
    live_plan = {k: v for k, v in json.loads(live).items() if k != "format_version"}  # the document's, not the plan's
    assert doc["nodes"][0]["plan"] == live_plan


def test_facts_file_format_holds_state_and_no_environment(make_node, tmp_path: Path, capsys, monkeypatch) -> None:
    root = make_node("h100-cxl")
    monkeypatch.setenv("NODEAGENT_TEST_SECRET", "s3cr3t-token")
    assert run(["--root", str(root), "apply", "--yes", PROFILE], capsys)[0] == 0
    doc = json.loads(save_facts(root, tmp_path / "n.json", capsys).read_text())
    assert doc["format"] == "nodeagent-facts/v2"
    hw = doc["sections"]["hardware"]
    assert hw["cpu"]["model"] == "AMD EPYC 9454 48-Core Processor" and "avx512f" in hw["cpu"]["flags"]
    assert [d["kind"] for d in hw["pci"]].count("gpu") == 5 and [d["vendor"] for d in hw["pci"]
                                                                 if d["kind"] == "display"] == ["0x1a03"]
    assert {d["path"] for d in hw["disks"]} == {"/", "/models"}
    assert doc["simulated"] == "h100-cxl" and doc["kernel_release"].startswith("6.12")
    assert doc["state"]["last_applied"]["profile"] == "cxl-inference"
    assert doc["state"]["originals"]["originals"]["kernel.numa_balancing"]["value"] == 0
    assert doc["captured"]["nodeagent"]
    assert "s3cr3t-token" not in json.dumps(doc)
    writes = len(SimKernel(root).journal())
    save_facts(root, tmp_path / "again.json", capsys)
    assert len(SimKernel(root).journal()) == writes  # capturing facts only reads


def test_plan_against_a_directory_is_sorted_and_exit_codes_follow_plan(make_node, tmp_path: Path, capsys) -> None:
    facts = tmp_path / "facts"
    facts.mkdir()
    save_facts(make_node("workstation"), facts / "b-workstation.json", capsys)
    save_facts(make_node("h100-cxl"), facts / "a-h100.json", capsys)
    (facts / "notes.txt").write_text("not a facts file")
    code, out, _ = run(["plan", PROFILE, "--facts", str(facts)], capsys)
    assert code == 0
    assert out.index("== a-h100: h100-cxl") < out.index("== b-workstation: workstation")
    assert out.rstrip().endswith("2 of 2 nodes would change.")
    assert run(["plan", "--detailed-exitcode", PROFILE, "--facts", str(facts)], capsys)[0] == 2
    save_facts(make_node("h100-cxl", kernel="5.10.0-old"), facts / "c-old.json", capsys)
    code, out, _ = run(["plan", PROFILE, "--facts", str(facts)], capsys)
    assert code == 1  # a node class cannot carry the profile out, as a live plan says
    assert "needs kernel 5.18; this node runs 5.10.0-old" in out


def test_baseline_shows_how_a_profile_change_moves_each_plan(make_node, tmp_path: Path, capsys) -> None:
    facts = tmp_path / "facts"
    facts.mkdir()
    for preset in ("h100-cxl", "workstation"):
        root = make_node(preset)
        old = old_profile(tmp_path, **{"numa_balancing: memory-tiering": "numa_balancing: normal"})
        assert run(["--root", str(root), "apply", "--yes", old], capsys)[0] == 0  # the fleet runs the old one
        save_facts(root, facts / f"{preset}.json", capsys)
    code, out, _ = run(["plan", PROFILE, "--baseline", old, "--facts", str(facts)], capsys)
    assert code == 2
    assert "+ kernel.numa_balancing: now also 1 (normal) → 2 (memory-tiering)" in out
    assert out.rstrip().endswith("The profile change alters the plan on 2 of 2 nodes.")
    # The same profile as its own baseline: nothing moves.
    code, out, _ = run(["plan", PROFILE, "--baseline", PROFILE, "--facts", str(facts)], capsys)
    assert code == 0
    assert out.count("does not change what would be done on this node") == 2
    code, out, _ = run(["--format", "json", "plan", PROFILE, "--baseline", old, "--facts", str(facts)], capsys)
    doc = json.loads(out)
    assert doc["baseline"]["profile_path"] == old
    delta = doc["nodes"][0]["delta"]
    assert delta["changes_plan"] and [c["target"] for c in delta["added"]] == ["kernel.numa_balancing"]


def test_baseline_exit_1_only_for_problems_the_change_introduces(make_node, tmp_path: Path, capsys) -> None:
    facts = tmp_path / "facts"
    facts.mkdir()
    save_facts(make_node("h100-cxl", kernel="5.10.0-old"), facts / "old.json", capsys)
    # demotion_enabled is missing on 5.10 under both profiles; only memory-tiering is new trouble.
    normal = old_profile(tmp_path, **{"numa_balancing: memory-tiering": "numa_balancing: normal"})
    code, out, _ = run(["plan", PROFILE, "--baseline", normal, "--facts", str(facts)], capsys)
    assert code == 1
    assert "! new problem: kernel.numa_balancing: value 2 (memory-tiering) needs kernel 5.18" in out
    code, out, _ = run(["plan", normal, "--baseline", PROFILE, "--facts", str(facts)], capsys)
    assert code == 2  # the change resolves a problem and plans a change: reviewable, not broken
    assert "✓ resolved: kernel.numa_balancing" in out


def test_markdown_review_comment(make_node, tmp_path: Path, capsys) -> None:
    facts = tmp_path / "facts"
    facts.mkdir()
    save_facts(make_node("h100-cxl"), facts / "h100.json", capsys)
    save_facts(make_node("h100-cxl", kernel="5.10.0-old"), facts / "old.json", capsys)
    old = old_profile(tmp_path, **{"demotion_enabled: true": "demotion_enabled: false"})
    code, md, _ = run(["--format", "markdown", "plan", PROFILE, "--baseline", old, "--facts", str(facts)], capsys)
    assert code == 2
    assert md.startswith(f"## nodeagent plan review: `{PROFILE}` (profile `cxl-inference`)\n\n"
                         f"Compared with the baseline `{old}` (profile `cxl-inference`).\n")
    assert "| h100: h100-cxl (simulated h100-cxl) | `6.12.0-nodeagent-sim` | **yes** | 13 |  |  |" in md
    assert "| added | `kernel.demotion_enabled` | false | (no change) | true |" in md
    assert "**Cannot be done on this node — apply would write nothing here:**" in md
    assert "- ❌ kernel.numa_balancing: value 2 (memory-tiering) needs kernel 5.18" in md
    assert "<details><summary>Plan with this change: 8 to change, 2 unchanged</summary>" in md
    # the shipped kdamonds are optional: a kernel without DAMON sysfs leaves them out instead of refusing them
    assert "❌ profiles/cxl-inference.yaml" not in md and "left out (optional)" in md
    code, md, _ = run(["--format", "markdown", "plan", PROFILE, "--facts", str(facts / "h100.json")], capsys)
    assert code == 0
    assert "| ~ | `kernel.numa_balancing` | 0 (disabled) | 2 (memory-tiering) |  |" in md


def test_markdown_flags_disruptive_changes_and_shows_captured_checks(make_node, tmp_path: Path, capsys) -> None:
    doc = json.loads(save_facts(make_node("h100-cxl"), tmp_path / "n.json", capsys).read_text())
    doc["checks"] = {"results": [{"name": "cpu", "status": "fail", "summary": "kvm64 CPU model: no avx2"},
                                 {"name": "disk", "status": "warn", "summary": "model disk 94% | full"},
                                 {"name": "pcie", "status": "pass", "summary": "ok"}]}
    (tmp_path / "n.json").write_text(json.dumps(doc))
    from nodeagent.engine.review import review
    from nodeagent.facts.snapshot import read
    from nodeagent.profile import load_profile
    from nodeagent.render.review import review_markdown

    snap = read(tmp_path / "n.json")
    reviews = review(load_profile(PROFILE), [snap])
    # A disruptive change, as kinds that take memory offline plan them.
    from dataclasses import replace

    plan = reviews[0].plan
    reviews[0] = replace(reviews[0], plan=replace(plan, changes=(replace(plan.changes[0], disruptive=True),
                                                                 *plan.changes[1:])))
    md = review_markdown(reviews, load_profile(PROFILE))
    assert "| ~ | `memory.auto_online_blocks` | online | offline | ⚠️ **disruptive** |" in md
    assert "⚠️ 1 disruptive change: apply skips it unless run with `--allow-disruptive`" in md
    assert "- ❌ `cpu` failed: kvm64 CPU model: no avx2" in md
    assert "- ⚠️ `disk`: model disk 94% \\| full" in md
    assert "`pcie`" not in md


@pytest.mark.parametrize(("content", "code", "message"), [
    ("{", 65, "not JSON"),
    ("[]", 65, "not a nodeagent facts file (no \"format\" field)"),
    ('{"format": "nodeagent-facts/v3"}', 65, "facts format nodeagent-facts/v3 was written by a newer nodeagent; "
                                             "this one reads nodeagent-facts/v1 and nodeagent-facts/v2"),
    ('{"format": "nodeagent-facts/v0"}', 65, "facts format nodeagent-facts/v0 is too old"),
    ('{"format": "nodeagent-facts/v1", "hostname": "x"}', 65, "without the required field 'kernel_release'"),
    ('{"format": "nodeagent-facts/v2", "hostname": "x"}', 65, "without the required field 'kernel_release'"),
])
def test_bad_facts_files_are_clear_errors(content: str, code: int, message: str, tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    rc, _, err = run(["plan", PROFILE, "--facts", str(bad)], capsys)
    assert rc == code
    assert err.startswith(f"nodeagent: {bad}: ") and message in err
    assert "Traceback" not in err


def test_facts_usage_errors(make_node, tmp_path: Path, capsys) -> None:
    rc, _, err = run(["plan", PROFILE, "--facts", str(tmp_path / "missing.json")], capsys)
    assert rc == 64 and "no such file or directory" in err
    rc, _, err = run(["plan", PROFILE, "--facts", str(tmp_path)], capsys)
    assert rc == 64 and "no *.json facts files in this directory" in err
    rc, _, err = run(["--root", str(make_node("workstation")), "plan", PROFILE, "--facts", str(tmp_path)], capsys)
    assert rc == 64 and "--root and --simulate do not apply" in err
    root = make_node("workstation")
    rc, _, err = run(["--root", str(root), "facts", "--save", str(tmp_path / "no" / "such" / "f.json")], capsys)
    assert rc == 64 and "directory" in err and "does not exist" in err


def test_markdown_is_only_for_plan(make_node, capsys) -> None:
    root = make_node("workstation")
    for args in (["facts"], ["apply", "--yes", PROFILE], ["validate", PROFILE], ["sim", "presets"]):
        rc, _, err = run(["--root", str(root), "--format", "markdown", *args] if args[0] != "sim" else
                         ["--format", "markdown", *args], capsys)
        assert rc == 64, args
        assert f"--format markdown is not supported by {args[0]}" in err
    assert SimKernel(root).journal() == []  # refused before apply wrote anything


def test_live_markdown_plan(make_node, capsys) -> None:
    code, md, _ = run(["--root", str(make_node("h100-cxl")), "--format", "markdown", "plan", PROFILE], capsys)
    assert code == 0
    assert "### h100-cxl (simulated h100-cxl)" in md and "<sub>facts gathered live;" in md
    assert "Planned offline" not in md
