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
#: Why an MGLRU tuning can be missing on a kernel new enough to have it, and the fix.
LRU_GEN_MISSING = ("the kernel is built without CONFIG_LRU_GEN: it runs the classic LRU, which has no min_ttl_ms",
                   "nothing to set on this kernel (the placement check warns only where MGLRU runs), or remove "
                   "the key from the profile")
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
    #: A best-effort knob (a debugfs file: no ABI; a tuning of a feature the kernel can be built without) — why
    #: it can be missing on a kernel new enough to have it, and the fix. Such a knob the kernel does not offer (for
    #: any reason, an old kernel too) is left out of the plan with a warning; None: an ordinary knob, whose absence
    #: is a blocking problem.
    missing: tuple[str, str] | None = None
    #: The integer range the kernel takes, by release: ``((since, lo, hi), ...)`` oldest first; the last entry
    #: whose release the node runs (or is newer than) applies. The profile's own bounds are the newest kernel's;
    #: the plan judges a value against the node's kernel before anything is written (:func:`range_on`).
    ranges: tuple[tuple[str, int, int], ...] = ()
    #: ``matches(current, desired)``: whether the kernel's value already is the profile's, where the kernel does
    #: not read back exactly what was written (a value kept in jiffies, feature bits the hardware lacks).
    matches: Callable[[Any, Any], bool] | None = None
    #: An integer knob's profile field: its bounds (the newest kernel's; default: the last of ``ranges``) and its
    #: description. A row with ``doc`` *is* the field: :mod:`nodeagent.profile.model` generates it from the row.
    bounds: tuple[int, int] | None = None
    doc: str = ""

    @property
    def profile_bounds(self) -> tuple[int, int] | None:
        if self.bounds is not None:
            return self.bounds
        return (self.ranges[-1][1], self.ranges[-1][2]) if self.ranges else None

    def same(self, current: Any, desired: Any) -> bool:
        return self.matches(current, desired) if self.matches is not None else current == desired


def _lru_gen_caps(text: str) -> int | str:
    """``/sys/kernel/mm/lru_gen/enabled`` as the kernel prints it: ``0x%04x`` of the feature bits."""
    try:
        return int(text.strip(), 16)
    except ValueError:
        return text.strip()


def _lru_gen_format(value: Any) -> str:
    # enabled_store (mm/vmscan.c): 'y' turns every feature on, 'n' every one off, else kstrtouint(buf, 0).
    return "y" if value is True else "n" if value is False else f"{int(value):#06x}"


def _lru_gen_label(value: Any) -> str:
    return f"{value:#06x}" if isinstance(value, int) and not isinstance(value, bool) else _plain(value)


def _lru_gen_matches(current: Any, desired: Any) -> bool:
    """``true`` is met by any value with the main switch (bit 0) on: 'y' asks for every feature, and the kernel
    shows only those the hardware has (0x0002 needs hardware-set accessed bits, 0x0004 non-leaf ones)."""
    if not isinstance(current, int):
        return False
    if desired is True:
        return bool(current & 1)
    if desired is False:
        return current == 0
    return current == desired


#: The coarsest jiffy of the usual CONFIG_HZ (100), in ms: the most a value kept in jiffies reads back above the
#: one written (msecs_to_jiffies rounds up, jiffies_to_msecs down).
JIFFY_MS = 10


def _jiffies_ms_matches(current: Any, desired: Any) -> bool:
    return isinstance(current, int) and isinstance(desired, int) and desired <= current < desired + JIFFY_MS


INT_MAX = 2**31 - 1
U32_MAX = 2**32 - 1

