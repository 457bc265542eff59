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


def test_a_kernel_suite_of_the_same_mirror_joins_the_private_list(monkeypatch: pytest.MonkeyPatch) -> None:
    mirror = harness.AptSource(MIRROR, ("bookworm",), ("main",), "/k.gpg")
    assert harness.private_sources_list(mirror, "trixie-backports").splitlines()[2:] == [
        f"deb [signed-by=/k.gpg] {MIRROR} trixie-backports main"]
    assert harness.private_sources_list(mirror, "bookworm-backports") == harness.private_sources_list(mirror)
    monkeypatch.delenv("NODEAGENT_RK_CACHE", raising=False)
    monkeypatch.setenv("NODEAGENT_CACHE", "/c")
    monkeypatch.setenv(harness.KERNEL_SUITE_ENV, "trixie-backports")
    assert harness._cache_dir_from_env() == Path("/c/realkernel-trixie-backports")  # its own assets
    monkeypatch.delenv(harness.KERNEL_SUITE_ENV)
    assert harness._cache_dir_from_env() == Path("/c/realkernel")


def test_a_split_kernel_package_brings_its_pinned_parts() -> None:
    """Debian's 7.x linux-image-V holds no file: the vmlinuz, modules and modules.builtin are packages it pins."""

    class Apt:
        def show_field(self, spec: str, name: str) -> str:
            assert (spec, name) == ("linux-image-7.3.4+deb13-amd64=7.3.4-1~bpo13+1", "Depends")
            return ("dracut | initramfs-tools (>= 0.120+deb8u2) | linux-initramfs-tool, linux-base-7.3.4+deb13-amd64 "
                    "(= 7.3.4-1~bpo13+1), linux-binary-7.3.4+deb13-amd64 (= 7.3.4-1~bpo13+1), "
                    "linux-modules-7.3.4+deb13-amd64 (= 7.3.4-1~bpo13+1)")

    assert harness._kernel_parts(Apt(), "linux-image-7.3.4+deb13-amd64=7.3.4-1~bpo13+1") == [  # type: ignore[arg-type]
        "linux-base-7.3.4+deb13-amd64=7.3.4-1~bpo13+1", "linux-binary-7.3.4+deb13-amd64=7.3.4-1~bpo13+1",
        "linux-modules-7.3.4+deb13-amd64=7.3.4-1~bpo13+1"]


def test_a_merged_usr_kernel_is_laid_out_as_the_6_12_packages_are(tmp_path: Path) -> None:
    mods = tmp_path / "usr/lib/modules/7.3.4+deb13-amd64"
    (mods / "kernel").mkdir(parents=True)
    (mods / "vmlinuz").write_bytes(b"bzImage")
    harness._merged_usr_kernel(tmp_path)
    assert (tmp_path / "boot/vmlinuz-7.3.4+deb13-amd64").read_bytes() == b"bzImage"
    assert (tmp_path / "lib/modules/7.3.4+deb13-amd64/kernel").is_dir()
    assert not (tmp_path / "lib/modules/7.3.4+deb13-amd64/vmlinuz").exists()


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


def test_an_int3_panic_while_the_command_ran_is_run_again_and_no_other_panic_is() -> None:
    ready = f"{harness.MARK}:READY uptime=5.1\n"
    int3 = (ready + "[   40.2] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI\n[   40.2] RIP: 0010:sched_clock_cpu+0x9/0x190\n"
            "[   40.3] Kernel panic - not syncing: Fatal exception in interrupt\n")
    assert harness.died_patching_text(int3, 0)
    assert harness.died_patching_text(int3.replace(ready, ""), 0)  # at boot too
    assert not harness.died_patching_text(int3, None)  # a timeout is reported as one
    null = (ready + "[   40.2] BUG: kernel NULL pointer dereference\n"
            "[   40.3] Kernel panic - not syncing: Fatal exception\n")
    assert not harness.died_patching_text(null, 0) and not harness.died_before_init(null, 0)
    assert not harness.died_patching_text(ready + "[   40.2] Oops: int3: 0000 [#1]\n", 0)  # the guest lived on
    # a command that printed both words (a dmesg it was asked for) and exited is not run again
    assert not harness.died_patching_text(int3 + f"{harness.MARK}:RC=0 uptime=41.0\n", 0)


# --------------------------------------------------------------------------- native/: the QEMU plugin's decoder

