"""Statistics of the DAMON schemes of kdamonds nodeagent owns — for ``status`` and the metrics textfile.

Reading them is the DAMON resource's business (fresh numbers need an ``update_schemes_stats`` command to the
kdamond first), so this module only defines the record and a registry. A provider is
``fn(host, ownership_records) -> list[SchemeStats]``; it is found either in :data:`PROVIDERS` (register with
:func:`register`) or as ``scheme_stats`` in ``nodeagent.resources.damon.stats``. Without one, the callers say
"not available" — never a made-up number.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from .host import Host

#: The counters of ``.../schemes/<M>/stats/``; a kernel without one (``sz_ops_filter_passed`` < 6.14) gives None.
COUNTERS = ("nr_tried", "sz_tried", "nr_applied", "sz_applied", "sz_ops_filter_passed", "qt_exceeds")


@dataclass(frozen=True)
class SchemeStats:
    kdamond: str  # the kdamond's index under /sys/kernel/mm/damon/admin/kdamonds
    context: int
    scheme: int
    action: str | None
    name: str | None = None  # the profile's name for the kdamond, when ownership records one
    nr_tried: int | None = None
    sz_tried: int | None = None
    nr_applied: int | None = None
    sz_applied: int | None = None
    sz_ops_filter_passed: int | None = None
    qt_exceeds: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


Provider = Callable[[Host, Any], list[SchemeStats]]
PROVIDERS: list[Provider] = []


def register(fn: Provider) -> Provider:
    PROVIDERS.append(fn)
    return fn


def _provider() -> Provider | None:
    if PROVIDERS:
        return PROVIDERS[0]
    try:
        mod = importlib.import_module("nodeagent.resources.damon.stats")
    except ImportError:
        return None
    fn = getattr(mod, "scheme_stats", None)
    return fn if callable(fn) else None


def collect(host: Host, owned: Any) -> list[SchemeStats] | None:
    """Scheme statistics of the owned kdamonds ``owned`` (``ownership.json``'s ``kdamonds``); ``None`` when
    this build has no provider."""
    fn = _provider()
    return None if fn is None else list(fn(host, owned))
