"""Files the operator names on the command line: profiles and ``--facts`` files read, ``--metrics-textfile PATH``
written — on this machine, never under ``--root``, and never chosen by a profile.

Kept in the host layer so that "only the host layer touches the machine" holds for them too. Reads take only
regular files, checked on an ``O_PATH`` descriptor before the file is opened for reading (a FIFO would block, a
device node such as ``/dev/zero`` never ends, and opening either can have effects), and are bounded by reading
at most ``limit + 1`` bytes — ``st_size`` is 0 for a procfs file and says nothing about a device. The write is
atomic in the way node_exporter's textfile collector needs: a temporary file in the same directory, fsync,
rename — a scrape never sees half a file — and it replaces only a regular file of one link or creates a new one.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ..util.errors import HostError, UsageError
from .fs import file_kind, map_oserror, read_bounded, replace_at

if TYPE_CHECKING:
    from pathlib import Path

#: A profile file (and each file it extends, and an inline profile): far above any real one, which is a few KiB.
MAX_PROFILE_BYTES = 1024 * 1024


class InputFileError(ValueError):
    """An operator-named input that is not a readable regular file of bounded size. ``str()`` says why (without
    the file name, which the caller puts in front); ``hint`` says the fix."""

    def __init__(self, reason: str, hint: str | None = None) -> None:
        super().__init__(reason)
        self.hint = hint


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of the regular file ``path`` (symlinks followed: the operator named it), at most ``limit``.

    Raises :class:`InputFileError` for a missing path, a directory, a FIFO, socket or device node, a file longer
    than ``limit``, or one that cannot be read."""
    return read_regular_stat(path, limit)[0]


def read_regular_stat(path: str | os.PathLike[str], limit: int) -> tuple[bytes, os.stat_result]:
    """:func:`read_regular`, with the ``stat`` of the file read (its identity, owner and mode, checked on the
    descriptor the bytes came from — never a second lookup of the path). The one reader of files nodeagent does
    not own: profiles and the files they extend, the profile cache, ``--facts`` files, a ConfigMap's profile.

    The path is opened ``O_PATH`` (no open side effects: a FIFO is not waited on, a device not opened), its type
    checked on that descriptor, and only a regular file is opened for reading, through that very descriptor,
    ``O_NONBLOCK``; at most ``limit + 1`` bytes are read."""
    try:
        pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InputFileError("no such file", "check the path") from None
    except OSError as exc:
        raise InputFileError(f"cannot open: {exc.strerror}") from None
    try:
        st = os.fstat(pfd)
        if stat.S_ISDIR(st.st_mode):
            raise InputFileError("is a directory, not a file", "give the file's path")
        if not stat.S_ISREG(st.st_mode):
            raise InputFileError(f"is {file_kind(st.st_mode)}, not a regular file",
                                 "save it to a regular file first (nodeagent reads only regular files)")
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        try:
            fd = os.open(f"/proc/self/fd/{pfd}", flags) if os.path.isdir("/proc/self/fd") else os.open(path, flags)
        except OSError as exc:
            raise InputFileError(f"cannot read: {exc.strerror}") from None
    finally:
        os.close(pfd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # only without /proc: the path was looked up twice
            raise InputFileError(f"is {file_kind(st.st_mode)}, not a regular file",
                                 "save it to a regular file first (nodeagent reads only regular files)")
        data = read_bounded(fd, limit)
    except OSError as exc:
        raise InputFileError(f"cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if data is None:
        raise InputFileError(f"longer than {limit} bytes (the limit for this file)",
                             "check that this is the right file")
    return data, st


def check_operator_target(path: str | os.PathLike[str], option: str = "--metrics-textfile") -> None:
    """Refuse, before any work, what :func:`write_operator_file` would refuse at ``path``."""
    with _target_dir(path, option) as (dfd, name):
        _require_replaceable(path, dfd, name, option)


_EXAMPLES = {"--metrics-textfile": "/var/lib/node_exporter/textfile_collector/nodeagent.prom",
             "--save": "facts/node1.json"}


@contextmanager
def _target_dir(path: str | os.PathLike[str], option: str) -> Iterator[tuple[int, str]]:
    from pathlib import Path  # (not loaded by the commands that write no operator file)

    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    name = target.name
    if not name or name in (".", ".."):
        raise UsageError(f"{option} {path}: not a file name", hint="give a file name")
    try:
        dfd = os.open(parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        raise UsageError(f"{option} {path}: directory {parent} does not exist",
                         hint=f"create it, or give a path such as {_EXAMPLES.get(option, 'out.txt')}") from None
    except OSError as exc:
        raise map_oserror(exc, str(path), "write") from None
    try:
        yield dfd, name
    finally:
        os.close(dfd)


def _require_replaceable(path: str | os.PathLike[str], dfd: int, name: str, option: str) -> None:
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        what = file_kind(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            what += f" (to {os.readlink(name, dir_fd=dfd)})"
        raise UsageError(f"{option} {path}: is {what}; nodeagent writes only a regular file or a new path",
                         hint=f"give the path of the file itself, e.g. {_EXAMPLES.get(option, 'out.txt')}")
    if st.st_nlink > 1:
        raise UsageError(f"{option} {path}: has {st.st_nlink} hard links, so it is also a file elsewhere; nodeagent "
                         "replaces only a file of its own (one link) or creates a new path",
                         hint=f"remove {path} (its other names keep the file), or give another path")


def write_operator_file(path: str | os.PathLike[str], data: str, mode: int = 0o644, *,
                        option: str = "--metrics-textfile") -> Path:
    """Atomically replace the regular file ``path`` with ``data``, or create it. The directory must exist (a typo
    in a path should fail, not create a tree). Anything else at ``path`` — a directory, a device node such as
    ``/dev/null``, a FIFO, a socket, a symlink (which the rename would replace, not follow) — is refused:
    nodeagent writes its file, never over something that is not one."""
    with _target_dir(path, option) as (dfd, name):
        _require_replaceable(path, dfd, name, option)
        try:
            replace_at(dfd, name, data, mode)
        except OSError as exc:
            if exc.errno == errno.EISDIR:
                raise UsageError(f"{option} {path}: is a directory", hint="give a file name") from None
            err: HostError = map_oserror(exc, str(path), "write")
            raise err from None
    from pathlib import Path

    return Path(path)
