"""External commands (daxctl, systemd-detect-virt, nvidia-smi...) run through ``sh``, rooted like the files.

Every command runs with ``LANG=C``, stdin from ``/dev/null`` and its output on pipes — never a pseudo-terminal,
which a minimal container, a chroot or a unit with ``PrivateDevices=yes`` cannot open. At most
:data:`MAX_OUTPUT` bytes of each stream are kept: a command that prints more is killed and its run is an error.
A command that cannot start raises a :class:`CommandError` naming the binary, the errno and the fix.

Every child runs in a process group of its own (a terminal's Ctrl-C reaches nodeagent, which decides: see
:mod:`nodeagent.engine.signals`), is listed in :data:`RUNNING` while it runs, and is sent SIGTERM by the kernel if
nodeagent dies first (``PR_SET_PDEATHSIG``): no daxctl outlives the nodeagent that started it, or its lock.

On the real root (``/``) a binary is resolved on the host's PATH. On a simulated root it is resolved inside the
simulated tree (the simulator installs fake, faithful executables there), and on any other root nothing is
run: a binary of this host would describe this host, not the node under the root.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import field

from ..util.dataclass import dataclass
from ..util.errors import CommandError

#: Where binaries are looked up inside a simulated root, like a stock PATH.
ROOTED_PATH = ("usr/local/sbin", "usr/local/bin", "usr/sbin", "usr/bin", "sbin", "bin")


#: Children running now (pid → argv): each leads its own process group, so ``killpg(pid)`` reaches it and its own.
RUNNING: dict[int, tuple[str, ...]] = {}
#: The state lock's descriptors while nodeagent holds it (``HostFS.lock``). Every child inherits them, so the
#: lock is held until the last child of a run has exited: a next run cannot plan while a daxctl of a killed one
#: is still finishing its write (SIGTERM from ``PR_SET_PDEATHSIG`` lets it end the write it is in).
HELD_LOCKS: set[int] = set()
_PR_SET_PDEATHSIG = 1


def _death_signal() -> Callable[[], None] | None:
    """What a child runs before exec: ask for SIGTERM when its parent dies, and exit at once if that has
    already happened (between the fork and the request). Loaded in the parent: nothing is looked up in the child."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    locks = tuple(HELD_LOCKS)

    def setup() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)
        for fd in locks:  # opened O_CLOEXEC: inheritable in this child only
            os.set_inheritable(fd, True)

    return setup


#: What to do when a command cannot start, by errno.
_START_FIX = {
    errno.ENOENT: "reinstall the package that provides {name} (the file, or the interpreter its first line "
                  "names, is missing)",
    errno.EACCES: "make {exe} executable (chmod +x) and check that its filesystem is not mounted noexec",
    errno.ENOEXEC: "{exe} is not a program this machine can run (wrong architecture, or a script without a "
                   "#! line): reinstall it",
    errno.ENOMEM: "free memory on the node and run again",
    errno.EAGAIN: "the process limit is reached (ulimit -u, TasksMax= of the unit): raise it and run again",
    errno.EMFILE: "the open-file limit is reached (ulimit -n, LimitNOFILE= of the unit): raise it and run again",
    errno.ENFILE: "the system's open-file table is full: close files or raise fs.file-max, and run again",
    errno.ETXTBSY: "{exe} is being written to (a package upgrade?): wait for it to finish and run again",
}


def _child_errno(text: str) -> int | None:
    """The errno of the child's failed exec, from the traceback text sh reports it with."""
    m = re.search(r"\[Errno (\d+)\]", text)
    return int(m.group(1)) if m else None


def cannot_start(exe: str, err: int | None, text: str = "") -> CommandError:
    """The error of a command that could not start: the binary, the errno text and what to do about it."""
    name = os.path.basename(exe)
    why = f"{os.strerror(err)} (errno {errno.errorcode.get(err, err)})" if err else (text or "unknown error")
    fix = _START_FIX.get(err or 0, "check that {exe} runs by hand on the node, then run again")
    return CommandError(f"cannot start {exe}: {why}", path=exe, hint=fix.format(name=name, exe=exe))


