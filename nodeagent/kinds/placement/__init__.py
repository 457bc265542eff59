"""Placement: the one-off demotion pass for a fast node kswapd gave up on, and the placement advisories.

Measured on a real 6.12 kernel (``bench/placement``, ``shared/reference/placement/NOTES.md``): when a workload
fills a fast node while demotion is off, kswapd gives up on the node (``node_unreclaimable``) and nothing wakes it
for that node again. Switching demotion and NUMA balancing's memory-tiering mode on afterwards then does nothing —
no demotion, no promotion: 0-26 % of the hot set on the fast node after 60 s. Only a reclaim on the node that
succeeds brings it back. So, when the profile has ``memory.demotion_pass`` and the plan finds a fast node in that
state, apply demotes from it once, in this order (see ``registry.py``)::

    knobs (demotion_enabled on) → DAX (CXL nodes online) → demotion pass (this module)
        → DAMON (its promotion finds room on the fast node) → kernel.numa_balancing (promotion)

The pass writes to the node's ``reclaim`` file (6.17) or else to the root cgroup's ``memory.reclaim`` (cgroup v2,
5.19; on a top-tier node with demotion on, reclaim demotes), in chunks, until ``until_free`` of the node is free or
``timeout`` passes: bounded in size and in time. It is planned only while the node is stuck, so the plan after
it is empty. Enabling NUMA balancing last keeps its first scans from failing promotions on a full node (failed
migrations make the kernel back off its scan rate).

The plan also carries the placement advisories (:mod:`._placement_advice`): combinations of settings measured to
fail, each with the evidence and the fix.

Example::

    memory:
      demotion_pass: {until_free: 20%, timeout: 30s}
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...facts import Facts
from ...facts.reclaim import NODE, from_facts, parse_zoneinfo
from ...host import Host
from ...plan import Change, Problem
from ...util.errors import HostError
from ...util.kfmt import parse_meminfo
from ...util.quantities import format_size
from ..base import ApplyContext, Kind, PlanContext, ResourcePlan, projection_of
from .advice import advisories, fast_nodes

if TYPE_CHECKING:
    from ...profile import LoadedProfile

KIND = "placement"
CHUNK = 64 * 1024**2  # one memory.reclaim write: root reclaim spreads over every node, so it goes in steps
MiB = 1024**2


def _free(host: Host, node: int) -> tuple[int, int]:
    """(MemTotal, MemFree) of ``node`` in bytes, read now."""
    info = parse_meminfo(host.read_opt(f"{NODE}/node{node}/meminfo") or "")
    return info.get("MemTotal", 0) * 1024, info.get("MemFree", 0) * 1024


def _stuck(host: Host, node: int) -> bool:
    return bool(parse_zoneinfo(host.read_opt("/proc/zoneinfo") or "").get(node, {}).get("unreclaimable"))


def plan_pass(loaded: LoadedProfile, facts: Facts, proj: Any) -> ResourcePlan:
    """Pure: a demotion pass per fast node kswapd gave up on (only with ``memory.demotion_pass``), to the slow
    nodes of the node's projection ``proj`` (those online after the DAX changes before it)."""
    rp = ResourcePlan()
    spec = loaded.profile.memory.demotion_pass
    if spec is None:
        return rp
    rf = from_facts(facts)
    stuck = [n for n in fast_nodes(facts) if rf.unreclaimable(n)]
    if not stuck:
        rp.unchanged.append("placement.demotion_pass")
        return rp
    demotion = proj.setting("kernel.demotion_enabled")
    targets = list(proj.slow)
    for node in stuck:
        target = f"placement.node{node}"
        if demotion is not True:
            rp.problems.append(Problem(KIND, target, f"memory.demotion_pass: node{node} is full and kswapd gave up "
                                       "on it, but demotion stays off, so a pass has nowhere to put its pages",
                                       hint="set kernel.demotion_enabled: true", blocking=False))
            continue
        if not targets:
            rp.warnings.append(f"memory.demotion_pass: node{node} is stuck, but there is no lower memory tier to "
                               "demote to here: no pass")
            continue
        if node in rf.node_reclaim:
            path, how = f"{NODE}/node{node}/reclaim", f"node{node}/reclaim"
        elif rf.memcg_reclaim_path:
            path, how = rf.memcg_reclaim_path, "the root cgroup's memory.reclaim (reclaims from every node; on " \
                "this one by demotion)"
        else:
            where = (f"no memory.reclaim on the cgroup v2 mount {rf.cgroup2_mount}" if rf.cgroup2_mount
                     else "no cgroup v2 mount in /proc/self/mountinfo")
            rp.problems.append(Problem(KIND, target, f"memory.demotion_pass: node{node} is stuck, and this kernel "
                                       f"offers no proactive reclaim ({where}: cgroup v2 "
                                       "with the memory controller, 5.19; no node reclaim file: 6.17)",
                                       hint="mount cgroup v2 with the memory controller, or restart the workload "
                                       "after applying the profile", blocking=False))
            continue
        info = facts.node(node)
        total, free = (info.mem_total, info.mem_free) if info else (0, 0)
        goal = int(total * spec.until_free / 100)
        rp.changes.append(Change(
            KIND, target, "demote", f"{format_size(free)} free, kswapd gave up (node_unreclaimable)",
            f"≥ {format_size(goal)} free",
            reason=f"node{node} filled up while demotion was off: until a reclaim on it succeeds the kernel neither "
            f"demotes nor promotes there. One pass through {how}, demoting to node"
            f"{','.join(map(str, targets))}, until {spec.until_free:g}% is free or {spec.timeout // 1_000_000}s pass",
            path=path, before_label=f"{format_size(free)} free, node_unreclaimable",
            after_label=f"≥ {format_size(goal)} free ({spec.until_free:g}%), kswapd working",
            data=(("node", node), ("goal", goal), ("timeout_us", spec.timeout), ("path", path))))
    return rp


