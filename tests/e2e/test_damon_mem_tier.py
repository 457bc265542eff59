"""The shipped profile runs demote-cold and promote-hot on every kernel; recipes/mem-tier.yaml is the opt-in that
replaces them from 7.1 with the auto-tuned tiering of damo's scripts/mem_tier.sh (intervals goal, a node_mem_free_bp
demotion goal and a node_mem_used_bp promotion goal on the fast node, set above the profile's watermarks, and the
temporal goal tuner), with DAMON_STAT disabled first. On simulated h100-cxl nodes of each generation: it converges,
the next plan is empty, and revert returns the node to how it booted."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from nodeagent_sim import SimKernel

from nodeagent.cli.main import main
from nodeagent.facts import gather
from nodeagent.facts.damon import from_facts
from nodeagent.host import open_host

PROFILES = Path(__file__).resolve().parents[2] / "profiles"
PROFILE = str(PROFILES / "cxl-inference.yaml")
STAT = "/sys/module/damon_stat/parameters/enabled"


@pytest.fixture
def mem_tier(tmp_path: Path) -> str:
    """A profile that opts in: the shipped ones copied (extends stays inside the profile's directory tree)."""
    shutil.copytree(PROFILES, tmp_path / "profiles")
    path = tmp_path / "profiles" / "mem-tier-node.yaml"
    path.write_text("extends: [cxl-inference.yaml, recipes/mem-tier.yaml]\nmetadata: {name: mem-tier-node}\n")
    return str(path)


def run(capsys: pytest.CaptureFixture[str], root: Path, *args: str) -> tuple[int, str]:
    code = main(["--root", str(root), *args])
    out = capsys.readouterr()
    return code, out.out + out.err


def boot_state(root: Path) -> dict[str, Any]:
    """What revert must give back: every managed knob, the DAX modes, the kdamond slots, DAMON_STAT's switch."""
    facts = gather(open_host(root))
    damon = from_facts(facts)
    dax = facts.sections.get("dax") or {}
    return {"knobs": facts.knobs, "nr_kdamonds": damon.nr_kdamonds, "modules": damon.modules,
            "dax": json.dumps(dax.get("devices", dax), sort_keys=True, default=str)}


def kdamonds(root: Path) -> dict[str, Any]:
    return {kd.index: kd for kd in from_facts(gather(open_host(root))).kdamonds}


@pytest.mark.parametrize("preset, kernel", [("h100-cxl", "7.1.0"), ("h100-cxl-damon-stat", "7.1.0"),
                                            ("h100-cxl", "7.3.0")])
def test_from_7_1_the_mem_tier_recipe_converges_and_reverts(make_node, capsys, mem_tier, preset, kernel) -> None:
    root = make_node(preset, kernel=kernel)
    k = SimKernel(root)
    stat_at_boot = k.tree.read(STAT) if k.tree.exists(STAT) else None
    assert (stat_at_boot == "Y") == (preset == "h100-cxl-damon-stat")
    boot = boot_state(root)
    code, out = run(capsys, root, "apply", "--yes", "--allow-disruptive", mem_tier)
    assert code == 0, out
    if stat_at_boot == "Y":
        assert "damon.module.damon_stat: applied" in out and k.tree.read(STAT) == "N"
    kds = list(kdamonds(root).values())
    assert sorted(kd.tree.actions[0] for kd in kds) == ["migrate_cold", "migrate_cold", "migrate_hot", "migrate_hot"]
    assert all(kd.running for kd in kds)
    for kd in kds:
        ctx = kd.tree.context
        assert ctx is not None and ctx.attrs.intervals_goal is not None
        assert (ctx.attrs.intervals_goal.access_bp, ctx.attrs.intervals_goal.aggrs) == (400, 3)
        s = ctx.schemes[0]
        assert s.quota.bytes == 200 * 2**20 and s.apply_interval_us == 1_000_000
        (goal,) = s.quota.goals or ()
        want = ("node_mem_free_bp", 2000) if s.action == "migrate_cold" else ("node_mem_used_bp", 8020)
        assert (goal.metric, goal.target) == want and goal.nid in (0, 1)  # a fast (DRAM) node
        assert s.quota.goal_tuner == "temporal"
        young = (s.core_filters or ()) + (s.ops_filters or ())
        assert [(f.type, f.matching, f.allow) for f in young] == [
            ("young", True, s.action == "migrate_hot")]
    code, out = run(capsys, root, "plan", "--detailed-exitcode", mem_tier)
    assert code == 0, out
    code, out = run(capsys, root, "revert", "--yes", "--allow-disruptive")
    assert code == 0, out
    assert boot_state(root) == boot
    if stat_at_boot is not None:
        assert k.tree.read(STAT) == stat_at_boot


@pytest.mark.parametrize("kernel, opt_in", [(None, False), ("6.15.0", False), ("6.16.0", False), ("7.1.0", False),
                                            ("7.3.0", False), ("6.19.0", True), ("7.0.0", True)])
def test_the_profile_keeps_demote_cold_and_promote_hot(make_node, capsys, mem_tier, kernel, opt_in) -> None:
    """The shipped profile on every kernel, the opt-in before 7.1 (no temporal goal tuner)."""
    root = make_node("h100-cxl", kernel=kernel)
    code, out = run(capsys, root, "--format", "json", "plan", mem_tier if opt_in else PROFILE)
    assert code == 0, out
    plan = json.loads(out)
    (change,) = [c for c in plan["changes"] if c["target"] == "damon.kdamonds"]
    names = [kd["name"] for kd in dict(change["data"])["kdamonds"]] if isinstance(change["data"], list) else \
        [kd["name"] for kd in change["data"]["kdamonds"]]
    assert names and all(n.startswith(("demote-cold", "promote-hot")) for n in names), names
    if kernel in (None, "6.15.0"):  # no DAMON_STAT before 6.17: nothing to disable
        assert not [c for c in plan["changes"] if c["target"].startswith("damon.module.")]


def _tuned(root: Path) -> list[tuple[int, int]]:
    return [(kd.tree.context.attrs.sample_us, kd.tree.context.attrs.aggr_us)
            for kd in kdamonds(root).values() if kd.tree.context is not None]


GOAL = "{access: 4%, aggregations: 3, min_sample: 5ms, max_sample: 10s}"


def _node(mem_tier: str, kernel: str, monitoring: str = "") -> str:
    """mem_tier's node profile; before 7.1 (the recipe keeps demote-cold and promote-hot there) with the recipe's
    intervals goal on those. ``monitoring``: more of each kdamond's monitoring (a flow mapping's inside)."""
    names = ("mem-tier-demote", "mem-tier-promote") if kernel >= "7.1" else ("demote-cold", "promote-hot")
    goal = "" if kernel >= "7.1" else f"intervals_goal: {GOAL}, "
    if not goal and not monitoring:
        return mem_tier
    path = Path(mem_tier).with_name("goal-node.yaml")
    path.write_text(Path(mem_tier).read_text() + "damon:\n  kdamonds:\n" + "".join(
        f"    - name: {n}\n      monitoring: {{{goal}{monitoring}}}\n" for n in names))
    return str(path)


@pytest.mark.parametrize("kernel", ["6.17.0", "7.3.0"])
def test_intervals_the_kernel_tuned_are_not_drift(make_node, capsys, mem_tier, kernel) -> None:
    """With an intervals goal the kernel retunes sample_us and aggr_us (keeping their ratio) and, every refresh_ms
    (6.17+), shows the tuned pair in sysfs: a running kdamond is still converged, and only a profile that changes
    the intervals or the goal plans a commit."""
    from nodeagent_sim.damon import tick
    root = make_node("h100-cxl", kernel=kernel)
    node = _node(mem_tier, kernel)
    code, out = run(capsys, root, "apply", "--yes", "--allow-disruptive", node)
    assert code == 0, out
    written = _tuned(root)
    pids = {i: kd.pid for i, kd in kdamonds(root).items()}
    tick(SimKernel(root))  # refresh_ms passes: the kernel shows the intervals it tuned
    tuned = _tuned(root)
    assert tuned != written and all(a // s == wa // ws for (s, a), (ws, wa) in zip(tuned, written, strict=True))
    code, out = run(capsys, root, "plan", "--detailed-exitcode", node)
    assert code == 0, out
    code, out = run(capsys, root, "--format", "json", "drift", node)
    assert code == 0 and json.loads(out)["converged"], out
    code, out = run(capsys, root, "status")
    assert code == 0 and "treated as not managed" not in out, out
    code, out = run(capsys, root, "apply", "--yes", node)
    assert code == 0 and "No changes: the node matches the profile" in out, out
    assert {i: kd.pid for i, kd in kdamonds(root).items()} == pids and _tuned(root) == tuned
    # the profile's intervals change (the ratio kept, the tuned pair inside the goal's range): committed again
    (s, a), *_ = written
    node = _node(mem_tier, kernel, f"sample: {3 * s}us, aggregate: {3 * a}us")
    code, out = run(capsys, root, "--format", "json", "plan", node)
    changes = [c for c in json.loads(out)["changes"] if c["target"].startswith("damon.")]
    assert len(changes) == len(pids) and all(c["op"] == "update" for c in changes), out


def test_the_verify_after_apply_does_not_see_tuned_intervals_as_drift(make_node, capsys, mem_tier,
                                                                       monkeypatch) -> None:
    """On a slow node (7.3.4 under QEMU TCG) a refresh_ms passes between a kdamond's start and the apply's verify:
    the verify's re-plan sees the intervals the kernel tuned, and the apply still converges."""
    from nodeagent_sim import damon as simdamon
    write = SimKernel.write

    def slow(self: SimKernel, path: str, value: str) -> None:
        write(self, path, value)
        if path.startswith(simdamon.lay.KDAMONDS) and path.endswith("/state") and value.strip() in ("on", "commit"):
            simdamon.tick(self)  # the kernel's refresh_ms work runs right after the kdamond (re)started

    monkeypatch.setattr(SimKernel, "write", slow)
    root = make_node("h100-cxl", kernel="7.3.0")
    code, out = run(capsys, root, "apply", "--yes", "--allow-disruptive", mem_tier)
    assert code == 0 and "Result: converged." in out, out
    assert all(kd.tree.context is not None and kd.tree.context.attrs.sample_us > 5000
               for kd in kdamonds(root).values())  # the files show tuned intervals
