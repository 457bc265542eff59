"""Prometheus text exposition for node_exporter's textfile collector (``--metrics-textfile PATH``).

Built with ``prometheus_client`` from one :class:`MetricsInput` through a private registry (no process-global
state, no ``_created`` samples), so the file holds exactly this run's view of the node:

=========================================================  =============================================================
``nodeagent_info{version}``                                 always 1
``nodeagent_last_apply_timestamp_seconds{profile}``         when the last apply (scoped or not) finished
``nodeagent_last_apply_success{profile}``                   1 when it converged or had nothing to do
``nodeagent_last_apply_status{profile,status}``             1 for the last apply's status, 0 for the others
``nodeagent_last_apply_changes{outcome}``                   its changes by outcome (applied, failed, blocked)
``nodeagent_check_status{check,severity,status}``           1 for each preflight check's status (apply runs them)
``nodeagent_drift_check_timestamp_seconds``                 when drift was last measured
``nodeagent_drift_items{resource}``                         drifted settings per resource kind (0 rows included)
``nodeagent_node_memory_total_bytes{node,tier,cpuless}``    per NUMA node; a CXL expander is a CPU-less node
``nodeagent_node_memory_used_bytes{node,tier,cpuless}``
``nodeagent_vmstat_<counter>_total``                        promotion/demotion/NUMA-hint counters of /proc/vmstat
``nodeagent_damon_scheme_<stat>_total{kdamond,...}``        scheme statistics of the kdamonds nodeagent owns
=========================================================  =============================================================

Counters come straight from the kernel: they reset at boot, which Prometheus' ``rate()`` handles.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .. import __version__
from ..facts import Facts
from ..schemestats import SchemeStats

#: The /proc/vmstat counters operators of tiered memory watch (exported when the kernel has them).
VMSTAT_COUNTERS = {
    "pgpromote_success": "Pages promoted to a faster memory tier",
    "pgpromote_candidate": "Pages selected for promotion",
    "pgpromote_candidate_nrl": "Pages selected for promotion without the rate limit",
    "pgdemote_kswapd": "Pages demoted to a slower tier by kswapd",
    "pgdemote_direct": "Pages demoted to a slower tier by direct reclaim",
    "pgdemote_khugepaged": "Pages demoted to a slower tier by khugepaged",
    "pgdemote_proactive": "Pages demoted to a slower tier by proactive reclaim",
    "numa_pte_updates": "NUMA balancing PTE updates",
    "numa_hint_faults": "NUMA hinting faults",
    "numa_hint_faults_local": "NUMA hinting faults on the local node",
    "numa_pages_migrated": "Pages migrated by NUMA balancing",
    "pgmigrate_success": "Pages migrated successfully",
    "pgmigrate_fail": "Pages that failed to migrate",
}
APPLY_STATUSES = ("converged", "unchanged", "partial", "failed", "refused", "checks-failed", "in-progress",
                  "reverted")
CHECK_STATUSES = ("pass", "warn", "fail", "skipped")
SCHEME_STATS = {  # stats file → (metric suffix, help)
    "nr_tried": ("tried_regions", "Regions a scheme's action was tried on"),
    "sz_tried": ("tried_bytes", "Bytes of regions a scheme's action was tried on"),
    "nr_applied": ("applied_regions", "Regions a scheme's action was applied to"),
    "sz_applied": ("applied_bytes", "Bytes a scheme's action was applied to"),
    "sz_ops_filter_passed": ("ops_filter_passed_bytes", "Bytes that passed the scheme's ops filters"),
    "qt_exceeds": ("quota_exceeds", "Times the scheme's quota was exceeded"),
}


@dataclass
class MetricsInput:
    facts: Facts
    vmstat: dict[str, int] = field(default_factory=dict)
    last_apply: dict[str, Any] | None = None  # last-applied.json
    drift_checked: float | None = None
    drift_by_resource: dict[str, int] | None = None
    resource_kinds: tuple[str, ...] = ()
    checks: Iterable[Any] = ()  # objects with .name, .severity, .status (nodeagent.checks.CheckResult)
    schemes: list[SchemeStats] | None = None


def parse_vmstat(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def _timestamp(text: Any) -> float | None:
    for fmt in ("%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return datetime.strptime(str(text), fmt).timestamp()
        except ValueError:
            continue
    return None


class _Collector(Collector):
    def __init__(self, data: MetricsInput) -> None:
        self.data = data

    def collect(self) -> Iterator[Metric]:
        d = self.data
        info = GaugeMetricFamily("nodeagent_info", "nodeagent version", labels=["version"])
        info.add_metric([__version__], 1)
        yield info
        yield from self._apply(d.last_apply)
        yield from self._checks(d.checks)
        yield from self._drift(d)
        yield from self._memory(d.facts)
        for key, doc in VMSTAT_COUNTERS.items():
            if key in d.vmstat:
                yield CounterMetricFamily(f"nodeagent_vmstat_{key}", f"{doc} (/proc/vmstat {key})",
                                          value=d.vmstat[key])
        yield from self._schemes(d.schemes)

    def _apply(self, last: dict[str, Any] | None) -> Iterator[Metric]:
        if not last:
            return
        profile = str(last.get("profile") or "")
        ts = _timestamp(last.get("time"))
        if ts is not None:
            yield _one("nodeagent_last_apply_timestamp_seconds", "Unix time the last apply finished", ["profile"],
                       [profile], ts)
        status = str(last.get("status", ""))
        yield _one("nodeagent_last_apply_success", "1 when the last apply converged or had nothing to change",
                   ["profile"], [profile], 1 if status in ("converged", "unchanged") else 0)
        fam = GaugeMetricFamily("nodeagent_last_apply_status", "The last apply's status (1 for the current one)",
                                labels=["profile", "status"])
        for s in dict.fromkeys((*APPLY_STATUSES, status)):
            if s:
                fam.add_metric([profile, s], 1 if s == status else 0)
        yield fam
        changes = GaugeMetricFamily("nodeagent_last_apply_changes", "Changes of the last apply by outcome",
                                    labels=["outcome"])
        outcomes = [o.get("status") for o in last.get("outcomes", []) if isinstance(o, dict)]
        for outcome in ("applied", "failed", "blocked"):
            changes.add_metric([outcome], outcomes.count(outcome))
        yield changes

    def _checks(self, checks: Iterable[Any]) -> Iterator[Metric]:
        results = list(checks)
        if not results:
            return
        fam = GaugeMetricFamily("nodeagent_check_status", "Preflight check status (1 for the current one)",
                                labels=["check", "severity", "status"])
        for r in results:
            for s in CHECK_STATUSES:
                fam.add_metric([r.name, r.severity, s], 1 if r.status == s else 0)
        yield fam

    def _drift(self, d: MetricsInput) -> Iterator[Metric]:
        if d.drift_by_resource is None:
            return
        if d.drift_checked is not None:
            yield GaugeMetricFamily("nodeagent_drift_check_timestamp_seconds", "Unix time drift was last measured",
                                    value=d.drift_checked)
        fam = GaugeMetricFamily("nodeagent_drift_items", "Settings away from the profile, by resource kind",
                                labels=["resource"])
        for kind in sorted(set(d.resource_kinds) | set(d.drift_by_resource)):
            fam.add_metric([kind], d.drift_by_resource.get(kind, 0))
        yield fam

    def _memory(self, facts: Facts) -> Iterator[Metric]:
        labels = ["node", "tier", "cpuless"]
        total = GaugeMetricFamily("nodeagent_node_memory_total_bytes", "Memory of a NUMA node", labels=labels)
        used = GaugeMetricFamily("nodeagent_node_memory_used_bytes", "Memory in use on a NUMA node", labels=labels)
        for n in facts.nodes:
            lv = [str(n.id), "" if n.tier is None else str(n.tier), "true" if not n.has_cpu else "false"]
            total.add_metric(lv, n.mem_total)
            used.add_metric(lv, max(n.mem_total - n.mem_free, 0))
        yield total
        yield used

    def _schemes(self, schemes: list[SchemeStats] | None) -> Iterator[Metric]:
        if not schemes:
            return
        labels = ["kdamond", "name", "context", "scheme", "action"]
        for stat, (suffix, doc) in SCHEME_STATS.items():
            fam = CounterMetricFamily(f"nodeagent_damon_scheme_{suffix}", f"{doc} (DAMON stats/{stat})",
                                      labels=labels)
            rows = [(s, getattr(s, stat)) for s in schemes if getattr(s, stat) is not None]
            for s, value in rows:
                fam.add_metric([s.kdamond, s.name or "", str(s.context), str(s.scheme), s.action or ""], value)
            if rows:
                yield fam


def _one(name: str, doc: str, labels: list[str], values: list[str], value: float) -> GaugeMetricFamily:
    fam = GaugeMetricFamily(name, doc, labels=labels)
    fam.add_metric(values, value)
    return fam


def render(data: MetricsInput) -> str:
    """The exposition text of ``data``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(data))
    return generate_latest(registry).decode()
