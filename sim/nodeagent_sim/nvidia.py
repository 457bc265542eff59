"""The NVIDIA driver of a simulated node: ``nvidia-smi`` and an NVML provider shaped like nvidia-ml-py's.

Both answer from one simulator-private table, ``.nodeagent-machine/gpus.json`` (laid out from the preset's GPUs,
changed by tests and rehearsals with :func:`set_gpu` / :func:`set_driver`), so a simulated root never reaches
this machine's driver. Formats follow the real tools:

- ``nvidia-smi --query-gpu=F,... --format=csv[,noheader][,nounits]`` (fields ``index name uuid pci.bus_id
  memory.total memory.used memory.free memory.reserved driver_version pcie.link.*``; MiB), ``-L``;
- ``nvidia-smi dmon -s t [-c N] [-i IDS]``: ``# gpu rxpci txpci`` / ``# Idx MB/s MB/s`` then one row per GPU;
- after a driver upgrade without a reboot (``set_driver(k, mismatch=True)``) both fail as the real ones do:
  nvidia-smi prints ``Failed to initialize NVML: Driver/library version mismatch`` and ``NVML library
  version: …`` and exits 18; ``nvmlInit()`` raises ``NVMLError`` with ``NVML_ERROR_LIB_RM_VERSION_MISMATCH``.

The executable this module installs replaces the smaller one of :mod:`nodeagent_sim.hardware` (its fields and
``-L`` are a subset of these). :func:`nvml` is what the host layer uses instead of ``import pynvml``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import ownfiles
from .kernel import MARKER, SimKernel
from .presets import LAYERS, Preset

GPUS = "gpus.json"
MiB = 1024**2
#: What an inference server's GPUs hold once a model is loaded (weights + KV cache pool), as a share of HBM.
LOADED_SHARE = 0.9

# NVML return codes (nvml.h) the fake raises; nvidia-ml-py has the same numbers.
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
}


def _path(root: Path) -> Path:
    return Path(root) / MARKER / GPUS


def load(root: Path) -> dict[str, Any]:
    text = ownfiles.read_text(root, GPUS)
    return json.loads(text) if text else {"gpus": [], "driver": {}}


def _save(root: Path, data: dict[str, Any]) -> None:
    # A new file, never an edit in place: cloned nodes may share the inode with their template.
    ownfiles.replace(root, GPUS, json.dumps(data, indent=1))


def lay_out(k: SimKernel, p: Preset) -> None:
    if not p.gpus:
        return
    gpus = []
    for i, g in enumerate(p.gpus):
        total = g.memory_mib * MiB
        gpus.append({"index": i, "name": g.name, "uuid": f"GPU-5e1d{i:04x}-6c1a-4f2b-9d3e-0000000000{i:02d}",
                     "pci_bus_id": "0000" + g.pci.upper(), "memory_total": total,
                     "memory_used": int(total * LOADED_SHARE) // MiB * MiB, "memory_reserved": 0,
                     "pcie_tx_kbps": 0, "pcie_rx_kbps": 0,
                     "link_gen": _GEN.get(g.link_speed.split()[0], 1), "link_gen_max": _GEN.get(
                         g.max_link_speed.split()[0], 1),
                     "link_width": g.link_width, "link_width_max": g.max_link_width})
    data = {"gpus": gpus, "driver": {"version": "550.144.03", "library": "550.144.03", "nvml": True}}
    _save(k.root, data)
    exe = k.root / "usr/bin/nvidia-smi"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(_SCRIPT.replace("@PYTHON@", sys.executable).replace("@TABLE@", f"{MARKER}/{GPUS}"))
    exe.chmod(0o755)


_GEN = {"2.5": 1, "5.0": 2, "8.0": 3, "16.0": 4, "32.0": 5, "64.0": 6}


def set_gpu(k: SimKernel, index: int, **values: int) -> None:
    """Change what GPU ``index`` reports: ``memory_used`` (bytes), ``pcie_tx_kbps``, ``pcie_rx_kbps``."""
    data = load(k.root)
    gpu = data["gpus"][index]
    for key, v in values.items():
        if key not in gpu:
            raise KeyError(key)
        gpu[key] = v
    _save(k.root, data)


def set_driver(k: SimKernel, *, mismatch: bool | None = None, nvml: bool | None = None) -> None:
    """``mismatch``: the kernel module is older than the user-space library (upgrade without reboot).
    ``nvml``: whether the NVML library (and so nvidia-ml-py's provider) is installed."""
    data = load(k.root)
    if mismatch is not None:
        data["driver"]["library"] = "550.163.01" if mismatch else data["driver"]["version"]
    if nvml is not None:
        data["driver"]["nvml"] = nvml
    _save(k.root, data)


# -- the NVML provider -----------------------------------------------------------------------------------------

class NVMLError(Exception):
    """nvidia-ml-py's exception: ``value`` is the NVML return code."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"Unknown Error ({self.value})")


@dataclass(frozen=True)
class _Memory:
    total: int
    free: int
    used: int


@dataclass(frozen=True)
class _PciInfo:
    busId: str  # noqa: N815  (nvidia-ml-py's field name)
    bus: int
    device: int
    domain: int


class FakeNvml:
    """The subset of nvidia-ml-py's ``pynvml`` module that nodeagent calls, answering from the table."""

    NVMLError = NVMLError
    NVML_PCIE_UTIL_TX_BYTES = NVML_PCIE_UTIL_TX_BYTES
    NVML_PCIE_UTIL_RX_BYTES = NVML_PCIE_UTIL_RX_BYTES
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = NVML_ERROR_LIB_RM_VERSION_MISMATCH
    NVML_ERROR_LIBRARY_NOT_FOUND = NVML_ERROR_LIBRARY_NOT_FOUND
    NVML_ERROR_DRIVER_NOT_LOADED = NVML_ERROR_DRIVER_NOT_LOADED
    NVML_ERROR_NO_PERMISSION = NVML_ERROR_NO_PERMISSION

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._data: dict[str, Any] | None = None
        self.calls: list[str] = []

    def _gpus(self) -> list[dict[str, Any]]:
        if self._data is None:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        return self._data["gpus"]

    def nvmlInit(self) -> None:  # noqa: N802  (pynvml's names)
        self.calls.append("nvmlInit")
        data = load(self.root)
        drv = data["driver"]
        if not drv.get("nvml", True):
            raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
        if drv.get("library") != drv.get("version"):
            raise NVMLError(NVML_ERROR_LIB_RM_VERSION_MISMATCH)
        self._data = data

    def nvmlShutdown(self) -> None:  # noqa: N802
        self._data = None

    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        self._gpus()
        return str(self._data["driver"]["version"])  # type: ignore[index]

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self._gpus())

    def nvmlDeviceGetHandleByIndex(self, index: int) -> dict[str, Any]:  # noqa: N802
        gpus = self._gpus()
        if not 0 <= index < len(gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return gpus[index]

    def nvmlDeviceGetName(self, h: dict[str, Any]) -> str:  # noqa: N802
        return str(h["name"])

    def nvmlDeviceGetUUID(self, h: dict[str, Any]) -> str:  # noqa: N802
        return str(h["uuid"])

    def nvmlDeviceGetIndex(self, h: dict[str, Any]) -> int:  # noqa: N802
        return int(h["index"])

    def nvmlDeviceGetPciInfo(self, h: dict[str, Any]) -> _PciInfo:  # noqa: N802
        dom, bus, rest = h["pci_bus_id"].split(":")
        return _PciInfo(h["pci_bus_id"], int(bus, 16), int(rest.split(".")[0], 16), int(dom, 16))

    def nvmlDeviceGetMemoryInfo(self, h: dict[str, Any]) -> _Memory:  # noqa: N802
        total, used = int(h["memory_total"]), int(h["memory_used"])
        return _Memory(total, total - used, used)

    def nvmlDeviceGetPcieThroughput(self, h: dict[str, Any], counter: int) -> int:  # noqa: N802
        """KB/s over NVML's 20 ms sampling window, as the real call returns it."""
        if counter == NVML_PCIE_UTIL_TX_BYTES:
            return int(h["pcie_tx_kbps"])
        if counter == NVML_PCIE_UTIL_RX_BYTES:
            return int(h["pcie_rx_kbps"])
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)


