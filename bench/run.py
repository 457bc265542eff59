#!/usr/bin/env python3
"""Benchmark: start-up, `nodeagent facts` and `nodeagent plan` on converged simulated nodes of three sizes.

A systemd timer and Ansible run nodeagent on every node of a fleet, so what matters is the wall time of one
command in a fresh process. Each figure is the median of N runs of a subprocess, printed beside the baseline
measured in the same run (a bare `python3 -c pass`), so machines of different speed can be compared by ratio.

    python bench/run.py [--runs 7] [--sizes small,h100-cxl,stress] [--profile profiles/cxl-inference.yaml]

Nodes are created once under the cache directory (the stress node, 131,072 memory blocks, takes a while the
first time) and converged with `nodeagent apply` before timing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def timed(argv: list[str], runs: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        times.append(time.perf_counter() - start)
        if proc.returncode not in (0, 2):
            raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return statistics.median(times), times


def node(name: str) -> Path:
    from nodeagent.sim import cached

    start = time.perf_counter()
    root = cached(name)
    took = time.perf_counter() - start
    if took > 1:
        print(f"  (created simulated node {name} in {took:.1f}s)", file=sys.stderr)
    return root


def imported_modules(args: list[str]) -> list[str]:
    """Which heavy third-party modules a command imports (it should import only what it needs)."""
    code = ("import sys; from nodeagent.cli import main\n"
            f"rc = main({args!r})\n"
            "heavy = ['pydantic', 'sh', 'jinja2', 'yaml', 'pyudev', 'prometheus_client']\n"
            "print('\\nIMPORTED:' + ','.join(m for m in heavy if m in sys.modules), file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    line = next((ln for ln in proc.stderr.splitlines() if ln.startswith("IMPORTED:")), "IMPORTED:")
    return [m for m in line.removeprefix("IMPORTED:").split(",") if m]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--sizes", default="small,h100-cxl,stress")
    ap.add_argument("--profile", default=str(REPO / "profiles" / "cxl-inference.yaml"))
    ap.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = ap.parse_args()
    py = sys.executable
    na = [py, "-m", "nodeagent"]
    figures: dict[str, float] = {}

    base, _ = timed([py, "-c", "pass"], args.runs)
    figures["python -c pass"] = base
    figures["nodeagent --version"], _ = timed([*na, "--version"], args.runs)
    for size in args.sizes.split(","):
        root = node(size)
        conv = subprocess.run([*na, "--root", str(root), "apply", "--yes", "--allow-disruptive", args.profile],
                              capture_output=True, text=True)
        if conv.returncode not in (0, 5):
            print(f"  warning: converging {size} exited {conv.returncode}: {conv.stderr.strip()}", file=sys.stderr)
        figures[f"facts  {size}"], _ = timed([*na, "--root", str(root), "facts"], args.runs)
        figures[f"plan   {size}"], _ = timed([*na, "--root", str(root), "plan", args.profile], args.runs)

    print(f"median of {args.runs} runs, wall time of a fresh process (baseline: python3 -c pass in this run)")
    print(f"{'command':<28}{'median ms':>10}{'× baseline':>12}")
    for name, secs in figures.items():
        print(f"{name:<28}{secs * 1000:>10.1f}{secs / base:>12.1f}")
    root = node(args.sizes.split(",")[0])
    for cmd in (["--root", str(root), "facts"], ["--root", str(root), "plan", args.profile]):
        print(f"imports of `nodeagent {cmd[2]}`: {', '.join(imported_modules(cmd)) or 'none of the heavy ones'}")
    if args.json:
        print(json.dumps({k: round(v * 1000, 2) for k, v in figures.items()}, indent=1))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "0")
    raise SystemExit(main())
