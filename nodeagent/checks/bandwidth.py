"""``memory_bandwidth`` (opt-in, takes seconds): copy bandwidth of each NUMA node's memory.

For every node with memory (or the ``nodes`` listed), the probe binds two buffers of ``buffer`` bytes to the
node and copies one to the other ``iterations`` times, first from one CPU, then from every CPU of the node — a
CPU-less node (CXL, or DRAM without cores) is measured from the CPUs of its nearest node. The figure is
STREAM's Copy convention: bytes read + bytes written per second, in GB/s (10^9), best of three runs, so it can
be compared with a STREAM run on the same node. ``min_gbps`` applies to the all-CPU figure,
``min_single_gbps`` to the one-CPU figure.

A kvm64 guest in the field measured 11.7 GB/s — a tenth of what its host's DRAM delivers.

Example::

    checks:
      memory_bandwidth: {min_gbps: 40, min_single_gbps: 8, buffer: 256MiB, iterations: 5}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..facts import Facts
from ..facts.numa import NumaNode
from ..host import CopyRun, Host
from ..util.errors import HostError
from ..util.quantities import format_size
from .base import CheckContext, Finding, Skip

if TYPE_CHECKING:
    from ..profile.checks import MemoryBandwidthCheck

LOW_FIX = ("check that every memory channel is populated and runs at its rated speed (BIOS), that nothing else "
           "saturates memory during the check, and in a VM that its memory is backed by the host node it runs on")
LOW_CXL_FIX = ("check the CXL device's PCIe link (lspci -vv: LnkSta against LnkCap) and its interleave "
               "configuration (cxl list -R)")


def cpus_for(node: NumaNode, nodes: list[NumaNode]) -> tuple[list[int], int]:
    """The CPUs that measure ``node``: its own, or those of the nearest node with CPUs. Returns (cpus, from)."""
    if node.has_cpu:
        return node.cpus, node.id
    with_cpus = [n for n in nodes if n.has_cpu]
    if not with_cpus:
        return [], node.id

    # nodeN/distance has one entry per ONLINE node, in node order: with node2 offline, node3's third entry is
    # its distance to node3, not to node2
    ids = [n.id for n in nodes]
    same = len(node.distances) == len(ids)
    row = dict(zip(ids, node.distances, strict=True)) if same else dict(enumerate(node.distances))

    def dist(n: NumaNode) -> int:
        return row.get(n.id, 255)

    near = min(with_cpus, key=lambda n: (dist(n), n.id))
    return near.cpus, near.id


class MemoryBandwidthCheckImpl:
    name = "memory_bandwidth"

    def run(self, host: Host, spec: MemoryBandwidthCheck, facts: Facts,
            ctx: CheckContext) -> tuple[list[Finding], dict[str, Any]]:
        targets = [n for n in facts.nodes if n.mem_total > 0 and (spec.nodes is None or n.id in spec.nodes)]
        if spec.nodes is not None:
            known = {n.id for n in facts.nodes if n.mem_total > 0}
            unknown = [i for i in spec.nodes if i not in known]
            if unknown:
                return [Finding("fail", f"node(s) {', '.join(map(str, unknown))} listed in memory_bandwidth.nodes "
                                "have no memory online", "fix the node list, or online the memory first")], {}
        if not targets:
            raise Skip("no NUMA node with memory online")
        findings: list[Finding] = []
        evidence: dict[str, Any] = {"buffer": spec.buffer, "iterations": spec.iterations,
                                    "convention": "STREAM Copy: (bytes read + bytes written) / s, GB = 1e9",
                                    "nodes": []}
        for node in targets:
            cpus, from_node = cpus_for(node, facts.nodes)
            if not cpus:
                findings.append(Finding("warn", f"node{node.id}: no CPU to measure it from", None))
                continue
            try:
                single = host.copy_bandwidth(node.id, cpus[:1], size=spec.buffer, iterations=spec.iterations)
                full = host.copy_bandwidth(node.id, cpus, size=spec.buffer, iterations=spec.iterations)
            except HostError as exc:
                findings.append(Finding("fail", f"node{node.id}: cannot measure: {exc.message}", exc.hint))
                continue
            evidence["nodes"].append(self._ev(node, from_node, single, full))
            findings.append(self._judge(node, from_node, single, full, spec))
        return findings, evidence

    @staticmethod
    def _ev(node: NumaNode, from_node: int, single: CopyRun, full: CopyRun) -> dict[str, Any]:
        return {"node": node.id, "cpuless": not node.has_cpu, "measured_from_node": from_node,
                "single_thread_gbps": round(single.gbps, 2), "all_cpus_gbps": round(full.gbps, 2),
                "threads": len(full.cpus), "bytes_per_run": full.bytes_moved,
                "single_seconds": round(single.seconds, 6), "all_seconds": round(full.seconds, 6)}

    @staticmethod
    def _judge(node: NumaNode, from_node: int, single: CopyRun, full: CopyRun,
               spec: MemoryBandwidthCheck) -> Finding:
        kind = "CPU-less node" if not node.has_cpu else "node"
        src = f" (from node{from_node}'s CPUs)" if from_node != node.id else ""
        text = (f"{kind} node{node.id}{src}: {full.gbps:.1f} GB/s with {len(full.cpus)} CPUs, "
                f"{single.gbps:.1f} GB/s with one ({format_size(full.size)} buffers)")
        fix = LOW_CXL_FIX if not node.has_cpu else LOW_FIX
        if full.gbps < spec.min_gbps:
            return Finding("fail", f"{text} — below min_gbps {spec.min_gbps:g}", fix)
        if spec.min_single_gbps is not None and single.gbps < spec.min_single_gbps:
            return Finding("fail", f"{text} — one CPU is below min_single_gbps {spec.min_single_gbps:g}", fix)
        return Finding("pass", text)


def measure_bandwidth(host: Host, facts: Any) -> dict[str, Any]:
    """Copy bandwidth of every node with memory, as the memory_bandwidth check measures it (takes seconds: only
    on request, ``facts --save FILE --measure-bandwidth``); the check's evidence, figures per node."""
    from ..profile.checks import MemoryBandwidthCheck

    try:
        findings, evidence = MemoryBandwidthCheckImpl().run(host, MemoryBandwidthCheck(min_gbps=0.001), facts,
                                                            CheckContext())
    except Skip as exc:
        return {"nodes": [], "error": str(exc)}
    errors = [f.message for f in findings if f.status != "pass"]
    return {**evidence, **({"errors": errors} if errors else {})}
