"""Rooted reads and writes of kernel attributes and state files: the only code that touches the node's files.

Every path is given as the kernel names it (``/proc/sys/kernel/numa_balancing``) and resolved inside the host's
root by one resolver (:meth:`RootedFS._resolve`), for reads as for writes: nothing outside the root is opened,
listed, created or renamed. Writes are checked against an allow-list (as spelled and where they lead), go
through the simulator when the root is a simulated node, and are logged. ``errno`` maps to domain errors in
one table.
"""

from __future__ import annotations

import errno
import fcntl
import math
import os
import re
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol

from ..util.dataclass import dataclass
from ..util.errors import (
    BusyError,
    HostError,
    LockTimeoutError,
    MissingError,
    NoSpaceError,
    NotAllowedError,
    PermissionDeniedError,
    RejectedError,
    UsageError,
)

if TYPE_CHECKING:
    from pathlib import Path

_KD = r"/sys/kernel/mm/damon/admin/kdamonds"
_CTX = _KD + r"/[0-9]+/contexts/[0-9]+"
_SCH = _CTX + r"/schemes/[0-9]+"
#: The DAMON attribute files nodeagent writes, exactly (kinds/damon declares the same as its ``writes``).
DAMON_WRITES: tuple[str, ...] = (
    _KD + r"/nr_kdamonds",
    _KD + r"/[0-9]+/(state|refresh_ms)",
    _KD + r"/[0-9]+/contexts/nr_contexts",
    _CTX + r"/(operations|addr_unit)",
    _CTX + r"/monitoring_attrs/intervals/(sample_us|aggr_us|update_us)",
    _CTX + r"/monitoring_attrs/intervals/intervals_goal/(access_bp|aggrs|min_sample_us|max_sample_us)",
    _CTX + r"/monitoring_attrs/nr_regions/(min|max)",
    _CTX + r"/targets/nr_targets",
    _CTX + r"/targets/[0-9]+/pid_target",
    _CTX + r"/targets/[0-9]+/regions/nr_regions",
    _CTX + r"/targets/[0-9]+/regions/[0-9]+/(start|end)",
    _CTX + r"/schemes/nr_schemes",
    _SCH + r"/(action|target_nid|apply_interval_us)",
    _SCH + r"/access_pattern/(sz|nr_accesses|age)/(min|max)",
    _SCH + r"/quotas/(ms|bytes|reset_interval_ms)",
    _SCH + r"/quotas/weights/(sz|nr_accesses|age)_permil",
    _SCH + r"/quotas/(goals/nr_goals|goal_tuner)",
    _SCH + r"/quotas/goals/[0-9]+/(target_metric|target_value|current_value|nid|path)",
    _SCH + r"/watermarks/(metric|interval_us|high|mid|low)",
    _SCH + r"/(core_|ops_)?filters/nr_filters",
    _SCH + r"/(core_|ops_)?filters/[0-9]+/(type|matching|allow|memcg_path|addr_start|addr_end|damon_target_idx|"
           r"min|max)",
    _SCH + r"/dests/nr_dests",
    _SCH + r"/stats/max_nr_snapshots",
    # the damon.disable_modules switch (mm/damon/reclaim.c, lru_sort.c, stat.c: module_param `enabled`)
    r"/sys/module/damon_(reclaim|lru_sort|stat)/parameters/enabled",
)

