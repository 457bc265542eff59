"""Probes that are not file reads: filesystem usage (statvfs) and memory copy bandwidth, rooted like the rest.

On the real root (``/``) they ask this machine. On a simulated root they ask the simulator, which answers from
the preset's data (never from the machine the tests run on). On any other root, ``statvfs`` looks at the tree
under the root (a mounted image is what it is), and bandwidth is refused: it would measure this machine.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..util.dataclass import dataclass
from ..util.errors import HostError
from .fs import map_oserror

if TYPE_CHECKING:
    from . import Host


@dataclass(frozen=True)
class StatVfs:
    """What ``statvfs(3)`` says, in the units ``df`` uses: bytes and inode counts."""

    block_size: int  # f_frsize
    blocks: int  # f_blocks
    blocks_free: int  # f_bfree (root may use these)
    blocks_avail: int  # f_bavail (an unprivileged process may use these)
    files: int  # f_files; 0 on filesystems without a fixed inode table (btrfs)
    files_free: int  # f_ffree

    @property
    def size(self) -> int:
        return self.blocks * self.block_size

    @property
    def free(self) -> int:
        """Bytes an ordinary process can still write (``df``'s Avail)."""
        return self.blocks_avail * self.block_size

    @property
    def used(self) -> int:
        return (self.blocks - self.blocks_free) * self.block_size

    @property
    def used_percent(self) -> float:
        """``df``'s Use%: used / (used + avail), so reserved blocks count as unavailable."""
        denom = self.used + self.free
        return 100.0 * self.used / denom if denom else 0.0

    @classmethod
    def from_os(cls, st: os.statvfs_result) -> StatVfs:
        return cls(st.f_frsize or st.f_bsize, st.f_blocks, st.f_bfree, st.f_bavail, st.f_files, st.f_ffree)


def _sim() -> object:
    from .machine import plugin

    return plugin().hardware()


def statvfs(host: Host, path: str) -> StatVfs:
    """Usage of the filesystem holding kernel path ``path`` on the node. ``MissingError`` if it does not exist."""
    if host.simulated:
        try:
            return StatVfs(**_sim().statvfs(host.root, path))  # type: ignore[attr-defined]
        except OSError as exc:
            raise map_oserror(exc, path, "statvfs") from None
    try:
        return StatVfs.from_os(host.fs.statvfs(path))
    except OSError as exc:
        raise map_oserror(exc, path, "statvfs") from None


@dataclass(frozen=True)
class CopyRun:
    """One timed copy run: ``threads`` threads each copying their share of ``size`` bytes ``iterations`` times."""

    node: int
    cpus: tuple[int, ...]
    size: int
    iterations: int
    seconds: float  # best (shortest) repetition

    @property
    def bytes_moved(self) -> int:
        """STREAM's convention for Copy: every byte is read once and written once."""
        return 2 * self.size * self.iterations

    @property
    def gbps(self) -> float:
        return self.bytes_moved / self.seconds / 1e9 if self.seconds > 0 else 0.0


def copy_bandwidth(host: Host, node: int, cpus: list[int], *, size: int, iterations: int,
                   repeats: int = 3) -> CopyRun:
    """Copy bandwidth of the memory of NUMA ``node`` with one thread per CPU in ``cpus``."""
    if host.simulated:
        try:
            seconds = _sim().copy_seconds(host.root, node, len(cpus),  # type: ignore[attr-defined]
                                          2 * size * iterations)
        except OSError as exc:
            raise HostError(f"mbind to node {node} failed: {exc.strerror}",
                            hint="the node may have no memory online, or not exist") from None
        return CopyRun(node, tuple(cpus), size, iterations, seconds)
    if not host.is_real:
        raise HostError(f"cannot measure memory bandwidth for --root {host.root}: it would measure this machine",
                        hint="run nodeagent on the node itself (--root /)")
    from . import membw

    seconds = membw.measure(node, cpus, size=size, iterations=iterations, repeats=repeats,
                            max_node=_max_node(host))
    return CopyRun(node, tuple(cpus), size, iterations, seconds)


def _max_node(host: Host) -> int:
    from ..util.kfmt import parse_list

    ids = parse_list(host.read_opt("/sys/devices/system/node/possible") or "0", "/sys/devices/system/node/possible")
    return max(ids) if ids else 0
