"""The simulated memory and its statistics move together: DAMON's tried/applied bytes, the vmstat promotion and
demotion counters and the nodes' meminfo (issue 48, item 3).

Whatever time does to a simulated node — NUMA balancing promoting, kswapd or proactive reclaim demoting, DAMON
schemes migrating — each node's used and free memory add up to its total, migration neither makes nor loses
memory, the counters grow by exactly the pages that moved, and nothing moves out of a node that holds nothing."""

from __future__ import annotations

import os
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nodeagent_sim import SimKernel
from nodeagent_sim import dax as simdax
from nodeagent_sim.memory import touch
from nodeagent_sim.vmstat import migrate

NODE = "/sys/devices/system/node"
K = "/sys/kernel/mm/damon/admin/kdamonds"
PAGE = 4096
MiB = 1024**2


def meminfo(k: SimKernel, node: int) -> dict[str, int]:
    text = k.tree.read(f"{NODE}/node{node}/meminfo")
    return {m.group(1): int(m.group(2)) * 1024 for m in re.finditer(r"Node \d+ (\w+):\s+(\d+) kB", text)}


def vmstat(k: SimKernel, path: str = "/proc/vmstat") -> dict[str, int]:
    return {key: int(v) for key, _, v in (line.partition(" ") for line in k.tree.read(path).splitlines())}


def node_range(k: SimKernel, node: int) -> tuple[int, int]:
    bs = int(k.tree.read("/sys/devices/system/memory/block_size_bytes"), 16)
    ids = sorted(int(n[6:]) for n in os.listdir(k.tree.local(f"{NODE}/node{node}")) if re.fullmatch(r"memory\d+", n))
    return ids[0] * bs, (ids[-1] + 1) * bs


def kdamond(k: SimKernel, i: int, action: str, src: int, dst: int, quota: int) -> None:
    """A running paddr kdamond over node ``src`` with one ``action`` scheme towards ``dst``, as a tool writes it."""
    c, s = f"{K}/{i}/contexts/0", f"{K}/{i}/contexts/0/schemes/0"
    start, end = node_range(k, src)
    for path, value in [(f"{K}/{i}/contexts/nr_contexts", "1"), (f"{c}/operations", "paddr"),
                        (f"{c}/monitoring_attrs/nr_regions/min", "10"), (f"{c}/targets/nr_targets", "1"),
                        (f"{c}/targets/0/regions/nr_regions", "1"), (f"{c}/targets/0/regions/0/start", str(start)),
                        (f"{c}/targets/0/regions/0/end", str(end)), (f"{c}/schemes/nr_schemes", "1"),
                        (f"{s}/action", action), (f"{s}/target_nid", str(dst)), (f"{s}/quotas/bytes", str(quota))]:
        k.write(path, value)
    k.write(f"{K}/{i}/state", "on")


def stats(k: SimKernel, i: int) -> dict[str, int]:
    base = f"{K}/{i}/contexts/0/schemes/0/stats"
    return {n: int(k.tree.read(f"{base}/{n}")) for n in ("nr_tried", "sz_tried", "nr_applied", "sz_applied")}


def tiered_node(make_node) -> SimKernel:
    """qemu-3node with its pmem online as node 2 and demotion on; kdamond 0 demotes node 0's cold pages to node 2
    (64 MiB a quota interval), kdamond 1 promotes node 2's hot pages to node 0 (32 MiB)."""
    k = SimKernel(make_node("qemu-3node"))
    simdax.to_system_ram(k, "dax0.0", "Movable")
    k.write("/sys/kernel/mm/numa/demotion_enabled", "true")
    k.write(f"{K}/nr_kdamonds", "2")
    kdamond(k, 0, "migrate_cold", 0, 2, 64 * MiB)
    kdamond(k, 1, "migrate_hot", 2, 0, 32 * MiB)
    return k


def test_a_node_holding_nothing_migrates_nothing(make_node) -> None:
    k = tiered_node(make_node)
    assert meminfo(k, 2)["MemUsed"] == 0
    used0 = meminfo(k, 0)["MemUsed"]
    k.write(f"{K}/1/state", "update_schemes_stats")
    hot = stats(k, 1)
    assert hot == {"nr_tried": 0, "sz_tried": 0, "nr_applied": 0, "sz_applied": 0}  # no page to try, none moved
    k.write(f"{K}/0/state", "update_schemes_stats")
    cold = stats(k, 0)
    # The quota is charged by the bytes tried, free memory included; what moved are node 0's cold pages in them.
    assert cold["sz_tried"] == 64 * MiB and 0 < cold["sz_applied"] < cold["sz_tried"]
    assert meminfo(k, 0)["MemUsed"] == used0 - cold["sz_applied"]
    assert meminfo(k, 2)["MemUsed"] == cold["sz_applied"]
    # The pages it demoted are cold: migrate_hot finds nothing to bring back.
    k.write(f"{K}/1/state", "update_schemes_stats")
    assert stats(k, 1)["sz_applied"] == 0 and meminfo(k, 2)["MemUsed"] == cold["sz_applied"]


