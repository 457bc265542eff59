"""Rooted reads and writes of kernel attributes and state files: the only code that touches the node's files.

Every path is given as the kernel names it (``/proc/sys/kernel/numa_balancing``) and resolved under the host's
root. Writes are checked against an allow-list, never follow a symlink out of the root, go through the
simulator when the root is a simulated node, and are logged. ``errno`` maps to domain errors in one table.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..errors import (
    BusyError,
    HostError,
    LockTimeoutError,
    MissingError,
    NotAllowedError,
    PermissionDeniedError,
    RejectedError,
)

#: Every path the agent may ever write. A profile cannot widen this: it names settings, never paths.
WRITE_ALLOW: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p)
    for p in (
        r"/proc/sys/kernel/numa_balancing",
        r"/proc/sys/kernel/numa_balancing_promote_rate_limit_MBps",
        r"/proc/sys/vm/zone_reclaim_mode",
        r"/sys/kernel/mm/numa/demotion_enabled",
        r"/sys/kernel/mm/transparent_hugepage/(enabled|defrag)",
        r"/sys/devices/system/memory/auto_online_blocks",
        r"/sys/devices/system/memory/memory[0-9]+/(state|online)",
        r"/sys/kernel/mm/damon/admin/kdamonds/.*",
        # The placement demotion pass (resources/placement.py): one bounded proactive reclaim of a fast node that
        # kswapd gave up on — the node's own file (6.17), else the root cgroup's memory.reclaim (5.19, below).
        r"/sys/devices/system/node/node[0-9]+/reclaim",
        r"/var/lib/nodeagent/.*",
        # `nodeagent units install`: only nodeagent's own unit files and udev rule, nothing else under /etc.
        r"/etc/systemd/system/nodeagent-[a-z-]+@?\.(service|timer)",
        r"/etc/udev/rules.d/[0-9]{2}-nodeagent\.rules",
    )
)

#: Paths allowed only at the top of a mount of this filesystem type, as the root's /proc/self/mountinfo shows it
#: at the time of the write: the root cgroup's memory.reclaim wherever cgroup v2 is mounted — never in a child
#: cgroup, never in a v1 hierarchy (type "cgroup"), never outside a cgroup2 mount. Nothing else of a cgroup:
#: nodeagent never configures cgroups.
WRITE_ALLOW_MOUNTED: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(/[^/]+)+/memory\.reclaim"), "cgroup2"),
)


def allowed_by_mount(fs: RootedFS, path: str) -> bool:
    """:data:`WRITE_ALLOW_MOUNTED`: ``path`` matches and sits at the top of a mount of the named type."""
    from .mountinfo import is_cgroup2_root_file, read_mountinfo

    for pattern, fstype in WRITE_ALLOW_MOUNTED:
        if pattern.fullmatch(path) and fstype == "cgroup2" and is_cgroup2_root_file(read_mountinfo(fs), path):
            return True
    return False


_ERRNO_ERRORS: dict[int, type[HostError]] = {
    errno.ENOENT: MissingError,
    errno.ENOTDIR: MissingError,
    errno.ENODEV: MissingError,
    errno.ENXIO: MissingError,
    errno.EINVAL: RejectedError,
    errno.ERANGE: RejectedError,
    errno.EBUSY: BusyError,
    errno.EACCES: PermissionDeniedError,
    errno.EPERM: PermissionDeniedError,
    errno.EROFS: PermissionDeniedError,
}


def replace_file(local: Path, data: str, mode: int = 0o644) -> None:
    """Atomically replace the on-disk file ``local`` with ``data``: a temporary file in the same directory,
    fsync, rename, fsync of the directory — a reader sees the old file or the new one, never half of one, and
    a crash keeps one of them. OSError is the caller's to map."""
    import tempfile  # only when writing (it loads random and shutil)

    fd, tmp = tempfile.mkstemp(dir=local.parent, prefix=f".{local.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, local)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dfd = os.open(local.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def map_oserror(exc: OSError, path: str, action: str, value: str | None = None) -> HostError:
    """Turn an ``OSError`` from a kernel attribute into the domain error for its errno."""
    cls = _ERRNO_ERRORS.get(exc.errno or 0, HostError)
    what = f"{action} {path}" + (f" = {value!r}" if value is not None else "")
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    hint = None
    if cls is PermissionDeniedError and exc.errno in (errno.EACCES, errno.EPERM) and os.geteuid() != 0:
        hint = "run as root"
    return cls(f"{what}: {reason} (errno {errno.errorcode.get(exc.errno or 0, exc.errno)})",
               path=path, hint=hint)


class Writer(Protocol):
    """Where attribute writes go: the real kernel, or a simulated one."""

    def write(self, path: str, value: str) -> None: ...


@dataclass(frozen=True)
class WriteRecord:
    path: str
    value: str
    ok: bool
    error: str | None = None


class RootedFS:
    """Reads and writes under ``root``. Paths are absolute kernel paths; ``root`` is prepended."""

    def __init__(self, root: Path, writer: Writer | None = None) -> None:
        self.root = Path(root)
        self._real_root = os.path.realpath(self.root)
        self._writer = writer
        self.write_log: list[WriteRecord] = []

    # -- paths ---------------------------------------------------------------------------------------
    def local(self, path: str) -> Path:
        """The on-disk path of kernel path ``path`` (no escape check; for reads)."""
        if not path.startswith("/"):
            raise ValueError(f"kernel paths are absolute: {path!r}")
        return self.root / path[1:] if self._real_root != "/" else Path(path)

    def _checked(self, path: str) -> Path:
        local = self.local(path)
        real = os.path.realpath(local)
        if self._real_root != "/" and not (real == self._real_root or real.startswith(self._real_root + "/")):
            raise NotAllowedError(f"{path} resolves outside the root {self.root} ({real})", path=path)
        return Path(real)

    # -- reads ---------------------------------------------------------------------------------------
    def read(self, path: str) -> str:
        """The attribute's text without its trailing newline."""
        try:
            with open(self.local(path), encoding="utf-8", errors="replace") as f:
                return f.read().rstrip("\n")
        except OSError as exc:
            raise map_oserror(exc, path, "read") from None

    def read_opt(self, path: str) -> str | None:
        """Like :meth:`read`, but ``None`` when the attribute does not exist."""
        try:
            with open(self.local(path), encoding="utf-8", errors="replace") as f:
                return f.read().rstrip("\n")
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise map_oserror(exc, path, "read") from None

    def exists(self, path: str) -> bool:
        return os.path.exists(self.local(path))

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(self.local(path))

    def listdir(self, path: str) -> list[str]:
        """Entries of a directory, sorted; empty when it does not exist."""
        try:
            return sorted(os.listdir(self.local(path)))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise map_oserror(exc, path, "list") from None

    def readlink(self, path: str) -> str | None:
        try:
            return os.readlink(self.local(path))
        except OSError:
            return None

    # -- writes --------------------------------------------------------------------------------------
    def allowed(self, path: str) -> bool:
        return any(p.fullmatch(path) for p in WRITE_ALLOW) or allowed_by_mount(self, path)

    def _require_allowed(self, path: str, verb: str = "write") -> None:
        if not self.allowed(path):
            raise NotAllowedError(f"refusing to {verb} {path}: not in nodeagent's write allow-list", path=path)

    def _new_file_path(self, path: str) -> Path:
        """The on-disk path for a regular file nodeagent writes, its directory created (OSError to the caller)."""
        local = self.local(path)
        local.parent.mkdir(parents=True, exist_ok=True)
        self._checked(path)
        return local

    def write(self, path: str, value: str) -> None:
        """Write one kernel attribute. Raises a :class:`HostError` subclass named after the errno."""
        self._require_allowed(path, "write")
        local = self._checked(path)
        try:
            if self._writer is not None:
                self._writer.write(path, value)
            else:
                fd = os.open(local, os.O_WRONLY | os.O_NOFOLLOW)
                try:
                    os.write(fd, value.encode())
                finally:
                    os.close(fd)
        except OSError as exc:
            err = map_oserror(exc, path, "write", value)
            self.write_log.append(WriteRecord(path, value, False, str(err)))
            raise err from None
        self.write_log.append(WriteRecord(path, value, True))

    @contextmanager
    def lock(self, path: str, timeout: float) -> Iterator[None]:
        """Hold an exclusive flock on ``path`` (created if needed); wait up to ``timeout`` seconds.

        The holder's pid is written into the file so that a waiter can name it.
        """
        self._require_allowed(path, "lock")
        local = self.local(path)
        try:
            local.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(local, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise map_oserror(exc, path, "lock") from None
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
                        raise LockTimeoutError(
                            f"another nodeagent run (pid {holder}) holds {path}; waited {timeout:.0f}s",
                            hint="wait for it to finish, or raise --lock-timeout") from None
                    time.sleep(0.05)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            yield
        finally:
            os.close(fd)

    def write_file_atomic(self, path: str, data: str, mode: int = 0o644) -> None:
        """Write a whole regular file (state, units): temp file in the same directory, fsync, rename."""
        self._require_allowed(path, "write")
        try:
            replace_file(self._new_file_path(path), data, mode)
        except OSError as exc:
            raise map_oserror(exc, path, "write") from None
        self.write_log.append(WriteRecord(path, f"<{len(data)} bytes>", True))

    def append(self, path: str, data: str) -> None:
        """Append ``data`` to a regular file (created if needed): one ``write`` on an ``O_APPEND`` descriptor,
        fsynced — how the state directory's journal grows."""
        self._require_allowed(path, "write")
        try:
            fd = os.open(self._new_file_path(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
            try:
                os.write(fd, data.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise map_oserror(exc, path, "append to") from None
        self.write_log.append(WriteRecord(path, f"<+{len(data)} bytes>", True))

    def rename(self, src: str, dst: str) -> None:
        """Rename a regular file within the allow-list (journal rotation)."""
        for p in (src, dst):
            self._require_allowed(p, "rename")
        try:
            os.replace(self._checked(src), self._checked(dst))
        except OSError as exc:
            raise map_oserror(exc, src, "rename") from None
        self.write_log.append(WriteRecord(dst, f"<renamed from {src}>", True))

    def size(self, path: str) -> int | None:
        """A regular file's size in bytes, ``None`` when it does not exist."""
        try:
            return os.stat(self.local(path)).st_size
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise map_oserror(exc, path, "stat") from None
