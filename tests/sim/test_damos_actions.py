"""DAMOS actions that migrate nothing move their statistics with the simulated memory too (issue 48).

``pageout`` reclaims cold in-use pages to swap (nothing where there is no swap), ``lru_prio``/``lru_deprio``
re-sort the in-use pages they pass and move nothing, ``stat`` only counts, and the actions ``paddr`` does not
implement are tried and apply nothing; ``vaddr`` address space, which the simulator places on no node, holds no
page an action could apply to."""

from __future__ import annotations

from nodeagent_sim import SimKernel
from nodeagent_sim.memory import block_size, touch, usage

from .test_memory_moves import PAGE, K, MiB, kdamond, meminfo, node_range, vmstat

S = f"{K}/0/contexts/0/schemes/0"


def stats(k: SimKernel, names: tuple[str, ...] = ("nr_tried", "sz_tried", "nr_applied", "sz_applied",
                                                 "qt_exceeds")) -> dict[str, int]:
    return {n: int(k.tree.read(f"{S}/stats/{n}")) for n in names}


def node_usage(k: SimKernel, node: int) -> tuple[int, int, int]:
    """(total, used, hot) bytes of ``node`` as the simulator holds them."""
    return tuple(x * 1024 for x in usage(k.state(), block_size(k) // 1024, node))  # type: ignore[return-value]


def staged(k: SimKernel, action: str, node: int, quota: int, accesses: tuple[int, int] | None = None) -> None:
    """kdamond 0 over ``node`` with one ``action`` scheme (access pattern ``accesses``), running."""
    if k.tree.read(f"{K}/nr_kdamonds") == "1" and k.tree.read(f"{K}/0/state") == "on":
        k.write(f"{K}/0/state", "off")
    k.write(f"{K}/nr_kdamonds", "1")
    kdamond(k, 0, action, node, -1, quota)
    if accesses is not None:
        for name, v in zip(("min", "max"), accesses, strict=True):
            k.write(f"{S}/access_pattern/nr_accesses/{name}", str(v))
        k.write(f"{K}/0/state", "commit")


def refresh(k: SimKernel) -> None:
    k.write(f"{K}/0/state", "update_schemes_stats")


def test_pageout_reclaims_cold_pages_to_swap(make_node) -> None:
    k = SimKernel(make_node("hgx-h100", kernel="6.12.0-nodeagent-sim"))  # 8 GiB of swap
    touch(k, 1, 64 * 1024)  # kB: the workload's hot pages on node 1 stay
    total, used, hot = node_usage(k, 1)
    assert used > hot > 0
    before = vmstat(k)
    swap_free = meminfo_kb(k, "SwapFree")
    staged(k, "pageout", 1, 256 * MiB)
    refresh(k)
    st = stats(k)
    assert st["sz_tried"] == 256 * MiB and 0 < st["sz_applied"] <= st["sz_tried"]
    cold_share = (used - hot) * st["sz_tried"] // total  # the in-use cold pages of what was tried
    assert st["sz_applied"] == cold_share - cold_share % PAGE
    assert 1 <= st["nr_applied"] <= st["nr_tried"]
    _, used2, hot2 = node_usage(k, 1)
    assert (used - used2, hot2) == (st["sz_applied"], hot)  # reclaimed, not moved; the hot pages stayed
    assert meminfo(k, 1)["MemUsed"] == used2
    assert meminfo_kb(k, "SwapFree") * 1024 == swap_free * 1024 - st["sz_applied"]
    after = vmstat(k)
    assert after["pswpout"] - before.get("pswpout", 0) == st["sz_applied"] // PAGE
    assert after.get("pgmigrate_success", 0) == before.get("pgmigrate_success", 0)  # reclaim_pages never demotes


def test_pageout_stops_when_swap_is_full(make_node) -> None:
    k = SimKernel(make_node("hgx-h100", kernel="6.12.0-nodeagent-sim"))
    staged(k, "pageout", 0, 0)  # no quota: every cold page of node 0 is tried at once
    refresh(k)
    st = stats(k)
    assert st["sz_applied"] == 8 * 1024**3 < st["sz_tried"]  # 8 GiB of swap, then nothing more fits
    assert meminfo_kb(k, "SwapFree") == 0
    refresh(k)
    assert stats(k)["sz_applied"] == st["sz_applied"]


def test_pageout_without_swap_applies_nothing(make_node) -> None:
    k = SimKernel(make_node("qemu-3node"))
    _, used, _ = node_usage(k, 0)
    before = vmstat(k)
    staged(k, "pageout", 0, 64 * MiB)
    refresh(k)
    st = stats(k)
    assert used > 0 and st["sz_tried"] == 64 * MiB and st["nr_tried"] > 0
    assert (st["nr_applied"], st["sz_applied"]) == (0, 0)
    assert node_usage(k, 0)[1] == used and vmstat(k).get("pswpout", 0) == before.get("pswpout", 0)


def test_lru_actions_sort_the_pages_they_match_and_move_nothing(make_node) -> None:
    k = SimKernel(make_node("qemu-3node"))
    touch(k, 0, 32 * 1024)
    total, used, hot = node_usage(k, 0)
    start, end = node_range(k, 0)
    before = (meminfo(k, 0), vmstat(k))
    staged(k, "lru_deprio", 0, 16 * MiB, accesses=(0, 0))  # cold regions
    refresh(k)
    st = stats(k)
    # one refresh is a pass over every matched region: the cold pages and the free memory beside them
    assert st["sz_tried"] == (end - start) - hot - (end - start - total)
    assert st["sz_applied"] == used - hot and st["qt_exceeds"] == 1
    staged(k, "lru_prio", 0, 0, accesses=(1, 20))  # hot regions
    refresh(k)
    st = stats(k)
    assert st["sz_tried"] == st["sz_applied"] == hot and st["qt_exceeds"] == 0
    assert (meminfo(k, 0), vmstat(k)) == before


def test_stat_counts_and_applies_nothing(make_node) -> None:
    k = SimKernel(make_node("qemu-3node", kernel="6.18.0-nodeagent-sim"))
    total, used, _ = node_usage(k, 0)
    staged(k, "stat", 0, 0, accesses=(0, 20))  # every region
    refresh(k)
    st = stats(k, ("nr_tried", "sz_tried", "nr_applied", "sz_applied", "sz_ops_filter_passed"))
    assert st["sz_tried"] == total and st["nr_tried"] > 0
    # damon_pa_stat looks at pages only for a scheme with filters
    assert st["nr_applied"] == st["sz_applied"] == st["sz_ops_filter_passed"] == 0
    layer = "ops_filters" if k.tree.exists(f"{S}/ops_filters") else "filters"
    k.write(f"{S}/{layer}/nr_filters", "1")
    k.write(f"{S}/{layer}/0/type", "anon")
    k.write(f"{K}/0/state", "commit")
    refresh(k)
    st2 = stats(k, ("sz_applied", "sz_ops_filter_passed"))
    assert st2["sz_applied"] == 0 and st2["sz_ops_filter_passed"] == used - used % PAGE


def test_actions_paddr_lacks_and_vaddr_targets_apply_nothing(make_node) -> None:
    k = SimKernel(make_node("qemu-3node"))
    staged(k, "hugepage", 0, 0, accesses=(0, 20))
    refresh(k)
    st = stats(k)
    assert st["sz_tried"] > 0 and st["sz_applied"] == 0
    k.write(f"{K}/0/state", "off")
    k.write(f"{K}/0/contexts/0/operations", "vaddr")
    k.write(f"{K}/0/contexts/0/targets/0/pid_target", "1")
    k.write(f"{S}/action", "pageout")
    k.write(f"{K}/0/state", "on")
    refresh(k)
    st = stats(k)
    assert st["sz_tried"] > 0 and st["sz_applied"] == st["nr_applied"] == 0


def meminfo_kb(k: SimKernel, key: str) -> int:
    for line in k.tree.read("/proc/meminfo").splitlines():
        name, _, value = line.partition(":")
        if name == key:
            return int(value.split()[0])
    raise KeyError(key)