def test_a_full_destination_refuses_what_does_not_fit(make_node) -> None:
    k = tiered_node(make_node)
    free2 = meminfo(k, 2)["MemFree"]
    before = vmstat(k)
    # Node 0 fills with cold pages beyond what node 2 could take; no quota: every cold page is tried at once.
    from nodeagent_sim.reclaim import fill

    fill(k, 0, 64 * 1024, stuck=False)  # kB
    k.write(f"{K}/0/contexts/0/schemes/0/quotas/bytes", "0")
    k.write(f"{K}/0/state", "commit")
    k.write(f"{K}/0/state", "update_schemes_stats")
    cold = stats(k, 0)
    assert cold["sz_applied"] == free2 < cold["sz_tried"]  # applied < tried: the rest stayed on node 0
    assert meminfo(k, 2)["MemFree"] == 0
    after = vmstat(k)
    assert after["pgmigrate_success"] - before.get("pgmigrate_success", 0) == free2 // PAGE
    assert after["pgmigrate_fail"] - before.get("pgmigrate_fail", 0) > 0


STEP = st.one_of(
    st.tuples(st.just("promote"), st.sampled_from([1, 2]), st.integers(0, 300 * MiB // PAGE)),
    st.tuples(st.just("kswapd"), st.sampled_from([0, 1]), st.integers(0, 300 * MiB // PAGE)),
    st.tuples(st.just("damon"), st.sampled_from([0, 1]), st.just(0)),
    st.tuples(st.just("reclaim"), st.just(0), st.integers(1, 256)),
    st.tuples(st.just("touch"), st.sampled_from([0, 1, 2]), st.integers(-64, 64)),
)


def test_any_sequence_of_steps_keeps_memory_and_counters_together(make_node) -> None:
    k = tiered_node(make_node)
    nodes = (0, 1, 2)
    system_used = sum(meminfo(k, n)["MemUsed"] for n in nodes)

    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(STEP, min_size=1, max_size=6))
    def run(steps: list[tuple[str, int, int]]) -> None:
        for what, node, amount in steps:
            used = {n: meminfo(k, n)["MemUsed"] for n in nodes}
            vm = vmstat(k)
            per_node = {n: vmstat(k, f"{NODE}/node{n}/vmstat") for n in nodes}
            applied = {i: stats(k, i)["sz_applied"] for i in (0, 1)}
            tried = {i: stats(k, i)["sz_tried"] for i in (0, 1)}
            if what == "promote":
                migrate(k, 2, 0 if node == 2 else 1, amount, "promote")
            elif what == "kswapd":
                migrate(k, node, 2, amount, "kswapd")
            elif what == "damon":
                k.write(f"{K}/{node}/state", "update_schemes_stats")
            elif what == "reclaim":
                try:
                    k.write("/sys/fs/cgroup/memory.reclaim", f"{amount}M")
                except OSError:
                    pass  # EAGAIN: less than asked could be demoted (what was is counted)
            else:
                touch(k, node, amount * 1024)
            now = {n: meminfo(k, n) for n in nodes}
            for n in nodes:
                assert now[n]["MemUsed"] + now[n]["MemFree"] == now[n]["MemTotal"], (what, n)
            assert sum(now[n]["MemUsed"] for n in nodes) == system_used  # migration makes and loses nothing
            left = {n: max(used[n] - now[n]["MemUsed"], 0) for n in nodes}  # bytes each node gave away
            vm2 = vmstat(k)
            moved = sum(left.values())
            assert (vm2["pgmigrate_success"] - vm.get("pgmigrate_success", 0)) * PAGE == moved
            demoted = sum(vm2.get(key, 0) - vm.get(key, 0) for key in vm2 if key.startswith("pgdemote_"))
            promoted = vm2.get("pgpromote_success", 0) - vm.get("pgpromote_success", 0)
            if what in ("kswapd", "reclaim"):
                assert demoted * PAGE == moved and promoted == 0
                for n in nodes:  # per node (6.9+): on the node the pages left
                    d = sum(v - per_node[n].get(key, 0) for key, v in vmstat(k, f"{NODE}/node{n}/vmstat").items()
                            if key.startswith("pgdemote_"))
                    assert d * PAGE == left[n]
            elif what == "promote":
                assert promoted * PAGE == moved and demoted == 0
                dst = 0 if node == 2 else 1
                n_vm = vmstat(k, f"{NODE}/node{dst}/vmstat")
                assert (n_vm["pgpromote_success"] - per_node[dst]["pgpromote_success"]) * PAGE == moved
            else:  # DAMON's migrations are neither promotions nor demotions in vmstat (MR_DAMON)
                assert demoted == 0 and promoted == 0
            if what == "damon":
                s = stats(k, node)
                src = 0 if node == 0 else 2
                assert s["sz_applied"] - applied[node] == moved == left[src]
                assert s["sz_applied"] - applied[node] <= s["sz_tried"] - tried[node]
                assert s["sz_applied"] - applied[node] <= used[src]  # bounded by what the source held

    run()
