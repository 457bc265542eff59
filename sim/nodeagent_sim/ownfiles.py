"""The simulator's own files under ``<root>/.nodeagent-machine``: its state, write journal, uevent and command
logs, faults, GPU table and memory policies. Like nodeagent's state files they are reached through a descriptor
of the marker directory, never by a path a planted symlink could redirect: the marker directory itself must be
a real directory of the root, and a file is opened without following a symlink, only when it is a regular file
of one link (a hard link's other name may be outside the root), and replaced by a fresh file renamed over it.

A refusal is an ``OSError`` with ``ELOOP`` (a symlink) or ``EMLINK`` (a hard link) naming the file.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MARKER = ".nodeagent-machine"
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@contextmanager
def marker_dir(root: Path | str, *, create: bool = False) -> Iterator[int]:
    """A descriptor of ``<root>/.nodeagent-machine`` (made when ``create``); a symlink there is refused."""
    rfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            fd = os.open(MARKER, _DIR, dir_fd=rfd)
        except FileNotFoundError:
            if not create:
                raise
            os.mkdir(MARKER, 0o755, dir_fd=rfd)
            fd = os.open(MARKER, _DIR, dir_fd=rfd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise OSError(errno.ELOOP, "the simulator's directory is a symlink or not a directory",
                              str(Path(root) / MARKER)) from None
            raise
    finally:
        os.close(rfd)
    try:
        yield fd
    finally:
        os.close(fd)


def _checked(fd: int, where: str) -> int:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", where)
    if st.st_nlink > 1:
        os.close(fd)
        raise OSError(errno.EMLINK, "a regular file with more than one link", where)
    return fd


def open_file(root: Path | str, name: str, flags: int, mode: int = 0o644) -> int:
    """``name`` in the simulator's directory, opened with ``flags`` (O_NOFOLLOW added), checked regular and of
    one link; the caller closes the descriptor."""
    with marker_dir(root, create=bool(flags & os.O_CREAT)) as dfd:
        try:
            fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise OSError(errno.ELOOP, "a symlink", str(Path(root) / MARKER / name)) from None
            raise
        return _checked(fd, str(Path(root) / MARKER / name))


def append(root: Path | str, name: str, text: str) -> None:
    fd = open_file(root, name, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def read_text(root: Path | str, name: str) -> str | None:
    """The file's text; None when it does not exist."""
    try:
        fd = open_file(root, name, os.O_RDONLY)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read().decode()


def replace(root: Path | str, name: str, text: str, mode: int = 0o644) -> None:
    """Write ``name`` anew: a fresh temporary file in the same directory (O_EXCL, never an existing name), then
    renamed over it — a reader sees the old file or the new one, and a link planted at ``name`` is replaced,
    not written through."""
    with marker_dir(root, create=True) as dfd:
        tmp = f".{name}.{os.getpid()}.tmp"
        try:
            os.unlink(tmp, dir_fd=dfd)
        except FileNotFoundError:
            pass
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dfd)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
