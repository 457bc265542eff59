#!/usr/bin/env python3
"""The burst's room on DRAM, over every saved run of one envelope point: recomputed from the raw guest outputs.

For each saved run (``kv-<point>-<config>-<start>-<n>.txt`` under the directories given, recursively) the figures
of kvfigures.py that say what the phase change's prompts found on node 0 — the workload's bytes still there as
the phase began (``fast_at_phase_mib``), the rate node 0 was demoted from while the prompts were written
(``demoted_while_written_mibs``), how long that took, the CPU the kdamonds and the workload had meanwhile (of the
guest's two), and a gauge of the emulator's speed (:data:`GAUGE`) — beside what the dip was (the most window
bytes on CXL at once, the lowest sample); then the correlation of each of those causes with each effect over the
runs, and the runs split at the gauge's median. Every configuration and tuning is pooled: the question is what
the dip depends on, whatever set it.

    python bench/placement/kvroom.py bench/placement/results/kv-explore            # burst, every saved run
    python bench/placement/kvroom.py --point wide bench/placement/results
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import kvfigures

#: The demotion kdamond of node 1, the DRAM node outside the workload's cpuset (nodeagent's profiles number their
#: kdamonds in this order; runs of other configurations lack it and are left out). It samples 1 GiB of a node the
#: workload does not use and has nothing to move: the same work in every run, so the CPU it takes says how slow
#: the emulated CPU ran — a gauge of the host's speed, not of the profile. Read over [T/12, T/2 - 5 s], before the
#: phase change.
GAUGE = "kdamond.1"
CAUSES = (("fast_at_phase_mib", "node0 MiB at T/2"), ("demoted_while_written_mibs", "demoted MiB/s while written"),
          ("write_s", "prompts written in s"), ("kdamond_cpu_pct", "kdamonds' CPU % while written"),
          ("workload_cpu_pct", "workload's CPU % while written"), ("gauge_cpu_pct", "idle node's kdamond CPU % before"))
EFFECTS = (("win_slow_peak_mib", "window MiB on CXL"), ("hot_lowest", "lowest %"))


def rows(dirs: list[Path], point: str) -> list[dict[str, Any]]:
    out = []
    for d in dirs:
        for path in sorted(d.rglob(f"kv-{point}-*.txt")):
            run = kvfigures.parse(path.read_text(errors="replace"))
            duration = float(run.conf.get("duration", 60))
            figs = kvfigures.figures(run, duration)
            cpu = figs.get("cpu_while_written") or {}
            figs["kdamond_cpu_pct"], figs["workload_cpu_pct"] = cpu.get("kdamond"), cpu.get("workload")
            before = kvfigures.cpu_between(run, duration / 12, (run.phase_begin or 0) - 5) or {}
            figs["gauge_cpu_pct"] = before.get(GAUGE)  # before the burst: what it measures is the host alone
            if not figs["ok"] or any(figs.get(k) is None for k, _ in CAUSES + EFFECTS):
                continue  # incomplete, or from before the workload printed what these need
            out.append({"run": str(path.relative_to(d)), **{k: figs[k] for k, _ in CAUSES + EFFECTS}})
    return out


def correlations(table: list[dict[str, Any]]) -> list[tuple[str, str, float | None]]:
    """Pearson's r of each cause with each effect, and of the host's gauge with the demotion rate."""
    pairs = [(c, e) for c, _ in CAUSES for e, _ in EFFECTS] + [("gauge_cpu_pct", "demoted_while_written_mibs")]
    out: list[tuple[str, str, float | None]] = []
    for c, e in pairs:
        try:
            out.append((c, e, round(statistics.correlation([r[c] for r in table], [r[e] for r in table]), 2)))
        except statistics.StatisticsError:  # fewer than two runs, or a constant figure
            out.append((c, e, None))
    return out


def report(table: list[dict[str, Any]]) -> str:
    cols = CAUSES + EFFECTS
    lines = ["| run | " + " | ".join(label for _, label in cols) + " |", "|" + "---|" * (1 + len(cols))]
    lines += [f"| {r['run']} | " + " | ".join(f"{r[k]:g}" for k, _ in cols) + " |" for r in table]
    label = dict(cols)
    lines += ["", f"Pearson's r over {len(table)} runs:", ""]
    lines += [f"- {label[c]} ~ {label[e]}: {'—' if r is None else f'{r:+.2f}'}" for c, e, r in correlations(table)]
    lines += ["", "Split at the gauge's median (the faster and the slower half of the hosts' runs):", ""]
    lines += [f"- {name}: {fig}" for name, fig in halves(table)]
    return "\n".join(lines)


def halves(table: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The runs at or under the gauge's median and those above it: the demotion rate, the windows on CXL and the
    lowest sample (medians), and how many met the lowest-sample target (>= 85 %)."""
    mid = statistics.median(r["gauge_cpu_pct"] for r in table)
    out = []
    for name, part in ((f"gauge <= {mid:g} %", [r for r in table if r["gauge_cpu_pct"] <= mid]),
                       (f"gauge > {mid:g} %", [r for r in table if r["gauge_cpu_pct"] > mid])):
        if not part:
            continue
        med = {k: statistics.median(r[k] for r in part)
               for k in ("demoted_while_written_mibs", "win_slow_peak_mib", "hot_lowest")}
        met = sum(r["hot_lowest"] >= 85 for r in part)
        out.append((name, f"{len(part)} runs; demoted {med['demoted_while_written_mibs']:g} MiB/s, "
                          f"{med['win_slow_peak_mib']:g} MiB of windows on CXL, lowest {med['hot_lowest']:g} % "
                          f"(medians); lowest >= 85 % in {met}"))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("dirs", nargs="+", type=Path, help="directories of saved runs (searched recursively)")
    p.add_argument("--point", default="burst", help="the envelope point (default burst)")
    args = p.parse_args(argv)
    table = rows(args.dirs, args.point)
    if not table:
        print(f"kvroom: no complete {args.point} run with the phase's figures under "
              + ", ".join(map(str, args.dirs)), file=sys.stderr)
        return 1
    print(report(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
