"""A sample of the kill sweep (tests/e2e/kill_sweep.py; ``make kill-sweep`` runs 108 apply and 56 revert kills over
three presets): 6 applies and 3 reverts of h100-cxl-memdevs killed (SIGKILL) at seeded random moments, each followed
by an apply that converges and an empty plan — a revert also by a revert that gives back the node as booted."""

from __future__ import annotations

import os
from pathlib import Path

from tests.e2e import kill_sweep as ks


def test_kill_9_anywhere_in_an_apply_or_a_revert_converges(sim_base: Path) -> None:
    work = Path(os.fspath(sim_base)) / "kill-sweep"
    work.mkdir()
    counts = ks.sweep(work, applies=6, reverts=3, seed=52, presets=("h100-cxl-memdevs",))
    assert (counts["apply"].runs, counts["revert"].runs) == (6, 3)
    assert counts["apply"].landed + counts["revert"].landed >= 5  # most kills land while the run is at work
    assert not counts["apply"].failures + counts["revert"].failures
