"""Golden tests of the GPU readers on nvidia-smi's and NVML's formats, and of the text-format writer."""

from __future__ import annotations

from pathlib import Path

import pytest
from nodeagent_sim.nvidia import NVML_ERROR_LIB_RM_VERSION_MISMATCH, NVMLError
from prometheus_client.parser import text_string_to_metric_families

from nodeagent.metrics import gpu
from nodeagent.metrics.families import counter, gauge
from nodeagent.metrics.textfile import render
from nodeagent.metrics.tiering import History, Moves, estimate

DATA = Path(__file__).resolve().parents[1] / "data" / "nvidia"
KERNEL = Path(__file__).resolve().parents[1] / "data" / "metrics"
MiB = 1024**2


def test_query_gpu_csv() -> None:
    rows = gpu.parse_query((DATA / "query-gpu-h100.csv").read_text())
    assert [(g.index, g.uuid, g.name, g.pci_bus_id) for g in rows] == [
        (0, "GPU-2f1a8c3e-9b7d-4e21-a0c4-5d6e7f8a9b01", "NVIDIA H100 80GB HBM3", "00000000:18:00.0"),
        (1, "GPU-7c4b2d10-3e5f-4a69-8b7c-1d2e3f4a5b62", "NVIDIA H100 80GB HBM3", "00000000:2A:00.0")]
    assert (rows[0].memory_total, rows[0].memory_used, rows[0].memory_free) == (81559 * MiB, 76142 * MiB, 4880 * MiB)
    with pytest.raises(ValueError, match="expected 7 fields"):
        gpu.parse_query("0, GPU-x, 81559\n")


def test_dmon_pcie_throughput() -> None:
    assert gpu.parse_dmon((DATA / "dmon-s-t.txt").read_text()) == {0: (11842 * MiB, 3205 * MiB), 1: (0.0, None)}
    with pytest.raises(ValueError, match="does not match its header"):
        gpu.parse_dmon("# gpu rxpci txpci\n# Idx MB/s MB/s\n 0 1\n")


class _Host:
    """Just enough of a host for read_nvidia_smi: canned results of nvidia-smi."""

    def __init__(self, results: dict[str, tuple[int, str]]) -> None:
        self.results = results

    def run(self, argv: list[str], **kw: object) -> object:
        code, out = self.results["dmon" if "dmon" in argv else "query"]
        return type("R", (), {"returncode": code, "stdout": out, "stderr": ""})()


def test_nvidia_smi_reading_and_the_version_mismatch() -> None:
    ok = gpu.read_nvidia_smi(_Host({"query": (0, (DATA / "query-gpu-h100.csv").read_text()),
                                    "dmon": (0, (DATA / "dmon-s-t.txt").read_text())}))  # type: ignore[arg-type]
    assert ok.error is None and [(g.pcie_rx, g.pcie_tx) for g in ok.gpus] == [(11842 * MiB, 3205 * MiB), (0, None)]
    bad = gpu.read_nvidia_smi(_Host({"query": (18, (DATA / "mismatch.txt").read_text())}))  # type: ignore[arg-type]
    assert bad.gpus == [] and bad.reason == "driver_library_mismatch"
    assert bad.error == "nvidia-smi: Failed to initialize NVML: Driver/library version mismatch"


class _Nvml:
    """nvidia-ml-py's API as a GPU machine answers it: memory in bytes, PCIe in KB/s, bytes for old strings."""

    NVMLError = NVMLError
    NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES = 0, 1

    def __init__(self, fail: int | None = None) -> None:
        self.fail, self.shutdown = fail, False

    def nvmlInit(self) -> None:  # noqa: N802
        if self.fail and self.fail != 3:
            raise NVMLError(self.fail)

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shutdown = True

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:  # noqa: N802
        return i

    def nvmlDeviceGetMemoryInfo(self, h: int) -> object:  # noqa: N802
        return type("M", (), {"total": 85520809984, "free": 5116854272, "used": 80403955712})()

    def nvmlDeviceGetPciInfo(self, h: int) -> object:  # noqa: N802
        return type("P", (), {"busId": b"00000000:18:00.0"})()

    def nvmlDeviceGetPcieThroughput(self, h: int, c: int) -> int:  # noqa: N802
        if self.fail == 3:
            raise NVMLError(3)  # NVML_ERROR_NOT_SUPPORTED
        return 12126208 if c == 1 else 3281920

    def nvmlDeviceGetUUID(self, h: int) -> str:  # noqa: N802
        return "GPU-2f1a8c3e-9b7d-4e21-a0c4-5d6e7f8a9b01"

    def nvmlDeviceGetName(self, h: int) -> bytes:  # noqa: N802
        return b"NVIDIA H100 80GB HBM3"


