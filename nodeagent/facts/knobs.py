"""The scalar kernel knobs nodeagent manages: where each lives and how its text is read and written.

Each :class:`Knob` declares its path, the kernel release that introduced it (a missing file on an older
kernel is reported as unsupported, not as an error at write time), and a codec: ``parse`` turns the
kernel's text into the value the profile uses (``[always] madvise never`` → ``always``), ``format`` the
other way, so that after an apply the observed value equals the desired one and the next plan is empty.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import Any

from .._dataclass import dataclass
from ..kfmt import bracket_choice
from ..vocab import NUMA_BALANCING


def _int(text: str) -> int | str:
    try:
        return int(text.strip())
    except ValueError:
        return text


def _kbool(text: str) -> bool | str:
    t = text.strip()
    return {"true": True, "false": False, "1": True, "0": False}.get(t, t)


def _bracket(text: str) -> str:
    return bracket_choice(text) or text.strip()


def _numa_balancing_label(value: Any) -> str:
    name = NUMA_BALANCING.get(value) if isinstance(value, int) else None
    return f"{value} ({name})" if name else str(value)


def _plain(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass(frozen=True)
class Knob:
    key: str  # the profile's field path
    path: str
    since: str  # the kernel release that introduced the attribute
    parse: Callable[[str], Any]
    format: Callable[[Any], str] = _plain
    label: Callable[[Any], str] = _plain
    value_since: dict[Any, str] = field(default_factory=dict)  # values that need a newer kernel
    disruptive: bool = False


KNOBS: tuple[Knob, ...] = (
    # First: the kernel's memory auto-online policy races daxctl, so it must be set before any DAX change.
    Knob("memory.auto_online_blocks", "/sys/devices/system/memory/auto_online_blocks", "4.4", str.strip),
    Knob("kernel.numa_balancing", "/proc/sys/kernel/numa_balancing", "3.8", _int, str, _numa_balancing_label,
         value_since={2: "5.18", 3: "5.18"}),
    Knob("kernel.numa_balancing_promote_rate_limit_mbps", "/proc/sys/kernel/numa_balancing_promote_rate_limit_MBps",
         "6.1", _int),
    Knob("kernel.demotion_enabled", "/sys/kernel/mm/numa/demotion_enabled", "5.15", _kbool,
         lambda v: "true" if v else "false"),
    Knob("kernel.transparent_hugepage.enabled", "/sys/kernel/mm/transparent_hugepage/enabled", "2.6.38", _bracket),
    Knob("kernel.transparent_hugepage.defrag", "/sys/kernel/mm/transparent_hugepage/defrag", "2.6.38", _bracket),
    Knob("kernel.zone_reclaim_mode", "/proc/sys/vm/zone_reclaim_mode", "2.6.16", _int),
    # Node reclaim's two floors (mm/vmscan.c node_reclaim): it leaves a node alone while the node's unmapped page
    # cache is at most min_unmapped_ratio % of it and its reclaimable slab at most min_slab_ratio %.
    Knob("kernel.min_unmapped_ratio", "/proc/sys/vm/min_unmapped_ratio", "2.6.18", _int),
    Knob("kernel.min_slab_ratio", "/proc/sys/vm/min_slab_ratio", "2.6.19", _int),
)
BY_KEY: dict[str, Knob] = {k.key: k for k in KNOBS}


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))
