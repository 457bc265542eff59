"""Statistics of the DAMON schemes of kdamonds nodeagent owns — for ``status`` and the metrics textfile.

:func:`collect` reads the DAMON records of the ownership record (:class:`nodeagent.state.Ownership`: per kdamond
index its name, pid and the configuration nodeagent wrote), checks each against the node (a kdamond is
nodeagent's only while it runs with the recorded pid, or holds the configuration nodeagent wrote), and reads
the statistics of the owned ones through :mod:`nodeagent.kinds.damon.stats`. With ``refresh`` it first asks
the kernel to refresh them (``update_schemes_stats``, a write to nodeagent's own running kdamonds only): the
commands that may write — ``apply``, ``status``, ``drift --metrics`` — refresh; ``facts`` and ``plan`` never do
(the exporter, :mod:`nodeagent.metrics.collector`, refreshes on its own rate limit).
A refresh that fails (no root, the kdamond stopped meanwhile) leaves the numbers as the kernel last
refreshed them and says so — never a made-up number.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ..host import Host
from ..util.errors import HostError

if TYPE_CHECKING:
    from ..state import Ownership

#: The counters of ``.../schemes/<M>/stats/``; a kernel without one (``sz_ops_filter_passed`` < 6.14) gives None.
COUNTERS = ("nr_tried", "sz_tried", "nr_applied", "sz_applied", "sz_ops_filter_passed", "qt_exceeds")


@dataclass(frozen=True)
class SchemeStats:
    kdamond: str  # the kdamond's index under /sys/kernel/mm/damon/admin/kdamonds
    context: int
    scheme: int
    action: str | None
    name: str | None = None  # the profile's name for the kdamond, as ownership records it
    nr_tried: int | None = None
    sz_tried: int | None = None
    nr_applied: int | None = None
    sz_applied: int | None = None
    sz_ops_filter_passed: int | None = None
    qt_exceeds: int | None = None
    #: its minimum region size matches no region (dest_free: ``nodeagent guard`` or an apply paused it while its
    #: destination is nearly full); None: not read
    paused: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class OwnedStats:
    kdamonds: dict[str, dict[str, Any]] = field(default_factory=dict)  # index → name, pid, state
    schemes: list[SchemeStats] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # records not (any more) nodeagent's, refresh problems


def collect(host: Host, ownership: Ownership, *, refresh: bool) -> OwnedStats:
    """The kdamonds nodeagent owns and their schemes' statistics (refreshed first when ``refresh``)."""
    from ..kinds.damon.stats import damon_facts, refresh_stats, scheme_rows

    out = OwnedStats()
    if not ownership.kdamonds:
        return out
    if refresh:
        try:
            refresh_stats(host, ownership)
        except HostError as exc:
            out.notes.append(f"statistics are as the kernel last refreshed them: asking for a refresh failed: "
                             f"{exc.message}")
    rows = scheme_rows(damon_facts(host), ownership)
    out.kdamonds = {str(i): kd for i, kd in rows.kdamonds.items()}
    out.notes += rows.notes
    out.schemes = [SchemeStats(str(r["kdamond"]), r["context"], r["scheme"], r.get("action"), r["name"],
                               **{c: r.get(c) for c in COUNTERS}, paused=r.get("paused")) for r in rows.schemes]
    return out
