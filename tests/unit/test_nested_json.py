"""Deeply nested JSON (``[`` × 100,000) in every JSON input is one clear message naming the file, never an
internal ``RecursionError``, and the state a run leaves is recorded.

The inputs: every state file (``last-applied.json``, ``ownership.json``, ...), a journal line, a ``--facts`` file,
a daxctl's stdout (a substituted one, mid-apply: once the run stopped after 9 of 13 changes, status left
``in-progress``), ``cxl list``'s stdout, the guard's heartbeat, the profile cache's entries (in
test_bounded_readers) and a uevent line (each parsed by nodeagent.util.jsonin).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nodeagent_sim.fake_daxctl import commands

from nodeagent.facts.cxl_cli import parse_cxl_list
from nodeagent.host import open_host
from nodeagent.kinds.dax.daxctl import parse_device_json
from nodeagent.state import RECORDS, STATE_DIR, StateStore
from nodeagent.state.journal import Journal
from nodeagent.util import jsonin
from tests.e2e.cli_helpers import run

DEEP = "[" * 100_000
REPO = Path(__file__).resolve().parents[2]
PROFILE = str(REPO / "profiles" / "cxl-inference.yaml")


def test_the_parser_turns_nesting_into_a_value_error() -> None:
    for doc in (DEEP, "{\"a\":" * 100_000, DEEP + "]" * 100_000):
        with pytest.raises(jsonin.TooDeepError, match="nested too deeply") as exc:
            jsonin.loads(doc)
        assert isinstance(exc.value, ValueError)
    assert jsonin.loads("[" * 100 + "]" * 100) is not None  # real documents nest a few levels


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    (r / "sys").mkdir(parents=True)
    (r / "proc").mkdir()
    (r / STATE_DIR.lstrip("/")).mkdir(parents=True)
    return r


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.FILE)
def test_a_nested_state_file_is_named_and_read_as_empty(root: Path, record) -> None:
    (root / STATE_DIR.lstrip("/") / record.FILE).write_text(DEEP)
    store = StateStore(open_host(root))
    assert store.read(record).to_json() == record().to_json()
    assert f"{STATE_DIR}/{record.FILE} is corrupt (nested too deeply" in store.warnings[0], store.warnings


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.FILE)
def test_a_writing_run_sets_a_nested_state_file_aside(root: Path, record) -> None:
    path = root / STATE_DIR.lstrip("/") / record.FILE
    path.write_text(DEEP)
    store = StateStore(open_host(root))
    with store.locked(1):
        assert store.read(record).to_json() == record().to_json()
    aside = [p for p in path.parent.iterdir() if p.name.startswith(f"{record.FILE}.corrupt-")]
    assert len(aside) == 1 and aside[0].read_text() == DEEP
    assert json.loads(path.read_text()) == {}
    assert "set aside as" in store.warnings[0] and "nested too deeply" in store.warnings[0]


def test_a_nested_journal_line_is_skipped_and_the_rest_read(root: Path) -> None:
    journal = Journal(open_host(root))
    journal.append([{"event": "apply", "status": "converged"}])
    with open(root / "var/lib/nodeagent/journal.jsonl", "a") as f:
        f.write(DEEP + "\n")
    journal.append([{"event": "revert", "status": "reverted"}])
    assert [e["event"] for e in journal.read()] == ["apply", "revert"] and journal.skipped == 1


def test_nested_command_output_is_not_json() -> None:
    with pytest.raises(ValueError, match="daxctl printed something that is not JSON .nested too deeply"):
        parse_device_json(DEEP)
    with pytest.raises(ValueError, match="nested too deeply"):
        parse_cxl_list(DEEP)


def test_a_nested_facts_file_names_the_file(tmp_path: Path, capsys) -> None:
    facts = tmp_path / "node1.json"
    facts.write_text(DEEP)
    code, out, err = run(["plan", "--facts", str(facts), str(REPO / "profiles/base.yaml")], capsys)
    assert code == 65, out + err
    assert f"{facts}: not JSON (nested too deeply" in err and "Traceback" not in err and "internal" not in err


# -- through the CLI, on a simulated node -------------------------------------------------------------------
@pytest.mark.parametrize("name", ["last-applied.json", "ownership.json", "originals.json", "progress.json"])
def test_an_apply_over_a_nested_state_file_converges_and_records_it(make_node, capsys, name: str) -> None:
    root = make_node("qemu-3node")
    state = root / STATE_DIR.lstrip("/")
    state.mkdir(parents=True, exist_ok=True)
    (state / name).write_text(DEEP)
    code, out, err = run(["--root", str(root), "--format", "json", "apply", "--yes", "--skip-checks", "all",
                          PROFILE], capsys)
    assert code == 0, out + err
    doc = json.loads(out)
    assert doc["status"] == "converged"
    assert f"{STATE_DIR}/{name} was corrupt (nested too deeply" in out, out  # a warning of the plan
    assert json.loads((state / "last-applied.json").read_text())["status"] == "converged"
    assert [p for p in state.iterdir() if p.name.startswith(f"{name}.corrupt-")]


def test_a_substituted_daxctl_printing_nested_json_does_not_stop_the_apply(make_node, capsys) -> None:
    """The reported case: the apply died with RecursionError after 9 of 13 changes, status left in-progress."""
    root = make_node("qemu-3node")
    real = root / "usr/bin/daxctl"
    real.rename(root / "usr/bin/daxctl-sim")
    real.write_text('#!/bin/sh\n"$(dirname "$0")/daxctl-sim" "$@" >/dev/null\nrc=$?\n'
                    "head -c 100000 /dev/zero | tr '\\0' '['\nexit $rc\n")
    real.chmod(0o755)
    code, out, err = run(["--root", str(root), "--format", "json", "apply", "--yes", "--skip-checks", "all",
                          PROFILE], capsys)
    assert code == 0, out + err
    assert json.loads(out)["status"] == "converged" and "Traceback" not in err
    assert commands(root), "the substituted daxctl ran"
    last = json.loads((root / STATE_DIR.lstrip("/") / "last-applied.json").read_text())
    assert last["status"] == "converged"
    assert not (root / STATE_DIR.lstrip("/") / "progress.json").exists()
    code, out, _ = run(["--root", str(root), "--format", "json", "plan", PROFILE], capsys)
    assert code == 0 and json.loads(out)["changes"] == []
