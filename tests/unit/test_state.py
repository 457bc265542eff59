"""The state module: typed records, one format per file, validation on read, migration of the previous format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.host import open_host
from nodeagent.state import (
    FORMAT,
    RECORDS,
    STATE_DIR,
    DriftEntry,
    DriftRecord,
    LastApplied,
    LastChecks,
    Original,
    Originals,
    OwnedDevice,
    OwnedKdamond,
    Ownership,
    Probes,
    Reverted,
    StateStore,
)
from nodeagent.util.timestamps import parse, rfc3339


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    root = tmp_path / "root"
    (root / "sys").mkdir(parents=True)
    (root / "proc").mkdir()
    return StateStore(open_host(root))


def put(store: StateStore, name: str, data: object) -> Path:
    path = Path(str(store.host.root)) / STATE_DIR.lstrip("/") / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


# -- the previous format (no "format" key) is read and migrated ---------------------------------------------
def test_old_originals_are_read_as_records(store: StateStore) -> None:
    put(store, "originals.json", {"kernel.numa_balancing": {"kind": "knob", "path": "/proc/sys/kernel/numa_balancing",
                                                            "value": 0, "recorded": "2026-01-02T03:04:05+0000"},
                                  "dax0.0": {"kind": "dax", "path": None, "value": {"mode": "devdax"},
                                             "recorded": "2026-01-02T03:04:05Z"}})
    got = store.originals()
    assert got.items["kernel.numa_balancing"] == Original("knob", "/proc/sys/kernel/numa_balancing", 0,
                                                          "2026-01-02T03:04:05Z")
    assert got.items["dax0.0"].value == {"mode": "devdax"} and not store.warnings
    store.write_record(got)
    assert store.originals() == got
    written = json.loads((Path(str(store.host.root)) / "var/lib/nodeagent/originals.json").read_text())
    assert written["format"] == FORMAT and set(written["originals"]) == {"kernel.numa_balancing", "dax0.0"}


def test_old_drift_json_moves_problems_apart_and_keeps_first_sightings(store: StateStore) -> None:
    put(store, "drift.json", {"profile": "p", "checked": 2000.5, "items": {
        "knob:kernel.numa_balancing": {"resource": "knob", "target": "kernel.numa_balancing", "expected": "2",
                                       "actual": "0", "first_seen": 1000.0, "last_seen": 2000.0},
        "damon:damon.x": {"resource": "damon", "target": "damon.x", "expected": "(as the profile says)",
                          "actual": "DAMON_STAT is enabled", "first_seen": 1500, "last_seen": 2000}}})
    d = store.drift()
    assert d.items == {"knob:kernel.numa_balancing": DriftEntry("knob", "kernel.numa_balancing", "2", "0", 1000.0,
                                                                2000.0)}
    assert d.cannot_be_done["damon:damon.x"].message == "DAMON_STAT is enabled"
    assert d.cannot_be_done["damon:damon.x"].first_seen == 1500.0 and d.checked == 2000.5
    assert d.to_json()["items"]["knob:kernel.numa_balancing"]["first_seen"] == "1970-01-01T00:16:40Z"


def test_old_ownership_and_last_applied_read(store: StateStore) -> None:
    put(store, "ownership.json", {"dax": {"dax0.0": {"mode": "system-ram", "zone": "Movable", "rule": "r",
                                                     "time": "2026-01-02T03:04:05Z"}},
                                  "damon": {"kdamonds": {"0": {"name": "a", "pid": 42, "config": {"x": "1"},
                                                               "profile": "p", "recorded": "2026-01-02T03:04:05Z"}}}})
    own = store.ownership()
    assert own.dax == {"dax0.0": OwnedDevice("system-ram", "Movable", "r", "2026-01-02T03:04:05Z")}
    assert own.kdamonds == {0: OwnedKdamond("a", 42, {"x": "1"}, "p", "2026-01-02T03:04:05Z")}
    put(store, "last-applied.json", {"profile": "p", "status": "reverted", "desired": None,
                                     "reverted_profile_time": "2026-01-02T03:04:05+0000",
                                     "time": "2026-01-03T03:04:05+0000", "outcomes": []})
    last = store.last_applied()
    assert last.fully_reverted and last.applied_time == "2026-01-02T03:04:05Z" and last.time == "2026-01-03T03:04:05Z"


def test_old_probes_and_checks_read(store: StateStore) -> None:
    put(store, "probes.json", {"boot_id": "b", "probes": {"virt": "kvm", "bad": 3}})
    assert store.read(Probes).probes == {"virt": "kvm"}
    put(store, "last-checks.json", {"results": [{"name": "cpu", "severity": "error", "status": "pass"}]})
    assert [tuple(r) for r in store.last_checks().results] == [("cpu", "error", "pass")]


# -- validation on read ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "data", "field"), [
    ("originals.json", {"format": 2, "originals": {"k": "zero"}}, "originals.k: expected an object"),
    ("originals.json", {"format": 2, "originals": []}, "originals: expected an object, got a list"),
    ("ownership.json", {"dax": {"dax0.0": {"mode": 5}}}, "dax.dax0.0.mode: expected a string"),
    ("ownership.json", {"damon": {"kdamonds": {"x": {}}}}, "damon.kdamonds.x: a kdamond index must be a number"),
    ("ownership.json", {"damon": {"kdamonds": {"0": {"pid": "12"}}}}, "damon.kdamonds.0.pid: expected an integer"),
    ("drift.json", {"items": {"knob:a": {"first_seen": "yesterday"}}}, "items.knob:a.first_seen: expected an RFC"),
    ("last-applied.json", {"status": 3}, "status: expected a string"),
    ("last-applied.json", {"format": 99, "status": "converged"}, "written by a newer nodeagent (format 99"),
    ("last-checks.json", {"results": [{"name": "a"}]}, "results[0].severity: expected a string"),
    ("drift.json", "[1, 2]", "expected a JSON object, got a list"),
    ("originals.json", "{not json", "Expecting property name"),
])
def test_a_wrong_shape_reads_empty_with_a_warning_naming_the_field(store: StateStore, name: str, data: object,
                                                                   field: str) -> None:
    path = put(store, name, data)
    kind = next(r for r in RECORDS if r.FILE == name)
    assert not store.read(kind)
    (warning,) = store.warnings
    assert f"{STATE_DIR}/{name} is corrupt" in warning and field in warning, warning
    assert path.read_text() == (data if isinstance(data, str) else json.dumps(data))  # reading never moves it


def test_a_writing_run_sets_a_bad_file_aside(store: StateStore) -> None:
    path = put(store, "ownership.json", {"dax": []})
    with store.locked(5):
        assert not store.ownership()
    aside = [p for p in path.parent.iterdir() if p.name.startswith("ownership.json.corrupt-")]
    assert len(aside) == 1 and json.loads(aside[0].read_text()) == {"dax": []}
    # what had the right shape is kept (here nothing): the file is written back in the current format
    assert "set aside as" in store.warnings[0] and "lost: dax (not an object)" in store.warnings[0]
    assert not store.read(Ownership) and json.loads(path.read_text())["format"] == FORMAT


def test_a_bad_region_record_loses_only_itself(store: StateStore) -> None:
    """A CXL region's record is salvaged like a kdamond's or a DAX device's: one bad record goes, named; the other
    regions, kdamonds and devices stay nodeagent's."""
    good = {"members": ["0x1"], "serials": [1], "ways": 1, "granularity": 4096, "rule": "r", "region": "region0",
            "root": "decoder0.0", "time": None, "dax": ["dax0.0"]}
    path = put(store, "ownership.json", {"format": FORMAT, "dax": {"dax0.0": {"mode": "system-ram"}},
                                         "damon": {"kdamonds": {"0": {"name": "demote"}}},
                                         "cxl_region": {"0x1": good, "0x2": {"members": "mem1"}}})
    with store.locked(5):
        own = store.ownership()
    assert list(own.regions) == ["0x1"] and list(own.dax) == ["dax0.0"] and list(own.kdamonds) == [0]
    assert "lost: cxl_region.0x2" in store.warnings[0], store.warnings
    assert list(json.loads(path.read_text())["cxl_region"]) == ["0x1"]


