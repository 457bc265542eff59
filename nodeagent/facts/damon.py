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
     "module_kdamonds": [{"module": "damon_reclaim", "name": "DAMON_RECLAIM", "enabled": false, "pid": null,
                          "region": null}],
     "node_ranges": {"0": [[0, 549755813888]]},
     "block_size": 2147483648}

``config`` holds every writable attribute (paths relative to ``kdamonds/<N>/``), ``status`` the read-only ones
(statistics, ``effective_bytes``). A node's ranges come from its zones in ``/proc/zoneinfo``
(:func:`nodeagent.facts.numa.node_ranges`: never a listing of its blocks unless a zone has holes), merged into
contiguous ``[start, end)`` byte ranges.

``module_kdamonds`` lists the special-purpose modules this kernel has (``/sys/module/damon_*/parameters``):
whether each is enabled, its kdamond's pid (``kdamond_pid``; DAMON_STAT has no such parameter, so its thread is
looked up among the ``kdamond.N`` kernel threads, as damo does) and its ``monitor_region_start``/``_end`` when
set (unset: the module picks System RAM itself). A module's kdamond never shows under
``/sys/kernel/mm/damon/admin``: these parameters and its ``kdamond.N`` thread are all there is to see.

:func:`other_users` turns the section into the DAMON users nodeagent does not own (which kdamonds are its own is
decided by :func:`nodeagent.kinds.damon.plan.owned_kdamonds`, from its ownership records), each with what
it means for a profile (:attr:`DamonUser.effect`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection
from functools import cached_property
from typing import Any, TypeVar

from ..host import Host
from ..kinds.damon.model import Kdamond as Tree
from ..kinds.damon.model import parse as parse_tree  # the one DAMON model: pure, imports only util (tests/arch)
from ..util.dataclass import asdict, dataclass
from ..util.errors import BusyError
from ..util.kfmt import kernel_version, parse_list
from . import SECTIONS, Facts
from .damon_caps import MODULES, derive, normalize
from .numa import node_ranges, read_block_size
from .setters import read_damon_modules

ADMIN = "/sys/kernel/mm/damon/admin"
KDAMONDS = f"{ADMIN}/kdamonds"
NODE = "/sys/devices/system/node"
#: What each module's kdamond does (mm/damon/reclaim.c, lru_sort.c, stat.c); all of them monitor physical
#: memory (paddr) and run exclusively (``damon_start(..., exclusive=true)``).
MODULE_ACTIONS = {"damon_reclaim": ("pageout",), "damon_lru_sort": ("lru_prio", "lru_deprio"), "damon_stat": ()}

_STATUS_FILES = {"avail_operations", "pid", "state", "effective_bytes", "total_bytes"}
_STATUS_DIRS = {"stats", "tried_regions"}
#: The one writable file under stats/ (7.0): configuration, not a statistic.
_WRITABLE_STAT = "/stats/max_nr_snapshots"
T = TypeVar("T")


#: How long an EBUSY from DAMON's sysfs interface is taken for another process's command (seconds).
BUSY_FOR = 5.0


def retry_busy(fn: Callable[..., T], *args: Any, busy_for: float | None = None) -> T:
    """Call ``fn``, retrying on EBUSY for up to ``busy_for`` seconds (:data:`BUSY_FOR`). DAMON's sysfs files take
    the interface lock with a trylock, and a command that needs the kdamond (``update_schemes_stats``, ``commit``
    on 6.12) stays pending until that kdamond's next aggregation: every command to any kdamond answers EBUSY
    meanwhile. A tool polling statistics (an exporter, damo, a benchmark) keeps one pending most of the time —
    measured on 6.12 under QEMU, a loop refreshing three kdamonds every 2 s made five tries over 0.2 s fail an
    apply. So the budget is time, polled at short steps to catch the gaps between another tool's requests. An
    EBUSY that persists past it (a running kdamond asked to start) is raised."""
    deadline = time.monotonic() + (BUSY_FOR if busy_for is None else busy_for)
    delay = 0.01
    while True:
        try:
            return fn(*args)
        except BusyError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)


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
        if (_in_status(child) and not child.endswith(_WRITABLE_STAT)) or child.rpartition("/")[2] in _STATUS_FILES:
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
    for nid in parse_list(host.read_opt(f"{NODE}/online") or "", f"{NODE}/online"):
        out[str(nid)] = node_ranges(host, nid, block_size)
    return out


