#!/usr/bin/env python3
"""Placement benchmark: what a tiering configuration does to a workload's pages on a real kernel.

Each run boots a fresh QEMU guest (tests/realkernel/harness.py, layout ``placement``: node0 1 GiB with both CPUs,
node1 1 GiB of CPU-less DRAM, node2 1.5 GiB of legacy pmem made devdax then kmem — the CXL stand-in) and runs
bench/placement/guest.sh in it: a workload confined to node0's CPUs and to nodes {0, 2} (cgroup v2 cpuset) writes
a cold set that fills node0 and then a small hot set that spills to node2, then keeps writing the hot set; every
few seconds it asks the kernel where each page is (move_pages in query mode) and what was migrated (/proc/vmstat).

Configurations: ``baseline`` (no tiering), ``tpp`` (numa_balancing=2 + demotion), ``damo-mem-tier`` (DAMON
migrate_cold + migrate_hot with young filters, one kdamond per node, kernel tiering off) and ``nodeagent``
(``nodeagent apply`` of a profile, profiles/cxl-inference.yaml by default). Start modes: ``before`` (applied at
boot, before the workload) and ``after`` (applied to the running node once the workload filled node0).

    python bench/placement/run.py                         # the full comparison: 4 configs x 2 modes x 2 runs
    python bench/placement/run.py --configs nodeagent --starts after --runs 1 --duration 30
    python bench/placement/run.py --workload kv --configs nodeagent --candidate my.yaml   # a tuning, paired
    python bench/placement/run.py --smoke                 # CI: nodeagent's profile, before, one 20 s run
    python bench/placement/run.py --from-dir RESULTS      # recompute the table from a saved run's raw outputs

t = 0 is the moment the placement to judge exists: at boot, when the workload has written both sets (the
configuration was applied before it started); on a running node, when the configuration has been applied
(nodeagent's Python runs ~50x slower under TCG than on hardware: its apply takes 10-50 s there, during which the
workload keeps running). MiB migrated count from the workload's start, resp. from the start of the apply. Each
figure is the mean over the last third of the run; a configuration's result is the worst of its runs
(figures.py). Results (raw guest output per run, results.json, table.md) go to --out. The configurations
alternate run by run (run 1 of each, then run 2 of each in reverse order: A B B A ...): the host's speed drifts
(a `burst` run took 109 s, and 25 minutes later, with a lighter profile, 192 s), and alternating spreads that
drift over all of them alike.

TCG runs both vCPUs on host threads: another guest or a test suite on the host slows the kernel's scans, DAMON
and page migration in wall-clock terms. Run the full benchmark on an otherwise idle host.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from textwrap import indent
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests/realkernel"))
sys.path.insert(0, str(HERE))

import figures  # noqa: E402
import harness  # noqa: E402
import kvfigures  # noqa: E402

CONFIGS = ("baseline", "tpp", "damo-mem-tier", "nodeagent")
#: ``--candidate PROFILE``: nodeagent with another profile, run beside the shipped one (tables list it last)
CANDIDATE = "candidate"
TABLE_ORDER = (*CONFIGS, CANDIDATE)
#: the configurations the targets are judged for
JUDGED = ("nodeagent", CANDIDATE)
STARTS = ("before", "after")
LAYOUT = "placement"

#: The moving-window workload's envelope points (kvwindow.c; node0 = 1 GiB, live memory about
#: seqs x prompt + append x lifetime / 2 = 1.1-1.3x node0). Each pushes one or two of the issue's envelope's
#: dimensions to an edge: 8-64 sequences, 2-16 MiB/s appended, 1-8 MiB hot window per sequence, 4-64 MiB prompts,
#: 60-300 s lifetimes (turnover and short: the shortest lifetimes, which no point before them reached).
KV_POINTS: dict[str, dict[str, float]] = {
    # the middle of the envelope: 16 sequences, 64 MiB hot, 8 x 32 MiB prompts at the phase change
    "mid": {"seqs": 16, "append": 8, "window": 4, "prompt": 16, "burst": 32, "lifetime": 240},
    # many sequences, the fastest appending, the largest windows: 512 MiB hot (half of DRAM)
    "wide": {"seqs": 64, "append": 16, "window": 8, "prompt": 4, "burst": 16, "lifetime": 120},
    # few sequences, large prompts, the longest lifetimes, the smallest windows (8 MiB hot)
    "few": {"seqs": 8, "append": 5, "window": 1, "prompt": 64, "burst": 64, "lifetime": 300},
    # the largest burst: 16 x 64 MiB prompts (1 GiB, as much as DRAM) written at once at the phase change
    "burst": {"seqs": 32, "append": 8, "window": 2, "prompt": 8, "burst": 64, "lifetime": 240},
    # the slowest appending and the shortest lifetimes the live-memory bound allows with 64 MiB prompts
    "slow": {"seqs": 16, "append": 2, "window": 2, "prompt": 64, "burst": 48, "lifetime": 120},
    # the highest turnover: the shortest lifetimes at the fastest appending, 64 sequences with the largest windows
    # (512 MiB hot): a 12 MiB prompt starts about every second, 30 MiB/s of new pages for DRAM to make room for
    "turnover": {"seqs": 64, "append": 16, "window": 8, "prompt": 12, "burst": 24, "lifetime": 60},
    # the same turnover with few, large prompts: a 48 MiB prompt every 3.75 s, 8 x 64 MiB at the phase change
    "short": {"seqs": 16, "append": 16, "window": 4, "prompt": 48, "burst": 64, "lifetime": 60},
}


def kv_args(point: str, args: argparse.Namespace) -> str:
    spec = {**KV_POINTS[point], "duration": args.duration, "interval": args.interval, "full": args.full_every}
    return " ".join(f"{k}={v:g}" for k, v in spec.items())


def build_workload(cache: Path, name: str = "workload") -> Path:
    """Compile NAME.c with the host's gcc into the cache (the guest runs host binaries through its chroot)."""
    return harness.build_native(name, cache, src_dir=HERE)


