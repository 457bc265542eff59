"""One apply converges on every node shape, or says exactly why not (issue: converge in one apply).

Each shape is laid out through the `nodeagent sim` verbs, as an operator rehearsing it would; after each apply
the next `plan --detailed-exitcode` must be empty (exit 0), or the apply's exit code and result must say why.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel
from nodeagent_sim import dax as simdax

from .cli_helpers import run

REPO = Path(__file__).resolve().parents[2]
TIERED = str(REPO / "profiles" / "cxl-inference.yaml")
POOL = str(REPO / "profiles" / "cxl-kv-pool.yaml")


def na(root: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    return run(["--root", str(root), *args], capsys)


def sim(capsys: pytest.CaptureFixture[str], *args: str) -> int:
    code, _, err = run(["sim", *args], capsys)
    assert code == 0 or args[0] in ("write", "kdamond"), err
    return code


def plan_code(root: Path, capsys: pytest.CaptureFixture[str], profile: str = TIERED) -> tuple[int, dict]:
    code, out, _ = na(root, capsys, "--format", "json", "plan", "--detailed-exitcode", profile)
    return code, json.loads(out)


def converges(root: Path, capsys: pytest.CaptureFixture[str], profile: str = TIERED, *extra: str) -> dict:
    code, out, err = na(root, capsys, "--format", "json", "apply", "--yes", *extra, profile)
    result = json.loads(out)
    assert (code, result["status"], result["verify_errors"]) == (0, result["status"], []), (code, result, err)
    assert result["status"] in ("converged", "unchanged")
    again, plan = plan_code(root, capsys, profile)
    assert again == 0 and plan["changes"] == [], plan["changes"]
    return result


def damon_writes(root: Path) -> list[dict]:
    return [w for w in SimKernel(root).journal() if "/damon/" in w["path"]]


def test_kmem_bound_offline_at_boot_converges_and_capacity_does_not_call_it_devdax(tmp_path, capsys) -> None:
    root = tmp_path / "n"
    sim(capsys, "create", str(root), "--preset", "h100-cxl")
    sim(capsys, "boot", str(root), "--memhp-default-state", "offline")
    code, out, _ = na(root, capsys, "check", TIERED)
    assert "still devdax" not in out and "dax0.0 (bound to kmem, its blocks offline; this profile onlines it)" in out
    result = converges(root, capsys)
    assert {o["target"] for o in result["outcomes"]} >= {"dax0.0", "dax1.0", "damon.kdamonds"}


def test_hot_added_kmem_bound_offline_joins_the_promotion_kdamond_in_its_scoped_apply(tmp_path, capsys) -> None:
    root = tmp_path / "n"
    sim(capsys, "create", str(root), "--preset", "h100-cxl")
    converges(root, capsys)
    sim(capsys, "hot-add", str(root), "--dax", "dax4.0", "--size", "64GiB", "--node", "4", "--host-node", "0",
        "--mode", "kmem", "--blocks", "offline")
    code, out, err = na(root, capsys, "--format", "json", "apply", "--yes", "--device", "dax4.0", TIERED)
    result = json.loads(out)
    assert code == 0 and result["status"] == "converged", (result, err)
    assert [o["target"] for o in result["outcomes"]] == ["dax4.0", "damon.promote-hot-to-node0"]
    assert plan_code(root, capsys)[1]["changes"] == []  # nothing else drifted: the full plan is empty


def test_devices_onlined_in_the_same_apply_keep_the_pairing_the_plan_chose(tmp_path, capsys) -> None:
    root = tmp_path / "n"
    sim(capsys, "create", str(root), "--preset", "h100-cxl")
    sim(capsys, "write", str(root), "/sys/devices/system/memory/auto_online_blocks", "offline")
    simdax.to_system_ram(SimKernel(root), "dax0.0", "Movable")  # one expander online, the other comes in the apply
    converges(root, capsys)


def test_an_onlining_that_fails_half_way_is_reported_and_finished_by_a_rerun(tmp_path, capsys) -> None:
    root = tmp_path / "n"
    sim(capsys, "create", str(root), "--preset", "h100-cxl")
    k = SimKernel(root)
    with k.locked():
        state = k.state()
        bs = int(k.tree.read("/sys/devices/system/memory/block_size_bytes"), 16)
        state["online_fail_blocks"] = [state["dax"]["dax1.0"]["start"] // bs + 3]  # ENOMEM on its 4th block
        k.save_state(state)
    code, out, _ = na(root, capsys, "--format", "json", "apply", "--yes", TIERED)
    result = json.loads(out)
    assert code == 5 and result["status"] == "partial"
    assert any(e.startswith("dax1.0: still") for e in result["verify_errors"]), result["verify_errors"]
    with k.locked():
        state = k.state()
        state["online_fail_blocks"] = []
        k.save_state(state)
    converges(root, capsys)


def test_equidistant_cxl_nodes_pair_by_the_socket_their_device_hangs_off(tmp_path, capsys) -> None:
    root = tmp_path / "n"
    sim(capsys, "create", str(root), "--preset", "h100-cxl", "--devices", "2", "--device-size", "64GiB",
        "--block-size", "256MiB")
    plan = plan_code(root, capsys)[1]
    (rebuild,) = [c for c in plan["changes"] if c["target"] == "damon.kdamonds"]
    assert "node0 → node2" in rebuild["reason"] and "node1 → node3" in rebuild["reason"]
    converges(root, capsys)
    before = len(damon_writes(root))
    converges(root, capsys)  # the second apply writes nothing
    assert len(damon_writes(root)) == before


def test_switching_to_a_pinned_pool_stops_the_kdamonds_before_the_rezone(tmp_path, capsys) -> None:
    root = tmp_path / "n"
    sim(capsys, "create", str(root), "--preset", "h100-cxl")
    converges(root, capsys)
    plan = plan_code(root, capsys, POOL)[1]
    kinds = [(c["kind"], c["op"]) for c in plan["changes"]]
    first_dax = kinds.index(("dax", "rezone"))
    assert kinds.count(("damon", "delete")) == 4 and kinds.index(("damon", "delete")) < first_dax
    assert max(i for i, k in enumerate(kinds) if k == ("damon", "delete")) < first_dax
    assert plan_code(root, capsys, POOL)[0] == 5  # the rezone is disruptive: apply would be partial
    converges(root, capsys, POOL, "--allow-disruptive")
    # damon: {kdamonds: []}: every kdamond stopped, and (all slots being nodeagent's) the slots released
    assert SimKernel(root).tree.read("/sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds") == "0"
    converges(root, capsys, TIERED, "--allow-disruptive")  # and back: the kdamonds come back in their slots


def test_plan_exits_5_when_part_cannot_be_done_and_drift_lists_it_apart(tmp_path, capsys) -> None:
    root = tmp_path / "n"
    sim(capsys, "create", str(root), "--preset", "h100-cxl")
    assert sim(capsys, "kdamond", str(root), "--foreign") == 0
    code, plan = plan_code(root, capsys)
    assert code == 5 and plan["changes"] and plan["problems"]  # 5 wins over 2
    code, out, _ = na(root, capsys, "--format", "json", "apply", "--yes", TIERED)
    assert code == 5 and json.loads(out)["status"] == "partial"
    code, out, _ = na(root, capsys, "drift")
    assert code == 5 and "cannot be done: damon: cannot add" in out and "drifted" not in out


def test_sim_verbs_refuse_a_root_that_is_not_simulated(tmp_path, capsys) -> None:
    (tmp_path / "sys").mkdir()
    for args in (["boot", str(tmp_path), "--memhp-default-state", "offline"],
                 ["write", str(tmp_path), "/sys/x", "1"], ["kdamond", str(tmp_path), "--foreign"],
                 ["hot-add", str(tmp_path), "--dax", "dax9.0", "--size", "1GiB", "--node", "4", "--mode", "devdax"]):
        code, _, err = run(["sim", *args], capsys)
        assert code == 64 and "is not a simulated node" in err


def test_sim_write_reports_the_kernel_errno(tmp_path, capsys) -> None:
    root = tmp_path / "n"
    sim(capsys, "create", str(root), "--preset", "workstation")
    code, _, err = run(["sim", "write", str(root), "/sys/devices/system/memory/auto_online_blocks", "bogus"], capsys)
    assert code == 1 and "EINVAL" in err


def test_a_device_nodeagent_onlined_that_no_rule_matches_any_more_is_left_with_a_warning(tmp_path, capsys) -> None:
    root = tmp_path / "n"
    sim(capsys, "create", str(root), "--preset", "h100-cxl")
    converges(root, capsys)
    narrower = tmp_path / "one.yaml"
    narrower.write_text(Path(TIERED).read_text().replace("match: {all: true}", "match: {devices: [dax0.0]}"))
    (tmp_path / "base.yaml").write_text((REPO / "profiles" / "base.yaml").read_text())
    code, plan = plan_code(root, capsys, str(narrower))
    assert not [c for c in plan["changes"] if c["kind"] == "dax"]
    (warning,) = [w for w in plan["warnings"] if w.startswith("dax1.0 matches no memory.dax rule")]
    assert "nodeagent changed it before; `nodeagent revert` puts it back" in warning


def test_without_a_damon_section_the_kdamonds_over_a_pinned_pool_are_left_with_a_warning(tmp_path, capsys) -> None:
    root = tmp_path / "n"
    sim(capsys, "create", str(root), "--preset", "h100-cxl")
    converges(root, capsys)
    pool = tmp_path / "pool.yaml"
    pool.write_text(Path(POOL).read_text().split("\ndamon:")[0])
    (tmp_path / "base.yaml").write_text((REPO / "profiles" / "base.yaml").read_text())
    plan = plan_code(root, capsys, str(pool))[1]
    assert not [c for c in plan["changes"] if c["kind"] == "damon"]
    warned = [w for w in plan["warnings"] if "declares a pinned pool" in w]
    assert len(warned) == 4 and all("add `damon: {kdamonds: []}` to stop them" in w for w in warned)
