"""numa_maps and memory.numa_stat parsing, on output captured from a real kernel and the kernel's documented format."""

from __future__ import annotations

from pathlib import Path

from nodeagent.serving.verify import parse_numa_maps, parse_numa_stat

DATA = Path(__file__).parent.parent / "data" / "numa_maps"


def test_numa_maps_of_a_bound_mlocked_pool_captured_on_a_real_kernel() -> None:
    vmas = parse_numa_maps((DATA / "bind0-mlock64M-6.18.44.txt").read_text())
    pool = [v for v in vmas if v.policy.startswith("bind")]
    assert len(pool) == 1
    (v,) = pool
    assert v.policy == "bind:0" and v.policy_nodes == (0,)
    assert v.pages == {0: 16384} and v.page_size == 4096 and v.anon == 16384
    assert v.bytes_per_node == {0: 64 * 1024**2} and v.is_anon
    # file mappings, the heap and the stack are all read; a private file page copied on write counts as anon
    kinds = {x.kind for x in vmas}
    assert {"file", "heap", "stack"} <= kinds
    libs = [x for x in vmas if x.kind == "file" and x.path and x.path.endswith(".so.2")]
    assert libs and all(x.policy == "default" for x in libs)
    assert any(not x.pages for x in vmas)  # a mapping with no page yet: address and policy only


def test_numa_maps_policies_of_two_words_and_flags() -> None:
    text = ("7f0000000000 prefer (many):2-3 anon=512 dirty=512 N2=500 N0=12 kernelpagesize_kB=4\n"
            "7f1000000000 interleave:0-1 anon=4 dirty=4 N0=2 N1=2 kernelpagesize_kB=4\n"
            "7f2000000000 bind=static:2 anon=2 dirty=2 N2=2 kernelpagesize_kB=2048\n"
            "garbage line\n")
    a, b, c = parse_numa_maps(text)
    assert a.policy == "prefer (many):2-3" and a.policy_nodes == (2, 3) and a.pages == {2: 500, 0: 12}
    assert b.policy_nodes == () and b.pages == {0: 2, 1: 2}
    assert c.page_size == 2 * 1024**2 and c.bytes_per_node == {2: 4 * 1024**2}


def test_numa_stat_per_item_and_node() -> None:
    # Documentation/admin-guide/cgroup-v2.rst: "<item> N0=<bytes> N1=<bytes> ..."
    stat = parse_numa_stat("anon N0=4096 N1=0 N2=8192\nfile N0=1 N1=2 N2=3\nunevictable N0=0 N1=0 N2=8192\n")
    assert stat["anon"] == {0: 4096, 1: 0, 2: 8192}
    assert stat["unevictable"][2] == 8192


RK = Path(__file__).parent.parent / "realkernel" / "captured"


def test_guest_capture_of_a_pool_placed_as_rendered() -> None:
    """Captured by tests/realkernel/test_serving_guest.py on the 6.12 guest: a 512 MiB mlocked pool under
    set_mempolicy(MPOL_BIND, node2), node2 a kmem node onlined in ZONE_NORMAL."""
    from nodeagent_sim.serving import NUMA_STAT_ITEMS

    vmas = parse_numa_maps((RK / "numa_maps-kvpool-bind2.txt").read_text())
    assert vmas and all(v.policy == "bind:2" for v in vmas)  # the process-wide policy shows on every mapping
    (pool,) = [v for v in vmas if sum(v.pages.values()) >= 131072]
    assert pool.pages == {2: 131072} and pool.is_anon and pool.policy_nodes == (2,)
    # the interpreter's own pages from before the policy, and shared page cache, sit on node0
    assert any(0 in v.pages for v in vmas if v is not pool)
    stat = parse_numa_stat((RK / "memory.numa_stat-kvpool.txt").read_text())
    assert stat["anon"][2] == 512 * 1024**2 and stat["unevictable"][2] == 512 * 1024**2
    assert tuple(stat) == NUMA_STAT_ITEMS  # the simulator prints the items the kernel prints, in its order
