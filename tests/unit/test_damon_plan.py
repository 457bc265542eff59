"""DAMON planning without the CLI: unit conversions, node classes and pairing, the diff rule for counts,
ownership checks, DAX devices not yet online, statistics of owned kdamonds only."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel
from nodeagent_sim import dax as simdax
from nodeagent_sim.damon_presets import start_foreign

from nodeagent.engine.core import Engine
from nodeagent.facts import gather
from nodeagent.facts.damon import DamonFacts, Kdamond, from_facts
from nodeagent.host import open_host
from nodeagent.kinds.base import PlanContext
from nodeagent.kinds.damon.kind import DamonResource, build_specs
from nodeagent.kinds.damon.model import diff_writes, untuned
from nodeagent.kinds.damon.nodes import NodeClasses, pair
from nodeagent.kinds.damon.plan import owned_kdamonds
from nodeagent.kinds.damon.stats import read_stats, refresh_stats
from nodeagent.profile import LoadedProfile, load_profile
from nodeagent.state import StateStore

HEAD = "apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: unit}\n"


def load(tmp_path: Path, damon: str) -> LoadedProfile:
    p = tmp_path / "p.yaml"
    p.write_text(HEAD + "damon:\n" + textwrap.indent(textwrap.dedent(damon), "  "))
    return load_profile(p)


def with_dax(loaded: LoadedProfile) -> LoadedProfile:
    """The same profile with a memory.dax rule that onlines every DAX device (the DAX resource does that before
    DAMON runs, so the devices' future nodes are slow nodes in the same plan)."""
    p = Path(loaded.path)
    q = p.with_name(p.stem + "-dax.yaml")
    q.write_text(p.read_text() + "memory:\n  dax:\n    - {name: all, match: {all: true}, mode: system-ram, "
                 "zone: movable}\n")
    return load_profile(q)


DEMOTE = """\
kdamonds:
  - name: d
    monitoring: {sample: 5ms, aggregate: 100ms}
    targets: [{node: fast}]
    pairing: PAIRING
    schemes:
      - action: migrate_cold
        target_node: slow
        access: {nr_accesses: {min: 10%, max: 25%}, age: {min: 250ms, max: 1s}}
"""


def test_diff_writes_rewrites_everything_below_a_changed_count() -> None:
    desired = (("schemes/nr_schemes", "1"), ("schemes/0/action", "stat"), ("schemes/0/filters/nr_filters", "1"),
               ("schemes/0/filters/0/type", "young"), ("schemes/0/quotas/weights/nr_accesses_permil", "5"),
               ("schemes/0/quotas/weights/age_permil", "0"))
    observed = {"schemes/nr_schemes": "1", "schemes/0/action": "stat", "schemes/0/filters/nr_filters": "1",
                "schemes/0/filters/0/type": "young", "schemes/0/quotas/weights/nr_accesses_permil": "0",
                "schemes/0/quotas/weights/age_permil": "0"}
    # nr_accesses_permil is not a count: only it changes.
    assert diff_writes(desired, observed) == [("schemes/0/quotas/weights/nr_accesses_permil", "5")]
    observed["schemes/nr_schemes"] = "2"
    assert diff_writes(desired, observed) == list(desired)  # the count resets all of scheme 0: write it all


IV = "contexts/0/monitoring_attrs/intervals"
TUNED = {f"{IV}/sample_us": "5000", f"{IV}/aggr_us": "100000", f"{IV}/intervals_goal/access_bp": "400",
         f"{IV}/intervals_goal/aggrs": "3", f"{IV}/intervals_goal/min_sample_us": "5000",
         f"{IV}/intervals_goal/max_sample_us": "10000000"}


@pytest.mark.parametrize("sample, aggr, goal, committed, same", [
    ("40000", "800000", {}, None, True),  # tuned within the bounds, the ratio (20) kept
    ("10000000", "200000000", {}, TUNED, True),  # at max_sample_us, committed as the profile wants
    ("20000000", "400000000", {}, None, False),  # above max_sample_us: not the kernel's doing
    ("4000", "80000", {}, None, False),  # below min_sample_us
    ("40000", "400000", {}, None, False),  # another ratio: someone wrote aggr_us
    ("40000", "800000", {"aggrs": "0"}, None, False),  # aggrs 0: the kernel does not tune
    ("40000", "800000", {"access_bp": "500"}, None, False),  # another goal runs
    ("40000", "800000", {}, {**TUNED, f"{IV}/sample_us": "2500", f"{IV}/aggr_us": "50000"}, False),  # profile moved
])
def test_intervals_the_kernel_tuned_read_as_the_desired_ones(sample, aggr, goal, committed, same) -> None:
    desired = dict(TUNED, **{f"{IV}/intervals_goal/{k}": v for k, v in goal.items()})
    observed = dict(TUNED, **{f"{IV}/sample_us": sample, f"{IV}/aggr_us": aggr})
    if "aggrs" in goal:
        observed[f"{IV}/intervals_goal/aggrs"] = "0"
    writes = diff_writes(tuple(desired.items()), untuned(desired, observed, committed))
    assert (writes == []) == same, writes
    if not same and not goal:
        assert [p for p, _ in writes] == [f"{IV}/sample_us", f"{IV}/aggr_us"]


def test_a_stopped_kdamond_with_tuned_intervals_is_still_nodeagents() -> None:
    observed = dict(TUNED, **{f"{IV}/sample_us": "40000", f"{IV}/aggr_us": "800000"})
    damon = DamonFacts(True, 1, (Kdamond(0, "off", -1, observed, {}),), {}, {}, {}, (), None)
    owned, notes = owned_kdamonds(damon, {"damon": {"kdamonds": {"0": {"name": "a", "pid": None, "config": TUNED}}}})
    assert list(owned) == [0] and not notes


def test_conversions_pairing_and_pending_dax_nodes(make_node, tmp_path) -> None:
    root = make_node("qemu-3node")
    facts = gather(open_host(root))
    loaded = load(tmp_path, DEMOTE.replace("PAIRING", "split"))
    specs, chk, notes = build_specs(loaded, facts)
    assert specs == [] and any("no memory.dax rule of this profile brings it online" in n for n in notes)
    specs, chk, notes = build_specs(with_dax(loaded), facts)  # dax0.0 will be onlined first: node 2 is pending
    assert not chk.problems
    (spec,) = specs
    c = spec.config
    assert spec.sources == (0, 1) and spec.dest_nodes == (2,) and "split" in spec.how
    assert c["contexts/0/targets/0/regions/nr_regions"] == "2"  # node0 [0,2G) and node1 [4G,6G)
    assert c["contexts/0/schemes/0/access_pattern/nr_accesses/min"] == "2"  # 10% of 20 samples
    assert c["contexts/0/schemes/0/access_pattern/nr_accesses/max"] == "5"
    assert c["contexts/0/schemes/0/access_pattern/age/min"] == "3"  # 250ms rounds up to 3 x 100ms
    assert c["contexts/0/schemes/0/access_pattern/age/max"] == "10"
    assert any("250ms is not a multiple of aggregate 100ms: written as 3 intervals (300ms)" in w
               for w in chk.warnings)
    # A promotion kdamond over the pending node monitors what kmem will hot-add: the range rounded to blocks.
    promote = load(tmp_path, """\
        kdamonds:
          - name: p
            targets: [{node: slow}]
            schemes: [{action: migrate_hot, target_node: fast}]
        """)
    (spec,) = build_specs(with_dax(promote), facts)[0]
    bs = 128 * 2**20
    assert spec.config["contexts/0/targets/0/regions/0/start"] == str(49 * bs)
    assert spec.config["contexts/0/targets/0/regions/0/end"] == str(56 * bs)  # 7 blocks, as the real guest
    assert spec.config["contexts/0/schemes/0/target_nid"] == "0"  # equal distances: faster tier, lower id


def test_apply_refuses_to_start_toward_a_node_that_did_not_come_online(make_node, tmp_path) -> None:
    # The plan counts dax0.0's future node 2 as the slow node; then the DAX step does not happen (here: it is
    # simply not executed) and the DAMON step must refuse on its own before writing anything.
    from nodeagent.engine.core import make_plan
    from nodeagent.kinds.base import ApplyContext
    from nodeagent.kinds.registry import BY_KIND
    from nodeagent.state import StateStore
    from nodeagent.util.errors import HostError

    root = make_node("qemu-3node")
    host = open_host(root)
    loaded = with_dax(load(tmp_path, DEMOTE.replace("PAIRING", "nearest")))
    (change,) = [c for c in make_plan(loaded, gather(host)).changes if c.kind == "damon"]
    with pytest.raises(HostError) as exc:
        BY_KIND["damon"].apply(host, change, ApplyContext(state=StateStore(host)))
    assert "destination node 2 has no memory online: not starting a kdamond" in exc.value.render()
    assert not any("damon" in w["path"] for w in SimKernel(root).journal())  # checked before the first write


def test_nearest_uses_the_device_locality_for_a_node_not_yet_online() -> None:
    nc = NodeClasses(fast=(0, 1), slow=(2, 3), tier={0: 4, 1: 4, 2: 5, 3: 5}, ranges={},
                     pending={2: "dax0.0", 3: "dax1.0"}, near={2: 0, 3: 1}, distances={(0, 1): 21, (1, 0): 21})
    assert nc.nearest(0, (2, 3)) == 2 and nc.nearest(1, (2, 3)) == 3
    assert nc.nearest(2, (0, 1)) == 0 and nc.nearest(0, (0,)) is None


def test_gather_shares_one_kdamond_per_destination_where_nearest_makes_one_per_source() -> None:
    # Two sockets; expanders node2 and node4 hang off socket 0, node3 off socket 1.
    d = {(0, 1): 21, (0, 2): 14, (0, 3): 24, (0, 4): 14, (1, 0): 21, (1, 2): 24, (1, 3): 14, (1, 4): 24}
    d |= {(b, a): v for (a, b), v in d.items()}
    nc = NodeClasses(fast=(0, 1), slow=(2, 3, 4), tier={0: 1, 1: 1, 2: 2, 3: 2, 4: 2}, ranges={}, distances=d)
    got, skipped = pair("p", "gather", (2, 3, 4), [(0, 1)], nc)
    assert skipped == [] and [(p.name, p.sources, p.dests) for p in got] == [
        ("p-to-node0", (2, 4), ((0,),)), ("p-to-node1", (3,), ((1,),))]
    assert got[0].how == "gather: node2 → node0 (distance 14); node4 → node0 (distance 14)"
    got, _ = pair("p", "nearest", (2, 3, 4), [(0, 1)], nc)
    assert [(p.name, p.sources, p.dests) for p in got] == [
        ("p-node2", (2,), ((0,),)), ("p-node3", (3,), ((1,),)), ("p-node4", (4,), ((0,),))]
    # One destination for every source: one kdamond, named as the profile names it.
    (one,), _ = pair("p", "gather", (2, 4), [(0, 1)], nc)
    assert one.name == "p" and one.sources == (2, 4)
    # A scheme without a destination (stat) does not split the group.
    got, _ = pair("p", "gather", (2, 3, 4), [None, (0, 1)], nc)
    assert [p.sources for p in got] == [(2, 4), (3,)] and got[0].dests == ((), (0,))


def test_nearest_over_cxl_sources_warns_that_a_hot_add_will_be_disruptive(make_node, tmp_path) -> None:
    facts = gather(open_host(make_node("h100-cxl")))
    body = """\
        kdamonds:
          - name: p
            targets: [{node: slow}]
            pairing: PAIRING
            schemes: [{action: migrate_hot, target_node: fast}]
        """
    _, chk, _ = build_specs(with_dax(load(tmp_path, body.replace("PAIRING", "nearest"))), facts)
    (warning,) = [w for w in chk.warnings if "pairing" in w]
    assert "p-dax.yaml:8:16: damon.kdamonds[0].pairing: nearest makes one" in warning
    assert "pairing: gather" in warning
    specs, chk, _ = build_specs(with_dax(load(tmp_path, body.replace("PAIRING", "gather"))), facts)
    assert not [w for w in chk.warnings if "pairing" in w]
    assert [s.name for s in specs] == ["p-to-node0", "p-to-node1"]


def test_plan_time_problems_name_file_line_and_feature(make_node, tmp_path) -> None:
    root = make_node("qemu-3node", kernel="6.18.0")
    simdax.to_system_ram(SimKernel(root), "dax0.0", "Movable")
    facts = gather(open_host(root))
    loaded = load(tmp_path, """\
        kdamonds:
          - name: x
            operations: paddr
            targets: [{node: 7}]
            schemes:
              - action: migrate_cold
                dests: [{node: slow, weight: 3}]
                quota: {time: 1500us, goals: [{metric: node_memcg_used_bp, target: 20%, node: slow, memcg: /a}]}
        """)
    rp = DamonResource().plan(loaded, facts, PlanContext())
    text = "\n".join(p.message for p in rp.problems)
    assert rp.changes == [] and all(p.blocking for p in rp.problems)
    assert "p.yaml:8:24: damon.kdamonds[0].targets[0].node: node 7 is not online here (and no DAX device" in text
    loaded = load(tmp_path, """\
        kdamonds:
          - name: x
            targets: [{node: fast}]
            schemes:
              - action: migrate_cold
                dests: [{node: slow, weight: 3}]
                quota: {time: 1500us, goals: [{metric: node_memcg_used_bp, target: 20%, node: slow, memcg: /a}]}
        """)
    text = "\n".join(p.message for p in DamonResource().plan(loaded, facts, PlanContext()).problems)
    assert "dests/ weights are honoured only by vaddr/fvaddr migration" in text
    assert "1.50ms" not in text and "is not a whole number of milliseconds" in text
    assert "quota goal metric node_memcg_used_bp needs kernel 6.19" in text


def test_ownership_is_checked_against_the_node() -> None:
    config = {"contexts/nr_contexts": "1", "contexts/0/operations": "paddr"}
    running = Kdamond(0, "on", 300, dict(config), {})
    stopped_other = Kdamond(1, "off", -1, {"contexts/nr_contexts": "1", "contexts/0/operations": "vaddr"}, {})
    damon = DamonFacts(True, 2, (running, stopped_other), {}, {}, {}, (), None)
    records = {"damon": {"kdamonds": {"0": {"name": "a", "pid": 300, "config": config},
                                      "1": {"name": "b", "pid": None, "config": config},
                                      "5": {"name": "gone", "pid": 9, "config": config}}}}
    owned, notes = owned_kdamonds(damon, records)
    assert list(owned) == [0] and "no longer holds the configuration nodeagent wrote for b" in notes[0]
    records["damon"]["kdamonds"]["0"]["pid"] = 301  # restarted by someone else
    owned, notes = owned_kdamonds(damon, records)
    assert 0 not in owned and "now runs as another process" in notes[0]


def test_stats_are_refreshed_and_read_for_owned_kdamonds_only(make_node, tmp_path) -> None:
    root = make_node("qemu-3node")
    k = SimKernel(root)
    simdax.to_system_ram(k, "dax0.0", "Movable")
    host = open_host(root)
    loaded = load(tmp_path, DEMOTE.replace("PAIRING", "split"))
    assert Engine(host).apply(loaded).ok
    own = StateStore(host).ownership()
    mark = len(k.journal())
    assert refresh_stats(host, own) == ["d: kdamond 0 statistics refreshed"]
    assert [w["value"] for w in k.journal()[mark:]] == ["update_schemes_stats"]
    stats = read_stats(gather(host), own)
    assert stats["d"][0]["nr_tried"] > 0 and stats["d"][0]["sz_applied"] > 0
    assert refresh_stats(host, {}) == [] and read_stats(gather(host), {}) == {}


def test_stats_never_touch_a_foreign_kdamond(make_node) -> None:
    root = make_node("qemu-3node")
    k = SimKernel(root)
    start_foreign(k)
    mark = len(k.journal())
    forged = {"damon": {"kdamonds": {"0": {"name": "x", "pid": 12345, "config": {}}}}}
    notes = refresh_stats(open_host(root), forged)
    assert k.journal()[mark:] == [] and "now runs as another process" in notes[0]


@pytest.mark.parametrize("field, message", [
    ("sample: 200ms", "expected sample <= aggregate"),
    ("regions: {min: 2}", "the kernel needs at least 3 regions"),
])
def test_profile_validation_of_monitoring(tmp_path, field: str, message: str) -> None:
    from nodeagent.util.errors import ProfileError

    with pytest.raises(ProfileError) as exc:
        load(tmp_path, f"kdamonds: [{{name: a, targets: [{{node: 0}}], monitoring: {{{field}}}}}]\n")
    assert message in str(exc.value)


def test_from_facts_reads_a_saved_section(make_node) -> None:
    root = make_node("qemu-3node")
    start_foreign(SimKernel(root))
    facts = gather(open_host(root))
    from nodeagent.facts import Facts

    again = Facts.from_dict(__import__("json").loads(facts.to_json()))
    assert from_facts(again) == from_facts(facts)


def test_taking_over_a_stopped_foreign_configuration_is_still_disruptive() -> None:
    from nodeagent.kinds.damon import model
    from nodeagent.kinds.damon.plan import plan_kdamonds
    from nodeagent.kinds.damon.spec import Spec

    foreign = Kdamond(0, "off", -1, {"contexts/nr_contexts": "1", "contexts/0/operations": "paddr"}, {})
    damon = DamonFacts(True, 1, (foreign,), {}, {}, {}, (), None)
    tree = model.Kdamond((model.Context("paddr", model.Attrs(5000, 100000, 1000000, model.Range(10, 1000))),))
    spec = Spec("a", 0, "nearest: node0 → node2", (0,), (2,), tree, "paddr over node0")
    refuse = plan_kdamonds([spec], damon, {}, "refuse", allow_disruptive=True)
    assert refuse.changes == [] and "kdamond 0 (stopped; paddr) is configured and not managed" in \
        refuse.problems[0].message and not refuse.problems[0].blocking
    take = plan_kdamonds([spec], damon, {}, "take-over", allow_disruptive=False)
    (change,) = take.changes
    assert change.disruptive and "discard the configuration of kdamond 0 (stopped; paddr)" in change.reason
