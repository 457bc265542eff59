"""The history journal (bounded rotation, torn lines, filters, --since) and hot-plug scoping."""

from __future__ import annotations

import json

import pytest
from nodeagent_sim import SimKernel
from nodeagent_sim.dax import to_system_ram

from nodeagent.engine.scope import expand, in_scope, restrict
from nodeagent.host import open_host
from nodeagent.plan import Change, Plan, Problem
from nodeagent.state.journal import Journal, parse_since
from nodeagent.util.errors import UsageError


def test_journal_rotates_and_stays_bounded(make_node) -> None:
    host = open_host(make_node("workstation"))
    clock = iter(range(1_000_000, 2_000_000))
    j = Journal(host, max_bytes=2000, keep=3, clock=lambda: float(next(clock)))
    for i in range(200):
        j.append([{"event": "drift", "resource": "knob", "target": f"k{i}", "actual": "x" * 40}])
    sizes = [host.fs.size(f) for f in j.files()]
    assert all(s is not None and s <= 2000 for s in sizes), sizes
    assert not host.fs.exists(f"{j.path}.3")
    events = list(j.read())
    targets = [e["target"] for e in events]
    assert targets == sorted(targets, key=lambda t: int(t[1:]))  # oldest first, across the three files
    assert targets[-1] == "k199" and len(targets) < 200  # the oldest fell off
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)


def test_journal_skips_a_torn_line_and_filters(make_node) -> None:
    root = make_node("workstation")
    host = open_host(root)
    now = [1000.0]
    j = Journal(host, clock=lambda: now[0])
    j.append([{"event": "apply", "profile": "p", "status": "converged",
               "changes": [{"kind": "knob", "target": "kernel.numa_balancing", "status": "applied"}]}])
    now[0] = 5000.0
    j.append([{"event": "drift", "resource": "dax", "target": "dax0.0"}])
    with open(root / "var/lib/nodeagent/journal.jsonl", "a") as f:
        f.write('{"event": "drift", "targ')  # a write cut short by a crash
    assert [e["event"] for e in j.read()] == ["apply", "drift"] and j.skipped == 1
    assert [e["event"] for e in j.query(resource="knob")] == ["apply"]
    assert [e["target"] for e in j.query(resource="dax")] == ["dax0.0"]
    assert [e["event"] for e in j.query(target="kernel.numa_balancing")] == ["apply"]
    assert [e["event"] for e in j.query(since=2000.0)] == ["drift"]
    assert [e["event"] for e in j.query(limit=1)] == ["drift"]
    line = json.loads((root / "var/lib/nodeagent/journal.jsonl").read_text().splitlines()[0])
    assert line["time"] == "1970-01-01T00:16:40Z"


def test_parse_since() -> None:
    assert parse_since("90s", now=1000) == 910
    assert parse_since("1h30m", now=10_000) == 10_000 - 5400
    assert parse_since("2d", now=200_000) == 200_000 - 172_800
    assert parse_since("1970-01-02", now=0) == 86_400
    assert parse_since("1970-01-01T01:00:00+01:00", now=0) == 0
    assert parse_since("12345") == 12345
    with pytest.raises(UsageError, match="expected a duration"):
        parse_since("yesterday")


def _c(target: str, requires: tuple[str, ...] = ()) -> Change:
    return Change("dax", target, "set", 0, 1, requires=requires)


def test_in_scope_matches_whole_device_names() -> None:
    assert in_scope(_c("memory.dax[expanders].dax1.0"), {"dax1.0"})
    assert in_scope(_c("dax1.0"), {"dax1.0"})
    assert in_scope(Change("region", "expander-a", "create", "", "", devices=("dax1.0",)), {"dax1.0"})
    assert in_scope(Change("region", "expander-a", "create", "", "", devices=("memory41", "memory42")), {"memory42"})
    assert not in_scope(_c("memory.dax[expanders].dax1.01"), {"dax1.0"})
    assert not in_scope(_c("dax11.0"), {"dax1.0"})
    assert not in_scope(Change("region", "x", "create", "", "", devices=("memory420",)), {"memory42"})
    # scope reads the explicit fields: a device named only in the kind's own data or path is not searched for
    assert not in_scope(Change("region", "x", "create", "", "", path="/sys/bus/dax/devices/dax1.0",
                               data=(("device", "dax1.0"),)), {"dax1.0"})
    knob = Change("knob", "memory.auto_online_blocks", "set", "online", "offline",
                  path="/sys/devices/system/memory/auto_online_blocks")
    assert not in_scope(knob, {"memory42", "dax0.0"})  # node-wide knobs are never in a device's scope
    plan = Plan("p", "d", (knob, _c("dax0.0")), (Problem("knob", "kernel.numa_balancing", "gone"),
                                                 Problem("dax", "dax0.0", "busy")))
    scoped = restrict(plan, {"dax0.0"})
    assert [c.target for c in scoped.changes] == ["dax0.0"]
    assert [p.target for p in scoped.problems] == ["dax0.0"]