def test_a_file_beyond_salvage_names_its_regions(store: StateStore) -> None:
    put(store, "ownership.json", {"format": 99, "cxl_region": {"0x1": {}}})
    store.read(Ownership)
    assert "nodeagent's record of CXL region 0x1 with it" in store.warnings[0], store.warnings


@pytest.mark.parametrize(("name", "data", "lost"), [
    ("ownership.json", {"format": 99, "damon": {"kdamonds": {"0": {}}}, "dax": {"dax0.0": {}}},
     "nodeagent's record of kdamond 0, dax0.0 with it"),
    ("originals.json", {"format": 99, "originals": {"kernel.numa_balancing": {"value": "1"}}},
     "the original value of kernel.numa_balancing with it"),
    ("drift.json", {"format": 99, "items": {f"knob:k{i}": {} for i in range(8)}},
     "the open drift item knob:k0, knob:k1, knob:k2, knob:k3, knob:k4, knob:k5 and 2 more with it"),
    ("last-applied.json", {"format": 99}, "(the record of the last apply with it)"),
    ("probes.json", "{not json", "(every record in it (this boot's probe answers...) with it)"),
])
def test_a_file_wrong_beyond_its_records_names_what_it_held(store: StateStore, name: str, data: object,
                                                           lost: str) -> None:
    """Each record says what its file holds (``HOLDS``) and the names of the records in it (``held``): the warning
    for a file that cannot be salvaged names them."""
    put(store, name, data)
    store.read(next(r for r in RECORDS if r.FILE == name))
    (warning,) = store.warnings
    assert lost in warning, warning


