"""What apply cannot do on a node is never drift: status, drift --record (drift.json and the journal) and the
metrics keep it apart, as "cannot be done".

The shape: another agent's kdamond runs on an h100-cxl node, so the profile's kdamonds cannot be added (a plan
problem, not a change); a knob moved away from the profile is real drift beside it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel
from prometheus_client.parser import text_string_to_metric_families

from .cli_helpers import run

REPO = Path(__file__).resolve().parents[2]
PROFILE = str(REPO / "profiles" / "cxl-inference.yaml")
DRIFT_JSON = "var/lib/nodeagent/drift.json"
JOURNAL = "var/lib/nodeagent/journal.jsonl"
FOREIGN_STATE = "/sys/kernel/mm/damon/admin/kdamonds/0/state"
NR_KDAMONDS = "/sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds"


def na(root: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    return run(["--root", str(root), *args], capsys)


def journal(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / JOURNAL).read_text().splitlines()]


def series(path: Path, name: str) -> dict[str, float]:
    return {s.labels["resource"]: s.value for f in text_string_to_metric_families(path.read_text())
            for s in f.samples if s.name == name}


@pytest.fixture
def refused(scratch_dir: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """An h100-cxl node where the profile's kdamonds cannot be added beside a foreign one (apply partial)."""
    root = scratch_dir / "n"
    assert run(["sim", "create", str(root), "--preset", "h100-cxl"], capsys)[0] == 0
    assert run(["sim", "kdamond", str(root), "--foreign"], capsys)[0] == 0
    assert na(root, capsys, "apply", "--yes", PROFILE)[0] == 5
    return root


def test_cannot_be_done_is_recorded_journalled_and_counted_apart(refused: Path, scratch_dir: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    root, prom = refused, scratch_dir / "n.prom"
    before = len(journal(root))
    code, out, _ = na(root, capsys, "--format", "json", "drift", "--record", "--metrics-textfile", str(prom))
    report = json.loads(out)
    assert code == 5 and report["items"] == [] and len(report["cannot_be_done"]) == 1
    state = json.loads((root / DRIFT_JSON).read_text())
    assert state["items"] == {}  # not drift
    [(key, rec)] = state["cannot_be_done"].items()
    assert key == "damon:damon.kdamonds" and "cannot add" in rec["message"] and rec["hint"]
    events = journal(root)[before:]
    assert [e["event"] for e in events] == ["cannot-be-done"]
    assert events[0]["resource"] == "damon" and events[0]["message"] == rec["message"]
    assert sum(series(prom, "nodeagent_drift_items").values()) == 0
    assert series(prom, "nodeagent_cannot_be_done_items")["damon"] == 1
    assert series(prom, "nodeagent_cannot_be_done_items")["knob"] == 0

    # status: no drift, one item that cannot be done (with when it was first seen)
    code, out, _ = na(root, capsys, "--format", "json", "status")
    d = json.loads(out)["drift"]
    assert d["drifted"] == 0 and d["items"] == [] and d["by_resource"] == {}
    assert [p["kind"] for p in d["cannot_be_done"]] == ["damon"] and d["cannot_be_done"][0]["first_seen"]
    code, out, _ = na(root, capsys, "status")
    assert "drift: none\n" in out and "cannot be done on this node (not drift; apply would be partial): 1" in out

    # seen again unchanged: nothing new journalled; history filters the kind
    na(root, capsys, "drift", "--record")
    assert len(journal(root)) == before + 1
    code, out, _ = na(root, capsys, "history", "--event", "cannot-be-done")
    assert code == 0 and out.count("cannot be done damon.kdamonds [damon]") == 1


def test_real_drift_beside_it_is_counted_alone(refused: Path, scratch_dir: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    root, prom = refused, scratch_dir / "n.prom"
    SimKernel(root).write("/proc/sys/kernel/numa_balancing", "1")
    before = len(journal(root))
    assert na(root, capsys, "drift", "--record", "--metrics-textfile", str(prom))[0] == 5  # 5 wins over 3
    state = json.loads((root / DRIFT_JSON).read_text())
    assert list(state["items"]) == ["knob:kernel.numa_balancing"] and list(state["cannot_be_done"]) == [
        "damon:damon.kdamonds"]
    assert sorted(e["event"] for e in journal(root)[before:]) == ["cannot-be-done", "drift"]
    assert series(prom, "nodeagent_drift_items") == {**dict.fromkeys(series(prom, "nodeagent_drift_items"), 0),
                                                     "knob": 1}
    assert series(prom, "nodeagent_cannot_be_done_items")["damon"] == 1
    code, out, _ = na(root, capsys, "--format", "json", "status")
    d = json.loads(out)["drift"]
    assert d["drifted"] == 1 and d["by_resource"] == {"knob": 1} and len(d["cannot_be_done"]) == 1
    out = na(root, capsys, "status")[1]
    assert "drift: 1 (knob: 1)" in out and "cannot be done on this node (not drift; apply would be partial): 1" in out


def test_once_it_can_be_done_it_is_resolved_apart(refused: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = refused
    na(root, capsys, "drift", "--record")
    # its owner stops and removes the foreign kdamond: the profile's kdamonds can be added now
    assert run(["sim", "write", str(root), FOREIGN_STATE, "off"], capsys)[0] == 0
    assert run(["sim", "write", str(root), NR_KDAMONDS, "0"], capsys)[0] == 0
    before = len(journal(root))
    na(root, capsys, "drift", "--record")
    state = json.loads((root / DRIFT_JSON).read_text())
    assert state["cannot_be_done"] == {}
    resolved = [e for e in journal(root)[before:] if e["event"] == "resolved"]
    assert resolved == [{**resolved[0], "resource": "damon", "target": "damon.kdamonds", "cannot_be_done": True}]
    assert "cannot add" in resolved[0]["was"]
    out = na(root, capsys, "history", "--event", "resolved")[1]
    assert "resolved damon.kdamonds [damon]: no longer cannot be done" in out


def test_a_drift_json_from_before_keeps_its_first_sighting(refused: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """drift.json written when problems were kept among the items: they move apart, no event invented."""
    root = refused
    na(root, capsys, "drift", "--record")
    state = json.loads((root / DRIFT_JSON).read_text())
    [(key, rec)] = state.pop("cannot_be_done").items()
    state["items"] = {key: {"resource": rec["resource"], "target": rec["target"], "expected": "(as the profile says)",
                            "actual": rec["message"], "first_seen": 1000.0, "last_seen": 1000.0}}
    (root / DRIFT_JSON).write_text(json.dumps(state))
    before = len(journal(root))
    na(root, capsys, "drift", "--record")
    assert journal(root)[before:] == []  # neither "resolved" nor a new sighting
    state = json.loads((root / DRIFT_JSON).read_text())
    assert state["items"] == {} and state["cannot_be_done"][key]["first_seen"] == "1970-01-01T00:16:40Z"
