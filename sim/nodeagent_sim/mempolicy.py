"""Emulated weighted interleave: ``/sys/kernel/mm/mempolicy/weighted_interleave/`` (mm/mempolicy.c, 6.9).

- ``nodeN``: kstrtou8(buf, 0). 6.9-6.15 take 0 or an empty write as "back to the default" (shown as 1) and list
  every possible node; 6.16 refuses 0 and empty (EINVAL), lists only nodes with memory — a file appears when a
  node's memory comes online and goes with its last block (the memory notifier; :func:`follow_memory`) — and any
  weight written turns ``auto`` off.
- ``auto`` (6.16; named ``__auto_type`` from 6.18: tests/data/mempolicy/weighted-interleave-6.18.txt): kstrtobool.
  ``true`` derives every weight from the nodes' bandwidth (reduce_interleave_weights: each node's share of the
  total in 32nds, at least 1, divided by their GCD), ENODEV when the firmware declared none; ``false`` keeps the
  weights. It boots ``true`` (no table written yet).

The bandwidth of a node is min(read, write) of ``nodeN/access1/initiators/`` (HMAT's CPU access class, which
``node_set_perf_attrs`` hands to ``mempolicy_set_node_perf``).
"""

from __future__ import annotations

import errno
import math
import os
import re

from nodeagent.util.kfmt import parse_list

from . import presets
from .kernel import SimKernel, einval, kstrtobool, rule
from .tree import RW

DIR = "/sys/kernel/mm/mempolicy/weighted_interleave"
NODE = "/sys/devices/system/node"
#: reduce_interleave_weights' scale: a node's weight is its share of the bandwidth in 32nds before the GCD.
WEIGHTINESS = 32


def auto_name(k: SimKernel) -> str | None:
    """The auto switch's file name on this kernel: none before 6.16, ``auto``, then ``__auto_type`` (6.18)."""
    return None if not k.at_least(6, 16) else "__auto_type" if k.at_least(6, 18) else "auto"


def _has_memory(k: SimKernel) -> list[int]:
    return parse_list(k.tree.read(f"{NODE}/has_memory")) if k.tree.exists(f"{NODE}/has_memory") else []


def _nodes_with_files(k: SimKernel) -> list[int]:
    d = k.tree.local(DIR)
    return sorted(int(p.name[4:]) for p in d.glob("node[0-9]*")) if d.is_dir() else []


def _bandwidth(k: SimKernel, node: int) -> int:
    base = f"{NODE}/node{node}/access1/initiators"
    vals = [int(k.tree.read(f"{base}/{rw}_bandwidth")) for rw in ("read", "write")
            if k.tree.exists(f"{base}/{rw}_bandwidth")]
    return min(vals) if vals else 0


def _auto_weights(k: SimKernel) -> dict[int, int] | None:
    """reduce_interleave_weights over the nodes with memory; None when no node has a declared bandwidth."""
    nodes = _has_memory(k)
    bw = {n: _bandwidth(k, n) for n in nodes}
    total = sum(bw.values())
    if not total:
        return None
    w = {n: (WEIGHTINESS * b // total) if b and total < WEIGHTINESS * b else 1 for n, b in bw.items()}
    g = math.gcd(*w.values())
    return {n: v // g for n, v in w.items()}


def _set_auto(k: SimKernel, on: bool) -> None:
    name = auto_name(k)
    if name and k.tree.exists(f"{DIR}/{name}"):
        k.tree.set(f"{DIR}/{name}", "true" if on else "false")


@rule(re.escape(DIR) + r"/node[0-9]+")
def _node_weight(k: SimKernel, path: str, value: str) -> None:
    word = value.strip()
    m = re.fullmatch(r"\+?(?:0[xX]([0-9a-fA-F]+)|(0[0-7]*)|([1-9][0-9]*))", word)
    n = (int(m[1], 16) if m[1] else int(m[2], 8) if m[2] else int(m[3])) if m else None
    if k.at_least(6, 16):
        if n is None or not 1 <= n <= 255:
            raise einval("a weight is 1-255")
        k.tree.set(path, n)
        _set_auto(k, False)
        return
    if word == "":
        n = 0
    if n is None or n > 255:
        raise einval("a weight is 0-255")
    k.tree.set(path, n or 1)  # 0: back to the default weight, which is 1


def _auto(k: SimKernel, path: str, value: str) -> None:
    on = kstrtobool(value)
    if on:
        weights = _auto_weights(k)
        if weights is None:
            raise OSError(errno.ENODEV, os.strerror(errno.ENODEV) + " (no node bandwidth declared)")
        for n in _nodes_with_files(k):
            k.tree.set(f"{DIR}/node{n}", weights.get(n, 1))
    k.tree.set(path, "true" if on else "false")


rule(re.escape(DIR) + r"/(auto|__auto_type)")(_auto)


def follow_memory(k: SimKernel, nodes: set) -> None:
    """6.16+: a node's weight file comes with its first online memory and goes with its last (wi_node_notifier),
    at the table's weight for it: 1 unless set. Only a node whose bandwidth is declared (mempolicy_set_node_perf,
    from HMAT or a CXL device's CDAT) makes auto mode recompute every weight."""
    if not k.at_least(6, 16) or not k.tree.exists(DIR):
        return
    with_memory = set(_has_memory(k))
    name = auto_name(k)
    auto = bool(name and k.tree.exists(f"{DIR}/{name}") and k.tree.read(f"{DIR}/{name}") == "true")
    declared = False
    for n in sorted(nodes):
        path = f"{DIR}/node{n}"
        if n in with_memory and not k.tree.exists(path):
            k.tree.file(path, 1, RW)
            declared = declared or _bandwidth(k, n) > 0
        elif n not in with_memory and k.tree.exists(path):
            k.tree.remove_tree(path)
    if auto and declared and (weights := _auto_weights(k)):
        for n in _nodes_with_files(k):
            k.tree.set(f"{DIR}/node{n}", weights.get(n, 1))


def _step(k: SimKernel, p: presets.Preset) -> None:
    if not k.at_least(6, 9):
        return
    k.tree.dir(DIR)
    nodes = _has_memory(k) if k.at_least(6, 16) else list(range(p.possible_nodes))
    for n in nodes:
        k.tree.file(f"{DIR}/node{n}", 1, RW)
    name = auto_name(k)
    if name:
        k.tree.file(f"{DIR}/{name}", "true", RW)
        weights = _auto_weights(k)  # the latency layer declared the bandwidth (it runs before this step)
        for n, w in (weights or {}).items():
            if n in nodes:
                k.tree.set(f"{DIR}/node{n}", w)


presets.LAYERS.append(_step)
