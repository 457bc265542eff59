"""`nodeagent metrics serve` on a simulated h100-cxl: every series, promtool, a real loopback scrape, and the
write log shows nothing but the stated statistics refresh (none at all on a kernel with refresh_ms)."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel, memory
from nodeagent_sim import nvidia as simgpu
from nodeagent_sim.damon import tick
from nodeagent_sim.memory import touch
from nodeagent_sim.vmstat import migrate
from prometheus_client.parser import text_string_to_metric_families

from nodeagent.cli.main import main
from nodeagent.host import open_host
from nodeagent.metrics.collector import Collector
from nodeagent.metrics.exporter import Exporter, parse_listen

from .test_metrics import promtool_check

REPO = Path(__file__).resolve().parents[2]
PROFILE = str(REPO / "profiles" / "cxl-inference.yaml")
KDAMONDS = "/sys/kernel/mm/damon/admin/kdamonds"
SERIES = {
    "nodeagent_info", "nodeagent_last_apply_success", "nodeagent_last_apply_status",
    "nodeagent_node_memory_total_bytes", "nodeagent_node_memory_used_bytes", "nodeagent_node_memory_free_bytes",
    "nodeagent_tier_memory_total_bytes", "nodeagent_tier_memory_used_bytes", "nodeagent_tier_memory_free_bytes",
    "nodeagent_vmstat_pgpromote_success_total", "nodeagent_vmstat_pgdemote_kswapd_total",
    "nodeagent_node_vmstat_pgpromote_success_total", "nodeagent_node_vmstat_pgdemote_kswapd_total",
    "nodeagent_tiering_promoted_bytes_total", "nodeagent_tiering_demoted_bytes_total",
    "nodeagent_tiering_pingpong_ratio", "nodeagent_tiering_window_seconds",
    "nodeagent_tiering_window_promoted_bytes", "nodeagent_tiering_window_demoted_bytes",
    "nodeagent_damon_scheme_applied_bytes_total", "nodeagent_damon_scheme_tried_regions_total",
    "nodeagent_damon_stats_age_seconds", "nodeagent_damon_kdamond_cpu_seconds_total",
    "nodeagent_gpu_up", "nodeagent_gpu_sample_age_seconds", "nodeagent_gpu_memory_total_bytes",
    "nodeagent_gpu_memory_used_bytes", "nodeagent_gpu_memory_free_bytes", "nodeagent_gpu_pcie_tx_bytes_per_second",
    "nodeagent_gpu_pcie_rx_bytes_per_second", "nodeagent_collector_cpu_seconds", "process_cpu_seconds_total",
    "process_resident_memory_bytes",
}


def parse(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def scrape(where: tuple[str, int]) -> str:
    with urllib.request.urlopen(f"http://{where[0]}:{where[1]}/metrics", timeout=10) as r:
        return r.read().decode()


@pytest.fixture
def h100(make_node, capsys):
    root = make_node("h100-cxl")
    assert main(["--root", str(root), "apply", "--yes", PROFILE]) == 0
    capsys.readouterr()
    return root


def test_exporter_serves_every_series_over_loopback_and_writes_only_the_refresh(h100: Path, tmp_path: Path) -> None:
    k = SimKernel(h100)
    simgpu.set_gpu(k, 0, pcie_tx_kbps=3_200_000, pcie_rx_kbps=11_800_000, memory_used=80 * 1024**3)
    owned = json.loads((h100 / "var/lib/nodeagent/ownership.json").read_text())["damon"]["kdamonds"]
    mark = len(k.journal())
    exp = Exporter(Collector(open_host(h100), refresh_interval=3600))
    where = exp.start("127.0.0.1", 0)  # an ephemeral port on loopback
    try:
        # Time passes: a workload holds 4 GiB on CXL node 2 and touches them; NUMA balancing promotes 2 GiB of
        # them to node 0, kswapd demotes 1 GiB from node 0 again.
        memory.charge(k, 2, 4 * 1024**2)
        touch(k, 2, 4 * 1024**2)
        assert migrate(k, 2, 0, 512 * 1024, "promote") == 512 * 1024
        assert migrate(k, 0, 2, 256 * 1024, "kswapd") == 256 * 1024
        with exp.lock:
            exp.collector.sample(gpus=False, refresh=True, moves=True)
        text = scrape(where)
        text2 = scrape(where)
    finally:
        exp.shutdown()
    m = parse(text)
    assert SERIES <= {name for name, _ in m}, SERIES - {name for name, _ in m}
    gpu0 = (("gpu", "0"), ("model_name", "NVIDIA H100 NVL"), ("pci_bus_id", "00000000:17:00.0"),
            ("uuid", "GPU-5e1d0000-6c1a-4f2b-9d3e-000000000000"))
    assert m[("nodeagent_gpu_memory_used_bytes", gpu0)] == 80 * 1024**3
    assert m[("nodeagent_gpu_pcie_tx_bytes_per_second", gpu0)] == 3_200_000 * 1024
    assert m[("nodeagent_gpu_up", (("source", "nvml"),))] == 1
    assert sum(1 for n, _ in m if n == "nodeagent_gpu_memory_total_bytes") == 5  # NVIDIA's list: no BMC, no NVMe
    assert m[("nodeagent_tiering_promoted_bytes_total", (("cause", "numa_balancing"), ("node", "0")))] == 2 * 1024**3
    assert m[("nodeagent_tiering_demoted_bytes_total", (("cause", "kswapd"), ("node", "0")))] == 1024**3
    assert m[("nodeagent_node_vmstat_pgpromote_success_total", (("node", "0"),))] == 512 * 1024
    assert m[("nodeagent_node_vmstat_pgdemote_kswapd_total", (("node", "0"),))] == 256 * 1024
    assert m[("nodeagent_node_vmstat_pgdemote_kswapd_total", (("node", "2"),))] == 0
    assert m[("nodeagent_tiering_window_promoted_bytes", (("node", "0"),))] == 2 * 1024**3
    assert m[("nodeagent_tiering_pingpong_ratio", (("node", "0"),))] == 0.5
    for i, rec in owned.items():
        cpu = (("kdamond", i), ("name", rec["name"]), ("owner", "nodeagent"), ("pid", str(rec["pid"])))
        assert m[("nodeagent_damon_kdamond_cpu_seconds_total", cpu)] > 0
        assert m[("nodeagent_damon_stats_age_seconds", (("kdamond", i), ("name", rec["name"])))] < 60
    path = tmp_path / "scrape.prom"
    path.write_text(text)
    promtool_check(path)
    # The only writes: one update_schemes_stats per owned kdamond (the first sample), none from the scrapes.
    writes = k.journal()[mark:]
    assert sorted((w["path"], w["value"]) for w in writes) == sorted(
        (f"{KDAMONDS}/{i}/state", "update_schemes_stats") for i in owned)
    assert parse(text2)[("nodeagent_info", (("version", "0.1.0"),))] == 1


def test_the_exporter_serves_the_drift_series_of_the_textfile(h100: Path, tmp_path: Path, capsys) -> None:
    """Drift as the timer's ``drift --record`` (or ``run``'s interval) last measured it: the same series the
    textfile has, without planning per scrape; an apply that fixes the drift clears them."""
    exp = Exporter(Collector(open_host(h100), refresh_interval=3600))
    where = exp.start("127.0.0.1", 0)
    drift_series = ("nodeagent_drift_items", "nodeagent_cannot_be_done_items",
                    "nodeagent_drift_check_timestamp_seconds")

    def served() -> dict:
        return {k: v for k, v in parse(scrape(where)).items() if k[0] in drift_series}

    try:
        assert not served()  # nothing measured yet: no series, as in a textfile written without drift
        SimKernel(h100).write("/proc/sys/kernel/numa_balancing", "1")
        prom = tmp_path / "nodeagent.prom"
        assert main(["--root", str(h100), "drift", "--record", "--metrics-textfile", str(prom)]) == 3
        time.sleep(1.1)  # past the scrape cache
        got = served()
        textfile = {k: v for k, v in parse(prom.read_text()).items() if k[0] in drift_series}
        stamp = ("nodeagent_drift_check_timestamp_seconds", ())
        assert abs(got.pop(stamp) - textfile.pop(stamp)) < 1  # the record keeps whole seconds
        assert got == textfile and got[("nodeagent_drift_items", (("resource", "knob"),))] == 1
        assert got[("nodeagent_drift_items", (("resource", "damon"),))] == 0
        assert main(["--root", str(h100), "apply", "--yes", PROFILE]) == 0
        time.sleep(1.1)
        assert served()[("nodeagent_drift_items", (("resource", "knob"),))] == 0
    finally:
        exp.shutdown()
    capsys.readouterr()


def test_no_pingpong_ratio_while_the_cxl_nodes_hold_nothing(h100: Path) -> None:
    """Right after the apply the CXL nodes hold 0 bytes. Time passes (two statistics refreshes): demote-cold moves
    DRAM's cold pages to CXL, promote-hot finds nothing hot there, so nothing was promoted and the estimator has
    no ratio to give (it used to read 1.0: the simulator's schemes applied bytes that did not exist)."""
    k = SimKernel(h100)
    used = {n: re.search(r"MemUsed:\s+(\d+) kB", k.tree.read(f"/sys/devices/system/node/node{n}/meminfo"))
            for n in (2, 3)}
    assert all(m and m.group(1) == "0" for m in used.values())
    c = Collector(open_host(h100), refresh_interval=0)
    c.sample(gpus=False, refresh=True, moves=True)
    c.sample(gpus=False, refresh=True, moves=True)
    m = parse(__import__("nodeagent.metrics.textfile", fromlist=["render"]).render(c.collect()))
    assert not any(n == "nodeagent_tiering_pingpong_ratio" for n, _ in m)
    assert m[("nodeagent_tiering_window_promoted_bytes", (("node", "0"),))] == 0
    assert m[("nodeagent_tiering_window_demoted_bytes", (("node", "0"),))] > 0
    assert m[("nodeagent_tiering_promoted_bytes_total", (("cause", "damon"), ("node", "0")))] == 0
    demoted = m[("nodeagent_tiering_demoted_bytes_total", (("cause", "damon"), ("node", "0")))]
    cxl = re.search(r"MemUsed:\s+(\d+) kB", k.tree.read("/sys/devices/system/node/node2/meminfo"))
    assert cxl and demoted == int(cxl.group(1)) * 1024 > 0  # what DAMON demoted is what the CXL node holds


def test_on_a_kernel_with_refresh_ms_the_exporter_writes_nothing(make_node, capsys) -> None:
    root = make_node("h100-cxl", kernel="6.18.0-nodeagent-sim")
    assert main(["--root", str(root), "apply", "--yes", PROFILE]) == 0
    k = SimKernel(root)
    owned = json.loads((root / "var/lib/nodeagent/ownership.json").read_text())["damon"]["kdamonds"]
    assert {k.tree.read(f"{KDAMONDS}/{i}/refresh_ms") for i in owned} == {"5000"}  # apply set it
    tick(k)
    mark = len(k.journal())
    c = Collector(open_host(root), refresh_interval=1)
    c.sample()
    time.sleep(1.1)
    c.sample()
    m = parse(__import__("nodeagent.metrics.textfile", fromlist=["render"]).render(c.collect()))
    assert k.journal()[mark:] == []
    for i, rec in owned.items():
        assert m[("nodeagent_damon_stats_age_seconds", (("kdamond", i), ("name", rec["name"])))] == 5.0
        assert m[("nodeagent_damon_stats_refresh_interval_seconds", (("kdamond", i), ("name", rec["name"])))] == 5
        # demote-cold tries DRAM's cold pages; promote-hot finds nothing hot on the CXL nodes, which hold nothing
        tried = m[("nodeagent_damon_scheme_tried_regions_total", (
            ("action", "migrate_cold" if int(i) < 2 else "migrate_hot"), ("context", "0"), ("kdamond", i),
            ("name", rec["name"]), ("scheme", "0")))]
        assert tried > 0 if int(i) < 2 else tried == 0


def test_gpu_sources_fall_back_and_a_driver_mismatch_is_an_error_series(h100: Path, capsys) -> None:
    k = SimKernel(h100)
    host = open_host(h100)
    simgpu.set_gpu(k, 1, memory_used=12345 * 1024**2 + 17, pcie_rx_kbps=2048 * 1024)
    simgpu.set_driver(k, nvml=False)  # no NVML library: nvidia-smi answers (in MiB)
    c = Collector(host)
    c.sample(refresh=False, moves=False)
    assert c.gpu is not None and c.gpu.source == "nvidia-smi" and c.gpu.error is None
    g1 = c.gpu.gpus[1]
    assert (g1.memory_used, g1.pcie_rx, g1.pcie_tx) == (12345 * 1024**2, 2048 * 1024**2, 0)
    for nvml, source in ((True, "nvml"), (False, "nvidia-smi")):
        simgpu.set_driver(k, nvml=nvml, mismatch=True)
        capsys.readouterr()
        assert main(["--root", str(h100), "metrics", "show"]) == 0
        m = parse(capsys.readouterr().out)
        assert m[("nodeagent_gpu_up", (("source", source),))] == 0
        assert m[("nodeagent_gpu_error", (("reason", "driver_library_mismatch"), ("source", source)))] == 1
        assert not any(n == "nodeagent_gpu_memory_used_bytes" for n, _ in m)
        assert m[("nodeagent_node_memory_total_bytes", (("cpuless", "false"), ("cxl_region", ""), ("dax_device", ""),
                                                         ("node", "0"), ("tier", "4")))] > 0  # the rest is there


def test_metrics_show_as_json(h100: Path, capsys) -> None:
    assert main(["--root", str(h100), "--format", "json", "metrics", "show"]) == 0
    fams = {f["name"]: f for f in json.loads(capsys.readouterr().out)["families"]}
    assert fams["nodeagent_damon_kdamond_cpu_seconds_total"]["type"] == "counter"
    assert {s["labels"]["tier"] for s in fams["nodeagent_tier_memory_total_bytes"]["samples"]} == {"4", "22"}


def test_listen_addresses_and_errors(h100: Path, capsys) -> None:
    assert parse_listen(":10075") == ("0.0.0.0", 10075)
    assert parse_listen("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_listen("[::1]:9") == ("::1", 9)
    assert main(["--root", str(h100), "metrics", "serve", "--listen", "localhost"]) == 64
    assert "expected ADDR:PORT" in capsys.readouterr().err


def test_units_render_includes_the_exporter(h100: Path, capsys) -> None:
    assert main(["--root", str(h100), "--format", "json", "units", "render", PROFILE]) == 0
    units = json.loads(capsys.readouterr().out)["files"]
    unit = units["/etc/systemd/system/nodeagent-exporter.service"]
    assert "metrics serve --listen :10075" in unit and "Restart=on-failure" in unit


@pytest.mark.parametrize("preset", ["l40-kvm64", "qemu-3node", "workstation"])
def test_other_nodes_kernels_and_no_gpus(preset: str, make_node, tmp_path: Path, capsys) -> None:
    """6.8 counts demotions for the whole system only (node="all"); a node without NVIDIA GPUs has no GPU series;
    every output passes promtool."""
    root = make_node(preset)
    k = SimKernel(root)
    migrate(k, 0, 0, 1000, "kswapd")
    capsys.readouterr()
    assert main(["--root", str(root), "metrics", "show"]) == 0
    text = capsys.readouterr().out
    m = parse(text)
    demoted = {labels: v for (n, labels), v in m.items() if n == "nodeagent_tiering_demoted_bytes_total"}
    if k.at_least(6, 9):
        assert demoted[(("cause", "kswapd"), ("node", "0"))] == 1000 * 4096
    else:
        assert demoted == {(("cause", "kswapd"), ("node", "all")): 1000 * 4096,
                           (("cause", "direct"), ("node", "all")): 0, (("cause", "khugepaged"), ("node", "all")): 0}
    gpus = sum(1 for n, _ in m if n == "nodeagent_gpu_memory_total_bytes")
    assert gpus == {"l40-kvm64": 3, "qemu-3node": 0, "workstation": 1}[preset]
    path = tmp_path / "show.prom"
    path.write_text(text)
    promtool_check(path)


def test_metrics_serve_command_scrapes_and_stops_on_sigterm(h100: Path) -> None:
    """The command itself, in its own process: it says where it listens, serves, and ends cleanly on SIGTERM."""
    import re
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "nodeagent", "--root", str(h100), "metrics", "serve", "--listen",
                             "127.0.0.1:0"], stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline() if proc.stderr else ""
        m = re.search(r"http://(127\.0\.0\.1):(\d+)/metrics", line)
        assert m, line
        text = scrape((m.group(1), int(m.group(2))))
        assert ("nodeagent_gpu_up", (("source", "nvml"),)) in parse(text)
    finally:
        proc.terminate()
        rc = proc.wait(timeout=10)
        if proc.stderr:
            proc.stderr.close()
    assert rc == 0


# -- under load: idle and half-sent connections, HTTP/0.9, bursts of scrapes -------------------------------------
@pytest.fixture
def serving(h100: Path):
    """An exporter on an ephemeral loopback port, stopped after the test; the descriptors a thousand client
    connections need on top of the server's."""
    import resource

    from nodeagent.metrics import exporter as exp_mod

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    exp = Exporter(Collector(open_host(h100)), exp_mod.Intervals(latency=0))
    where = exp.start("127.0.0.1", 0)
    yield exp, where
    exp.shutdown()
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _open(where: tuple[str, int], n: int, send: bytes = b"") -> list:
    import socket

    out = []
    for _ in range(n):
        s = socket.create_connection(where, timeout=10)
        if send:
            s.sendall(send)
        out.append(s)
    return out


def _wait_accepted(exp: Exporter, n: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while len(exp.server._map) - 1 < n and time.monotonic() < deadline:  # the map holds the listener too
        time.sleep(0.05)
    assert len(exp.server._map) - 1 >= n, len(exp.server._map)


def test_a_scrape_answers_in_under_a_second_beside_a_thousand_idle_connections(serving) -> None:
    """The reported case: 1,100 half-open requests made 1,103 threads and a concurrent scrape timed out at 10 s.
    Idle and half-sent connections cost a descriptor each, never a thread; scrapes are answered at once."""
    import threading

    exp, where = serving
    threads_before = threading.active_count()
    socks = _open(where, 1000) + _open(where, 100, b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
    try:
        _wait_accepted(exp, 1100)
        for _ in range(3):
            start = time.monotonic()
            text = scrape(where)
            assert time.monotonic() - start < 1.0
            assert "nodeagent_info" in text
        assert threading.active_count() <= threads_before + 1  # waitress's 4 workers started with it
    finally:
        for s in socks:
            s.close()


def test_quiet_connections_are_closed_after_the_read_timeout(serving) -> None:
    """An HTTP/0.9 request (no version, no headers to end), a half-sent one and a silent one are all closed once
    quiet for READ_TIMEOUT seconds — the HTTP/0.9 one once held its connection past 8 s."""
    from nodeagent.metrics.exporter import READ_TIMEOUT

    _, where = serving
    socks = _open(where, 1, b"GET /metrics\r\n") + _open(where, 1, b"GET /metrics HTTP/1.1\r\n") + _open(where, 1)
    start = time.monotonic()
    for s in socks:
        s.settimeout(READ_TIMEOUT + 5)
        assert s.recv(100) == b""  # closed by the server, nothing sent
        s.close()
    assert time.monotonic() - start < READ_TIMEOUT + 2.5


def test_a_burst_of_scrapes_shares_one_collection(serving) -> None:
    from concurrent.futures import ThreadPoolExecutor

    exp, where = serving
    before = exp.adapter.collections
    with ThreadPoolExecutor(16) as pool:
        texts = list(pool.map(lambda _: scrape(where), range(16)))
    assert all("nodeagent_info" in t for t in texts)
    assert exp.adapter.collections - before == 1
    time.sleep(1.1)
    scrape(where)
    assert exp.adapter.collections - before == 2  # and a later one collects afresh


def test_connections_beyond_the_cap_wait_instead_of_costing_a_thread_each(serving, monkeypatch) -> None:
    import threading

    exp, where = serving
    monkeypatch.setattr(exp.server.adj, "connection_limit", 50)
    socks = _open(where, 60)
    try:
        time.sleep(1.5)
        assert len(exp.server._map) - 1 <= 50  # the rest wait in the listen backlog
        assert threading.active_count() < 20
    finally:
        for s in socks:
            s.close()
    time.sleep(1.5)
    assert "nodeagent_info" in scrape(where)  # below the cap again: serving
