"""Hard links out of the root: a file under the root that is also a file elsewhere (``ln OUTSIDE/victim
ROOT/var/lib/nodeagent/lock``) passes every check of the path, component by component — only its link count
gives it away. Wherever nodeagent writes, appends, locks, reserves or sets aside, such a file is refused and the
file outside is left byte for byte, mode for mode, as it was; files nodeagent replaces are created fresh and
renamed over.

Each test is run for every path nodeagent writes in the class it covers (state files, journal, lock, reserve,
units, NFD features file, kernel attributes of a root without the simulator, the metrics textfile).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from nodeagent.host import open_host
from nodeagent.host.files import write_operator_file
from nodeagent.host.fs import RootedFS
from nodeagent.k8s.labels import FEATURES_FILE
from nodeagent.state import RECORDS, RESERVE, STATE_DIR, StateStore
from nodeagent.state.journal import Journal
from nodeagent.util.errors import NotAllowedError, UsageError

VICTIM = '{"format": 2, "secret": "root:$6$hash:19000:0:99999:7:::"}\n'


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path]:
    root, outside = tmp_path / "root", tmp_path / "outside"
    for d in ("var/lib/nodeagent", "proc/sys/kernel", "sys", "etc/kubernetes/node-feature-discovery/features.d",
              "etc/systemd/system"):
        (root / d).mkdir(parents=True)
    outside.mkdir()
    return root, outside


def hard_link(root: Path, outside: Path, kernel_path: str, mode: int = 0o600) -> Path:
    """``kernel_path`` under ``root`` made a second name of a file outside it; the outside file returned."""
    victim = outside / kernel_path.strip("/").replace("/", "_")
    victim.write_text(VICTIM)
    os.chmod(victim, mode)
    inside = root / kernel_path.lstrip("/")
    inside.parent.mkdir(parents=True, exist_ok=True)
    if inside.exists():
        inside.unlink()
    os.link(victim, inside)
    return victim


def untouched(victim: Path, mode: int = 0o600) -> None:
    st = victim.stat()
    assert victim.read_text() == VICTIM and stat.S_IMODE(st.st_mode) == mode


def no_copies(root: Path) -> None:
    """Nothing under the root holds the outside file's content except the link itself."""
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = Path(dirpath) / n
            if p.is_file() and p.stat().st_nlink == 1:
                assert "secret" not in p.read_text(errors="replace"), f"{p} is a copy of the outside file"


# -- RootedFS: every operation that writes in place -------------------------------------------------------
OPS: dict[str, Callable[[RootedFS, str], object]] = {
    "lock": lambda fs, p: fs.lock(p, 0).__enter__(),
    "append": lambda fs, p: fs.append(p, '{"event": "apply"}\n'),
    "reserve": lambda fs, p: fs.reserve(p, 268_914),
    "write_file_atomic": lambda fs, p: fs.write_file_atomic(p, "{}\n"),
    "rename": lambda fs, p: fs.rename(p, p + ".1"),
    "read_own_opt": lambda fs, p: fs.read_own_opt(p),
}
OWN_PATHS = [f"{STATE_DIR}/lock", f"{STATE_DIR}/journal.jsonl", f"{STATE_DIR}/{RESERVE}",
             *(f"{STATE_DIR}/{r.FILE}" for r in RECORDS), FEATURES_FILE,
             "/etc/systemd/system/nodeagent-drift.service"]


# nodeagent renames only in its state directory (journal rotation, setting a bad file aside)
@pytest.mark.parametrize(("op", "path"), [(op, p) for op in sorted(OPS) for p in OWN_PATHS
                                          if op != "rename" or p.startswith(STATE_DIR)])
def test_every_own_file_operation_refuses_a_hard_link(world: tuple[Path, Path], op: str, path: str) -> None:
    root, outside = world
    victim = hard_link(root, outside, path)
    fs = RootedFS(root)
    with pytest.raises(NotAllowedError, match=r"it has 2 hard links, so it is also a file elsewhere") as exc:
        OPS[op](fs, path)
    assert exc.value.path == path and "remove" in (exc.value.hint or "")
    untouched(victim)
    assert (root / path.lstrip("/")).exists()  # refused, not moved away either
    no_copies(root)


def test_removing_a_hard_link_leaves_the_other_name_alone(world: tuple[Path, Path]) -> None:
    root, outside = world
    victim = hard_link(root, outside, f"{STATE_DIR}/{RESERVE}")
    assert RootedFS(root).remove(f"{STATE_DIR}/{RESERVE}")
    untouched(victim)
    assert victim.stat().st_nlink == 1


def test_a_knob_of_a_root_without_the_simulator_refuses_a_hard_link(world: tuple[Path, Path]) -> None:
    root, outside = world
    victim = hard_link(root, outside, "/proc/sys/kernel/numa_balancing", 0o644)
    fs = RootedFS(root)
    with pytest.raises(NotAllowedError, match="hard links"):
        fs.write("/proc/sys/kernel/numa_balancing", "2")
    untouched(victim, 0o644)
    # one link: the attribute is written as before
    (root / "proc/sys/kernel/numa_balancing").unlink()
    (root / "proc/sys/kernel/numa_balancing").write_text("1")
    fs.write("/proc/sys/kernel/numa_balancing", "2")
    assert (root / "proc/sys/kernel/numa_balancing").read_text() == "2"


