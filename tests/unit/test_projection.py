"""The node's projection after the earlier kinds (nodeagent.kinds.projection): one answer for DAMON, placement,
checks."""

from __future__ import annotations

from pathlib import Path

from nodeagent_sim import SimKernel, hotplug
from nodeagent_sim import dax as simdax

from nodeagent.facts import gather
from nodeagent.host import open_host
from nodeagent.kinds.damon.nodes import NodeClasses, classes
from nodeagent.kinds.projection import project
from nodeagent.profile import load_profile

REPO = Path(__file__).resolve().parents[2]
TIERED = load_profile(REPO / "profiles" / "cxl-inference.yaml")
POOL = load_profile(REPO / "profiles" / "cxl-kv-pool.yaml")
BASE = load_profile(REPO / "profiles" / "base.yaml")


def test_kmem_bound_offline_devices_are_future_slow_nodes_with_their_block_ranges(make_node) -> None:
    root = make_node("h100-cxl")
    hotplug.boot(SimKernel(root), "offline")
    facts = gather(open_host(root))
    proj = project(TIERED, facts)
    assert proj.fast == (0, 1) and proj.slow == (2, 3) and proj.pinned == ()
    assert proj.pending == {2: "dax0.0", 3: "dax1.0"} and proj.host == {2: 0, 3: 1}
    assert proj.ranges[2] == ((1 << 40, 3 << 40),)
    dev = proj.device("dax0.0")
    assert dev is not None and dev.kmem_offline and dev.comes_online and dev.zone == "Movable"
    assert proj.knob("memory.auto_online_blocks") == "offline" and proj.setting("kernel.demotion_enabled") is True
    # A profile without memory.dax leaves them offline: not slow nodes, and the plan says why.
    bare = project(BASE, facts)
    assert bare.slow == () and any("kmem-bound, its blocks offline" in n for n in bare.notes)


def test_pinned_pool_nodes_are_not_slow_nodes(make_node) -> None:
    root = make_node("h100-cxl")
    simdax.to_system_ram(SimKernel(root), "dax0.0", "Movable")
    proj = project(POOL, gather(open_host(root)), allow_disruptive=True)
    assert proj.pinned == (2, 3) and proj.slow == ()
    assert proj.device("dax0.0").zone == "Normal"  # type: ignore[union-attr]
    held = project(POOL, gather(open_host(root)))  # the rezone is held back: dax0.0 stays Movable, still pinned
    assert held.device("dax0.0").zone == "Movable" and held.pinned == (2, 3)  # type: ignore[union-attr]


def test_pairing_is_the_same_before_and_after_onlining() -> None:
    # Before: node2/node3 not online (no distances); after: both equidistant (20) from both sockets.
    before = NodeClasses(fast=(0, 1), slow=(2, 3), tier={0: 4, 1: 4, 2: 5, 3: 5}, ranges={},
                         pending={2: "dax0.0", 3: "dax1.0"}, near={2: 0, 3: 1},
                         distances={(0, 1): 21, (1, 0): 21, (0, 0): 10, (1, 1): 10})
    after_d = dict(before.distances) | {(a, b): 20 for a in (0, 1) for b in (2, 3)} | {
        (b, a): 20 for a in (0, 1) for b in (2, 3)}
    after = NodeClasses(fast=(0, 1), slow=(2, 3), tier=before.tier, ranges={}, near={2: 0, 3: 1},
                        distances=after_d)
    for nc in (before, after):
        assert [nc.nearest(s, (2, 3)) for s in (0, 1)] == [2, 3]
        assert [nc.nearest(s, (0, 1)) for s in (2, 3)] == [0, 1]
    # No firmware data: NUMA distance, then the lowest id.
    plain = NodeClasses(fast=(0, 1), slow=(2, 3), tier=before.tier, ranges={}, distances=after_d)
    assert plain.nearest(1, (2, 3)) == 2


def test_classes_come_from_the_projection(make_node) -> None:
    facts = gather(open_host(make_node("qemu-3node")))
    nc = classes(project(TIERED, facts))
    assert nc.fast == (0, 1) and nc.slow == (2,) and nc.pending == {2: "dax0.0"} and nc.near == {2: 0}