#: Every path the agent may ever write (:data:`WRITE_ALLOW`, compiled by :func:`write_allow`). A profile cannot
#: widen this: it names settings, never paths. Each resource kind declares the paths it writes (``Kind.writes``);
#: tests/unit/test_write_allow.py holds this table to exactly those plus nodeagent's own files (state, units, udev
#: rule, NFD feature file).
_WRITE_ALLOW_RX: tuple[str, ...] = (
    r"/proc/sys/kernel/numa_balancing",
    r"/proc/sys/kernel/numa_balancing_promote_rate_limit_MBps",
    r"/proc/sys/vm/zone_reclaim_mode",
    r"/proc/sys/vm/min_(unmapped|slab)_ratio",
    r"/proc/sys/vm/watermark_scale_factor",
    r"/proc/sys/vm/min_free_kbytes",
    r"/sys/kernel/mm/lru_gen/(enabled|min_ttl_ms)",
    # weighted interleave's system weights and its auto switch (named __auto_type on 6.18; kinds/interleave)
    r"/sys/kernel/mm/mempolicy/weighted_interleave/(node[0-9]+|auto|__auto_type)",
    r"/sys/kernel/mm/numa/demotion_enabled",
    r"/sys/kernel/mm/transparent_hugepage/(enabled|defrag)",
    r"/sys/devices/system/memory/auto_online_blocks",
    # DAMON's sysfs interface: each attribute file a kdamond's setup, start, commit and removal writes
    # (kinds/damon/spec.py, apply.py), as the kernel lays them out (mm/damon/sysfs.c, sysfs-schemes.c) —
    # never a name of nodeagent's choosing, so nothing else can be created or written under kdamonds/.
    *DAMON_WRITES,
    # NUMA balancing's scan and promotion tunables (debugfs since 5.13; facts/knobs.py)
    r"/sys/kernel/debug/sched/numa_balancing/(scan_delay_ms|scan_period_(min|max)_ms|scan_size_mb|"
    r"hot_threshold_ms)",
    # The placement demotion pass (resources/placement.py): one bounded proactive reclaim of a fast node that
    # kswapd gave up on — the node's own file (6.17), else the root cgroup's memory.reclaim (5.19, below).
    r"/sys/devices/system/node/node[0-9]+/reclaim",
    # CXL regions (resources/cxl_region): a root decoder's create_ram_region/delete_region, a region's
    # geometry, targets and commit, an endpoint decoder's mode and DPA, binding a region to cxl_region.
    r"/sys/bus/cxl/devices/decoder[0-9]+\.[0-9]+/(create_ram_region|delete_region|mode|dpa_size)",
    r"/sys/bus/cxl/devices/region[0-9]+/(interleave_ways|interleave_granularity|size|target[0-9]+|commit)",
    r"/sys/bus/cxl/drivers/cxl_region/bind",
    # ... and where those bus links lead: the CXL root (ACPI0017) device tree, ports and endpoints below it
    r"/sys/devices/platform/ACPI0017:[0-9]+/root[0-9]+/([a-z]+[0-9]+/)*decoder[0-9]+\.[0-9]+/"
    r"(create_ram_region|delete_region|mode|dpa_size)",
    r"/sys/devices/platform/ACPI0017:[0-9]+/root[0-9]+/decoder[0-9]+\.[0-9]+/region[0-9]+/"
    r"(interleave_ways|interleave_granularity|size|target[0-9]+|commit)",
    r"/var/lib/nodeagent/.*",
    # `nodeagent units install`: only nodeagent's own unit files and udev rule, nothing else under /etc.
    r"/etc/systemd/system/nodeagent-[a-z-]+@?\.(service|timer)",
    r"/etc/udev/rules\.d/[0-9]{2}-nodeagent\.rules",
    # `nodeagent labels --write`, apply and run: NFD's local feature file (nodeagent.k8s.labels), nothing else.
    r"/etc/kubernetes/node-feature-discovery/features\.d/nodeagent",
)


@cache
def write_allow() -> tuple[re.Pattern[str], ...]:
    """:data:`WRITE_ALLOW`, compiled (a read-only command never compiles the allow-list)."""
    return tuple(re.compile(p) for p in _WRITE_ALLOW_RX)


def literal_prefix(rx: str) -> str:
    """The text every full match of the pattern ``rx`` starts with: its characters up to the first special one
    (less the character a quantifier makes optional); ``""`` for a pattern with a top-level alternative.
    tests/unit/test_write_allow.py holds it to the regex parser's reading of every allow-list pattern."""
    end, depth, i, in_class = None, 0, 0, False
    while i < len(rx):
        ch = rx[i]
        if ch == "\\":
            end = i if end is None else end
            i += 2
            continue
        if end is None and ch in ".^$*+?{}[]|()":
            end = i - 1 if ch in "*+?{" and i else i
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        elif ch in "()":
            depth += 1 if ch == "(" else -1
        elif ch == "|" and depth == 0:
            return ""
        i += 1
    return rx if end is None else rx[:end]


#: Each allow-list pattern's literal start: a write compiles only the patterns its path can match.
_WRITE_ALLOW_PREFIX: tuple[tuple[int, str], ...] = tuple(enumerate(map(literal_prefix, _WRITE_ALLOW_RX)))


@cache
def _allow_pattern(i: int) -> re.Pattern[str]:
    return re.compile(_WRITE_ALLOW_RX[i])


def write_allowed(path: str) -> bool:
    """``path`` fully matches a pattern of :data:`WRITE_ALLOW` (only those that start as ``path`` does are
    compiled: ``drift --record``, which writes only its own state, compiles one pattern instead of ~50)."""
    return any(path.startswith(pre) and _allow_pattern(i).fullmatch(path) for i, pre in _WRITE_ALLOW_PREFIX)


def __getattr__(name: str) -> Any:
    if name == "WRITE_ALLOW":  # the compiled table, for the tests that hold it to the kinds' declarations
        return write_allow()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    errno.ELOOP: NotAllowedError,  # O_NOFOLLOW met a symlink where nodeagent keeps a file of its own
    errno.ENOSPC: NoSpaceError,
    errno.EDQUOT: NoSpaceError,
}


def replace_file(local: Path, data: str, mode: int = 0o644) -> None:
    """Atomically replace the on-disk file ``local`` with ``data`` (see :func:`replace_at`)."""
    dfd = os.open(local.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        replace_at(dfd, local.name, data, mode)
    finally:
        os.close(dfd)


def replace_at(dir_fd: int, name: str, data: str, mode: int = 0o644) -> None:
    """Atomically replace the entry ``name`` of the directory ``dir_fd`` with a regular file holding ``data``:
    a temporary file in the same directory (``O_EXCL|O_NOFOLLOW``), fsync, rename, fsync of the directory — a
    reader sees the old file or the new one, never half of one, and a crash keeps one of them. The rename
    replaces the entry itself: a symlink there is replaced, never followed. OSError is the caller's to map."""
    for _ in range(100):
        tmp = f".{name}.{os.urandom(4).hex()}"  # not secrets: it loads hashlib
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=dir_fd)
            break
        except FileExistsError:
            continue
    else:
        raise OSError(errno.EEXIST, "no free temporary name", name)
    try:
        try:
            view = memoryview(data.encode())
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    dfd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
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
    if exc.errno == errno.ELOOP:
        reason = "it is a symlink, and nodeagent follows none there"
        hint = f"remove the symlink {path}; nodeagent creates the file itself"
    return cls(f"{what}: {reason} (errno {errno.errorcode.get(exc.errno or 0, exc.errno)})",
               path=path, hint=hint)


