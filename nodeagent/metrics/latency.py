"""The measured memory latency, as the exporter serves it: the last probe's figures with their timestamp.

The probe (:mod:`nodeagent.host.latency`: a pointer chase of up to 2 s per CPU node × memory node pair) is
far too slow for a scrape and too heavy for every drift run: ``metrics serve`` runs it on a slow schedule
(``--latency-interval``, 15 minutes by default) in its sampler thread and serves the last result until the
next; ``nodeagent_memory_latency_timestamp_seconds`` says when that was. The textfile (apply, drift) never
runs it. Series (seconds, as Prometheus' base unit)::

    nodeagent_memory_latency_seconds{initiator, node, tier, cpuless}   median chain, per load
    nodeagent_memory_latency_ratio{initiator, node, tier, cpuless}     against the initiator's local DRAM
    nodeagent_memory_latency_declared_seconds{initiator, node}         the firmware's access0 read_latency
    nodeagent_memory_latency_timestamp_seconds                         when the last probe ended
    nodeagent_memory_latency_probe_success                             0: the whole probe failed (see error)
    nodeagent_memory_latency_pair_failed{initiator, node, error}       a pair refused or failed
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from ..host import Host
from ..host import latency as probe
from ..util.errors import NodeagentError
from .families import Family, gauge, one

#: The exporter's default schedule: at most every 15 minutes (the issue's floor for a probe this heavy).
LATENCY_INTERVAL = 900.0


@dataclass
class LatencyReading:
    time: float
    survey: probe.Survey | None
    error: str | None = None
    tiers: dict[int, int] | None = None  # node → memory tier, when measured


def measure(host: Host, limits: probe.Limits | None = None) -> LatencyReading:
    """One probe of every pair (seconds to run); a failure becomes the reading's error, never an exception."""
    from ..facts.numa import read_tiers

    try:
        s = probe.survey(host, limits)
    except NodeagentError as exc:
        return LatencyReading(time.time(), None, exc.message + (f" ({exc.hint})" if exc.hint else ""))
    tiers = {n: t for t, nodes in read_tiers(host).items() for n in nodes}
    return LatencyReading(time.time(), s, None, tiers)


def families(r: LatencyReading | None) -> Iterator[Family]:
    if r is None:
        return
    yield one("nodeagent_memory_latency_timestamp_seconds", "Unix time the last memory latency probe ended", r.time)
    yield one("nodeagent_memory_latency_probe_success", "1 when the last memory latency probe could run (0: see "
              "nodeagent_memory_latency_probe_error)", 0 if r.error else 1)
    if r.error or r.survey is None:
        yield one("nodeagent_memory_latency_probe_error", "Why the last memory latency probe could not run", 1,
                  error=r.error or "failed")
        return
    s = r.survey
    labels = ("initiator", "node", "tier", "cpuless")
    lat = gauge("nodeagent_memory_latency_seconds", "Load-to-use latency of the node's memory from a CPU of the "
                "initiator node: the median chain of a dependent pointer chase over 4x the last-level cache", *labels)
    ratio = gauge("nodeagent_memory_latency_ratio", "Load-to-use latency against the initiator's local DRAM",
                  *labels)
    failed = gauge("nodeagent_memory_latency_pair_failed", "1 for a pair the last probe refused or could not "
                   "measure", "initiator", "node", "error")
    for p in s.pairs:
        tier = (r.tiers or {}).get(p.node)
        lv = (p.initiator, p.node, "" if tier is None else tier, "true" if s.cpuless.get(p.node) else "false")
        if p.ns is None:
            failed.add(1, p.initiator, p.node, p.error or "failed")
            continue
        lat.add(p.ns * 1e-9, *lv)
        q = s.ratio(p)
        if q is not None:
            ratio.add(q, *lv)
    declared = gauge("nodeagent_memory_latency_declared_seconds", "The read latency the firmware declares for the "
                     "node from its best initiators (HMAT: nodeN/access0/initiators/read_latency)", "initiator",
                     "node")
    for node, ds in sorted(s.declared.items()):
        for d in ds:
            if d.access == "access0" and d.read_latency_ns is not None:
                for i in d.initiators:
                    declared.add(d.read_latency_ns * 1e-9, i, node)
    yield from (lat, ratio, declared, failed)
