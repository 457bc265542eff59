"""The simulated root's event FIFOs are made and fed through descriptors of its own event directory: a symlink
planted in the root (the directory, the marker directory, or a FIFO's name) never leads a write outside it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from nodeagent.host.udev import SIM_EVENTS, SimSource, UEvent, broadcast
from nodeagent.util.errors import UsageError

EVENT = UEvent(action="add", subsystem="dax", sysname="dax9.0", devpath="/devices/dax9.0")


def test_a_listener_gets_the_event_and_leaves_nothing_behind(tmp_path: Path) -> None:
    src = SimSource(tmp_path, ("dax",))
    assert stat.S_ISFIFO(os.lstat(src.path).st_mode)
    assert broadcast(tmp_path, EVENT) == 1
    assert [e.sysname for e in src.receive()] == ["dax9.0"]
    src.close()
    assert list((tmp_path / SIM_EVENTS).iterdir()) == []


@pytest.mark.parametrize("link", [SIM_EVENTS, SIM_EVENTS.split("/")[0]])
def test_a_symlinked_event_directory_is_refused_and_nothing_is_made_outside(tmp_path: Path, link: str) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / link).parent.mkdir(parents=True, exist_ok=True)
    (root / link).symlink_to(outside)
    with pytest.raises(UsageError, match="symlink or not a directory"):
        SimSource(root, ("dax",))
    with pytest.raises(UsageError):
        broadcast(root, EVENT)
    assert list(outside.iterdir()) == []


def test_broadcast_writes_only_into_fifos_of_the_directory(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim"
    victim.write_text("keep\n")
    os.mkfifo(outside / "their.fifo")
    (tmp_path / "root").mkdir()
    src = SimSource(tmp_path / "root", ("dax",))
    d = tmp_path / "root" / SIM_EVENTS
    (d / "a-link.fifo").symlink_to(victim)  # a symlink named like a FIFO
    (d / "b-fifo-link.fifo").symlink_to(outside / "their.fifo")
    (d / "c-plain.fifo").write_text("")  # a regular file named like one
    (d / "d-hard.fifo").hardlink_to(victim)
    assert broadcast(tmp_path / "root", EVENT) == 1  # the listener's FIFO only
    assert victim.read_text() == "keep\n" and (d / "c-plain.fifo").read_text() == ""
    assert [e.sysname for e in src.receive()] == ["dax9.0"]
    src.close()
