"""Hostile simulated roots through the CLI: a link out of the root is refused with one message, and nothing
outside the root is printed, stored in the state files, copied, created or truncated — by any command."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.e2e.cli_helpers import run

REPO = Path(__file__).resolve().parents[2]
PROFILE = str(REPO / "profiles" / "cxl-inference.yaml")
SECRET = "root:$6$hunter2-hash:19000:0:99999:7:::"
KNOB = "proc/sys/kernel/numa_balancing"

COMMANDS = [
    ["facts"],
    ["--format", "json", "facts"],
    ["plan", PROFILE],
    ["--format", "json", "plan", PROFILE],
    ["apply", "--yes", "--skip-checks", "all", PROFILE],
    ["drift", PROFILE],
    ["status"],
]


@pytest.fixture
def outside(scratch_dir: Path) -> Path:
    d = scratch_dir / "outside"
    d.mkdir()
    (d / "shadow").write_text(SECRET + "\n")
    (d / "lock").write_text("precious\n")
    return d


def tree(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): (p.read_text() if p.is_file() else "<dir>") for p in sorted(d.rglob("*"))}


def _everything_under(root: Path) -> str:
    """All text in the root's state directory (originals.json, history, set-aside copies...)."""
    state = root / "var/lib/nodeagent"
    return "".join(p.read_text(errors="replace") for p in state.rglob("*") if p.is_file() and not p.is_symlink())


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: " ".join(a for a in c if not a.startswith("/")))
@pytest.mark.parametrize("spelling", ["absolute", "relative"])
def test_a_knob_linked_out_of_the_root_is_never_printed_or_stored(make_node, outside, capsys, cmd, spelling) -> None:
    root = make_node("h100-cxl")
    knob = root / KNOB
    knob.unlink()
    target = outside / "shadow"
    knob.symlink_to(target if spelling == "absolute" else os.path.relpath(target, knob.parent))
    before = tree(outside)
    code, out, err = run(["--root", str(root), *cmd], capsys)
    assert "hunter2" not in out + err
    assert "hunter2" not in _everything_under(root)
    assert code != 0 and "outside the root" in err, out + err
    assert tree(outside) == before


@pytest.mark.parametrize("link", ["var", "var/lib", "var/lib/nodeagent", "var/lib/nodeagent/lock"])
@pytest.mark.parametrize("cmd", [["apply", "--yes", "--skip-checks", "all", PROFILE], ["drift", "--record", PROFILE],
                                 ["revert", "--yes"]], ids=lambda c: c[0])
def test_state_linked_out_of_the_root_creates_and_truncates_nothing_outside(make_node, outside, capsys, link,
                                                                             cmd) -> None:
    root = make_node("h100-cxl")
    p = root / link
    if p.is_dir():
        import shutil

        shutil.rmtree(p)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.symlink_to(outside if link != "var/lib/nodeagent/lock" else outside / "lock")
    before = tree(outside)
    code, out, err = run(["--root", str(root), *cmd], capsys)
    assert code != 0, out + err
    assert "symlink" in err, err
    assert tree(outside) == before


def test_a_corrupt_state_file_linked_out_is_not_set_aside(make_node, outside, capsys) -> None:
    root = make_node("h100-cxl")
    state = root / "var/lib/nodeagent"
    state.mkdir(parents=True, exist_ok=True)
    (state / "originals.json").symlink_to(outside / "shadow")
    code, out, err = run(["--root", str(root), "apply", "--yes", "--skip-checks", "all", PROFILE], capsys)
    assert code != 0 and "outside the root" in err
    assert not list(state.glob("*corrupt*"))
    assert "hunter2" not in out + err + _everything_under(root)


def test_an_in_root_state_dir_link_keeps_working(make_node, capsys) -> None:
    """Links that stay inside the root are followed within it (as sysfs's own links are)."""
    root = make_node("h100-cxl")
    (root / "srv/state").mkdir(parents=True)
    state = root / "var/lib/nodeagent"
    if state.exists():
        import shutil

        shutil.rmtree(state)
    state.parent.mkdir(parents=True, exist_ok=True)
    state.symlink_to("../../srv/state")
    code, out, err = run(["--root", str(root), "apply", "--yes", "--skip-checks", "all", PROFILE], capsys)
    assert code == 0, out + err
    assert json.loads((root / "srv/state/last-applied.json").read_text())["status"] == "converged"


