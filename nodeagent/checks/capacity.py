"""``capacity``: does the workload the node is provisioned for fit its memory tiers, and at which batch?

The arithmetic, stated so that anyone can redo it:

- weights = parameters × bytes per parameter × ``weights_overhead`` (1.2: the usual rule for activations,
  CUDA context and allocator slack);
- KV cache per token = 2 (K and V) × layers × KV heads × head dim × bytes per element (``kv_dtype``); per
  sequence × ``context_length``; for the whole batch × ``max_batch``;
- need = weights + KV cache of the batch.

Tiers, filled in order: **HBM** (``gpu_memory`` from the profile, else the sum of ``nvidia-smi``'s
``memory.total``), **DRAM** (``dram_offload``: what the engine may use in host RAM, capped by free DRAM less the
struct pages that onlining CXL will take from it — 64 bytes per 4 KiB page, 1.56 %, unless they go on the device:
its ``memmap_on_memory`` and the kernel's ``memory_hotplug.memmap_on_memory`` both set), **CXL** (free memory of
online CPU-less nodes in a lower memory tier, plus DAX devices not yet online as system RAM, plus the DAX devices
of the CXL regions the profile's ``memory.cxl.regions`` create in this apply — said as such). The result:
whether it fits in HBM, how much spills to which tier, and the largest batch that fits each tier — so a tier
added without retuning the batch is flagged, and so is a batch that only a missing tier could hold.

Example (a 70B model in bf16, 80 layers, 8 KV heads of 128)::

    checks:
      capacity:
        severity: warning
        model: {params: 70B, dtype: bf16, layers: 80, kv_heads: 8, head_dim: 128}
        max_batch: 96
        context_length: 16384
        dram_offload: 80GiB
"""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING, Any

from ..facts import Facts
from ..facts.dax import from_facts as dax_facts
from ..facts.hardware import read_gpu_memory
from ..host import Host
from ..kinds.projection import project
from ..util.dataclass import dataclass
from ..util.errors import CommandError
from ..util.quantities import format_size
from ..util.vocab import DTYPE_BYTES
from .base import CheckContext, Finding, Skip

if TYPE_CHECKING:
    from ..profile.checks import CapacityCheck

PAGE = 4096
STRUCT_PAGE = 64


def gib(n: float) -> str:
    """Memory in binary gibibytes, as everywhere in nodeagent's output (two decimals below 10 GiB)."""
    return f"{n / 2**30:,.2f}GiB" if abs(n) < 10 * 2**30 else f"{n / 2**30:,.1f}GiB"


def gb(n: float) -> str:
    """A formula's result in decimal gigabytes (model sizes are quoted so: 70B × 2 B = 140 GB), then in GiB as the
    findings compare it: ``168.0 GB = 156.5GiB``."""
    dec = f"{n / 1e9:,.2f} GB" if abs(n) < 10e9 else f"{n / 1e9:,.1f} GB"
    return f"{dec} = {gib(n)}"


@dataclass(frozen=True)
class Workload:
    weights: int
    kv_per_token: int
    context: int
    batch: int

    @property
    def kv_per_sequence(self) -> int:
        return self.kv_per_token * self.context

    def need(self, batch: int | None = None) -> int:
        return self.weights + (self.batch if batch is None else batch) * self.kv_per_sequence

    def largest_batch(self, capacity: int) -> int:
        """The largest batch whose need fits ``capacity`` (0 when even one sequence does not; -1: not the
        weights)."""
        if capacity < self.weights:
            return -1
        return (capacity - self.weights) // self.kv_per_sequence


def workload(spec: CapacityCheck) -> Workload:
    m = spec.model
    wbytes = DTYPE_BYTES[m.dtype]
    kvbytes = DTYPE_BYTES[m.kv_dtype or m.dtype]
    weights = int(round(m.params * wbytes * spec.weights_overhead))
    per_token = int(round(2 * m.layers * m.kv_heads * m.head_dim * kvbytes))
    return Workload(weights, per_token, spec.context_length, spec.max_batch)


