#!/usr/bin/env python3
"""Benchmark: what one scrape of `nodeagent metrics serve` costs, on converged simulated nodes.

Starts the exporter on 127.0.0.1 (an ephemeral port) in a fresh process per node, scrapes it N times over
HTTP and reports the exporter's CPU time per scrape (its process_cpu_seconds_total before and after, so the
HTTP handling counts too) and its resident memory, against the targets: ≤ 50 ms CPU per scrape on h100-cxl,
≤ 250 ms on the stress node, RSS ≤ 80 MiB.

    python bench/metrics_scrape.py [--scrapes 20] [--sizes h100-cxl,stress]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
TARGET_MS = {"h100-cxl": 50.0, "stress": 250.0}
RSS_MIB = 80.0
PROFILE = REPO / "profiles" / "cxl-inference.yaml"


def value(text: str, name: str) -> float:
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    if m is None:
        raise SystemExit(f"no {name} in the scrape")
    return float(m.group(1))


def bench(preset: str, scrapes: int) -> dict[str, float]:
    from nodeagent_sim import cached

    root = cached(preset)
    subprocess.run([sys.executable, "-m", "nodeagent", "--root", str(root), "apply", "--yes", "--allow-disruptive",
                    str(PROFILE)], check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proc = subprocess.Popen([sys.executable, "-m", "nodeagent", "--root", str(root), "metrics", "serve",
                             "--listen", "127.0.0.1:0"], stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline() if proc.stderr else ""
        m = re.search(r"http://([\d.]+):(\d+)/metrics", line)
        if m is None:
            raise SystemExit(f"the exporter did not start: {line.strip()}")
        url = f"http://{m.group(1)}:{m.group(2)}/metrics"

        def get() -> str:
            with urllib.request.urlopen(url, timeout=30) as r:
                return r.read().decode()

        first = get()
        time.sleep(0.2)
        before = value(get(), "process_cpu_seconds_total")
        start = time.perf_counter()
        for _ in range(scrapes):
            text = get()
        wall = (time.perf_counter() - start) / scrapes
        cpu = (value(text, "process_cpu_seconds_total") - before) / scrapes
        collect = value(text, "nodeagent_collector_cpu_seconds")
        return {"cpu_ms": cpu * 1000, "wall_ms": wall * 1000, "collect_ms": collect * 1000,
                "rss_mib": value(text, "process_resident_memory_bytes") / 1024**2,
                "series": sum(1 for ln in first.splitlines() if ln and not ln.startswith("#"))}
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stderr:
            proc.stderr.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scrapes", type=int, default=20)
    ap.add_argument("--sizes", default="h100-cxl,stress")
    args = ap.parse_args()
    ok = True
    print("metrics scrape (nodeagent metrics serve, over loopback):")
    for preset in args.sizes.split(","):
        r = bench(preset, args.scrapes)
        target = TARGET_MS.get(preset)
        met = (target is None or r["cpu_ms"] <= target) and r["rss_mib"] <= RSS_MIB
        ok &= met
        print(f"  {preset:<10} {r['cpu_ms']:6.1f} ms CPU/scrape (target ≤ {target or '-'} ms; collection alone "
              f"{r['collect_ms']:.1f} ms), {r['wall_ms']:.1f} ms wall, RSS {r['rss_mib']:.1f} MiB (≤ {RSS_MIB:.0f}), "
              f"{r['series']:.0f} samples  {'ok' if met else 'OVER TARGET'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