def test_a_simulated_root_s_command_linked_out_is_never_run(make_node, scratch_dir) -> None:
    """A fake daxctl replaced by a link to a binary of this machine must not be run: it would act on this
    machine's kernel, not on the simulated node."""
    from nodeagent.host import open_host

    root = make_node("h100-cxl")
    fake = next(p for p in root.glob("usr/*/daxctl"))
    host_bin = scratch_dir / "host-daxctl"
    host_bin.write_text("#!/bin/sh\necho ran-on-the-host\n")
    host_bin.chmod(0o755)
    fake.unlink()
    fake.symlink_to(host_bin)
    host = open_host(root)
    assert host.commands.which("daxctl") is None
    # A link that stays inside the root is the node's own binary.
    fake.unlink()
    (root / "opt").mkdir(exist_ok=True)
    (root / "opt/daxctl").write_text("#!/bin/sh\necho fake\n")
    (root / "opt/daxctl").chmod(0o755)
    fake.symlink_to("../../opt/daxctl")
    assert open_host(root).commands.which("daxctl") == str(fake)


def _knob_paths() -> list[str]:
    from nodeagent.facts.knobs import KNOBS

    return [k.path for k in KNOBS]


@pytest.mark.parametrize("path", _knob_paths())
def test_every_knob_linked_out_is_refused_by_plan_and_apply(make_node, outside, capsys, path) -> None:
    """The whole class: whichever knob is a link out of the root, nothing of its target is printed or stored."""
    root = make_node("workstation")
    knob = root / path.lstrip("/")
    knob.parent.mkdir(parents=True, exist_ok=True)
    if knob.exists() or knob.is_symlink():
        knob.unlink()
    knob.symlink_to(outside / "shadow")
    before = tree(outside)
    for cmd in (["plan", PROFILE], ["apply", "--yes", "--skip-checks", "all", PROFILE]):
        code, out, err = run(["--root", str(root), *cmd], capsys)
        assert code != 0 and "outside the root" in err and "hunter2" not in out + err, out + err
    assert "hunter2" not in _everything_under(root)
    assert tree(outside) == before


def test_the_simulator_never_writes_through_a_link_out_of_its_root(make_node, outside, capsys) -> None:
    """Files nodeagent never reads before apply (a node directory that appears when memory is onlined) are the
    simulator's to write: a link planted there must not make it write this machine's files."""
    root = make_node("h100-cxl")
    for n in (2, 3):
        (root / f"sys/devices/system/node/node{n}").symlink_to(outside)
    before = tree(outside)
    run(["--root", str(root), "apply", "--yes", "--skip-checks", "all", PROFILE], capsys)
    assert tree(outside) == before


def test_tree_writes_refuse_links(tmp_path) -> None:
    from nodeagent_sim.tree import Tree

    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "sys").mkdir(parents=True)
    outside.mkdir()
    (outside / "f").write_text("precious\n")
    (root / "sys/attr").symlink_to(outside / "f")
    (root / "sys/dir").symlink_to(outside)
    t = Tree(root)
    with pytest.raises(OSError):
        t.set("/sys/attr", "1")
    with pytest.raises(OSError):
        t.file("/sys/dir/new", "1")
    with pytest.raises(OSError):
        t.file("/sys/dir/f", "1")
    assert (outside / "f").read_text() == "precious\n" and sorted(os.listdir(outside)) == ["f"]


@pytest.mark.parametrize("name", ["lock", "journal.jsonl", "journal.jsonl.1", ".reserve", "last-applied.json",
                                  "ownership.json", "originals.json", "progress.json"])
@pytest.mark.parametrize("cmd", [["apply", "--yes", "--skip-checks", "all", PROFILE], ["revert", "--yes"]],
                         ids=lambda c: c[0])