def guest_env(config: str, start: str, args: argparse.Namespace, workload: Path,
              point: str | None = None) -> dict[str, str]:
    kv = {"PL_KV_ARGS": kv_args(point, args)} if point else {}
    profile = args.candidate if config == CANDIDATE else args.profile
    return {**kv,
        "PL_CONFIG": "nodeagent" if config == CANDIDATE else config, "PL_START": start,
        "PL_DURATION": str(args.duration), "PL_INTERVAL": str(args.interval),
        "PL_COLD_MIB": str(args.cold), "PL_HOT_MIB": str(args.hot), "PL_SETTLE": str(args.settle),
        "PL_WORKLOAD": str(workload), "PL_PYTHON": str(args.python), "PL_REPO": str(REPO),
        "PL_PROFILE": str(Path(profile).resolve()),
        "PL_HOOK": args.candidate_hook if config == CANDIDATE and args.candidate_hook is not None else args.hook,
        "PL_TLB_REACH": str(args.tlb_reach),
    }


def one_run(config: str, start: str, index: int, args: argparse.Namespace, workload: Path, assets: harness.Assets,
            out: Path, point: str | None = None) -> dict[str, Any]:
    script = (HERE / "guest.sh").read_text()
    label = f"kv-{point}-{config}-{start}-{index}" if point else f"placement-{config}-{start}-{index}"
    timeout = args.duration + args.settle + (420 if point else 240)
    started = time.monotonic()
    try:
        res = harness.run_in_guest(script, timeout=timeout, layout=args.layout,
                                   env=guest_env(config, start, args, workload, point), assets=assets, label=label)
        stdout, wall, console = res.stdout, res.wall_seconds, res.console_path
        guest_error, stderr = (f"guest.sh exit {res.rc}" if res.rc else None), res.stderr
    except harness.GuestError as exc:
        stdout, wall, console, stderr = "", time.monotonic() - started, exc.console_path, ""
        guest_error = str(exc)  # printed once, in the run's `why` (why_incomplete)
    (out / f"{label}.txt").write_text(stdout)
    if point:
        kvrun = kvfigures.parse(stdout)
        figs = kvfigures.figures(kvrun, args.duration)
        figs.update({"point": point, "config": config, "start": start, "run": index, "wall_seconds": round(wall, 1),
                     "console": str(console) if console else None, "states": kvrun.states, "damon": kvrun.damon,
                     "errors": kvrun.errors, "apply_rc": kvrun.apply_rc, "kvconf": kvrun.conf})
        parsed: figures.Run | kvfigures.KvRun = kvrun
    else:
        parsed = figures.parse(stdout)
        figs = figures.figures(parsed, args.duration)
        figs.update({"config": config, "start": start, "run": index, "wall_seconds": round(wall, 1),
                     "console": str(console) if console else None, "states": parsed.states, "damon": parsed.damon,
                     "errors": parsed.errors, "apply_rc": parsed.apply_rc})
    if not figs["ok"]:
        figs["why"] = why_incomplete(parsed, stdout, stderr, console, guest_error)
    return figs


