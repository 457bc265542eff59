"""Every simulator preset converges in one apply of every shipped profile: the apply exits 0 and the next plan
is empty. The presets and the profiles are enumerated (``nodeagent_sim.PRESETS``, ``profiles/*.yaml``), so a new
preset or profile is covered the day it is added.

One apply, with ``--allow-disruptive`` (some presets boot with their CXL memory online in ZONE_NORMAL, which the
shipped profiles move to ZONE_MOVABLE: a disruptive change by design) and ``--skip-checks all`` (the simulated
disk and CPU fail the inference checks; the checks are tested on their own). Where the profile's first plan says
what cannot be done on that node (a kdamond of another agent holds the slots, DAMON_STAT refuses sysfs kdamonds),
the apply exits 5 for that alone: every change is applied, nothing fails verification, and the next plan changes
nothing and says the same.

``make test`` runs every pair except those of :data:`SWEEP_ONLY` (presets whose node is too large to lay out in
the default run); ``make converge-sweep`` (``NODEAGENT_CONVERGE_SWEEP=1``) runs them all.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from nodeagent_sim import PRESETS, SimKernel, build, get

from nodeagent.state import JOURNAL

from .test_converge_property import na

REPO = Path(__file__).resolve().parents[2]
PROFILES = sorted(p.stem for p in (REPO / "profiles").glob("*.yaml"))
#: ``stress`` (8 x 2 TiB of 128 MiB blocks, 131072 memory blocks): about 6 minutes an apply on 2 cores.
#: The two-bridge guest's other probe orders: the same bus numbered otherwise (the realkernel tier picks among them).
SWEEP_ONLY = frozenset({"stress", "qemu-cxl-2hb-rp0first", "qemu-cxl-2hb-ep-swapped",
                        "qemu-cxl-2hb-rp0first-ep-swapped"})
SWEEP = os.environ.get("NODEAGENT_CONVERGE_SWEEP") == "1"


def _pairs() -> list[object]:
    out = []
    for preset in sorted(PRESETS):
        for profile in PROFILES:
            marks = [] if SWEEP or preset not in SWEEP_ONLY else [pytest.mark.skip(
                reason="a node too large for the default run: make converge-sweep runs it")]
            out.append(pytest.param(preset, profile, id=f"{preset}-{profile}", marks=marks))
    return out


@pytest.fixture
def scratch():
    base = Path(tempfile.mkdtemp(prefix="conv-", dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None))
    yield base
    shutil.rmtree(base, ignore_errors=True)


def _profile(name: str) -> str:
    return str(REPO / "profiles" / f"{name}.yaml")


@pytest.mark.parametrize(("preset", "profile"), _pairs())
def test_one_apply_converges(preset: str, profile: str, scratch: Path) -> None:
    root = build(get(preset), scratch / "n")
    code, result = na(root, "apply", "--yes", "--allow-disruptive", "--skip-checks", "all", _profile(profile))
    pcode, plan = na(root, "plan", "--detailed-exitcode", _profile(profile))
    assert plan.get("changes") == [], (code, result.get("verify_errors"), plan.get("changes"))
    assert result.get("verify_errors") == [], result
    assert all(o["status"] == "applied" for o in result["outcomes"]), result["outcomes"]
    k = SimKernel(root)
    for c in result["plan"]["changes"]:  # the plan named the node each region's memory joins
        if c["kind"] == "cxl_region" and c["op"] == "create":
            dax = c["devices"][-1]
            assert [int(k.tree.read(f"/sys/bus/dax/devices/{dax}/target_node"))] == c["nodes"], c
    cannot = sorted(p["message"] for p in result["plan"]["problems"])
    if not cannot:
        assert (code, result["status"], pcode) in ((0, "converged", 0), (0, "unchanged", 0)), (code, result, plan)
        return
    # What this node cannot do was said before the apply; nothing else is left, and the next plan says the same.
    assert not any(p["blocking"] for p in result["plan"]["problems"]), cannot
    assert code == 5 and pcode == 5, (code, pcode, cannot)
    assert sorted(p["message"] for p in plan["problems"]) == cannot


def test_the_dependent_kinds_are_planned_again_once_the_region_exists(scratch: Path) -> None:
    """A region lands on a node the plan could not know (SRAT covers the window, so the rule of the highest
    possible nodes names another): DAMON was planned toward the projected node, the executor plans it again
    once the region is online, and the one apply converges — its outcome says the plan shown changed."""
    root = build(get("qemu-cxl"), scratch / "n")
    k = SimKernel(root)
    with k.locked():
        k.tree.set("/sys/devices/system/node/possible", "0-3")  # the window's node is 2, the projection says 3
    code, plan = na(root, "plan", _profile("cxl-inference"))
    region = next(c for c in plan["changes"] if c["kind"] == "cxl_region" and c["op"] == "create")
    assert region["nodes"] == [3]
    code, result = na(root, "apply", "--yes", "--skip-checks", "all", _profile("cxl-inference"))
    assert (code, result["status"]) == (0, "converged"), result
    damon = next(o for o in result["outcomes"] if o["target"] == "damon.kdamonds")
    assert "planned again once region0, region1 existed" in damon["message"], damon
    executed = next(c for c in result["plan"]["changes"] if c["target"] == "damon.kdamonds")
    assert "→ node2" in executed["reason"] and "node3" not in executed["reason"], executed["reason"]
    assert k.tree.read("/sys/bus/dax/devices/dax0.0/target_node").strip() == "2"
    pcode, after = na(root, "plan", "--detailed-exitcode", _profile("cxl-inference"))
    assert (pcode, after["changes"]) == (0, []), after["changes"]


def test_kdamonds_on_a_region_being_rebuilt_stop_before_and_start_after(scratch: Path) -> None:
    """A rebuild (granularity 256 → 512) takes region0's memory away: nodeagent's kdamonds that monitor node2 or
    migrate into it stop before the teardown and start again once the region is back, in the same apply,
    journaled; one that acts on neither (socket 1's) is left running."""
    root = build(get("h100-cxl-memdevs"), scratch / "n")
    code, _ = na(root, "apply", "--yes", "--skip-checks", "all", _profile("cxl-inference"))
    assert code == 0
    text = Path(_profile("cxl-inference")).read_text().replace(
        "        memdevs: {without_region: true}\n", "        memdevs: {host_bridges: [pci0000:30]}\n"
        "        granularity: 512\n")
    assert "granularity: 512" in text
    variant = scratch / "g512.yaml"
    variant.write_text(text)
    shutil.copy(_profile("base"), scratch / "base.yaml")  # what it extends
    code, result = na(root, "apply", "--yes", "--allow-disruptive", "--skip-checks", "all", str(variant))
    assert (code, result["status"]) == (0, "converged"), result
    steps = [(o["target"], o["op"]) for o in result["outcomes"]]
    paused = [t for t, op in steps if op == "pause"]
    assert sorted(paused) == ["damon.demote-cold-node0", "damon.promote-hot-to-node0"], steps
    teardown = steps.index(("region@0x1d7e0000a001", "delete"))
    create = steps.index(("region@0x1d7e0000a001", "create"))
    assert all(steps.index((t, "pause")) < teardown for t in paused)
    restarts = [i for i, (t, op) in enumerate(steps) if t in paused and op == "start"]
    assert len(restarts) == 2 and min(restarts) > create, steps
    assert not any(t == "damon.demote-cold-node1" for t, _ in steps)
    history = (root / JOURNAL.lstrip("/")).read_text().splitlines()
    last = json.loads(history[-1])
    assert [(c["target"], c["op"]) for c in last["changes"] if c["op"] in ("pause", "start")] == [
        (t, op) for t, op in steps if op in ("pause", "start")]
    pcode, after = na(root, "plan", "--detailed-exitcode", str(variant))
    assert (pcode, after["changes"]) == (0, []), after["changes"]


@pytest.mark.parametrize(("write", "errno", "said"), [
    ("region1/commit", "EBUSY", "Device or resource busy (errno EBUSY)"),
    ("region1/commit", "ENXIO", "No such device or address (errno ENXIO)"),
    # the memdev goes away between the plan and its endpoint decoder's write: the kernel answers ENODEV
    (r"decoder\d+\.0/dpa_size", "ENODEV", "No such device (errno ENODEV)"),
])
def test_a_region_the_kernel_refuses_stops_with_its_reason_and_the_next_apply_finishes(
        write: str, errno: str, said: str, scratch: Path) -> None:
    from nodeagent_sim import faults

    root = build(get("h100-cxl-memdevs"), scratch / "n")
    faults.add(root, faults.Rule(write=write, errno=errno, after=1 if "dpa_size" in write else 0))
    code, result = na(root, "apply", "--yes", "--skip-checks", "all", _profile("cxl-inference"))
    assert (code, result["status"]) == (5, "partial"), result
    failed = [o for o in result["outcomes"] if o["status"] == "failed" and o["kind"] == "cxl_region"]
    assert len(failed) == 1 and said in failed[0]["message"] and "torn down again" in failed[0]["message"], failed
    event = json.loads((root / JOURNAL.lstrip("/")).read_text().splitlines()[-1])
    assert event["status"] == "partial"
    assert any(c["status"] == "failed" and said in c["message"] for c in event["changes"]), event["changes"]
    code, result = na(root, "apply", "--yes", "--skip-checks", "all", _profile("cxl-inference"))
    assert (code, result["status"]) == (0, "converged"), result
    pcode, after = na(root, "plan", "--detailed-exitcode", _profile("cxl-inference"))
    assert (pcode, after["changes"]) == (0, []), after["changes"]