def test_every_state_file_says_what_it_holds() -> None:
    assert all(r.HOLDS != "its records" for r in RECORDS), [r.FILE for r in RECORDS if r.HOLDS == "its records"]


# -- every record round-trips through its file ---------------------------------------------------------------
texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
names = st.text(st.characters(codec="ascii", categories=("L", "N")), min_size=1, max_size=8)
times = st.integers(min_value=0, max_value=4_000_000_000).map(float)
stamps = times.map(rfc3339)
jsonish = st.recursive(st.none() | st.booleans() | st.integers() | texts,
                       lambda c: st.lists(c, max_size=3) | st.dictionaries(texts, c, max_size=3), max_leaves=8)


@settings(max_examples=30, deadline=None)
@given(
    originals=st.dictionaries(texts, st.builds(Original, names, st.none() | texts, jsonish, stamps), max_size=4),
    dax=st.dictionaries(texts, st.builds(OwnedDevice, st.none() | texts, st.none() | texts, st.none() | texts,
                                         st.none() | stamps), max_size=3),
    kds=st.dictionaries(st.integers(0, 64), st.builds(OwnedKdamond, st.none() | texts, st.none() | st.integers(1),
                                                     st.dictionaries(texts, texts, max_size=3),
                                                     st.none() | texts, st.none() | stamps), max_size=3),
    items=st.dictionaries(texts, st.builds(DriftEntry, names, names, texts, texts, times, times), max_size=3),
    reverted=st.dictionaries(texts, st.builds(Reverted, names, stamps, st.booleans()), max_size=3),
)
def test_every_record_reads_back_as_written(tmp_path_factory: pytest.TempPathFactory, originals, dax, kds, items,
                                            reverted) -> None:
    root = tmp_path_factory.mktemp("state")
    (root / "sys").mkdir()
    (root / "proc").mkdir()
    s = StateStore(open_host(root))
    records = [Originals(originals), Ownership(dax, kds), DriftRecord("p", "d", 5.0, items),
               LastApplied("p", status="partial", time=rfc3339(7), outcomes=[{"target": "x"}], reverted=reverted),
               LastChecks(), Probes("boot", {"a": "b"})]
    for rec in records:
        s.write_record(rec)
        assert s.read(type(rec)) == rec
    assert not s.warnings


@given(times)
def test_one_timestamp_format_and_the_old_spellings_parse(t: float) -> None:
    text = rfc3339(t)
    assert parse(text) == t == parse(text.replace("Z", "+0000")) == parse(text.replace("Z", "+00:00")) == parse(t)


