"""The moving-window (KV cache) workload's figures: parse one run's guest output, reduce it, combine runs, judge.

Pure functions (no I/O), unit-tested apart from the guest. Every figure comes from the samples the workload
printed (``PL:KV``, kvwindow.c: the node of every page of every current hot window at each sample, /proc/vmstat
and node 0's vmstat deltas; ``PL:KVLIVE``: every live page's node and cumulative page-level moves), the
phase-change events (``PL:PHASE``) and guest.sh's DAMON counters (``PL:DSTAT``). t = 0 is when the setup is
written (at boot) or when the configuration has been applied (on a running node); T is the run's duration.

- ``hot_median`` / ``hot_p10`` / ``hot_lowest``: the share of the current hot windows' pages on the fast node
  (node 0; pages the query could not place count in the denominator), median, 10th percentile and lowest sample
  over the last two thirds of the run (t >= T/3; the phase change at T/2 is inside);
- ``recover_s``: time from the moment the phase change's prompts are completely written (``write_s`` after it
  began) to the first sample with >= 90 % of the hot windows on the fast node — 0 can only be "within the first
  sample interval"; None = never;
- ``churn``: pages migrated (``pgmigrate_success``: every mechanism, DAMON included) per page appended (decode
  and prompts) over [T/3, T]; a system that demotes each page once scores about 1;
- ``stranded``: the largest share of live pages seen on node 1 (the other DRAM node, outside the workload's
  cpuset) in a full sample (``PL:KVLIVE``); ``stranded_win``: the same for the hot windows' pages;
- ``pingpong_mib``: page-level truth over [T/3, T]: pages seen back on a tier they had been moved from (down and
  up again, or up and down again; moves undone between two full samples are not seen), and ``pingpong_ratio``:
  of the pages seen moving up, the share that had been moved down before;
- ``below95_s``, ``win_slow_peak_mib``, ``promoted_after_phase_mib``: what a missed p10 is made of — the time
  under 95 % in the last two thirds, and after the phase change the most window bytes on CXL at once and what was
  promoted (did promotion end the dip, or decode moving the windows past the pages that landed on CXL?);
- ``fast_at_phase_mib``, ``demoted_while_written_mibs``, ``cpu_while_written``: the burst's room on DRAM — the
  workload's bytes on node 0 at the last full sample before the phase change began (what demotion had not yet
  moved off it), the rate at which node 0 was demoted from while the prompts were written (counters, as for the
  estimator), and the CPU the workload's threads, the kdamonds and reclaim (kswapd, kcompactd) used meanwhile, in
  % of one CPU (the guest has two);
- ``est_ratio`` / ``est_mib``: nodeagent's counter-based estimator (``nodeagent.metrics.tiering``) over the same
  window: P = promoted to node 0 (``pgpromote_success`` + DAMON ``migrate_hot`` bytes applied), D = demoted from
  it (``pgdemote_*`` + ``migrate_cold``), ``min(P, D) / P`` — an upper bound that a moving hot set inflates.

A configuration's result (``worst``) is, figure by figure, the worst over its runs.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

from nodeagent.metrics.tiering import PingPong

PAGE = 4096
MIB = 1 << 20
FAST, OTHER_DRAM = 0, 1
MAXNODE = 8


@dataclass(frozen=True)
class Sample:
    t: float
    query_s: float
    win: tuple[int, ...]  # hot-window pages per node 0..7, then "absent/error"
    ctr: dict[str, int]  # seqs, appended (cumulative, pages)
    vm: dict[str, int]  # /proc/vmstat deltas (pages)
    n0: dict[str, int]  # node 0's vmstat deltas (pages)

    @property
    def hot_share(self) -> float:
        total = sum(self.win)
        return 100.0 * self.win[FAST] / total if total else 0.0


@dataclass(frozen=True)
class Live:
    """A full sample: every live page's node, and the page-level moves seen so far (cumulative, pages)."""

    t: float
    query_s: float
    live: tuple[int, ...]
    ctr: dict[str, int]  # pp_up, pp_down, up, down