def _tail(text: str, lines: int) -> list[str]:
    return [line.rstrip() for line in text.splitlines()[-lines:]]


def why_incomplete(run: figures.Run | kvfigures.KvRun, stdout: str, stderr: str, console: Path | None,
                   guest_error: str | None) -> str:
    """What an incomplete run left to go on, for the sweep's log and a CI failure: the guest's own error, the
    ``PL:ERROR`` lines, the exit codes, how many samples came, and the last lines of its output, its standard
    error and the console."""
    head = [f"guest error: {guest_error}"] if guest_error else []
    head += [f"guest.sh: ERROR {e}" for e in run.errors]
    head.append(f"apply rc {run.apply_rc}, workload rc {run.workload_rc}, {len(run.samples)} sample(s)")
    out = [*head, "last lines of the guest's output:", *(f"  | {x}" for x in _tail(stdout, 15) or ["(none)"])]
    if stderr.strip():
        out += ["last lines of its standard error:", *(f"  | {x}" for x in _tail(stderr, 15))]
    if console is not None and Path(console).exists():
        text = Path(console).read_text(errors="replace")
        out += [f"last lines of the console ({console}):", *(f"  | {x}" for x in _tail(text, 25))]
    return "\n".join(out)


def recompute_kv(args: argparse.Namespace) -> int:
    """The moving-window table and results.json again, from the ``kv-<point>-<config>-<start>-<n>.txt`` files."""
    meta = json.loads((args.from_dir / "results.json").read_text()) if (args.from_dir / "results.json").exists() \
        else {}
    duration = float(meta.get("duration", args.duration))
    old = {(r["point"], r["config"], r["start"], r["run"]): r for r in meta.get("runs", [])}
    per_run: list[dict[str, Any]] = []
    for path in sorted(args.from_dir.glob("kv-*-*-*-*.txt")):
        point, config, start, index = kv_label_parts(path.stem)
        figs = kvfigures.figures(kvfigures.parse(path.read_text()), duration)
        per_run.append({**old.get((point, config, start, int(index)), {}), **figs, "point": point, "config": config,
                        "start": start, "run": int(index)})
    write_kv_results(args.from_dir, meta, per_run)
    return 0


def verdict_key(config: str, where: str) -> str:
    """results.json's key for a verdict: ``where`` for the shipped profile (as saved before --candidate existed),
    ``"<config> <where>"`` for another configuration."""
    return where if config == "nodeagent" else f"{config} {where}"


def verdict_lines(verdicts: dict[str, list[tuple[str, bool]]]) -> list[str]:
    lines = []
    for key, items in verdicts.items():
        config, _, where = key.rpartition(" ")
        lines.append(f"{config or 'nodeagent'}, {where}: "
                     + "; ".join(f"{label}: {'met' if ok else 'NOT met'}" for label, ok in items))
    return lines


def kv_label_parts(stem: str) -> tuple[str, str, str, str]:
    """``kv-<point>-<config>-<start>-<n>`` split; a configuration's name may hold dashes (damo-mem-tier)."""
    point, rest = stem[len("kv-"):].split("-", 1)
    config, start, index = rest.rsplit("-", 2)
    return point, config, start, index