def test_a_kind_without_revert_shows_a_non_blocking_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kind that only plans and applies (not revertible) still works: revert lists what it recorded as a
    problem that does not block the rest."""
    from nodeagent.engine.core import make_revert_plan
    from nodeagent.facts import Facts
    from nodeagent.kinds import registry
    from nodeagent.kinds.base import Kind, check_kind
    from nodeagent.state import PlanState

    class Region(Kind):
        kind = "region"

        def plan(self, loaded, facts, ctx):  # type: ignore[no-untyped-def]
            raise AssertionError("not planned here")

        def apply(self, host, change, actx):  # type: ignore[no-untyped-def]
            raise AssertionError("not applied here")

    assert check_kind(Region()) == []

    monkeypatch.setitem(registry.BY_KIND, "region", Region())
    facts = Facts("n", "6.12.0", {"kernel.zone_reclaim_mode": "1"}, None, [0], [], {})
    knob = Original("knob", "/proc/sys/vm/zone_reclaim_mode", 0)
    state = PlanState(originals=Originals({"region0": Original("region", None, {"size": 1}),
                                           "kernel.zone_reclaim_mode": knob}))
    plan = make_revert_plan(state, facts)
    assert not plan.blocked
    (problem,) = plan.problems
    assert problem.target == "region0" and "reverting region is not supported" in problem.message
    assert [c.target for c in plan.changes] == ["kernel.zone_reclaim_mode"]


def test_region_ownership_of_the_first_cxl_regions_version_reads_as_typed_records(store: StateStore) -> None:
    """The CXL regions' first version kept its records under ``cxl_region`` in a format-1 file (times as
    ``%FT%TZ``, no DAX devices): they read as :class:`OwnedRegion` and are written back in the current format."""
    from nodeagent.state import OwnedRegion

    put(store, "ownership.json", {"dax": {}, "damon": {"kdamonds": {}}, "cxl_region": {"0x4c454f0001": {
        "members": ["0x4c454f0001"], "serials": [0x4C454F0001], "ways": 1, "granularity": 256, "rule": "each",
        "region": "region0", "root": "decoder0.0", "time": "2026-01-02T03:04:05Z"}}})
    own = store.ownership()
    assert own.regions == {"0x4c454f0001": OwnedRegion(["0x4c454f0001"], [0x4C454F0001], 1, 256, "each", "region0",
                                                       "decoder0.0", "2026-01-02T03:04:05Z", [])}
    own.regions["0x4c454f0001"] = own.regions["0x4c454f0001"]._replace(dax=["dax0.0"])
    store.write_record(own)
    assert store.ownership() == own and json.loads((Path(str(store.host.root)) / STATE_DIR.lstrip("/")
                                                    / "ownership.json").read_text())["format"] == FORMAT
    assert not Ownership(own.dax, own.kdamonds).to_json().get("cxl_region")  # none: the key is left out
    put(store, "ownership.json", {"cxl_region": {"x": {"serials": ["0x1"]}}})
    assert not store.ownership() and "cxl_region.x.serials[0]: expected an integer" in store.warnings[-1]


# -- advisories.json: which advisories were shown, per profile and kernel -------------------------------------------
def test_advisories_shown_are_kept_per_profile_digest_and_kernel(store: StateStore) -> None:
    from nodeagent.state.advisories import KEEP_KEYS, AdvisoriesShown, advisory_id

    assert not store.advisories_shown() and not store.warnings  # an older state directory: nothing shown yet
    said = ["damon: demote-cold-node0 has a dest_free scheme (its last heartbeat is 600s old (pid 4242))",
            "advisory x: dax1.0 on node3 needs kernel 6.16"]
    assert store.remember_advisories("p", "d1", "6.12.0", said)
    assert not store.remember_advisories("p", "d1", "6.12.0", said[:1])  # nothing new: nothing written
    got = store.advisories_shown()
    assert got.ids("p", "d1", "6.12.0") == {advisory_id(t) for t in said}
    assert not got.ids("p", "d2", "6.12.0") and not got.ids("p", "d1", "6.13.0") and not got.ids("q", "d1", "6.12.0")
    # the numbers that stand alone move (a heartbeat's age, a pid): the same advisory; names with digits do not
    assert advisory_id(said[0].replace("600s", "1200s").replace("4242", "17")) == advisory_id(said[0])
    assert advisory_id(said[1].replace("dax1.0", "dax0.0")) != advisory_id(said[1])
    assert advisory_id(said[1].replace("node3", "node2")) != advisory_id(said[1])
    written = json.loads((Path(str(store.host.root)) / STATE_DIR.lstrip("/") / "advisories.json").read_text())
    assert written["format"] == FORMAT and written["shown"]["p@d1 on 6.12.0"]["kernel"] == "6.12.0"
    # a bounded file: the keys recorded last are kept
    shown = AdvisoriesShown()
    for i in range(KEEP_KEYS + 3):
        shown.add("p", f"d{i}", "6.12.0", said)
    assert len(shown.shown) == KEEP_KEYS and shown.ids("p", f"d{KEEP_KEYS + 2}", "6.12.0")
    assert AdvisoriesShown.from_json(shown.to_json()) == shown


def test_a_bad_advisories_record_is_named_and_the_good_keys_kept(store: StateStore) -> None:
    put(store, "advisories.json", {"format": 2, "shown": {
        "p@d on 6.12.0": {"profile": "p", "profile_digest": "d", "kernel": "6.12.0", "time": "2026-01-02T03:04:05Z",
                          "advisories": {"abc": "said"}},
        "q@d on 6.12.0": {"profile": "q", "profile_digest": "d", "kernel": 612, "advisories": {}}}})
    got = store.advisories_shown()
    assert got.ids("p", "d", "6.12.0") == {"abc"} and not got.ids("q", "d", "6.12.0")
    assert "advisories.json is corrupt (shown.q@d on 6.12.0.kernel: expected a string" in store.warnings[0]
    assert "lost with it" not in store.warnings[0] and "shown.q@d on 6.12.0 (the rest is kept)" in store.warnings[0]
