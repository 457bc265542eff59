"""The machine behind a root: the real one, or one that a plugin lays out in a directory.

A root whose ``.nodeagent-machine/meta.json`` exists is not a real machine: a *machine plugin* answers for it — its
kernel's rules for writes, its injected faults, its hardware probes (filesystem usage, copy bandwidth, pointer
chase), its NVML provider and its memory-policy calls. Plugins register under the entry-point group
``nodeagent.machines``; the simulator that the tests and ``make demo`` use is one, installed beside nodeagent.
Nothing under ``nodeagent/`` names a plugin: the host layer asks :func:`plugin`, and the CLI lists the plugin's
commands and presets through :func:`commands` and :func:`presets`.

The plugin's object provides (each looked up only when a command needs it, so a read-only command on a
simulated root loads nothing but this module):

- ``kernel(root)``: an object with ``write(path, value)`` that applies the machine kernel's rules to a write;
- ``check_fault(root, path)``: raises the ``OSError`` an injected fault makes a write of nodeagent's own files
  fail with;
- ``hardware()``: the probes' answers (``statvfs(root, path)``, ``copy_bandwidth(root, node, cpus, ...)``);
- ``chase_ns(root, initiator, target)``, ``nvml(root)``, ``set_mempolicy(root, mode, nodes)``;
- ``recover(root)`` (optional): repair what a writer killed in the middle of a write left (called by
  :func:`nodeagent.host.open_host` when the root holds an in-flight record, ``inflight.<pid>.json``);
- ``presets()`` (names) and ``laid_out(preset)`` / ``lay_out(preset)`` (the directory of a preset's node, reused
  once laid out) for ``--simulate``.
"""

from __future__ import annotations

import os
import sys
from functools import cache
from typing import Any, NamedTuple

from ..util.errors import UsageError
from .files import InputFileError, read_regular

#: The entry-point group machine plugins register under (name → object with the methods above).
GROUP = "nodeagent.machines"
#: The entry-point group of the commands plugins add to the command line (name → click command).
COMMANDS = "nodeagent.commands"
#: The plugin a simulated root (``.nodeagent-machine``) belongs to.
SIMULATED = "sim"


class EntryPoint(NamedTuple):
    """An entry point as its distribution declares it: ``name = module:attr``."""

    name: str
    value: str

    def load(self) -> Any:
        """The object it names (``module`` imported, then ``attr``'s dotted path), as importlib.metadata does."""
        import importlib

        module, _, attr = self.value.partition("[")[0].partition(":")
        obj = importlib.import_module(module.strip())
        for part in filter(None, attr.strip().split(".")):
            obj = getattr(obj, part)
        return obj


#: An entry_points.txt is a few lines; a larger one is not read.
_MAX_ENTRY_POINTS = 1024 * 1024


def _entry_points(group: str) -> dict[str, EntryPoint]:
    """The entry points of ``group`` that the distributions on ``sys.path`` declare (their ``*.dist-info`` or
    ``*.egg-info`` ``entry_points.txt``; of two distributions of one name, the first on the path): what
    ``importlib.metadata.entry_points(group=...)`` finds (tests/unit/test_machine_entry_points.py holds it to that).
    Read directly because importing importlib.metadata (email, zipfile, csv, ...) cost every command on a
    simulated root ~160 M instructions, half of a converged apply's own work."""
    found: dict[str, EntryPoint] = {}
    seen: set[str] = set()
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for meta in names:
            stem, dot, suffix = meta.rpartition(".")
            if not dot or suffix not in ("dist-info", "egg-info"):
                continue
            dist = stem.split("-")[0].lower().replace("_", "-").replace(".", "-")
            if dist in seen:
                continue
            try:  # (bounded, regular files only, as every file nodeagent does not own is read)
                text = read_regular(os.path.join(entry or ".", meta, "entry_points.txt"), _MAX_ENTRY_POINTS).decode(
                    "utf-8", errors="replace")
            except InputFileError:
                if os.path.isdir(os.path.join(entry or ".", meta)):
                    seen.add(dist)
                continue
            seen.add(dist)
            section = None
            for line in text.splitlines():
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                if line.startswith("[") and line.endswith("]"):
                    section = line[1:-1].strip()
                elif section == group and "=" in line:
                    name, _, value = line.partition("=")
                    found[name.strip()] = EntryPoint(name.strip(), value.strip())  # the last, as a dict of them
    return found


@cache
def plugin(name: str = SIMULATED) -> Any:
    """The machine plugin ``name``; a clear error (exit 64) when it is not installed."""
    eps = _entry_points(GROUP)
    if name not in eps:
        raise UsageError(f"this root is a simulated node ({name!r}), but no machine plugin {name!r} is installed",
                         hint="install the simulator beside nodeagent (`make demo` and `make test` do: "
                              "pip install -e ./sim)")
    return eps[name].load()


def installed(name: str = SIMULATED) -> bool:
    return name in _entry_points(GROUP)


def commands() -> dict[str, Any]:
    """The commands plugins add (name → entry point, loaded by the caller when the command is looked up)."""
    return _entry_points(COMMANDS)


def presets(prefix: str = "") -> list[str]:
    """The simulated presets whose names start with ``prefix`` (none without the plugin)."""
    if not installed():
        return []
    return [name for name in plugin().presets() if name.startswith(prefix)]
