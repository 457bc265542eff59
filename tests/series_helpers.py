"""Which series nodeagent emits, for tests of what reads them (alert rules, the dashboard), and promtool.

:func:`emitted` collects on a simulated h100-cxl twice — once after an apply with GPUs sampled, a latency
probe, drift and ping-pong history, once with every source failing — and returns every family's sample name
(counters with ``_total``), empty families included: a name the collector can emit counts even when this
node has no sample of it. ``up`` (Prometheus' own) and ``process_*`` (prometheus_client's) complete it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MONITORING = REPO / "monitoring"
PROMETHEUS = {"up", "process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes",
              "process_start_time_seconds", "process_open_fds", "process_max_fds"}


def emitted(make_node) -> dict[str, set[str]]:  # type: ignore[no-untyped-def]
    """Sample name → its label names (with the ``instance`` and ``job`` a scrape adds)."""
    from nodeagent.cli.main import main
    from nodeagent.drift import DriftReport
    from nodeagent.host import open_host
    from nodeagent.kinds.registry import BY_KIND
    from nodeagent.metrics import gpu as gpu_mod
    from nodeagent.metrics.collector import Collector
    from nodeagent.metrics.latency import LatencyReading, measure

    root = make_node("h100-cxl")
    assert main(["--root", str(root), "apply", "--yes", str(REPO / "profiles/cxl-inference.yaml")]) == 0
    c = Collector(open_host(root))
    c.sample(refresh=True, moves=True)
    c.sample(refresh=True, moves=True)
    c.latency = measure(c.host)
    c.refresh_error = "stats refresh failed"
    drift = DriftReport(profile="p", profile_digest="d", source="last-applied", node="n", checked=1.0, items=())
    fams = c.collect(drift=drift, resource_kinds=tuple(BY_KIND))
    c.gpu = gpu_mod.GpuReading("nvml", [], error="Driver/library version mismatch", reason="driver_library_mismatch")
    c.latency = LatencyReading(1.0, None, "no C compiler")
    fams += c.collect()
    out: dict[str, set[str]] = {name: set() for name in PROMETHEUS}
    for f in fams:
        out.setdefault(f.sample_name, set()).update(f.labels)
    for labels in out.values():
        labels.update(("instance", "job"))
    return out


def promtool() -> str | None:
    """promtool from PATH, else where .ci/run extracts it from Debian's prometheus package.

    Missing in CI (``CI=true``) is a failure, never a skip: the rules' tests must run there."""
    found = shutil.which("promtool")
    if found is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        cached = Path(base) / "nodeagent/tools/usr/bin/promtool"
        found = str(cached) if os.access(cached, os.X_OK) else None
    if found is None:
        if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
            pytest.fail("promtool is missing in CI: .ci/run extracts it from Debian's prometheus package")
        pytest.skip("promtool not installed (Debian package prometheus; .ci/run extracts it)")
    return found


def run_promtool(*args: str) -> subprocess.CompletedProcess[str]:
    exe = promtool()
    assert exe is not None
    return subprocess.run([exe, *args], capture_output=True, text=True, cwd=MONITORING, timeout=120, check=False)