def test_a_state_file_hard_linked_out_of_the_root_is_refused_before_any_change(make_node, outside, capsys, name,
                                                                               cmd) -> None:
    """``ln OUTSIDE/victim ROOT/var/lib/nodeagent/<file>``: every component of the path is inside the root, only
    the link count says the file is another one too. Refused with the file named, before the node is changed;
    the file outside keeps its content and its mode, and no copy of it appears under the root."""
    from nodeagent_sim import SimKernel

    root = make_node("h100-cxl")
    state = root / "var/lib/nodeagent"
    state.mkdir(parents=True, exist_ok=True)
    victim = outside / "victim"
    victim.write_text(SECRET + "\n")
    os.chmod(victim, 0o600)
    if (state / name).exists():
        (state / name).unlink()
    os.link(victim, state / name)
    before = tree(outside)
    code, out, err = run(["--root", str(root), *cmd], capsys)
    assert code == 1, out + err
    assert f"/var/lib/nodeagent/{name}: it has 2 hard links" in err and "nothing was written" in err, err
    assert tree(outside) == before and (victim.stat().st_mode & 0o777) == 0o600
    assert not [e for e in SimKernel(root).journal() if e["result"] == "ok"]
    assert "hunter2" not in out + err + "".join(
        p.read_text(errors="replace") for p in state.rglob("*") if p.is_file() and p.stat().st_nlink == 1)


KERNEL_DIRS = ["sys/kernel/mm/damon/admin/kdamonds", "sys/kernel/mm/damon/admin/kdamonds/0", "proc/sys/vm",
               "sys/devices/system/node", "dev"]


@pytest.mark.parametrize("target", KERNEL_DIRS)
@pytest.mark.parametrize("link", ["var/lib/nodeagent", "var/lib", "etc/kubernetes/node-feature-discovery/features.d"])
def test_own_files_never_land_in_the_kernel_s_trees(make_node, capsys, link: str, target: str) -> None:
    """``ln -s ../../sys/kernel/mm/damon/admin/kdamonds ROOT/var/lib/nodeagent`` made apply write its lock,
    journal and state there (the allow-list's ``kdamonds/.*`` matched any name); the NFD features directory
    likewise. State and label directories must resolve outside /sys, /proc and /dev: refused, nothing created."""
    from nodeagent_sim import SimKernel

    root = make_node("qemu-3node")
    (root / target).mkdir(parents=True, exist_ok=True)
    p = root / link
    if p.exists() or p.is_symlink():
        import shutil

        shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    p.parent.mkdir(parents=True, exist_ok=True)
    p.symlink_to(os.path.relpath(root / target, p.parent))
    before = sorted(str(x.relative_to(root)) for x in (root / target).rglob("*"))
    cmd = ["apply", "--yes", "--skip-checks", "all", PROFILE] if "features.d" not in link else \
        ["labels", "--write", PROFILE]
    code, out, err = run(["--root", str(root), *cmd], capsys)
    assert code != 0, out + err
    assert "nodeagent keeps its own files outside /sys, /proc and /dev" in err, err
    assert sorted(str(x.relative_to(root)) for x in (root / target).rglob("*")) == before
    if "features.d" not in link:
        assert not [e for e in SimKernel(root).journal() if e["result"] == "ok"]


def test_a_hard_linked_nfd_features_file_is_refused_and_the_apply_stands(make_node, outside, capsys) -> None:
    """``labels --write`` refuses it naming the file; an apply converges and says the labels were not updated.
    The file outside keeps its content."""
    root = make_node("h100-cxl")
    features = root / "etc/kubernetes/node-feature-discovery/features.d"
    features.mkdir(parents=True, exist_ok=True)
    victim = outside / "victim"
    victim.write_text(SECRET + "\n")
    os.link(victim, features / "nodeagent")
    code, out, err = run(["--root", str(root), "labels", "--write", PROFILE], capsys)
    assert code == 1 and "features.d/nodeagent: it has 2 hard links" in err, out + err
    code, out, err = run(["--root", str(root), "apply", "--yes", "--skip-checks", "all", PROFILE], capsys)
    assert code == 0, out + err
    assert "labels: /etc/kubernetes/node-feature-discovery/features.d/nodeagent not updated" in err, err
    assert victim.read_text() == SECRET + "\n"
