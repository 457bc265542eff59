"""vm.watermark_scale_factor: the headroom kswapd keeps free on every node, managed like any other sysctl knob."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel

from nodeagent.util.errors import ExitCode

from .cli_helpers import run

PATH = "/proc/sys/vm/watermark_scale_factor"
HEAD = "apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: wsf}\n"


def plan_json(root: Path, prof: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    code, out, err = run(["--root", str(root), "--format", "json", "plan", "--detailed-exitcode", prof], capsys)
    return code, json.loads(out)


def test_set_then_nothing_left_to_do_then_revert(make_node, tmp_path: Path, capsys) -> None:
    root = make_node("qemu-3node")
    prof = tmp_path / "wsf.yaml"
    prof.write_text(HEAD + "kernel:\n  watermark_scale_factor: 1000\n")
    code, plan = plan_json(root, str(prof), capsys)
    assert code == 2
    assert [(c["target"], c["before"], c["after"]) for c in plan["changes"]] == [
        ("kernel.watermark_scale_factor", 10, 1000)]
    code, out, err = run(["--root", str(root), "apply", "--yes", "--skip-checks", "all", str(prof)], capsys)
    assert code == 0, out + err
    k = SimKernel(root)
    assert k.tree.read(PATH) == "1000"
    code, plan = plan_json(root, str(prof), capsys)
    assert (code, plan["changes"], plan["problems"]) == (0, [], [])
    code, out, err = run(["--root", str(root), "revert", "--yes"], capsys)
    assert code == 0, out + err
    assert k.tree.read(PATH) == "10"


def test_out_of_range_names_the_field_and_the_bounds(make_node, tmp_path: Path, capsys) -> None:
    """0 would make the watermarks collapse onto min; the kernel refuses it (EINVAL), the profile says so first."""
    root = make_node("qemu-3node")
    prof = tmp_path / "wsf.yaml"
    prof.write_text(HEAD + "kernel:\n  watermark_scale_factor: 0\n")
    code, out, err = run(["--root", str(root), "plan", str(prof)], capsys)
    assert code == ExitCode.INVALID_PROFILE
    assert "wsf.yaml" in err and "kernel.watermark_scale_factor" in err and "from 1 to 3000, got 0" in err
    assert "Traceback" not in out + err
    assert SimKernel(root).tree.read(PATH) == "10"
