"""The node profile (``apiVersion: nodeagent/v1``, ``kind: NodeProfile``).

A key that is absent is unmanaged: nodeagent neither sets nor reports it. Example::

    apiVersion: nodeagent/v1
    kind: NodeProfile
    metadata: {name: cxl-inference, description: CXL as a lower memory tier}
    kernel:
      numa_balancing: memory-tiering        # or disabled | normal | normal+memory-tiering | 0-3
      demotion_enabled: true
      numa_balancing_promote_rate_limit_mbps: 65536
      transparent_hugepage: {enabled: madvise, defrag: defer+madvise}
      zone_reclaim_mode: 0
    memory:
      auto_online_blocks: offline           # let daxctl choose the zone, not the kernel
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

from ..vocab import AUTO_ONLINE_BLOCKS, NUMA_BALANCING, NUMA_BALANCING_BY_NAME, THP_DEFRAG, THP_ENABLED
from .damon import Damon


def _choice_error(choices: tuple[str, ...] | list[str], value: Any, extra: str = "") -> PydanticCustomError:
    return PydanticCustomError("choice", "expected one of {choices}{extra}, got {got}",
                               {"choices": ", ".join(choices), "extra": extra, "got": _show(value)})


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)


def _numa_balancing(value: Any) -> int:
    names = tuple(NUMA_BALANCING.values())
    if isinstance(value, bool):
        raise _choice_error(names, value, " (or 0-3)")
    if isinstance(value, int) and value in NUMA_BALANCING:
        return value
    if isinstance(value, str) and value in NUMA_BALANCING_BY_NAME:
        return NUMA_BALANCING_BY_NAME[value]
    raise _choice_error(names, value, " (or 0-3)")


def _enum(choices: tuple[str, ...]):  # type: ignore[no-untyped-def]
    def check(value: Any) -> str:
        if isinstance(value, str) and value in choices:
            return value
        raise _choice_error(choices, value)

    return check


def _strict_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise PydanticCustomError("bool", "expected true or false, got {got}", {"got": _show(value)})


def _int_range(lo: int, hi: int):  # type: ignore[no-untyped-def]
    def check(value: Any) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi:
            return value
        raise PydanticCustomError("range", "expected an integer from {lo} to {hi}, got {got}",
                                  {"lo": lo, "hi": hi, "got": _show(value)})

    return check


NumaBalancing = Annotated[int, BeforeValidator(_numa_balancing)]
StrictBool = Annotated[bool, BeforeValidator(_strict_bool)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TransparentHugepage(Strict):
    enabled: Annotated[str, BeforeValidator(_enum(THP_ENABLED))] | None = None
    defrag: Annotated[str, BeforeValidator(_enum(THP_DEFRAG))] | None = None


class Kernel(Strict):
    """Kernel tiering knobs. Each maps to one sysctl or sysfs attribute (see ``nodeagent.facts.knobs``)."""

    numa_balancing: NumaBalancing | None = None
    numa_balancing_promote_rate_limit_mbps: Annotated[int, BeforeValidator(_int_range(0, 2**32 - 1))] | None = None
    demotion_enabled: StrictBool | None = None
    transparent_hugepage: TransparentHugepage | None = None
    zone_reclaim_mode: Annotated[int, BeforeValidator(_int_range(0, 7))] | None = None


class Memory(Strict):
    auto_online_blocks: Annotated[str, BeforeValidator(_enum(AUTO_ONLINE_BLOCKS))] | None = None


class Metadata(Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$", max_length=63)
    description: str = ""


class NodeProfile(Strict):
    api_version: Literal["nodeagent/v1"] = Field(alias="apiVersion")
    kind: Literal["NodeProfile"]
    metadata: Metadata
    kernel: Kernel = Kernel()
    memory: Memory = Memory()
    damon: Damon | None = None  # see nodeagent.profile.damon

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
