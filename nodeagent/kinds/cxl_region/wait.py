"""At boot, memdevs probe asynchronously (cxl_pci, then cxl_mem's endpoint): the boot apply waits, up to a stated
timeout, for every memdev the regions need — the serials the profile names and those of the regions nodeagent made
before (its ownership records) — so that an interleave set is not planned while one member is still probing. What
is still missing then is left to the plan, which reports it as a problem (and builds no half set)."""

from __future__ import annotations

import time
from typing import Any

from ...host import Host
from ...state import Ownership
from .names import rules_of

POLL = 0.2


def expected(loaded: Any, ownership: Ownership) -> set[int]:
    out: set[int] = set()
    for rule in rules_of(loaded):
        out |= set(rule.memdevs.serials or ())
    for rec in ownership.regions.values():
        if any(r.name == rec.rule for r in rules_of(loaded)):
            out |= {s for s in rec.serials if s}  # 0: known by its PCI function
    return out


def present(host: Host) -> set[int]:
    """Serials of the memdevs that are probed as far as a region needs (an endpoint under them)."""
    from ...facts.cxl import read

    return {m.serial for m in read(host).memdevs if m.serial is not None and m.endpoint is not None}


def wait_for_memdevs(host: Host, loaded: Any, ownership: Ownership, timeout: float,
                     clock: Any = time.monotonic, sleep: Any = time.sleep) -> tuple[set[int], float]:
    """Wait until every expected memdev is there, at most ``timeout`` seconds: ``(serials still missing,
    seconds waited)``."""
    want = expected(loaded, ownership)
    start = clock()
    while True:
        missing = want - present(host) if want else set()
        if not missing or clock() - start >= timeout:
            return missing, clock() - start
        sleep(POLL)
