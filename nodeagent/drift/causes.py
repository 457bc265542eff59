"""Likely causes of a drift item: a small registry of finders ``(host, item, last_applied) -> [Cause]``.

A finder is registered for the resource kinds it understands (``@finder("knob")``) or for every kind
(``@finder()``). It reads the node through the host, never writes, and returns the causes it can name — most
likely first — or nothing. A finder that fails (an unreadable file) is skipped: naming a cause is best effort
and never makes ``drift`` fail. Finders here:

- ``knob``: a sysctl.d / sysctl.conf line or an active TuneD profile that sets the attribute to another value
  (:mod:`nodeagent.facts.setters`);
- every kind: the node rebooted after the last apply (settings start from boot defaults) and nothing
  re-applied the profile;
- ``dax``: memory blocks of the device that are offline; a udev rule that onlines hot-added memory or hands
  DAX devices to daxctl;
- ``damon``: a DAMON module (DAMON_RECLAIM, DAMON_LRU_SORT, DAMON_STAT) that is enabled.
- ``cxl_region``: a region that is gone (a reboot: regions made at run time do not survive one; else torn down
  outside nodeagent) or that holds the memdevs differently (made or changed by another tool); a DAX device that
  went with its region.

Other resource kinds add theirs with the same decorator.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..facts.dax import block_ids
from ..facts.hardware import cmdline_params, read_cmdline
from ..facts.knobs import BY_KEY
from ..facts.numa import read_block_size
from ..facts.setters import computed, damon_modules, memory_udev_rules, setters_of
from ..host import Host
from ..state import LastApplied
from ..util.errors import HostError
from ..util.kfmt import format_list
from ..util.timestamps import parse as parse_time

if TYPE_CHECKING:
    from . import DriftItem


@dataclass(frozen=True)
class Cause:
    source: str  # "sysctl.d", "sysctl.conf", "tuned", "reboot", "memory-block", "udev", "damon-module"
    message: str
    file: str | None = None
    line: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


Finder = Callable[[Host, "DriftItem", LastApplied], list[Cause]]
FINDERS: list[tuple[frozenset[str] | None, Finder]] = []


def finder(*kinds: str) -> Callable[[Finder], Finder]:
    """Register a cause finder for ``kinds`` (none: every kind)."""

    def deco(fn: Finder) -> Finder:
        FINDERS.append((frozenset(kinds) or None, fn))
        return fn

    return deco


def find_causes(host: Host, item: DriftItem, last: LastApplied | None = None) -> tuple[Cause, ...]:
    out: list[Cause] = []
    for kinds, fn in FINDERS:
        if kinds is not None and item.resource not in kinds:
            continue
        try:
            out += fn(host, item, last if last is not None else LastApplied())
        except (HostError, OSError, ValueError):
            continue
    return tuple(out)


# -- kernel knobs ------------------------------------------------------------------------------------------
_BOOT_NOTE = {"sysctl.d": "applied at boot by systemd-sysctl and by `sysctl --system`",
              "sysctl.conf": "applied by `sysctl --system` and `sysctl -p`"}


@finder("knob")
def other_configuration(host: Host, item: DriftItem, last: LastApplied) -> list[Cause]:
    """sysctl.d, sysctl.conf and TuneD settings of the knob that disagree with the profile."""
    knob = BY_KEY.get(item.target)
    if knob is None:
        return []
    hits: list[tuple[bool, Cause]] = []
    for s in setters_of(host, knob.path):
        known = not computed(s.value)
        value = knob.parse(s.value) if known else None
        if known and knob.same(value, item.expected):
            continue  # agrees with the profile: not a cause
        detail = s.detail or _BOOT_NOTE.get(s.source, "")
        msg = f"{s.where} sets {s.key} = {s.value}" + (f" ({detail})" if detail else "")
        if not known:
            msg += "; its value is computed by TuneD"
        now = known and value == item.actual
        if now:
            msg += " — the value now on the node"
        hits.append((now, Cause(s.source, msg, s.file, s.line)))
    hits.sort(key=lambda h: not h[0])
    return [c for _, c in hits]


# -- every kind: a reboot nobody followed up ---------------------------------------------------------------
def booted_after(host: Host, last: LastApplied) -> str | None:
    """When the node booted, if after the last apply."""
    m = re.search(r"^btime\s+(\d+)", host.read_opt("/proc/stat") or "", re.MULTILINE)
    applied = parse_time(last.time)
    if not m or applied is None or int(m.group(1)) <= applied:
        return None
    return datetime.fromtimestamp(int(m.group(1)), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@finder()
def rebooted_since_apply(host: Host, item: DriftItem, last: LastApplied) -> list[Cause]:
    booted = booted_after(host, last)
    if booted is None:
        return []
    msg = (f"the node booted at {booted}, after the last apply ({last.time}): kernel settings start "
           "from their boot defaults and nothing applied the profile since — is nodeagent-apply.service enabled?")
    if item.target == "memory.auto_online_blocks":
        state = cmdline_params(read_cmdline(host)).get("memhp_default_state")
        if state is not None:
            msg += f" (the kernel command line sets memhp_default_state={state})"
    return [Cause("reboot", msg)]


# -- DAX: offline blocks, udev rules -----------------------------------------------------------------------
def _device(item: DriftItem) -> str | None:
    texts = [item.target, item.path or ""]
    if item.change is not None:
        texts += [v for _, v in item.change.data if isinstance(v, str)]
    for t in texts:
        m = re.search(r"dax\d+\.\d+", t)
        if m:
            return m.group()
    return None


def offline_blocks(host: Host, device: str) -> list[int]:
    """Memory blocks in ``device``'s range that exist and are offline (only that device's blocks are read)."""
    base = f"/sys/bus/dax/devices/{device}"
    start, size = host.read_opt(f"{base}/resource"), host.read_opt(f"{base}/size")
    bs = read_block_size(host)
    if not (start and size and bs):
        return []
    out = []
    for n in block_ids(int(start, 16), int(size), bs):
        state = host.read_opt(f"/sys/devices/system/memory/memory{n}/state")
        if state is not None and state.strip() == "offline":
            out.append(n)
    return out


@finder("dax")
def dax_blocks_offline(host: Host, item: DriftItem, last: LastApplied) -> list[Cause]:
    dev = _device(item)
    blocks = offline_blocks(host, dev) if dev else []
    if not blocks:
        return []
    which = "block" if len(blocks) == 1 else "blocks"
    return [Cause("memory-block", f"memory {which} {format_list(blocks)} of {dev} offline (taken offline after "
                  "the apply: `daxctl offline-memory`, or a write to memoryN/state)")]


@finder("dax", "memory")
def udev_memory_rules(host: Host, item: DriftItem, last: LastApplied) -> list[Cause]:
    return [Cause("udev", f"{r.file}:{r.line}: a udev rule {r.what}: {r.text}", r.file, r.line)
            for r in memory_udev_rules(host)]


# -- CXL regions ------------------------------------------------------------------------------------------
@finder("cxl_region")
def region_gone_or_changed(host: Host, item: DriftItem, last: LastApplied) -> list[Cause]:
    ch = item.change
    if ch is None:
        return []
    memdevs = ", ".join(ch.detail("memdevs", ()))
    if ch.op == "online":
        return [Cause("cxl-region", f"{item.target} is the DAX device of {', '.join(ch.needs)}, which is not on the "
                      "node: it comes back with its region")]
    if ch.op == "delete":
        return [Cause("cxl-region", f"{ch.detail('region')} holds {memdevs} otherwise than the profile says "
                      f"({ch.before_label}): made or changed outside nodeagent (`cxl create-region`, another "
                      "configurator), or torn down and made again by hand", ch.path)]
    booted = booted_after(host, last)
    if booted is not None:
        return [Cause("cxl-region", f"no region holds {memdevs}: a CXL region made at run time does not survive a "
                      f"reboot (the node booted at {booted}), and nodeagent-apply.service makes it again at boot "
                      "(apply --wait-memdevs) — is it enabled?")]
    return [Cause("cxl-region", f"no region holds {memdevs} any more, with no reboot since the last apply: torn "
                  "down outside nodeagent (`cxl destroy-region`, `cxl disable-region`), or its memdevs were reset")]


# -- DAMON -------------------------------------------------------------------------------------------------
@finder("damon")
def damon_module_enabled(host: Host, item: DriftItem, last: LastApplied) -> list[Cause]:
    return [Cause("damon-module", f"{m.name} is enabled (/sys/module/{m.module}/parameters/enabled = Y"
                  + (f", kdamond pid {m.kdamond_pid}" if m.kdamond_pid else "") + "): it runs its own DAMON "
                  "monitoring outside the sysfs interface", f"/sys/module/{m.module}/parameters/enabled")
            for m in damon_modules(host)]
