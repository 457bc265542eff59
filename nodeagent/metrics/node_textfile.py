"""The metrics textfile for node_exporter's textfile collector (``--metrics-textfile PATH`` on apply and drift).

The families come from :class:`nodeagent.metrics.collector.Collector` — the same collector ``nodeagent metrics
serve`` exposes over HTTP — and are written in the text format by :mod:`nodeagent.metrics.textfile` (no
``prometheus_client`` needed here). docs/staying-converged.md, "Metrics", lists every series.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .families import Family
from .textfile import render as render_families

if TYPE_CHECKING:
    from ..engine.core import Engine
    from ..profile import LoadedProfile


def render(families: Iterable[Family]) -> str:
    return render_families(families)


def textfile(engine: Engine, *, drift: Any = None, checks: Any = None) -> str:
    """One collection, for a textfile: GPUs sampled and owned kdamonds' statistics refreshed right now (a
    textfile is written by commands that may write: apply, drift)."""
    import time

    from ..kinds.registry import BY_KIND
    from .collector import Collector

    c = Collector(engine.host)
    c.sample(refresh=False, moves=False)
    c.refresh_damon(time.time(), force=True)
    return render(c.collect(drift=drift, checks=checks, resource_kinds=tuple(BY_KIND)))


def write_textfile(path: str, text: str) -> None:
    """Write the textfile at ``path`` (an operator's path, not under --root), atomically."""
    from ..host.files import write_operator_file

    write_operator_file(path, text)


def write_metrics(eng: Engine, path: str, *, loaded: LoadedProfile | None = None, drift: Any = None,
                  checks: Any = None) -> None:
    """Measure what the metrics need and write the textfile at ``path`` (an operator's path, not under --root)."""
    from ..drift import detect
    from ..util.errors import NodeagentError

    if drift is None:
        try:
            drift = detect(eng, loaded)
        except NodeagentError:
            drift = None  # nothing applied yet: the file simply has no drift metrics
    write_textfile(path, textfile(eng, drift=drift, checks=checks))
