"""dest_free on a simulated node: a migrate scheme paused while its destination is nearly full, as plan, apply,
drift and `nodeagent guard` see it (nodeagent/kinds/damon/dest_free.py, nodeagent/loops/guard.py)."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel
from nodeagent_sim import memory as simmem

from nodeagent.engine.core import Engine
from nodeagent.host import open_host
from nodeagent.loops.guard import Guardian
from nodeagent.profile import load_profile
from tests.e2e.test_damon import damon_writes, kd, online, run

REPO = Path(__file__).resolve().parents[2]
PAUSED = str(2**64 - 1)
SZ_MIN = "contexts/0/schemes/0/access_pattern/sz/min"
GUARD = "          dest_free: {pause_below: 5%, resume_above: 10%}\n"


def _profile(tmp_path: Path, guard: str = GUARD) -> str:
    """The shipped profile (whatever its own dest_free) with ``guard`` as demote-cold's."""
    lines = [ln for ln in (REPO / "profiles" / "cxl-inference.yaml").read_text().splitlines(keepends=True)
             if "dest_free:" not in ln]
    text = "".join(lines)
    anchor = "          apply_interval: 1s\n    - name: promote-hot\n"
    assert anchor in text
    text = text.replace(anchor, f"          apply_interval: 1s\n{guard}    - name: promote-hot\n")
    (tmp_path / "base.yaml").write_text((REPO / "profiles" / "base.yaml").read_text())
    p = tmp_path / "cxl-inference.yaml"
    p.write_text(text)
    return str(p)


def _fill(k: SimKernel, node: int, pct: float) -> None:
    with k.locked():
        total_kb = simmem.set_free(k, node, 0)[0]
        simmem.set_free(k, node, int(total_kb * pct / 100))


def _plan(capsys, root: Path, profile: str) -> tuple[int, dict]:
    code, out, err = run(capsys, root, "--format", "json", "plan", "--detailed-exitcode", profile)
    return code, json.loads(out)


@pytest.fixture
def applied(make_node, tmp_path, capsys):
    root = make_node("h100-cxl")
    k = online(root, "dax0.0", "dax1.0")
    profile = _profile(tmp_path)
    code, out, err = run(capsys, root, "apply", "--yes", profile)
    assert code == 0, out + err
    assert kd(k, 0, "contexts/0/schemes/0/target_nid") == "2" and kd(k, 0, SZ_MIN) == "4096"
    return root, k, profile


def test_a_full_destination_pauses_the_scheme_with_the_same_pid_and_the_next_plan_is_empty(applied,
                                                                                         capsys) -> None:
    root, k, profile = applied
    pid = kd(k, 0, "pid")
    _fill(k, 2, 3)
    code, out, err = run(capsys, root, "plan", profile)
    assert "dest_free: pause migrate_cold → node2 paused under 102.4GiB free, resumed over 204.8GiB: node2 has " \
           "61.4GiB free (3.0 %)" in out
    assert "access_pattern/sz/min 4096 → 18446744073709551615" in out
    code, plan = _plan(capsys, root, profile)
    assert code == 2 and [c["target"] for c in plan["changes"]] == ["damon.demote-cold-node0"]  # node3 has room
    code, out, err = run(capsys, root, "apply", "--yes", profile)
    assert code == 0 and "Result: converged." in out, out + err
    assert kd(k, 0, SZ_MIN) == PAUSED and kd(k, 0, "pid") == pid and kd(k, 0, "state") == "on"
    assert kd(k, 1, SZ_MIN) == "4096"
    assert [v for p, v, _ in damon_writes(k) if p == "0/state"][-1] == "commit"
    assert _plan(capsys, root, profile)[0] == 0
    code, out, err = run(capsys, root, "--format", "json", "drift", profile)
    assert json.loads(out)["converged"], out + err
    code, out, err = run(capsys, root, "metrics", "show")
    paused = {ln.split("{")[1].split("}")[0]: ln.rsplit(" ", 1)[1] for ln in out.splitlines()
              if ln.startswith("nodeagent_damon_scheme_paused{")}
    assert paused['kdamond="0",name="demote-cold-node0",context="0",scheme="0",action="migrate_cold"'] == "1"
    assert paused['kdamond="1",name="demote-cold-node1",context="0",scheme="0",action="migrate_cold"'] == "0"
    code, out, err = run(capsys, root, "status")  # the paused scheme, as the operator sees the node
    assert "scheme 0/0/0 migrate_cold: paused (matches no region while its destination is nearly full" in out, out
    assert "scheme 1/0/0 migrate_cold: tried " in out
    code, out, err = run(capsys, root, "--format", "json", "status")
    schemes = json.loads(out)["kdamonds"]["schemes"]
    assert [(s["kdamond"], s["scheme"]) for s in schemes if s["paused"]] == [("0", 0)] and len(schemes) > 1