def _modules(host: Host, sysfs_pids: set[int]) -> list[dict[str, Any]]:
    """The special-purpose modules of this kernel, each with its kdamond's pid while enabled."""
    out = []
    for m in read_damon_modules(host):
        base = f"/sys/module/{m.module}/parameters"
        pid = m.kdamond_pid
        if m.enabled and pid is None and host.read_opt(f"{base}/kdamond_pid") is None:
            pid = _kdamond_thread(host, sysfs_pids)
        start, end = (_int(host.read_opt(f"{base}/monitor_region_{n}")) for n in ("start", "end"))
        out.append({"module": m.module, "name": m.name, "enabled": m.enabled, "pid": pid if m.enabled else None,
                    "region": [start, end] if start is not None and end is not None and end > start else None})
    return out


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.strip().isdigit() else None


def _kdamond_thread(host: Host, sysfs_pids: set[int]) -> int | None:
    """A ``kdamond.N`` kernel thread that no sysfs kdamond accounts for: an exclusive module's (the kernel names a
    kdamond by how many run when it starts, so a module's is ``kdamond.0``). Kernel threads are kthreadd's
    children; without ``/proc/2/task/2/children`` (CONFIG_PROC_CHILDREN) every process is looked at."""
    children = host.read_opt("/proc/2/task/2/children")
    pids = children.split() if children is not None else [p for p in host.fs.listdir("/proc") if p.isdigit()]
    for p in pids:
        comm = (host.read_opt(f"/proc/{p}/comm") or "").strip()
        if re.fullmatch(r"kdamond\.\d+", comm) and int(p) not in sysfs_pids:
            return int(p)
    return None


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
    block_size = read_block_size(host)
    modules = _modules(host, {k["pid"] for k in kdamonds if k["state"] == "on"})
    return {
        "sysfs": nr_text is not None,
        "nr_kdamonds": int(nr_text) if nr_text and nr_text.strip().isdigit() else 0,
        "kdamonds": kdamonds,
        "capabilities": derive(kernel, seen, dirs, avail),
        "modules": {name: None for name in MODULES} | {m["module"]: m["enabled"] for m in modules},
        "module_kdamonds": modules,
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

    @cached_property
    def tree(self) -> Tree:
        """Its files read into the one DAMON model (:mod:`nodeagent.kinds.damon.model`), statistics included."""
        return parse_tree(self.config, self.status)

    @property
    def empty(self) -> bool:
        """A slot holding no configuration: stopped, no context."""
        return not self.running and not self.tree.contexts

    @property
    def operations(self) -> str:
        ctx = self.tree.context
        return ctx.operations if ctx is not None else "-"

    @property
    def actions(self) -> list[str]:
        """Its schemes' actions, in scheme order."""
        return self.tree.actions

    def regions(self) -> list[tuple[int, int]]:
        """The address ranges its targets' regions give (physical addresses for paddr), in order."""
        return self.tree.regions()

    def pids(self) -> list[int]:
        """The processes its targets monitor (vaddr, fvaddr)."""
        return [t.pid for c in self.tree.contexts for t in c.targets]

    def describe(self) -> str:
        actions = self.actions
        run = f"running, pid {self.pid}" if self.running else "stopped"
        return f"kdamond {self.index} ({run}; {self.operations}" + (f"; {', '.join(actions)}" if actions else "") + ")"


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
    module_kdamonds: tuple[dict[str, Any], ...] = ()

    def has(self, feature: str) -> bool:
        return bool(self.capabilities["features"][feature]["present"])

    def kdamond(self, index: int) -> Kdamond | None:
        return next((k for k in self.kdamonds if k.index == index), None)

    @property
    def enabled_modules(self) -> list[str]:
        return [m for m, on in self.modules.items() if on]

    def nodes_of(self, ranges: list[tuple[int, int]]) -> list[int]:
        """The NUMA nodes whose memory the physical ``ranges`` overlap."""
        return sorted({n for n, rs in self.node_ranges.items() for a, b in rs
                       for lo, hi in ranges if a < hi and lo < b})


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
        dax=_dax(facts), block_size=d.get("block_size"),
        module_kdamonds=tuple(dict(m) for m in d.get("module_kdamonds", _modules_of(d.get("modules", {})))))