class Writer(Protocol):
    """Where attribute writes go: the real kernel, or a simulated one."""

    def write(self, path: str, value: str) -> None: ...

    # Optional: ``before_file(path)``, called before nodeagent writes one of its own files (see _before_file).


@dataclass(frozen=True)
class WriteRecord:
    path: str
    value: str
    ok: bool
    error: str | None = None


#: A read of one attribute or state file stops here: sysfs gives at most a page, /proc/zoneinfo of a large
#: machine some hundred KiB, state files a few MiB. Anything longer is not what the path names.
MAX_READ = 16 * 1024 * 1024
_KERNEL_TREES = ("/proc/", "/sys/", "/dev/")
_MAX_LINKS = 40  # as the kernel's own limit on symlinks followed in one lookup (ELOOP)
_O_WALK = os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC
_PROC_FD = os.path.isdir("/proc/self/fd")  # reopen an O_PATH descriptor through procfs (no second lookup)


def _sysfs_readable(path: str, mode: int) -> None:
    """kernfs refuses to open for reading an attribute whose mode has no read bit (a store-only attribute such as
    a root decoder's ``delete_region``) with EACCES, root or not (``kernfs_fop_open``): the same for a simulated
    or captured ``/sys``, whose files root could otherwise read."""
    if path.startswith("/sys/") and not mode & 0o444:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)


@dataclass(frozen=True)
class _Walked:
    """Where a walk inside the root arrived: the leaf's directory (``O_PATH``), its name (``""`` for the root),
    the resolved components, and the leaf's own ``O_PATH`` descriptor and stat (``None`` if it is absent)."""

    dir_fd: int
    name: str
    names: list[str]
    fd: int | None
    st: os.stat_result | None


class EscapeError(NotAllowedError):
    """A path whose resolution would leave the root (a symlink out of it, or ``..`` above it)."""


