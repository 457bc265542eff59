"""The memory latency series: measured by the exporter on its slow schedule, served with their timestamp by
every scrape until the next probe, never measured by a scrape, `metrics show` or a drift run's textfile."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from nodeagent.cli.main import main
from nodeagent.host import open_host
from nodeagent.metrics import exporter as exporter_mod
from nodeagent.metrics.collector import Collector
from nodeagent.metrics.exporter import Exporter, Intervals

from .test_metrics import promtool_check
from .test_metrics_exporter import PROFILE, parse, scrape


def _wait(cond, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


def test_exporter_probes_on_its_schedule_and_serves_the_last_figures(make_node, monkeypatch, tmp_path: Path) -> None:
    root = make_node("h100-cxl-autoonline")
    runs: list[float] = []
    real = exporter_mod.measure_latency

    def counted(host, limits):  # type: ignore[no-untyped-def]
        runs.append(time.time())
        return real(host, limits)

    monkeypatch.setattr(exporter_mod, "measure_latency", counted)
    exp = Exporter(Collector(open_host(root), gpus=False), Intervals(latency=900))
    where = exp.start("127.0.0.1", 0)
    try:
        _wait(lambda: exp.collector.latency is not None)
        scrape_text = scrape(where)
        first, second = parse(scrape_text), parse(scrape(where))
    finally:
        exp.shutdown()
    assert len(runs) == 1  # two scrapes, one probe: the next is 15 minutes away
    stamp = first[("nodeagent_memory_latency_timestamp_seconds", ())]
    assert stamp == second[("nodeagent_memory_latency_timestamp_seconds", ())] and stamp >= runs[0]
    assert first[("nodeagent_memory_latency_probe_success", ())] == 1
    key = (("cpuless", "true"), ("initiator", "0"), ("node", "2"), ("tier", "22"))
    assert first[("nodeagent_memory_latency_seconds", key)] == pytest.approx(255e-9)
    assert first[("nodeagent_memory_latency_ratio", key)] == pytest.approx(255 / 112)
    local = (("cpuless", "false"), ("initiator", "0"), ("node", "0"), ("tier", "4"))
    assert first[("nodeagent_memory_latency_ratio", local)] == 1.0
    assert first[("nodeagent_memory_latency_declared_seconds", (("initiator", "0"), ("node", "2")))] \
        == pytest.approx(204e-9)
    pairs = [k for k in first if k[0] == "nodeagent_memory_latency_seconds"]
    assert len(pairs) == 8  # 2 CPU nodes x 4 memory nodes
    assert "nodeagent_memory_latency" not in _text(root)  # a one-shot collection (metrics show) never probes
    prom = tmp_path / "scrape.prom"
    prom.write_text(scrape_text)
    promtool_check(prom)


def _text(root: Path) -> str:
    from nodeagent.metrics.textfile import render

    c = Collector(open_host(root), gpus=False)
    c.sample(refresh=False, moves=False)
    return render(c.collect())


def test_a_failed_probe_is_a_series_not_a_dead_exporter(make_node, monkeypatch) -> None:
    from nodeagent.metrics.latency import LatencyReading, families

    r = LatencyReading(1.7e9, None, "the latency probe needs a C compiler: none of cc, gcc, clang is on PATH")
    fams = {f.name: f for f in families(r)}
    assert fams["nodeagent_memory_latency_probe_success"].samples == [((), 0.0)]
    assert fams["nodeagent_memory_latency_probe_error"].samples[0][0] == (r.error,)
    assert "nodeagent_memory_latency_seconds" not in fams


def test_interval_zero_never_probes_and_drift_never_probes(make_node, tmp_path: Path, capsys) -> None:
    root = make_node("h100-cxl")
    exp = Exporter(Collector(open_host(root), gpus=False), Intervals(latency=0))
    where = exp.start("127.0.0.1", 0)
    try:
        time.sleep(0.3)
        assert "nodeagent_memory_latency" not in scrape(where)
    finally:
        exp.shutdown()
    prom = tmp_path / "d.prom"
    main(["--root", str(root), "drift", "--metrics-textfile", str(prom), PROFILE])
    assert prom.exists() and "nodeagent_memory_latency" not in prom.read_text()


def test_serve_refuses_a_latency_interval_below_15_minutes(make_node, capsys) -> None:
    root = make_node("h100-cxl")
    code = main(["--root", str(root), "metrics", "serve", "--latency-interval", "60"])
    assert code == 64
    assert "expected 0 (never) or at least 900 seconds" in capsys.readouterr().err


def test_exporter_unit_leaves_room_for_the_probe(make_node, capsys) -> None:
    """ProtectHome hides ~/.cache and MemoryMax covers the probe's child: the unit gives it a cache directory and
    room for its buffer."""
    import json

    root = make_node("h100-cxl")
    assert main(["--root", str(root), "--format", "json", "units", "render", PROFILE]) == 0
    unit = json.loads(capsys.readouterr().out)["files"]["/etc/systemd/system/nodeagent-exporter.service"]
    assert "CacheDirectory=nodeagent" in unit and "Environment=NODEAGENT_CACHE=%C/nodeagent" in unit
    limit = next(line.split("=", 1)[1] for line in unit.splitlines() if line.startswith("MemoryMax="))
    assert int(limit.rstrip("M")) * 1024**2 >= 2 * 1024**3 + 256 * 1024**2
