"""The dest_free decision (nodeagent/kinds/damon/dest_free.py): thresholds, hysteresis, and how a plan resolves
a guarded scheme against what the kernel holds. Pure."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.kinds.damon import dest_free, model
from nodeagent.kinds.damon.spec import Spec

GiB = 2**30
PATH = "contexts/0/schemes/0/access_pattern/sz/min"


def _spec(free: int | None, total: int = 100 * GiB, pause: float = 5, resume: float = 10) -> Spec:
    g = dest_free.guard_for(0, "migrate_cold", 2, None if free is None else (free, total), pause, resume, "4096")
    value = dest_free.PAUSED if g.state == "pause" else "4096"
    r = model.Range(0, 0)
    scheme = model.Scheme("migrate_cold", model.Access(model.Range(int(value), 2**64 - 1), r, r), model.Quota(),
                          model.Watermarks())
    tree = model.Kdamond((model.Context("paddr", model.Attrs(5000, 100000, 1000000, model.Range(10, 1000)),
                                        schemes=(scheme,)),))
    return Spec("demote-cold", 0, "nearest", (0,), (2,), tree, "s", (), (g,))


@pytest.mark.parametrize(("free_gib", "state"), [(0, "pause"), (4.9, "pause"), (5.1, "hold"), (9.9, "hold"),
                                                  (10.1, "resume"), (100, "resume")])
def test_thresholds_are_percentages_of_the_destination(free_gib: float, state: str) -> None:
    g = dest_free.guard_for(0, "migrate_cold", 2, (int(free_gib * GiB), 100 * GiB), 5, 10, "4096")
    assert (g.pause_below, g.resume_above) == (5 * GiB, 10 * GiB)
    assert g.state == state


def test_a_destination_not_online_yet_is_empty_and_the_scheme_runs() -> None:
    g = dest_free.guard_for(0, "migrate_cold", 4, None, 5, 10, "4096")
    assert g.state == "resume" and g.free is None
    assert "node4 not online yet" in g.describe()


def test_in_the_band_the_plan_keeps_what_the_kernel_holds() -> None:
    spec = _spec(7 * GiB)
    assert dest_free.resolve(spec, {PATH: dest_free.PAUSED}).config[PATH] == dest_free.PAUSED
    assert dest_free.resolve(spec, {PATH: "4096"}).config[PATH] == "4096"
    # drifted to something else: written as the profile says
    assert dest_free.resolve(spec, {PATH: "8192"}).config[PATH] == "4096"


def test_outside_the_band_the_plan_decides() -> None:
    assert dest_free.resolve(_spec(1 * GiB), {PATH: "4096"}).config[PATH] == dest_free.PAUSED
    assert dest_free.resolve(_spec(50 * GiB), {PATH: dest_free.PAUSED}).config[PATH] == "4096"


def test_reasons_name_the_node_its_free_memory_and_both_thresholds() -> None:
    spec = _spec(1 * GiB)
    why = dest_free.reasons(spec, [(PATH, dest_free.PAUSED)], {PATH: "4096"})
    assert why == ["dest_free: pause migrate_cold → node2 paused under 5.0GiB free, resumed over 10.0GiB: "
                   "node2 has 1.0GiB free (1.0 %)"]
    spec = _spec(50 * GiB)
    assert dest_free.reasons(spec, [(PATH, "4096")], {PATH: dest_free.PAUSED})[0].startswith("dest_free: resume")
    assert dest_free.reasons(spec, [], {PATH: dest_free.PAUSED}) == []


@given(st.lists(st.integers(0, 100), min_size=1, max_size=40),
       st.integers(1, 45), st.integers(1, 45))
def test_re_planning_follows_the_hysteresis_whatever_the_free_memory_does(frees: list[int], a: int,
                                                                          b: int) -> None:
    """Apply the plan after each free-memory sample: the kernel's state is exactly the hysteresis of the samples
    (paused once under pause_below, until over resume_above), and a second plan on the same sample is empty."""
    pause, resume = min(a, b), max(a, b) + 1
    kernel = {PATH: "4096"}
    expect_paused = False
    for pct in frees:
        free = pct * GiB
        if free < pause * GiB:
            expect_paused = True
        elif free > resume * GiB:
            expect_paused = False
        spec = dest_free.resolve(_spec(free, pause=pause, resume=resume), kernel)
        kernel = {**kernel, **spec.config}
        assert dest_free.paused(kernel[PATH]) == expect_paused
        again = dest_free.resolve(_spec(free, pause=pause, resume=resume), kernel)
        assert again.config[PATH] == kernel[PATH]  # converged: nothing left to write