def _stop_group(pid: int) -> None:
    """SIGTERM, then SIGKILL, to the process group of a child being abandoned; reaped before returning."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        for _ in range(100):
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    return
            except ChildProcessError:
                return
            time.sleep(0.02)


#: What nodeagent keeps of one stream of a command's output: daxctl's JSON for the largest machine is a few MiB, a
#: probe's answer a line. A command that prints more is stopped and its run is an error, never memory without end.
MAX_OUTPUT = 16 * 1024 * 1024
_CHUNK = 64 * 1024  # read the pipes in chunks, never a "line" that has no end


class _Capped:
    """One stream of a child's output, kept up to ``limit`` bytes; beyond it the child's process group is killed
    (``pid`` is set once it is known; output earlier than that is checked by :meth:`started`)."""

    def __init__(self, limit: int) -> None:
        self.buf = bytearray()
        self.limit = limit
        self.over = False
        self.pid: int | None = None

    def write(self, chunk: bytes) -> None:
        if self.over:
            return
        if len(self.buf) + len(chunk) > self.limit:
            self.over = True
            self._kill()
            return
        self.buf.extend(chunk)

    def flush(self) -> None:
        pass

    def started(self, pid: int) -> None:
        self.pid = pid
        if self.over:
            self._kill()

    def _kill(self) -> None:
        if self.pid is not None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float


@dataclass
class CommandRunner:
    root: str
    simulated: bool
    log: list[CommandResult] = field(default_factory=list)

    def which(self, name: str) -> str | None:
        """The executable that :meth:`run` would use for ``name``, or ``None`` when there is none."""
        if os.path.realpath(self.root) == "/":
            import shutil  # here: shutil loads the compression modules, and most commands run nothing

            return shutil.which(name)
        if not self.simulated:
            return None
        inside = os.path.realpath(self.root) + "/"
        for d in ROOTED_PATH:
            cand = _under(self.root, d, name)
            # A simulated root's own fake, never a link out of it to this machine's binary (which would act on
            # this machine's kernel).
            if os.path.isfile(cand) and os.access(cand, os.X_OK) and os.path.realpath(cand).startswith(inside):
                return cand
        return None

    def run(self, argv: list[str], *, timeout: float = 120.0, ok_codes: tuple[int, ...] | None = None,
            env: dict[str, str] | None = None) -> CommandResult:
        """Run ``argv`` with ``LANG=C``; the caller decides what a return code means unless ``ok_codes``."""
        name = argv[0]
        exe = self.which(name)
        if exe is None:
            if os.path.realpath(self.root) != "/" and not self.simulated:
                raise CommandError(
                    f"refusing to run {name} for root {_under(self.root)}: a host binary would act on this machine, "
                    "not on the node under --root", hint="use --root / on the node itself, or a simulated root")
            raise CommandError(f"{name}: command not found", hint=f"install the package that provides {name}")
        import sh  # imported here: 100 ms of import that only commands need

        full_env = {k: v for k, v in os.environ.items() if not k.startswith("LC_")}
        full_env.update({"LANG": "C", "LC_ALL": "C"})
        if env:
            full_env.update(env)
        start = time.monotonic()
        out, err = _Capped(MAX_OUTPUT), _Capped(MAX_OUTPUT)
        try:
            # Pipes, never a pseudo-terminal: a tool's output must not depend on one (daxctl's JSON, nvidia-smi's
            # CSV), and a node may have none to give (a container, a chroot, an initramfs, PrivateDevices=yes).
            # Killed by a signal (negative codes) is an answer too, reported as the shell does (128 + signal).
            proc = sh.Command(exe)(*argv[1:], _env=full_env, _timeout=timeout, _ok_code=list(range(-64, 256)),
                                   _return_cmd=True, _in=None, _tty_in=False, _tty_out=False, _bg=True,
                                   _out=out, _err=err, _out_bufsize=_CHUNK, _err_bufsize=_CHUNK,
                                   _bg_exc=False, _new_group=True, _preexec_fn=_death_signal(),
                                   **({"_pass_fds": set(HELD_LOCKS)} if HELD_LOCKS else {}))
            pid = proc.pid
            RUNNING[pid] = tuple([exe, *argv[1:]])
            out.started(pid)
            err.started(pid)
            try:
                proc.wait()
            except BaseException:  # a timeout, or a signal that stops nodeagent here: the child goes too
                _stop_group(pid)
                raise
            finally:
                RUNNING.pop(pid, None)
        except sh.TimeoutException:
            raise CommandError(f"{name} did not finish within {timeout:.0f}s", path=exe) from None
        except sh.ForkException as exc:  # the child could not exec: sh hands back its traceback as text
            raise cannot_start(exe, _child_errno(str(exc))) from None
        except OSError as exc:  # the parent could not set the child up (pipes, fork)
            raise cannot_start(exe, exc.errno, str(exc)) from None
        for stream, sink in (("stdout", out), ("stderr", err)):
            if sink.over:
                raise CommandError(f"{name} printed more than {MAX_OUTPUT} bytes on {stream}, far more than it ever "
                                   "prints: stopped, and its output is not used", path=exe,
                                   hint=f"check that {exe} is the real {name}")
        code = proc.exit_code
        result = CommandResult(tuple([exe, *argv[1:]]), code if code >= 0 else 128 - code,
                               out.buf.decode(errors="replace"), err.buf.decode(errors="replace"),
                               time.monotonic() - start)
        self.log.append(result)
        if ok_codes is not None and result.returncode not in ok_codes:
            msg = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "no message"
            raise CommandError(f"{' '.join(argv)} exited {result.returncode}: {msg}", path=exe,
                               returncode=result.returncode, stderr=result.stderr)
        return result


def _under(root: str, *names: str) -> str:
    """``str(pathlib.PurePosixPath(root, *names))`` for plain relative ``names``: a path under the root spelled
    as it always was (``./node//`` is ``node``), without loading pathlib for it."""
    anchor = "//" if root.startswith("//") and not root.startswith("///") else "/" if root.startswith("/") else ""
    return anchor + "/".join([*(p for p in root.split("/") if p not in ("", ".")), *names]) or "."


def child_alive(pid: int) -> bool:
    """Whether our child ``pid`` still runs (not a zombie): read from this machine's own /proc, whatever the
    root — it is nodeagent's own child, not the node's."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False
