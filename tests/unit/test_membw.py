"""The bandwidth probe: its arithmetic, its slicing, and its memory binding — on small buffers, no timings asserted.

These run on this machine's own process memory (mbind of an anonymous mapping; nothing under /sys or /proc is
written). This machine has one NUMA node, so binding to other nodes is exercised in the real-kernel tier.
"""

from __future__ import annotations

import ctypes

import pytest

from nodeagent.host import CopyRun, membw
from nodeagent.util.errors import HostError


def test_copy_run_arithmetic_follows_streams_copy_convention() -> None:
    run = CopyRun(node=0, cpus=(0, 1), size=256 * 1024**2, iterations=5, seconds=0.5)
    assert run.bytes_moved == 2 * 256 * 1024**2 * 5  # read once + written once
    assert run.gbps == pytest.approx(2 * 256 * 1024**2 * 5 / 0.5 / 1e9)
    assert CopyRun(0, (0,), 1, 1, 0.0).gbps == 0.0


def test_nodemask_sets_one_bit_and_counts_maxnode_like_the_kernel() -> None:
    mask, maxnode = membw.nodemask(0, 0)
    assert list(mask) == [1] and maxnode == 65
    mask, maxnode = membw.nodemask(70, 127)
    assert list(mask) == [0, 1 << 6] and maxnode == 129
    with pytest.raises(HostError, match="node 5 is not a possible NUMA node"):
        membw.nodemask(5, 3)


def test_slices_cover_the_buffer_page_aligned() -> None:
    size = 10 * membw.PAGE + 123
    parts = membw.slices(size, 3)
    assert sum(length for _, length in parts) == size
    assert [off for off, _ in parts] == [0, 3 * membw.PAGE, 6 * membw.PAGE]
    assert all(off % membw.PAGE == 0 for off, _ in parts)
    assert membw.slices(membw.PAGE, 8) == [(0, membw.PAGE)]


def test_buffers_are_bound_to_the_node_and_the_copy_is_correct() -> None:
    with membw.node_buffers(4 * 1024**2, 0, 0) as (src, dst):
        assert src.nodes() == {0} and dst.nodes() == {0}
        pattern = bytes(range(256)) * (src.size // 256)
        ctypes.memmove(src.addr, pattern, src.size)
        ctypes.memset(dst.addr, 0, dst.size)
        seconds = membw.timed_copy(src, dst, [0, 1][: max(1, len(__import__("os").sched_getaffinity(0)))], 2)
        assert seconds > 0
        assert ctypes.string_at(dst.addr, dst.size) == pattern


def test_binding_to_a_node_without_memory_fails_clearly() -> None:
    import os

    nodes = os.listdir("/sys/devices/system/node")
    if any(n == "node1" for n in nodes):
        pytest.skip("this machine has a node1")
    with pytest.raises(HostError, match="mbind to node 1 failed: Invalid argument"):
        membw.NodeBuffer(1024**2, 1, 1)


def test_real_measurement_returns_a_positive_duration() -> None:
    assert membw.measure(0, [0], size=2 * 1024**2, iterations=1, repeats=1, max_node=0) > 0
