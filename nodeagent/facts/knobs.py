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

from ..util.dataclass import dataclass
from ..util.kfmt import bracket_choice
from ..util.vocab import NUMA_BALANCING


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


#: Where NUMA balancing's scan and promotion tunables live since 5.13 (debugfs; sysctls before).
NUMA_BALANCING_DEBUGFS = "/sys/kernel/debug/sched/numa_balancing"
DEBUGFS_MISSING = ("a debugfs file: debugfs is not mounted at /sys/kernel/debug, or the kernel refuses it (lockdown, "
                   "as Secure Boot sets it; debugfs=off; before 6.14, a kernel without CONFIG_SCHED_DEBUG)",
                   "mount debugfs (`mount -t debugfs debugfs /sys/kernel/debug`, as systemd's sys-kernel-debug.mount "
                   "does at boot), or remove the key from the profile")


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
    #: A best-effort knob (a debugfs file: no ABI) — why it can be missing on a kernel new enough to have it, and
    #: the fix. Such a knob the kernel does not offer (for any reason, an old kernel too) is left out of the plan
    #: with a warning; None: an ordinary knob, whose absence is a blocking problem.
    missing: tuple[str, str] | None = None


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
    # The distance between a node's min, low, high and (6.0+, memory tiering) promo watermarks, in 1/10,000 of the
    # node (mm/page_alloc.c __setup_per_zone_wmarks; min_free_kbytes sets min): kswapd demotes until a node is
    # back above high, node reclaim starts below low, and NUMA balancing promotes into a node only above high.
    Knob("kernel.watermark_scale_factor", "/proc/sys/vm/watermark_scale_factor", "4.6", _int),
    # NUMA balancing's scanner (kernel/sched/fair.c task_numa_work): every scan period it marks the next scan_size
    # MiB of a task's address space for hint faults — in memory-tiering mode only the pages on lower tiers —, and
    # a page that faults within hot_threshold of being marked is promoted, to its node strictly (__GFP_THISNODE).
    # The period starts at scan_delay, adapts between scan_period_min and scan_period_max (doubling while the
    # faults say nothing needs to move), both divided by the task's size in scan_size windows. Sysctls before 5.13,
    # debugfs files since (hot_threshold arrived in 6.0 there). tuned's scheduler plugin writes the same files.
    *(Knob(f"kernel.numa_balancing_{name}", f"{NUMA_BALANCING_DEBUGFS}/{name}", since, _int, missing=DEBUGFS_MISSING)
      for name, since in (("scan_delay_ms", "5.13"), ("scan_period_min_ms", "5.13"), ("scan_period_max_ms", "5.13"),
                          ("scan_size_mb", "5.13"), ("hot_threshold_ms", "6.0"))),
)
BY_KEY: dict[str, Knob] = {k.key: k for k in KNOBS}


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))
