"""A simulated node's ``sys`` as a FUSE filesystem whose writes are the simulator's kernel stores.

A bind mount shows the simulated tree as plain files: a peer tool's write to an attribute (damo writes
``update_schemes_stats`` to a kdamond's ``state`` before it reads the statistics) would replace the file's text
and bypass the simulator, so the read-only bind refuses it. Mounted over ``/sys`` inside the peer namespace
(``nsrun.sh``, never anywhere else), this filesystem serves the same tree and hands each ``write(2)`` to
``SimKernel.write`` — the path nodeagent's own writes take — so the tool sees the kernel's answer (EINVAL for a
command the kernel generation lacks, EBUSY, EACCES on a read-only attribute) and its effect (the statistics a
refresh brings), as it would on a real node. Reads of a write-only attribute fail with EACCES as sysfs's do.
The marker file that proves the bind is read-only here too.

    python simfs.py SIMROOT MOUNTPOINT     (foreground; ends when MOUNTPOINT is unmounted)

Needs mfusepy and libfuse3 (``scripts/peer-tools.sh`` fetches both; ``FUSE_LIBRARY_PATH`` names the library).
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from pathlib import Path

import mfusepy as fuse
from nodeagent_sim import SimKernel

MARKER = "/.nodeagent-peer-marker"


class SimSys(fuse.Operations):
    """``SIMROOT/sys`` served read-through; writes go through the simulator's kernel."""

    use_ns = True

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.sys = self.root / "sys"

    def _local(self, path: str) -> Path:
        return self.sys / path.lstrip("/")

    def _lstat(self, path: str) -> os.stat_result:
        try:
            return os.lstat(self._local(path))
        except FileNotFoundError:
            raise fuse.FuseOSError(errno.ENOENT) from None

    def getattr(self, path: str, fh: int | None = None) -> dict:
        st = self._lstat(path)
        mode = st.st_mode
        if path == MARKER:
            mode = stat.S_IFREG | 0o444
        return {"st_mode": mode, "st_nlink": st.st_nlink, "st_uid": 0, "st_gid": 0,
                "st_size": st.st_size if not stat.S_ISREG(mode) else 4096,  # sysfs shows a page
                "st_atime_ns": st.st_mtime_ns, "st_mtime_ns": st.st_mtime_ns, "st_ctime_ns": st.st_mtime_ns}

    def readlink(self, path: str) -> str:
        return os.readlink(self._local(path))

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *sorted(os.listdir(self._local(path)))]

    def access(self, path: str, amode: int) -> int:
        st = self._lstat(path)
        if amode & os.W_OK and (path == MARKER or not st.st_mode & 0o200):
            raise fuse.FuseOSError(errno.EACCES)
        return 0

    def open(self, path: str, flags: int) -> int:
        st = self._lstat(path)
        if flags & os.O_ACCMODE != os.O_RDONLY and (path == MARKER or not st.st_mode & 0o200):
            raise fuse.FuseOSError(errno.EACCES)
        if flags & os.O_ACCMODE != os.O_WRONLY and not st.st_mode & 0o444:
            raise fuse.FuseOSError(errno.EACCES)  # a write-only attribute (sysfs: no show method)
        return 0

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return self._local(path).read_bytes()[offset:offset + size]

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        try:
            SimKernel(self.root).write("/sys" + path, data.decode())
        except OSError as exc:
            raise fuse.FuseOSError(exc.errno or errno.EIO) from None
        return len(data)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        return 0  # O_TRUNC on a sysfs attribute changes nothing


def main() -> None:
    root, mountpoint = sys.argv[1:3]
    fuse.FUSE(SimSys(Path(root)), mountpoint, foreground=True, direct_io=True,
              fsname="nodeagent-simsys")


if __name__ == "__main__":
    main()