#: The knob table: one row a knob. An integer knob's row (``doc`` set) is also its profile field, with its bounds.
KNOBS: tuple[Knob, ...] = (
    # First: the kernel's memory auto-online policy races daxctl, so it must be set before any DAX change.
    Knob("memory.auto_online_blocks", "/sys/devices/system/memory/auto_online_blocks", "4.4", str.strip),
    Knob("kernel.numa_balancing", "/proc/sys/kernel/numa_balancing", "3.8", _int, str, _numa_balancing_label,
         value_since={2: "5.18", 3: "5.18"}),
    # proc_dointvec_minmax (an int, extra1 = 0): 0 to 2^31-1, not 2^32-1.
    Knob("kernel.numa_balancing_promote_rate_limit_mbps", "/proc/sys/kernel/numa_balancing_promote_rate_limit_MBps",
         "6.1", _int, bounds=(0, INT_MAX),
         doc="kernel.numa_balancing_promote_rate_limit_MBps: promotion bandwidth cap, MB/s"),
    Knob("kernel.demotion_enabled", "/sys/kernel/mm/numa/demotion_enabled", "5.15", _kbool,
         lambda v: "true" if v else "false"),
    Knob("kernel.transparent_hugepage.enabled", "/sys/kernel/mm/transparent_hugepage/enabled", "2.6.38", _bracket),
    # defrag's "defer" arrived in 4.6, "defer+madvise" in 4.11: an older kernel refuses them (EINVAL).
    Knob("kernel.transparent_hugepage.defrag", "/sys/kernel/mm/transparent_hugepage/defrag", "2.6.38", _bracket,
         value_since={"defer": "4.6", "defer+madvise": "4.11"}),
    Knob("kernel.zone_reclaim_mode", "/proc/sys/vm/zone_reclaim_mode", "2.6.16", _int, bounds=(0, 7),
         doc="vm.zone_reclaim_mode: 0 allocates from other nodes before reclaiming the local one"),
    # Node reclaim's two floors (mm/vmscan.c node_reclaim): it leaves a node alone while the node's unmapped page
    # cache is at most min_unmapped_ratio % of it and its reclaimable slab at most min_slab_ratio %.
    # proc_dointvec_minmax with 0 and 100 as bounds: a percentage of the node.
    Knob("kernel.min_unmapped_ratio", "/proc/sys/vm/min_unmapped_ratio", "2.6.18", _int, bounds=(0, 100),
         doc="vm.min_unmapped_ratio: node reclaim leaves a node whose unmapped page cache is at most this % of it"),
    Knob("kernel.min_slab_ratio", "/proc/sys/vm/min_slab_ratio", "2.6.19", _int, bounds=(0, 100),
         doc="vm.min_slab_ratio: ... and whose reclaimable slab is at most this % of it"),
    # The distance between a node's min, low, high and (6.0+, memory tiering) promo watermarks, in 1/10,000 of the
    # node (mm/page_alloc.c __setup_per_zone_wmarks; min_free_kbytes sets min): kswapd demotes until a node is
    # back above high, node reclaim starts below low, and NUMA balancing promotes into a node only above high.
    # 1..1000 until 5.17 raised the limit to 3000 (39c65a94cd96 "mm/pagealloc: sysctl: change watermark_scale_factor
    # max limit to 30%").
    Knob("kernel.watermark_scale_factor", "/proc/sys/vm/watermark_scale_factor", "4.6", _int,
         ranges=(("4.6", 1, 1000), ("5.17", 1, 3000)),
         doc="vm.watermark_scale_factor: the gap between a node's watermarks in 1/10,000 of the node; kswapd demotes "
             "until a node has high (min + 2 gaps) free, promo (min + 3) with memory tiering: headroom for bursts; "
             "node reclaim starts below low (min + 1)"),
    # The min watermark every zone's others stand on (mm/page_alloc.c min_free_kbytes_sysctl_handler:
    # proc_dointvec_minmax from 0): booted at sqrt(16 x lowmem KiB), 128 KiB to 256 MiB. Once written, hotplug keeps
    # the written value (init_per_zone_wmark_min prefers user_min_free_kbytes), but khugepaged raises it to its
    # recommendation when THP is on and memory is added (set_recommended_min_free_kbytes): applied late, after the
    # DAX nodes are online (see kinds/knob LATE).
    Knob("kernel.min_free_kbytes", "/proc/sys/vm/min_free_kbytes", "2.6.0", _int, bounds=(0, INT_MAX),
         doc="vm.min_free_kbytes: the min watermark, KiB kept free over all zones (the others stand on it, "
             "watermark_scale_factor apart); the kernel boots it at sqrt(16 x lowmem KiB), 128 KiB to 256 MiB"),
    # The multi-gen LRU (mm/vmscan.c, CONFIG_LRU_GEN): its feature bits (0x0001 the LRU itself, 0x0002 clearing
    # accessed bits in leaf page tables, 0x0004 in non-leaf PMDs), and min_ttl_ms, the working set it never evicts:
    # when every generation is younger than that, kswapd invokes the OOM killer (lru_gen_age_node) — with 0, never.
    # Anonymous memory counts there only where it can leave the node (swap, or a demotion target): without swap, a
    # node with nothing to demote to counts as too small once its page cache is gone, and its kswapd kills.
    # min_ttl_ms is kept in jiffies (msecs_to_jiffies on write, jiffies_to_msecs on read): it reads back rounded up
    # to a jiffy.
    Knob("kernel.lru_gen.enabled", "/sys/kernel/mm/lru_gen/enabled", "6.1", _lru_gen_caps, _lru_gen_format,
         _lru_gen_label, matches=_lru_gen_matches),
    # min_ttl_ms tunes MGLRU only: a kernel built without CONFIG_LRU_GEN (the classic LRU) has no such guard to set,
    # and the profile's value is left out there with a warning; `enabled` itself stays a blocking problem.
    Knob("kernel.lru_gen.min_ttl_ms", "/sys/kernel/mm/lru_gen/min_ttl_ms", "6.1", _int,
         matches=_jiffies_ms_matches, missing=LRU_GEN_MISSING),
    # NUMA balancing's scanner (kernel/sched/fair.c task_numa_work): every scan period it marks the next scan_size
    # MiB of a task's address space for hint faults — in memory-tiering mode only the pages on lower tiers —, and
    # a page that faults within hot_threshold of being marked is promoted, to its node strictly (__GFP_THISNODE).
    # The period starts at scan_delay, adapts between scan_period_min and scan_period_max (doubling while the
    # faults say nothing needs to move), both divided by the task's size in scan_size windows. Sysctls before 5.13,
    # debugfs files since (hot_threshold arrived in 6.0 there). tuned's scheduler plugin writes the same files.
    # u32 files; scan_size_mb 0 would divide by zero in task_scan_min(), so it starts at 1.
    *(Knob(f"kernel.numa_balancing_{name}", f"{NUMA_BALANCING_DEBUGFS}/{name}", since, _int, missing=DEBUGFS_MISSING,
           bounds=(lo, U32_MAX), doc=f"sched/numa_balancing/{name}: {doc}")
      for name, since, lo, doc in (
          ("scan_delay_ms", "5.13", 0, "a new task's first scan period"),
          ("scan_period_min_ms", "5.13", 0, "the shortest time to scan a task's memory"),
          ("scan_period_max_ms", "5.13", 0, "the longest (the scanner backs off to it while nothing needs to move): "
                                            "how late a page that turned hot on a lower tier can be found"),
          ("scan_size_mb", "5.13", 1, "address space marked per scan period, MiB"),
          ("hot_threshold_ms", "6.0", 0, "memory-tiering promotes a page that faults within this long of being "
                                         "marked"))),
)
BY_KEY: dict[str, Knob] = {k.key: k for k in KNOBS}


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


def range_on(knob: Knob, kernel: tuple[int, int]) -> tuple[str, int, int] | None:
    """The ``(since, lo, hi)`` of ``knob.ranges`` a kernel ``(major, minor)`` takes; None where the knob has no
    version-dependent range or the kernel is unknown (``(0, 0)``)."""
    if not knob.ranges or kernel == (0, 0):
        return None
    fits = [r for r in knob.ranges if version_tuple(r[0])[:2] <= kernel]
    return fits[-1] if fits else knob.ranges[0]
