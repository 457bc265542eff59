"""The one collector of samples behind both outputs: ``--metrics-textfile`` and ``nodeagent metrics serve``.

Reads at collection time (cheap kernel files): per-node memory with tier, CPU-less flag and the DAX device /
CXL region behind it; ``/proc/vmstat`` and per-node ``vmstat`` tiering counters; DAMON scheme statistics of
owned kdamonds with their age; every kdamond's CPU time; the last apply and checks from the state directory.
Sampled on intervals (:meth:`Collector.sample`, run by the exporter's sampler thread, or once for a textfile):
GPUs (a process or a library call — too slow for every scrape), the rate-limited DAMON statistics refresh,
and the history of the ping-pong estimator.

The collector writes nothing but one thing: ``update_schemes_stats`` to nodeagent's own running kdamonds
whose ``refresh_ms`` is not set (kernels before 6.17, or a profile with ``stats_refresh: 0``), at most once
per ``refresh_interval``. On 6.17+ apply sets ``refresh_ms`` and the collector writes nothing at all.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .. import __version__
from ..host import Host
from ..util.errors import NodeagentError
from ..util.kfmt import parse_list
from . import gpu as gpu_mod
from .families import Family, counter, gauge, one
from .latency import families as latency_families
from .tiering import DEMOTE_CAUSES, History, Moves, page_size

NODE = "/sys/devices/system/node"
USER_HZ = 100  # /proc/<pid>/stat's clock ticks (sysconf(_SC_CLK_TCK) is 100 on every Linux ABI)

#: Default sampling intervals (seconds) of ``metrics serve``; docs/staying-converged.md states them.
GPU_INTERVAL = 15.0
REFRESH_INTERVAL = 30.0
MOVES_INTERVAL = 15.0
PINGPONG_WINDOW = 300.0

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
GPU_LABELS = ("gpu", "uuid", "pci_bus_id", "model_name")  # dcgm-exporter: gpu, UUID, pci_bus_id, modelName


def parse_vmstat(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def parse_proc_stat(text: str) -> tuple[int, int] | None:
    """``/proc/<pid>/stat`` → (utime, stime) in clock ticks; the comm may hold spaces and parentheses."""
    _, _, rest = text.rpartition(")")
    fields = rest.split()
    if len(fields) < 13:
        return None
    return int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5), counted after the comm


def _timestamp(text: Any) -> float | None:
    for fmt in ("%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return datetime.strptime(str(text), fmt).timestamp()
        except ValueError:
            continue
    return None


@dataclass
class _Damon:
    """The DAMON tree as one collection sees it: every kdamond, nodeagent's records, the facts behind them."""

    kdamonds: list[_Kd]
    ownership: Any  # nodeagent.state.Ownership
    facts: Any  # nodeagent.facts.Facts holding the DAMON section
    node_ranges: dict[int, list[tuple[int, int]]]


@dataclass
class _Kd:
    """A kdamond as the collector needs it."""

    index: int
    pid: int
    running: bool
    owned: bool
    name: str | None
    config: dict[str, str]
    status: dict[str, str]


