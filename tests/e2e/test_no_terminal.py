"""No command needs a terminal: apply converges where no pseudo-terminal can be opened, and a command that cannot
start says which binary, why (the errno) and the fix — never ``None``, never a quiet ``skipped``."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nodeagent.facts import gather
from nodeagent.facts.dax import from_facts as dax_facts
from nodeagent.host import open_host
from tests.checks_helpers import one
from tests.e2e.cli_helpers import run

REPO = Path(__file__).resolve().parents[2]
PROFILE = str(REPO / "profiles" / "cxl-inference.yaml")
CAPACITY = {"gpu_memory": None, "model": {"params": "8B", "dtype": "bf16", "layers": 32, "kv_heads": 8,
                                          "head_dim": 128}, "max_batch": 1, "context_length": 1024}


@pytest.fixture
def no_pty(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pseudo-terminal allocation fails in this process, as in a container without /dev/pts."""
    def fail(*_a: object) -> None:
        raise OSError("out of pty devices")

    monkeypatch.setattr(os, "openpty", fail)
    monkeypatch.setattr(pty, "openpty", fail)


def test_apply_converges_without_a_pty(no_pty, make_node, capsys) -> None:
    root = make_node("h100-cxl")
    code, out, err = run(["--root", str(root), "apply", "--yes", PROFILE], capsys)
    assert code == 0, out + err
    assert "converged" in out and "None" not in out + err
    # daxctl ran (its JSON read through a pipe) and onlined both expanders; nvidia-smi's CSV gave the capacity.
    assert {d.name: d.mode for d in dax_facts(gather(open_host(root))).devices} == \
        {"dax0.0": "system-ram", "dax1.0": "system-ram"}
    code, out, _ = run(["--root", str(root), "--format", "json", "check", PROFILE], capsys)
    cap = {r["name"]: r for r in json.loads(out)["results"]}["capacity"]
    assert cap["status"] != "skipped" and "nvidia-smi" in cap["evidence"]["hbm_source"]


def test_commands_get_pipes_and_lang_c(no_pty, make_node) -> None:
    host = open_host(make_node("qemu-3node"))
    exe = Path(host.root) / "usr/bin/probe-env"
    exe.write_text("#!/bin/sh\n[ -t 1 ] && echo tty || echo pipe\necho \"$LANG $LC_ALL\"\n")
    exe.chmod(0o755)
    res = host.run(["probe-env"])
    assert res.stdout.split("\n")[:2] == ["pipe", "C C"]


@pytest.mark.parametrize("script, errno_text, fix", [
    ("#!/nonexistent/interpreter\n", "No such file or directory (errno ENOENT)", "reinstall the package"),
    # an interpreter that cannot be executed (here a directory; on a real node, a noexec mount)
    ("#!/usr\n", "Permission denied (errno EACCES)", "chmod +x"),
    ("\x7fELF\x02garbage", "Exec format error (errno ENOEXEC)", "not a program this machine can run"),
])
def test_a_command_that_cannot_start_names_binary_errno_and_fix(make_node, script, errno_text, fix) -> None:
    root = make_node("h100-cxl")
    smi = root / "usr/bin/nvidia-smi"
    smi.write_bytes(script.encode())
    r = one(root, "capacity", CAPACITY)
    # never skipped, never "None": the check says which command could not start, why, and the fix
    assert r.status == "fail", r
    msg = r.findings[0].message
    assert f"cannot start {smi}: {errno_text}" in msg and "None" not in msg
    assert fix in (r.findings[0].remedy or "")


def test_a_failing_nvidia_smi_is_reported_not_skipped(make_node) -> None:
    root = make_node("h100-cxl")
    (root / "usr/bin/nvidia-smi").write_text(
        "#!/bin/sh\necho \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"\n"
        "exit 9\n")
    r = one(root, "capacity", CAPACITY)
    assert r.status == "fail"
    assert "exited 9: NVIDIA-SMI has failed because it couldn't communicate" in r.findings[0].message
    assert "NVIDIA driver is loaded" in (r.findings[0].remedy or "")


def test_daxctl_that_cannot_start_fails_the_change_naming_it(make_node, capsys) -> None:
    root = make_node("h100-cxl")
    daxctl = root / "usr/bin/daxctl"
    daxctl.write_text("#!/nonexistent/python\n")
    code, out, err = run(["--root", str(root), "apply", "--yes", "--skip-checks", "all", PROFILE], capsys)
    assert code != 0
    assert f"cannot start {daxctl}: No such file or directory (errno ENOENT)" in out + err
    assert "None" not in out + err


def _unshare_works() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _unshare_works(), reason="needs root and unshare -m (a private mount namespace)")
def test_apply_in_a_mount_namespace_without_devpts(make_node) -> None:
    """The real thing: /dev/pts hidden (an empty tmpfs over it), so /dev/ptmx has no devpts to allocate from;
    /sys and /proc read-only as the suite's namespace guard makes them."""
    root = make_node("h100-cxl")
    script = ("mount -o remount,bind,ro /sys && mount -o remount,bind,ro /proc && mount -t tmpfs none /dev/pts && "
              f"! {sys.executable} -c 'import os; os.openpty()' 2>/dev/null && "
              f"exec {sys.executable} -m nodeagent --root {root} apply --yes {PROFILE}")
    res = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script], capture_output=True,
                         text=True, timeout=300, env={**os.environ, "NODEAGENT_NO_COLOR": "1"})
    assert res.returncode == 0, res.stdout + res.stderr
    assert "converged" in res.stdout and "None" not in res.stdout + res.stderr
