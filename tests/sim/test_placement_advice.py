"""Placement advisories: each combination measured to fail is named, with evidence and fix — and only then."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from nodeagent.facts import gather
from nodeagent.host import open_host
from nodeagent.kinds.placement.advice import advisories
from nodeagent.profile import load_profile

REPO = Path(__file__).resolve().parents[2]

COLD = "{action: migrate_cold, target_node: slow, access: {nr_accesses: {max: 0}, age: {min: 2s}}%s}"
HOT = "{action: migrate_hot, target_node: fast, access: {nr_accesses: {min: 10%%}}%s}"
YOUNG_COLD = ", filters: [{type: young, matching: true}]"
YOUNG_HOT = ", filters: [{type: young, matching: false}]"
DAX = "dax: [{name: all, match: {all: true}, mode: system-ram, zone: movable}]"
WMARK = ", watermarks: {metric: free_mem_rate, interval: 1s, high: 500, mid: 400, low: 50}"


def ids(tmp_path: Path, root: Path, *, numa: str = "memory-tiering", demotion: bool = True,
        cold: str | None = COLD % YOUNG_COLD, hot: str | None = None, pass_: bool = True,
        kernel: str = "", dax: bool = True) -> list[str]:
    """The advisories' ids for a profile built from the arguments; ``dax``: a rule onlines every DAX device as
    ZONE_MOVABLE system RAM (the CXL stand-in becomes the lower tier), as the shipped profile does."""
    kdamonds = []
    if cold:
        kdamonds.append(f"{{name: demote, targets: [{{node: fast}}], schemes: [{cold}]}}")
    if hot:
        kdamonds.append(f"{{name: promote, targets: [{{node: slow}}], schemes: [{hot}]}}")
    text = textwrap.dedent(f"""\
        apiVersion: nodeagent/v1
        kind: NodeProfile
        metadata: {{name: advice}}
        kernel: {{numa_balancing: {numa}, demotion_enabled: {str(demotion).lower()}{kernel}}}
        memory: {{{', '.join(m for m in (pass_ and 'demotion_pass: {}', dax and DAX) if m)}}}
        damon: {{kdamonds: [{', '.join(kdamonds)}]}}
        """)
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return [a.id for a in advisories(load_profile(path), gather(open_host(root)))]


@pytest.fixture
def node(make_node) -> Path:
    return make_node("qemu-placement")


def with_swap(root: Path, mib: int) -> Path:
    """``root`` with ``mib`` MiB of swap in /proc/meminfo (a swap partition or file: the kernel counts it there)."""
    from nodeagent_sim import SimKernel

    tree = SimKernel(root).tree
    lines = [f"{k}:{' ' * max(1, 16 - len(k) - 1)}{mib * 1024:>8} kB" if k in ("SwapTotal", "SwapFree") else line
             for line in tree.read("/proc/meminfo").splitlines() for k in [line.partition(":")[0]]]
    tree.set("/proc/meminfo", "\n".join(lines) + "\n")
    return root


def test_the_shipped_profile_draws_no_advisory(make_node) -> None:
    """The shipped profile turns demotion on and keeps MGLRU's min_ttl_ms at the kernel's 0 (these nodes have no
    swap: 0 is what keeps kswapd of a full CXL node from killing): no advisory on any of these nodes."""
    for preset, kernel in (("qemu-placement", None), ("qemu-placement-full", None), ("h100-cxl", None),
                           ("qemu-placement", "6.18.0-nodeagent-sim")):
        root = make_node(preset, kernel=kernel)
        found = advisories(load_profile(REPO / "profiles/cxl-inference.yaml"), gather(open_host(root)))
        assert [a.id for a in found] == []


def test_with_swap_demotion_with_mglru_and_no_min_ttl_never_ooms(tmp_path: Path, node: Path) -> None:
    """Swap + demotion on + MGLRU on + min_ttl_ms 0 → the advisory, with the reason and the fix; any of them
    otherwise → none (1000, its fix, draws nothing where there is swap)."""
    swapped = with_swap(node, 512)
    assert ids(tmp_path, swapped) == ["demotion-without-oom-guard"]
    assert ids(tmp_path, swapped, kernel=", lru_gen: {min_ttl_ms: 0}") == ["demotion-without-oom-guard"]
    assert ids(tmp_path, swapped, kernel=", lru_gen: {min_ttl_ms: 1000}") == []
    assert ids(tmp_path, swapped, kernel=", lru_gen: {enabled: false}") == []
    assert ids(tmp_path, swapped, kernel=", lru_gen: {enabled: 6}") == []  # main switch (bit 0) off
    assert "demotion-without-oom-guard" not in ids(tmp_path, swapped, demotion=False)
    path = tmp_path / "p.yaml"
    path.write_text("apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: a}\n"
                    "kernel: {numa_balancing: memory-tiering, demotion_enabled: true}\n"
                    "memory: {dax: [{name: all, match: {all: true}, mode: system-ram, zone: movable}]}\n")
    (a,) = [a for a in advisories(load_profile(path), gather(open_host(swapped)))
            if a.id == "demotion-without-oom-guard"]
    assert a.where == "kernel.lru_gen.min_ttl_ms"
    assert "lru_gen_age_node" in a.message and "reclaim progress" in a.message and "512 MiB" in a.message
    assert "linux-cxl" in a.evidence and "min_ttl_ms: 1000" in a.fix


def test_without_swap_a_min_ttl_kills_when_the_lowest_tier_fills(tmp_path: Path, node: Path, make_node) -> None:
    """No swap + MGLRU on + min_ttl_ms above 0 → the other advisory: the node with nothing to demote to (the CXL
    node, under demotion; every node without it) kills once it alone fills. At 0, or with swap, or MGLRU off, or
    one memory node: none."""
    assert ids(tmp_path, node, kernel=", lru_gen: {min_ttl_ms: 1000}") == ["oom-guard-kills-on-a-full-node"]
    assert ids(tmp_path, node, kernel=", lru_gen: {min_ttl_ms: 1}") == ["oom-guard-kills-on-a-full-node"]
    assert ids(tmp_path, node) == [] and ids(tmp_path, node, kernel=", lru_gen: {min_ttl_ms: 0}") == []
    assert ids(tmp_path, node, kernel=", lru_gen: {enabled: false, min_ttl_ms: 1000}") == []
    assert ids(tmp_path, with_swap(make_node("qemu-placement"), 64), kernel=", lru_gen: {min_ttl_ms: 1000}") == []
    path = tmp_path / "p.yaml"
    path.write_text("apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: a}\n"
                    "kernel: {numa_balancing: memory-tiering, demotion_enabled: true, lru_gen: {min_ttl_ms: 1000}}\n"
                    "memory: {dax: [{name: all, match: {all: true}, mode: system-ram, zone: movable}]}\n")
    facts = gather(open_host(node))
    (a,) = [a for a in advisories(load_profile(path), facts) if a.id == "oom-guard-kills-on-a-full-node"]
    assert a.where == "kernel.lru_gen.min_ttl_ms" and "min_ttl_ms 1000" in a.message
    named = re.search(r"without swap: (.*?) ha(?:s|ve) nothing to demote to", a.message)
    assert named and named.group(1) == "node2"  # the CXL stand-in; the DRAM nodes demote to it
    assert "global_oom" in a.evidence and "at 0 it held the same memory and lived" in a.evidence
    where, files = a.evidence.rsplit("(", 1)[1].rstrip(")").rsplit("/", 1)
    assert all((REPO / where / f).is_file() for f in files.split(", ")), a.evidence
    assert "at 0" in a.fix
    # demotion off: no node has anything to demote to, so every memory node is named
    path.write_text(path.read_text().replace("demotion_enabled: true", "demotion_enabled: false"))
    (a,) = [a for a in advisories(load_profile(path), facts) if a.id == "oom-guard-kills-on-a-full-node"]
    named = re.search(r"without swap: (.*?) ha(?:s|ve) nothing to demote to", a.message)
    assert named and named.group(1) == "node0, node1, node2"  # node2 comes online by the profile's DAX rule


def test_no_oom_guard_advisory_without_a_lower_tier_or_without_mglru(tmp_path: Path, make_node) -> None:
    path = tmp_path / "p.yaml"
    for kernel in ("{demotion_enabled: true}", "{demotion_enabled: true, lru_gen: {min_ttl_ms: 1000}}"):
        path.write_text(f"apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {{name: a}}\nkernel: {kernel}\n")
        for root in (make_node("l40-kvm64"), make_node("workstation")):  # one NUMA node: nothing to demote to
            found = [a.id for a in advisories(load_profile(path), gather(open_host(root)))]
            assert "demotion-without-oom-guard" not in found and "oom-guard-kills-on-a-full-node" not in found


def test_tpp_with_damon_demotion_and_young_filters_is_clean(tmp_path: Path, node: Path) -> None:
    assert ids(tmp_path, node) == []


def test_filters_missing_on_either_direction(tmp_path: Path, node: Path) -> None:
    assert ids(tmp_path, node, cold=COLD % "") == ["migrate-cold-without-young"]
    assert ids(tmp_path, node, hot=HOT % "") == ["migrate-hot-without-young"]
    # the matching that excludes the wrong pages is no protection
    assert ids(tmp_path, node, hot=HOT % YOUNG_COLD) == ["migrate-hot-without-young"]
    assert ids(tmp_path, node, hot=HOT % YOUNG_HOT) == []


def test_migrate_hot_is_only_safe_when_the_fast_node_is_kept_roomy(tmp_path: Path, node: Path) -> None:
    assert ids(tmp_path, node, hot=HOT % YOUNG_HOT, pass_=False) == ["migrate-hot-not-strict"]
    assert ids(tmp_path, node, hot=HOT % YOUNG_HOT, cold=None) == ["migrate-hot-not-strict"]
    assert set(ids(tmp_path, node, hot=HOT % YOUNG_HOT, cold=COLD % (YOUNG_COLD + WMARK))) == \
        {"migrate-hot-not-strict", "free-mem-rate-watermarks"}


def test_system_wide_watermarks_say_whether_the_scheme_would_run_now(tmp_path: Path, node: Path) -> None:
    path = tmp_path / "p.yaml"
    ids(tmp_path, node, cold=COLD % (YOUNG_COLD + WMARK))
    (advice,) = advisories(load_profile(path), gather(open_host(node)))
    assert advice.id == "free-mem-rate-watermarks" and "so the scheme is inactive" in advice.message
    assert "never ran" in advice.evidence and "metric: none" in advice.fix


def test_one_direction_only(tmp_path: Path, node: Path) -> None:
    assert ids(tmp_path, node, numa="disabled", cold=None) == ["demotion-without-promotion"]
    assert ids(tmp_path, node, demotion=False, cold=None, pass_=False) == ["promotion-without-demotion"]
    assert ids(tmp_path, node, numa="disabled", demotion=False, pass_=False) == ["damon-demotion-only"]
    assert ids(tmp_path, node, numa="disabled", hot=HOT % YOUNG_HOT) == []  # DAMON promotes, TPP does not


def test_a_stuck_node_without_a_pass(tmp_path: Path, make_node) -> None:
    full = make_node("qemu-placement-full")
    assert ids(tmp_path, full, pass_=False) == ["stuck-fast-node"]
    assert ids(tmp_path, full) == []


FLOORS_0 = ", min_unmapped_ratio: 0, min_slab_ratio: 0"


@pytest.mark.parametrize("kernel,expected", [
    ("", []),  # node reclaim off: nothing to say
    (", zone_reclaim_mode: 0", []),
    (", zone_reclaim_mode: 1", ["node-reclaim-without-unmap-on-mglru", "node-reclaim-floors"]),
    (", zone_reclaim_mode: 7", ["node-reclaim-floors"]),  # the floors at the kernel's boot values, 1 and 5
    (", zone_reclaim_mode: 7, min_slab_ratio: 0", []),  # both floors must hold to gate: any slab lets it run
    (", zone_reclaim_mode: 7, min_unmapped_ratio: 0", []),  # any page cache now lets it run
    (", zone_reclaim_mode: 7" + FLOORS_0, []),
    (", zone_reclaim_mode: 5" + FLOORS_0, ["node-reclaim-without-unmap-on-mglru"]),  # measured: fails every time
    (", zone_reclaim_mode: 3" + FLOORS_0, ["node-reclaim-without-unmap-on-mglru"]),
])
def test_node_reclaim_that_can_never_run(tmp_path: Path, node: Path, kernel: str, expected: list[str]) -> None:
    assert ids(tmp_path, node, kernel=kernel) == expected


def test_node_reclaim_advice_names_the_missing_bits_and_the_fix(tmp_path: Path, node: Path) -> None:
    ids(tmp_path, node, kernel=", zone_reclaim_mode: 5" + FLOORS_0)
    (advice,) = advisories(load_profile(tmp_path / "p.yaml"), gather(open_host(node)))
    assert "lacks 2 (write-dirty)" in advice.message and "0x0007" in advice.message
    assert "zone_reclaim_failed" in advice.evidence and "kernel.zone_reclaim_mode: 7" in advice.fix
    ids(tmp_path, node, kernel=", zone_reclaim_mode: 1, min_unmapped_ratio: 0, min_slab_ratio: 0")
    (advice,) = advisories(load_profile(tmp_path / "p.yaml"), gather(open_host(node)))
    assert "lacks 2 (write-dirty) and 4 (unmap)" in advice.message


def test_without_the_multi_gen_lru_node_reclaim_needs_no_unmap(tmp_path: Path, make_node) -> None:
    """The classic LRU reclaims clean unmapped page cache with zone_reclaim_mode 1: only the floors matter."""
    old = make_node("qemu-placement", kernel="5.15.0-nodeagent-sim")  # before the multi-gen LRU (6.1)
    assert not (old / "sys/kernel/mm/lru_gen/enabled").exists()
    assert ids(tmp_path, old, kernel=", zone_reclaim_mode: 1" + FLOORS_0) == []
    off = make_node("qemu-placement")
    lru = off / "sys/kernel/mm/lru_gen/enabled"
    lru.unlink()
    lru.write_text("0x0000\n")  # built in, switched off (echo n > enabled)
    assert ids(tmp_path, off, kernel=", zone_reclaim_mode: 1" + FLOORS_0) == []
    assert ids(tmp_path, off, kernel=", zone_reclaim_mode: 1") == ["node-reclaim-floors"]


def test_node_reclaim_with_nothing_to_demote_to(make_node) -> None:
    """The shipped profile on a two-socket server without CXL: node reclaim frees socket 0 in place (page cache,
    and with swap anonymous memory) where the allocation would have taken socket 1's free memory."""
    root = make_node("hgx-h100")
    (advice,) = advisories(load_profile(REPO / "profiles/cxl-inference.yaml"), gather(open_host(root)))
    assert advice.id == "node-reclaim-without-demotion" and advice.where == "kernel.zone_reclaim_mode"
    assert "no lower memory tier" in advice.message and "8192 MiB of swap" in advice.message
    assert "writes dirty pages back" in advice.message and "unmaps mapped file pages" in advice.message
    assert "zone_reclaim_mode at 0 on nodes without a lower tier" in advice.fix
    # one memory node: no other node to fall back to, nothing to say
    assert advisories(load_profile(REPO / "profiles/cxl-inference.yaml"), gather(open_host(make_node("workstation")))) \
        == []