def struct_pages(nbytes: int) -> int:
    """DRAM the kernel spends on ``struct page`` s to online ``nbytes`` of memory (64 B per 4 KiB page)."""
    return nbytes // PAGE * STRUCT_PAGE


@dataclass(frozen=True)
class Tier:
    name: str
    capacity: int
    detail: str
    pending: tuple[str, ...] = field(default_factory=tuple)  # devices that must be onlined first
    created: int = 0  # of its capacity: the DAX devices of the CXL regions this apply creates

    @property
    def label(self) -> str:
        return self.name + (f" ({gib(self.created)} of CXL, created by this apply)" if self.created else "")


def place(need: int, tiers: list[Tier]) -> tuple[list[tuple[Tier, int]], int]:
    """Fill ``tiers`` in order: ``([(tier, bytes)], bytes left over)``."""
    out = []
    left = need
    for t in tiers:
        take = min(left, t.capacity)
        out.append((t, take))
        left -= take
    return out, left


def _not_online(dev: Any, onlined: frozenset[str], created: frozenset[str] = frozenset()) -> str:
    """Why a device's memory is not online yet, and whether the profile brings it online."""
    if dev.name in created:
        return f"of {dev.cxl_region or 'a CXL region'}, created by this apply" + (
            "; this profile onlines it" if dev.name in onlined else "")
    what = "bound to kmem, its blocks offline" if dev.mode == "system-ram" else dev.mode
    return what + ("; this profile onlines it" if dev.name in onlined else "")


def node_tiers(spec: CapacityCheck, facts: Facts, hbm: int, hbm_src: str,
               dax: list[Any], onlined: frozenset[str] = frozenset(),
               created: list[Any] | tuple[Any, ...] = ()) -> tuple[list[Tier], dict[str, Any]]:
    """The HBM, DRAM and CXL tiers of this node, with what went into each (pure: facts and DAX data in;
    ``onlined``: the devices the profile's memory.dax rules bring online, from the node's projection;
    ``created``: the DAX devices of the CXL regions the profile creates, which kmem hot-adds at commit)."""
    top = min(facts.tiers) if facts.tiers else None
    cxl_nodes = [n for n in facts.nodes if not n.has_cpu and n.mem_total > 0 and n.tier is not None
                 and top is not None and n.tier > top]
    dram_nodes = [n for n in facts.nodes if n not in cxl_nodes and n.mem_total > 0]
    online_ids = {n.id for n in facts.nodes if n.mem_total > 0}
    pending = [d for d in dax if d.size and (d.mode != "system-ram" or d.target_node not in online_ids)]
    pending_bytes = sum(d.size for d in pending)
    # A device bound to kmem with its blocks offline was hot-added already: its struct pages are in DRAM (and
    # out of DRAM's free memory) now. Only a devdax device still has them to take.
    memmap_here = sum(d.size for d in pending if not d.memmap_self_hosted and d.mode != "system-ram")
    memmap_here += sum(d.size for d in created if not d.memmap_self_hosted)  # hot-added by this apply
    made = frozenset(d.name for d in created)
    pending += list(created)
    struct_cost = struct_pages(memmap_here)
    cxl_pending = sum(d.size - (struct_pages(d.size) if d.memmap_self_hosted else 0) for d in pending)
    dram_free = sum(n.mem_free for n in dram_nodes)
    dram_avail = max(dram_free - struct_cost, 0)
    dram = min(spec.dram_offload, dram_avail)
    cxl_online = sum(n.mem_free for n in cxl_nodes)
    tiers = [Tier("HBM", hbm, hbm_src),
             Tier("DRAM", dram, f"dram_offload {format_size(spec.dram_offload)} of {gib(dram_avail)} free DRAM"
                  + (f" after {format_size(struct_cost)} of struct pages for the CXL devices" if struct_cost
                     else ""))]
    cxl_parts = []
    if cxl_nodes:
        cxl_parts.append(f"{gib(cxl_online)} free on node{','.join(str(n.id) for n in cxl_nodes)}")
    old = [d for d in pending if d.name not in made]
    if old:
        usable = sum(d.size - (struct_pages(d.size) if d.memmap_self_hosted else 0) for d in old)
        cxl_parts.append(f"{gib(usable)} in {', '.join(d.name for d in old)} (not online yet)")
    if created:
        usable = cxl_pending - sum(d.size - (struct_pages(d.size) if d.memmap_self_hosted else 0) for d in old)
        cxl_parts.append(f"{gib(usable)} of CXL in {', '.join(d.name for d in created)}, created by this apply "
                         f"({', '.join(str(d.cxl_region) for d in created)})")
    if cxl_parts:
        tiers.append(Tier("CXL", cxl_online + cxl_pending, "; ".join(cxl_parts),
                          tuple(f"{d.name} ({_not_online(d, onlined, made)})" for d in pending),
                          sum(d.size - (struct_pages(d.size) if d.memmap_self_hosted else 0) for d in created)))
    evidence = {"hbm": hbm, "hbm_source": hbm_src, "dram_nodes": [n.id for n in dram_nodes],
                "dram_free": dram_free, "dram_offload": spec.dram_offload, "dram_usable": dram,
                "struct_pages_for_cxl": struct_cost, "cxl_nodes": [n.id for n in cxl_nodes],
                "cxl_online_free": cxl_online, "cxl_pending": {d.name: d.size for d in pending},
                "cxl_pending_usable": cxl_pending, "cxl_pending_raw": pending_bytes,
                "cxl_created": {d.name: d.size for d in created}}
    return tiers, evidence


