"""``latency`` (opt-in, up to 2 s per pair): load-to-use latency of each memory node from each CPU node.

The probe (:mod:`nodeagent.host.latency`) chases one random cycle of cache lines through a buffer of 4× the
last-level cache, bound to the memory node, THP-backed, from one CPU of the initiating node; the figure is
the median of several chains, in ns per load. Each memory node is judged from its nearest CPU node (the one
measuring it fastest): ``max_ratio`` against that node's own DRAM applies to CPU-less nodes (CXL, or DRAM
without cores), ``max_ns`` to every node. The firmware's declared figure (HMAT
``nodeN/access0/initiators/read_latency``) is shown beside the measured one: it is what the firmware
promises at idle, not what the node does.

The buffer is capped at ``max_buffer`` per node (2 GiB by default; refused above it rather than timing the
cache) and is refused on a node with less free memory than that. Example::

    checks:
      latency: {max_ratio: 3.0}            # CXL at most 3x local DRAM
      latency: {max_ratio: 2.5, max_ns: 400, nodes: [2, 3], max_buffer: 4GiB}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..facts import Facts
from ..host import Host
from .base import CheckContext, Finding, Skip

if TYPE_CHECKING:  # the probe (hashlib, subprocess, a C helper) and pydantic load only when the check runs
    from ..host import latency as probe
    from ..profile.checks import LatencyCheck

SLOW_FIX = ("check the CXL device's PCIe link (lspci -vv: LnkSta against LnkCap), that the region is not "
            "interleaved across a slower host bridge (cxl list -R), and that the node is attached to the socket "
            "that uses it")
SLOW_DRAM_FIX = ("check the DIMM population and speed (dmidecode -t memory), and in a VM that its memory is "
                 "backed by the host node its vCPUs run on")


def limits(spec: LatencyCheck) -> probe.Limits:
    from ..host import latency as probe

    return probe.Limits(max_buffer=spec.max_buffer, budget=spec.max_seconds, chains=spec.chains)


def nearest(s: probe.Survey) -> dict[int, probe.Pair]:
    """Each memory node's fastest measured pair."""
    out: dict[int, probe.Pair] = {}
    for p in s.pairs:
        if p.ns is not None and (p.node not in out or p.ns < (out[p.node].ns or 0)):
            out[p.node] = p
    return out


def evidence(s: probe.Survey) -> dict[str, Any]:
    """The survey as plain data (the check's evidence, ``check --format json``)."""
    return {
        "source": s.source,
        "llc_bytes": {str(k): v for k, v in s.llc.items()},
        "pairs": [{"initiator": p.initiator, "node": p.node, "cpu": p.cpu, "buffer": p.buffer,
                   "cpuless": s.cpuless.get(p.node, False),
                   "ns": None if p.ns is None else round(p.ns, 1),
                   "ratio": None if s.ratio(p) is None else round(s.ratio(p) or 0, 3),
                   "chains_ns": [round(x, 1) for x in p.chains], "seconds": round(p.seconds, 3),
                   "thp_bytes": p.thp_bytes, "error": p.error} for p in s.pairs],
        "declared": {str(n): [{"access": d.access, "initiators": list(d.initiators),
                               "read_latency_ns": d.read_latency_ns, "write_latency_ns": d.write_latency_ns,
                               "read_bandwidth_mbps": d.read_bandwidth_mbps} for d in ds]
                     for n, ds in s.declared.items()},
    }


def declared_text(s: probe.Survey, node: int, initiator: int) -> str:
    for d in s.declared.get(node, []):
        if d.access == "access0" and d.read_latency_ns is not None:
            who = f"from node{','.join(map(str, d.initiators))}" if d.initiators else ""
            return f"; the firmware declares {d.read_latency_ns} ns {who}".rstrip()
    return "; the firmware declares no figure (no HMAT access0)"


class LatencyCheckImpl:
    name = "latency"

    def run(self, host: Host, spec: LatencyCheck, facts: Facts,
            ctx: CheckContext) -> tuple[list[Finding], dict[str, Any]]:
        with_mem = [n.id for n in facts.nodes if n.mem_total > 0]
        if spec.nodes is not None:
            unknown = [i for i in spec.nodes if i not in with_mem]
            if unknown:
                return [Finding("fail", f"node(s) {', '.join(map(str, unknown))} listed in latency.nodes have no "
                                "memory online", "fix the node list, or online the memory first")], {}
        if not with_mem:
            raise Skip("no NUMA node with memory online")
        if not any(n.has_cpu for n in facts.nodes):
            raise Skip("no NUMA node with CPUs to measure from")
        from ..host import latency as probe

        s = probe.survey(host, limits(spec), targets=list(spec.nodes) if spec.nodes is not None else with_mem)
        findings: list[Finding] = [Finding("fail", f"node{p.node} from node{p.initiator}: cannot measure: {p.error}",
                                           p.hint) for p in s.pairs if p.error]
        for node, p in sorted(nearest(s).items()):
            findings.append(self._judge(s, node, p, spec))
        return findings, evidence(s)

    @staticmethod
    def _judge(s: probe.Survey, node: int, p: probe.Pair, spec: LatencyCheck) -> Finding:
        assert p.ns is not None
        cpuless = s.cpuless.get(node, False)
        ratio = s.ratio(p)
        kind = "CPU-less node" if cpuless else "DRAM"
        rel = f", {ratio:.2f}× node{p.initiator}'s DRAM" if ratio is not None and p.node != p.initiator else ""
        thp = "" if p.thp_bytes is None or p.thp_bytes * 2 >= p.buffer else \
            " (not THP-backed: page walks included; transparent_hugepage is never, or memory is fragmented)"
        text = (f"{kind} node{node} from node{p.initiator}: {p.ns:.0f} ns load-to-use{rel}{thp}"
                f"{declared_text(s, node, p.initiator)}")
        fix = SLOW_FIX if cpuless else SLOW_DRAM_FIX
        if cpuless and spec.max_ratio is not None and ratio is not None and ratio > spec.max_ratio:
            return Finding("fail", f"{text} — above max_ratio {spec.max_ratio:g}", fix)
        if spec.max_ns is not None and p.ns > spec.max_ns:
            return Finding("fail", f"{text} — above max_ns {spec.max_ns:g}", fix)
        return Finding("pass", text)
