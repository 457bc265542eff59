"""min_free_kbytes and the multi-gen LRU's switch and OOM guard: managed like every sysctl knob, each round trip
plan → apply → nothing left → drift → revert on the simulated kernel; and ranges judged against the node's kernel
at plan time (watermark_scale_factor above 1000 before 5.17)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel

from .cli_helpers import run

HEAD = "apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: floors}\n"


def plan_json(root: Path, prof: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    code, out, err = run(["--root", str(root), "--format", "json", "plan", "--detailed-exitcode", str(prof)], capsys)
    return code, json.loads(out)


@pytest.mark.parametrize("body,path,boot,written,key,before,after", [
    ("kernel:\n  min_free_kbytes: 131072\n", "/proc/sys/vm/min_free_kbytes", None, "131072",
     "kernel.min_free_kbytes", None, 131072),
    ("kernel:\n  lru_gen: {min_ttl_ms: 1000}\n", "/sys/kernel/mm/lru_gen/min_ttl_ms", "0", "1000",
     "kernel.lru_gen.min_ttl_ms", 0, 1000),
    ("kernel:\n  lru_gen: {enabled: false}\n", "/sys/kernel/mm/lru_gen/enabled", "0x0007", "0x0000",
     "kernel.lru_gen.enabled", 7, False),
])
def test_round_trip(make_node, tmp_path: Path, capsys, body, path, boot, written, key, before, after) -> None:
    root = make_node("qemu-3node")
    k = SimKernel(root)
    boot = boot if boot is not None else k.tree.read(path)
    prof = tmp_path / "p.yaml"
    prof.write_text(HEAD + body)
    code, plan = plan_json(root, prof, capsys)
    assert code == 2
    assert [(c["target"], c["after"]) for c in plan["changes"]] == [(key, after)]
    assert plan["changes"][0]["before"] == (before if before is not None else int(boot))
    code, out, err = run(["--root", str(root), "apply", "--yes", "--skip-checks", "all", str(prof)], capsys)
    assert code == 0, out + err
    assert k.tree.read(path) == written
    code, plan = plan_json(root, prof, capsys)
    assert (code, plan["changes"], plan["problems"]) == (0, [], [])
    k.write(path, boot)  # someone else puts it back
    code, out, err = run(["--root", str(root), "--format", "json", "drift", str(prof)], capsys)
    assert code == 3 and key in out, out + err
    code, out, err = run(["--root", str(root), "apply", "--yes", "--skip-checks", "all", str(prof)], capsys)
    assert code == 0 and k.tree.read(path) == written
    code, out, err = run(["--root", str(root), "revert", "--yes"], capsys)
    assert code == 0, out + err
    assert k.tree.read(path) == boot


def test_min_ttl_reads_back_in_jiffies_and_the_plan_allows_for_it(make_node, tmp_path: Path, capsys) -> None:
    """1001 ms is 251 jiffies at HZ=250, read back as 1004: already what the profile asks, no endless change."""
    root = make_node("qemu-3node")
    prof = tmp_path / "p.yaml"
    prof.write_text(HEAD + "kernel:\n  lru_gen: {min_ttl_ms: 1001}\n")
    code, out, err = run(["--root", str(root), "apply", "--yes", "--skip-checks", "all", str(prof)], capsys)
    assert code == 0, out + err
    assert SimKernel(root).tree.read("/sys/kernel/mm/lru_gen/min_ttl_ms") == "1004"
    code, plan = plan_json(root, prof, capsys)
    assert (code, plan["changes"]) == (0, [])


def test_lru_gen_true_is_met_by_the_main_switch(make_node, tmp_path: Path, capsys) -> None:
    root = make_node("qemu-3node")
    SimKernel(root).write("/sys/kernel/mm/lru_gen/enabled", "0x0001")
    prof = tmp_path / "p.yaml"
    prof.write_text(HEAD + "kernel:\n  lru_gen: {enabled: true}\n")
    code, plan = plan_json(root, prof, capsys)
    assert (code, plan["changes"]) == (0, [])


def test_lru_gen_missing_before_6_1_is_a_problem(make_node, tmp_path: Path, capsys) -> None:
    """Before 6.1 there is no multi-gen LRU: turning it on cannot be done (a problem); its min_ttl_ms guard has
    nothing to tune, so it is left out with a warning naming the release."""
    root = make_node("qemu-3node", kernel="5.15.0-nodeagent-sim")
    prof = tmp_path / "p.yaml"
    prof.write_text(HEAD + "kernel:\n  lru_gen: {enabled: true, min_ttl_ms: 1000}\n")
    code, plan = plan_json(root, prof, capsys)
    (p,) = plan["problems"]
    assert p["target"] == "kernel.lru_gen.enabled" and "introduced in 6.1" in p["message"]
    (w,) = [w for w in plan["warnings"] if "kernel.lru_gen.min_ttl_ms" in w]
    assert "introduced in 6.1" in w and "left out" in w


def test_min_ttl_left_out_on_a_kernel_built_without_lru_gen(make_node, tmp_path: Path, capsys) -> None:
    """A 6.x kernel built without CONFIG_LRU_GEN has no /sys/kernel/mm/lru_gen: a profile's min_ttl_ms
    is left out with the reason (the plan still applies everything else), while asking for MGLRU itself is a
    problem."""
    root = make_node("qemu-3node")
    SimKernel(root).tree.remove_tree("/sys/kernel/mm/lru_gen")
    prof = tmp_path / "p.yaml"
    prof.write_text(HEAD + "kernel:\n  lru_gen: {min_ttl_ms: 1000}\n  watermark_scale_factor: 400\n")
    code, plan = plan_json(root, prof, capsys)
    assert plan["problems"] == [] and [c["target"] for c in plan["changes"]] == ["kernel.watermark_scale_factor"]
    (w,) = [w for w in plan["warnings"] if "kernel.lru_gen.min_ttl_ms" in w]
    assert "built without CONFIG_LRU_GEN" in w and "left out" in w
    code, out, err = run(["--root", str(root), "apply", "--yes", "--skip-checks", "all", str(prof)], capsys)
    assert code == 0, out + err
    assert not (root / "sys/kernel/mm/lru_gen").exists()
    prof.write_text(HEAD + "kernel:\n  lru_gen: {enabled: true}\n")
    code, plan = plan_json(root, prof, capsys)
    (p,) = plan["problems"]
    assert p["target"] == "kernel.lru_gen.enabled" and "does not exist" in p["message"]


def test_watermark_scale_factor_above_1000_refused_at_plan_time_before_5_17(make_node, tmp_path: Path,
                                                                            capsys) -> None:
    root = make_node("qemu-3node", kernel="5.15.0-nodeagent-sim")
    prof = tmp_path / "p.yaml"
    prof.write_text(HEAD + "kernel:\n  watermark_scale_factor: 2000\n")
    code, plan = plan_json(root, prof, capsys)
    assert plan["changes"] == []
    (p,) = plan["problems"]
    assert "kernel.watermark_scale_factor: 2000 is outside 1..1000" in p["message"]
    assert "5.15.0-nodeagent-sim" in p["message"]
    assert "run a kernel >= 5.17" in p["hint"]
    code, out, err = run(["--root", str(root), "apply", "--yes", "--skip-checks", "all", str(prof)], capsys)
    assert code != 0 and "Traceback" not in out + err
    assert SimKernel(root).tree.read("/proc/sys/vm/watermark_scale_factor") == "10"
    # ... and the same value is fine where the kernel takes it; 1000 is fine on both
    prof.write_text(HEAD + "kernel:\n  watermark_scale_factor: 1000\n")
    code, plan = plan_json(root, prof, capsys)
    assert code == 2 and plan["problems"] == []
    root = make_node("qemu-3node")
    prof.write_text(HEAD + "kernel:\n  watermark_scale_factor: 2000\n")
    code, plan = plan_json(root, prof, capsys)
    assert code == 2 and plan["problems"] == []