@dataclass
class KvRun:
    config: str = "?"
    start: str = "?"
    conf: dict[str, str] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    lives: list[Live] = field(default_factory=list)
    states: dict[str, dict[str, str]] = field(default_factory=dict)
    damon: list[dict[str, str]] = field(default_factory=list)
    dstat: list[dict[str, str]] = field(default_factory=list)
    t0_mono: float | None = None
    phase_begin: float | None = None
    phase_written: float | None = None
    write_s: float | None = None
    apply_seconds: float | None = None
    apply_rc: int | None = None
    workload_rc: int | None = None
    touched_at: float | None = None
    passes: int | None = None
    max_pass_s: float | None = None
    slow_passes: int | None = None
    kdamond_cpu_s: dict[str, float] = field(default_factory=dict)
    #: guest.sh's ``PL:TCPU``: (mono, {"pid:comm": user + system ticks}) — the workload's threads, kswapd and
    #: kcompactd, the kdamonds
    tcpu: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    #: the hot loop's thread, once a second: time blocked (uninterruptible sleep, ms, cumulative), and the
    #: innermost function of its kernel stack each time it was seen blocked
    blocked_ms: list[float] = field(default_factory=list)
    blocked_in: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


_KV = re.compile(r"^PL:KV (\S+) q=(\S+) win((?: \d+){9}) (.*?) vm (.*?) n0 ?(.*)$")
_LIVE = re.compile(r"^PL:KVLIVE (\S+) q=(\S+) live((?: \d+){9}) (.*)$")


def _kv(text: str) -> dict[str, str]:
    return dict(x.split("=", 1) for x in text.split() if "=" in x)


def _lines(stdout: str) -> list[str]:
    """The output's lines, a line another thread's line landed in split in two (outputs written before kvwindow.c
    locked stdout around its multi-part lines: ``... n0PL:SEQ start ...``)."""
    out = []
    for line in stdout.splitlines():
        while (i := line.find("PL:", 1)) > 0 and line.startswith("PL:"):
            out.append(line[:i])
            line = line[i:]
        out.append(line)
    return out


