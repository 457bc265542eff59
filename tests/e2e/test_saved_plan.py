"""`plan --out FILE` then `apply --plan FILE`: exactly the reviewed plan, or nothing when the node or the profile
changed since (exit 5, naming what changed), like `terraform plan -out` and `terraform apply FILE`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from nodeagent_sim import SimKernel

from .cli_helpers import run

REPO = Path(__file__).resolve().parents[2]


def test_apply_carries_out_the_saved_plan(make_node, tmp_path: Path, capsys) -> None:
    root = str(make_node("small"))
    saved = tmp_path / "reviewed.plan"
    code, planned, err = run(["--root", root, "plan", "cxl-inference", "--out", str(saved)], capsys)
    assert code == 0 and "saved the plan to" in err
    doc = json.loads(saved.read_text())
    assert doc["format"] == "nodeagent-saved-plan" and doc["format_version"] == 1
    assert doc["profile"] == "cxl-inference" and doc["plan"]["changes"]
    # no terminal, no --yes: the saved plan is the consent
    code, out, err = run(["--root", root, "apply", "--plan", str(saved)], capsys)
    assert code == 0, err
    assert planned.split("\n")[0] in out and "Result: converged." in out


def test_a_changed_node_refuses_and_names_what_changed(make_node, tmp_path: Path, capsys) -> None:
    root = make_node("small")
    saved = tmp_path / "reviewed.plan"
    assert run(["--root", str(root), "plan", "cxl-inference", "--out", str(saved)], capsys)[0] == 0
    SimKernel(root).write("/proc/sys/kernel/numa_balancing", "2")  # someone set it meanwhile
    before = SimKernel(root).journal()
    code, out, err = run(["--root", str(root), "apply", "--plan", str(saved)], capsys)
    assert code == 5 and out == ""
    assert "the saved plan" in err and "is stale: the node changed since it was saved" in err
    assert ("kernel.numa_balancing: saved set 0 (disabled) → 2 (memory-tiering); now nothing to do (already as the "
            "profile wants)") in err
    assert "nothing was written" in err and SimKernel(root).journal() == before
    code, out, _ = run(["--root", str(root), "--format", "json", "apply", "--plan", str(saved)], capsys)
    assert code == 5 and json.loads(out)["error"]["exit_code"] == 5


def test_a_changed_profile_refuses(make_node, tmp_path: Path, capsys) -> None:
    root = str(make_node("small"))
    for name in ("base.yaml", "cxl-inference.yaml"):
        shutil.copy(REPO / "profiles" / name, tmp_path / name)
    profile, saved = tmp_path / "cxl-inference.yaml", tmp_path / "reviewed.plan"
    assert run(["--root", root, "plan", str(profile), "--out", str(saved)], capsys)[0] == 0
    profile.write_text(profile.read_text().replace("watermark_scale_factor: 400", "watermark_scale_factor: 300"))
    code, out, err = run(["--root", root, "apply", "--plan", str(saved)], capsys)
    assert code == 5 and f"the profile {profile} changed since it was saved" in err


def test_misuse_is_a_usage_or_input_error(make_node, tmp_path: Path, capsys) -> None:
    root = str(make_node("small"))
    code, _, err = run(["--root", root, "apply", "--plan", str(tmp_path / "none.plan")], capsys)
    assert code == 64 and "no such file" in err and "plan PROFILE --out FILE" in err
    (tmp_path / "facts.json").write_text("{}")
    code, _, err = run(["--root", root, "apply", "--plan", str(tmp_path / "facts.json")], capsys)
    assert code == 65 and "not a saved plan" in err
    saved = tmp_path / "p.plan"
    assert run(["--root", root, "plan", "cxl-inference", "--out", str(saved)], capsys)[0] == 0
    code, _, err = run(["--root", root, "apply", "--plan", str(saved), "cxl-kv-pool"], capsys)
    assert code == 64 and "leave PROFILE out" in err
    code, _, err = run(["plan", "cxl-inference", "--facts", str(tmp_path), "--out", str(saved)], capsys)
    assert code == 64 and "--out saves a plan of this node" in err