def test_node_reclaim_with_demotion_off(tmp_path: Path, node: Path) -> None:
    got = ids(tmp_path, node, demotion=False, kernel=", zone_reclaim_mode: 7" + FLOORS_0)
    assert "node-reclaim-without-demotion" in got
    advice = next(a for a in advisories(load_profile(tmp_path / "p.yaml"), gather(open_host(node)))
                  if a.id == "node-reclaim-without-demotion")
    assert "demotion is off" in advice.message and "kernel.demotion_enabled: true" in advice.fix
    assert "would swap anonymous memory out where there is swap" in advice.message  # this guest has no swap
    # the same node without the rule that onlines its CXL stand-in: no lower tier at all
    assert "node-reclaim-without-demotion" in ids(tmp_path, node, dax=False, kernel=", zone_reclaim_mode: 7" + FLOORS_0)
    (advice,) = advisories(load_profile(tmp_path / "p.yaml"), gather(open_host(node)))
    assert "no lower memory tier" in advice.message
    # mode 1 (no write, no unmap) on the multi-gen LRU never reclaims: only that is said
    got = ids(tmp_path, node, demotion=False, kernel=", zone_reclaim_mode: 1" + FLOORS_0)
    assert "node-reclaim-without-demotion" not in got and "node-reclaim-without-unmap-on-mglru" in got