def write_kv_results(out: Path, meta: dict[str, Any], per_run: list[dict[str, Any]]) -> None:
    grouped: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in per_run:
        grouped.setdefault((r["point"], r["start"], r["config"]), []).append(r)
    results = {key: kvfigures.worst(runs) for key, runs in grouped.items()}
    points = [p for p in KV_POINTS if any(k[0] == p for k in results)]
    starts = [s for s in STARTS if any(k[1] == s for k in results)]
    configs = [c for c in TABLE_ORDER if any(k[2] == c for k in results)]
    text = [kvfigures.table(results, points, starts, configs), ""]
    verdicts = {verdict_key(c, f"{p}/{s}"): kvfigures.judge(results[(p, s, c)])
                for c in JUDGED for p in points for s in starts if (p, s, c) in results}
    text += verdict_lines(verdicts)
    print("\n" + "\n".join(text), flush=True)
    text += ["", "Per run:", "", kvfigures.per_run_table(per_run, points, starts, configs)]
    (out / "table.md").write_text("\n".join(text) + "\n")
    meta = {**meta, "runs": per_run,
            "results": [{"point": p, "start": s, "config": c, **f} for (p, s, c), f in results.items()],
            "verdicts": {w: [{"target": label, "met": ok} for label, ok in v] for w, v in verdicts.items()}}
    (out / "results.json").write_text(json.dumps(meta, indent=2, default=str) + "\n")


def main_kv(args: argparse.Namespace, configs: list[str], starts: list[str], assets: harness.Assets,
            out: Path) -> int:
    """The moving-window comparison: every envelope point x start mode x run x configuration (the configurations
    alternate run by run, in reverse order every second run, so that a change in the host's speed over a sweep
    falls on all of them alike)."""
    points = [p for p in args.points.split(",") if p]
    workload = build_workload(assets.cache_dir / "placement", "kvwindow")
    print(f"placement benchmark (moving window): kernel {assets.kernel_version}, point(s) {', '.join(points)}, "
          f"{len(configs)} configuration(s) x {len(starts)} mode(s) x {args.runs} run(s) of {args.duration:g} s; "
          f"results in {out}", flush=True)
    meta = {"kernel": assets.kernel_version, "layout": args.layout, "workload": "kvwindow", "duration": args.duration,
            "interval": args.interval, "full_every": args.full_every, "settle": args.settle, "profile": args.profile,
            "tlb_reach": args.tlb_reach, "points": {p: KV_POINTS[p] for p in points},
            **({"candidate": args.candidate} if args.candidate else {}),
            **({"candidate_hook": args.candidate_hook} if args.candidate_hook is not None else {})}
    # a sweep into a directory that holds an earlier one adds to it (baselines first, the profile later)
    saved = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    earlier = saved.get("runs", [])
    meta["points"] = {**saved.get("points", {}), **meta["points"]}
    per_run: list[dict[str, Any]] = []

    def key(r: dict[str, Any]) -> tuple[str, str, str, int]:
        return (r["point"], r["config"], r["start"], r["run"])

    for point in points:
        for start in starts:
            for i in range(1, args.runs + 1):
                for config in (configs if i % 2 else configs[::-1]):   # A B, B A, ...: neither goes first always
                    figs = one_run(config, start, i, args, workload, assets, out, point)
                    keys = ("hot_median", "hot_p10", "hot_lowest", "recover_s", "write_s", "churn", "stranded",
                            "pingpong_mib", "est_ratio", "apply_seconds")
                    print(f"  {point:6} {start:6} {config:14} run {i}: "
                          + " ".join(f"{k}={figs.get(k)}" for k in keys)
                          + ("" if figs["ok"] else " INCOMPLETE") + f" ({figs['wall_seconds']}s)", flush=True)
                    if "why" in figs:
                        print(indent(figs["why"], "      "), flush=True)
                    per_run.append(figs)
                    done = {key(r) for r in per_run}
                    # after every run: an interrupted sweep keeps its figures
                    write_kv_results(out, meta, [r for r in earlier if key(r) not in done] + per_run)
    return 0 if all(f["ok"] for f in per_run) else 1


