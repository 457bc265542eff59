"""The rooted host: the one object through which nodeagent reads and changes a node.

``open_host(root)`` builds it. When ``root`` carries the simulator's marker, attribute writes go through the
emulated kernel (loaded only then, so production runs never import the simulator) and commands resolve to
the simulator's fake executables inside the root.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..util.dataclass import dataclass
from ..util.errors import UsageError
from .commands import CommandResult, CommandRunner
from .fs import RootedFS, WriteRecord, map_oserror

if TYPE_CHECKING:
    from pathlib import Path

    from .probes import CopyRun, StatVfs

__all__ = ["Host", "open_host", "CommandResult", "CopyRun", "StatVfs", "WriteRecord", "map_oserror", "SIM_MARKER"]

#: A simulated root has this directory (``meta.json``, its lock and its write journal).
SIM_MARKER = ".nodeagent-machine"
#: The simulated node's injected faults (the machine plugin's), under ``SIM_MARKER``: without this file no
#: write has a fault to check, and the plugin is not loaded for it.
SIM_FAULTS = "faults.json"


@dataclass
class Host:
    #: The root as given (``--root``); :attr:`root` is the same as a ``Path``. nodeagent's own code uses this
    #: string: pathlib is not loaded by a command that does not need it.
    root_dir: str
    fs: RootedFS
    commands: CommandRunner
    simulated: bool
    #: Answers probes from a cache (set by the state, :func:`nodeagent.state.boot_cache.attach`); None: ask.
    probe_cache: Callable[[str, Callable[[], str]], str] | None = None

    def cached_probe(self, key: str, run: Callable[[], str]) -> str:
        """``run()``'s answer for ``key``, from the probe cache when one is attached. Exceptions of ``run`` pass."""
        return self.probe_cache(key, run) if self.probe_cache is not None else run()

    @property
    def root(self) -> Path:
        """The root as a ``Path``."""
        from pathlib import Path

        return Path(self.root_dir)

    @property
    def is_real(self) -> bool:
        """True when this is the machine's own root, where root privileges matter."""
        return os.path.realpath(self.root_dir) == "/"

    # Shorthands for the common calls.
    def read(self, path: str) -> str:
        return self.fs.read(path)

    def read_opt(self, path: str) -> str | None:
        return self.fs.read_opt(path)

    def write(self, path: str, value: str) -> None:
        self.fs.write(path, value)

    def run(self, argv: list[str], **kw) -> CommandResult:  # type: ignore[no-untyped-def]
        return self.commands.run(argv, **kw)

    def statvfs(self, path: str) -> StatVfs:
        """Usage of the filesystem that holds ``path`` on the node (the simulator answers for a simulated one)."""
        from .probes import statvfs

        return statvfs(self, path)

    def copy_bandwidth(self, node: int, cpus: list[int], *, size: int, iterations: int) -> CopyRun:
        """Memory copy bandwidth of NUMA ``node`` from ``cpus`` (see :mod:`nodeagent.host.membw`)."""
        from .probes import copy_bandwidth

        return copy_bandwidth(self, node, cpus, size=size, iterations=iterations)


class _SimWriter:
    """The simulated machine's kernel behind a simulated root (:mod:`nodeagent.host.machine`), loaded at the first
    write: a read-only command never loads the plugin."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._kernel: Any = None

    def write(self, path: str, value: str) -> None:
        from .machine import plugin

        if self._kernel is None:
            self._kernel = plugin().kernel(self.root)
        self._kernel.write(path, value)

    def before_file(self, path: str) -> None:
        """Before nodeagent replaces, appends to or renames one of its own files on the simulated node: the
        machine plugin's injected faults apply to those writes too. Without a fault file
        this is one ``stat``: taking the state lock (``drift --record``) does not load the simulator."""
        if os.path.exists(os.path.join(self.root, SIM_MARKER, SIM_FAULTS)):
            from .machine import plugin

            plugin().check_fault(self.root, path)


def open_host(root: str | os.PathLike[str] = "/") -> Host:
    path = os.fspath(root) or "."  # (as pathlib reads "")
    if not os.path.isdir(path):
        raise UsageError(f"--root {root}: not a directory", hint="give the directory under which /sys and /proc are")
    simulated = os.path.isfile(os.path.join(path, SIM_MARKER, "meta.json"))
    if simulated:
        _recover(path)
    writer = _SimWriter(path) if simulated else None
    return Host(root_dir=path, fs=RootedFS(path, writer), commands=CommandRunner(path, simulated), simulated=simulated)


#: A simulated node's record of a write in progress (``inflight.<pid>.json`` under ``SIM_MARKER``).
SIM_INFLIGHT = "inflight."


def _recover(root: str) -> None:
    """A simulated node whose writer was killed in the middle of a write (its in-flight record is left) is repaired
    by its machine plugin's ``recover`` before nodeagent reads it, as a real kernel never shows a half-made write.
    Without such a record this is one ``listdir``: the plugin is not loaded."""
    try:
        names = os.listdir(os.path.join(root, SIM_MARKER))
    except OSError:
        return
    if not any(n.startswith(SIM_INFLIGHT) for n in names):
        return
    from .machine import plugin

    recover = getattr(plugin(), "recover", None)
    if recover is not None:
        recover(root)


def __getattr__(name: str) -> Any:
    if name in ("CopyRun", "StatVfs"):  # re-exported; the probes module loads only for the checks that probe
        from . import probes

        return getattr(probes, name)
    raise AttributeError(name)
