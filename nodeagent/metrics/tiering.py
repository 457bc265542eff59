"""Pages moved between memory tiers, by who moved them, and the ping-pong estimator.

Per node, from ``nodeN/vmstat`` (the kernel counts promotions on the node pages went *to*, demotions on the
node they left): ``cause="numa_balancing"`` is ``pgpromote_success``; ``kswapd``, ``direct``, ``khugepaged``,
``proactive`` are ``pgdemote_<cause>``. DAMON's part is each owned ``migrate_hot`` / ``migrate_cold``
scheme's ``sz_applied``, on its destination node (promotion) or the node it monitors (demotion). Kernels
before 6.9 count demotions only in ``/proc/vmstat``: those land on ``node="all"``.

**Ping-pong estimator** (docs/staying-converged.md): over a window W, for a fast node n, P = bytes promoted to n and
D = bytes demoted from n (all causes). The kernel does not track pages, so the bytes moved back within W
are bounded, not known: at most min(P, D) of the P promoted bytes can have gone down again (or have come up
after going down) inside W. ``ratio = min(P, D) / P`` — an upper bound of the page-level figure, exact when
every demoted byte had been promoted in W, high when the hot set shifts (new pages up, other pages down).
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field

DEMOTE_CAUSES = ("kswapd", "direct", "khugepaged", "proactive")


def page_size() -> int:
    return os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass
class Moves:
    """Cumulative bytes moved, ``{(node, cause): bytes}`` for promotions (node = destination) and demotions
    (node = source); counters, so they only grow (until a reboot or a kdamond restart)."""

    promoted: dict[tuple[str, str], float] = field(default_factory=dict)
    demoted: dict[tuple[str, str], float] = field(default_factory=dict)

    def by_node(self, which: dict[tuple[str, str], float]) -> dict[str, float]:
        out: dict[str, float] = {}
        for (node, _), v in which.items():
            out[node] = out.get(node, 0.0) + v
        return out


def _delta(new: float, old: float) -> float:
    return new - old if new >= old else new  # a counter reset (reboot, kdamond restarted): count from zero


@dataclass(frozen=True)
class PingPong:
    node: str
    promoted: float  # bytes in the window
    demoted: float
    window: float  # seconds the window actually covers

    @property
    def ratio(self) -> float | None:
        return min(self.promoted, self.demoted) / self.promoted if self.promoted > 0 else None


def estimate(old: Moves, new: Moves, window: float) -> list[PingPong]:
    """The estimator between two samples ``window`` seconds apart, per node that received promotions."""
    out = []
    p_old, p_new = old.by_node(old.promoted), new.by_node(new.promoted)
    d_old, d_new = old.by_node(old.demoted), new.by_node(new.demoted)
    for node in sorted(p_new, key=lambda n: (not n.isdigit(), int(n) if n.isdigit() else 0, n)):
        p = _delta(p_new[node], p_old.get(node, 0.0))
        d = _delta(d_new.get(node, 0.0), d_old.get(node, 0.0))
        out.append(PingPong(node, p, d, window))
    return out


class History:
    """The exporter's recent :class:`Moves` samples, enough to cover ``window`` seconds."""

    def __init__(self, window: float) -> None:
        self.window = window
        self.samples: deque[tuple[float, Moves]] = deque()

    def add(self, t: float, moves: Moves) -> None:
        self.samples.append((t, moves))
        while len(self.samples) > 2 and self.samples[1][0] <= t - self.window:
            self.samples.popleft()

    def estimate(self) -> list[PingPong]:
        if len(self.samples) < 2:
            return []
        (t0, m0), (t1, m1) = self.samples[0], self.samples[-1]
        return estimate(m0, m1, t1 - t0)
