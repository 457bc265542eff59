"""Files the operator names on the command line (``--metrics-textfile PATH``): written on this machine, never
under ``--root``, and never chosen by a profile.

Kept in the host layer so that "only the host layer touches the machine" holds for them too. The write is
atomic in the way node_exporter's textfile collector needs: a temporary file in the same directory, fsync,
rename — a scrape never sees half a file.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import HostError, UsageError
from .fs import map_oserror, replace_file


def write_operator_file(path: str | os.PathLike[str], data: str, mode: int = 0o644) -> Path:
    """Atomically replace the regular file ``path`` with ``data``. The directory must exist (a typo in a path
    should fail, not create a tree); ``path`` must not be a directory or a symlink to one."""
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"{path}: directory {parent} does not exist",
                         hint="create it, or point --metrics-textfile at node_exporter's textfile directory")
    if target.is_dir():
        raise UsageError(f"{path}: is a directory", hint="give a file name such as nodeagent.prom")
    try:
        replace_file(parent / target.name, data, mode)
    except OSError as exc:
        err: HostError = map_oserror(exc, str(path), "write")
        raise err from None
    return target
