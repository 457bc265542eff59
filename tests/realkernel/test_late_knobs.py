"""The late-2026 knobs round-trip on the real 6.12 kernel (QEMU guest) and on the simulator's ``qemu-3node``:
``kernel.min_free_kbytes``, ``kernel.lru_gen.{enabled,min_ttl_ms}`` and ``kernel.weighted_interleave``'s weights
(6.9+: a weight file for every possible node on 6.12). One boot runs plan → apply → plan (empty) → drift (clean)
→ changes from outside → drift (names each) → revert, and every step must read the same on the simulator.

The profile (``profiles/late-knobs.yaml`` beside this file) has no DAX rule and no check, so nothing else moves.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import harness
import pytest
from nodeagent_sim import create
from worlds import Agent, Outcome, Writes, assert_same, drift_summary, plan_summary, run_guest, run_sim

pytestmark = pytest.mark.realkernel

PROFILE = Path(__file__).parent / "profiles" / "late-knobs.yaml"
KNOBS = ("kernel.min_free_kbytes", "kernel.lru_gen.enabled", "kernel.lru_gen.min_ttl_ms")
OUTSIDE = (("/sys/kernel/mm/lru_gen/min_ttl_ms", "0"), ("/sys/kernel/mm/mempolicy/weighted_interleave/node0", "1"),
           ("/proc/sys/vm/min_free_kbytes", "45056"))

STEPS = [
    Agent("facts-before", "facts"),
    Agent("plan", f"plan {PROFILE}"),
    Agent("apply", f"apply --yes --skip-checks all {PROFILE}"),
    Agent("plan-again", f"plan --detailed-exitcode {PROFILE}"),
    Agent("drift-clean", "drift"),
    Agent("facts-applied", "facts"),
    Writes("outside", OUTSIDE),
    Agent("drift", "drift"),
    Agent("revert", "revert --yes"),
    Agent("facts-reverted", "facts"),
]


def _state(outcome: Outcome) -> dict[str, object]:
    """The knobs this profile manages, as ``nodeagent facts`` reads them."""
    doc = outcome.doc()
    return {**{k: doc["knobs"][k] for k in KNOBS}, "weights": doc["sections"]["interleave"]["weights"]}


@pytest.fixture(scope="module")
def worlds(guest: harness.Guest, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    if not harness.venv_python().exists():
        pytest.skip(f"realkernel: no project virtualenv at {harness.venv_python()} (run make test)")
    base = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else tmp_path_factory.mktemp("knobs")
    root = base / f"nodeagent-rkknobs-{os.getpid()}"
    shutil.rmtree(root, ignore_errors=True)
    try:
        sim = run_sim(create(root, "qemu-3node"), STEPS)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    real, res = run_guest(guest, STEPS, label="late-knobs")
    print(f"\n[realkernel] late knobs: {res.guest.wall_seconds:.1f}s wall")
    return real, sim


def _ok(worlds, step: str, rc: int = 0) -> tuple[Outcome, Outcome]:  # type: ignore[no-untyped-def]
    real, sim = worlds[0][step], worlds[1][step]
    assert real.rc == rc, f"real kernel, {step}: rc {real.rc}, expected {rc}\n{real.stdout[-3000:]}{real.stderr}"
    assert_same(f"the exit code of {step}", real.rc, sim.rc)
    return real, sim


def test_the_plan_names_every_knob(worlds) -> None:  # type: ignore[no-untyped-def]
    real, sim = _ok(worlds, "plan")
    targets = {c["target"] for c in real.doc()["changes"]}
    # lru_gen.enabled is met at boot where the kernel was built with CONFIG_LRU_GEN_ENABLED (Debian's is)
    assert {"kernel.min_free_kbytes", "kernel.lru_gen.min_ttl_ms", "kernel.weighted_interleave"} <= targets, targets
    assert_same("the plan", plan_summary(real.doc()), plan_summary(sim.doc()))


def test_apply_converges_and_the_next_plan_is_empty(worlds) -> None:  # type: ignore[no-untyped-def]
    real, _ = _ok(worlds, "apply")
    assert real.doc()["status"] == "converged", real.stdout[-3000:]
    real, sim = _ok(worlds, "plan-again")
    assert real.doc()["changes"] == [] and sim.doc()["changes"] == []
    after = _state(worlds[0]["facts-applied"])
    assert after["kernel.min_free_kbytes"] == "90112" and after["kernel.lru_gen.min_ttl_ms"] == "1000", after
    assert after["weights"]["0"] == 3 and after["weights"]["1"] == 1, after
    assert_same("the knobs after apply", after, _state(worlds[1]["facts-applied"]))


def test_drift_is_clean_then_names_each_outside_change(worlds) -> None:  # type: ignore[no-untyped-def]
    real, sim = _ok(worlds, "drift-clean")
    assert real.doc()["converged"] is True
    real = worlds[0]["outside"]
    assert all(line.endswith(" ok") for line in real.stdout.splitlines()), real.stdout
    real, sim = _ok(worlds, "drift", rc=3)  # 3: drifted
    drifted = {i["target"] for i in real.doc()["items"]}
    assert {"kernel.lru_gen.min_ttl_ms", "kernel.min_free_kbytes", "kernel.weighted_interleave"} <= drifted, drifted
    assert_same("drift after the outside changes", drift_summary(real.doc()), drift_summary(sim.doc()))


def test_revert_returns_the_boot_values(worlds) -> None:  # type: ignore[no-untyped-def]
    _ok(worlds, "revert")
    before, reverted = _state(worlds[0]["facts-before"]), _state(worlds[0]["facts-reverted"])
    assert reverted == before, (before, reverted)
    assert_same("the knobs after revert", reverted, _state(worlds[1]["facts-reverted"]))