def test_without_swap_the_kill_is_the_lowest_tiers_only(tmp_path: Path, node: Path) -> None:
    """Under demotion a middle tier demotes on to the next one, so only the nodes of the lowest tier are named."""
    from dataclasses import replace

    from nodeagent.kinds.projection import project

    path = tmp_path / "p.yaml"
    path.write_text("apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: a}\n"
                    "kernel: {numa_balancing: memory-tiering, demotion_enabled: true, lru_gen: {min_ttl_ms: 1000}}\n"
                    "memory: {dax: [{name: all, match: {all: true}, mode: system-ram, zone: movable}]}\n")
    loaded, facts = load_profile(path), gather(open_host(node))
    proj = project(loaded, facts)
    assert proj.slow == (2,)

    def named(tier5: int) -> str:
        three = replace(proj, slow=(2, 5), tier={**proj.tier, 5: tier5})
        (a,) = [a for a in advisories(loaded, facts, three) if a.id == "oom-guard-kills-on-a-full-node"]
        got = re.search(r"without swap: (.*?) ha(?:s|ve) nothing to demote to", a.message)
        assert got
        return got.group(1)

    assert named(proj.tier[2] + 1) == "node5"  # node5 below node2: node2 demotes to it
    assert named(proj.tier[2]) == "node2, node5"  # one tier
