"""memory_bandwidth on simulated nodes: the simulator answers (never this machine), per node, CPU-less included."""

from __future__ import annotations

import pytest
from nodeagent_sim.hardware import copy_seconds

from nodeagent.host import open_host
from tests.checks_helpers import messages, one

BW = {"min_gbps": 20, "buffer": "64MiB", "iterations": 2}


def test_simulated_copy_time_is_threads_times_single_capped_at_the_node(make_node) -> None:
    root = make_node("h100-cxl-autoonline")
    nbytes = 10 * 10**9
    assert copy_seconds(root, 0, 1, nbytes) == pytest.approx(nbytes / 19.5e9)
    assert copy_seconds(root, 0, 96, nbytes) == pytest.approx(nbytes / 290e9)
    assert copy_seconds(root, 2, 96, nbytes) == pytest.approx(nbytes / 52e9)  # CPU-less CXL node
    with pytest.raises(OSError):
        copy_seconds(root, 5, 1, nbytes)


def test_kvm64_guest_fails_with_its_11_7_gbps(make_node) -> None:
    r = one(make_node("l40-kvm64"), "memory_bandwidth", BW)
    assert r.status == "fail"
    (node,) = r.evidence["nodes"]
    assert node["all_cpus_gbps"] == 11.7 and node["single_thread_gbps"] == 5.9 and node["threads"] == 8
    assert "node node0: 11.7 GB/s with 8 CPUs, 5.9 GB/s with one (64MiB buffers) — below min_gbps 20" in messages(r)
    assert r.evidence["convention"].startswith("STREAM Copy")


def test_cpuless_nodes_are_measured_from_the_nearest_cpus(make_node) -> None:
    root = make_node("h100-cxl-autoonline")
    r = one(root, "memory_bandwidth", {**BW, "min_single_gbps": 8})
    assert r.status == "pass", messages(r)
    by_node = {n["node"]: n for n in r.evidence["nodes"]}
    assert set(by_node) == {0, 1, 2, 3}
    assert by_node[2]["cpuless"] and by_node[2]["measured_from_node"] == 0
    assert by_node[3]["measured_from_node"] == 1 and by_node[3]["all_cpus_gbps"] == 52.0
    r = one(root, "memory_bandwidth", {**BW, "min_gbps": 100})
    assert r.status == "fail" and "CPU-less node node2 (from node0's CPUs): 52.0 GB/s" in messages(r)
    assert "cxl list -R" in r.remedies[0]


def test_listed_nodes_without_memory_fail(make_node) -> None:
    r = one(make_node("h100-cxl"), "memory_bandwidth", {**BW, "nodes": [0, 2]})
    assert r.status == "fail" and "node(s) 2 listed in memory_bandwidth.nodes have no memory online" in messages(r)


def test_another_root_refuses_to_measure(tmp_path) -> None:
    from nodeagent.util.errors import HostError

    (tmp_path / "sys").mkdir()
    with pytest.raises(HostError, match="it would measure this machine"):
        open_host(tmp_path).copy_bandwidth(0, [0], size=1024**2, iterations=1)


def test_nearest_cpus_read_distance_by_online_node_not_by_id() -> None:
    """nodeN/distance has one entry per online node: with nodes 0, 2, 3 online, node2's row is (to 0, to 2, to 3)."""
    from nodeagent.checks.bandwidth import cpus_for
    from nodeagent.facts.numa import NumaNode

    n0 = NumaNode(0, "0-3", True, True, 1, 1, 4, [10, 30, 40])
    n2 = NumaNode(2, "", True, False, 1, 1, 22, [30, 10, 12])
    n3 = NumaNode(3, "4-7", True, True, 1, 1, 4, [40, 12, 10])
    assert cpus_for(n2, [n0, n2, n3]) == ([4, 5, 6, 7], 3)
