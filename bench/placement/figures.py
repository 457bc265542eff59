"""The placement benchmark's figures: parse one run's guest output, reduce it to figures, combine runs, judge.

Pure functions (no I/O), so that the reduction is unit-tested apart from the QEMU guest.

Per run (``figures``), from the samples the workload printed (``PL:SAMPLE``; t = 0 when both sets are written,
or, applied to a running node, when the configuration has been applied):

- ``hot_on_fast`` / ``cold_on_cxl``: % of the hot pages on the fast node / of the cold pages on the CXL node, the
  mean over the samples of the last third of the run (t >= 2/3 of the duration);
- ``other``: % of pages on any other node (the worse of the hot and the cold set), same mean; pages whose node
  the query could not tell (being migrated at that moment: ``move_pages`` gives a negative status) are counted in
  the denominators but on no node (``in_flight``: the largest share seen in the last third);
- ``t_hot90`` / ``t_cold90``: the time of the first sample at which the figure reached 90 % (None: never);
- ``migrated_mib`` / ``promoted_mib`` / ``demoted_mib``: /proc/vmstat deltas since t = 0 at the last sample
  (``pgmigrate_success``, ``pgpromote_success``, ``pgdemote_*``: every page any mechanism moved, what NUMA
  balancing promoted, what reclaim demoted; DAMON's moves are in the first only).

A configuration's result (``worst``) is, figure by figure, the worst over its runs.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

PAGE = 4096
MIB = 1 << 20
COLD_STRIDE = 4  # the workload queries every 4th cold page
FAST, CXL = 0, 2
MAXNODE = 8


@dataclass(frozen=True)
class Sample:
    t: float
    hot: tuple[int, ...]  # pages per node 0..7, then "absent/error"
    cold: tuple[int, ...]
    vm: dict[str, int]

    def share(self, which: str, nodes: tuple[int, ...]) -> float:
        counts = self.hot if which == "hot" else self.cold
        total = sum(counts)
        return 100.0 * sum(counts[n] for n in nodes) / total if total else 0.0


@dataclass
class Run:
    config: str
    start: str
    samples: list[Sample] = field(default_factory=list)
    states: dict[str, dict[str, str]] = field(default_factory=dict)
    damon: list[dict[str, str]] = field(default_factory=list)
    apply_seconds: float | None = None
    apply_rc: int | None = None
    workload_rc: int | None = None
    touched_at: float | None = None
    errors: list[str] = field(default_factory=list)
    apply_output: list[str] = field(default_factory=list)
    tlb_reach: int | None = None  # pages between the hot loop's TLB flushes (0: none; None: an older workload)
    passes: int | None = None  # full passes of the hot loop over the hot set
    tlb_flushes: int | None = None


_SAMPLE = re.compile(r"^PL:SAMPLE (\S+) hot((?: \d+){9}) cold((?: \d+){9}) vm(.*)$")


def parse(stdout: str) -> Run:
    """One run from the guest's stdout (the ``PL:`` lines of guest.sh and the workload)."""
    run = Run("?", "?")
    for line in stdout.splitlines():
        if line.startswith("  apply| "):
            run.apply_output.append(line[len("  apply| "):])
            continue
        if not line.startswith("PL:"):
            continue
        m = _SAMPLE.match(line)
        if m:
            vm = dict(kv.split("=", 1) for kv in m.group(4).split())
            run.samples.append(Sample(float(m.group(1)), tuple(int(x) for x in m.group(2).split()),
                                      tuple(int(x) for x in m.group(3).split()), {k: int(v) for k, v in vm.items()}))
            continue
        word, _, rest = line[3:].partition(" ")
        if word == "CONFIG":
            parts = rest.split()
            run.config, run.start = parts[0], parts[2]
        elif word == "STATE":
            name, _, kvs = rest.partition(" ")
            run.states[name] = dict(kv.split("=", 1) for kv in kvs.split() if "=" in kv)
        elif word == "APPLIED":
            run.apply_seconds = float(rest.split("=", 1)[1])
        elif word == "APPLY-RC":
            run.apply_rc = int(rest)
        elif word == "WORKLOAD-RC":
            run.workload_rc = int(rest)
        elif word == "TOUCHED":
            run.touched_at = float(rest.split("=", 1)[1])
        elif word == "DAMON":
            run.damon.append(dict(kv.split("=", 1) for kv in rest.split() if "=" in kv))
        elif word == "TLB":
            run.tlb_reach = int(rest.split("=", 1)[1])
        elif word == "END":
            kv = dict(x.split("=", 1) for x in rest.split() if "=" in x)
            run.passes = int(kv["passes"]) if "passes" in kv else None
            run.tlb_flushes = int(kv["tlb_flushes"]) if "tlb_flushes" in kv else None
        elif word == "ERROR":
            run.errors.append(rest)
    return run


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _first(samples: list[Sample], which: str, nodes: tuple[int, ...]) -> float | None:
    for s in samples:
        if s.share(which, nodes) >= 90.0:
            return s.t
    return None


