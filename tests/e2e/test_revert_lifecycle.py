"""Revert through the apply executor, originals that are right, and drift that understands a revert — for the
whole class: several DAX devices (the failing one first, in the middle or last), every knob the profile manages,
nodeagent's kdamonds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel

from nodeagent.facts import gather
from nodeagent.facts.damon import from_facts as damon_facts
from nodeagent.facts.dax import from_facts as dax_facts
from nodeagent.facts.knobs import BY_KEY
from nodeagent.host import open_host
from nodeagent.state import StateStore
from tests.e2e.cli_helpers import run

REPO = Path(__file__).resolve().parents[2]
PROFILE = str(REPO / "profiles" / "cxl-inference.yaml")
STATE = "var/lib/nodeagent"


def node(tmp_path: Path, capsys: pytest.CaptureFixture[str], devices: int) -> Path:
    root = tmp_path / "node"
    code, out, err = run(["sim", "create", str(root), "--preset", "h100-cxl", "--devices", str(devices),
                          "--device-size", "2GiB"], capsys)
    assert code == 0, out + err
    return root


def na(root: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    return run(["--root", str(root), *args], capsys)


def snapshot(root: Path) -> dict:
    facts = gather(open_host(root))
    damon = damon_facts(facts)
    return {"knobs": facts.knobs,
            "dax": {d.name: (d.mode, d.zones, d.blocks_online) for d in dax_facts(facts).devices},
            "kdamonds": damon.nr_kdamonds, "running": [k.index for k in damon.kdamonds if k.running]}


def journal(root: Path) -> list[dict]:
    path = root / STATE / "journal.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def records(root: Path) -> StateStore:
    return StateStore(open_host(root))


def block_range(root: Path, dev: str) -> list[int]:
    base = root / "sys/bus/dax/devices" / dev
    start, size = int((base / "resource").read_text(), 16), int((base / "size").read_text())
    bs = int((root / "sys/devices/system/memory/block_size_bytes").read_text(), 16)
    return list(range(start // bs, (start + size) // bs))


# -- revert with a DAX step failing midway --------------------------------------------------------------------
@pytest.mark.parametrize(("devices", "failing"), [(2, 0), (3, 1), (4, 3)], ids=["2-first", "3-middle", "4-last"])
def test_revert_with_a_dax_device_that_refuses_finishes_on_a_rerun(tmp_path, capsys, devices: int,
                                                                  failing: int) -> None:
    root = node(tmp_path, capsys, devices)
    before = snapshot(root)
    code, out, err = na(root, capsys, "apply", "--yes", "--skip-checks", "all", PROFILE)
    assert code == 0, out + err
    names = sorted(before["dax"])
    bad = names[failing]
    assert set(records(root).originals().items) >= {*names, "damon.kdamonds", "memory.auto_online_blocks"}
    k = SimKernel(root)
    st = k.state()
    st["unmovable_blocks"] = [block_range(root, bad)[len(block_range(root, bad)) // 2]]
    k.save_state(st)
    mark = len(journal(root))

    code, out, err = na(root, capsys, "revert", "--yes", "--allow-disruptive")
    assert code == 5, out + err  # partial, like a partial apply: never a traceback, never exit 1
    assert f"✗ {bad}: " in out and "refused to go offline (EBUSY" in out
    later = names[failing + 1:]
    for dev in later:  # the kind skips the DAX devices after a daxctl failure: skipped, not escaped
        assert f"- {dev}: " in out and "skipped" in out
    (event,) = [e for e in journal(root)[mark:] if e["event"] == "revert"]
    assert event["status"] == "partial"
    by_target = {c["target"]: c["status"] for c in event["changes"]}
    assert by_target[bad] == "failed" and all(by_target[d] == "skipped" for d in later)
    assert all(by_target[d] == "applied" for d in names[:failing])
    # originals: exactly what is not back yet
    left = set(records(root).originals().items)
    assert left == {bad, *later}, left
    assert not records(root).ownership().kdamonds  # the kdamonds stopped and their records went with them
    now = snapshot(root)
    assert now["running"] == [] and now["kdamonds"] == before["kdamonds"]
    assert {d: now["dax"][d] for d in names[:failing]} == {d: before["dax"][d] for d in names[:failing]}
    assert now["knobs"] == before["knobs"]
    last = records(root).last_applied()
    assert not last.fully_reverted and {"damon.kdamonds", *names[:failing]} <= set(last.reverted)

    st = k.state()
    st["unmovable_blocks"] = []
    k.save_state(st)
    code, out, err = na(root, capsys, "revert", "--yes", "--allow-disruptive")
    assert code == 0, out + err
    assert snapshot(root) == before
    assert not records(root).originals() and records(root).last_applied().fully_reverted
    code, out, _ = na(root, capsys, "drift")
    assert code == 0 and "by nodeagent revert; nothing managed" in out


# -- originals that are right --------------------------------------------------------------------------------
#: A value other than the profile's for each knob the shipped profile manages (another writer's).
OTHER = {"kernel.zone_reclaim_mode": "1", "kernel.numa_balancing": "1", "kernel.demotion_enabled": "false",
         "kernel.transparent_hugepage.enabled": "never", "kernel.transparent_hugepage.defrag": "never",
         "memory.auto_online_blocks": "online_movable"}


def test_revert_after_a_drift_repair_restores_what_the_node_had_before_the_first_apply(make_node, capsys) -> None:
    """Every knob already as the profile wants at the first apply gets its original then; a later drift that an
    apply repairs never becomes the original (THP madvise → never → repaired → revert gives madvise)."""
    root = make_node("workstation")
    k = SimKernel(root)
    pristine = snapshot(root)["knobs"]
    code, out, _ = na(root, capsys, "--format", "json", "apply", "--yes", PROFILE)
    assert code == 0
    plan = json.loads(out)["plan"]
    as_wanted = [t for t in plan["unchanged"] if t in BY_KEY]
    assert "kernel.transparent_hugepage.enabled" in as_wanted
    originals = records(root).originals().items
    managed = as_wanted + [c["target"] for c in plan["changes"] if c["kind"] == "knob"]
    assert {t: originals[t].value for t in managed} == {t: BY_KEY[t].parse(pristine[t]) for t in managed}
    drifted = [t for t in as_wanted if t in OTHER]
    assert drifted
    for t in drifted:
        k.write(BY_KEY[t].path, OTHER[t])
    code, out, _ = na(root, capsys, "apply", "--yes", PROFILE)  # the drift repair
    assert code == 0 and all(f"✓ {t}" in out for t in drifted), out
    assert {t: o.value for t, o in records(root).originals().items.items() if t in managed} == \
        {t: BY_KEY[t].parse(pristine[t]) for t in managed}
    code, out, _ = na(root, capsys, "revert", "--yes", "--allow-disruptive")
    assert code == 0, out
    assert snapshot(root)["knobs"] == pristine


def test_a_kdamond_restarted_by_a_repair_still_reverts_to_no_kdamond(make_node, capsys) -> None:
    root = make_node("h100-cxl")
    before = snapshot(root)
    assert na(root, capsys, "apply", "--yes", "--skip-checks", "all", PROFILE)[0] == 0
    k = SimKernel(root)
    k.write("/sys/kernel/mm/damon/admin/kdamonds/0/state", "off")  # stopped by hand; its files still nodeagent's
    code, out, _ = na(root, capsys, "apply", "--yes", "--skip-checks", "all", PROFILE)
    assert code == 0 and "✓ damon.demote-cold-node0: applied" in out
    assert records(root).originals().items["damon.kdamonds"].value == {"nr_kdamonds": before["kdamonds"]}
    assert na(root, capsys, "revert", "--yes", "--allow-disruptive")[0] == 0
    assert snapshot(root) == before


# -- drift after full and partial reverts ------------------------------------------------------------------
def test_drift_after_a_full_revert(make_node, capsys) -> None:
    root = make_node("h100-cxl")
    assert na(root, capsys, "apply", "--yes", "--skip-checks", "all", PROFILE)[0] == 0
    assert na(root, capsys, "revert", "--yes", "--allow-disruptive")[0] == 0
    when = records(root).last_applied().time
    code, out, err = na(root, capsys, "drift")
    assert code == 0, out + err
    assert f"reverted at {when} by nodeagent revert; nothing managed" in out
    code, out, _ = na(root, capsys, "--format", "json", "drift")
    doc = json.loads(out)
    assert code == 0 and doc["managed"] is False and doc["reverted_at"] == when and doc["items"] == []

    mark = len(journal(root))
    code, out, err = na(root, capsys, "drift", "--record", PROFILE)  # what the drift timer runs
    assert code == 0, out + err
    assert "another program" not in out and "likely cause" not in out
    for target in ("kernel.numa_balancing", "memory.auto_online_blocks", "dax0.0", "dax1.0",
                   "damon.kdamonds"):
        line = next(ln for ln in out.splitlines() if ln.startswith(f"  - {target} "))
        assert f"reverted (not drift): put back by nodeagent revert at {when}" in line, line
    assert [e for e in journal(root)[mark:] if e["event"] == "drift"] == []
    assert not records(root).drift().items
    assert na(root, capsys, "status")[0] == 0

    assert na(root, capsys, "apply", "--yes", "--skip-checks", "all", "--allow-disruptive", PROFILE)[0] == 0
    SimKernel(root).write("/proc/sys/kernel/numa_balancing", "1")
    code, out, _ = na(root, capsys, "drift")  # managed again: drift is drift
    assert code == 3 and "~ kernel.numa_balancing" in out and "reverted" not in out


@pytest.mark.parametrize("only", [["kernel.numa_balancing"], ["dax1.0"], ["damon.kdamonds"],
                                  ["kernel.numa_balancing", "dax0.0"]], ids=" + ".join)
def test_drift_after_a_partial_revert_checks_what_is_still_managed(make_node, capsys, only: list[str]) -> None:
    root = make_node("h100-cxl")
    assert na(root, capsys, "apply", "--yes", "--skip-checks", "all", PROFILE)[0] == 0
    args = [a for t in only for a in ("--only", t)]
    code, out, err = na(root, capsys, "revert", "--yes", "--allow-disruptive", *args)
    assert code == 0, out + err
    code, out, err = na(root, capsys, "--format", "json", "drift")
    doc = json.loads(out)
    assert code == 0, out + err
    assert doc["managed"] is True and doc["items"] == []
    reverted = {i["target"] for i in doc["reverted"]}
    for t in only:
        assert t in reverted or (t == "damon.kdamonds" and any(r.startswith("damon.") for r in reverted)), reverted
    # a still-managed setting that moves is drift, as before; the reverted ones are still not
    SimKernel(root).write("/proc/sys/vm/zone_reclaim_mode", "1")
    mark = len(journal(root))
    code, out, _ = na(root, capsys, "drift", "--record", PROFILE)
    assert code == 3 and "~ kernel.zone_reclaim_mode  expected 7, actual 1" in out
    assert "1 drifted (knob: 1)" in out
    drift_events = [e["target"] for e in journal(root)[mark:] if e["event"] == "drift"]
    assert drift_events == ["kernel.zone_reclaim_mode"]
    assert set(records(root).drift().items) == {"knob:kernel.zone_reclaim_mode"}
