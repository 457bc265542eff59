"""The node's mount table from ``/proc/self/mountinfo`` (read under the host's root), and where cgroup v2 is.

``mountinfo`` (proc(5)) is the table to trust: unlike ``/proc/mounts`` it says which part of a filesystem a mount
shows (``root``: ``/`` for a whole cgroup hierarchy, a sub-path for a bind mount or a cgroup namespace) and
separates the filesystem type from the source. One line::

    36 25 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate

cgroup v2 is where the systemd of the node mounted it: ``/sys/fs/cgroup`` (unified), ``/sys/fs/cgroup/unified``
(hybrid: the memory controller then lives in a v1 hierarchy and v2 has no ``memory.reclaim``), or anywhere an
administrator chose. A v1 mount (type ``cgroup``) is never a cgroup v2 mount, whatever its path.
"""

from __future__ import annotations

import os
import re
from typing import Protocol

from ..util.dataclass import dataclass

MOUNTINFO = "/proc/self/mountinfo"


class Reader(Protocol):
    def read_opt(self, path: str) -> str | None: ...

    def exists(self, path: str) -> bool: ...


@dataclass(frozen=True)
class MountEntry:
    mount_id: int
    parent_id: int
    root: str  # the path inside the filesystem this mount shows ("/" for all of it)
    mount_point: str
    options: str
    fstype: str
    source: str
    super_options: str


def unescape(text: str) -> str:
    """The kernel's octal escapes of space, tab, newline and backslash in mount paths (``\\040``)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def parse_mountinfo(text: str) -> list[MountEntry]:
    """Every well-formed line, in the kernel's order (later mounts over earlier ones); malformed lines are
    skipped (a truncated read of a changing table)."""
    out = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        words, tail = left.split(), right.split()
        if not sep or len(words) < 6 or len(tail) < 2 or not (words[0].isdigit() and words[1].isdigit()):
            continue
        out.append(MountEntry(int(words[0]), int(words[1]), unescape(words[3]), unescape(words[4]), words[5],
                              tail[0], unescape(tail[1]), tail[2] if len(tail) > 2 else ""))
    return out


def read_mountinfo(fs: Reader) -> list[MountEntry]:
    return parse_mountinfo(fs.read_opt(MOUNTINFO) or "")


def mount_at(mounts: list[MountEntry], path: str) -> MountEntry | None:
    """The mount that holds ``path``: the longest mount point above it, the last mounted on a tie (it hides the
    earlier ones)."""
    norm = os.path.normpath("/" + path.lstrip("/"))
    best: MountEntry | None = None
    for m in mounts:
        mp = m.mount_point
        if norm == mp or norm.startswith(mp.rstrip("/") + "/"):
            if best is None or len(mp) >= len(best.mount_point):
                best = m
    return best


def visible(mounts: list[MountEntry], m: MountEntry) -> bool:
    """True when nothing was mounted over ``m`` afterwards."""
    return mount_at(mounts, m.mount_point) is m


def cgroup2_mounts(mounts: list[MountEntry]) -> list[MountEntry]:
    """The visible mounts of a whole cgroup v2 hierarchy (``root`` ``/``: a bind mount of a child cgroup shows
    that cgroup, not the root)."""
    return [m for m in mounts if m.fstype == "cgroup2" and m.root == "/" and visible(mounts, m)]


def is_cgroup2_root_file(mounts: list[MountEntry], path: str) -> bool:
    """True when ``path`` is a file at the top of a visible mount of a whole cgroup v2 hierarchy
    (``<mount>/memory.reclaim``): not in a child cgroup (nor a bind mount of one), not in a v1 hierarchy, not under
    something mounted over the cgroup."""
    norm = os.path.normpath(path)
    m = mount_at(mounts, norm)
    return m is not None and m.fstype == "cgroup2" and m.root == "/" and os.path.dirname(norm) == m.mount_point


def memcg_reclaim(fs: Reader) -> tuple[str | None, str | None]:
    """``(memory.reclaim of the root cgroup, the cgroup v2 mount point)``: the file is None when cgroup v2 is not
    mounted, or has no memory controller there (hybrid hierarchy, kernel before 5.19)."""
    mounts = read_mountinfo(fs)
    found = cgroup2_mounts(mounts)
    for m in found:
        path = os.path.join(m.mount_point, "memory.reclaim")
        if fs.exists(path):
            return path, m.mount_point
    return None, found[0].mount_point if found else None


__all__ = ["MOUNTINFO", "MountEntry", "cgroup2_mounts", "is_cgroup2_root_file", "memcg_reclaim", "mount_at",
           "parse_mountinfo", "read_mountinfo", "unescape"]