class CapacityCheckImpl:
    name = "capacity"

    def run(self, host: Host, spec: CapacityCheck, facts: Facts, ctx: CheckContext) -> tuple[list[Finding],
                                                                                              dict[str, Any]]:
        if spec.gpu_memory is not None:
            hbm, src = spec.gpu_memory, f"{gib(spec.gpu_memory)} from the profile's gpu_memory"
        else:
            try:
                mem = ctx.hardware.gpu_memory() if ctx.hardware is not None else read_gpu_memory(host)
            except CommandError as exc:  # installed but could not start or failed: say which and why, no skip
                return [Finding("fail", f"no GPU memory figure: {exc}", exc.hint)], {"gpu_memory_error": str(exc)}
            if mem is None:
                raise Skip("no GPU memory figure: nvidia-smi is not installed or failed, and the profile gives no "
                           "capacity.gpu_memory")
            hbm = mem.total_bytes
            src = f"{len(mem.per_gpu_mib)} × {mem.names[0]}, {gib(hbm)} (nvidia-smi)" if len(set(mem.names)) == 1 \
                else f"{len(mem.per_gpu_mib)} GPUs, {gib(hbm)} (nvidia-smi)"
        onlined: frozenset[str] = frozenset()
        created: list[Any] = []
        if ctx.loaded is not None:
            from ..kinds.cxl_region import planned_dax

            proj = project(ctx.loaded, facts)
            onlined = frozenset(d.name for d in proj.dax if d.comes_online)
            created = planned_dax(ctx.loaded, facts)
        tiers, evidence = node_tiers(spec, facts, hbm, src, dax_facts(facts).devices, onlined, created)
        return evaluate(spec, tiers), evidence | explain(spec, tiers)


def explain(spec: CapacityCheck, tiers: list[Tier]) -> dict[str, Any]:
    w = workload(spec)
    placed, left = place(w.need(), tiers)
    cum, largest = 0, {}
    for t in tiers:
        cum += t.capacity
        largest["+".join(x.name for x in tiers[:tiers.index(t) + 1])] = w.largest_batch(cum)
    return {"weights": w.weights, "kv_per_token": w.kv_per_token, "kv_per_sequence": w.kv_per_sequence,
            "need": w.need(), "placement": {t.name: used for t, used in placed}, "unplaced": left,
            "tiers": {t.name: t.capacity for t in tiers}, "largest_batch": largest}