def recompute(args: argparse.Namespace) -> int:
    """The table and results.json again, from the ``placement-<config>-<start>-<n>.txt`` files of a saved run."""
    meta = json.loads((args.from_dir / "results.json").read_text()) if (args.from_dir / "results.json").exists() \
        else {}
    duration = float(meta.get("duration", args.duration))
    old = {(r["config"], r["start"], r["run"]): r for r in meta.get("runs", [])}
    per_run: list[dict[str, Any]] = []
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for path in sorted(args.from_dir.glob("placement-*-*-*.txt")):
        config, start, index = path.stem[len("placement-"):].rsplit("-", 2)
        run = figures.parse(path.read_text())
        figs = {**old.get((config, start, int(index)), {}), **figures.figures(run, duration),
                "config": config, "start": start, "run": int(index)}
        per_run.append(figs)
        grouped.setdefault((start, config), []).append(figs)
    results = {key: figures.worst(runs) for key, runs in grouped.items()}
    starts = [s for s in STARTS if any(k[0] == s for k in results)]
    configs = [c for c in TABLE_ORDER if any(k[1] == c for k in results)]
    write_results(args.from_dir, meta, per_run, results, starts, configs,
                  int(meta.get("cold_mib", args.cold)) + int(meta.get("hot_mib", args.hot)))
    return 0


def write_results(out: Path, meta: dict[str, Any], per_run: list[dict[str, Any]],
                  results: dict[tuple[str, str], dict[str, Any]], starts: list[str], configs: list[str],
                  workload_mib: float) -> None:
    md = figures.table(results, starts, configs)
    verdicts = {verdict_key(c, start): figures.judge(start, results[(start, c)], workload_mib)
                for c in JUDGED for start in starts if (start, c) in results}
    text = [md, "", *verdict_lines(verdicts)]
    print("\n" + "\n".join(text), flush=True)
    (out / "table.md").write_text("\n".join(text) + "\n")
    meta = {**meta, "runs": per_run, "results": [{"start": s, "config": c, **f} for (s, c), f in results.items()],
            "verdicts": {s: [{"target": label, "met": ok} for label, ok in v] for s, v in verdicts.items()}}
    (out / "results.json").write_text(json.dumps(meta, indent=2, default=str) + "\n")


