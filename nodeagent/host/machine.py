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
- ``presets()`` (names) and ``laid_out(preset)`` / ``lay_out(preset)`` (the directory of a preset's node, reused
  once laid out) for ``--simulate``.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from ..util.errors import UsageError

#: The entry-point group machine plugins register under (name → object with the methods above).
GROUP = "nodeagent.machines"
#: The entry-point group of the commands plugins add to the command line (name → click command).
COMMANDS = "nodeagent.commands"
#: The plugin a simulated root (``.nodeagent-machine``) belongs to.
SIMULATED = "sim"


def _entry_points(group: str) -> dict[str, Any]:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=group)}


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
