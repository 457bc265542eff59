"""The simulator as nodeagent's machine plugin (entry point ``nodeagent.machines: sim``).

nodeagent's host layer (:mod:`nodeagent.host.machine`) asks this object about a simulated root; it never imports
the simulator by name. Each method imports the part of the simulator it needs, so a write loads the kernel rules
and a probe loads the hardware model, nothing more.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class SimMachine:
    """What a simulated node answers in place of a real machine."""

    def kernel(self, root: Path) -> Any:
        from .kernel import SimKernel

        return SimKernel(root)

    def check_fault(self, root: Path, path: str) -> None:
        from . import faults

        faults.check(root, path)

    def hardware(self) -> Any:
        from . import hardware

        return hardware

    def chase_ns(self, root: Path, initiator: int, target: int) -> float:
        from .latency import chase_ns

        return chase_ns(root, initiator, target)

    def nvml(self, root: Path) -> Any:
        from .nvidia import nvml

        return nvml(root)

    def set_mempolicy(self, root: Path, mode: str, nodes: tuple[int, ...]) -> None:
        from .serving import set_mempolicy

        set_mempolicy(root, mode, nodes)

    def presets(self) -> list[str]:
        from .presets import PRESETS

        return list(PRESETS)

    def laid_out(self, preset: str) -> bool:
        """Whether ``preset``'s node is already laid out in the cache (raises ``KeyError`` for an unknown one)."""
        from . import cached_path, get

        get(preset)
        return cached_path(preset).exists()

    def lay_out(self, preset: str) -> Path:
        """The cached root of ``preset``'s node, laid out on first use (``KeyError`` for an unknown preset)."""
        from . import cached

        return cached(preset)


MACHINE = SimMachine()
