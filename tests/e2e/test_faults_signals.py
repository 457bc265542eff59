"""A signal before each kind of write of an apply of the shipped profile, then the next apply (fault_sweep.py).

A signal right before each kind of write the apply makes on a small-block node (40 memory blocks, every kind of
write: knobs, daxctl's driver binds and block onlining, four kdamond builds, state files — the first write of each
kind, every third file of the first kdamond built and every write of nodeagent's own files, as the errno walk
takes them), one run each, the signal taking turns (SIGKILL, SIGTERM, SIGINT), and at 50 points sampled from an
apply on h100-cxl (2 × 1024 blocks). After
each: the next apply converges (its own verify re-plan is empty), no kdamond is left that nodeagent does not own,
and the faulted apply's record and journal say what happened — SIGTERM/SIGINT: the result printed, exit 143/130,
recorded and journaled as interrupted; SIGKILL: the record it left names every change it made (done, or in
progress), and the next apply journals that the killed one never finished. `make fault-sweep`
(``NODEAGENT_FAULT_SWEEP=full``) runs every signal before every write of the small node, and a signal before
every write of h100-cxl.
"""

from __future__ import annotations

import os
import random
import re
import signal
from pathlib import Path

import pytest
from nodeagent_sim import faults, get

from tests.e2e import fault_sweep as fs

SWEEP = os.environ.get("NODEAGENT_FAULT_SWEEP") == "full"


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory, sim_base: Path) -> tuple[Path, Path, list[str], list[str]]:
    """(template, work directory, the paths a clean apply writes in order, the targets that apply changes)."""
    work = Path(os.fspath(sim_base)) / "faults-small"
    work.mkdir(exist_ok=True)
    tpl = fs.make_template(work, fs.small_preset())
    return tpl, work, fs.write_paths(tpl, work), fs.planned_targets(tpl, work)


@pytest.fixture(scope="module")
def h100(sim_base: Path) -> tuple[Path, Path, int, list[str]]:
    work = Path(os.fspath(sim_base)) / "faults-h100"
    work.mkdir(exist_ok=True)
    tpl = fs.make_template(work, get("h100-cxl"))
    return tpl, work, fs.count_writes(tpl, work), fs.planned_targets(tpl, work)


def judge(points: list[fs.Point], targets: list[str]) -> list[str]:
    """Every point's failures, one line each (empty: all good)."""
    bad = []
    for p in points:
        bad += [f"{p.where()}: {why}" for why in fs.problems(p, targets)]
    return bad


SIGNALS = ("SIGKILL", "SIGTERM", "SIGINT")


def _kind(path: str) -> str:
    """A write's kind: its path with numbers as N; a kdamond's files all take one write path (trim keeps every
    third of them), so they are one kind here but nr_kdamonds and each ``state``."""
    if re.search(r"/kdamonds/[0-9]+/.*(?<!/state)$", path):
        return "a kdamond's file"
    return re.sub(r"[0-9]+", "N", path)


def _rules(paths: list[str]) -> list[tuple[int, faults.Rule]]:
    """One run before each kind of write (:func:`fs.one_per_kind`, trimmed as the errno walk is), the signal taking
    turns (KILL, TERM, INT, KILL...); with ``NODEAGENT_FAULT_SWEEP=full`` (``make fault-sweep``) every signal before
    every write."""
    if SWEEP:
        return [(n, faults.Rule(fs.ANY, signal=sig, after=n)) for n in range(len(paths)) for sig in SIGNALS]
    picks = fs.sample(fs.trim(paths, fs.one_per_kind(paths)))
    return [(n, faults.Rule(fs.ANY, signal=SIGNALS[i % 3], after=n)) for i, n in enumerate(picks)]


def test_a_signal_before_each_kind_of_write_of_a_small_node_apply(small) -> None:
    tpl, work, paths, targets = small
    assert len(paths) >= 150  # knobs, binds, 8 blocks, 4 kdamonds of ~37 files, state files
    rules = _rules(paths)
    points = fs.sweep(tpl, work, rules)
    assert len(points) == len(rules)
    if not os.environ.get("NODEAGENT_FAULT_SAMPLE"):
        assert {_kind(p.hit or "") for p in points} == {_kind(p) for p in paths}  # every kind of write was hit
        assert {p.hit for p in points} >= {"/var/lib/nodeagent/originals.json", "/sys/kernel/mm/damon/admin/"
                                           "kdamonds/nr_kdamonds", "/proc/sys/kernel/numa_balancing"}
        assert any("/memory" in (p.hit or "") and (p.hit or "").endswith("/state") for p in points)  # daxctl's
        assert {p.rule.signal for p in points} == set(SIGNALS)
    assert not judge(points, targets)


def test_signals_at_points_sampled_from_an_h100_apply(h100) -> None:
    tpl, work, writes, targets = h100
    rng = random.Random(20)
    picks = sorted(rng.sample(range(writes), writes if SWEEP else min(50, int(os.environ.get(
        "NODEAGENT_FAULT_SAMPLE") or 50))))
    rules = [(n, faults.Rule(fs.ANY, signal=SIGNALS[i % 3], after=n)) for i, n in enumerate(picks)]
    points = fs.sweep(tpl, work, rules)
    assert len(points) == len(picks)
    assert sum("/memory" in (p.hit or "") for p in points) >= len(picks) // 5  # most of an h100 apply is onlining
    assert not judge(points, targets)


def test_sigterm_while_daxctl_runs_waits_for_it_and_a_second_one_stops_it(small) -> None:
    """The first SIGTERM lets the running daxctl finish its device (then stops before the next change); a second
    one stops daxctl itself (its process group) — the change fails, nothing outlives nodeagent."""
    tpl, work, _, targets = small
    first = [(1, faults.Rule("/memory[0-9]+/state", signal="SIGTERM", after=1))]
    p, = fs.sweep(tpl, work, first)
    assert p.code == 128 + signal.SIGTERM and "dax0.0: applied" in p.out, p.out + p.err
    assert "dax1.0: skipped — not done: stopped by SIGTERM" in p.out
    assert not fs.problems(p, targets)
    twice = [(2, faults.Rule("/memory[0-9]+/state", signal="SIGTERM", after=1, times=2))]
    p, = fs.sweep(tpl, work, twice)
    assert p.code == 128 + signal.SIGTERM, p.out + p.err
    assert "SIGTERM again: stopping daxctl" in p.err
    assert "dax0.0: failed" in p.out and "dax1.0: skipped" in p.out
    assert not fs.problems(p, targets)
