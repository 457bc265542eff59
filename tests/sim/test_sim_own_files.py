"""The simulator's own files (state, write journal, uevent and command logs, faults) are reached through a
descriptor of its directory: a symlink or hard link planted there, or a symlinked directory, is refused and no
file outside the root is written, replaced or appended to."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel, faults, hotplug, ownfiles

MARKER = ownfiles.MARKER


def _victim(root: Path) -> Path:
    """A file outside the root on the root's own filesystem (a hard link cannot cross filesystems)."""
    v = root.parent / f"{root.name}-outside-victim"
    v.write_text("keep\n")
    return v


@pytest.mark.parametrize("name", ["writes.log", "uevents.log", "state.json", "lock", "faults.json"])
@pytest.mark.parametrize("how", ["symlink", "hardlink"])
def test_a_planted_link_is_refused_and_the_outside_file_kept(make_node, name: str, how: str) -> None:
    root = make_node("qemu-3node")
    k = SimKernel(root)
    victim = _victim(root)
    target = root / MARKER / name
    target.unlink(missing_ok=True)
    (target.symlink_to if how == "symlink" else target.hardlink_to)(victim)
    actions = {
        "writes.log": lambda: k.write("/proc/sys/vm/zone_reclaim_mode", "1"),
        "uevents.log": lambda: hotplug.emit(k, "add", "dax", "dax9.0"),
        "state.json": lambda: k.save_state({"x": 1}),
        "lock": lambda: k.write("/proc/sys/vm/zone_reclaim_mode", "1"),
        "faults.json": lambda: faults.add(root, faults.Rule(write="zone_reclaim_mode", errno="EIO")),
    }
    try:
        actions[name]()
    except OSError as exc:
        assert exc.errno in (errno.ELOOP, errno.EMLINK), exc
    assert victim.read_text() == "keep\n"
    if name == "state.json":  # replaced by a new file, not written through
        assert not target.is_symlink() and target.stat().st_nlink == 1


def test_a_symlinked_simulator_directory_is_refused(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / MARKER).symlink_to(outside)
    with pytest.raises(OSError) as info:
        ownfiles.append(root, "writes.log", "x\n")
    assert info.value.errno == errno.ELOOP
    with pytest.raises(OSError):
        ownfiles.replace(root, "state.json", "{}")
    assert list(outside.iterdir()) == []


def test_a_directory_swapped_for_a_symlink_after_its_check_is_caught_at_the_write(make_node) -> None:
    """The emulated kernel checked .../vm once (and remembers it); swapped for a symlink to an outside directory
    while a writer was stopped, the next write through the same kernel object is refused there, not written
    outside (it opens the directory at the write and compares it with what it checked)."""
    import shutil

    root = make_node("qemu-3node")
    k = SimKernel(root)
    k.write("/proc/sys/vm/zone_reclaim_mode", "1")  # the directory is checked and remembered
    vm = root / "proc" / "sys" / "vm"
    outside = root.parent / f"{root.name}-outside-vm"
    shutil.copytree(vm, outside)
    (outside / "zone_reclaim_mode").write_text("0\n")
    shutil.rmtree(vm)
    vm.symlink_to(outside)
    with pytest.raises(OSError) as info:
        k.tree.set("/proc/sys/vm/zone_reclaim_mode", 4)
    assert info.value.errno == errno.EXDEV
    assert (outside / "zone_reclaim_mode").read_text() == "0\n"