def nvml(root: Path) -> FakeNvml | None:
    """The NVML provider of the simulated node at ``root``; None when it has no NVIDIA driver at all."""
    return FakeNvml(root) if _path(root).is_file() else None


_SCRIPT = r'''#!@PYTHON@
# Simulated nvidia-smi: --query-gpu=...,--format=csv[,noheader][,nounits], -L, dmon -s t; like the real one.
import json, os, sys
# The table of the node this executable belongs to: <root>/usr/bin/nvidia-smi → <root>/@TABLE@
data = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "@TABLE@")))
drv = data["driver"]
args = sys.argv[1:]
INVALID = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."
if drv.get("library") != drv.get("version"):
    print("Failed to initialize NVML: Driver/library version mismatch")
    print("NVML library version: " + ".".join(drv["library"].split(".")[:2]))
    sys.exit(18)
gpus = data["gpus"]
MiB = 1024 ** 2
def fields(g):
    used = g["memory_used"] // MiB
    total = g["memory_total"] // MiB
    res = g["memory_reserved"] // MiB
    return {"index": (str(g["index"]),) * 2, "name": (g["name"],) * 2, "uuid": (g["uuid"],) * 2,
            "gpu_uuid": (g["uuid"],) * 2, "pci.bus_id": (g["pci_bus_id"],) * 2,
            "driver_version": (drv["version"],) * 2,
            "memory.total": (f"{total} MiB", str(total)), "memory.used": (f"{used} MiB", str(used)),
            "memory.free": (f"{total - used - res} MiB", str(total - used - res)),
            "memory.reserved": (f"{res} MiB", str(res)),
            "pcie.link.gen.current": (str(g["link_gen"]),) * 2, "pcie.link.gen.max": (str(g["link_gen_max"]),) * 2,
            "pcie.link.width.current": (str(g["link_width"]),) * 2,
            "pcie.link.width.max": (str(g["link_width_max"]),) * 2}
UNITS = {"memory.total": " [MiB]", "memory.used": " [MiB]", "memory.free": " [MiB]", "memory.reserved": " [MiB]"}
if args in (["-L"], ["--list-gpus"]):
    for g in gpus:
        print(f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})")
    sys.exit(0)
if args and args[0] == "dmon":
    opts = dict(zip(args[1::2], args[2::2]))
    if len(args[1:]) % 2 or set(opts) - {"-s", "-c", "-i", "-d"} or opts.get("-s") != "t":
        print(INVALID)
        sys.exit(2)
    ids = [int(i) for i in opts["-i"].split(",")] if "-i" in opts else [g["index"] for g in gpus]
    count = int(opts.get("-c", "1"))
    for n in range(count):
        print("# gpu   rxpci   txpci ")
        print("# Idx    MB/s    MB/s ")
        for g in gpus:
            if g["index"] in ids:
                print(f"{g['index']:>5} {g['pcie_rx_kbps'] // 1024:>7} {g['pcie_tx_kbps'] // 1024:>7} ")
    sys.exit(0)
query = fmt = None
for a in args:
    if a.startswith("--query-gpu="):
        query = a.split("=", 1)[1].split(",")
    elif a.startswith("--format="):
        fmt = a.split("=", 1)[1].split(",")
    else:
        print(INVALID)
        sys.exit(2)
if query is None or fmt is None or "csv" not in fmt:
    print(INVALID)
    sys.exit(2)
rows = [fields(g) for g in gpus]
for f in query:
    if rows and f not in rows[0]:
        print(f'Field "{f}" is not a valid field to query.')
        sys.exit(2)
nounits = "nounits" in fmt
if "noheader" not in fmt:
    print(", ".join(f + ("" if nounits else UNITS.get(f, "")) for f in query))
for row in rows:
    print(", ".join(row[f][1 if nounits else 0] for f in query))
'''

LAYERS.append(lay_out)