class RootedFS:
    """Reads and writes under ``root``. Paths are absolute kernel paths resolved *inside* ``root``.

    Every operation — read, list, stat, write, lock, mkdir, rename — resolves its path one component at a time
    from a descriptor of the root (``openat`` with ``O_PATH|O_NOFOLLOW`` on each step, as
    ``openat2(RESOLVE_BENEATH)`` would): a symlink is read and followed by the walk itself, relative ones from
    the directory that holds them, absolute ones from the root, and one whose target leaves the root (``..``
    above it, or an absolute path elsewhere) is refused before anything is opened or created. The leaf is
    checked on its own ``O_PATH`` descriptor and opened through it, so nothing can be swapped in between the
    check and the use. Only regular files are read, at most :data:`MAX_READ` bytes.
    """

    def __init__(self, root: str | os.PathLike[str], writer: Writer | None = None) -> None:
        self._root = os.fspath(root) or "."  # (as pathlib reads "")
        self._real_root = os.path.realpath(self._root)
        self._writer = writer
        self.write_log: list[WriteRecord] = []
        self._root_fd: int | None = None

    def __del__(self) -> None:
        if self._root_fd is not None:
            with suppress(OSError):
                os.close(self._root_fd)

    # -- paths ---------------------------------------------------------------------------------------
    @property
    def root(self) -> Path:
        """The root as given, as a ``Path`` (pathlib is loaded for whoever asks: messages, the simulator)."""
        from pathlib import Path

        return Path(self._root)

    @property
    def real_root(self) -> str:
        """The root's own path with its symlinks resolved (``os.path.realpath``), as when the root was opened."""
        return self._real_root

    def local(self, path: str) -> Path:
        """The on-disk path of kernel path ``path``, lexically — for messages and the simulator, never for
        opening (that is :meth:`_resolve`'s)."""
        if not path.startswith("/"):
            raise ValueError(f"kernel paths are absolute: {path!r}")
        from pathlib import Path

        return self.root / path[1:] if self._real_root != "/" else Path(path)

    def _rootfd(self) -> int:
        if self._root_fd is None:
            self._root_fd = os.open(self._real_root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        return self._root_fd

    def _kernel_tree(self, path: str, real: str, verb: str) -> NotAllowedError:
        """A file of nodeagent's own (state, units, label file) whose directory leads into /sys, /proc or /dev."""
        return NotAllowedError(f"refusing to {verb} {path}: it leads to {real}, inside the kernel's "
                               f"{real.split('/')[1]} tree; nodeagent keeps its own files outside /sys, /proc and "
                               "/dev", path=path,
                               hint=f"remove the symlink on the way to {path} that leads there, and let nodeagent "
                                    "create its directory")

    def _escape(self, path: str, how: str) -> EscapeError:
        return EscapeError(f"refusing {path}: {how}, outside the root {self.root}", path=path,
                           hint="the root's tree is not what the kernel lays out: remove the symlink, or give "
                                "--root the node's own tree")

    def _resolve(self, path: str, *, follow: bool = True, create: bool = False) -> _Walked:
        """Walk ``path`` inside the root (see the class). With ``follow`` a symlink as last component is
        followed too (else the link itself is the leaf); with ``create`` missing directories are made on the
        way, each inside the root. OSError (ENOENT, ENOTDIR, ELOOP...) for the caller to map;
        :class:`EscapeError` for a symlink or ``..`` that leaves the root."""
        if not path.startswith("/"):
            raise ValueError(f"kernel paths are absolute: {path!r}")
        root = self._rootfd()
        pending = [c for c in reversed(path.split("/")) if c and c != "."]
        stack: list[int] = []  # descriptors below the root, one per entry of names
        names: list[str] = []
        links = 0
        try:
            while pending:
                comp = pending.pop()
                if comp == "..":
                    if not stack:
                        raise self._escape(path, "'..' climbs above the root")
                    os.close(stack.pop())
                    names.pop()
                    continue
                cur = stack[-1] if stack else root
                if not pending:  # the leaf: opened as whatever it is
                    try:
                        fd = os.open(comp, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=cur)
                    except FileNotFoundError:
                        return _Walked(self._hand(stack, root), comp, [*names, comp], None, None)
                    st = os.fstat(fd)
                    if not (follow and stat.S_ISLNK(st.st_mode)):
                        return _Walked(self._hand(stack, root), comp, [*names, comp], fd, st)
                    os.close(fd)
                else:
                    try:
                        stack.append(os.open(comp, _O_WALK, dir_fd=cur))
                        names.append(comp)
                        continue
                    except FileNotFoundError:
                        if not create:
                            raise
                        if names and f"/{names[0]}/" in _KERNEL_TREES:  # only nodeagent's own directories are
                            # created, and never inside the kernel's trees (a state dir linked into sysfs)
                            raise self._kernel_tree(path, "/" + "/".join([*names, comp]), "create") from None
                        with suppress(FileExistsError):
                            os.mkdir(comp, 0o755, dir_fd=cur)
                        pending.append(comp)  # open it like any other component (it may have been swapped)
                        continue
                    except NotADirectoryError:
                        pass  # a symlink (followed below), or a file where a directory must be
                try:
                    target = os.readlink(comp, dir_fd=cur)
                except OSError:
                    raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path) from None
                links += 1
                if links > _MAX_LINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
                if target.startswith("/"):
                    inner = self._inside(target)
                    if inner is None:
                        raise self._escape(path, f"{'/'.join(['', *names, comp])} is a symlink to {target}")
                    while stack:
                        os.close(stack.pop())
                    names.clear()
                    target = inner
                pending.extend(c for c in reversed(target.split("/")) if c and c != ".")
            fd = self._hand(stack, root)
            return _Walked(os.dup(fd), "", names, fd, os.fstat(fd))
        finally:
            for fd in stack:
                os.close(fd)

    @staticmethod
    def _hand(stack: list[int], root: int) -> int:
        """The innermost directory's descriptor, taken out of ``stack`` (the caller owns it now)."""
        return stack.pop() if stack else os.dup(root)

    def _inside(self, target: str) -> str | None:
        """An absolute symlink target as a path inside the root, ``None`` when it points elsewhere. On ``/``
        every target is inside; under another root, a target is inside only when it names the root's own
        tree on disk (an absolute target like ``/etc/shadow`` is this machine's file, not the node's)."""
        if self._real_root == "/":
            return target
        norm = os.path.normpath(target)
        if norm == self._real_root or norm.startswith(self._real_root + "/"):
            return norm[len(self._real_root):] or "/"
        return None

    @contextmanager
    def _leaf(self, path: str, *, follow: bool = True) -> Iterator[_Walked]:
        """The walk of ``path``, its descriptors closed afterwards."""
        w = self._resolve(path, follow=follow)
        try:
            yield w
        finally:
            os.close(w.dir_fd)
            if w.fd is not None:
                os.close(w.fd)

    @contextmanager
    def _open_regular(self, path: str, flags: int, verb: str, *, own: bool = False
                      ) -> Iterator[tuple[int, list[str]]]:
        """``(fd, resolved components)`` of the existing regular file ``path`` opened with ``flags``. The
        type is checked on the walk's ``O_PATH`` descriptor and the file reopened through that very
        descriptor, so a FIFO or device node is refused without ever being opened (no open side effects).
        With ``own`` a file with more than one hard link is refused too (:func:`require_own_file`)."""
        with self._leaf(path) as w:
            if w.fd is None or w.st is None:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
            if not stat.S_ISREG(w.st.st_mode):
                if stat.S_ISDIR(w.st.st_mode):
                    raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
                raise NotAllowedError(f"refusing to {verb} {path}: {file_kind(w.st.st_mode)}, not a regular file",
                                      path=path, hint="kernel attributes and state files are regular files")
            if own:
                require_own_file(w.st, path, verb)
            if not flags & (os.O_WRONLY | os.O_RDWR):
                _sysfs_readable(path, w.st.st_mode)
            fd = os.open(f"/proc/self/fd/{w.fd}", flags | os.O_CLOEXEC) if _PROC_FD else \
                os.open(w.name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=w.dir_fd)
        try:
            yield fd, w.names
        finally:
            os.close(fd)

    def realpath(self, path: str) -> str:
        """The kernel path that ``path`` resolves to inside the root (symlinks followed within it); as far as
        it exists, like ``realpath -m``."""
        try:
            with self._leaf(path) as w:
                return "/" + "/".join(w.names)
        except (FileNotFoundError, NotADirectoryError):
            return os.path.normpath(path)
        except OSError as exc:
            raise map_oserror(exc, path, "resolve") from None

    # -- reads ---------------------------------------------------------------------------------------
    def _read(self, path: str, *, own: bool = False) -> str:
        limit = MAX_READ
        with self._open_regular(path, os.O_RDONLY, "read", own=own) as (fd, _):
            data = read_bounded(fd, limit)
        if data is None:
            raise NotAllowedError(f"refusing to read {path}: longer than {limit} bytes", path=path)
        return data.decode("utf-8", errors="replace").rstrip("\n")

    def read(self, path: str) -> str:
        """The attribute's text without its trailing newline."""
        try:
            return self._read(path)
        except OSError as exc:
            raise map_oserror(exc, path, "read") from None

    def read_opt(self, path: str) -> str | None:
        """Like :meth:`read`, but ``None`` when the attribute does not exist."""
        try:
            return self._read(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise map_oserror(exc, path, "read") from None

    def read_own_opt(self, path: str) -> str | None:
        """One of nodeagent's own files (state, journal), like :meth:`read_opt`, but a file with more than one
        hard link is refused: what it holds is another file's, which nodeagent must neither trust nor copy."""
        try:
            return self._read(path, own=True)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise map_oserror(exc, path, "read") from None

    def require_own(self, path: str, verb: str = "use") -> None:
        """Refuse, before any work, a regular file at ``path`` (not followed) with more than one hard link
        (:func:`require_own_file`); absent is fine."""
        try:
            with self._leaf(path, follow=False) as w:
                if w.st is not None:
                    require_own_file(w.st, path, verb)
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            raise map_oserror(exc, path, "stat") from None

    def _stat(self, path: str) -> os.stat_result | None:
        try:
            with self._leaf(path) as w:
                return w.st
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return None
            raise map_oserror(exc, path, "stat") from None

    def exists(self, path: str) -> bool:
        return self._stat(path) is not None

    def is_dir(self, path: str) -> bool:
        st = self._stat(path)
        return st is not None and stat.S_ISDIR(st.st_mode)

    def read_attrs(self, path: str, names: Iterable[str]) -> dict[str, str | None]:
        """The text of the attributes ``names`` of the directory ``path``, each as :meth:`read_opt` reads
        ``path/name`` (``None`` when it does not exist; all ``None`` when ``path`` is no directory). The directory
        is walked once and each attribute opened from its descriptor, one ``openat`` instead of a walk from the
        root per file (a CXL decoder's dozen attributes sit behind a bus link into the device tree); an entry
        that is not a regular file (a symlink) goes through :meth:`read_opt` on its full path."""
        out: dict[str, str | None] = dict.fromkeys(names)
        base = path.rstrip("/")
        if any(not n or "/" in n or n in (".", "..") for n in out):
            raise ValueError(f"attribute names are single path components: {sorted(out)!r}")
        try:
            with self._leaf(path) as w:
                if w.fd is None or w.st is None or not stat.S_ISDIR(w.st.st_mode):
                    return out
                for name in out:
                    out[name] = self._read_at(w.fd, name, f"{base}/{name}")
        except (FileNotFoundError, NotADirectoryError):
            pass
        except OSError as exc:
            raise map_oserror(exc, path, "read") from None
        return out

    def _read_at(self, dfd: int, name: str, full: str) -> str | None:
        """:meth:`read_opt` of ``full``, whose directory is open as ``dfd`` and whose last component is ``name``."""
        try:
            fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise map_oserror(exc, full, "read") from None
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                return self.read_opt(full)
            _sysfs_readable(full, mode)
            rfd = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC) if _PROC_FD else \
                os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
            try:
                data = read_bounded(rfd, MAX_READ)
            finally:
                os.close(rfd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise map_oserror(exc, full, "read") from None
        finally:
            os.close(fd)
        if data is None:
            raise NotAllowedError(f"refusing to read {full}: longer than {MAX_READ} bytes", path=full)
        return data.decode("utf-8", errors="replace").rstrip("\n")

    def read_tree(self, path: str, descend: Callable[[str], bool] | None = None
                  ) -> tuple[list[str], dict[str, str | None]]:
        """A directory tree in one pass: the directories under ``path`` (relative to it, ``""`` first) and the
        text of every file, keyed by relative path, in sorted order. Each entry is opened from its directory's
        descriptor, one ``openat`` instead of a walk from the root per file, with the rules of :meth:`read`;
        an entry that is not a directory or a regular file (a symlink) goes through :meth:`read_opt` on its
        full path. ``descend(rel)`` says whether to enter a directory; a file that vanished reads ``None``.
        Empty when ``path`` is not a directory. Errors (EBUSY...) are mapped as :meth:`read` maps them."""
        dirs: list[str] = []
        files: dict[str, str | None] = {}
        try:
            with self._leaf(path) as w:
                if w.fd is not None and w.st is not None and stat.S_ISDIR(w.st.st_mode):
                    self._tree(w.fd, path.rstrip("/"), "", descend, dirs, files)
        except (FileNotFoundError, NotADirectoryError):
            pass
        except OSError as exc:
            raise map_oserror(exc, path, "read") from None
        return dirs, files

    def _tree(self, dfd: int, base: str, rel: str, descend: Callable[[str], bool] | None, dirs: list[str],
              files: dict[str, str | None]) -> None:
        dirs.append(rel)
        lfd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dfd)
        try:
            names = sorted(os.listdir(lfd))
        finally:
            os.close(lfd)
        for name in names:
            child = f"{rel}/{name}" if rel else name
            full = f"{base}/{child}"
            try:
                fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
            except FileNotFoundError:
                continue
            try:
                mode = os.fstat(fd).st_mode
                if stat.S_ISDIR(mode):
                    if descend is None or descend(child):
                        self._tree(fd, base, child, descend, dirs, files)
                elif not stat.S_ISREG(mode):
                    if self.is_dir(full):  # a symlink to a directory, followed inside the root
                        if descend is None or descend(child):
                            inner = None if descend is None else lambda r, c=child: descend(f"{c}/{r}")
                            sub_dirs, sub_files = self.read_tree(full, inner)
                            dirs.extend(f"{child}/{d}" if d else child for d in sub_dirs)
                            files.update((f"{child}/{f}", v) for f, v in sub_files.items())
                    else:
                        files[child] = self.read_opt(full)
                else:
                    _sysfs_readable(full, mode)
                    rfd = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC) if _PROC_FD else \
                        os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
                    try:
                        data = read_bounded(rfd, MAX_READ)
                    finally:
                        os.close(rfd)
                    if data is None:
                        raise NotAllowedError(f"refusing to read {full}: longer than {MAX_READ} bytes", path=full)
                    files[child] = data.decode("utf-8", errors="replace").rstrip("\n")
            except FileNotFoundError:
                files[child] = None
            except OSError as exc:
                raise map_oserror(exc, full, "read") from None
            finally:
                os.close(fd)

    def listdir(self, path: str) -> list[str]:
        """Entries of a directory, sorted; empty when it does not exist."""
        try:
            with self._leaf(path) as w:
                if w.fd is None or w.st is None or not stat.S_ISDIR(w.st.st_mode):
                    return []
                fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=w.fd)
            try:
                return sorted(os.listdir(fd))
            finally:
                os.close(fd)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise map_oserror(exc, path, "list") from None

    def readlink(self, path: str) -> str | None:
        """The target of the symlink ``path`` as written (its directories resolved inside the root)."""
        try:
            with self._leaf(path, follow=False) as w:
                if w.st is None or not stat.S_ISLNK(w.st.st_mode):
                    return None
                return os.readlink(w.name, dir_fd=w.dir_fd)
        except OSError:
            return None

    def statvfs(self, path: str) -> os.statvfs_result:
        """Usage of the filesystem that holds ``path`` (resolved inside the root). OSError to the caller."""
        with self._leaf(path) as w:
            if w.fd is None:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
            return os.fstatvfs(w.fd)

    def size(self, path: str) -> int | None:
        """A regular file's size in bytes, ``None`` when it does not exist."""
        st = self._stat(path)
        return st.st_size if st is not None else None

    # -- writes --------------------------------------------------------------------------------------
    def allowed(self, path: str) -> bool:
        return write_allowed(path) or allowed_by_mount(self, path)

    def _require_allowed(self, path: str, verb: str = "write") -> None:
        if not self.allowed(path):
            raise NotAllowedError(f"refusing to {verb} {path}: not in nodeagent's write allow-list", path=path)

    def _require_resolved_allowed(self, path: str, names: list[str], verb: str, *, files: bool = False) -> None:
        """The allow-list holds for where a path leads, not only for how it is spelled. For nodeagent's own
        files (``files``: state, units — fixed names, replaced by rename) a directory linked elsewhere inside
        the root is followed, as long as it does not lead into the kernel's trees."""
        real = "/" + "/".join(names)
        if files and real.startswith(_KERNEL_TREES):
            raise self._kernel_tree(path, real, verb)
        if files:
            return
        if real != path and not self.allowed(real):
            raise NotAllowedError(f"refusing to {verb} {path}: it leads to {real}, which is not in nodeagent's "
                                  "write allow-list", path=path)

    @contextmanager
    def _parent(self, path: str, verb: str, *, create: bool, own: bool = True) -> Iterator[tuple[int, str]]:
        """``(dir_fd, name)`` for a file nodeagent creates or replaces itself (state, units): the directory
        resolved (and with ``create`` made) inside the root, the entry itself never followed. With ``own`` an
        existing entry that is a regular file with more than one hard link is refused (:func:`require_own_file`);
        callers that then open the entry check its descriptor again."""
        w = self._resolve(path, follow=False, create=create)
        try:
            if w.fd is not None:
                os.close(w.fd)
            if own and w.st is not None:
                require_own_file(w.st, path, verb)
            if not w.name:
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
            self._require_resolved_allowed(path, w.names, verb, files=True)
            yield w.dir_fd, w.name
        finally:
            os.close(w.dir_fd)

    def _before_file(self, path: str) -> None:
        """The writer's look at a file write before it happens (the simulator's fault injection); OSError from
        it is the write's own."""
        hook = getattr(self._writer, "before_file", None)
        if hook is not None:
            hook(path)

    def write(self, path: str, value: str) -> None:
        """Write one kernel attribute. Raises a :class:`HostError` subclass named after the errno."""
        self._require_allowed(path, "write")
        try:
            if self._writer is not None:
                with self._leaf(path) as w:
                    self._require_resolved_allowed(path, w.names, "write")
                    if w.st is not None and not (stat.S_ISREG(w.st.st_mode) or stat.S_ISDIR(w.st.st_mode)):
                        raise NotAllowedError(f"refusing to write {path}: {file_kind(w.st.st_mode)}, not a "
                                              "kernel attribute", path=path)
                self._writer.write("/" + "/".join(w.names), value)
            else:
                # A kernel attribute has one link: a second one makes it some other file (a hard link from outside
                # the root), which a write in place would change.
                with self._open_regular(path, os.O_WRONLY, "write", own=True) as (fd, names):
                    self._require_resolved_allowed(path, names, "write")
                    os.write(fd, value.encode())
        except OSError as exc:
            err = map_oserror(exc, path, "write", value)
            self.write_log.append(WriteRecord(path, value, False, str(err)))
            raise err from None
        self.write_log.append(WriteRecord(path, value, True))

    def require_writable(self, paths: list[str]) -> None:
        """Refuse, before any write, when a filesystem that holds one of ``paths`` is mounted read-only (EROFS
        up front, rather than an apply that stops half-way at its first write there)."""
        seen: set[str] = set()
        for path in paths:
            probe = path
            while probe != "/" and not self.exists(probe):
                probe = os.path.dirname(probe)
            if probe in seen:
                continue
            seen.add(probe)
            try:
                with self._leaf(probe) as w:
                    readonly = w.fd is not None and bool(os.fstatvfs(w.fd).f_flag & os.ST_RDONLY)
            except OSError as exc:
                raise map_oserror(exc, path, "stat") from None
            if readonly:
                err = OSError(errno.EROFS, os.strerror(errno.EROFS))
                raise PermissionDeniedError(
                    f"cannot apply: {probe} (which holds {path}) is on a read-only filesystem "
                    f"(errno {errno.errorcode[errno.EROFS]}); nothing was written", path=path,
                    hint="remount it read-write (mount -o remount,rw), or run `nodeagent plan` to see the "
                         "changes without applying them") from err

    @contextmanager
    def lock(self, path: str, timeout: float) -> Iterator[None]:
        """Hold an exclusive flock on ``path`` (created if needed); wait up to ``timeout`` seconds.

        The holder's pid is written into the file so that a waiter can name it. The lock file and the
        directories above it are created inside the root; a lock path that is not a regular file is refused.
        """
        check_timeout(timeout)
        self._require_allowed(path, "lock")
        try:
            with self._parent(path, "lock", create=True) as (dfd, name):
                fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644,
                             dir_fd=dfd)
        except OSError as exc:
            raise map_oserror(exc, path, "lock") from None
        deadline = time.monotonic() + timeout
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise NotAllowedError(f"refusing to lock {path}: {file_kind(st.st_mode)}, not a regular file",
                                      path=path, hint=f"remove {path}; nodeagent creates it")
            require_own_file(st, path, "lock")
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
                        holder = holder if holder.isdigit() and holder.isascii() else "unknown"
                        raise LockTimeoutError(
                            f"another nodeagent run (pid {holder}) holds {path}; waited {timeout:.0f}s",
                            hint="wait for it to finish, or raise --lock-timeout") from None
                    time.sleep(0.05)
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            except OSError as exc:  # a full disk: the file could be created, its few bytes not written
                raise map_oserror(exc, path, "write the holder's pid into") from None
            from .commands import HELD_LOCKS  # children inherit the lock: it ends with the last of them

            HELD_LOCKS.add(fd)
            try:
                yield
            finally:
                HELD_LOCKS.discard(fd)
        finally:
            os.close(fd)

    def write_file_atomic(self, path: str, data: str, mode: int = 0o644) -> None:
        """Write a whole regular file (state, units): temp file in the same directory, fsync, rename."""
        self._require_allowed(path, "write")
        try:
            with self._parent(path, "write", create=True) as (dfd, name):
                self._before_file(path)
                replace_at(dfd, name, data, mode)
        except OSError as exc:
            raise map_oserror(exc, path, "write") from None
        self.write_log.append(WriteRecord(path, f"<{len(data)} bytes>", True))

    def append(self, path: str, data: str) -> None:
        """Append ``data`` to a regular file (created if needed): one ``write`` on an ``O_APPEND`` descriptor,
        fsynced — how the state directory's journal grows."""
        self._require_allowed(path, "write")
        try:
            with self._parent(path, "write", create=True) as (dfd, name):
                self._before_file(path)
                fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                             | os.O_CLOEXEC, 0o644, dir_fd=dfd)
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise NotAllowedError(f"refusing to append to {path}: {file_kind(st.st_mode)}, not a regular "
                                          "file", path=path, hint=f"remove {path}; nodeagent creates it")
                require_own_file(st, path, "append to")
                os.write(fd, data.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise map_oserror(exc, path, "append to") from None
        self.write_log.append(WriteRecord(path, f"<+{len(data)} bytes>", True))

    def reserve(self, path: str, nbytes: int) -> None:
        """Make ``path`` a regular file of ``nbytes`` bytes actually allocated (``posix_fallocate``): space held
        for nodeagent's own records, given back by :meth:`remove` when they need it. ENOSPC (or EROFS) here,
        before any change, is the answer to "can this run record what it does?"."""
        self._require_allowed(path, "write")
        try:
            with self._parent(path, "write", create=True) as (dfd, name):
                self._before_file(path)
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600,
                             dir_fd=dfd)
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise NotAllowedError(f"refusing to write {path}: {file_kind(st.st_mode)}, not a regular file",
                                          path=path, hint=f"remove {path}; nodeagent creates it")
                require_own_file(st, path, "reserve space in")
                if st.st_size < nbytes:
                    try:
                        os.posix_fallocate(fd, 0, nbytes)
                    except OSError as exc:
                        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                            raise
                        view = memoryview(bytes(nbytes))  # a filesystem without fallocate: write the zeros
                        os.lseek(fd, 0, os.SEEK_SET)
                        while view:
                            view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise map_oserror(exc, path, "reserve space in") from None
        self.write_log.append(WriteRecord(path, f"<{nbytes} bytes reserved>", True))

    def remove(self, path: str) -> bool:
        """Remove nodeagent's own file ``path`` (absent: False). The entry itself, never what a symlink there
        points to."""
        self._require_allowed(path, "remove")
        try:
            # own=False: unlinking one name of a hard-linked file leaves its other names, and the file, untouched
            with self._parent(path, "remove", create=False, own=False) as (dfd, name):
                self._before_file(path)
                os.unlink(name, dir_fd=dfd)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise map_oserror(exc, path, "remove") from None
        self.write_log.append(WriteRecord(path, "<removed>", True))
        return True

    def rename(self, src: str, dst: str) -> None:
        """Rename a regular file within the allow-list (journal rotation); both directories resolved inside
        the root, neither entry followed."""
        for p in (src, dst):
            self._require_allowed(p, "rename")
        try:
            with self._parent(src, "rename", create=False) as (sfd, sname), \
                    self._parent(dst, "rename", create=False) as (dfd, dname):
                self._before_file(dst)
                os.replace(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd)
        except OSError as exc:
            raise map_oserror(exc, src, "rename") from None
        self.write_log.append(WriteRecord(dst, f"<renamed from {src}>", True))


