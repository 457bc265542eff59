"""DAX devices end to end: the CLI and the engine against simulated nodes with the fake daxctl (the code path
that runs the real binary). Every preset, both zones, partial and wrong-zone states, and every failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel
from nodeagent_sim import dax as simdax
from nodeagent_sim.fake_daxctl import commands

from nodeagent.cli.main import main
from nodeagent.engine.core import Engine
from nodeagent.host import open_host
from nodeagent.profile import load_profile

REPO = Path(__file__).resolve().parents[2]
TIERED = str(REPO / "profiles" / "cxl-inference.yaml")
POOL = str(REPO / "profiles" / "cxl-kv-pool.yaml")
MEM = "/sys/devices/system/memory"


def cli(root: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    # The preflight checks have their own tests; qemu-3node and l40-kvm64 fail them on purpose.
    if args and args[0] == "apply" and "--skip-checks" not in args:
        args = ("apply", "--skip-checks", "all", *args[1:])
    code = main(["--root", str(root), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def devices(root: Path) -> dict[str, tuple[str, int, int, dict]]:
    from nodeagent.facts import gather
    from nodeagent.facts.dax import from_facts

    return {d.name: (d.mode, d.blocks_online, d.blocks_total, d.zones)
            for d in from_facts(gather(open_host(root))).devices}


def block_writes(root: Path, since: int = 0) -> list[dict]:
    return [w for w in SimKernel(root).journal()[since:] if w["path"].startswith(MEM + "/memory")]


EXPECTED = {  # preset -> {device: blocks}
    "h100-cxl": {"dax0.0": 1024, "dax1.0": 1024},
    "h100-cxl-autoonline": {"dax0.0": 1024, "dax1.0": 1024},
    "qemu-3node": {"dax0.0": 7},
    "l40-kvm64": {},
    "workstation": {},
}


@pytest.mark.parametrize("preset", list(EXPECTED))
@pytest.mark.parametrize("profile, zone", [(TIERED, "Movable"), (POOL, "Normal")], ids=["movable", "normal"])
def test_every_preset_converges_in_the_profiles_zone_and_stays(preset: str, profile: str, zone: str, make_node,
                                                               capsys) -> None:
    root = make_node(preset)
    code, out, err = cli(root, capsys, "apply", "--yes", "--allow-disruptive", profile)
    assert code == 0, out + err
    assert devices(root) == {n: ("system-ram", b, b, {zone: b}) for n, b in EXPECTED[preset].items()}
    code, out, err = cli(root, capsys, "--format", "json", "plan", "--detailed-exitcode", profile)
    assert code == 0, out + err
    plan = json.loads(out)
    assert plan["changes"] == [] and plan["problems"] == []
    assert sorted(n for n in plan["unchanged"] if n.startswith("dax")) == sorted(EXPECTED[preset])


def test_h100_cxl_onlines_both_expanders_on_new_cpuless_nodes(make_node, capsys) -> None:
    root = make_node("h100-cxl")
    code, out, _ = cli(root, capsys, "plan", TIERED)
    assert "~ dax0.0  devdax → system-ram, movable (1024 blocks on node 2, 2TiB)" in out
    assert "struct pages take 32GiB of DRAM" in out
    code, out, err = cli(root, capsys, "apply", "--yes", TIERED)
    assert code == 0 and "✓ dax0.0: applied" in out and "✓ dax1.0: applied" in out, out + err
    t = SimKernel(root).tree
    assert t.read("/sys/devices/system/node/online") == "0-3"
    assert t.read("/sys/devices/system/node/has_cpu") == "0-1"
    assert t.read("/sys/devices/system/node/node2/cpulist") == t.read("/sys/devices/system/node/node3/cpulist") == ""
    assert t.read("/sys/devices/virtual/memory_tiering/memory_tier22/nodelist") == "2-3"
    # the auto-online policy was set before daxctl ran
    journal = SimKernel(root).journal()
    policy = next(i for i, w in enumerate(journal) if w["path"].endswith("auto_online_blocks"))
    first_dax = next(i for i, w in enumerate(journal) if w["path"].startswith("/sys/bus/dax"))
    assert policy < first_dax
    assert [c["argv"][1:] for c in commands(root)] == [["reconfigure-device", "--mode=system-ram", "dax0.0"],
                                                       ["reconfigure-device", "--mode=system-ram", "dax1.0"]]
    owned = json.loads((root / "var/lib/nodeagent/ownership.json").read_text())
    assert owned["dax"]["dax0.0"]["zone"] == "Movable" and owned["dax"]["dax1.0"]["rule"] == "expanders"
    # facts show the new nodes and their tier, and the DRAM the struct pages took
    code, out, _ = cli(root, capsys, "facts")
    assert "dax0.0      2TiB  node 2  system-ram, 1024/1024 blocks online (1024 Movable)  cxl region0 [mem0]" in out
    assert "memory_tier22=[2,3]" in out


def test_autoonline_gets_a_clear_disruptive_plan(make_node, capsys) -> None:
    root = make_node("h100-cxl-autoonline")
    code, out, _ = cli(root, capsys, "plan", TIERED)
    assert code == 0
    assert ("~ dax0.0  system-ram, normal (1024 blocks online) → system-ram, movable (1024 blocks on node 2, 2TiB)"
            "  [disruptive]") in out
    assert "every block must go offline first" in out and "not done without --allow-disruptive" in out
    assert "memhp_default_state=offline" in out and "90-daxctl-device.rules" in out
    assert "2 disruptive" in out
    mark = len(SimKernel(root).journal())
    code, out, _ = cli(root, capsys, "apply", "--yes", TIERED)
    assert code == 5
    assert "- dax0.0: blocked — disruptive: not done without --allow-disruptive" in out
    assert block_writes(root, mark) == [] and commands(root) == []
    code, out, err = cli(root, capsys, "apply", "--yes", "--allow-disruptive", TIERED)
    assert code == 0, out + err
    assert devices(root)["dax1.0"] == ("system-ram", 1024, 1024, {"Movable": 1024})
    assert [c["argv"][1:] for c in commands(root)] == [["offline-memory", "dax0.0"], ["online-memory", "dax0.0"],
                                                       ["offline-memory", "dax1.0"], ["online-memory", "dax1.0"]]


def test_one_of_two_devices_already_online(make_node, capsys) -> None:
    root = make_node("h100-cxl")
    SimKernel(root).write("/sys/devices/system/memory/auto_online_blocks", "offline")
    simdax.to_system_ram(SimKernel(root), "dax0.0", "Movable")
    code, out, _ = cli(root, capsys, "--format", "json", "plan", TIERED)
    assert [c["target"] for c in json.loads(out)["changes"] if c["kind"] == "dax"] == ["dax1.0"]
    assert cli(root, capsys, "apply", "--yes", TIERED)[0] == 0
    assert [c["argv"][-1] for c in commands(root)] == ["dax1.0"]


def test_half_of_a_devices_blocks_online(make_node, capsys) -> None:
    root = make_node("qemu-3node")
    k = SimKernel(root)
    k.write("/sys/devices/system/memory/auto_online_blocks", "offline")
    simdax.to_system_ram(k, "dax0.0", None)  # hot-added, all offline
    for n in (49, 50, 51):
        k.write(f"{MEM}/memory{n}/state", "online_movable")
    code, out, _ = cli(root, capsys, "plan", TIERED)
    assert "~ dax0.0  system-ram, 3/7 blocks online (3 Movable) → system-ram, movable (7 blocks on node 2" in out
    assert "[disruptive]" not in out
    code, out, err = cli(root, capsys, "apply", "--yes", TIERED)
    assert code == 0, out + err
    assert [c["argv"][1:] for c in commands(root)] == [["online-memory", "dax0.0"]]
    assert devices(root)["dax0.0"] == ("system-ram", 7, 7, {"Movable": 7})


def test_wrong_zone_is_refused_without_the_flag_then_moved(make_node, capsys) -> None:
    root = make_node("qemu-3node")
    k = SimKernel(root)
    k.write("/sys/devices/system/memory/auto_online_blocks", "offline")
    simdax.to_system_ram(k, "dax0.0", "Movable")
    code, out, _ = cli(root, capsys, "apply", "--yes", POOL)
    assert code == 5 and "- dax0.0: blocked" in out and commands(root) == []
    code, out, err = cli(root, capsys, "apply", "--yes", "--allow-disruptive", POOL)
    assert code == 0, out + err
    assert devices(root)["dax0.0"] == ("system-ram", 7, 7, {"Normal": 7})
    assert [c["argv"][1:] for c in commands(root)] == [["offline-memory", "dax0.0"],
                                                       ["online-memory", "--no-movable", "dax0.0"]]


def test_rezone_that_hits_an_unmovable_block_puts_everything_back(make_node, capsys) -> None:
    root = make_node("h100-cxl-autoonline")
    k = SimKernel(root)
    state = k.state()
    state["unmovable_blocks"] = [512 + 700]  # dax0.0's blocks start at memory512
    k.save_state(state)
    code, out, err = cli(root, capsys, "apply", "--yes", "--allow-disruptive", TIERED)
    assert code == 5
    assert "✗ dax0.0: failed — dax0.0: memory1212 refused to go offline (EBUSY" in out
    assert "were onlined again in Normal: dax0.0 is as it was" in out
    assert "- dax1.0: skipped — not attempted: DAX changes stopped after dax0.0 failed" in out
    assert devices(root) == {"dax0.0": ("system-ram", 1024, 1024, {"Normal": 1024}),
                             "dax1.0": ("system-ram", 1024, 1024, {"Normal": 1024})}
    assert [c["argv"][-1] for c in commands(root)] == ["dax0.0", "dax0.0"]  # nothing ran on dax1.0


def test_daxctl_failing_midway_says_exactly_what_was_done(make_node, capsys) -> None:
    root = make_node("h100-cxl")
    k = SimKernel(root)
    state = k.state()
    state["online_fail_blocks"] = [512 + 300]
    k.save_state(state)
    code, out, _ = cli(root, capsys, "--format", "json", "apply", "--yes", TIERED)
    assert code == 5
    result = json.loads(out)
    outcomes = {o["target"]: o for o in result["outcomes"]}
    assert outcomes["memory.auto_online_blocks"]["status"] == "applied"
    assert outcomes["dax0.0"]["status"] == "failed"
    msg = outcomes["dax0.0"]["message"]
    assert "`daxctl reconfigure-device --mode=system-ram dax0.0` exited 244" in msg
    assert "Cannot allocate memory" in msg
    mode, online, total, zones = devices(root)["dax0.0"]
    assert (mode, total, set(zones)) == ("system-ram", 1024, {"Movable"}) and 0 < online < total
    assert f"dax0.0 is now system-ram, {online}/1024 blocks online ({online} Movable)" in msg
    assert "stay online; apply again to finish" in msg
    assert outcomes["dax1.0"]["status"] == "skipped"
    assert devices(root)["dax1.0"][0] == "devdax"
    # DAMON's kdamonds target the CXL nodes that did not fully come online: not started, nothing written
    assert outcomes["damon.kdamonds"]["status"] in ("failed", "skipped")
    assert not any("/damon/" in w["path"] for w in k.journal())
    assert result["status"] == "partial"
    # the cause gone, the next apply finishes the job without touching what is done
    state = k.state()
    state["online_fail_blocks"] = []
    k.save_state(state)
    code, out, _ = cli(root, capsys, "--format", "json", "plan", TIERED)
    assert [(c["target"], c["op"]) for c in json.loads(out)["changes"]] == [
        ("dax0.0", "online"), ("dax1.0", "reconfigure"), ("damon.kdamonds", "reconfigure")]
    assert cli(root, capsys, "apply", "--yes", TIERED)[0] == 0


def test_daxctl_missing_is_a_clear_error_and_nothing_is_written(make_node, capsys) -> None:
    root = make_node("h100-cxl")
    (root / "usr/bin/daxctl").unlink()
    before = SimKernel(root).journal()
    code, out, err = cli(root, capsys, "apply", "--yes", TIERED)
    assert code == 1
    assert "daxctl is not installed on this node, and dax0.0, dax1.0 need it" in out
    assert "apt install daxctl" in out and "nothing was applied" in err
    assert SimKernel(root).journal() == before


def test_device_that_disappears_between_facts_and_apply(make_node) -> None:
    root = make_node("h100-cxl")
    engine = Engine(open_host(root))

    def unplug_then_go(plan) -> bool:  # type: ignore[no-untyped-def]
        assert [c.target for c in plan.changes if c.kind == "dax"] == ["dax0.0", "dax1.0"]
        simdax.unplug(SimKernel(root), "dax1.0")
        return True

    result = engine.apply(load_profile(TIERED), confirm=unplug_then_go)
    outcomes = {o.change.target: o for o in result.outcomes}
    assert outcomes["dax0.0"].status == "applied"
    assert outcomes["dax1.0"].status == "failed"
    assert "dax1.0 no longer exists: it disappeared after the plan was made" in outcomes["dax1.0"].message
    assert "nothing was done to it" in outcomes["dax1.0"].message
    assert result.status == "partial"
    assert [c["argv"][-1] for c in commands(root)] == ["dax0.0"]


def test_another_agent_changing_a_device_after_the_plan(make_node) -> None:
    root = make_node("h100-cxl")
    engine = Engine(open_host(root))

    def race(plan) -> bool:  # type: ignore[no-untyped-def]
        k = SimKernel(root)
        k.write("/sys/devices/system/memory/auto_online_blocks", "offline")
        simdax.to_system_ram(k, "dax0.0", "Normal")  # e.g. udev's daxctl rule got there first
        return True

    result = engine.apply(load_profile(TIERED), confirm=race)
    outcome = next(o for o in result.outcomes if o.change.target == "dax0.0")
    assert outcome.status == "failed"
    assert "dax0.0 changed after the plan was made: planned from devdax, now system-ram, normal" in outcome.message


def test_auto_online_policy_put_back_by_another_agent_is_caught_before_daxctl(make_node) -> None:
    root = make_node("h100-cxl")
    SimKernel(root).write("/sys/devices/system/memory/auto_online_blocks", "offline")
    profile = root / "p.yaml"  # manages DAX but not the policy: it is "offline" when the plan is made
    profile.write_text((REPO / "profiles" / "cxl-inference.yaml").read_text()
                       .replace("extends: [base.yaml]\n", "").replace("  auto_online_blocks: offline\n", ""))
    engine = Engine(open_host(root))

    def flip(plan) -> bool:  # type: ignore[no-untyped-def]
        SimKernel(root).write("/sys/devices/system/memory/auto_online_blocks", "online")
        return True

    result = engine.apply(load_profile(profile), confirm=flip)
    outcome = next(o for o in result.outcomes if o.change.target == "dax0.0")
    assert outcome.status == "failed"
    assert "refusing to run daxctl on dax0.0: auto_online_blocks is 'online'" in outcome.message
    assert commands(root) == []


def test_daxctl_exit_0_with_memory_in_the_wrong_zone_is_a_failure(make_node) -> None:
    """Never trust the summary: --no-movable under an online_movable policy exits 0, memory is Movable."""
    from nodeagent.kinds.base import ApplyContext
    from nodeagent.kinds.dax.apply import Applier
    from nodeagent.kinds.dax.daxctl import run
    from nodeagent.plan import Change

    root = make_node("qemu-3node")
    SimKernel(root).write("/sys/devices/system/memory/auto_online_blocks", "online_movable")
    host = open_host(root)
    result = run(host, ["reconfigure-device", "--mode=system-ram", "--no-movable", "dax0.0"])
    assert result.ok and result.stderr.race and result.stderr.summary == "reconfigured 1 device"
    change = Change("dax", "dax0.0", "reconfigure", "devdax", "system-ram/normal", path="/sys/bus/dax/devices/dax0.0",
                    after_label="system-ram, normal (7 blocks on node 2, 1006MiB)",
                    data=(("zone", "Normal"), ("steps", ("to-system-ram",))))
    with pytest.raises(Exception) as err:
        Applier(host, change, ApplyContext()).after_online(result, "onlined")
    text = str(err.value)
    assert "daxctl said 'reconfigured 1 device' (exit 0); daxctl warned of a race" in text
    assert "but dax0.0 is system-ram, movable (7 blocks online), not system-ram, normal" in text


def test_dry_run_writes_nothing_and_runs_no_daxctl(make_node, capsys) -> None:
    root = make_node("h100-cxl-autoonline")
    before = SimKernel(root).journal()
    code, out, _ = cli(root, capsys, "apply", "--dry-run", "--allow-disruptive", TIERED)
    assert code == 0 and "dry run: nothing was written" in out and "dax0.0" in out
    assert SimKernel(root).journal() == before and commands(root) == []
    assert not (root / "var/lib/nodeagent/ownership.json").exists()


def test_progress_is_reported_while_daxctl_runs(make_node) -> None:
    root = make_node("h100-cxl")
    seen: list[tuple[str, int, int]] = []
    result = Engine(open_host(root)).apply(load_profile(TIERED), progress=lambda *a: seen.append(a))
    assert result.ok
    for dev in ("dax0.0", "dax1.0"):
        mine = [(d, t) for w, d, t in seen if w.startswith(dev + ": onlining memory blocks (Movable)")]
        assert mine and mine[-1] == (1024, 1024)
        assert [d for d, _ in mine] == sorted(d for d, _ in mine)


def test_json_mode_prints_no_progress(make_node, capsys) -> None:
    root = make_node("qemu-3node")
    code, out, err = cli(root, capsys, "--format", "json", "apply", "--skip-checks", "all", "--yes", TIERED)
    assert code == 0 and err == "" and json.loads(out)["status"] == "converged"


def test_facts_round_trip_plans_offline_as_live(make_node, capsys, tmp_path: Path) -> None:
    from nodeagent.engine.core import make_plan
    from nodeagent.facts import Facts, gather

    root = make_node("h100-cxl-autoonline")
    live = gather(open_host(root))
    saved = Facts.from_dict(json.loads(live.to_json()))
    loaded = load_profile(TIERED)
    assert make_plan(loaded, saved) == make_plan(loaded, live)


def test_daxctl_auto_online_abort_is_explained(make_node) -> None:
    """If the policy flips between nodeagent's own check and daxctl's, daxctl's exit 240 is explained."""
    from nodeagent.kinds.base import ApplyContext
    from nodeagent.kinds.dax.apply import Applier
    from nodeagent.kinds.dax.daxctl import run
    from nodeagent.plan import Change

    root = make_node("qemu-3node")  # auto_online_blocks=online
    host = open_host(root)
    result = run(host, ["reconfigure-device", "--mode=system-ram", "dax0.0"])
    assert result.result is not None and result.result.returncode == 240 and result.stderr.auto_online_abort
    change = Change("dax", "dax0.0", "reconfigure", "devdax", "system-ram/movable", path="/sys/bus/dax/devices/dax0.0",
                    data=(("zone", "Movable"), ("steps", ("to-system-ram",))))
    actx = ApplyContext()
    with pytest.raises(Exception) as err:
        Applier(host, change, actx).after_online(result, "onlined")
    assert "exited 240: dax0.0: error: kernel policy will auto-online memory, aborting" in str(err.value)
    assert "auto-online policy changed under nodeagent; dax0.0 is devdax" in str(err.value)
    assert actx.scratch  # later DAX changes of the run are skipped
