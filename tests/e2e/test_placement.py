"""The placement demotion pass and the apply order, through the CLI on simulated nodes.

``qemu-placement-full`` is the placement benchmark's guest as a running node finds it after a workload filled the
fast node with demotion off: node0 at 41 MiB free and given up by kswapd (``node_unreclaimable: 1``), the CXL
stand-in (node2) online. Measured on a real 6.12 kernel, enabling tiering there does nothing without a pass.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel
from nodeagent_sim import reclaim as simreclaim

from nodeagent.cli.main import main
from nodeagent.facts.reclaim import parse_zoneinfo

REPO = Path(__file__).resolve().parents[2]
SHIPPED = str(REPO / "profiles/cxl-inference.yaml")


def profile(tmp_path: Path, *, demotion: bool = True, pass_: str | None = "{until_free: 25%, timeout: 20s}",
            damon: bool = True, name: str = "p.yaml") -> str:
    text = textwrap.dedent(f"""\
        apiVersion: nodeagent/v1
        kind: NodeProfile
        metadata: {{name: placement-test}}
        kernel:
          numa_balancing: memory-tiering
          demotion_enabled: {str(demotion).lower()}
        memory:
          auto_online_blocks: offline
        """)
    if pass_ is not None:
        text += f"  demotion_pass: {pass_}\n"
    if damon:
        text += textwrap.dedent("""\
            damon:
              kdamonds:
                - name: demote-cold
                  monitoring: {sample: 5ms, aggregate: 100ms, update: 1s}
                  targets: [{node: fast}]
                  schemes:
                    - action: migrate_cold
                      target_node: slow
                      access: {nr_accesses: {max: 0}, age: {min: 3s}}
                      quota: {size: 256MiB, reset_interval: 1s}
                      filters: [{type: young, matching: true}]
            """)
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def plan_json(root: Path, prof: str, capsys: pytest.CaptureFixture[str]) -> dict:
    capsys.readouterr()
    assert main(["--root", str(root), "--format", "json", "plan", prof]) in (0, 1)
    return json.loads(capsys.readouterr().out)


def stuck(root: Path) -> dict[int, bool]:
    zones = parse_zoneinfo((root / "proc/zoneinfo").read_text())
    return {n: z["unreclaimable"] for n, z in zones.items()}


def free_kb(root: Path, node: int) -> int:
    for line in (root / f"sys/devices/system/node/node{node}/meminfo").read_text().splitlines():
        if "MemFree:" in line:
            return int(line.split()[-2])
    raise AssertionError("no MemFree")


def test_stuck_node_gets_one_pass_in_order(make_node, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_node("qemu-placement-full")
    assert stuck(root)[0] is True and free_kb(root, 0) == 41 * 1024
    prof = profile(tmp_path)
    plan = plan_json(root, prof, capsys)
    targets = [c["target"] for c in plan["changes"]]
    # demotion on first, the pass before DAMON starts (its promotion must find room), NUMA balancing last
    assert targets.index("kernel.demotion_enabled") < targets.index("placement.node0") \
        < targets.index("damon.kdamonds") < targets.index("kernel.numa_balancing")
    change = next(c for c in plan["changes"] if c["target"] == "placement.node0")
    assert change["op"] == "demote" and change["path"] == "/sys/fs/cgroup/memory.reclaim"
    assert "node_unreclaimable" in change["before_label"] and "256MiB" in change["after_label"]
    assert not any("advisory stuck-fast-node" in w for w in plan["warnings"])

    capsys.readouterr()
    assert main(["--root", str(root), "apply", "--yes", prof]) == 0
    assert stuck(root)[0] is False
    assert free_kb(root, 0) >= 256 * 1024
    # the pass leaves no setting to read back, so the text result (the outcome, after the plan) says what it did
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "placement.node0: " in ln)
    assert line.startswith("  ✓ placement.node0: applied — node0: 41MiB → ") and "kswapd works on it again" in line
    journal = [e for e in SimKernel(root).journal() if e["result"] == "ok"]
    paths = [e["path"] for e in journal]
    first_reclaim = paths.index("/sys/fs/cgroup/memory.reclaim")
    assert paths.index("/sys/kernel/mm/numa/demotion_enabled") < first_reclaim
    assert first_reclaim < paths.index("/sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds")
    assert paths.index("/proc/sys/kernel/numa_balancing") > max(i for i, p in enumerate(paths)
                                                                  if p.startswith("/sys/kernel/mm/damon"))
    # bounded: each root memory.reclaim write asks for at most 64 MiB
    sizes = [int(e["value"]) for e in journal if e["path"] == "/sys/fs/cgroup/memory.reclaim"]
    assert sizes and all(0 < s <= 64 * 1024**2 for s in sizes)
    # the next plan has nothing left to do: the node is no longer stuck
    again = plan_json(root, prof, capsys)
    assert again["changes"] == []
    assert "placement.demotion_pass" in again["unchanged"]


def test_without_a_pass_the_plan_says_why_tiering_would_do_nothing(make_node, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    root = make_node("qemu-placement-full")
    plan = plan_json(root, profile(tmp_path, pass_=None), capsys)
    assert not any(c["kind"] == "placement" for c in plan["changes"])
    advice = [w for w in plan["warnings"] if w.startswith("advisory stuck-fast-node")]
    assert len(advice) == 1
    assert "node0" in advice[0] and "0-26 %" in advice[0] and "memory.demotion_pass" in advice[0]


def test_pass_without_demotion_is_a_problem_not_a_write(make_node, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    root = make_node("qemu-placement-full")
    prof = profile(tmp_path, demotion=False, damon=False)
    plan = plan_json(root, prof, capsys)
    problems = [p for p in plan["problems"] if p["target"] == "placement.node0"]
    assert len(problems) == 1 and not problems[0]["blocking"]
    assert "kernel.demotion_enabled: true" in problems[0]["hint"]
    assert main(["--root", str(root), "apply", "--yes", prof]) == 5  # the rest applied, exit partial
    assert not any(e["path"].endswith("memory.reclaim") for e in SimKernel(root).journal())


def test_a_node_that_is_not_stuck_gets_no_pass(make_node, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    root = make_node("qemu-placement")
    plan = plan_json(root, profile(tmp_path), capsys)
    assert not any(c["kind"] == "placement" for c in plan["changes"])
    assert "placement.demotion_pass" in plan["unchanged"]


def test_per_node_reclaim_file_is_preferred_where_the_kernel_has_it(make_node, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    root = make_node("qemu-placement-full", kernel="6.18.0-nodeagent-sim")
    assert (root / "sys/devices/system/node/node0/reclaim").exists()
    prof = profile(tmp_path, damon=False)
    plan = plan_json(root, prof, capsys)
    change = next(c for c in plan["changes"] if c["target"] == "placement.node0")
    assert change["path"] == "/sys/devices/system/node/node0/reclaim"
    assert main(["--root", str(root), "apply", "--yes", prof]) == 0
    writes = [e for e in SimKernel(root).journal() if "reclaim" in e["path"]]
    assert [e["path"] for e in writes] == ["/sys/devices/system/node/node0/reclaim"]
    assert stuck(root)[0] is False


def test_a_pass_that_cannot_free_anything_fails_with_the_kernels_reason(make_node, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    root = make_node("qemu-placement-full")
    k = SimKernel(root)
    simreclaim.fill(k, 2, 0, stuck=False)  # the CXL node is full too: demotion has nowhere to go
    prof = profile(tmp_path, damon=False)
    capsys.readouterr()
    assert main(["--root", str(root), "apply", "--yes", prof]) == 5
    out = capsys.readouterr()
    assert "placement.node0" in out.out
    assert "still gave up on it" in out.out and "Resource temporarily unavailable" in out.out
    assert stuck(root)[0] is True


def test_the_shipped_profile_unsticks_the_benchmark_guest(make_node, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_node("qemu-placement-full")
    plan = plan_json(root, SHIPPED, capsys)
    assert any(c["target"] == "placement.node0" for c in plan["changes"])
    assert main(["--root", str(root), "apply", "--yes", "--skip-checks", "all", SHIPPED]) == 0
    assert stuck(root)[0] is False
    assert plan_json(root, SHIPPED, capsys)["changes"] == []


def test_memory_reclaim_rejects_what_the_kernel_rejects(make_node) -> None:
    root = make_node("qemu-placement-full")
    k = SimKernel(root)
    for bad in ("", "lots", "1M nodes=0", "1M swappiness=300"):
        with pytest.raises(OSError) as exc:
            k.write("/sys/fs/cgroup/memory.reclaim", bad)
        assert exc.value.errno == 22
    k.write("/sys/kernel/mm/numa/demotion_enabled", "1")
    k.write("/sys/fs/cgroup/memory.reclaim", "64M swappiness=max")
    assert free_kb(root, 0) >= 41 * 1024 + 64 * 1024


# -- one profile, three kernel generations (young filters 6.10, migrate actions 6.11, per-node goals 6.16) --------

def _damon_writes(root: Path) -> dict[str, str]:
    return {e["path"]: e["value"] for e in SimKernel(root).journal()
            if e["result"] == "ok" and e["path"].startswith("/sys/kernel/mm/damon")}


def test_shipped_profile_on_6_8_leaves_damon_out_and_tiers_with_the_kernel(make_node,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    root = make_node("qemu-placement", kernel="6.8.0-nodeagent-sim")
    plan = plan_json(root, SHIPPED, capsys)
    assert not plan["problems"]
    left_out = [w for w in plan["warnings"] if "left out (optional)" in w]
    assert {w.split(":")[0] for w in left_out} == {"demote-cold", "promote-hot"}
    assert all("migrate_" in w and "6.11" in w for w in left_out)
    assert not any(c["kind"] == "damon" for c in plan["changes"])
    assert {"kernel.numa_balancing", "kernel.demotion_enabled", "dax0.0"} <= {c["target"] for c in plan["changes"]}
    assert main(["--root", str(root), "apply", "--yes", "--skip-checks", "all", SHIPPED]) == 0
    assert plan_json(root, SHIPPED, capsys)["changes"] == []


def test_shipped_profile_on_6_12_runs_both_kdamonds_with_fixed_quotas(make_node,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    root = make_node("qemu-placement")
    plan = plan_json(root, SHIPPED, capsys)
    assert not plan["problems"]
    # no quota goal a 6.12 kernel cannot run, so no note about one (per-node goals are the opt-in recipe's, 7.1+)
    assert not any("needs 6.16" in w for w in plan["warnings"]), plan["warnings"]
    # no advisory: MGLRU's min_ttl_ms stays at 0 (this node has no swap: above 0, a full CXL node's kswapd kills)
    assert [w.split(":")[0] for w in plan["warnings"] if w.startswith("advisory")] == []
    assert main(["--root", str(root), "apply", "--yes", "--skip-checks", "all", SHIPPED]) == 0
    writes = _damon_writes(root)
    actions = {v for p, v in writes.items() if p.endswith("/schemes/0/action")}
    assert actions == {"migrate_cold", "migrate_hot"}
    assert all(v == "0" for p, v in writes.items() if p.endswith("quotas/goals/nr_goals"))
    assert not any(p.endswith("/watermarks/metric") and v != "none" for p, v in writes.items())


def test_mem_tier_opt_in_on_7_3_bounds_both_directions_with_node_goals(make_node, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """From 7.1 the opt-in recipe (recipes/mem-tier.yaml) runs damo's mem_tier: a goal on the fast node bounds each
    direction, above the profile's watermarks (20 % free, 80.2 % used), switched by the temporal tuner."""
    root = make_node("qemu-placement", kernel="7.3.0-nodeagent-sim")
    shutil.copytree(Path(SHIPPED).parent, tmp_path / "profiles")
    opted = tmp_path / "profiles" / "mem-tier-node.yaml"
    opted.write_text("extends: [cxl-inference.yaml, recipes/mem-tier.yaml]\nmetadata: {name: mem-tier-node}\n")
    plan = plan_json(root, str(opted), capsys)
    assert not plan["problems"] and not any("left out" in w for w in plan["warnings"])
    assert main(["--root", str(root), "apply", "--yes", "--skip-checks", "all", str(opted)]) == 0
    writes = _damon_writes(root)
    for action, metric, target, allow in (("migrate_hot", "node_mem_used_bp", "8020", "Y"),
                                          ("migrate_cold", "node_mem_free_bp", "2000", "N")):
        kd = next(p.rsplit("/schemes/0/", 1)[0] for p, v in writes.items()
                  if p.endswith("/schemes/0/action") and v == action)
        goal = f"{kd}/schemes/0/quotas/goals"
        assert writes[f"{goal}/nr_goals"] == "1"
        assert (writes[f"{goal}/0/target_metric"], writes[f"{goal}/0/target_value"], writes[f"{goal}/0/nid"]) == \
            (metric, target, "0")
        assert writes[f"{kd}/schemes/0/quotas/goal_tuner"] == "temporal"
        # 6.15+ filter layout: the young filters go to ops_filters, with allow Y for promotion, N for demotion
        assert (writes[f"{kd}/schemes/0/ops_filters/0/type"], writes[f"{kd}/schemes/0/ops_filters/0/allow"]) == \
            ("young", allow)


