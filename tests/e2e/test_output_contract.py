"""The output contract beyond JSON: what is read from the node cannot drive the terminal, --metrics-textfile
writes only a regular file or a new path, and apply --device names devices the node has."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel

from nodeagent.util.escape import escape_controls
from tests.e2e.cli_helpers import run

REPO = Path(__file__).resolve().parents[2]
PROFILE = str(REPO / "profiles" / "cxl-inference.yaml")
HOSTILE = "\x1b]0;owned\x07\x1b]8;;http://x.invalid/\x1b\\click\x1b]8;;\x1b\\\r\x9b2J\u202eevil"


def test_escape_covers_every_control_character_but_newline_and_tab() -> None:
    for c in [*range(0x00, 0x20), 0x7f, *range(0x80, 0xa0), *range(0x202a, 0x202f), *range(0x2066, 0x206a)]:
        out = escape_controls(f"a{chr(c)}b")
        if chr(c) in "\n\t":
            assert out == f"a{chr(c)}b"
        else:
            assert chr(c) not in out and out.startswith("a\\") and out.endswith("b")
    assert escape_controls("ünïcode → fine 50%") == "ünïcode → fine 50%"


@pytest.mark.parametrize("cmd", [["facts"], ["plan", PROFILE], ["drift", PROFILE], ["status"],
                                 ["apply", "--yes", "--skip-checks", "all", PROFILE]],
                         ids=lambda c: c[0])
def test_node_values_cannot_drive_the_terminal(make_node, capsys, cmd) -> None:
    root = make_node("h100-cxl")
    assert run(["--root", str(root), "apply", "--yes", "--skip-checks", "all", PROFILE], capsys)[0] == 0
    k = SimKernel(root)
    for path in ("/sys/kernel/mm/transparent_hugepage/defrag", "/proc/sys/kernel/numa_balancing",
                 "/proc/sys/kernel/hostname"):
        k.tree.set(path, HOSTILE)
    code, out, err = run(["--root", str(root), *cmd], capsys)
    for stream in (out, err):
        assert not any(ch in stream for ch in "\x1b\x07\r\x9b\u202e"), repr(stream)
    if cmd[0] == "facts":
        assert "\\x1b]0;owned\\x07" in out


def _special(tmp_path: Path, kind: str) -> Path:
    p = tmp_path / "nodeagent.prom"
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "directory":
        p.mkdir()
    elif kind == "symlink":
        (tmp_path / "elsewhere").write_text("precious\n")
        p.symlink_to(tmp_path / "elsewhere")
    elif kind == "device":
        if os.geteuid() != 0:
            pytest.skip("making a device node needs root")
        os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
    return p


@pytest.mark.parametrize("kind", ["fifo", "directory", "symlink", "device"])
@pytest.mark.parametrize("cmd", [["apply", "--yes", "--skip-checks", "all"], ["drift"]], ids=lambda c: c[0])
def test_metrics_textfile_replaces_only_a_regular_file(make_node, tmp_path, capsys, kind, cmd) -> None:
    root = make_node("workstation")
    p = _special(tmp_path, kind)
    before = os.lstat(p)
    journal = root / ".nodeagent-machine/writes.log"
    writes = journal.read_text() if journal.exists() else ""
    code, out, err = run(["--root", str(root), *cmd, "--metrics-textfile", str(p), PROFILE], capsys)
    assert code == 64, out + err
    assert "regular file or a new path" in err or "is a directory" in err, err
    after = os.lstat(p)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
    assert sorted(x.name for x in tmp_path.iterdir() if x.name.startswith(".")) == []  # no temporary left
    if cmd[0] == "apply":  # refused before anything was applied
        assert (journal.read_text() if journal.exists() else "") == writes
    if kind == "symlink":
        assert (tmp_path / "elsewhere").read_text() == "precious\n"


@pytest.mark.parametrize("existing", [False, True])
def test_metrics_textfile_writes_a_new_path_or_replaces_a_regular_file(make_node, tmp_path, capsys, existing) -> None:
    root = make_node("workstation")
    p = tmp_path / "nodeagent.prom"
    if existing:
        p.write_text("stale\n")
    code, out, err = run(["--root", str(root), "drift", "--metrics-textfile", str(p), PROFILE], capsys)
    assert code in (0, 3), out + err
    assert stat.S_ISREG(os.lstat(p).st_mode) and "nodeagent_" in p.read_text()


@pytest.mark.parametrize("device", ["dax99.9", "memory999999", "region42", "not-a-device"])
def test_apply_device_the_node_does_not_have_is_a_usage_error(make_node, capsys, device) -> None:
    root = make_node("h100-cxl")
    code, out, err = run(["--root", str(root), "apply", "--yes", "--device", device, PROFILE], capsys)
    assert code == 64, out + err
    assert device in err and "hint:" in err
    assert not (root / "var/lib/nodeagent/last-applied.json").exists()


def test_apply_device_the_node_has_still_works(make_node, capsys) -> None:
    root = make_node("h100-cxl")
    code, out, err = run(["--root", str(root), "apply", "--yes", "--skip-checks", "all", "--device", "dax0.0",
                          PROFILE], capsys)
    assert code in (0, 5), out + err


@pytest.mark.parametrize("kind", ["fifo", "symlink", "device"])
def test_facts_save_writes_only_a_regular_file(make_node, tmp_path, capsys, kind) -> None:
    root = make_node("workstation")
    p = _special(tmp_path, kind)
    code, out, err = run(["--root", str(root), "facts", "--save", str(p)], capsys)
    assert code == 64 and "--save" in err and "regular file or a new path" in err, out + err
    new = tmp_path / "node.json"
    assert run(["--root", str(root), "facts", "--save", str(new)], capsys)[0] == 0
    assert '"format"' in new.read_text()