def run_pass(host: Host, node: int, goal: int, timeout_us: int, path: str,
             now: Callable[[], float] = time.monotonic,
             progress: Callable[[str, int, int], None] | None = None) -> str:
    """Demote from ``node`` through ``path`` in chunks until ``goal`` bytes are free or the time is up."""
    start = now()
    deadline = start + timeout_us / 1e6
    _, free0 = _free(host, node)
    free, writes, refused = free0, 0, None
    while free < goal and now() < deadline:
        ask = min(goal - free, CHUNK) if path.endswith("/memory.reclaim") else goal - free
        try:
            host.write(path, str(max(ask, 4096)))
        except HostError as exc:  # EAGAIN: the kernel reclaimed less than asked
            refused = exc.message
        writes += 1
        _, after = _free(host, node)
        if after <= free and refused:
            break
        free = after
        if progress is not None:  # MiB freed of MiB wanted
            progress(f"demoting from node{node} (MiB)", max(free - free0, 0) >> 20, max(goal - free0, 0) >> 20)
    took = now() - start
    stuck = _stuck(host, node)
    summary = (f"node{node}: {format_size(free0)} → {format_size(free)} free in {took:.1f}s ({writes} write(s) to "
               f"{path}); kswapd {'still gave up on it' if stuck else 'works on it again'}")
    if stuck:
        raise HostError(summary + (f"; the kernel said: {refused}" if refused else ""), path=path,
                        hint="nothing on the node could be demoted (pinned or unevictable memory?); restart the "
                        "workload after applying the profile")
    return summary + ("" if free >= goal else f"; stopped short of {format_size(goal)}"
                      + (f" ({refused})" if refused else " (timeout)"))


class PlacementResource(Kind):
    kind = KIND
    #: The node's reclaim file (6.17); the root cgroup's memory.reclaim (5.19) is allowed by mount (``writes_mounted``)
    writes: tuple[str, ...] = (r"/sys/devices/system/node/node[0-9]+/reclaim",)
    writes_mounted: tuple[tuple[str, str], ...] = ((r"(/[^/]+)+/memory\.reclaim", "cgroup2"),)

    def plan(self, loaded: LoadedProfile, facts: Facts, ctx: PlanContext) -> ResourcePlan:
        rp = plan_pass(loaded, facts, projection_of(loaded, facts, ctx))
        rp.warnings += [a.render() for a in advisories(loaded, facts, projection_of(loaded, facts, ctx))]
        return rp

    def original(self, change: Change, facts: Facts) -> None:
        """Nothing to record: a demotion pass moves pages once, and there is no setting to put back."""
        return None

    def apply(self, host: Host, change: Change, actx: ApplyContext) -> str:
        d = dict(change.data)
        return run_pass(host, int(d["node"]), int(d["goal"]), int(d["timeout_us"]), str(d["path"]),
                        progress=actx.report)
