"""apply prints one shape on a terminal, in a pipe and under systemd: checks, plan (before → after), the prompt
(when stdin is a terminal), then the outcomes. Without a terminal it needs --yes. --dry-run is the checks and the
plan."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

from nodeagent_sim import SimKernel

from .cli_helpers import run

PROFILE = str(Path(__file__).resolve().parents[2] / "profiles" / "cxl-inference.yaml")
EXE = [sys.executable, "-c", "import sys; from nodeagent.cli.main import main; sys.exit(main())"]
SECTIONS = ("Checks for profile", "Plan for profile", "Apply these changes?", "Applied profile", "Result: ")


def _order(out: str) -> list[str]:
    found = [(out.find(s), s) for s in SECTIONS if s in out]
    return [s for _, s in sorted(found)]


def _in_a_pty(args: list[str], answer: bytes, timeout: float = 120.0, stdout: int | None = None) -> str:
    """Run with stdin and stderr on a terminal (stdout too, unless given); answer the prompt when it appears."""
    main_fd, sub_fd = pty.openpty()
    proc = subprocess.Popen([*EXE, *args], stdin=sub_fd, stdout=sub_fd if stdout is None else stdout,
                            stderr=sub_fd, close_fds=True)
    os.close(sub_fd)
    out, answered, deadline = b"", False, time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main_fd], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(main_fd, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
                if not answered and b"Apply these changes?" in out:
                    os.write(main_fd, answer)
                    answered = True
            elif proc.poll() is not None:
                break
    finally:
        proc.wait(timeout=30)
        os.close(main_fd)
    return out.decode(errors="replace").replace("\r\n", "\n")


def test_the_same_order_on_a_terminal_and_in_a_pipe(make_node) -> None:
    tty_root, pipe_root = make_node("h100-cxl"), make_node("h100-cxl")
    on_tty = _in_a_pty(["apply", PROFILE, "--root", str(tty_root)], b"y\n")
    piped = subprocess.run([*EXE, "apply", "--yes", PROFILE, "--root", str(pipe_root)], capture_output=True, text=True,
                           stdin=subprocess.DEVNULL, timeout=120)
    assert piped.returncode == 0, piped.stderr
    assert _order(on_tty) == list(SECTIONS)
    assert _order(piped.stdout) == [s for s in SECTIONS if s != "Apply these changes?"]
    # progress of long work on the terminal only (onlining each expander's 1024 blocks), never in a pipe
    assert re.search(r"dax0\.0: .*: \d+/1024 \(\d+%\)", on_tty), on_tty
    assert "/1024 (" not in piped.stdout + piped.stderr
    # the plan (before → after) is there wherever it runs, before the outcomes
    for out in (on_tty, piped.stdout):
        assert "~ kernel.demotion_enabled  false → true" in out
        assert out.index("false → true") < out.index("Applied profile")


def test_declining_on_a_terminal_writes_nothing(make_node) -> None:
    root = make_node("small")
    out = _in_a_pty(["apply", PROFILE, "--root", str(root)], b"n\n")
    assert _order(out) == ["Checks for profile", "Plan for profile", "Apply these changes?"]
    assert "Not confirmed: nothing was written." in out


def test_piped_stdout_still_asks_on_the_terminal(make_node, tmp_path) -> None:
    """`nodeagent apply P | tee log`: stdin is the terminal, so the person is asked (on stderr), and `n` writes
    nothing; the log gets the checks and the plan, not the question."""
    root = make_node("small")
    before = SimKernel(root).journal()
    log = tmp_path / "log"
    with log.open("wb") as f:
        terminal = _in_a_pty(["apply", PROFILE, "--root", str(root)], b"n\n", stdout=f.fileno())
    assert "Apply these changes? [y/N]" in terminal
    piped = log.read_text()
    assert _order(piped) == ["Checks for profile", "Plan for profile"]
    assert "Not confirmed: nothing was written." in piped
    assert SimKernel(root).journal() == before


def test_no_terminal_and_no_yes_refuses(make_node) -> None:
    """No terminal to ask on and no --yes (cron, a script, `ssh host nodeagent apply`): exit 64, nothing written,
    the fix named — never a silent yes."""
    root = make_node("small")
    before = SimKernel(root).journal()
    r = subprocess.run([*EXE, "apply", PROFILE, "--root", str(root)], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=120)
    assert r.returncode == 64, r.stderr
    assert "stdin is not a terminal" in r.stderr and "nothing was written" in r.stderr
    assert "pass --yes" in r.stderr
    assert "Plan for profile" in r.stdout  # what would have changed is still shown
    assert SimKernel(root).journal() == before
    # JSON: the refusal is in the one document too
    r = subprocess.run([*EXE, "--format", "json", "apply", PROFILE, "--root", str(root)], capture_output=True,
                       text=True, stdin=subprocess.DEVNULL, timeout=120)
    assert r.returncode == 64 and json.loads(r.stdout)["error"]["exit_code"] == 64
    # a converged node has nothing to consent to: the timer-style run without --yes succeeds
    assert subprocess.run([*EXE, "apply", "--yes", PROFILE, "--root", str(root)], capture_output=True,
                          stdin=subprocess.DEVNULL, timeout=120).returncode == 0
    r = subprocess.run([*EXE, "apply", PROFILE, "--root", str(root)], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=120)
    assert r.returncode == 0 and "No changes" in r.stdout, r.stderr


def test_dry_run_is_the_checks_and_the_plan(make_node, capsys) -> None:
    root = make_node("small")
    code, out, _ = run(["apply", PROFILE, "--dry-run", "--root", str(root)], capsys)
    assert code == 0
    assert _order(out) == ["Checks for profile", "Plan for profile"]
    assert out.rstrip().endswith("(dry run: nothing was written)")
    code, plan_out, _ = run(["plan", PROFILE, "--root", str(root)], capsys)
    assert plan_out in out  # exactly the plan's output, after the checks


def test_counts_agree_before_and_after_apply(make_node, capsys) -> None:
    root = make_node("small")
    _, before, _ = run(["plan", PROFILE, "--root", str(root)], capsys)
    summary = before.rstrip().splitlines()[-1]  # "5 to change, 4 unchanged."
    changed, unchanged = (int(part.split()[0]) for part in summary.rstrip(".").split(", ")[:2])
    assert run(["apply", "--yes", PROFILE, "--root", str(root)], capsys)[0] == 0
    _, after, _ = run(["plan", PROFILE, "--root", str(root)], capsys)
    assert after.rstrip().endswith(f"({changed + unchanged} managed settings).")


def test_revert_needs_the_same_consent(make_node) -> None:
    root = make_node("small")
    assert subprocess.run([*EXE, "apply", "--yes", PROFILE, "--root", str(root)], capture_output=True,
                          stdin=subprocess.DEVNULL, timeout=120).returncode == 0
    before = SimKernel(root).journal()
    r = subprocess.run([*EXE, "revert", "--root", str(root)], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=120)
    assert r.returncode == 64 and "revert would change this node" in r.stderr and "pass --yes" in r.stderr
    assert SimKernel(root).journal() == before


def test_json_on_a_terminal_shows_the_plan_on_stderr_before_asking(make_node, tmp_path) -> None:
    """--format json keeps stdout for the one document; the person still sees what they are asked about."""
    root = make_node("small")
    doc = tmp_path / "doc.json"
    with doc.open("wb") as f:
        terminal = _in_a_pty(["--format", "json", "apply", PROFILE, "--root", str(root)], b"n\n",
                             stdout=f.fileno())
    assert "Plan for profile" in terminal and "Apply these changes? [y/N]" in terminal
    assert json.loads(doc.read_text())["dry_run"] is True  # declined: reported as not carried out