def test_between_the_thresholds_either_state_is_what_the_profile_wants(applied, capsys) -> None:
    root, k, profile = applied
    _fill(k, 2, 7)
    assert _plan(capsys, root, profile)[0] == 0  # running, and in the band: stays running
    _fill(k, 2, 1)
    run(capsys, root, "apply", "--yes", profile)
    _fill(k, 2, 7)
    assert _plan(capsys, root, profile)[0] == 0  # paused, and in the band: stays paused
    assert kd(k, 0, SZ_MIN) == PAUSED
    _fill(k, 2, 12)
    code, out, err = run(capsys, root, "plan", profile)
    assert "dest_free: resume migrate_cold → node2" in out and "18446744073709551615 → 4096" in out
    run(capsys, root, "apply", "--yes", profile)
    assert kd(k, 0, SZ_MIN) == "4096" and _plan(capsys, root, profile)[0] == 0


def test_free_memory_that_moves_while_the_apply_runs_is_said_so_not_blamed_on_the_kernel(applied) -> None:
    root, k, profile = applied
    _fill(k, 2, 3)

    def drain(plan) -> bool:  # type: ignore[no-untyped-def]
        _fill(k, 2, 50)  # after the plan (paused), before the writes: verify sees a node with room again
        return True

    result = Engine(open_host(root)).apply(load_profile(profile), confirm=drain)
    assert kd(k, 0, SZ_MIN) == PAUSED
    assert result.status == "partial"
    assert list(result.verify_errors) == [
        "damon.demote-cold-node0: wrote kdamond 0 committed, same pid, then what it follows moved while this apply "
        "ran — the free memory of node2 (dest_free: resume migrate_cold → node2 paused under 102.4GiB free, resumed "
        "over 204.8GiB: node2 has 1.0TiB free (50.0 %)): the next run follows it"]


def test_a_scheme_drifted_to_another_value_is_written_as_the_profile_says(applied, capsys) -> None:
    root, k, profile = applied
    _fill(k, 2, 7)
    k.write(f"/sys/kernel/mm/damon/admin/kdamonds/0/{SZ_MIN}", "8192")
    code, out, err = run(capsys, root, "plan", profile)
    assert "access_pattern/sz/min 8192 → 4096" in out and "dest_free:" not in out


def test_a_kdamond_built_while_its_destination_is_full_starts_paused(make_node, tmp_path, capsys) -> None:
    root = make_node("h100-cxl")
    k = online(root, "dax0.0", "dax1.0")
    _fill(k, 2, 2)
    profile = _profile(tmp_path)
    code, out, err = run(capsys, root, "plan", profile)
    assert "migrate_cold → node2 (paused: node2 has 41.0GiB free)" in out
    code, out, err = run(capsys, root, "apply", "--yes", profile)
    assert code == 0 and "Result: converged." in out, out + err
    assert kd(k, 0, SZ_MIN) == PAUSED and kd(k, 1, SZ_MIN) == "4096"


@pytest.mark.parametrize(("guard", "says"), [
    ("          dest_free: {pause_below: 10%, resume_above: 5%}\n", "expected 0 < pause_below < resume_above"),
    ("          dest_free: {pause_below: 5%}\n", "resume_above"),
    ("          dest_free: {pause_below: lots, resume_above: 5%}\n", "pause_below"),
])
def test_bad_thresholds_name_the_field(make_node, tmp_path, capsys, guard: str, says: str) -> None:
    root = make_node("h100-cxl")
    code, out, err = run(capsys, root, "validate", _profile(tmp_path, guard))
    assert code != 0 and "dest_free" in err and says in err, out + err


def test_dest_free_on_an_action_without_a_destination_is_refused(make_node, tmp_path, capsys) -> None:
    text = Path(_profile(tmp_path)).read_text().replace(
        "        - action: migrate_hot\n          target_node: fast\n", "        - action: stat\n")
    text = text.replace("          filters: [{type: young, matching: false, allow: false}]",
                        "          filters: [{type: young, matching: false, allow: false}]\n" + GUARD.rstrip("\n"))
    p = tmp_path / "stat.yaml"
    p.write_text(text)
    code, out, err = run(capsys, make_node("h100-cxl"), "validate", str(p))
    assert code != 0 and "`dest_free` applies only to migrate_hot and migrate_cold, not stat" in err, out + err