def test_a_file_nodeagent_made_itself_is_written_as_before(world: tuple[Path, Path]) -> None:
    root, _ = world
    fs = RootedFS(root)
    with fs.lock(f"{STATE_DIR}/lock", 0):
        pass
    fs.append(f"{STATE_DIR}/journal.jsonl", "{}\n")
    fs.append(f"{STATE_DIR}/journal.jsonl", "{}\n")
    fs.reserve(f"{STATE_DIR}/{RESERVE}", 4096)
    fs.write_file_atomic(f"{STATE_DIR}/ownership.json", "{}\n")
    fs.write_file_atomic(f"{STATE_DIR}/ownership.json", '{"format": 2}\n')
    assert fs.read_own_opt(f"{STATE_DIR}/ownership.json") == '{"format": 2}'
    assert (root / "var/lib/nodeagent/journal.jsonl").read_text() == "{}\n{}\n"
    assert (root / "var/lib/nodeagent" / RESERVE).stat().st_size == 4096


# -- the state store and the journal ------------------------------------------------------------------------
@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.FILE)
@pytest.mark.parametrize("locked", [False, True], ids=["read-only", "writing"])
def test_a_hard_linked_state_file_is_refused_never_read_copied_or_set_aside(world: tuple[Path, Path], record,
                                                                            locked: bool) -> None:
    """The reported case: a hard-linked ``last-applied.json``/``ownership.json`` was copied into
    ``*.corrupt-<time>`` inside the root, a 0600 source becoming a 0644 copy."""
    root, outside = world
    victim = hard_link(root, outside, f"{STATE_DIR}/{record.FILE}")
    store = StateStore(open_host(root))
    with pytest.raises(NotAllowedError, match=f"{STATE_DIR}/{record.FILE}: it has 2 hard links"):
        if locked:
            with store.locked(1):
                store.read(record)
        else:
            store.read(record)
    untouched(victim)
    assert not [p for p in (root / "var/lib/nodeagent").iterdir() if ".corrupt-" in p.name]
    no_copies(root)


def test_a_bad_state_file_is_set_aside_by_rename_keeping_its_mode(world: tuple[Path, Path]) -> None:
    root, _ = world
    path = root / "var/lib/nodeagent/ownership.json"
    path.write_text("{not json")
    os.chmod(path, 0o600)
    ino = path.stat().st_ino
    store = StateStore(open_host(root))
    with store.locked(1):
        assert not store.ownership()
    aside = [p for p in path.parent.iterdir() if p.name.startswith("ownership.json.corrupt-")]
    assert len(aside) == 1 and aside[0].read_text() == "{not json"
    st = aside[0].stat()
    assert st.st_ino == ino and stat.S_IMODE(st.st_mode) == 0o600 and st.st_nlink == 1
    assert json.loads(path.read_text()) == {}


def test_the_journal_refuses_a_hard_link_when_appending_and_reading(world: tuple[Path, Path]) -> None:
    root, outside = world
    victim = hard_link(root, outside, f"{STATE_DIR}/journal.jsonl")
    journal = Journal(open_host(root))
    with pytest.raises(NotAllowedError, match="hard links"):
        journal.append([{"event": "apply", "status": "converged"}])
    with pytest.raises(NotAllowedError, match="hard links"):
        list(journal.read())
    untouched(victim)


def test_a_rotated_journal_that_is_a_hard_link_is_not_read(world: tuple[Path, Path]) -> None:
    root, outside = world
    victim = hard_link(root, outside, f"{STATE_DIR}/journal.jsonl.1")
    with pytest.raises(NotAllowedError, match="journal.jsonl.1: it has 2 hard links"):
        list(Journal(open_host(root)).read())
    untouched(victim)


@pytest.mark.parametrize("name", ["lock", "journal.jsonl", "journal.jsonl.2", RESERVE, *(r.FILE for r in RECORDS)])
def test_a_writing_run_refuses_a_hard_linked_state_file_when_it_takes_the_lock(world: tuple[Path, Path],
                                                                               name: str) -> None:
    root, outside = world
    victim = hard_link(root, outside, f"{STATE_DIR}/{name}")
    store = StateStore(open_host(root))
    with pytest.raises(NotAllowedError, match=f"{STATE_DIR}/{name}: it has 2 hard links.*nothing was written"), \
            store.locked(1):
        pass
    untouched(victim)
    assert not store.writable


def test_a_reserve_linked_after_the_lock_is_refused_and_given_back(world: tuple[Path, Path]) -> None:
    root, outside = world
    store = StateStore(open_host(root))
    with store.locked(1):
        victim = hard_link(root, outside, f"{STATE_DIR}/{RESERVE}")
        with pytest.raises(NotAllowedError, match="hard links"):
            store.reserve([{"x": 1}])
    untouched(victim)
    assert victim.stat().st_nlink == 1  # the refused reserve was given back: its link, not the file


# -- the operator's textfile -------------------------------------------------------------------------------
def test_the_metrics_textfile_refuses_a_hard_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text(VICTIM)
    os.chmod(victim, 0o600)
    prom = tmp_path / "nodeagent.prom"
    os.link(victim, prom)
    with pytest.raises(UsageError, match="--metrics-textfile .*: has 2 hard links"):
        write_operator_file(prom, "nodeagent_up 1\n")
    untouched(victim)
    prom.unlink()
    write_operator_file(prom, "nodeagent_up 1\n")
    assert prom.read_text() == "nodeagent_up 1\n"