#: instruction bytes -> whether QEMU's x86 emulation prepares it as one block access (target/i386/tcg/access.c)
BLOCK_ACCESS = {
    "0f ae 00": True,        # fxsave (%rax)
    "48 0f ae 08": True,     # fxrstor64 (%rax)
    "0f ae 20": True,        # xsave (%rax)
    "48 0f ae 6c 24 08": True,  # xrstor64 0x8(%rsp)
    "0f ae 30": True,        # xsaveopt (%rax)
    "48 0f c7 20": True,     # xsavec64 (%rax): glibc's lazy binding saves registers with it, on the stack
    "48 0f c7 28": True,     # xsaves64 (%rax)
    "48 0f c7 1f": True,     # xrstors64 (%rdi)
    "db 28": True,           # fldt (%rax)
    "db 7d f0": True,        # fstpt -0x10(%rbp)
    "d9 30": True,           # fnstenv (%rax)
    "dd 20": True,           # frstor (%rax)
    "dd 36": True,           # fnsave (%rsi)
    "df 20": True,           # fbld (%rax)
    "64 48 0f ae 20": True,  # xsave64 %fs:(%rax): a segment prefix before REX
    "0f ae e8": False,       # lfence: a register form
    "0f ae f0": False,       # mfence
    "0f ae 10": False,       # ldmxcsr (%rax): 4 bytes, not a block
    "0f ae 38": False,       # clflush (%rax)
    "48 0f c7 08": False,    # cmpxchg16b (%rax)
    "0f c7 f0": False,       # rdrand %eax
    "d9 00": False,          # flds (%rax)
    "dd 18": False,          # fstpl (%rax)
    "db c0": False,          # fcmovnb: x87 register form
    "0f": False,             # cut short
    "": False,
}

DRIVER = r"""
#include <stdio.h>
#include <string.h>
#include "x86_block_access.c"
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb) { (void)tb; return 0; }
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t i)
    { (void)tb; (void)i; return 0; }
size_t qemu_plugin_insn_data(const struct qemu_plugin_insn *n, void *d, size_t l)
    { (void)n; (void)d; (void)l; return 0; }
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id,
    void (*cb)(qemu_plugin_id_t, struct qemu_plugin_tb *)) { (void)id; (void)cb; }
void qemu_plugin_register_vcpu_mem_cb(struct qemu_plugin_insn *n,
    void (*cb)(unsigned int, qemu_plugin_meminfo_t, uint64_t, void *), int f, int rw, void *u)
    { (void)n; (void)cb; (void)f; (void)rw; (void)u; }
int main(void)
{
    char line[256];
    while (fgets(line, sizeof(line), stdin)) {
        uint8_t code[16];
        size_t n = 0;
        unsigned v;
        int used;
        for (char *p = line; n < sizeof(code) && sscanf(p, "%x%n", &v, &used) == 1; p += used)
            code[n++] = (uint8_t)v;
        printf("%d\n", x86_block_access(code, n));
    }
    return 0;
}
"""


def test_the_plugin_instruments_the_block_accesses_and_nothing_else(tmp_path: Path) -> None:
    """The decoder of native/x86_block_access.c, compiled with the flags the harness uses, against instruction
    bytes as an assembler writes them."""
    (tmp_path / "driver.c").write_text(DRIVER)
    exe = harness.build_native("driver", tmp_path / "out", src_dir=tmp_path, include=(harness.NATIVE_DIR,))
    cases = list(BLOCK_ACCESS)
    out = subprocess.run([str(exe)], input="".join(c + "\n" for c in cases), capture_output=True, text=True,
                         check=True, timeout=60).stdout.split()
    assert dict(zip(cases, (o == "1" for o in out), strict=True)) == BLOCK_ACCESS


def test_native_builds_are_named_by_source_and_rebuilt_on_change(tmp_path: Path) -> None:
    src = tmp_path / "prog.c"
    src.write_text("int main(void) { return 3; }\n")
    first = harness.build_native("prog", tmp_path / "out", src_dir=tmp_path)
    assert subprocess.run([str(first)]).returncode == 3
    assert harness.build_native("prog", tmp_path / "out", src_dir=tmp_path) == first  # cached
    src.write_text("int main(void) { return 4; }\n")
    second = harness.build_native("prog", tmp_path / "out", src_dir=tmp_path)
    assert second != first and subprocess.run([str(second)]).returncode == 4
    src.write_text("int main(void) { int unused; return 0; }\n")  # the harness builds with -Werror
    with pytest.raises(harness.HarnessUnavailable, match="(?s)cannot build .*prog.c.*unused variable"):
        harness.build_native("prog", tmp_path / "out", src_dir=tmp_path)


def test_a_qemu_killed_by_a_signal_is_named() -> None:
    assert harness.qemu_exit(0) == "qemu exit 0"
    assert harness.qemu_exit(-11) == "qemu exit -11: QEMU itself died of SIGSEGV"
    assert harness.qemu_exit(-99) == "qemu exit -99: QEMU itself died of signal 99"
