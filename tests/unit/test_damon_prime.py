"""Which kdamonds are primed, and the priming configuration (nodeagent/kinds/damon/prime.py)."""

from __future__ import annotations

import json

import pytest

from nodeagent.kinds.damon import prime
from nodeagent.profile.damon import Kdamond, Scheme

CAPS = {"actions": ["stat", "lru_deprio", "migrate_hot", "migrate_cold"], "filter_types": ["anon", "young"]}


def _kd(*filters: dict, action: str = "migrate_hot", **kw) -> Kdamond:
    scheme = {"action": action, "target_node": "fast", "filters": list(filters)}
    return Kdamond.model_validate({"name": "k", "targets": [{"node": "slow"}], "schemes": [scheme], **kw})


@pytest.mark.parametrize(("matching", "allow", "young"), [(False, False, True), (True, True, True),
                                                          (True, False, False), (False, True, False)])
def test_a_scheme_acts_on_young_pages_when_its_young_filter_keeps_only_them(matching, allow, young) -> None:
    s = _kd({"type": "young", "matching": matching, "allow": allow}).schemes[0]
    assert prime.acts_on_young(s) is young


def test_only_a_kdamond_with_a_young_acting_scheme_that_asks_for_it_on_a_kernel_that_can_walk() -> None:
    hot = _kd({"type": "young", "matching": False})
    assert prime.wanted(hot, hot.schemes, CAPS, True)
    cold = _kd({"type": "young", "matching": True}, action="migrate_cold")
    assert not prime.wanted(cold, cold.schemes, CAPS, True)
    anon = _kd({"type": "anon", "matching": False})
    assert not prime.wanted(anon, anon.schemes, CAPS, True)
    off = _kd({"type": "young", "matching": False}, prime=False)
    assert not prime.wanted(off, off.schemes, CAPS, True)
    assert not prime.wanted(hot, hot.schemes, CAPS, False)  # no apply_interval (before 6.7)
    assert not prime.wanted(hot, hot.schemes, {**CAPS, "filter_types": ["anon"]}, True)


def test_the_stage_pauses_young_acting_schemes_and_appends_the_walk() -> None:
    kd = _kd({"type": "young", "matching": False})
    other = Scheme.model_validate({"action": "stat"})
    written = [[("action", "migrate_hot"), ("access_pattern/sz/min", "4096"), ("apply_interval_us", "1000000")],
               [("action", "stat"), ("access_pattern/sz/min", "0")]]
    stage = prime.stage_writes([kd.schemes[0], other], written, [("action", "lru_deprio")])
    d = dict(stage)
    assert stage[0] == ("contexts/0/schemes/nr_schemes", "3") and prime.walk_index(stage) == 2
    assert d["contexts/0/schemes/0/access_pattern/sz/min"] == prime.NOWHERE
    assert d["contexts/0/schemes/0/apply_interval_us"] == "1000000"
    assert d["contexts/0/schemes/1/access_pattern/sz/min"] == "0"  # a stat scheme counts on through the walk
    assert d["contexts/0/schemes/2/action"] == "lru_deprio"


def test_the_walk_covers_every_region_each_aggregation_bounded_per_pass() -> None:
    kd = _kd({"type": "young", "matching": False}, monitoring={"aggregate": "150ms"})
    w = prime.marker(kd)
    assert w.action == "lru_deprio" and w.apply_interval == 150_000
    assert w.access.nr_accesses.min is None and w.access.age.min is None
    assert w.quota.size == prime.WALK_PER_PASS and w.quota.reset_interval == 150_000
    assert [(f.type, f.matching, f.allow) for f in w.filters] == [("young", True, False)]
    assert prime.marker(_kd(monitoring={"sample": "100us", "aggregate": "500us"})).quota.reset_interval == 1000


def test_the_final_writes_are_the_scheme_files_and_walk_bytes_the_regions() -> None:
    config = {"contexts/nr_contexts": "1", "contexts/0/operations": "paddr", "contexts/0/targets/nr_targets": "1",
              "contexts/0/targets/0/regions/nr_regions": "2",
              "contexts/0/targets/0/regions/0/start": "0", "contexts/0/targets/0/regions/0/end": "4096",
              "contexts/0/targets/0/regions/1/start": "8192", "contexts/0/targets/0/regions/1/end": "16384",
              "contexts/0/schemes/nr_schemes": "1", "contexts/0/schemes/0/action": "migrate_hot"}
    assert prime.walk_bytes(config) == 12288
    assert prime.final_writes(list(config.items())) == [("contexts/0/schemes/nr_schemes", "1"),
                                                        ("contexts/0/schemes/0/action", "migrate_hot")]


def test_the_walk_in_plain_data_is_what_the_model_validates() -> None:
    kd = _kd({"type": "young", "matching": False})
    w = prime.marker(kd)
    model = Scheme.model_validate({"action": "lru_deprio", "apply_interval": "100ms",
                                   "quota": {"size": prime.WALK_PER_PASS, "reset_interval": "100ms"},
                                   "filters": [{"type": "young", "matching": True, "allow": False}]})
    assert json.loads(json.dumps(w.model_dump())) == json.loads(json.dumps(model.model_dump()))
