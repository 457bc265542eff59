"""HBM usage and host↔device PCIe throughput per NVIDIA GPU, from NVML or, without it, ``nvidia-smi``.

Only NVIDIA's own enumeration is used (NVML's device list, ``nvidia-smi``'s rows): a display controller on the
PCI bus (a BMC's, a virtual console) is never taken for a GPU.

- **NVML** (nvidia-ml-py's ``pynvml``, see :mod:`nodeagent.host.nvml`): ``nvmlDeviceGetMemoryInfo`` (bytes)
  and ``nvmlDeviceGetPcieThroughput`` (KB/s over a 20 ms window; KB = 1024 bytes, as nvidia-smi divides it).
- **nvidia-smi** when NVML's library is missing: ``--query-gpu=index,uuid,name,pci.bus_id,memory.total,
  memory.used,memory.free --format=csv,noheader,nounits`` (MiB) and ``dmon -s t -c 1`` (MB/s, one sample).

A failure — above all ``Driver/library version mismatch`` after a driver upgrade without a reboot — is a
:class:`GpuReading` with ``error`` and ``reason`` set, exported as an error series, never an exception.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..util.errors import CommandError

if TYPE_CHECKING:
    from ..host import Host

KIB = 1024
NVML_ERROR_NOT_SUPPORTED = 3
MIB = 1024**2
QUERY = ("index", "uuid", "name", "pci.bus_id", "memory.total", "memory.used", "memory.free")
#: NVML return codes → the ``reason`` label of the error series.
NVML_REASONS = {18: "driver_library_mismatch", 9: "driver_not_loaded", 12: "library_not_found",
                4: "no_permission", 15: "gpu_lost", 1: "uninitialized"}
#: nvidia-smi exit codes (nvidia-smi(1), RETURN VALUE) → reason.
SMI_REASONS = {18: "driver_library_mismatch", 9: "driver_not_loaded", 12: "library_not_found",
               4: "no_permission", 15: "gpu_lost", 6: "not_found"}


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str
    pci_bus_id: str
    memory_total: int  # bytes
    memory_used: int
    memory_free: int
    pcie_tx: float | None = None  # bytes/s, device → host
    pcie_rx: float | None = None  # bytes/s, host → device


@dataclass
class GpuReading:
    source: str  # "nvml" | "nvidia-smi"
    gpus: list[Gpu] = field(default_factory=list)
    error: str | None = None
    reason: str | None = None
    time: float = 0.0
    seconds: float = 0.0  # how long the reading took (wall)


def read(host: Host) -> GpuReading | None:
    """One reading of the node's GPUs; None when the node has neither NVML nor nvidia-smi (no NVIDIA driver)."""
    from ..host.nvml import open_nvml

    start = time.monotonic()
    nvml = open_nvml(host)
    reading = None
    if nvml is not None:
        reading = read_nvml(nvml)
        if reading.reason == "library_not_found":
            reading = None  # nvidia-ml-py without the driver's library: try the tool
    if reading is None:
        if not host.commands.which("nvidia-smi"):
            return None
        reading = read_nvidia_smi(host)
    reading.time = time.time()
    reading.seconds = time.monotonic() - start
    return reading


def read_nvml(nvml: Any) -> GpuReading:
    out = GpuReading("nvml")
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        out.error, out.reason = f"nvmlInit: {exc}", NVML_REASONS.get(exc.value, "nvml_error")
        return out
    try:
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            mem = nvml.nvmlDeviceGetMemoryInfo(h)
            bus = nvml.nvmlDeviceGetPciInfo(h).busId
            tx = _throughput(nvml, h, nvml.NVML_PCIE_UTIL_TX_BYTES)
            rx = _throughput(nvml, h, nvml.NVML_PCIE_UTIL_RX_BYTES)
            out.gpus.append(Gpu(i, _text(nvml.nvmlDeviceGetUUID(h)), _text(nvml.nvmlDeviceGetName(h)), _text(bus),
                                int(mem.total), int(mem.used), int(mem.free), tx, rx))
    except nvml.NVMLError as exc:
        out.gpus, out.error, out.reason = [], str(exc), NVML_REASONS.get(exc.value, "nvml_error")
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass
    return out


