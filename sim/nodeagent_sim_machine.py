"""The simulator as nodeagent's machine plugin (entry point ``nodeagent.machines: sim``), and the probe answers a
simulated node gives in place of this machine's: a filesystem's usage (``statvfs``) and the time a memory copy
takes on a node, from the tables :mod:`nodeagent_sim.hardware` lays out under the marker.

A module beside the ``nodeagent_sim`` package, not in it: importing anything of the package loads all of the
simulator (its modules import each other, in the order its ``__init__`` sets), which cost a converged apply on a
simulated root more than its own work, for the one ``statvfs`` its disk check asks. nodeagent's host layer
(:mod:`nodeagent.host.machine`) asks this object about a simulated root and never imports the simulator by name;
each method imports the part of the simulator it needs. (``nodeagent_sim.machine`` names the same object, for
installs whose entry point still points there.)
"""

from __future__ import annotations

import errno
import json
import os
import sys
from pathlib import Path
from typing import Any

from nodeagent.util.kfmt import parse_meminfo

#: The simulator's directory under a simulated root (:data:`nodeagent_sim.kernel.MARKER`).
MARKER = ".nodeagent-machine"
STATVFS = "statvfs.json"
BANDWIDTH = "bandwidth.json"


def statvfs(root: Path, path: str) -> dict[str, int]:
    """The simulated ``statvfs(path)``: usage of the mount that holds ``path``; ENOENT when it does not exist."""
    local = Path(root) / path.lstrip("/")
    if not os.path.lexists(local):
        raise OSError(errno.ENOENT, os.strerror(errno.ENOENT), path)
    try:
        table: dict[str, dict[str, int]] = json.loads((Path(root) / MARKER / STATVFS).read_text())
    except FileNotFoundError:
        raise OSError(errno.EIO, "this simulated node has no mount table (laid out by an older nodeagent: "
                      "create it again)", path) from None
    norm = os.path.normpath("/" + path.lstrip("/"))
    best = max((m for m in table if norm == m or norm.startswith(m.rstrip("/") + "/")), key=len, default=None)
    if best is None:
        raise OSError(errno.ENOENT, "no simulated mount holds this path", path)
    return table[best]


def mbind_target(root: Path, node: int) -> Path:
    """The directory of ``node``, which a buffer can be bound to; EINVAL, as ``mbind`` fails on the real kernel,
    when the node is not online or has no memory."""
    base = Path(root) / "sys/devices/system/node" / f"node{node}"
    try:
        info = parse_meminfo((base / "meminfo").read_text())
    except OSError:
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL) + f" (node {node} is not online)") from None
    if not info.get("MemTotal"):
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL) + f" (node {node} has no memory online)")
    return base


def copy_seconds(root: Path, node: int, threads: int, nbytes: int) -> float:
    """How long the simulated node takes to move ``nbytes`` (read + write) on ``node`` with ``threads`` threads:
    ``threads × single-thread`` figure, capped at the node's all-CPU figure. EINVAL for a node without memory,
    as ``mbind`` fails on the real kernel."""
    base = mbind_target(root, node)
    model = json.loads((Path(root) / MARKER / BANDWIDTH).read_text())
    cpuless = not (base / "cpulist").read_text().strip()
    single, full = model["cpuless" if cpuless else "dram"]
    gbps = min(single * max(threads, 1), full)
    return nbytes / (gbps * 1e9)


class SimMachine:
    """What a simulated node answers in place of a real machine."""

    def kernel(self, root: Path) -> Any:
        from nodeagent_sim.kernel import SimKernel

        return SimKernel(root)

    def recover(self, root: Path) -> list[dict[str, Any]]:
        """Repair what a writer killed in the middle of a write left on the node (:mod:`nodeagent_sim.recovery`)."""
        from nodeagent_sim.recovery import recover

        return recover(root)

    def check_fault(self, root: Path, path: str) -> None:
        from nodeagent_sim import faults

        faults.check(root, path)

    def hardware(self) -> Any:
        """The probes' answers (``statvfs``, ``copy_seconds``): this module, which loads nothing of the simulator."""
        return sys.modules[__name__]

    def chase_ns(self, root: Path, initiator: int, target: int) -> float:
        from nodeagent_sim.latency import chase_ns

        return chase_ns(root, initiator, target)

    def nvml(self, root: Path) -> Any:
        from nodeagent_sim.nvidia import nvml

        return nvml(root)

    def set_mempolicy(self, root: Path, mode: str, nodes: tuple[int, ...]) -> None:
        from nodeagent_sim.serving import set_mempolicy

        set_mempolicy(root, mode, nodes)

    def presets(self) -> list[str]:
        from nodeagent_sim.presets import PRESETS

        return list(PRESETS)

    def laid_out(self, preset: str) -> bool:
        """Whether ``preset``'s node is already laid out in the cache (raises ``KeyError`` for an unknown one)."""
        from nodeagent_sim import cached_path, get

        get(preset)
        return cached_path(preset).exists()

    def lay_out(self, preset: str) -> Path:
        """The cached root of ``preset``'s node, laid out on first use (``KeyError`` for an unknown preset)."""
        from nodeagent_sim import cached

        return cached(preset)


MACHINE = SimMachine()
