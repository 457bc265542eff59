"""The profile's ``checks:`` section: preflight checks that ``apply`` runs first and ``nodeagent check`` runs alone.

A check that is absent does not run. Each has a ``severity``: ``error`` (the default: a failure stops ``apply``
before anything is written, and ``check`` exits 4) or ``warning`` (reported, never blocks). Example::

    checks:
      cpu:
        require_flags: [avx2, fma]          # as the kernel enabled them (/proc/cpuinfo), not raw CPUID
        reject_virtual_models: true         # kvm64, qemu64, QEMU TCG...: a VM must pass the host CPU through
      disk:
        paths:
          - {path: /models, min_free: 200GiB, max_used_percent: 90}
          - {path: /, min_free: 10GiB, min_free_inodes: 100000}
      gpu_pcie: {min_gen: 4, min_width: 16, min_count: 1}
      memory_bandwidth: {min_gbps: 40}      # opt-in: measures every NUMA node, takes seconds
      latency: {max_ratio: 3.0}             # opt-in: CXL (CPU-less) nodes at most 3x local DRAM, ≤ 2 s a pair
      capacity:
        severity: warning
        model: {params: 70B, dtype: bf16, layers: 80, kv_heads: 8, head_dim: 128}
        max_batch: 96
        context_length: 16384
        dram_offload: 80GiB                 # host DRAM the engine may use for offload (swap space)
      coexistence: {severity: warning}      # TuneD, sysctl.d, udev, memhp_default_state, DAMON modules
      placement: {}                         # tiering settings measured to fail together (warning by default)
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from ..util.quantities import format_size, parse_percent, parse_size
from ..util.vocab import CHECK_NAMES, DTYPE_BYTES  # noqa: F401  (re-exported; defined where no pydantic is loaded)

Severity = Literal["error", "warning"]

_COUNT_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}


def _size(value: Any) -> int:
    try:
        return parse_size(value)
    except ValueError as exc:
        raise PydanticCustomError("size", str(exc)) from None


def _percent(value: Any) -> float:
    try:
        return parse_percent(value)
    except ValueError as exc:
        raise PydanticCustomError("percent", str(exc)) from None


def _count(value: Any) -> int:
    """A parameter count: ``70B``, ``7.6B``, ``405e9`` or an integer."""
    if isinstance(value, bool):
        raise PydanticCustomError("count", "expected a parameter count such as 70B or 8e9, got {got}",
                                  {"got": str(value).lower()})
    if isinstance(value, int | float) and value > 0 and float(value).is_integer():
        return int(value)
    if isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?(?:e[0-9]+)?)\s*([kmbgtKMBGT]?)\s*", value)
        if m:
            n = float(m.group(1)) * _COUNT_SUFFIX[m.group(2).lower()]
            if n >= 1:
                return int(round(n))
    raise PydanticCustomError("count", "expected a positive parameter count such as 70B or 8e9, got {got}",
                              {"got": repr(value) if isinstance(value, str) else str(value)})


def _positive_int(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    raise PydanticCustomError("positive", "expected a positive integer, got {got}", {"got": repr(value)})


def _non_negative_int(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise PydanticCustomError("non_negative", "expected an integer of 0 or more, got {got}", {"got": repr(value)})


def _positive_number(value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    raise PydanticCustomError("positive", "expected a number above 0, got {got}", {"got": repr(value)})


def _int_range(lo: int, hi: int):  # type: ignore[no-untyped-def]
    def check(value: Any) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi:
            return value
        raise PydanticCustomError("range", "expected an integer from {lo} to {hi}, got {got}",
                                  {"lo": lo, "hi": hi, "got": repr(value)})

    return check


def _strict_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise PydanticCustomError("bool", "expected true or false, got {got}", {"got": repr(value)})


def _dtype(value: Any) -> str:
    if isinstance(value, str) and value.lower() in DTYPE_BYTES:
        return value.lower()
    raise PydanticCustomError("dtype", "expected one of {choices}, got {got}",
                              {"choices": ", ".join(DTYPE_BYTES), "got": repr(value)})


def _flag(value: Any) -> str:
    if isinstance(value, str) and re.fullmatch(r"[a-z0-9_]+", value):
        return value
    raise PydanticCustomError("flag", "expected a /proc/cpuinfo flag such as avx2, got {got}", {"got": repr(value)})


def _path(value: Any) -> str:
    if isinstance(value, str) and value.startswith("/") and "\0" not in value:
        return value
    raise PydanticCustomError("path", "expected an absolute path such as /models, got {got}", {"got": repr(value)})


def _not_bool(value: Any) -> Any:
    if isinstance(value, bool):  # YAML's true would pass as 1 where a number is expected
        raise PydanticCustomError("bool", "expected a number, got {got}", {"got": str(value).lower()})
    return value


Size = Annotated[int, BeforeValidator(_size)]
Percent = Annotated[float, BeforeValidator(_percent)]
PositiveInt = Annotated[int, BeforeValidator(_positive_int)]
NonNegativeInt = Annotated[int, BeforeValidator(_non_negative_int)]
PositiveNumber = Annotated[float, BeforeValidator(_positive_number)]
StrictBool = Annotated[bool, BeforeValidator(_strict_bool)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CpuCheck(_Strict):
    """The CPU the OS sees: required flags, and no generic virtual CPU model."""

    severity: Severity = "error"
    require_flags: tuple[Annotated[str, BeforeValidator(_flag)], ...] = ()
    reject_virtual_models: StrictBool = True


class DiskPath(_Strict):
    path: Annotated[str, BeforeValidator(_path)]
    min_free: Size | None = None
    max_used_percent: Percent | None = None
    min_free_inodes: NonNegativeInt | None = None
    must_exist: StrictBool = False  # false: a missing path is judged by the filesystem that would hold it


class DiskCheck(_Strict):
    severity: Severity = "error"
    paths: tuple[DiskPath, ...] = Field(min_length=1)


class GpuPcieCheck(_Strict):
    severity: Severity = "error"
    min_gen: Annotated[int, BeforeValidator(_int_range(1, 6))] | None = None
    min_width: Annotated[Literal[1, 2, 4, 8, 16, 32], BeforeValidator(_not_bool)] | None = None
    min_count: NonNegativeInt = 0


class MemoryBandwidthCheck(_Strict):
    severity: Severity = "error"
    min_gbps: PositiveNumber
    min_single_gbps: PositiveNumber | None = None
    nodes: tuple[NonNegativeInt, ...] | None = None  # default: every node with memory
    buffer: Size = 256 * 1024**2
    iterations: Annotated[int, BeforeValidator(_int_range(1, 100))] = 5

    @model_validator(mode="after")
    def _buffer_floor(self) -> MemoryBandwidthCheck:
        if self.buffer < 1024**2:
            raise PydanticCustomError("size", "buffer: expected at least 1MiB (smaller buffers measure caches), "
                                      "got {got}", {"got": format_size(self.buffer)})
        return self


class LatencyCheck(_Strict):
    """Load-to-use latency of each memory node from each CPU node (nodeagent.checks.latency)."""

    severity: Severity = "error"
    max_ratio: PositiveNumber | None = 3.0  # a CPU-less (CXL) node, from its nearest CPU node, against local DRAM
    max_ns: PositiveNumber | None = None  # any node from its nearest CPU node
    nodes: tuple[NonNegativeInt, ...] | None = None  # memory nodes; default: every node with memory
    max_buffer: Size = 2048 * 1024**2  # the memory cap per node (the buffer is 4x the last-level cache)
    max_seconds: Annotated[float, Field(gt=0, le=10)] = 2.0  # per (CPU node, memory node) pair
    chains: Annotated[int, BeforeValidator(_int_range(3, 63))] = 7


class ModelSpec(_Strict):
    params: Annotated[int, BeforeValidator(_count)]
    dtype: Annotated[str, BeforeValidator(_dtype)] = "bf16"
    kv_dtype: Annotated[str, BeforeValidator(_dtype)] | None = None  # default: dtype
    layers: PositiveInt
    kv_heads: PositiveInt
    head_dim: PositiveInt


class CapacityCheck(_Strict):
    """The workload the node is provisioned for, against HBM, DRAM offload and CXL capacity."""

    severity: Severity = "error"
    model: ModelSpec
    max_batch: PositiveInt
    context_length: PositiveInt
    gpu_memory: Size | None = None  # total over all GPUs; default: nvidia-smi's memory.total
    dram_offload: Size = 0  # host DRAM the engine may use for offload (KV swap space, CPU-offloaded weights)
    weights_overhead: Annotated[float, Field(ge=1.0, le=3.0, strict=True)] = 1.2


class CoexistenceCheck(_Strict):
    severity: Severity = "error"


class PlacementCheck(_Strict):
    """Tiering settings measured to fail together (nodeagent.kinds.placement.advice); warnings by default."""

    severity: Severity = "warning"


class Checks(_Strict):
    cpu: CpuCheck | None = None
    disk: DiskCheck | None = None
    gpu_pcie: GpuPcieCheck | None = None
    memory_bandwidth: MemoryBandwidthCheck | None = None
    latency: LatencyCheck | None = None
    capacity: CapacityCheck | None = None
    coexistence: CoexistenceCheck | None = None
    placement: PlacementCheck | None = None

    def configured(self) -> list[str]:
        return [name for name in CHECK_NAMES if getattr(self, name) is not None]