def test_nvml_reading() -> None:
    nv = _Nvml()
    r = gpu.read_nvml(nv)
    assert nv.shutdown and r.error is None
    g = r.gpus[0]
    assert (g.name, g.pci_bus_id, g.memory_used, g.memory_total) == (
        "NVIDIA H100 80GB HBM3", "00000000:18:00.0", 80403955712, 85520809984)
    assert (g.pcie_rx, g.pcie_tx) == (12126208 * 1024, 3281920 * 1024)
    r = gpu.read_nvml(_Nvml(fail=3))  # a GPU without PCIe counters: memory still, throughput absent
    assert r.error is None and (r.gpus[0].memory_used, r.gpus[0].pcie_tx) == (80403955712, None)
    r = gpu.read_nvml(_Nvml(fail=NVML_ERROR_LIB_RM_VERSION_MISMATCH))
    assert r.gpus == [] and r.reason == "driver_library_mismatch" and "version mismatch" in r.error


def test_text_format_writer_round_trips() -> None:
    g = gauge("x_bytes", 'help with \\ and\nnewline', "a", "b").add(1.5, 'q"uote', "back\\slash").add(2, "", "x")
    c = counter("y", "a counter").add(3)
    text = render([g, c, gauge("empty", "no samples")])
    assert "empty" not in text and "# TYPE y_total counter" in text and "y_total 3\n" in text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert fams["x_bytes"].documentation == "help with \\ and\nnewline"
    assert [(s.labels, s.value) for s in fams["x_bytes"].samples] == [
        ({"a": 'q"uote', "b": "back\\slash"}, 1.5), ({"a": "", "b": "x"}, 2.0)]


def test_pingpong_estimator() -> None:
    """P promoted to node 0 and D demoted from it inside the window: ratio = min(P, D) / P."""
    old = Moves({("0", "numa_balancing"): 100.0, ("0", "damon"): 0.0}, {("0", "kswapd"): 50.0})
    new = Moves({("0", "numa_balancing"): 400.0, ("0", "damon"): 100.0}, {("0", "kswapd"): 150.0, ("0", "damon"): 50})
    [e] = estimate(old, new, 60.0)
    assert (e.promoted, e.demoted, e.window, e.ratio) == (400.0, 150.0, 60.0, 150 / 400)
    # More demoted than promoted: every promoted byte may have gone down again (the bound is 1).
    [e] = estimate(Moves(), Moves({("0", "x"): 10.0}, {("0", "y"): 99.0}), 5.0)
    assert e.ratio == 1.0
    # Nothing promoted: no ratio; a counter that went backwards (reboot) counts from zero.
    [e] = estimate(Moves({("0", "x"): 500.0}), Moves({("0", "x"): 20.0}, {("0", "y"): 5.0}), 5.0)
    assert e.promoted == 20.0 and e.ratio == 0.25
    h = History(window=30)
    for t in range(0, 100, 10):
        h.add(float(t), Moves({("0", "x"): float(t * 10)}, {("0", "y"): float(t)}))
    [e] = h.estimate()
    assert e.window == 30.0 and e.promoted == 300.0 and e.demoted == 30.0


def test_real_kernel_captures_parse() -> None:
    from nodeagent.metrics.collector import parse_proc_stat, parse_vmstat

    assert parse_proc_stat((KERNEL / "kdamond-stat-6.18.txt").read_text()) == (0, 435)
    assert parse_proc_stat("77 (odd) name) I 2") is None
    v = parse_vmstat((KERNEL / "node0-vmstat-tiering-6.18.txt").read_text())
    assert {"pgpromote_success", "pgpromote_candidate_nrl", "pgdemote_kswapd", "pgdemote_proactive"} <= set(v)


def test_simulated_node_vmstat_has_the_real_keys(tmp_path: Path) -> None:
    from nodeagent_sim import create

    root = create(tmp_path / "n", "workstation")  # 6.18
    real = [ln.split()[0] for ln in (KERNEL / "node0-vmstat-tiering-6.18.txt").read_text().splitlines()
            if ln.startswith(("pgpromote", "pgdemote"))]
    sim = [ln.split()[0] for ln in (root / "sys/devices/system/node/node0/vmstat").read_text().splitlines()
           if ln.startswith(("pgpromote", "pgdemote"))]
    assert sim == real
