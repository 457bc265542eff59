"""Pure-Python parts of the real-kernel harness (no QEMU, no network, no guest)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path

import harness
import pytest

MIRROR = "http://mirror.invalid/debian"


def test_one_line_sources_with_options_and_comments() -> None:
    text = (
        "# comment\n"
        f"deb [arch=amd64 signed-by=/k.gpg] {MIRROR} bookworm main contrib # tail\n"
        f"deb-src {MIRROR} bookworm main\n"
        "deb http://other.invalid/x nodistro main\n"
    )
    srcs = harness.parse_one_line_sources(text)
    assert srcs[0] == harness.AptSource(MIRROR, ("bookworm",), ("main", "contrib"), "/k.gpg")
    assert [s.uri for s in srcs] == [MIRROR, "http://other.invalid/x"]


def test_deb822_sources_skip_disabled_and_inline_keys() -> None:
    text = (
        "Types: deb\n# a comment\nURIs: " + MIRROR + "\nSuites: bookworm bookworm-updates\n"
        "Components: main\nSigned-By: /usr/share/keyrings/x.gpg\n\n"
        "Types: deb\nURIs: http://off.invalid/\nSuites: bookworm\nComponents: main\nEnabled: no\n\n"
        "Types: deb-src\nURIs: http://src.invalid/\nSuites: bookworm\nComponents: main\n\n"
        "Types: deb\nURIs: http://inline.invalid/\nSuites: trixie\nComponents: main\n"
        "Signed-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n abc\n"
    )
    srcs = harness.parse_deb822_sources(text)
    assert srcs[0] == harness.AptSource(
        MIRROR, ("bookworm", "bookworm-updates"), ("main",), "/usr/share/keyrings/x.gpg"
    )
    assert [s.uri for s in srcs] == [MIRROR, "http://inline.invalid/"]
    assert srcs[1].signed_by is None


def test_host_sources_files_and_private_list(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "a.sources").write_text(
        f"Types: deb\nURIs: {MIRROR}\nSuites: bookworm\nComponents: main\nSigned-By: /k.gpg\n"
    )
    (tmp_path / "sources.list.d" / "b.list.disabled").write_text("deb http://no.invalid/ bookworm main\n")
    mirror = harness.find_debian_mirror(harness.host_apt_sources(tmp_path))
    assert mirror.uri == MIRROR
    assert harness.private_sources_list(mirror) == (
        f"deb [signed-by=/k.gpg] {MIRROR} bookworm main\n"
        f"deb [signed-by=/k.gpg] {MIRROR} bookworm-backports main\n"
    )
    with pytest.raises(harness.HarnessUnavailable):
        harness.find_debian_mirror([], "bookworm")


def test_snapshot_mirror_keeps_check_valid_until_off() -> None:
    [src] = harness.parse_deb822_sources(
        f"Types: deb\nURIs: {MIRROR}\nSuites: bookworm\nComponents: main\nCheck-Valid-Until: no\n"
    )
    [line] = [ln for ln in harness.private_sources_list(src).splitlines() if "backports" in ln]
    assert "check-valid-until=no" in line
    [old] = harness.parse_one_line_sources(f"deb [check-valid-until=no] {MIRROR} bookworm main\n")
    assert old.check_valid_until is False


def test_module_load_order_puts_dependencies_first() -> None:
    dep = harness.parse_modules_dep(
        "kernel/fs/9p/9p.ko.xz: kernel/net/9p/9pnet.ko.xz kernel/fs/netfs/netfs.ko.xz\n"
        "kernel/net/9p/9pnet.ko.xz:\n"
        "kernel/fs/netfs/netfs.ko.xz:\n"
        "kernel/net/9p/9pnet_virtio.ko.xz: kernel/net/9p/9pnet.ko.xz kernel/fs/netfs/netfs.ko.xz\n"
    )
    order = harness.module_load_order(dep, ["9pnet_virtio", "9p"])
    assert order == [
        "kernel/fs/netfs/netfs.ko.xz",
        "kernel/net/9p/9pnet.ko.xz",
        "kernel/net/9p/9pnet_virtio.ko.xz",
        "kernel/fs/9p/9p.ko.xz",
    ]
    with pytest.raises(harness.HarnessUnavailable):
        harness.module_load_order(dep, ["nope"])


def test_parse_console_extracts_exact_streams() -> None:
    m = harness.MARK
    console = (
        f"[ 1.0] boot noise\n{m}:READY uptime=3.1\n{m}:STDOUT-BEGIN\nout\nno-newline\n{m}:STDOUT-END\n"
        f"{m}:STDERR-BEGIN\nerr\n\n{m}:STDERR-END\n{m}:RC=3 uptime=4.50\n[ 4.6] reboot: Power down\n"
    )
    assert harness.parse_console(console) == (3, "out\nno-newline", "err\n", 4.5)
    assert harness.parse_console("kernel panic")[0] is None


def test_steps_script_fences_each_step_on_a_real_shell() -> None:
    steps = [
        harness.Step("a", "echo one; echo two >&2"),
        harness.Step("b", "printf 'x'; exit 3"),
        harness.Step("c", "cd / && pwd"),
    ]
    # the guest's /proc/uptime is read with the shell builtin `read`; here the host's is read-only too
    stdout = subprocess.run(
        ["/bin/sh", "-c", harness.steps_script(steps)], capture_output=True, text=True, check=True
    ).stdout
    res = harness.parse_steps(stdout, steps)
    assert (res["a"].rc, res["a"].stdout, res["a"].stderr) == (0, "one\n", "two\n")
    assert (res["b"].rc, res["b"].stdout, res["b"].stderr) == (3, "x", "")
    assert res["c"].stdout == "/\n"
    assert all(r.seconds is not None and r.seconds >= 0 for r in res.values())


def test_guest_script_quotes_env_and_cwd() -> None:
    script = harness.guest_script("echo hi", cwd="/a b", env={"X": "it's"})
    assert "export X='it'\"'\"'s'" in script
    assert "cd '/a b' || exit 125" in script
    assert script.endswith("echo hi\n")


def test_topology_steps_have_unique_names_and_capture_files() -> None:
    steps = harness.topology_steps(include_venv=True)
    names = [s.name for s in steps]
    assert len(names) == len(set(names))
    captured = [s.capture_as for s in steps if s.capture_as]
    assert len(captured) == len(set(captured))


def test_committed_captures_match_the_scenario() -> None:
    if not harness.CAPTURED_DIR.is_dir():
        pytest.skip("no captured/ fixtures yet (python tests/realkernel/harness.py capture)")
    expected = {s.capture_as for s in harness.topology_steps(include_venv=False) if s.capture_as}
    present = {p.name for p in harness.CAPTURED_DIR.iterdir()}
    assert expected | {"index.json"} <= present


def test_a_sigterm_while_the_guest_runs_kills_it_before_the_process_ends() -> None:
    """A cancelled CI job or a `kill` of pytest must not leave QEMU running (it would hold 5 GiB and a CPU)."""
    before = signal.getsignal(signal.SIGTERM)
    started: list[int] = []
    real_popen = subprocess.Popen

    def popen(*args, **kw):  # type: ignore[no-untyped-def]
        proc = real_popen(*args, **kw)
        started.append(proc.pid)
        return proc

    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        subprocess.Popen = popen  # type: ignore[misc]
        with pytest.raises(SystemExit):
            harness._boot(["sleep", "30"], timeout=60)
    finally:
        subprocess.Popen = real_popen  # type: ignore[misc]
        timer.cancel()
    (pid,) = started
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped: not a zombie, not running
    assert signal.getsignal(signal.SIGTERM) == before


def test_only_a_kernel_that_died_before_init_is_booted_again() -> None:
    panic = "[    1.3] Oops: int3: 0000 [#2] PREEMPT SMP NOPTI\n[    1.3] Kernel panic - not syncing: Fatal exception\n"
    assert harness.died_before_init(panic, 0)
    ready = f"{harness.MARK}:READY uptime=5.1\n" + panic  # the command had started: its failure is reported
    assert not harness.died_before_init(ready, 0)
    assert not harness.died_before_init(panic, None)  # a timeout is reported as one
    assert not harness.died_before_init("[    1.3] booting\n", 0)