def test_the_guard_pauses_and_resumes_as_the_destination_fills_and_drains(applied) -> None:
    root, k, profile = applied
    engine = Engine(open_host(root), lock_timeout=5)
    logs: list[str] = []
    g = Guardian(engine, load_profile(profile), interval=0.02, refresh=60, log=logs.append)
    t = threading.Thread(target=g.run)
    t.start()

    def until(value: str) -> None:
        deadline = time.monotonic() + 20
        while kd(k, 0, SZ_MIN) != value:
            assert time.monotonic() < deadline, logs
            time.sleep(0.02)

    try:
        _fill(k, 2, 3)
        until(PAUSED)
        _fill(k, 2, 8)  # in the band: stays paused
        time.sleep(0.3)
        assert kd(k, 0, SZ_MIN) == PAUSED
        _fill(k, 2, 40)
        until("4096")
    finally:
        g.stop()
        t.join(10)
    assert not t.is_alive()
    assert g.applies == 2, logs
    assert logs[0] == ("guarding damon.demote-cold-node0 scheme 0 (migrate_cold → node2: pause under 5 % free, resume "
                       "over 10 %); damon.demote-cold-node1 scheme 0 (migrate_cold → node3: pause under 5 % free, "
                       "resume over 10 %)")
    assert any(m.startswith("damon.demote-cold-node0: pause migrate_cold → node2 (node2 61.4GiB free") for m in logs)
    assert sum(m.startswith("converged in ") for m in logs) == 2, logs
    history = [json.loads(ln) for ln in (root / "var/lib/nodeagent/journal.jsonl").read_text().splitlines()]
    scoped = [e for e in history if e.get("scope") == ["damon.demote-cold-node0"]]
    assert len(scoped) == 2 and all(e["status"] == "converged" for e in scoped), history[-2:]


def test_the_guard_idles_where_no_scheme_has_dest_free(make_node, tmp_path) -> None:
    root = make_node("h100-cxl")
    online(root, "dax0.0", "dax1.0")
    profile = _profile(tmp_path, "")
    logs: list[str] = []
    g = Guardian(Engine(open_host(root)), load_profile(profile), interval=0.01, log=logs.append)
    assert g.run(max_ticks=3) == 0 and g.applies == 0
    assert logs[0].startswith("no running kdamond of nodeagent's has a dest_free scheme here: nothing to guard")


def test_plan_warns_while_no_guard_keeps_the_dest_free_schemes(applied, capsys) -> None:
    root, k, profile = applied
    code, out, err = run(capsys, root, "plan", "-v", profile)
    assert "warning: damon: demote-cold-node0, demote-cold-node1 have dest_free schemes, and no `nodeagent guard` " \
           "keeps them (none has run here)" in out
    # said in full by the apply: counted in one line, not repeated on every run
    code, out, err = run(capsys, root, "plan", profile)
    assert "no `nodeagent guard`" not in out and re.search(
        r"\(\d+ advisor(?:y|ies) already shown for this profile and kernel; see `nodeagent plan --advice`\)", out)
    beat = root / "var/lib/nodeagent/guard.json"
    beat.write_text(json.dumps({"pid": 4242, "profile": "cxl-inference", "time": time.time()}))
    assert "no `nodeagent guard`" not in run(capsys, root, "plan", "-v", profile)[1]
    beat.write_text(json.dumps({"pid": 4242, "profile": "cxl-inference", "time": time.time() - 600}))
    code, out, err = run(capsys, root, "plan", "-v", profile)
    assert "no `nodeagent guard` keeps them (its last heartbeat is 600s old (pid 4242))" in out
    # a guard that stopped is news: said in full without -v, although the "none has run" advisory was said before
    code, out, err = run(capsys, root, "plan", profile)
    assert "warning: damon: demote-cold-node0, demote-cold-node1 have dest_free schemes, and no `nodeagent guard` " \
           "keeps them (its last heartbeat is 600s old (pid 4242))" in out


def test_the_guard_says_it_runs_while_it_runs_and_takes_it_back_when_it_stops(applied) -> None:
    import os

    root, k, profile = applied
    beat = root / "var/lib/nodeagent/guard.json"
    g = Guardian(Engine(open_host(root)), load_profile(profile), interval=0.01, log=lambda m: None)
    seen: list[dict] = []
    g.tick()  # the first tick plans the guarded schemes and beats
    seen.append(json.loads(beat.read_text()))
    assert g.run(max_ticks=2) == 0
    assert seen[0]["pid"] == os.getpid() and seen[0]["profile"] == "cxl-inference"
    assert not beat.exists()


def test_the_guard_plans_afresh_only_when_its_kdamonds_or_nodes_moved(applied, monkeypatch) -> None:
    """A full plan gathers every fact (seconds of CPU under TCG): between them a tick reads two files per scheme,
    and a check of the kdamond slots, the ownership records and the online nodes decides whether to plan again."""
    import nodeagent.loops.guard as guard_mod

    root, k, profile = applied
    plans: list[int] = []
    real = guard_mod.watched
    monkeypatch.setattr(guard_mod, "watched", lambda e, lp: plans.append(1) or real(e, lp))
    g = Guardian(Engine(open_host(root)), load_profile(profile), interval=0, refresh=0, log=lambda m: None)
    for _ in range(5):
        g.tick()
    assert len(plans) == 1 and len(g.schemes) == 2
    _fill(k, 2, 3)  # a pause: the apply commits (same pid) and rewrites the records' timestamps
    g.tick()
    assert kd(k, 0, SZ_MIN) == PAUSED and g.applies == 1
    g.tick()
    g.tick()
    assert len(plans) == 1
    k.write("/sys/kernel/mm/damon/admin/kdamonds/1/state", "off")  # a kdamond stopped: its slot's pid moved
    g.tick()
    assert len(plans) == 2 and [w.name for w in g.schemes] == ["demote-cold-node0"]