def parse(stdout: str) -> KvRun:
    run = KvRun()
    for line in _lines(stdout):
        if not line.startswith("PL:"):
            continue
        m = _KV.match(line)
        if m and not m.group(6).strip():  # cut short by another thread's line: no node-0 counters
            continue
        if m:
            run.samples.append(Sample(
                float(m.group(1)), float(m.group(2)), tuple(int(x) for x in m.group(3).split()),
                {k: int(v) for k, v in _kv(m.group(4)).items()}, {k: int(v) for k, v in _kv(m.group(5)).items()},
                {k: int(v) for k, v in _kv(m.group(6)).items()}))
            continue
        m = _LIVE.match(line)
        if m:
            run.lives.append(Live(float(m.group(1)), float(m.group(2)), tuple(int(x) for x in m.group(3).split()),
                                  {k: int(v) for k, v in _kv(m.group(4)).items()}))
            continue
        word, _, rest = line[3:].partition(" ")
        kv = _kv(rest)
        if word == "CONFIG":
            parts = rest.split()
            run.config, run.start = parts[0], parts[2]
        elif word == "KVCONF":
            run.conf = kv
        elif word == "STATE":
            name, _, kvs = rest.partition(" ")
            run.states[name] = _kv(kvs)
        elif word == "APPLIED":
            run.apply_seconds = float(kv["seconds"])
        elif word == "APPLY-RC":
            run.apply_rc = int(rest)
        elif word == "WORKLOAD-RC":
            run.workload_rc = int(rest)
        elif word == "TOUCHED":
            run.touched_at = float(kv["t"])
        elif word == "T0":
            run.t0_mono = float(kv["mono"])
        elif word == "PHASE":
            if rest.startswith("begin"):
                run.phase_begin = float(kv["t"])
            elif rest.startswith("written"):
                run.phase_written, run.write_s = float(kv["t"]), float(kv["write_s"])
        elif word == "DAMON":
            run.damon.append(kv)
        elif word == "DSTAT":
            run.dstat.append(kv)
        elif word == "END":
            run.passes = int(kv["passes"]) if "passes" in kv else None
            run.max_pass_s = float(kv["max_pass_s"]) if "max_pass_s" in kv else None
            run.slow_passes = int(kv["slow_passes"]) if "slow_passes" in kv else None
        elif word == "TSTATE":
            if kv.get("block_ms"):
                run.blocked_ms.append(float(kv["block_ms"]))
            if kv.get("stack"):
                top = kv["stack"].split(",")[0]
                run.blocked_in[top] = run.blocked_in.get(top, 0) + 1
        elif word == "TCPU":
            mono, _, tasks = rest.partition(" ")
            if mono.startswith("mono="):
                run.tcpu.append((float(mono[5:]), {k: int(v) for k, v in _kv(tasks).items() if v.isdigit()}))
        elif word == "KDCPU":
            run.kdamond_cpu_s[kv["kdamond"]] = round(int(kv["ticks"]) / int(kv.get("hz", 100)), 2)
        elif word == "ERROR":
            run.errors.append(rest)
    return run


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100), linear between closest ranks (numpy's default)."""
    if not values:
        return None
    v = sorted(values)
    pos = (len(v) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def _at(samples: list[Sample], t: float) -> Sample | None:
    """The first sample at or after t (None: none)."""
    return next((s for s in samples if s.t >= t - 1e-6), None)


def _damon_bytes(run: KvRun, action: str, t: float) -> float:
    """Bytes DAMON's ``action`` schemes had applied by run time t (the last counter read at or before it)."""
    if run.t0_mono is None:
        return 0.0
    latest: dict[tuple[str, str], float] = {}
    for d in run.dstat:
        if d.get("action") != action or "mono" not in d:
            continue
        if float(d["mono"]) - run.t0_mono <= t + 1e-6:
            latest[(d.get("kd", "?"), d.get("scheme", "?"))] = float(d.get("sz_applied", 0))
    return sum(latest.values())


def _promoted_demoted(run: KvRun, s: Sample) -> tuple[float, float]:
    """Bytes promoted to / demoted from node 0 by run time s.t, from counters only (what the exporter sees)."""
    p = s.n0.get("pgpromote_success", 0) * PAGE + _damon_bytes(run, "migrate_hot", s.t)
    d = sum(s.n0.get(k, 0) for k in ("pgdemote_kswapd", "pgdemote_direct", "pgdemote_khugepaged")) * PAGE \
        + _damon_bytes(run, "migrate_cold", s.t)
    return p, d


def figures(run: KvRun, duration: float) -> dict[str, Any]:
    tail = [s for s in run.samples if s.t >= duration / 3 - 0.5]
    shares = [s.hot_share for s in tail]
    first, last = _at(run.samples, duration / 3), run.samples[-1] if run.samples else None
    blocked_steps = [b - a for a, b in itertools.pairwise(run.blocked_ms)]
    ok = bool(tail) and run.workload_rc == 0 and not run.errors and run.apply_rc in (None, 0) \
        and run.phase_written is not None
    out: dict[str, Any] = {
        "ok": ok, "samples": len(run.samples), "tail_samples": len(tail),
        "hot_median": _round(percentile(shares, 50)), "hot_p10": _round(percentile(shares, 10)),
        "hot_lowest": _round(min(shares) if shares else None),
        "write_s": run.write_s, "phase_begin": run.phase_begin, "phase_written": run.phase_written,
        "recover_s": None, "churn": None, "stranded": None, "stranded_win": None,
        "pingpong_mib": None, "pingpong_ratio": None, "est_ratio": None, "est_mib": None,
        "appended_mib": None, "migrated_mib": None,
        "query_s_max": _round(max((s.query_s for s in run.samples), default=None), 3),
        "apply_seconds": run.apply_seconds, "hot_passes": run.passes,
        "max_pass_s": run.max_pass_s, "slow_passes": run.slow_passes,
        "kdamond_cpu_s": run.kdamond_cpu_s or None,
        "blocked_s": _round((run.blocked_ms[-1] - run.blocked_ms[0]) / 1000, 2) if run.blocked_ms else None,
        "blocked_max_s": _round(max(blocked_steps, default=0) / 1000, 2) if run.blocked_ms else None,
        "blocked_in": run.blocked_in or None,
    }
    if run.phase_written is not None:
        back = next((s for s in run.samples if s.t >= run.phase_written and s.hot_share >= 90.0), None)
        out["recover_s"] = None if back is None else round(max(0.0, back.t - run.phase_written), 2)
        during = [s.hot_share for s in run.samples if run.phase_begin is not None and s.t >= run.phase_begin]
        out["hot_lowest_after_phase"] = _round(min(during) if during else None)
    out.update(_dip(run, tail, duration))
    if run.lives:
        out["stranded"] = _round(max(100.0 * x.live[OTHER_DRAM] / sum(x.live) if sum(x.live) else 0.0
                                     for x in run.lives), 2)
        out["live_query_s_max"] = _round(max(x.query_s for x in run.lives), 3)
    out["stranded_win"] = _round(max((100.0 * s.win[OTHER_DRAM] / sum(s.win) if sum(s.win) else 0.0
                                      for s in run.samples), default=None), 2)
    if first is not None and last is not None and last is not first:
        appended = last.ctr.get("appended", 0) - first.ctr.get("appended", 0)
        migrated = last.vm.get("pgmigrate_success", 0) - first.vm.get("pgmigrate_success", 0)
        out["appended_mib"] = round(appended * PAGE / MIB, 1)
        out["migrated_mib"] = round(migrated * PAGE / MIB, 1)
        out["churn"] = round(migrated / appended, 2) if appended > 0 else None
        # page-level counts come with the full samples: the first at or after T/3 and the last
        f0 = next((x for x in run.lives if x.t >= duration / 3 - 1e-6), None)
        f1 = run.lives[-1] if run.lives else None
        if f0 is not None and f1 is not None and f1 is not f0:
            returned = (f1.ctr.get("pp_up", 0) - f0.ctr.get("pp_up", 0)) + \
                (f1.ctr.get("pp_down", 0) - f0.ctr.get("pp_down", 0))
            went_up = f1.ctr.get("up", 0) - f0.ctr.get("up", 0)
            out["pingpong_mib"] = round(returned * PAGE / MIB, 1)
            out["pingpong_ratio"] = round((f1.ctr.get("pp_up", 0) - f0.ctr.get("pp_up", 0)) / went_up, 3) \
                if went_up else None
        p0, d0 = _promoted_demoted(run, first)
        p1, d1 = _promoted_demoted(run, last)
        est = PingPong("0", p1 - p0, d1 - d0, last.t - first.t)
        out["est_ratio"] = None if est.ratio is None else round(est.ratio, 3)
        out["est_mib"] = round(min(est.promoted, est.demoted) / MIB, 1)
        out["promoted_mib"] = round(est.promoted / MIB, 1)
        out["demoted_mib"] = round(est.demoted / MIB, 1)
    return out


def _dip(run: KvRun, tail: list[Sample], duration: float) -> dict[str, Any]:
    """What the p10 figure is made of: ``below95_s``, the time of the last two thirds with < 95 % of the windows on
    node 0 (each sample stands until the next one, the last until T: p10 < 95 % once it exceeds a tenth of that
    span); after the phase change began, ``win_slow_peak_mib``, the most window bytes on the slow nodes at once,
    and ``promoted_after_phase_mib``, what was promoted to node 0 (counters, as the estimator reads them): whether
    promotion or decode moving the windows on ended the dip. And the room the burst found: ``fast_at_phase_mib``
    (the workload on node 0 as the phase began), ``demoted_while_written_mibs`` (MiB/s off node 0 while the prompts
    were written) and ``cpu_while_written`` (:func:`cpu_between` over that time)."""
    ends = [s.t for s in tail[1:]] + [max(duration, tail[-1].t)] if tail else []
    out: dict[str, Any] = {
        "below95_s": _round(sum(e - s.t for s, e in zip(tail, ends, strict=True) if s.hot_share < 95.0), 1)
        if tail else None, "win_slow_peak_mib": None, "promoted_after_phase_mib": None, "fast_at_phase_mib": None,
        "demoted_while_written_mibs": None, "cpu_while_written": None}
    if run.phase_begin is None:
        return out
    before = [x for x in run.lives if x.t <= run.phase_begin + 1e-6]
    if before:
        out["fast_at_phase_mib"] = _round(before[-1].live[FAST] * PAGE / MIB)
    s0, s1 = _at(run.samples, run.phase_begin), _at(run.samples, run.phase_written or float("inf"))
    if s0 is not None and s1 is not None and run.write_s:
        demoted = _promoted_demoted(run, s1)[1] - _promoted_demoted(run, s0)[1]
        out["demoted_while_written_mibs"] = _round(demoted / MIB / run.write_s)
    out["cpu_while_written"] = cpu_between(run, run.phase_begin, run.phase_written)
    after = [s for s in run.samples if s.t >= run.phase_begin - 1e-6]
    if after:
        out["win_slow_peak_mib"] = _round(max(sum(s.win[OTHER_DRAM + 1:MAXNODE]) for s in after) * PAGE / MIB)
        out["promoted_after_phase_mib"] = _round(
            (_promoted_demoted(run, after[-1])[0] - _promoted_demoted(run, after[0])[0]) / MIB)
    return out


def cpu_between(run: KvRun, begin: float, end: float | None) -> dict[str, float] | None:
    """The CPU each kind of thread used from the last ``PL:TCPU`` at or before run time ``begin`` to the first at or
    after ``end``, in % of one CPU (ticks of USER_HZ, 100 per second): ``workload``, ``kdamond``, ``reclaim``, and
    each kdamond apart (``kdamond.0``, ...)."""
    if run.t0_mono is None or end is None:
        return None
    tcpu = sorted(run.tcpu, key=lambda x: x[0])
    t0 = [x for x in tcpu if x[0] - run.t0_mono <= begin + 1e-6]
    t1 = [x for x in tcpu if x[0] - run.t0_mono >= end - 1e-6]
    if not t0 or not t1 or t1[0][0] <= t0[-1][0]:
        return None
    (m0, a), (m1, b) = t0[-1], t1[0]
    out = {"workload": 0.0, "kdamond": 0.0, "reclaim": 0.0}
    for task, ticks in b.items():
        comm = task.partition(":")[2]
        kind = "kdamond" if comm.startswith("kdamond") else \
            "reclaim" if comm.startswith(("kswapd", "kcompactd")) else "workload"
        out[kind] += ticks - a.get(task, 0)  # a thread started meanwhile counts from 0
        if kind == "kdamond":
            out[comm] = out.get(comm, 0.0) + ticks - a.get(task, 0)
    return {k: round(v / (m1 - m0), 0) for k, v in out.items()}  # ticks per second = % of one CPU


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


#: For each figure: which way is worse.
WORSE = {"hot_median": "low", "hot_p10": "low", "hot_lowest": "low", "recover_s": "high", "write_s": "high",
         "churn": "high", "stranded": "high", "stranded_win": "high", "pingpong_mib": "high",
         "pingpong_ratio": "high", "est_ratio": "high", "est_mib": "high", "apply_seconds": "high",
         "hot_lowest_after_phase": "low", "query_s_max": "high", "max_pass_s": "high", "below95_s": "high",
         "win_slow_peak_mib": "high"}


def worst(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Figure by figure, the worst over ``runs`` (a recovery that never came is the worst)."""
    out: dict[str, Any] = {"runs": len(runs), "ok": all(r["ok"] for r in runs)}
    for key, way in WORSE.items():
        values = [r.get(key) for r in runs]
        if key == "recover_s":
            out[key] = None if any(v is None for v in values) else max(values)  # type: ignore[type-var]
            continue
        known = [v for v in values if v is not None]
        out[key] = None if not known else (min(known) if way == "low" else max(known))
    return out


#: The issue's targets for the shipped profile, on the worst run, at every envelope point, in both start modes.
TARGETS = (("hot_median", ">=", 98, "hot window on DRAM >= 98 % (median)"),
           ("hot_p10", ">=", 95, ">= 95 % (10th percentile)"),
           ("hot_lowest", ">=", 85, ">= 85 % (lowest sample)"),
           ("recover_s", "<=", 5, "back to >= 90 % within 5 s of the prompts written"),
           ("churn", "<=", 1.5, "churn <= 1.5"),
           ("stranded", "<=", 2, "<= 2 % stranded on the other DRAM node"))


def judge(figs: dict[str, Any]) -> list[tuple[str, bool]]:
    out = []
    for key, op, value, label in TARGETS:
        v = figs.get(key)
        out.append((label, v is not None and (v >= value if op == ">=" else v <= value)))
    return out


COLUMNS = (("hot_median", "hot median %"), ("hot_p10", "p10 %"), ("hot_lowest", "lowest %"),
           ("recover_s", "recover s"), ("write_s", "prompts written in s"), ("churn", "churn"),
           ("stranded", "stranded %"), ("pingpong_mib", "ping-pong MiB (pages)"),
           ("est_ratio", "estimator min(P,D)/P"), ("pingpong_ratio", "page-level ratio"))


def _cell(value: Any, key: str) -> str:
    if value is None:
        return "never" if key == "recover_s" else "—"
    return f"{value:g}" if isinstance(value, float) else str(value)


def table(results: dict[tuple[str, str, str], dict[str, Any]], points: list[str], starts: list[str],
          configs: list[str]) -> str:
    """A Markdown table: one row per (envelope point, start, configuration), worst of its runs."""
    head = "| point | start | configuration | runs | " + " | ".join(label for _, label in COLUMNS) + " |"
    lines = [head, "|" + "---|" * (4 + len(COLUMNS))]
    for point in points:
        for start in starts:
            for config in configs:
                figs = results.get((point, start, config))
                if figs is None:
                    continue
                flag = "" if figs.get("ok", True) else " (incomplete)"
                cells = [_cell(figs.get(k), k) for k, _ in COLUMNS]
                lines.append(f"| {point} | {start} | {config}{flag} | {figs.get('runs', 1)} | " + " | ".join(cells)
                             + " |")
    return "\n".join(lines)


def _cpu_cell(cpu: dict[str, float] | None) -> str:
    return "—" if not cpu else f"{cpu['workload']:g}, {cpu['kdamond']:g}"


def per_run_table(runs: list[dict[str, Any]], points: list[str], starts: list[str], configs: list[str]) -> str:
    """A Markdown table: one row per run, in sweep order — what the worst-of table is made of, with what the
    emulator distorts (the hot loop's longest pass and its time blocked, the kdamonds' CPU) and the guest's wall
    time."""
    lines = ["| point | start | configuration | run | median / p10 / lowest % | recover s (written s) | churn | "
             "stranded % | ping-pong MiB (estimator) | < 95 % s / window MiB on CXL / promoted MiB after T/2 | "
             "while written: node0 MiB at T/2 / demoted MiB/s / CPU % workload, kdamonds | "
             "longest pass s | blocked s (longest in 1 s) | kdamond CPU s | wall s |",
             "|" + "---|" * 15]
    order = {(p, s, c): i for i, (p, s, c) in enumerate((p, s, c) for p in points for s in starts for c in configs)}
    for r in sorted(runs, key=lambda r: (order.get((r["point"], r["start"], r["config"]), 1 << 30), r["run"])):
        cpu = r.get("kdamond_cpu_s") or {}
        cells = [
            " / ".join(_cell(r.get(k), k) for k in ("hot_median", "hot_p10", "hot_lowest")),
            f"{_cell(r.get('recover_s'), 'recover_s')} ({_cell(r.get('write_s'), 'write_s')})",
            _cell(r.get("churn"), "churn"), _cell(r.get("stranded"), "stranded"),
            f"{_cell(r.get('pingpong_mib'), 'pingpong_mib')} ({_cell(r.get('est_ratio'), 'est_ratio')})",
            " / ".join(_cell(r.get(k), k) for k in ("below95_s", "win_slow_peak_mib", "promoted_after_phase_mib")),
            " / ".join([*(_cell(r.get(k), k) for k in ("fast_at_phase_mib", "demoted_while_written_mibs")),
                        _cpu_cell(r.get("cpu_while_written"))]),
            _cell(r.get("max_pass_s"), "max_pass_s"),
            f"{_cell(r.get('blocked_s'), 'blocked_s')} ({_cell(r.get('blocked_max_s'), 'blocked_max_s')})"
            if r.get("blocked_s") is not None else "—",
            " + ".join(f"{v:g}" for _, v in sorted(cpu.items(), key=lambda kv: int(kv[0]))) if cpu else "—",
            _cell(r.get("wall_seconds"), "wall_seconds")]
        flag = "" if r.get("ok", True) else " (incomplete)"
        lines.append(f"| {r['point']} | {r['start']} | {r['config']}{flag} | {r['run']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
