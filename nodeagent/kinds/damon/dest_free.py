"""A migrate scheme paused while its destination node is nearly full (the profile's ``dest_free``). Pure.

Why: DAMON's migrate destination is not strict: measured on 6.12, once the destination is at its low watermark
the pages a migrate_cold scheme moves land on the next node of the destination's zonelist — on a CXL node that is
a DRAM node, CPU-less nodes first, often not the source (a kernel whose migration fails there instead keeps the
scheme trying at its quota, CPU spent for nothing). A cold set larger than the CXL node ended with 15-18 % of the
workload's pages on the other DRAM node (bench/placement/README.md, "Demotion into a full CXL node, and the
guard"). DAMOS watermarks measure the whole system, and per-node quota goals (6.16) throttle rather than stop.

How: the desired state of a guarded scheme is a function of the destination's free memory — paused under
``pause_below`` (its minimum region size is the largest value, :data:`PAUSED`, so it matches no region: the
scheme keeps its index, its quota and its statistics, and a ``commit`` switches it either way with the same pid),
as written over ``resume_above``, and *as it is now* in between (hysteresis: :func:`resolve` takes the kernel's
current value). Plan, apply and drift all read the same function, so a paused scheme is what the profile wants
while its destination is full, not drift; ``nodeagent guard`` re-plans it every second (:mod:`nodeagent.loops.guard`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ...util.dataclass import dataclass
from ...util.quantities import approx_size
from .prime import NOWHERE, SCHEMES

if TYPE_CHECKING:
    from .spec import Spec

#: The minimum region size of a paused scheme: no region is that large.
PAUSED = NOWHERE
SZ_MIN = "access_pattern/sz/min"


@dataclass(frozen=True)
class Guard:
    """One guarded scheme of a kdamond: its index in the kdamond, its destination, the thresholds in bytes, the
    destination's memory when planned, and what the plan decided (``pause``, ``resume`` or ``hold``)."""

    scheme: int
    action: str
    node: int
    pause_below: int
    resume_above: int
    free: int | None  # None: the node is not online yet (a DAX device this plan onlines): it is empty
    total: int | None
    state: str
    written: str  # the scheme's minimum region size as the profile writes it
    pause_pct: float = 0.0  # the profile's thresholds, percentages of the destination's memory
    resume_pct: float = 0.0

    @property
    def path(self) -> str:
        return f"{SCHEMES}/{self.scheme}/{SZ_MIN}"

    def describe(self) -> str:
        """What the thresholds mean on this node, and where the destination stands."""
        where = (f"node{self.node} not online yet (empty)" if self.free is None or not self.total else
                 f"node{self.node} has {approx_size(self.free)} free ({100 * self.free / self.total:.1f} %)")
        return (f"{self.action} → node{self.node} paused under {approx_size(self.pause_below)} free, resumed over "
                f"{approx_size(self.resume_above)}: {where}")


def decide(free: int | None, pause_below: int, resume_above: int) -> str:
    """``pause`` under the lower threshold, ``resume`` over the upper one (or when the node is not online yet),
    ``hold`` in between."""
    if free is None:
        return "resume"
    if free < pause_below:
        return "pause"
    return "resume" if free > resume_above else "hold"


def thresholds(total: int, pause_below: float, resume_above: float) -> tuple[int, int]:
    """The percentages of the destination's memory in bytes."""
    return int(total * pause_below / 100), int(total * resume_above / 100)


def guard_for(scheme: int, action: str, node: int, mem: tuple[int, int] | None, pause_pct: float,
              resume_pct: float, written: str) -> Guard:
    """The guard of one scheme, from the destination's ``(free, total)`` bytes (``None``: not online yet)."""
    if mem is None or not mem[1]:
        return Guard(scheme, action, node, 0, 0, None, None, "resume", written, pause_pct, resume_pct)
    free, total = mem
    lo, hi = thresholds(total, pause_pct, resume_pct)
    return Guard(scheme, action, node, lo, hi, free, total, decide(free, lo, hi), written, pause_pct, resume_pct)


def paused(value: str | None) -> bool:
    return value == PAUSED


def resolve(spec: Spec, observed: dict[str, str]) -> Spec:
    """``spec`` with each guarded scheme that is in its hysteresis band kept as the kernel has it now (paused or
    as written); a scheme the kernel holds some other way (drifted) is written as the profile says."""
    held = {g.scheme for g in spec.guards if g.state == "hold" and paused(observed.get(g.path))}
    return replace(spec, tree=spec.tree.with_min_size(held, int(PAUSED))) if held else spec


def is_paused(spec: Spec, g: Guard) -> bool:
    """Whether ``spec`` (resolved) pauses guard ``g``'s scheme."""
    return paused(spec.config.get(g.path))


def reasons(spec: Spec, writes: list[tuple[str, str]], observed: dict[str, str]) -> list[str]:
    """One line per guarded scheme these ``writes`` pause or resume, saying why."""
    changed = dict(writes)
    out = []
    for g in spec.guards:
        if g.path not in changed:
            continue
        was = observed.get(g.path)
        if paused(changed[g.path]):
            out.append(f"dest_free: pause {g.describe()}")
        elif paused(was):
            out.append(f"dest_free: resume {g.describe()}")
    return out