def _modules_of(modules: dict[str, bool | None]) -> list[dict[str, Any]]:
    """``module_kdamonds`` for a facts file saved before it existed: what ``modules`` says, without pids."""
    return [{"module": m, "name": MODULES[m].name if m in MODULES else m.upper(), "enabled": on, "pid": None,
             "region": None} for m, on in modules.items() if on is not None]


@dataclass(frozen=True)
class DamonUser:
    """A DAMON user nodeagent does not own: a sysfs kdamond (``kind`` "kdamond") or a special-purpose module
    holding a kdamond of its own (``kind`` "module")."""

    kind: str
    name: str  # "kdamond 0", "DAMON_STAT"
    running: bool
    pid: int | None
    operations: str
    actions: tuple[str, ...]
    monitors: str  # what its targets are: "0x100000000-0x218000000", "pid 4242", "System RAM (its default region)"
    nodes: tuple[int, ...]  # the NUMA nodes its physical regions cover (empty: not known, or virtual addresses)
    index: int | None = None  # kdamonds/<index> (kind "kdamond")
    module: str | None = None  # damon_stat (kind "module")

    def describe(self) -> str:
        run = (f"running, pid {self.pid}" if self.pid is not None else "running") if self.running else "stopped"
        if self.kind == "module":
            run = ("enabled, kdamond " + (f"pid {self.pid}" if self.pid is not None else "running")
                   + "; not under /sys/kernel/mm/damon/admin")
        what = ", ".join(self.actions) or "monitoring only"
        nodes = f" ({', '.join(f'node{n}' for n in self.nodes)})" if self.nodes else ""
        return f"{self.name} ({run}; {self.operations}; {what}; monitors {self.monitors}{nodes})"

    @property
    def effect(self) -> str:
        """What it means for any profile, by the kernel's rules and nodeagent's (``damon.coexist``)."""
        if self.kind == "module":
            return ("the kernel runs a module's kdamond exclusively: while it runs, starting any sysfs kdamond fails "
                    "(state=on → EBUSY), nodeagent's included, and the module cannot be enabled while a sysfs "
                    "kdamond runs; nodeagent never disables it")
        if self.running:
            return ("nodeagent never stops, rewrites or renumbers it unless told to take over; a new kdamond slot "
                    "would stop it: the kernel refuses to rewrite nr_kdamonds while any kdamond runs (EBUSY), and "
                    "the rewrite wipes every kdamond's configuration, so a profile needing more slots than are free "
                    "is refused without damon.coexist: take-over")
        return ("stopped but configured: nodeagent leaves it alone unless told to take over; a new kdamond slot "
                "would wipe its configuration (rewriting nr_kdamonds resets every kdamond), so a profile needing "
                "more slots than are free is refused without damon.coexist: take-over")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"description": self.describe(), "effect": self.effect}


def other_users(damon: DamonFacts, owned: Collection[int]) -> list[DamonUser]:
    """Every DAMON user that is not nodeagent's: the configured kdamonds whose index is not in ``owned`` (running
    or not; an empty slot is nobody's), then the enabled special-purpose modules."""
    out = []
    for k in damon.kdamonds:
        if k.index in owned or k.empty:
            continue
        ranges = k.regions()
        if k.operations == "paddr":
            monitors = (", ".join(f"{a:#x}-{b:#x}" for a, b in ranges[:3]) or "no region (nothing)") + (
                f" (+{len(ranges) - 3} more)" if len(ranges) > 3 else "")
        else:
            monitors = ", ".join(f"pid {p}" for p in k.pids()) or "no process"
        out.append(DamonUser("kdamond", f"kdamond {k.index}", k.running, k.pid if k.running else None,
                             k.operations, tuple(k.actions), monitors,
                             tuple(damon.nodes_of(ranges)) if k.operations == "paddr" else (), index=k.index))
    for m in damon.module_kdamonds:
        if not m.get("enabled"):
            continue
        region = [tuple(m["region"])] if m.get("region") else []
        monitors = f"{region[0][0]:#x}-{region[0][1]:#x}" if region else "System RAM (its default region)"
        out.append(DamonUser("module", str(m["name"]), True, m.get("pid"), "paddr",
                             MODULE_ACTIONS.get(str(m["module"]), ()), monitors,
                             tuple(damon.nodes_of(region)), module=str(m["module"])))
    return out


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
    out += [f"  {u.describe()}" for u in other_users(d, {k.index for k in d.kdamonds}) if u.kind == "module"]
    return out