def _throughput(nvml: Any, handle: Any, counter: int) -> float | None:
    """Bytes/s, or None where the GPU does not report it (NVML_ERROR_NOT_SUPPORTED: some vGPU and MIG setups)."""
    try:
        return nvml.nvmlDeviceGetPcieThroughput(handle, counter) * KIB
    except nvml.NVMLError as exc:
        if exc.value == NVML_ERROR_NOT_SUPPORTED:
            return None
        raise


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)  # nvidia-ml-py < 11.5 returned bytes


def read_nvidia_smi(host: Host) -> GpuReading:
    out = GpuReading("nvidia-smi")
    try:
        q = host.run(["nvidia-smi", f"--query-gpu={','.join(QUERY)}", "--format=csv,noheader,nounits"], timeout=10)
        if q.returncode != 0:
            out.error, out.reason = _smi_error(q.stdout, q.stderr, q.returncode)
            return out
        gpus = parse_query(q.stdout)
        d = host.run(["nvidia-smi", "dmon", "-s", "t", "-c", "1"], timeout=10)
        pcie = parse_dmon(d.stdout) if d.returncode == 0 else {}
    except CommandError as exc:
        out.error, out.reason = exc.message, "failed"
        return out
    except ValueError as exc:
        out.error, out.reason = f"nvidia-smi printed something unexpected: {exc}", "unparsable"
        return out
    out.gpus = [Gpu(g.index, g.uuid, g.name, g.pci_bus_id, g.memory_total, g.memory_used, g.memory_free,
                    *(pcie.get(g.index, (None, None))[::-1])) for g in gpus]
    return out


def _smi_error(stdout: str, stderr: str, code: int) -> tuple[str, str]:
    text = (stdout.strip() or stderr.strip() or f"exit {code}").splitlines()[0]
    reason = SMI_REASONS.get(code, "failed")
    if "version mismatch" in text.lower():
        reason = "driver_library_mismatch"
    return f"nvidia-smi: {text}", reason


def _mib(text: str) -> int:
    t = text.strip()
    if t in ("[N/A]", "N/A", "[Not Supported]"):
        return 0
    return int(float(t) * MIB)


def parse_query(text: str) -> list[Gpu]:
    """Rows of ``--query-gpu=index,uuid,name,pci.bus_id,memory.total,memory.used,memory.free
    --format=csv,noheader,nounits`` (MiB). Raises ValueError on anything else."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(QUERY):  # a name holds no comma in NVIDIA's product names
            raise ValueError(f"expected {len(QUERY)} fields, got {line!r}")
        out.append(Gpu(int(cells[0]), cells[1], cells[2], cells[3], _mib(cells[4]), _mib(cells[5]), _mib(cells[6])))
    return out


def parse_dmon(text: str) -> dict[int, tuple[float | None, float | None]]:
    """``nvidia-smi dmon -s t`` → ``{gpu index: (rx bytes/s, tx bytes/s)}`` (the last sample of each GPU).

    The header line (``# gpu rxpci txpci``) names the columns; ``-`` is a value the GPU does not report."""
    cols: list[str] = []
    out: dict[int, tuple[float | None, float | None]] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            words = line[1:].split()
            if words and words[0] in ("gpu", "Entity"):
                cols = [w.lower() for w in words]
            continue
        cells = line.split()
        if not cells or not cols:
            continue
        if len(cells) != len(cols):
            raise ValueError(f"dmon row {line!r} does not match its header {cols}")
        row = dict(zip(cols, cells, strict=True))

        def rate(key: str, row: dict[str, str] = row) -> float | None:
            v = row.get(key, "-")
            return None if v in ("-", "N/A") else float(v) * MIB

        out[int(row[cols[0]])] = (rate("rxpci"), rate("txpci"))
    return out
