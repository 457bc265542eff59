"""latency on simulated nodes: the simulator answers (never this machine), every pair, judged from the nearest."""

from __future__ import annotations

import pytest
from nodeagent_sim.latency import chase_ns

from nodeagent.host import latency as probe
from nodeagent.host import open_host
from tests.checks_helpers import messages, one, set_file

MiB = 1024**2


def test_cxl_is_judged_against_the_dram_of_its_nearest_socket(make_node) -> None:
    root = make_node("h100-cxl-autoonline")
    r = one(root, "latency", {"max_ratio": 3.0})
    assert r.status == "pass", messages(r)
    pairs = {(p["initiator"], p["node"]): p for p in r.evidence["pairs"]}
    assert set(pairs) == {(i, n) for i in (0, 1) for n in (0, 1, 2, 3)}  # every memory node from every CPU node
    assert pairs[(0, 0)]["ns"] < pairs[(0, 1)]["ns"] < pairs[(0, 3)]["ns"]  # local < remote < far CXL
    assert pairs[(0, 2)]["ns"] < pairs[(1, 2)]["ns"]  # node2's expander hangs off socket 0
    assert pairs[(0, 2)]["cpuless"] and pairs[(0, 2)]["ratio"] == pytest.approx(255 / 112, rel=1e-3)
    assert r.evidence["declared"]["2"][0] == {"access": "access0", "initiators": [0], "read_latency_ns": 204,
                                              "write_latency_ns": 204, "read_bandwidth_mbps": 262144}
    assert r.evidence["llc_bytes"] == {"0": 105 * MiB, "1": 105 * MiB}
    assert all(p["buffer"] == 420 * MiB for p in r.evidence["pairs"])  # 4x the L3
    assert "CPU-less node node2 from node0: 255 ns load-to-use, 2.28× node0's DRAM; the firmware declares " \
           "204 ns from node0" in messages(r)

    r = one(root, "latency", {"max_ratio": 2.0, "severity": "warning"})
    assert r.status == "warn" and r.severity == "warning"
    assert messages(r).count("above max_ratio 2") == 2
    assert "lspci -vv" in r.remedies[0]
    r = one(root, "latency", {"max_ratio": None, "max_ns": 200})
    assert r.status == "fail" and "node3 from node1: 255 ns" in messages(r)


def test_a_dax_node_onlined_later_is_measured_without_declared_figures(make_node) -> None:
    from nodeagent_sim import SimKernel
    from nodeagent_sim import dax as simdax

    root = make_node("h100-cxl")
    k = SimKernel(root)
    with k.locked():
        simdax.to_system_ram(k, "dax0.0", "movable")
    r = one(root, "latency", {"max_ratio": 3.0})
    assert r.status == "pass", messages(r)
    assert "CPU-less node node2 from node0: 255 ns" in messages(r)
    assert "the firmware declares no figure" in messages(r)


def test_tcg_guest_preset_has_every_node_equal(make_node) -> None:
    r = one(make_node("qemu-3node"), "latency", {"max_ratio": 1.5})
    assert r.status == "pass", messages(r)
    assert {p["ns"] for p in r.evidence["pairs"]} == {61.0}
    assert [(p["initiator"], p["node"]) for p in r.evidence["pairs"]] == [(0, 0), (0, 1)]


def test_buffer_cap_and_free_memory_refuse_the_pair(make_node) -> None:
    root = make_node("qemu-3node")
    for c in (0, 1):
        set_file(root, f"/sys/devices/system/cpu/cpu{c}/cache/index3/size", "1048576K")  # a 1 GiB L3
    r = one(root, "latency", {})
    assert r.status == "fail"
    assert "the buffer would be 4096 MiB (4× node0's 1024 MiB last-level cache), above max_buffer 2048 MiB" \
        in messages(r)
    assert "raise checks.latency.max_buffer to 4096MiB" in r.remedies[0]
    r = one(root, "latency", {"max_buffer": "8GiB"})
    assert r.status == "fail" and "node0 has 1976 MiB free, the probe needs 4096 MiB" in messages(r)


def test_listed_nodes_without_memory_fail(make_node) -> None:
    r = one(make_node("h100-cxl"), "latency", {"nodes": [0, 2]})
    assert r.status == "fail" and "node(s) 2 listed in latency.nodes have no memory online" in messages(r)


def test_simulated_chase_refuses_a_node_without_memory(make_node) -> None:
    root = make_node("h100-cxl")
    assert chase_ns(root, 0, 1) == 112 + 7 * 11
    with pytest.raises(OSError):
        chase_ns(root, 0, 2)


def test_another_root_refuses_to_measure(tmp_path) -> None:
    from nodeagent.util.errors import HostError

    (tmp_path / "sys/devices/system/node/node0").mkdir(parents=True)
    (tmp_path / "sys/devices/system/node/online").write_text("0\n")
    (tmp_path / "sys/devices/system/node/node0/cpulist").write_text("0\n")
    (tmp_path / "sys/devices/system/node/node0/meminfo").write_text("Node 0 MemTotal: 1048576 kB\n")
    with pytest.raises(HostError, match="it would measure this machine"):
        probe.survey(open_host(tmp_path))


def test_without_thp_the_figure_says_page_walks_are_included(make_node) -> None:
    root = make_node("qemu-3node")
    set_file(root, "/sys/kernel/mm/transparent_hugepage/enabled", "always madvise [never]")
    r = one(root, "latency", {})
    assert r.status == "pass" and "not THP-backed: page walks included" in messages(r)
