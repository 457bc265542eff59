"""``verify-serving``: where a serving engine's memory is, per node and tier, against the pool plan.

Two sources, read-only:

- **cgroup v2 ``memory.numa_stat``** of a unit or cgroup (cheap: the kernel keeps the per-node counters; one
  read). Bytes per item and node (``anon N0=... N1=...``). ``unevictable`` counts mlocked pages; pages an engine
  pins with ``cudaHostRegister``/``get_user_pages(FOLL_LONGTERM)`` are not marked, so "pinned" is not in it: the
  pool is the ``anon`` bytes, and locked bytes off the planned node are the ones named as stranded.
- **``/proc/PID/numa_maps``** of one process, read once and only when asked by PID: the kernel walks every
  mapping's page tables under the process's mmap lock to build it, which stalls the engine's own mmap/munmap
  and page faults for as long as the walk takes (tens of ms per 100 GiB mapped). Per mapping: its memory policy
  and its pages per node. numa_maps has no pin or lock flag either: it can tell a mapping whose policy binds it
  to a node but whose pages are elsewhere (stranded — e.g. pinned before the policy was set, or moved out of
  ZONE_MOVABLE when pinned) and large anonymous mappings off the planned nodes; it cannot tell which pages the
  GPU driver pinned.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..util.errors import NodeagentError, UsageError

if TYPE_CHECKING:
    from ..facts import Facts
    from ..host import Host

def format_size(n: int) -> str:
    """GiB with one decimal from 1 GiB up, else MiB: pools are big, interpreter heaps are not."""
    return f"{n / 1024**3:,.1f} GiB" if n >= 1024**3 else f"{n / 1024**2:,.1f} MiB"


_NODE = re.compile(r"N(\d+)=(\d+)")
#: A pool is "on plan" when at least this share of its anonymous bytes is on the planned nodes.
ON_PLAN = 0.9
#: Mappings at least this large off the planned nodes are named (smaller ones are the engine's own heap).
LARGE = 256 * 1024**2
#: Anonymous memory off the node its own policy names, from this much up, is named (smaller: the interpreter's
#: heap from before the engine set its policy).
STRANDED = 16 * 1024**2


def parse_numa_stat(text: str) -> dict[str, dict[int, int]]:
    """``memory.numa_stat``: ``{item: {node: bytes}}`` (the workingset items are counts, kept as they are)."""
    out: dict[str, dict[int, int]] = {}
    for line in text.splitlines():
        item, _, rest = line.partition(" ")
        if item:
            out[item] = {int(n): int(v) for n, v in _NODE.findall(rest)}
    return out


@dataclass(frozen=True)
class Vma:
    start: int
    policy: str  # default | bind:2 | prefer:2 | interleave:0-1 | local | ... (mpol_to_str)
    kind: str  # anon | heap | stack | file | huge...
    path: str | None
    pages: dict[int, int]  # node → pages
    page_size: int  # bytes
    anon: int  # pages

    @property
    def is_anon(self) -> bool:
        """Anonymous memory (a private file mapping whose every page was copied on write counts too)."""
        return self.kind != "file" or (self.anon > 0 and self.anon >= sum(self.pages.values()))

    @property
    def bytes_per_node(self) -> dict[int, int]:
        return {n: p * self.page_size for n, p in self.pages.items()}

    @property
    def policy_nodes(self) -> tuple[int, ...]:
        from ..util.kfmt import parse_list

        mode, _, nodes = self.policy.partition(":")
        if mode not in ("bind", "prefer", "prefer (many)") or not nodes:
            return ()
        return tuple(parse_list(nodes.split("=")[0]))


def parse_numa_maps(text: str) -> list[Vma]:
    """``/proc/PID/numa_maps`` (fs/proc/task_mmu.c show_numa_map): one mapping a line."""
    out = []
    for line in text.splitlines():
        words = line.split()
        if len(words) < 2:
            continue
        try:
            start = int(words[0], 16)
        except ValueError:
            continue
        policy, i = words[1], 2
        # "prefer (many):0-1" and "weighted interleave:0-1" are two words
        if i < len(words) and words[1] in ("prefer", "weighted") and words[2].startswith(("(many)", "interleave")):
            policy, i = f"{words[1]} {words[2]}", 3
        kind, path, pages, psize, anon = "anon", None, {}, 4096, 0
        for w in words[i:]:
            key, eq, val = w.partition("=")
            if not eq:
                kind = w if w in ("heap", "stack", "huge") else kind
                continue
            if key == "file":
                kind, path = "file", val
            elif key == "anon":
                anon = int(val)
            elif key == "kernelpagesize_kB":
                psize = int(val) * 1024
            elif key.startswith("N") and key[1:].isdigit():
                pages[int(key[1:])] = int(val)
        out.append(Vma(start, policy, kind, path, pages, psize, anon))
    return out


# -- where the cgroup is -----------------------------------------------------------------------------------------

def cgroup_mount(host: Host) -> str:
    from ..host.mountinfo import cgroup2_mounts, read_mountinfo

    found = cgroup2_mounts(read_mountinfo(host.fs))
    if not found:
        raise NodeagentError("cgroup v2 is not mounted on the node (no cgroup2 line in /proc/self/mountinfo)",
                             hint="give --pid PID instead (numa_maps), or mount cgroup v2")
    return found[0].mount_point


def unit_cgroup(host: Host, unit: str) -> str:
    """The cgroup of a systemd unit: ``NAME`` (``.service`` when it has no suffix) anywhere in the slices."""
    mount = cgroup_mount(host)
    name = unit if "." in unit else f"{unit}.service"
    direct = f"{mount}/system.slice/{name}"
    if host.fs.is_dir(direct):
        return direct
    todo, depth = [mount], 0
    while todo and depth < 4:
        nxt = []
        for d in todo:
            for e in sorted(host.fs.listdir(d)):
                p = f"{d}/{e}"
                if e == name and host.fs.is_dir(p):
                    return p
                if e.endswith(".slice") and host.fs.is_dir(p):
                    nxt.append(p)
        todo, depth = nxt, depth + 1
    raise NodeagentError(f"unit {name}: no cgroup of that name under {mount} (is it running?)",
                         hint=f"check `systemctl status {name}`, or give --cgroup PATH (relative to {mount})")


def cgroup_path(host: Host, path: str) -> str:
    mount = cgroup_mount(host)
    full = os.path.normpath(path if path.startswith(mount + "/") or path == mount else f"{mount}/{path.lstrip('/')}")
    if not host.fs.is_dir(full):
        raise NodeagentError(f"--cgroup {path}: no such cgroup ({full})",
                             hint=f"give the path relative to {mount}, as /proc/PID/cgroup shows it after 0::")
    return full


# -- the report --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class NodeUse:
    node: int
    tier: str
    anon: int
    file: int
    locked: int  # unevictable (mlocked) bytes; None-equivalent 0 from numa_maps
    planned: bool


@dataclass
class Report:
    source: str  # memory.numa_stat | numa_maps
    where: str
    cost: str
    planned_nodes: tuple[int, ...]
    expected: int
    nodes: list[NodeUse]
    findings: list[tuple[str, str]] = field(default_factory=list)  # (pass|warn|fail, text)
    cannot_know: str = ""
    devdax: tuple[str, ...] = ()  # a Maru pool: the DAX devices (/dev/daxX.Y) the plan puts it on

    @property
    def ok(self) -> bool:
        return not any(s == "fail" for s, _ in self.findings)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "where": self.where, "cost": self.cost,
                "planned_nodes": list(self.planned_nodes), "expected_pool_bytes": self.expected,
                "nodes": [u.__dict__ for u in self.nodes], "ok": self.ok,
                "findings": [{"status": s, "text": t} for s, t in self.findings], "cannot_know": self.cannot_know,
                "devdax": list(self.devdax)}


def tier_of(facts: Facts, node: int) -> str:
    n = facts.node(node)
    if n is None:
        return "?"
    top = min(facts.tiers) if facts.tiers else None
    return "CXL" if not n.has_cpu and n.tier is not None and top is not None and n.tier > top else "DRAM"


def judge_devdax(rep: Report, vmas: list[Vma] | None) -> Report:
    """A Maru pool: the engine maps the DAX character device. A device-dax mapping is a PFN mapping whose pages
    belong to no NUMA node and sit on no LRU, so neither numa_maps nor memory.numa_stat counts them; numa_maps
    still lists the mapping (``file=/dev/daxX.Y``), which is what can be checked."""
    paths = ", ".join(rep.devdax)
    if vmas is None:
        rep.findings.append(("warn", f"memory.numa_stat cannot show a mapping of {paths} (its pages are on no "
                                     "node): give --pid of a worker process to check that it maps the device"))
        return rep
    found = sorted({v.path for v in vmas if v.path in rep.devdax})
    if found:
        rep.findings.append(("pass", f"the process maps {', '.join(found)}: Maru's devdax pool (numa_maps counts "
                                     "none of its pages: they belong to no node)"))
    else:
        rep.findings.append(("fail", f"the process maps none of {paths}: no Maru pool here (the vLLM worker "
                                     "processes map it: give one's PID; check maru-server --dax-path and "
                                     "LMCache's maru_path)"))
    return rep


def judge(rep: Report, vmas: list[Vma] | None = None) -> Report:
    if rep.devdax:
        return judge_devdax(rep, vmas)
    planned = set(rep.planned_nodes)
    on = sum(u.anon for u in rep.nodes if u.planned)
    total = sum(u.anon for u in rep.nodes)
    off = [u for u in rep.nodes if not u.planned and u.anon >= LARGE]
    where = ", ".join(f"node{n}" for n in sorted(planned))
    if total == 0:
        rep.findings.append(("warn", "the engine has no anonymous memory yet: no pool allocated"))
        return rep
    share = on / total
    if rep.expected and on < ON_PLAN * rep.expected:
        elsewhere = ", ".join(f"{format_size(u.anon)} on node{u.node} ({u.tier})" for u in off) or "nowhere large"
        rep.findings.append(("fail", f"the plan puts a {format_size(rep.expected)} pool on {where}; "
                                     f"{format_size(on)} is there ({elsewhere})"))
    elif share < ON_PLAN and not rep.expected:
        rep.findings.append(("fail", f"{share:.0%} of the anonymous memory is on {where}"))
    else:
        rep.findings.append(("pass", f"{format_size(on)} of anonymous memory on {where} ({share:.0%} of "
                                     f"{format_size(total)}), plan {format_size(rep.expected)}"))
    for u in rep.nodes:
        if not u.planned and u.locked >= LARGE:
            rep.findings.append(("fail", f"{format_size(u.locked)} of locked (unevictable) memory stranded on "
                                         f"node{u.node} ({u.tier}), off the planned {where}"))
    for v in vmas or []:
        if not v.is_anon:  # page cache: placed by whoever read the file first, shared with others
            continue
        want = set(v.policy_nodes)
        stray = {n: b for n, b in v.bytes_per_node.items() if want and n not in want}
        if want and sum(stray.values()) >= STRANDED:
            rep.findings.append(("fail" if sum(stray.values()) >= LARGE else "warn",
                                 f"mapping {v.start:x} ({v.policy}): "
                                 + ", ".join(f"{format_size(b)} on node{n}" for n, b in sorted(stray.items()))
                                 + " — off the node its policy binds it to (stranded: allocated before the "
                                   "policy, or migrated when pinned)"))
        elif not want and sum(v.bytes_per_node.values()) >= LARGE:
            off_b = {n: b for n, b in v.bytes_per_node.items() if n not in planned}
            if sum(off_b.values()) >= LARGE:
                rep.findings.append(("warn", f"mapping {v.start:x} ({v.policy}, {v.kind}): "
                                     + ", ".join(f"{format_size(b)} on node{n}" for n, b in sorted(off_b.items()))
                                     + " off the planned nodes, with no policy of its own"))
    return rep


#: ``planner(engine's anon bytes per node) -> (planned pool nodes, expected pool bytes, DAX devices of a Maru
#: pool)``: the plan as rendered before the engine started (its own memory counts as free for its pool).
Planner = Callable[[dict[int, int]], tuple[tuple[int, ...], int, tuple[str, ...]]]


def from_cgroup(host: Host, facts: Facts, cgroup: str, planner: Planner) -> Report:
    text = host.read_opt(f"{cgroup}/memory.numa_stat")
    if text is None:
        raise NodeagentError(f"{cgroup}/memory.numa_stat: not there (the memory controller is not enabled for "
                             "this cgroup, or the kernel is older than 4.20)",
                             hint="enable it (MemoryAccounting=yes on the unit), or give --pid PID")
    stat = parse_numa_stat(text)
    ids = sorted(set().union(*(set(v) for v in stat.values())) if stat else set())
    planned, expected, devdax = planner(dict(stat.get("anon", {})))
    nodes = [NodeUse(n, tier_of(facts, n), stat.get("anon", {}).get(n, 0), stat.get("file", {}).get(n, 0),
                     stat.get("unevictable", {}).get(n, 0), n in planned) for n in ids]
    rep = Report("memory.numa_stat", cgroup, "one read of per-node counters the kernel keeps (cheap)", planned,
                 expected, nodes, cannot_know="pinned pages are not counted apart: unevictable is mlocked memory, "
                 "and pages pinned by the GPU driver without mlock are plain anon", devdax=devdax)
    return judge(rep)


def from_pid(host: Host, facts: Facts, pid: int, planner: Planner) -> Report:
    if pid <= 0:
        raise UsageError(f"--pid {pid}: not a process id")
    text = host.read_opt(f"/proc/{pid}/numa_maps")
    if text is None:
        raise NodeagentError(f"/proc/{pid}/numa_maps: no such process (or the kernel has no NUMA support)",
                             hint="give the engine's PID (systemctl show -p MainPID UNIT), or --unit UNIT")
    vmas = parse_numa_maps(text)
    per: dict[int, list[int]] = {}
    for v in vmas:
        for n, b in v.bytes_per_node.items():
            slot = per.setdefault(n, [0, 0])
            slot[0 if v.is_anon else 1] += b
    planned, expected, devdax = planner({n: a for n, (a, _) in per.items()})
    nodes = [NodeUse(n, tier_of(facts, n), a, f, 0, n in planned) for n, (a, f) in sorted(per.items())]
    rep = Report("numa_maps", f"/proc/{pid}/numa_maps", "read once: the kernel walks every mapping's page tables "
                 "under the process's mmap lock (stalls its mmap and page faults while it runs)", planned, expected,
                 nodes, cannot_know="numa_maps has no pin or lock flag: pinned pages cannot be told from others; "
                 "stranded means pages off the node their mapping's policy names", devdax=devdax)
    return judge(rep, vmas)


def text(rep: Report) -> str:
    lines = [f"verify-serving: {rep.where} ({rep.source}; cost: {rep.cost})",
             f"plan: pool on {', '.join(rep.devdax) or ', '.join(f'node{n}' for n in rep.planned_nodes) or '(none)'}, "
             f"{format_size(rep.expected)}"]
    for u in rep.nodes:
        lines.append(f"  node{u.node} {u.tier:<4} anon {format_size(u.anon):>10}  file {format_size(u.file):>10}"
                     + (f"  locked {format_size(u.locked)}" if rep.source == "memory.numa_stat" else "")
                     + ("  (planned)" if u.planned else ""))
    lines += [f"{s}: {t}" for s, t in rep.findings]
    lines.append(f"cannot tell: {rep.cannot_know}")
    return "\n".join(lines)


__all__ = ["Report", "Vma", "from_cgroup", "from_pid", "parse_numa_maps", "parse_numa_stat", "unit_cgroup"]