def arithmetic(spec: CapacityCheck) -> str:
    m, w = spec.model, workload(spec)
    kvd = m.kv_dtype or m.dtype
    return (f"weights {m.params / 1e9:g}B × {DTYPE_BYTES[m.dtype]:g} B ({m.dtype}) × {spec.weights_overhead:g} = "
            f"{gb(w.weights)}; KV cache 2 × {m.layers} layers × {m.kv_heads} KV heads × {m.head_dim} × "
            f"{DTYPE_BYTES[kvd]:g} B ({kvd}) = {format_size(w.kv_per_token)} per token × {w.context:,} tokens = "
            f"{gb(w.kv_per_sequence)} per sequence × batch {w.batch} = {gb(w.batch * w.kv_per_sequence)}; "
            f"need {gb(w.need())}")


def evaluate(spec: CapacityCheck, tiers: list[Tier]) -> list[Finding]:
    """Pure: the findings for ``spec`` on a node with ``tiers`` (HBM first)."""
    w = workload(spec)
    need = w.need()
    findings = [Finding("pass", arithmetic(spec))]
    placed, left = place(need, tiers)
    cum = 0
    sizes = []
    for t in tiers:
        cum += t.capacity
        b = w.largest_batch(cum)
        sizes.append(f"{'+'.join(x.name for x in tiers[:tiers.index(t) + 1])} "
                     f"{'none (the weights do not fit)' if b < 0 else b}")
    largest = "largest batch that fits: " + ", ".join(sizes)
    hbm = tiers[0]
    has_cxl = any(t.name == "CXL" for t in tiers)
    hbm_batch = w.largest_batch(hbm.capacity)
    retune = (f"set max_batch ≤ {hbm_batch} to run from HBM alone" if hbm_batch > 0 else
              "the weights alone exceed HBM: use more GPUs or a smaller dtype")
    spill = [(t, used) for t, used in placed[1:] if used > 0]
    if left > 0:
        have = " + ".join(f"{t.name} {gib(t.capacity)}" for t in tiers)
        if not has_cxl:
            total = gib(sum(t.capacity for t in tiers))
            msg = (f"the workload needs {gib(need)} but this node has {have} = {total}: "
                   f"it needs a CXL tier of at least {gib(left)}, which this node lacks ({largest})")
            fix = (f"add CXL.mem expanders of at least {gib(left)}, or provision a smaller workload: {retune}, "
                   f"or lower max_batch to {max(w.largest_batch(sum(t.capacity for t in tiers)), 0)} with DRAM "
                   "offload, or store the KV cache in fp8")
        else:
            msg = (f"the workload needs {gib(need)}; with every tier ({have}) {gib(left)} does not fit ({largest})"
                   + "".join(f"; {t.label}" for t in tiers if t.created))
            fix = f"lower max_batch to {max(w.largest_batch(sum(t.capacity for t in tiers)), 0)}, or add capacity"
        findings.append(Finding("fail", msg, fix))
        return findings
    if not spill:
        findings.append(Finding("pass", f"fits in HBM: {gib(need)} of {gib(hbm.capacity)} ({largest})"))
        unused = [t for t in tiers[1:] if t.name == "CXL"]
        if unused:
            top = w.largest_batch(sum(t.capacity for t in tiers))
            findings.append(Finding("warn", f"the CXL tier ({gib(unused[0].capacity)}"
                                    + (f", {gib(unused[0].created)} of it created by this apply" if unused[0].created
                                       else "") + f") holds nothing at batch "
                                    f"{w.batch}: the batch was not retuned when the tier was added "
                                    f"(up to {top} fit with it)",
                                    "raise max_batch to use the CXL tier (watch decode latency), or leave the "
                                    "CXL memory to pageable data"))
        return findings
    where = ", ".join(f"{gib(used)} to {t.label}" for t, used in spill)
    pending = [d for t, used in spill for d in t.pending]
    msg = (f"does not fit in HBM: needs {gib(need)}, HBM holds {gib(hbm.capacity)}; {where} ({largest})")
    fix = f"{retune}; every byte off HBM costs decode throughput (a third, in a field report)"
    if pending:
        fix += (f"; the CXL capacity must be online before the workload starts, and is not yet: "
                f"{', '.join(pending)} (nodeagent's dax resource onlines them; by hand: daxctl reconfigure-device "
                "--mode=system-ram for devdax, daxctl online-memory for kmem-bound)")
    findings.append(Finding("warn", msg, fix))
    return findings