def figures(run: Run, duration: float) -> dict[str, Any]:
    """The run's figures (see the module docstring); ``ok`` is False when the run did not produce them."""
    tail = [s for s in run.samples if s.t >= duration * 2 / 3 - 0.5]
    others = tuple(n for n in range(MAXNODE) if n not in (FAST, CXL))  # index MAXNODE: no node known
    last = run.samples[-1].vm if run.samples else {}

    def mib(*keys: str) -> float:
        return round(sum(last.get(k, 0) for k in keys) * PAGE / MIB, 1)

    ok = bool(tail) and run.workload_rc == 0 and not run.errors and run.apply_rc in (None, 0)
    hot_other = _mean([s.share("hot", others) for s in tail])
    cold_other = _mean([s.share("cold", others) for s in tail])
    return {
        "ok": ok,
        "hot_on_fast": _round(_mean([s.share("hot", (FAST,)) for s in tail])),
        "cold_on_cxl": _round(_mean([s.share("cold", (CXL,)) for s in tail])),
        "other": _round(max(hot_other, cold_other) if hot_other is not None and cold_other is not None else None),
        "hot_other": _round(hot_other),
        "in_flight": _round(max([max(s.share("hot", (MAXNODE,)), s.share("cold", (MAXNODE,))) for s in tail],
                                default=None)),
        "t_hot90": _first(run.samples, "hot", (FAST,)),
        "t_cold90": _first(run.samples, "cold", (CXL,)),
        "migrated_mib": mib("pgmigrate_success"),
        "promoted_mib": mib("pgpromote_success"),
        "demoted_mib": mib("pgdemote_kswapd", "pgdemote_direct", "pgdemote_khugepaged"),
        "hint_faults": last.get("numa_hint_faults", 0),
        "samples": len(run.samples),
        "tail_samples": len(tail),
        "apply_seconds": run.apply_seconds,
        "tlb_reach": run.tlb_reach,
        "hot_passes": run.passes,
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


#: For each figure: which way is worse ("low": a smaller value is worse; "high": a larger one; None = never).
WORSE = {"hot_on_fast": "low", "cold_on_cxl": "low", "other": "high", "hot_other": "high", "in_flight": "high",
         "t_hot90": "high",
         "t_cold90": "high", "migrated_mib": "high", "promoted_mib": "high", "demoted_mib": "high",
         "hint_faults": "high", "apply_seconds": "high"}


def worst(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Figure by figure, the worst over ``runs`` (a time that was never reached is the worst time)."""
    out: dict[str, Any] = {"runs": len(runs), "ok": all(r["ok"] for r in runs)}
    for key, way in WORSE.items():
        values = [r.get(key) for r in runs]
        if key.startswith("t_"):
            out[key] = None if any(v is None for v in values) else max(values)  # type: ignore[type-var]
            continue
        known = [v for v in values if v is not None]
        if not known:
            out[key] = None
        else:
            out[key] = min(known) if way == "low" else max(known)
    return out


@dataclass(frozen=True)
class Target:
    key: str
    op: str  # ">=" or "<="
    value: float
    label: str

    def met(self, figs: dict[str, Any]) -> bool:
        v = figs.get(self.key)
        if v is None:
            return False
        return v >= self.value if self.op == ">=" else v <= self.value


def targets(start: str, workload_mib: float) -> list[Target]:
    """The issue's targets for nodeagent's profile in each start mode."""
    if start == "before":
        return [Target("hot_on_fast", ">=", 95, "hot on fast >= 95 %"),
                Target("cold_on_cxl", ">=", 90, "cold on CXL >= 90 %"),
                Target("t_hot90", "<=", 15, "90 % of hot on fast within 15 s"),
                Target("migrated_mib", "<=", 2 * workload_mib, f"migrated <= {2 * workload_mib:.0f} MiB (2x)"),
                Target("other", "<=", 5, "<= 5 % on other nodes")]
    return [Target("hot_on_fast", ">=", 90, "hot on fast >= 90 %"),
            Target("cold_on_cxl", ">=", 80, "cold on CXL >= 80 %")]


def judge(start: str, figs: dict[str, Any], workload_mib: float) -> list[tuple[str, bool]]:
    return [(t.label, t.met(figs)) for t in targets(start, workload_mib)]


COLUMNS = (("hot_on_fast", "hot on fast %"), ("cold_on_cxl", "cold on CXL %"), ("other", "other nodes %"),
           ("t_hot90", "t hot90 s"), ("t_cold90", "t cold90 s"), ("migrated_mib", "migrated MiB"),
           ("promoted_mib", "promoted MiB"), ("demoted_mib", "demoted MiB"))


def _cell(value: Any, key: str) -> str:
    if value is None:
        return "never" if key.startswith("t_") else "—"
    return f"{value:g}" if isinstance(value, float) else str(value)


def table(results: dict[tuple[str, str], dict[str, Any]], starts: list[str], configs: list[str]) -> str:
    """A Markdown table: one row per (start, configuration), worst of its runs."""
    head = "| start | configuration | runs | " + " | ".join(label for _, label in COLUMNS) + " |"
    lines = [head, "|" + "---|" * (3 + len(COLUMNS))]
    for start in starts:
        for config in configs:
            figs = results.get((start, config))
            if figs is None:
                continue
            flag = "" if figs.get("ok", True) else " (incomplete)"
            cells = [_cell(figs.get(k), k) for k, _ in COLUMNS]
            lines.append(f"| {start} | {config}{flag} | {figs.get('runs', 1)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def to_dict(run: Run) -> dict[str, Any]:
    d = asdict(run)
    d["samples"] = [asdict(s) for s in run.samples]
    return d
