"""The simulator's pooled block attributes on a filesystem with a hard-link limit (ext4: 65,000 per inode)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from nodeagent_sim.tree import RW, Tree


def test_a_full_pooled_copy_rolls_over_to_a_new_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    limit = 3  # links per inode on this pretend filesystem (the copy itself counts one)
    real_link = os.link

    def link(src, dst, *, follow_symlinks=True):  # type: ignore[no-untyped-def]
        if os.lstat(src).st_nlink >= limit:
            raise OSError(errno.EMLINK, os.strerror(errno.EMLINK), src)
        real_link(src, dst, follow_symlinks=follow_symlinks)

    monkeypatch.setattr(os, "link", link)
    tree = Tree(tmp_path)
    for n in range(5):
        tree.new_dir(f"/sys/devices/system/memory/memory{n}", {"state": ("online", RW)}, shared=("state",))
    states = [tmp_path / f"sys/devices/system/memory/memory{n}/state" for n in range(5)]
    assert [p.read_text() for p in states] == ["online\n"] * 5
    assert len({p.stat().st_ino for p in states}) == 3  # 2 + 2 + 1 blocks per pooled copy
    # A later Tree (another process) finds the full copies and links to one with room.
    Tree(tmp_path).new_dir("/sys/devices/system/memory/memory5", {"state": ("online", RW)}, shared=("state",))
    assert (tmp_path / "sys/devices/system/memory/memory5/state").stat().st_nlink <= limit
    # Changing one block's value still changes only that block.
    tree.set("/sys/devices/system/memory/memory0/state", "offline")
    assert [p.read_text() for p in states] == ["offline\n"] + ["online\n"] * 4