def read_bounded(fd: int, limit: int) -> bytes | None:
    """Everything ``fd`` reads until EOF, or ``None`` when that is more than ``limit`` bytes: at most
    ``limit + 1`` bytes are ever read (``st_size`` says nothing for procfs files or devices)."""
    chunks, got = [], 0
    while got <= limit:
        chunk = os.read(fd, min(1 << 20, limit + 1 - got))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        got += len(chunk)
    return None


def require_own_file(st: os.stat_result, path: str, verb: str) -> None:
    """Refuse a regular file with more than one hard link where nodeagent writes, appends, locks or sets aside
    its own files: another name of that inode may lie outside the root (``ln /etc/shadow ROOT/.../lock``), and a
    write in place would change that file. nodeagent never links its files, so a second link is not its own."""
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        raise NotAllowedError(
            f"refusing to {verb} {path}: it has {st.st_nlink} hard links, so it is also a file elsewhere "
            "(nodeagent writes only files of its own, which have one link)", path=path,
            hint=f"remove {path} (the other names of the file keep it); nodeagent creates its own")


def check_timeout(timeout: float) -> None:
    """A lock wait is a finite number of seconds, ≥ 0 (``nan`` would wait forever, ``inf`` too)."""
    if not (isinstance(timeout, int | float) and math.isfinite(timeout) and timeout >= 0):
        raise UsageError(f"lock timeout {timeout!r}: not a finite number of seconds ≥ 0",
                         hint="give --lock-timeout seconds, e.g. --lock-timeout 60 (0: do not wait)")


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words (for refusals)."""
    for test, word in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symlink")):
        if test(mode):
            return word
    return "a regular file" if stat.S_ISREG(mode) else "a special file"