def test_restrict_brings_required_changes_and_drops_those_needing_what_is_left_out() -> None:
    knob = Change("knob", "memory.auto_online_blocks", "set", "online", "offline")
    other = Change("knob", "kernel.numa_balancing", "set", 1, 2)
    add2 = _c("dax2.0", requires=("memory.auto_online_blocks",))
    add1 = _c("dax1.0", requires=("memory.auto_online_blocks",))
    to2 = Change("damon", "damon.demote-cold-node0", "update", "", "", devices=("dax2.0",), needs=("dax2.0",))
    both = Change("damon", "damon.kdamonds", "reconfigure", 2, 3, devices=("dax1.0", "dax2.0"),
                  needs=("dax1.0", "dax2.0"))
    plan = Plan("p", "d", (knob, other, add1, add2, to2, both))
    scoped = restrict(plan, {"dax2.0"})
    # The knob comes along because onlining dax2.0 requires it; the kdamond that also migrates to dax1.0
    # (not onlined in this scope) would not start, so it waits, and the plan says what was left out.
    assert [c.target for c in scoped.changes] == ["memory.auto_online_blocks", "dax2.0", "damon.demote-cold-node0"]
    assert scoped.warnings[-1] == ("not in the scope of dax2.0, left for a full `nodeagent apply`: "
                                   "kernel.numa_balancing, dax1.0, damon.kdamonds")
    assert [c.target for c in restrict(plan, {"dax1.0", "dax2.0"}).changes] == [
        "memory.auto_online_blocks", "dax1.0", "dax2.0", "damon.demote-cold-node0", "damon.kdamonds"]


def test_restrict_keeps_a_problem_of_a_device_in_scope() -> None:
    """A hot-plugged memdev whose region cannot be built: the problem's target names the region by serial, not
    the memdev, so the scope finds it by its devices; a scoped apply of that memdev then fails with the reason
    instead of reporting a converged node (found by the bus-shape sweep: a fifth memdev behind a full port)."""
    unroutable = Problem("cxl_region", "region@0x1d7e0000a004", "mem4: no region can be routed", blocking=False,
                         devices=("mem4",))
    plan = Plan("p", "d", (), problems=(unroutable,))
    assert restrict(plan, {"mem4", "region4"}).problems == (unroutable,)
    assert restrict(plan, {"mem3", "region0"}).problems == ()
    assert unroutable.to_dict()["devices"] == ["mem4"]


def test_expand_resolves_blocks_regions_and_memory_to_dax_devices(make_node) -> None:
    root = make_node("qemu-3node")
    host = open_host(root)
    k = SimKernel(root)
    # dax0.0 covers 0x181200000 + 1006 MiB in 128 MiB blocks: 49..55 once hot-added.
    assert expand(host, ["memory50"]) == {"memory50", "dax0.0"}
    assert expand(host, ["memory3"]) == {"memory3"}
    assert expand(host, ["region0"]) == {"region0", "dax0.0"}
    assert expand(host, ["memory"]) == set()  # nothing is bound to kmem yet
    with k.locked():
        to_system_ram(k, "dax0.0", None)
    assert expand(host, ["memory"]) == {"dax0.0"}


BAD_EVENTS = [{"ts": "x", "event": "apply"}, {"ts": None, "event": "apply"}, {"event": "apply"},
              {"ts": 1.0, "event": 5}, {"ts": 1.0, "event": "apply", "changes": "abc"},
              {"ts": 1.0, "event": "apply", "changes": [1, 2]}, {"ts": 1.0, "event": "drift", "target": [1]},
              {"ts": 1.0, "event": "apply", "status": {"a": 1}}, {"ts": float("inf"), "event": "apply"},
              {"ts": True, "event": "apply"}, {"ts": 1.0, "event": "revert", "reverted": [None]}, [1, 2], "apply"]


@pytest.mark.parametrize("bad", BAD_EVENTS, ids=lambda b: json.dumps(b)[:40])
@pytest.mark.parametrize("args", [["history"], ["history", "--since", "1h"], ["history", "--resource", "knob"],
                                  ["history", "--target", "x"], ["--format", "json", "history"], ["status"]],
                         ids=lambda a: " ".join(a))
def test_a_rotated_journal_with_a_line_of_the_wrong_shape_is_read_past(tmp_path, capsys, bad, args) -> None:
    """After a rotation, ``history`` reads journal.jsonl.1 too: a line there that is JSON but not an event as
    nodeagent writes it (``"ts": "x"``, ``"changes": "abc"``) once ended ``history`` and ``status`` in an
    internal error. It is skipped and counted, like a torn line; the events around it are shown."""
    from nodeagent.cli.main import main

    root = tmp_path / "root"
    (root / "sys").mkdir(parents=True)
    (root / "proc").mkdir()
    journal = Journal(open_host(root), max_bytes=200)
    journal.append([{"event": "apply", "profile": "a", "status": "converged"}])
    state = root / "var/lib/nodeagent"
    with open(state / "journal.jsonl", "a") as f:
        f.write(json.dumps(bad) + "\n")
    journal.append([{"event": "revert", "status": "reverted", "reverted": ["knob.x"]}])  # rotates
    assert (state / "journal.jsonl.1").exists()
    events = list(journal.read())
    assert [e["event"] for e in events] == ["apply", "revert"] and journal.skipped == 1
    code = main(["--root", str(root), *args])
    out, err = capsys.readouterr()
    assert code == 0 and "internal error" not in err, out + err
    if args == ["history"]:
        assert "apply a: converged" in out and "revert: reverted" in out and "1 unreadable journal lines" in out