class Collector:
    def __init__(self, host: Host, *, refresh_interval: float = REFRESH_INTERVAL,
                 pingpong_window: float = PINGPONG_WINDOW, gpus: bool = True) -> None:
        from ..state import StateStore

        self.host = host
        self.state = StateStore(host)
        self.refresh_interval = refresh_interval
        self.gpus_enabled = gpus
        self.gpu: gpu_mod.GpuReading | None = None
        self.latency: Any = None  # metrics.latency.LatencyReading: set by the exporter's slow schedule only
        self.history = History(pingpong_window)
        self.refreshed: dict[int, float] = {}  # kdamond index → when this collector last asked for a refresh
        self.refresh_error: str | None = None
        self.page = page_size()

    # -- sampling --------------------------------------------------------------------------------------------
    def sample(self, *, gpus: bool = True, refresh: bool = True, moves: bool = True) -> None:
        now = time.time()
        if gpus and self.gpus_enabled:
            self.gpu = gpu_mod.read(self.host)
        if refresh:
            self.refresh_damon(now)
        if moves:
            self.history.add(now, self.moves(self._damon()))

    def refresh_damon(self, now: float, *, force: bool = False) -> None:
        """``update_schemes_stats`` to owned running kdamonds without ``refresh_ms``, rate-limited."""
        from ..kinds.damon.stats import refresh_stats

        d = self._damon()
        due = [k for k in d.kdamonds if k.owned and k.running and not _refresh_ms(k)
               and (force or now - self.refreshed.get(k.index, 0.0) >= self.refresh_interval)]
        if not due:
            return
        try:
            refresh_stats(self.host, d.ownership)
        except NodeagentError as exc:
            self.refresh_error = exc.message
            return
        self.refresh_error = None
        for k in due:
            self.refreshed[k.index] = now

    # -- reading -----------------------------------------------------------------------------------------------
    def _damon(self) -> _Damon:
        from ..facts.damon import from_facts
        from ..kinds.damon.plan import owned_kdamonds
        from ..kinds.damon.stats import damon_facts

        facts = damon_facts(self.host)
        ownership = self.state.ownership()
        damon = from_facts(facts)
        owned, _ = owned_kdamonds(damon, ownership) if ownership else ({}, [])
        out = []
        for kd in damon.kdamonds:
            o = owned.get(kd.index)
            out.append(_Kd(kd.index, kd.pid, kd.running, o is not None and o.name is not None,
                           o.name if o is not None else None, kd.config, kd.status))
        return _Damon(out, ownership, facts, damon.node_ranges)

    def moves(self, d: _Damon) -> Moves:
        """Cumulative bytes promoted and demoted per node and cause, now."""
        m = Moves()
        per_node_demotions = False
        for nid, v in self.node_vmstat().items():
            if "pgpromote_success" in v:
                m.promoted[(str(nid), "numa_balancing")] = v["pgpromote_success"] * self.page
            for cause in DEMOTE_CAUSES:
                if f"pgdemote_{cause}" in v:
                    per_node_demotions = True
                    m.demoted[(str(nid), cause)] = v[f"pgdemote_{cause}"] * self.page
        if not per_node_demotions:  # before 6.9: demotions are counted for the whole system only
            v = parse_vmstat(self.host.read_opt("/proc/vmstat") or "")
            for cause in DEMOTE_CAUSES:
                if f"pgdemote_{cause}" in v:
                    m.demoted[("all", cause)] = v[f"pgdemote_{cause}"] * self.page
        for kd in d.kdamonds:
            if not kd.owned:
                continue
            for s, action, applied in _scheme_applied(kd):
                if action == "migrate_hot":
                    node = kd.config.get(f"contexts/0/schemes/{s}/target_nid", "").strip()
                    m.promoted[(node or "unknown", "damon")] = m.promoted.get((node or "unknown", "damon"), 0) \
                        + applied
                elif action == "migrate_cold":
                    node = _source_node(kd, d.node_ranges)
                    m.demoted[(node, "damon")] = m.demoted.get((node, "damon"), 0) + applied
        return m

    def node_vmstat(self) -> dict[int, dict[str, int]]:
        """Each online node's ``vmstat`` counters."""
        return {nid: parse_vmstat(self.host.read_opt(f"{NODE}/node{nid}/vmstat") or "")
                for nid in parse_list(self.host.read_opt(f"{NODE}/online") or "", f"{NODE}/online")}


    # -- the families ------------------------------------------------------------------------------------------
    def collect(self, *, drift: Any = None, checks: Iterable[Any] | None = None,
                resource_kinds: tuple[str, ...] = ()) -> list[Family]:
        from ..facts.numa import _BLOCKS

        token = _BLOCKS.set({})  # each node directory listed once per collection (DAX and DAMON both need it)
        try:
            return self._collect(drift, checks, resource_kinds)
        finally:
            _BLOCKS.reset(token)

    def _collect(self, drift: Any, checks: Iterable[Any] | None, resource_kinds: tuple[str, ...]) -> list[Family]:
        cpu0 = time.process_time()
        now = time.time()
        fams: list[Family] = [one("nodeagent_info", "nodeagent version", 1, version=__version__)]
        last = self.state.last_applied()
        fams += self._apply(last.to_json() if last else None)
        fams += self._checks(checks)
        fams += self._drift(drift, resource_kinds)
        fams += self._memory()
        vm = parse_vmstat(self.host.read_opt("/proc/vmstat") or "")
        fams += [counter(f"nodeagent_vmstat_{k}", f"{doc} (/proc/vmstat {k})").add(vm[k])
                 for k, doc in VMSTAT_COUNTERS.items() if k in vm]
        try:
            d = self._damon()
        except NodeagentError:
            d = _Damon([], {}, None, {})
        fams += self._moves(self.moves(d))
        per_node = self.node_vmstat()
        for key, doc in VMSTAT_COUNTERS.items():
            if key.startswith(("pgpromote_", "pgdemote_")) and any(key in v for v in per_node.values()):
                fam = counter(f"nodeagent_node_vmstat_{key}", f"{doc} (nodeN/vmstat {key}; pages)", "node")
                fams.append(fam)
                for nid, v in per_node.items():
                    if key in v:
                        fam.add(v[key], nid)
        fams += self._pingpong()
        fams += self._schemes(d, now)
        fams += self._kdamond_cpu(d.kdamonds)
        fams += self._gpus(now)
        fams += latency_families(self.latency)
        fams.append(one("nodeagent_collector_cpu_seconds", "CPU time this collection took",
                        time.process_time() - cpu0))
        return fams

    def _apply(self, last: dict[str, Any] | None) -> Iterator[Family]:
        if not last:
            return
        profile = str(last.get("profile") or "")
        ts = _timestamp(last.get("time"))
        if ts is not None:
            yield one("nodeagent_last_apply_timestamp_seconds", "Unix time the last apply finished", ts,
                      profile=profile)
        status = str(last.get("status", ""))
        yield one("nodeagent_last_apply_success", "1 when the last apply converged or had nothing to change",
                  1 if status in ("converged", "unchanged") else 0, profile=profile)
        fam = gauge("nodeagent_last_apply_status", "The last apply's status (1 for the current one)", "profile",
                    "status")
        for s in dict.fromkeys((*APPLY_STATUSES, status)):
            if s:
                fam.add(1 if s == status else 0, profile, s)
        yield fam
        changes = gauge("nodeagent_last_apply_changes", "Changes of the last apply by outcome", "outcome")
        outcomes = [o.get("status") for o in last.get("outcomes", []) if isinstance(o, dict)]
        for outcome in ("applied", "failed", "blocked"):
            changes.add(outcomes.count(outcome), outcome)
        yield changes

    def _checks(self, checks: Iterable[Any] | None) -> Iterator[Family]:
        rows = list(checks) if checks else [
            _CheckRow(r.name, r.severity, r.status) for r in self.state.last_checks().results]
        fam = gauge("nodeagent_check_status", "Preflight check status (1 for the current one)", "check", "severity",
                    "status")
        for r in rows:
            for s in CHECK_STATUSES:
                fam.add(1 if r.status == s else 0, r.name, r.severity, s)
        yield fam

    def _drift(self, drift: Any, kinds: tuple[str, ...]) -> Iterator[Family]:
        """From ``drift`` (a report just measured: apply, drift), else from the last recorded measurement
        (``drift.json``: the drift timer's ``drift --record``, ``run``'s interval, kept current by apply and
        revert), so the HTTP exporter serves the same drift series as the textfile without planning per scrape."""
        if drift is None:
            yield from self._recorded_drift(kinds)
            return
        apart: dict[str, int] = {}
        for p in getattr(drift, "cannot_be_done", ()):
            apart[p.kind] = apart.get(p.kind, 0) + 1
        yield from self._drift_families(drift.checked, drift.by_resource(), apart, kinds)

    def _recorded_drift(self, kinds: tuple[str, ...]) -> Iterator[Family]:
        from ..util.errors import NodeagentError

        try:
            rec = self.state.drift()
        except (NodeagentError, OSError):
            return  # an unreadable record: status and drift say why; the series are left out
        if not rec:
            return
        by: dict[str, int] = {}
        for item in rec.items.values():
            by[item.resource] = by.get(item.resource, 0) + 1
        apart: dict[str, int] = {}
        for u in rec.cannot_be_done.values():
            apart[u.resource] = apart.get(u.resource, 0) + 1
        yield from self._drift_families(rec.checked, by, apart, kinds)

    def _drift_families(self, checked: float | None, by: dict[str, int], apart: dict[str, int],
                        kinds: tuple[str, ...]) -> Iterator[Family]:
        if checked is not None:
            yield one("nodeagent_drift_check_timestamp_seconds", "Unix time drift was last measured", checked)
        fam = gauge("nodeagent_drift_items", "Settings away from the profile, by resource kind", "resource")
        for kind in sorted(set(kinds) | set(by)):
            fam.add(by.get(kind, 0), kind)
        yield fam
        # What apply cannot do on this node is not drift (nodeagent.drift): a series of its own.
        fam = gauge("nodeagent_cannot_be_done_items",
                    "Parts of the profile apply cannot do on this node (not drift), by resource kind", "resource")
        for kind in sorted(set(kinds) | set(apart)):
            fam.add(apart.get(kind, 0), kind)
        yield fam

    def _memory(self) -> Iterator[Family]:
        from ..facts.dax import gather as dax_gather
        from ..facts.numa import read_nodes, read_tiers

        tiers = read_tiers(self.host)
        nodes = read_nodes(self.host, tiers)
        behind: dict[int, tuple[list[str], list[str]]] = {}
        for d in dax_gather(self.host)["devices"]:
            if d["target_node"] is not None and d["mode"] == "system-ram":
                devs, regions = behind.setdefault(d["target_node"], ([], []))
                devs.append(d["name"])
                if d.get("cxl_region"):
                    regions.append(d["cxl_region"])
        labels = ("node", "tier", "cpuless", "dax_device", "cxl_region")
        doc = "NUMA node memory; dax_device / cxl_region: the DAX device(s) and CXL region(s) whose memory it is"
        total = gauge("nodeagent_node_memory_total_bytes", f"{doc} (MemTotal)", *labels)
        used = gauge("nodeagent_node_memory_used_bytes", f"{doc} (MemTotal - MemFree)", *labels)
        free = gauge("nodeagent_node_memory_free_bytes", f"{doc} (MemFree)", *labels)
        sums: dict[str, list[int]] = {}
        for n in nodes:
            devs, regions = behind.get(n.id, ([], []))
            lv = (n.id, "" if n.tier is None else n.tier, "false" if n.has_cpu else "true", ",".join(devs),
                  ",".join(regions))
            total.add(n.mem_total, *lv)
            used.add(max(n.mem_total - n.mem_free, 0), *lv)
            free.add(n.mem_free, *lv)
            if n.tier is not None:
                s = sums.setdefault(str(n.tier), [0, 0])
                s[0] += n.mem_total
                s[1] += n.mem_free
        yield from (total, used, free)
        tt = gauge("nodeagent_tier_memory_total_bytes", "Memory of a memory tier (memory_tierN; lower is faster)",
                   "tier")
        tu = gauge("nodeagent_tier_memory_used_bytes", "Memory in use in a memory tier", "tier")
        tf = gauge("nodeagent_tier_memory_free_bytes", "Free memory of a memory tier", "tier")
        for tier, (t, f) in sums.items():
            tt.add(t, tier)
            tu.add(max(t - f, 0), tier)
            tf.add(f, tier)
        yield from (tt, tu, tf)

    def _moves(self, m: Moves) -> Iterator[Family]:
        p = counter("nodeagent_tiering_promoted_bytes", "Bytes promoted to a faster tier, on the node they went to, "
                    "by cause (numa_balancing: pgpromote_success; damon: owned migrate_hot schemes' sz_applied)",
                    "node", "cause")
        d = counter("nodeagent_tiering_demoted_bytes", "Bytes demoted to a slower tier, from the node they left, by "
                    "cause (kswapd/direct/khugepaged/proactive: pgdemote_*; damon: owned migrate_cold schemes)",
                    "node", "cause")
        for (node, cause), v in sorted(m.promoted.items()):
            p.add(v, node, cause)
        for (node, cause), v in sorted(m.demoted.items()):
            d.add(v, node, cause)
        yield from (p, d)

    def _pingpong(self) -> Iterator[Family]:
        est = self.history.estimate()
        ratio = gauge("nodeagent_tiering_pingpong_ratio", "Upper bound of the share of bytes promoted to the node "
                      "within the window that went down again (or came back up) inside it: min(P, D) / P", "node")
        win = gauge("nodeagent_tiering_window_seconds", "Seconds the ping-pong window covers (up to its length)")
        wp = gauge("nodeagent_tiering_window_promoted_bytes", "Bytes promoted to the node within the window (P)",
                   "node")
        wd = gauge("nodeagent_tiering_window_demoted_bytes", "Bytes demoted from the node within the window (D)",
                   "node")
        for e in est:
            wp.add(e.promoted, e.node)
            wd.add(e.demoted, e.node)
            if e.ratio is not None:
                ratio.add(e.ratio, e.node)
        if est:
            win.add(est[0].window)
        yield from (ratio, win, wp, wd)

    def _schemes(self, d: _Damon, now: float) -> Iterator[Family]:
        from ..kinds.damon.stats import scheme_rows

        if not any(k.owned for k in d.kdamonds):
            return
        rows = scheme_rows(d.facts, d.ownership).schemes
        labels = ("kdamond", "name", "context", "scheme", "action")
        for stat, (suffix, doc) in SCHEME_STATS.items():
            fam = counter(f"nodeagent_damon_scheme_{suffix}", f"{doc} (DAMON stats/{stat})", *labels)
            for r in rows:
                if r.get(stat) is not None:
                    fam.add(r[stat], r["kdamond"], r["name"] or "", r["context"], r["scheme"], r.get("action") or "")
            yield fam
        paused = gauge("nodeagent_damon_scheme_paused", "1 while the scheme matches no region (minimum region size "
                       "2^64-1): a dest_free scheme whose destination is nearly full, or a young-acting scheme "
                       "during its priming walk", *labels)
        for r in rows:
            if "paused" in r:
                paused.add(1 if r["paused"] else 0, r["kdamond"], r["name"] or "", r["context"], r["scheme"],
                           r.get("action") or "")
        yield paused
        age = gauge("nodeagent_damon_stats_age_seconds", "How old the kdamond's scheme statistics can be: since "
                    "nodeagent's last update_schemes_stats, or the kdamond's refresh_ms", "kdamond", "name")
        refresh = gauge("nodeagent_damon_stats_refresh_interval_seconds", "The kdamond's refresh_ms (6.17+; 0: "
                        "refreshed on request only)", "kdamond", "name")
        for k in d.kdamonds:
            if not (k.owned and k.running):
                continue
            ms = _refresh_ms(k)
            if "refresh_ms" in k.config:
                refresh.add(ms / 1000, k.index, k.name)
            if ms:
                age.add(ms / 1000, k.index, k.name)
            elif k.index in self.refreshed:
                age.add(max(now - self.refreshed[k.index], 0.0), k.index, k.name)
        yield from (age, refresh)
        if self.refresh_error:
            yield one("nodeagent_damon_stats_refresh_failed", "1 when nodeagent's last update_schemes_stats failed",
                      1, error=self.refresh_error)

    def _kdamond_cpu(self, kds: list[_Kd]) -> Iterator[Family]:
        fam = counter("nodeagent_damon_kdamond_cpu_seconds", "CPU time of a running kdamond (utime + stime of "
                      "/proc/<pid>/stat); owner: nodeagent or other", "kdamond", "name", "pid", "owner")
        for k in kds:
            if not k.running or k.pid <= 0:
                continue
            ticks = parse_proc_stat(self.host.read_opt(f"/proc/{k.pid}/stat") or "")
            if ticks is not None:
                fam.add(sum(ticks) / USER_HZ, k.index, k.name or "", k.pid, "nodeagent" if k.owned else "other")
        yield fam

    def _gpus(self, now: float) -> Iterator[Family]:
        r = self.gpu
        if r is None:
            return
        up = one("nodeagent_gpu_up", "1 when the GPU source answered (0: see nodeagent_gpu_error)",
                 0 if r.error else 1, source=r.source)
        yield up
        if r.error:
            yield one("nodeagent_gpu_error", "Why the GPU source failed (driver_library_mismatch: the driver was "
                      "upgraded without a reboot)", 1, source=r.source, reason=r.reason or "failed")
        yield one("nodeagent_gpu_sample_age_seconds", "Seconds since the GPUs were sampled", max(now - r.time, 0.0),
                  source=r.source)
        fams = {key: gauge(f"nodeagent_gpu_{key}", doc, *GPU_LABELS) for key, doc in (
            ("memory_total_bytes", "GPU device memory (HBM) in total"),
            ("memory_used_bytes", "GPU device memory (HBM) in use"),
            ("memory_free_bytes", "GPU device memory (HBM) free"),
            ("pcie_tx_bytes_per_second", "PCIe throughput device → host (KV blocks leaving HBM)"),
            ("pcie_rx_bytes_per_second", "PCIe throughput host → device (KV blocks coming back to HBM)"))}
        for g in r.gpus:
            lv = (g.index, g.uuid, g.pci_bus_id, g.name)
            fams["memory_total_bytes"].add(g.memory_total, *lv)
            fams["memory_used_bytes"].add(g.memory_used, *lv)
            fams["memory_free_bytes"].add(g.memory_free, *lv)
            if g.pcie_tx is not None:
                fams["pcie_tx_bytes_per_second"].add(g.pcie_tx, *lv)
            if g.pcie_rx is not None:
                fams["pcie_rx_bytes_per_second"].add(g.pcie_rx, *lv)
        yield from fams.values()


def _source_node(kd: _Kd, node_ranges: dict[int, list[tuple[int, int]]]) -> str:
    """The node holding the first region the kdamond monitors (paddr: a physical address)."""
    start = kd.config.get("contexts/0/targets/0/regions/0/start", "").strip()
    if start.isdigit():
        addr = int(start)
        for node, ranges in node_ranges.items():
            if any(a <= addr < b for a, b in ranges):
                return str(node)
    return "unknown"


def _refresh_ms(k: _Kd) -> int:
    text = k.config.get("refresh_ms", "0").strip()
    return int(text) if text.isdigit() else 0


def _scheme_applied(k: _Kd) -> Iterator[tuple[int, str, int]]:
    """(scheme, action, sz_applied) of the kdamond's schemes, as the stats files show them now."""
    for key, action in k.config.items():
        m = re.fullmatch(r"contexts/0/schemes/(\d+)/action", key)
        text = k.status.get(f"contexts/0/schemes/{m.group(1)}/stats/sz_applied", "").strip() if m else ""
        if m and text.isdigit():
            yield int(m.group(1)), action.strip(), int(text)


class _CheckRow:
    def __init__(self, name: str, severity: str, status: str) -> None:
        self.name, self.severity, self.status = name, severity, status