def _line(figs: dict[str, Any]) -> str:
    keys = ("hot_on_fast", "cold_on_cxl", "other", "t_hot90", "t_cold90", "migrated_mib", "promoted_mib",
            "demoted_mib", "apply_seconds")
    return " ".join(f"{k}={figs.get(k)}" for k in keys) + ("" if figs["ok"] else " INCOMPLETE")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated (default: all)")
    p.add_argument("--starts", default=",".join(STARTS), help="before, after or both (default)")
    p.add_argument("--runs", type=int, default=2, help="runs per configuration and mode (default 2)")
    p.add_argument("--duration", type=float, default=60, help="seconds from t=0 (default 60)")
    p.add_argument("--interval", type=float, default=None,
                   help="seconds between samples (default 2.5; kv: 1)")
    p.add_argument("--cold", type=int, default=896, help="cold set, MiB (default 896)")
    p.add_argument("--hot", type=int, default=128, help="hot set, MiB (default 128)")
    p.add_argument("--settle", type=float, default=5, help="seconds the full node runs before an after-apply")
    p.add_argument("--profile", default=str(REPO / "profiles/cxl-inference.yaml"), help="nodeagent's profile")
    p.add_argument("--candidate", default=None, metavar="PROFILE",
                   help="also run nodeagent with PROFILE (configuration `candidate`), alternating with the others "
                   "run by run: a tuning measured against the shipped profile in the same sweep")
    p.add_argument("--python", default=str(REPO / ".venv/bin/python"), help="python with nodeagent installed")
    p.add_argument("--out", type=Path, default=None, help="results directory (default: the cache)")
    p.add_argument("--tlb-reach", type=int, default=1536, metavar="PAGES",
                   help="the hot loop flushes its TLB every PAGES pages, as a hardware TLB of that reach would "
                   "(default 1536; 0: never, TCG's unbounded software TLB; see workload.c)")
    p.add_argument("--hook", default="", help="exploration: shell run in the guest right after the configuration")
    p.add_argument("--layout", default=LAYOUT, choices=[n for n in harness.LAYOUTS if n.startswith("placement")],
                   help="the guest's memory layout (exploration: placement-cxl1g has a 1 GiB CXL stand-in, smaller "
                   "than the moving window's cold set)")
    p.add_argument("--candidate-hook", default=None, metavar="SHELL",
                   help="exploration: the hook the candidate runs instead of --hook (a knob nodeagent does not "
                   "manage yet, paired against the shipped profile)")
    p.add_argument("--workload", choices=("static", "kv"), default="static",
                   help="static: the fixed hot/cold split (workload.c); kv: the moving window of a KV cache "
                   "(kvwindow.c) at each of --points")
    p.add_argument("--points", default=",".join(KV_POINTS),
                   help=f"kv: comma-separated envelope points (default: all of {', '.join(KV_POINTS)})")
    p.add_argument("--full-every", type=int, default=3, metavar="K",
                   help="kv: every K-th sample also places every live page (default 3)")
    p.add_argument("--smoke", action="store_true", help="CI: nodeagent, before, one run of 20 s")
    p.add_argument("--from-dir", type=Path, default=None, metavar="DIR",
                   help="no guest: recompute the figures and the table from the raw outputs a run saved in DIR")
    args = p.parse_args(argv)
    if args.interval is None:
        args.interval = 1.0 if args.workload == "kv" else 2.5
    if args.from_dir is not None:
        return recompute_kv(args) if args.workload == "kv" else recompute(args)
    if args.smoke:
        args.configs, args.starts, args.runs, args.duration = "nodeagent", "before", 1, 20
        if args.workload == "kv":
            args.points = args.points if args.points != ",".join(KV_POINTS) else "mid"
    unknown = [p for p in args.points.split(",") if p and p not in KV_POINTS]
    if args.workload == "kv" and unknown:
        p.error(f"unknown envelope point: {', '.join(unknown)} (known: {', '.join(KV_POINTS)})")
    configs = [c for c in args.configs.split(",") if c]
    if args.candidate and CANDIDATE not in configs:
        configs.append(CANDIDATE)
    if CANDIDATE in configs and not args.candidate:
        p.error("configuration `candidate` needs --candidate PROFILE")
    if args.candidate_hook is not None and not args.candidate:
        p.error("--candidate-hook needs --candidate PROFILE")
    if args.candidate and not Path(args.candidate).is_file():
        p.error(f"--candidate {args.candidate}: no such file")
    starts = [s for s in args.starts.split(",") if s]
    bad = [c for c in configs if c not in TABLE_ORDER] + [s for s in starts if s not in STARTS]
    if bad:
        p.error(f"unknown configuration or start mode: {', '.join(bad)}")
    try:
        if harness.qemu_binary() is None:
            raise harness.HarnessUnavailable("qemu-system-x86_64 not found (apt-get install qemu-system-x86)")
        assets = harness.ensure_assets()
        workload = build_workload(assets.cache_dir / "placement")
    except harness.HarnessUnavailable as exc:
        print(f"placement benchmark unavailable: {exc}", file=sys.stderr)
        return 2
    out = args.out or assets.cache_dir / "placement" / time.strftime("results-%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    if args.workload == "kv":
        return main_kv(args, configs, starts, assets, out)
    print(f"placement benchmark: kernel {assets.kernel_version}, {len(configs)} configuration(s) x {len(starts)} "
          f"mode(s) x {args.runs} run(s) of {args.duration:g} s; results in {out}", flush=True)
    per_run: list[dict[str, Any]] = []
    results: dict[tuple[str, str], dict[str, Any]] = {}
    for start in starts:
        runs: dict[str, list[dict[str, Any]]] = {c: [] for c in configs}
        for i in range(1, args.runs + 1):
            for config in configs:   # alternating, as in main_kv
                figs = one_run(config, start, i, args, workload, assets, out)
                print(f"  {start:6} {config:14} run {i}: {_line(figs)} ({figs['wall_seconds']}s)", flush=True)
                if "why" in figs:
                    print(indent(figs["why"], "      "), flush=True)
                runs[config].append(figs)
                per_run.append(figs)
        for config in configs:
            results[(start, config)] = figures.worst(runs[config])
    meta = {"kernel": assets.kernel_version, "layout": args.layout, "duration": args.duration,
            "interval": args.interval,
            "cold_mib": args.cold, "hot_mib": args.hot, "settle": args.settle, "profile": args.profile,
            **({"candidate": args.candidate} if args.candidate else {}),
            **({"candidate_hook": args.candidate_hook} if args.candidate_hook is not None else {})}
    write_results(out, meta, per_run, results, starts, configs, args.cold + args.hot)
    complete = all(f["ok"] for f in per_run)
    return 0 if complete else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
