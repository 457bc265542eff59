"""Placement advisories: settings that, combined, were measured to fail — said before anything is applied.

Each :class:`Advisory` names the combination, the evidence (a measurement on a real 6.12 kernel: the placement
benchmark ``bench/placement`` and ``shared/reference/placement/NOTES.md``) and the fix. ``plan`` shows them as
warnings, ``nodeagent check`` as the ``placement`` check's findings. They never block: a profile may have reasons.

The workload behind the figures: 896 MiB written once (cold), then 128 MiB written continuously (hot), on a guest
whose fast node has 1 GiB; "hot on fast" is the share of the hot set on the fast node over the last 20 s of 60.
Figures marked "moving window" come from the benchmark's KV-cache workload (``kvwindow.c``: sequences appending,
their last pages hot, prompts written at once, 1.2 GiB live on the same guest).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...facts import Facts
from ...facts.damon import from_facts as damon_facts
from ...facts.reclaim import from_facts as reclaim_facts
from ...util.dataclass import dataclass
from ...util.vocab import ZONE_RECLAIM_BITS
from ..projection import NodeProjection, project

if TYPE_CHECKING:
    from ...profile import LoadedProfile
    from ...profile.damon import Scheme

TIERING_MODES = (2, 3)  # numa_balancing values with NUMA_BALANCING_MEMORY_TIERING
RECLAIM_WRITE, RECLAIM_UNMAP = 2, 4  # zone_reclaim_mode bits the multi-gen LRU needs both of
FLOOR_DEFAULTS = {"kernel.min_unmapped_ratio": 1, "kernel.min_slab_ratio": 5}  # the kernel's boot values
EVIDENCE_IN_PLACE = (
    "moving window, burst point, 6.12, demotion off, 512 MiB of zram swap, one run each: zone_reclaim_mode 7 (both "
    "floors 0) — the allocating task reclaimed 78344 pages (zone_reclaim_success 1247), 257497 pages were swapped "
    "out while the CXL node had 1.3-1.4 GiB free, the prompts took 59.4 s to write and the window's lowest sample was "
    "0 % on DRAM (p10 16.6 %); zone_reclaim_mode 0: 8.9 s, lowest 62.4 %, p10 74.5 % "
    "(bench/placement/results/kv-explore/s16/probe-swap-*)")


@dataclass(frozen=True)
class Advisory:
    id: str
    where: str  # the profile field it is about
    message: str
    evidence: str
    fix: str

    def render(self) -> str:
        return (f"advisory {self.id}: {self.where}: {self.message}\n      measured: {self.evidence}\n"
                f"      fix: {self.fix}")

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "where": self.where, "message": self.message, "evidence": self.evidence,
                "fix": self.fix}


def fast_nodes(facts: Facts) -> list[int]:
    """The nodes of the top memory tier that have memory."""
    if not facts.tiers:
        return []
    top = next(iter(facts.tiers.values()))
    return [n.id for n in facts.nodes if n.id in top and n.has_memory]


def _young(s: Scheme, matching: bool) -> bool:
    """The scheme excludes pages whose young test gives ``not matching``... i.e. keeps the wanted ones."""
    for f in s.filters:
        if f.type != "young":
            continue
        if not f.allow and f.matching == matching:
            return True  # cold: exclude young (matching true); hot: exclude not-young (matching false)
        if f.allow and f.matching != matching:
            return True  # the same with an allow filter (6.14+)
    return False


def _schemes(loaded: LoadedProfile, facts: Facts) -> list[tuple[str, Scheme, bool]]:
    """(where, scheme, whether its kdamond monitors a fast node) for every scheme of the profile."""
    model = loaded.profile.damon
    fast = set(fast_nodes(facts))
    out = []
    for i, kd in enumerate(model.kdamonds if model else []):
        on_fast = any(t.node == "fast" or t.node in fast for t in kd.targets)
        for j, s in enumerate(kd.schemes):
            out.append((f"damon.kdamonds[{i}] ({kd.name}).schemes[{j}]", s, on_fast))
    return out


def _keeps_fast_nodes_from_filling(loaded: LoadedProfile, demotion: bool,
                                   schemes: list[tuple[str, Scheme, bool]]) -> bool:
    """What makes migrate_hot's missing strictness harmless: the fast node is never left full — the kernel demotes
    under pressure, a migrate_cold scheme on the fast nodes demotes proactively (not gated by system-wide
    watermarks), and a demotion pass unsticks a full node before DAMON starts (the benchmark's after-mode)."""
    proactive = any(s.action == "migrate_cold" and on_fast and (s.watermarks is None or s.watermarks.metric == "none")
                    for _, s, on_fast in schemes)
    return demotion and proactive and loaded.profile.memory.demotion_pass is not None


def _system_free_permil(facts: Facts) -> int | None:
    total = sum(n.mem_total for n in facts.nodes if n.has_memory)
    return round(1000 * sum(n.mem_free for n in facts.nodes if n.has_memory) / total) if total else None


def _node_reclaim_in_place(proj: NodeProjection, facts: Facts, mode: int, swap_kb: int) -> list[Advisory]:
    """Node reclaim with nothing to demote to: it frees the local node in the allocating task — page cache, and
    with bit 4 and swap, anonymous memory — where the allocation would otherwise take another node's free memory.
    Only with demotion on and a lower tier (after the plan: CXL/DAX memory a rule onlines counts) does that
    reclaim move pages to CXL instead. A node with one memory node has no other node to fall back to."""
    if len({n.id for n in facts.nodes if n.has_memory} | set(proj.pending)) < 2:
        return []
    demotion = proj.setting("kernel.demotion_enabled") is True
    lower = bool(proj.slow or proj.pinned)  # a pinned pool's node is a lower tier to the kernel's demotion too
    if demotion and lower:
        return []
    why = ("this node has no lower memory tier to demote to (no CXL or DAX memory online, and no memory.dax rule "
           "brings any online)" if not lower else "demotion is off (kernel.demotion_enabled)")
    frees = ["drops clean page cache (the model files' included)"]
    if mode & RECLAIM_WRITE:
        frees.append("writes dirty pages back")
    if mode & RECLAIM_UNMAP:
        frees.append("unmaps mapped file pages (mmapped weights among them) and " + (
            f"swaps anonymous memory out ({swap_kb // 1024} MiB of swap here)" if swap_kb else
            "would swap anonymous memory out where there is swap"))
    fix = ("leave kernel.zone_reclaim_mode at 0 on nodes without a lower tier (a profile of their own that extends "
           "this one)" if not lower else "set kernel.demotion_enabled: true, or kernel.zone_reclaim_mode: 0")
    return [Advisory(
        "node-reclaim-without-demotion", "kernel.zone_reclaim_mode",
        f"zone_reclaim_mode {mode} turns node reclaim on, and {why}: an allocation that finds a DRAM node at its low "
        f"watermark reclaims that node in its own context — it {', '.join(frees)} — before it may use another "
        "node's free memory",
        EVIDENCE_IN_PLACE, fix)]


def _node_reclaim(proj: NodeProjection, facts: Facts) -> list[Advisory]:
    """Node reclaim (zone_reclaim_mode != 0) that is switched on and can never run on this node, or that runs with
    nothing to demote to (:func:`_node_reclaim_in_place`).

    Two gates in mm/vmscan.c, each enough alone (measured one at a time, moving window, burst point): the
    multi-gen LRU scans nothing for a reclaim that may not both write and unmap (``lru_gen_shrink_node``), and
    ``node_reclaim`` returns before reclaiming while the node's unmapped page cache and its reclaimable slab are
    both under their floors — as on a DRAM node full of anonymous memory."""
    mode = proj.setting("kernel.zone_reclaim_mode")
    if not mode:
        return []
    out: list[Advisory] = []
    missing = [bit for bit in (RECLAIM_WRITE, RECLAIM_UNMAP) if not mode & bit]
    lru = reclaim_facts(facts)
    if not (missing and lru.mglru):  # node reclaim that can run at all
        out.extend(_node_reclaim_in_place(proj, facts, mode, lru.swap_total_kb))
    else:
        names = " and ".join(f"{bit} ({ZONE_RECLAIM_BITS[bit]})" for bit in missing)
        out.append(Advisory(
            "node-reclaim-without-unmap-on-mglru", "kernel.zone_reclaim_mode",
            f"zone_reclaim_mode {mode} lacks {names}: this kernel reclaims through the multi-gen LRU "
            f"(/sys/kernel/mm/lru_gen/enabled {lru.lru_gen:#06x}), which scans nothing for a reclaim that may not "
            "both write dirty pages and unmap mapped ones, so node reclaim fails every time and the allocation "
            "falls back to another node",
            "moving window, burst point, 6.12 with MGLRU: zone_reclaim_mode 5 with both floors at 0 — "
            "zone_reclaim_failed 71540, zone_reclaim_success 0, nothing demoted by it; the window's lowest sample "
            "72.3 % on DRAM (without node reclaim 61.7-78.0 % over 4 runs); mode 7: 88.0-94.6 % over 4 runs, "
            "10688 pages demoted by the allocating task in one (bench/placement/results/kv-explore/s13)",
            f"set kernel.zone_reclaim_mode: {mode | RECLAIM_WRITE | RECLAIM_UNMAP} (or 0 to leave node reclaim off)"))
    floors = {key: (v if (v := proj.setting(key)) is not None else FLOOR_DEFAULTS[key]) for key in FLOOR_DEFAULTS}
    if all(v > 0 for v in floors.values()):
        shown = ", ".join(f"{k.split('.')[1]} {v}" for k, v in floors.items())
        out.append(Advisory(
            "node-reclaim-floors", "kernel.min_unmapped_ratio",
            f"node reclaim is on, but it leaves a node alone while the node's unmapped page cache and its "
            f"reclaimable slab are both under their floors ({shown} % of the node): a DRAM node full of a KV "
            "cache's anonymous memory is under both, so node reclaim never runs there",
            "moving window, burst point, 6.12: zone_reclaim_mode 7 with the default floors — zone_reclaim_success "
            "0, zone_reclaim_failed 0 (never tried), the window's lowest sample 68.5 % on DRAM; with both floors "
            "at 0: 88.0-94.6 % over 4 runs (bench/placement/results/kv-explore/s13)",
            "set kernel.min_unmapped_ratio: 0 and kernel.min_slab_ratio: 0 (or zone_reclaim_mode 0)"))
    return out


def _mglru(proj: NodeProjection) -> bool:
    lru = proj.setting("kernel.lru_gen.enabled")
    return lru is True or lru == "true" or (isinstance(lru, int) and not isinstance(lru, bool) and bool(lru & 1))


def _oom_guard(proj: NodeProjection, facts: Facts, demotion: bool) -> list[Advisory]:
    """MGLRU's OOM trigger (``min_ttl_ms``), judged by whether the node has swap.

    kswapd's ``lru_gen_age_node`` (mm/vmscan.c) invokes the OOM killer when no memory cgroup on the node it
    balances has a generation older than min_ttl — or none is big enough to count. Anonymous memory counts only
    where it can leave the node: to swap, or by demotion to a lower tier. So:

    - with swap, min_ttl_ms 0 under demotion is the thrashing case (demotion counts as reclaim progress, the
      allocator retries, MGLRU's own trigger is off): ``demotion-without-oom-guard``, fix 1000;
    - without swap, a node with nothing to demote to (the lowest tier: the CXL node; every node while demotion is
      off) holds nothing MGLRU counts once its page cache is gone, so with min_ttl_ms above 0 its kswapd invokes
      the OOM killer — for the whole machine — as soon as that node alone falls under its watermarks, while the
      other nodes have room: ``oom-guard-kills-on-a-full-node``, fix 0.

    A kernel without the multi-gen LRU (older than 6.1, or built without it) has neither: no advisory there."""
    lru = reclaim_facts(facts)
    if lru.lru_gen is None or not _mglru(proj):
        return []
    swap_kb = lru.swap_total_kb
    ttl = proj.setting("kernel.lru_gen.min_ttl_ms")
    if swap_kb and demotion and proj.slow and ttl == 0:
        return [Advisory(
            "demotion-without-oom-guard", "kernel.lru_gen.min_ttl_ms",
            f"demotion is on, this node has swap ({swap_kb // 1024} MiB) and reclaim runs through the multi-gen LRU "
            "with min_ttl_ms 0: when DRAM and the lower tier are both full, demotion still counts as reclaim progress, "
            "so the allocator keeps retrying instead of invoking the OOM killer, and MGLRU's own OOM trigger (kswapd, "
            "lru_gen_age_node) is off while min_ttl_ms is 0 — the node thrashes instead of killing a task",
            "reported, not measured here: a linux-cxl thread (October 2025) on a DRAM + CXL node with demotion_enabled "
            "on and min_ttl_ms 0, where the OOM killer was never invoked and the node thrashed",
            "set kernel.lru_gen.min_ttl_ms: 1000 (the working set of the last second is kept; when it cannot be, "
            "kswapd invokes the OOM killer — Documentation/admin-guide/mm/multigen_lru.rst)")]
    memory = {n.id for n in facts.nodes if n.has_memory} | set(proj.pending)
    if swap_kb or not ttl or len(memory) < 2:
        return []
    if demotion and proj.slow:  # the lowest tier's nodes: a middle tier demotes on to the next one
        bottom = max(proj.tier.get(n, 0) for n in proj.slow)
        lowest = sorted(n for n in proj.slow if proj.tier.get(n, 0) == bottom)
    else:
        lowest = sorted(memory)
    nodes = ", ".join(f"node{n}" for n in lowest)
    return [Advisory(
        "oom-guard-kills-on-a-full-node", "kernel.lru_gen.min_ttl_ms",
        f"min_ttl_ms {ttl} on a node without swap: {nodes} {'has' if len(lowest) == 1 else 'have'} nothing to demote "
        "to, so once its page cache is gone the multi-gen LRU counts nothing there as reclaimable, and its kswapd "
        "invokes the OOM killer for the whole machine as soon as that node alone is under its watermarks — a CXL "
        "node full of demoted KV cache kills the serving engine while DRAM has room",
        "6.12 guest (QEMU), the shipped profile with min_ttl_ms 1000, no swap: a process filling the CXL node "
        "(896 MiB, the lowest tier) with its own memory to 5 % free was killed by the OOM killer kswapd2 invoked "
        "(global_oom) while nodes 0 and 1 had 1.8 and 1.9 GiB free; at 0 it held the same memory and lived; "
        "with a tmpfs in its place, every task down to init was killed "
        "(bench/placement/results/min-ttl-full-lower-tier-6.12/anon-fill.txt, console-excerpt.txt)",
        "leave kernel.lru_gen.min_ttl_ms at 0 on nodes without swap (the kernel's default), or add swap")]


def advisories(loaded: LoadedProfile, facts: Facts, proj: NodeProjection | None = None) -> list[Advisory]:
    """Every placement advisory that applies to this profile on this node (with the knob values the node will
    have once the profile's knob changes are made: its projection). Pure."""
    out: list[Advisory] = []
    proj = proj if proj is not None else project(loaded, facts)
    nb = proj.setting("kernel.numa_balancing")
    demotion = proj.setting("kernel.demotion_enabled") is True
    tiering = nb in TIERING_MODES
    schemes = _schemes(loaded, facts)
    hot = [(w, s) for w, s, _ in schemes if s.action == "migrate_hot"]
    cold = [(w, s) for w, s, _ in schemes if s.action == "migrate_cold"]
    kept_roomy = _keeps_fast_nodes_from_filling(loaded, demotion, schemes)
    damon = damon_facts(facts)

    stuck = [n for n in fast_nodes(facts) if reclaim_facts(facts).unreclaimable(n)]
    if stuck and (tiering or demotion) and loaded.profile.memory.demotion_pass is None:
        nodes = ", ".join(f"node{n}" for n in stuck)
        out.append(Advisory(
            "stuck-fast-node", "memory.demotion_pass",
            f"{nodes} filled up while demotion was off and kswapd gave up on it (node_unreclaimable): enabling "
            "demotion and NUMA balancing now demotes and promotes nothing there",
            "numa_balancing=2 + demotion switched on after the fast node filled: 0-26 % of the hot set on the fast "
            "node after 60 s (no more than it held before), no demotion (7 runs, 6.12)",
            "add memory.demotion_pass (a one-off, bounded demotion from the stuck node), or restart the workload"))
    for where, s in hot:
        if not _young(s, matching=False):
            out.append(Advisory(
                "migrate-hot-without-young", f"{where}.filters",
                "migrate_hot decides per region, not per page: without a page-level young filter it keeps moving "
                "the cold pages that share a region with hot ones",
                "DAMON migrate_hot + migrate_cold without young filters: 0.9-2 GiB migrated per minute for a 1 GiB "
                "workload, hot on fast swinging between 75 and 96 %",
                "add filters: [{type: young, matching: false}] (skip pages not accessed since the last check)"))
        strict = damon.has("goal_nid") and any(g.metric == "node_mem_used_bp" for g in (s.quota.goals if s.quota
                                                                                         else []))
        if not strict and not kept_roomy:
            why = (f"this kernel ({facts.kernel_release or 'unknown'}) has no per-node quota goals (6.16)"
                   if not damon.has("goal_nid") else "the scheme has no node_mem_used_bp quota goal")
            out.append(Advisory(
                "migrate-hot-not-strict", f"{where}.action",
                f"migrate_hot's destination is not strict and {why}: when the destination node is full, pages land "
                "on its fallback node (another DRAM node, ignoring the workload's cpuset), where nothing moves them "
                "again",
                "migrate_hot to a full fast node stranded 68-96 % of the hot set on the other DRAM node (6.12); at "
                "boot the result varied by 25 points between runs; with a moving window (damo's recipe, applied to a "
                "running node) 6.1 % of all live pages ended on the other DRAM node",
                "keep the fast node from filling (kernel.demotion_enabled, a migrate_cold scheme on the fast nodes "
                "without watermarks, memory.demotion_pass), or leave promotion to kernel.numa_balancing: "
                "memory-tiering (it allocates on the fast node only); on 6.16+ add a quota goal "
                "{metric: node_mem_used_bp, node: fast, target: 97%}"))
    for where, s in cold:
        if not _young(s, matching=True):
            out.append(Advisory(
                "migrate-cold-without-young", f"{where}.filters",
                "migrate_cold decides per region: without a page-level young filter it demotes the hot pages that "
                "share a region with cold ones",
                "without young filters TPP + DAMON churned 2 GiB in 60 s and kept 84 % of the hot set on the fast "
                "node; with them 97-99 %",
                "add filters: [{type: young, matching: true}] (skip pages accessed since the last check)"))
    for where, s, _ in schemes:
        wm = s.watermarks
        if s.action.startswith("migrate_") and wm is not None and wm.metric == "free_mem_rate":
            rate = _system_free_permil(facts)
            active = rate is not None and wm.low <= rate <= wm.high
            now = "" if rate is None else f"; here it is {rate}‰ now, so the scheme is {'' if active else 'in'}active"
            out.append(Advisory(
                "free-mem-rate-watermarks", f"{where}.watermarks",
                f"free_mem_rate is the free memory of the whole system, not of the fast node: the scheme runs only "
                f"between {wm.low}‰ and {wm.high}‰ of system-wide free memory, whatever the fast node holds{now}",
                "on the benchmark guest (fast node 1 GiB of 3.4 GiB) system free memory stayed above 60 % with the "
                "fast node full: a demote-cold scheme with high 500‰ never ran (0 bytes tried, 17-21 % of cold on CXL)",
                "drop the watermarks (metric: none); on 6.16+ a node_mem_free_bp quota goal targets one node"))
    out.extend(_node_reclaim(proj, facts))
    out.extend(_oom_guard(proj, facts, demotion))
    if demotion and not tiering and not hot:
        out.append(Advisory(
            "demotion-without-promotion", "kernel.numa_balancing",
            "demotion is on but nothing promotes: pages demoted once stay on the slow tier even when they turn hot",
            "only NUMA balancing's memory-tiering mode (or DAMON migrate_hot) moves pages up; with it 100 % of the hot "
            "set reached the fast node",
            "set kernel.numa_balancing: memory-tiering"))
    if tiering and not demotion:
        out.append(Advisory(
            "promotion-without-demotion", "kernel.demotion_enabled",
            "NUMA balancing promotes, but nothing makes room: once the fast node is full, promotions fail and the "
            "kernel backs off its scanning",
            "TPP needs kswapd's demotion to make room (150-200 MiB demoted per run at boot); without it promotion "
            "stops at the first full fast node",
            "set kernel.demotion_enabled: true"))
    if cold and not tiering and not hot:
        out.append(Advisory(
            "damon-demotion-only", "kernel.numa_balancing",
            "DAMON demotes, and nothing brings back the hot pages it demotes by mistake",
            "in a QEMU guest DAMON-only demotion leaked about 0.1 %/s of the hot set to the slow node (0.2 → 6.1 % "
            "in 55 s; the emulator's accessed bits made part of it) and nothing promoted those pages back",
            "set kernel.numa_balancing: memory-tiering (it promotes exactly the pages that turn out hot)"))
    return out