def test_placement_check_reports_what_plan_warns(make_node, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    root = make_node("qemu-placement-full")
    prof = Path(profile(tmp_path, pass_=None))
    prof.write_text(prof.read_text() + "checks:\n  placement: {}\n")
    capsys.readouterr()
    assert main(["--root", str(root), "--format", "json", "check", str(prof)]) == 0  # warnings never block
    report = json.loads(capsys.readouterr().out)
    (result,) = [r for r in report["results"] if r["name"] == "placement"]
    assert result["status"] == "warn" and result["severity"] == "warning"
    assert [a["id"] for a in result["evidence"]["advisories"]] == ["stuck-fast-node"]
    assert "memory.demotion_pass" in result["remedies"][0]
    prof.write_text(prof.read_text().replace("placement: {}", "placement: {severity: error}"))
    assert main(["--root", str(root), "check", str(prof)]) == 4


def test_the_pass_stops_at_its_timeout(make_node) -> None:
    from nodeagent.host import open_host
    from nodeagent.kinds.placement import run_pass

    root = make_node("qemu-placement-full")
    SimKernel(root).write("/sys/kernel/mm/numa/demotion_enabled", "true")
    ticks = iter([0.0, 0.0, 31.0, 31.0])  # start, before the first write, then past the 30 s bound
    msg = run_pass(open_host(str(root)), 0, 900 * 1024**2, 30_000_000, "/sys/fs/cgroup/memory.reclaim",
                   now=lambda: next(ticks))
    assert "1 write(s)" in msg and "stopped short of 900MiB (timeout)" in msg and "works on it again" in msg
    assert free_kb(root, 0) == (41 + 64) * 1024
