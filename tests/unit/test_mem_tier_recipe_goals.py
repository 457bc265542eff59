"""The opt-in mem_tier recipe's DAMON quota goals against the watermarks of the profile it is for: a
node_mem_free_bp demotion goal at or under the free memory kswapd already keeps (the promo watermark, min + 3 gaps
of watermark_scale_factor) is met all the time, and the scheme never tries a byte (measured on 7.3.4 with damo's
0.5 % beside a factor of 400: bench/README.md). The goals are damo's mem_tier.sh scaled by the factor: free 5 gaps
(0.5 % at the kernel's default 10), promotion up to 100 % - free + 0.2 %."""

from __future__ import annotations

from pathlib import Path

import yaml

PROFILES = Path(__file__).resolve().parents[2] / "profiles"


def _bp(percent: str) -> int:
    assert percent.endswith("%"), percent
    return round(float(percent[:-1]) * 100)


def _goal(doc: dict, name: str) -> dict:
    (kd,) = [k for k in doc["damon"]["kdamonds"] if k["name"] == name]
    (scheme,) = kd["schemes"]
    (goal,) = scheme["quota"]["goals"]
    return goal


def test_the_free_goal_sits_above_the_watermarks_the_profile_sets() -> None:
    doc = yaml.safe_load((PROFILES / "recipes" / "mem-tier.yaml").read_text())
    profile = yaml.safe_load((PROFILES / "cxl-inference.yaml").read_text())
    gap_bp = profile["kernel"]["watermark_scale_factor"]   # one gap between watermarks, in 1/10,000 of the node
    free = _goal(doc, "mem-tier-demote")
    used = _goal(doc, "mem-tier-promote")
    assert (free["metric"], used["metric"]) == ("node_mem_free_bp", "node_mem_used_bp")
    assert _bp(free["target"]) > 3 * gap_bp, "the demotion goal must be above the promo watermark (min + 3 gaps)"
    assert _bp(free["target"]) == 5 * gap_bp
    assert _bp(used["target"]) == 10_000 - _bp(free["target"]) + 20
