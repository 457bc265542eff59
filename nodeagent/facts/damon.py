"""DAMON facts: every kdamond's tree as the kernel shows it, capabilities, the special-purpose modules, and the
physical memory ranges that paddr monitoring targets are made of. Read-only: nothing here ever writes, not
even ``update_schemes_stats`` (statistics are shown as the kernel last refreshed them).

The section (``facts.sections["damon"]``) is plain JSON::

    {"sysfs": true, "nr_kdamonds": 1,
     "kdamonds": [{"index": 0, "state": "on", "pid": 77,
                   "config": {"contexts/nr_contexts": "1", "contexts/0/operations": "paddr", ...},
                   "status": {"contexts/0/schemes/0/stats/nr_tried": "0", ...}}],
     "capabilities": {...see damon_caps.derive...},
     "modules": {"damon_reclaim": false, "damon_lru_sort": null, "damon_stat": null},
     "node_ranges": {"0": [[0, 549755813888]]},
     "block_size": 2147483648}

``config`` holds every writable attribute (paths relative to ``kdamonds/<N>/``), ``status`` the read-only ones
(statistics, ``effective_bytes``). A node's ranges come from its zones in ``/proc/zoneinfo``
(:func:`nodeagent.facts.numa.node_ranges`: never a listing of its blocks unless a zone has holes), merged into
contiguous ``[start, end)`` byte ranges.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import BusyError
from ..host import Host
from ..kfmt import kernel_version, parse_list
from . import SECTIONS, Facts
from .damon_caps import MODULES, derive, normalize
from .numa import node_ranges
from .setters import read_damon_modules

ADMIN = "/sys/kernel/mm/damon/admin"
KDAMONDS = f"{ADMIN}/kdamonds"
NODE = "/sys/devices/system/node"

_STATUS_FILES = {"avail_operations", "pid", "state", "effective_bytes", "total_bytes"}
_STATUS_DIRS = {"stats", "tried_regions"}
T = TypeVar("T")


def retry_busy(fn: Callable[..., T], *args: Any, tries: int = 5) -> T:
    """Call ``fn``, retrying on EBUSY: DAMON's sysfs files take the interface lock with a trylock and answer
    EBUSY while another process holds it. An EBUSY that persists (a running kdamond) is raised."""
    for attempt in range(tries):
        try:
            return fn(*args)
        except BusyError:
            if attempt == tries - 1:
                raise
            time.sleep(0.02 * (attempt + 1))
    raise AssertionError("unreachable")


def _in_status(rel: str) -> bool:
    return any(part in _STATUS_DIRS for part in rel.split("/")[:-1])


def _descend(rel: str) -> bool:
    """tried_regions/<N> (below a status directory): snapshots, possibly thousands; not configuration."""
    return not (rel.rpartition("/")[2].isdigit() and _in_status(rel))


def _kdamond(host: Host, index: int, seen: set[str], dirs: set[str]) -> dict[str, Any]:
    base = f"{KDAMONDS}/{index}"
    found, files = retry_busy(host.fs.read_tree, base, _descend)  # one pass, one openat per entry
    config: dict[str, str] = {}
    status: dict[str, str] = {}
    dirs.update(normalize(d) for d in found)
    for child, value in files.items():
        seen.add(normalize(child))
        if value is None:
            continue
        if _in_status(child) or child.rpartition("/")[2] in _STATUS_FILES:
            status[child] = value
        else:
            config[child] = value
    pid_text = status.pop("pid", "-1").strip()
    return {"index": index, "state": status.pop("state", "off").strip(),
            "pid": int(pid_text) if re.fullmatch(r"-?\d+", pid_text) else -1, "config": config, "status": status}


def _node_ranges(host: Host, block_size: int | None) -> dict[str, list[list[int]]]:
    out: dict[str, list[list[int]]] = {}
    if not block_size:
        return out
    for nid in parse_list(host.read_opt(f"{NODE}/online") or ""):
        out[str(nid)] = node_ranges(host, nid, block_size)
    return out


def gather(host: Host) -> dict[str, Any]:
    """The DAMON section of the facts (read-only)."""
    kernel = kernel_version(host.read_opt("/proc/sys/kernel/osrelease") or "")
    nr_text = retry_busy(host.read_opt, f"{KDAMONDS}/nr_kdamonds")
    kdamonds: list[dict[str, Any]] = []
    seen: set[str] = set()
    dirs: set[str] = set()
    avail: list[str] | None = None
    if nr_text is not None:
        indexes = sorted(int(n) for n in host.fs.listdir(KDAMONDS) if n.isdigit())
        for i in indexes:
            kd = _kdamond(host, i, seen, dirs)
            kdamonds.append(kd)
            ops = kd["status"].get("contexts/0/avail_operations")
            if ops is not None and avail is None:
                avail = ops.split()
    bs = host.read_opt("/sys/devices/system/memory/block_size_bytes")
    block_size = int(bs, 16) if bs else None
    return {
        "sysfs": nr_text is not None,
        "nr_kdamonds": int(nr_text) if nr_text and nr_text.strip().isdigit() else 0,
        "kdamonds": kdamonds,
        "capabilities": derive(kernel, seen, dirs, avail),
        "modules": {name: None for name in MODULES} | {m.module: m.enabled for m in read_damon_modules(host)},
        "node_ranges": _node_ranges(host, block_size),
        "block_size": block_size,
    }


SECTIONS["damon"] = gather


@dataclass(frozen=True)
class Kdamond:
    index: int
    state: str
    pid: int
    config: dict[str, str]
    status: dict[str, str]

    @property
    def running(self) -> bool:
        return self.state == "on"

    @property
    def empty(self) -> bool:
        """A slot holding no configuration: stopped, no context."""
        return not self.running and self.config.get("contexts/nr_contexts", "0") == "0"

    def describe(self) -> str:
        ops = self.config.get("contexts/0/operations", "-")
        actions = [v for k, v in sorted(self.config.items()) if re.fullmatch(r"contexts/0/schemes/\d+/action", k)]
        run = f"running, pid {self.pid}" if self.running else "stopped"
        return f"kdamond {self.index} ({run}; {ops}" + (f"; {', '.join(actions)}" if actions else "") + ")"


@dataclass(frozen=True)
class DamonFacts:
    sysfs: bool
    nr_kdamonds: int
    kdamonds: tuple[Kdamond, ...]
    capabilities: dict[str, Any]
    modules: dict[str, bool | None]
    node_ranges: dict[int, list[tuple[int, int]]]
    dax: tuple[dict[str, Any], ...]
    block_size: int | None

    def has(self, feature: str) -> bool:
        return bool(self.capabilities["features"][feature]["present"])

    def kdamond(self, index: int) -> Kdamond | None:
        return next((k for k in self.kdamonds if k.index == index), None)

    @property
    def enabled_modules(self) -> list[str]:
        return [m for m, on in self.modules.items() if on]


def from_facts(facts: Facts) -> DamonFacts:
    """The DAMON section, typed (also from a facts file saved on another machine)."""
    d = facts.sections.get("damon") or {}
    caps = d.get("capabilities") or derive(facts.kernel_version, set(), set(), None)
    return DamonFacts(
        sysfs=bool(d.get("sysfs")), nr_kdamonds=int(d.get("nr_kdamonds", 0)),
        kdamonds=tuple(Kdamond(k["index"], k["state"], k["pid"], dict(k["config"]), dict(k["status"]))
                       for k in d.get("kdamonds", [])),
        capabilities=caps, modules=dict(d.get("modules", {})),
        node_ranges={int(n): [(a, b) for a, b in r] for n, r in d.get("node_ranges", {}).items()},
        dax=_dax(facts), block_size=d.get("block_size"))


def _dax(facts: Facts) -> tuple[dict[str, Any], ...]:
    """The DAX devices with a target node (from the ``dax`` section), as node classes need them."""
    from .dax import from_facts as dax_facts

    return tuple({"name": x.name, "target_node": x.target_node, "start": x.resource, "size": x.size,
                  "mode": x.mode, "numa_node": -1 if x.numa_node is None else x.numa_node}
                 for x in dax_facts(facts).devices if x.target_node is not None and x.resource is not None)


def summary_lines(facts: Facts) -> list[str]:
    """What ``nodeagent facts`` prints about DAMON."""
    d = from_facts(facts)
    if not facts.sections.get("damon"):
        return []
    if not d.sysfs:
        return ["DAMON: no sysfs interface (/sys/kernel/mm/damon/admin) on this kernel"]
    caps = d.capabilities
    out = [f"DAMON: {d.nr_kdamonds} kdamond(s); operations {' '.join(caps['operations'])}; "
           f"actions {' '.join(caps['actions'])}"]
    out += [f"  {k.describe()}" for k in d.kdamonds]
    on = d.enabled_modules
    if on:
        out.append(f"  modules running their own context: {', '.join(on)}")
    return out
