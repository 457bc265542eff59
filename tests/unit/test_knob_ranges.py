"""Knob ranges that changed across kernel releases: the table says which release takes what, the profile takes
the newest kernel's range, and the plan judges a value against the node's own kernel."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from nodeagent.facts import Facts
from nodeagent.facts.knobs import KNOBS, range_on, version_tuple
from nodeagent.kinds.knob import diff
from nodeagent.profile.model import Kernel

WSF = next(k for k in KNOBS if k.key == "kernel.watermark_scale_factor")


def _kernel_field(key: str, value: Any) -> dict[str, Any]:
    parts = key.split(".")[1:]
    doc: Any = value
    for part in reversed(parts):
        doc = {part: doc}
    return doc


@pytest.mark.parametrize("knob", [k for k in KNOBS if k.ranges], ids=lambda k: k.key)
def test_the_profile_takes_the_newest_kernels_range_and_the_table_is_in_release_order(knob) -> None:
    releases = [version_tuple(since) for since, _, _ in knob.ranges]
    assert releases == sorted(releases) and version_tuple(knob.since) <= releases[0]
    _, lo, hi = knob.ranges[-1]
    Kernel.model_validate(_kernel_field(knob.key, lo))
    Kernel.model_validate(_kernel_field(knob.key, hi))
    for outside in (lo - 1, hi + 1):
        with pytest.raises(ValidationError):
            Kernel.model_validate(_kernel_field(knob.key, outside))


@pytest.mark.parametrize("kernel,expected", [
    ((5, 16), ("4.6", 1, 1000)), ((5, 17), ("5.17", 1, 3000)), ((6, 18), ("5.17", 1, 3000)),
    ((4, 6), ("4.6", 1, 1000)), ((0, 0), None),
])
def test_range_on_picks_the_newest_release_the_kernel_has(kernel, expected) -> None:
    assert range_on(WSF, kernel) == expected


def _facts(release: str) -> Facts:
    return Facts(hostname="n", kernel_release=release, knobs={}, block_size_bytes=None, possible_nodes=[0],
                 nodes=[], tiers={})


def test_thp_defrag_words_the_kernel_does_not_have_yet_are_plan_problems() -> None:
    key = "kernel.transparent_hugepage.defrag"
    rp = diff({key: "defer+madvise"}, {key: "madvise"}, _facts("4.9.0"))
    (p,) = rp.problems
    assert "needs kernel 4.11" in p.message and rp.changes == []
    assert diff({key: "defer"}, {key: "madvise"}, _facts("4.9.0")).changes  # 4.6 took "defer"
    assert diff({key: "defer+madvise"}, {key: "madvise"}, _facts("4.11.0")).changes


def test_a_value_inside_the_newest_range_but_outside_the_nodes_is_a_plan_problem() -> None:
    key = WSF.key
    (p,) = diff({key: 1500}, {key: 10}, _facts("5.10.0-amd64")).problems
    assert p.message.startswith(f"{key}: 1500 is outside 1..1000, what kernel 5.10.0-amd64 takes")
    assert p.hint == f"set {key} within 1..1000, or run a kernel >= 5.17"
    assert diff({key: 1000}, {key: 10}, _facts("5.10.0-amd64")).changes
    assert diff({key: 1500}, {key: 10}, _facts("6.1.0")).changes
