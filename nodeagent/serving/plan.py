"""``render serving``: a serving engine's host KV pool — its size per rank, the node it binds to, the options.

The pool is **pinned** (vLLM's offload buffers, SGLang HiCache's host pool, LMCache's CPU buffer), and the
kernel migrates long-term-pinned pages out of ZONE_MOVABLE before pinning them: a pinned pool can use CXL only
where the CXL node is onlined into ZONE_NORMAL. So:

- **capacity pool** — where the node (after the profile's DAX changes: the projection) has CXL memory in
  ZONE_NORMAL: the pool binds to those nodes, each rank to the CXL node behind its GPU's socket;
- **latency pool** — otherwise: each rank's pool on its GPU's local DRAM node. A node whose CXL is movable (or
  not online) is said so, with the profile change that lets the pool use CXL.
- **Maru pool** (from the release that can use Maru: LMCache's Maru backend, Maru's own vLLM connector or
  SGLang HiCache backend; :data:`.versions.MARU_OPTION`) — where a ``memory.dax`` rule keeps a device devdax for
  Maru (``use: maru``): the engine's own host buffer is off and each worker asks Maru's server for its share of
  the device(s); no memory policy applies (devdax memory belongs to no node). An older release leaves such
  devices out.

The options rendered are those of the engine release asked for (:mod:`.versions`: each option's first release).

Size (the model; docs/serving.md states it too), per pool node:

    usable = free − OS reserve − page cache of the weights − pinned overheads

- free: ``MemFree`` of an online node; for a device the profile brings online, its size (less its struct pages
  with ``memmap_on_memory``);
- OS reserve: DRAM node ``max(4 GiB, 5 %)`` of its memory (kernel, daemons, the engine's own Python heap);
  ZONE_NORMAL CXL node ``max(1 GiB, 2 %)`` (the kernel may place its own allocations there);
- page cache of the weights (DRAM nodes only): the checkpoint's bytes (params × dtype, without the runtime
  overhead factor), shared over the nodes of the ranks that read them — the loader reads them through the page
  cache, and a pool that leaves no room for it makes every restart reclaim or swap;
- pinned overheads (DRAM nodes only): 1 GiB per rank — the CUDA context's host memory and the engine's own
  pinned staging buffers, outside the pool option.

The pool wanted is what the capacity model (``checks.capacity``) puts off HBM at ``max_batch`` (at least
``dram_offload``); without a model, or when the workload fits HBM, the pool is a prefix cache: all that a CXL
pool node can give (it holds nothing else), half of what a DRAM node can give.
Per rank: ``min(wanted / ranks, usable of its node / ranks on that node)``, in steps of 256 MiB.
Reserves are capped for small nodes: half of a DRAM node, a quarter of a CXL node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..facts import Facts
    from ..host.numabind import BindProbe
    from ..kinds.projection import NodeProjection

GiB = 1024**3
STEP = GiB // 4  # pool sizes are multiples of 256 MiB (vLLM and LMCache take fractional GiB)


def format_size(n: int) -> str:
    """GiB with one decimal: what the engines' options are given in."""
    return f"{n / GiB:,.1f} GiB"

PINNED_PER_RANK = 1 * GiB
ENGINES = ("vllm", "sglang", "lmcache")
#: Maru's server listens here by default (xcena-dev/maru docs/source/api_reference/config.md: --port 5555); LMCache
#: reaches it as maru://HOST:PORT (lmcache/v1/storage_backend/maru_backend.py turns maru:// into tcp://).
MARU_PORT = 5555
PROFILE_CHANGE = ("apply profiles/cxl-kv-pool.yaml, or give the memory.dax rule of the CXL devices `zone: normal, "
                  "use: pinned-pool` (ZONE_NORMAL: pinned pages may stay there)")


@dataclass(frozen=True)
class Rank:
    index: int  # the CUDA device index (CUDA_DEVICE_ORDER=PCI_BUS_ID: PCI address order)
    pci: str
    gpu_node: int | None
    pool_node: int


@dataclass(frozen=True)
class PoolNode:
    id: int
    tier: str  # DRAM | CXL
    free: int
    reserve: int
    weights_cache: int
    pinned_overhead: int
    ranks: int
    note: str = ""

    @property
    def usable(self) -> int:
        return max(self.free - self.reserve - self.weights_cache - self.pinned_overhead, 0)


@dataclass(frozen=True)
class MaruDevice:
    """A DAX device the profile keeps as devdax for Maru (``memory.dax`` ``use: maru``)."""

    name: str
    size: int
    node: int | None  # its target node (the memory is not online: no NUMA node holds it)
    ready: bool = True  # devdax now (False: the profile's plan makes it devdax; apply first)
    online: bool = False  # some of its memory online now (making it devdax is disruptive)

    @property
    def path(self) -> str:
        return f"/dev/{self.name}"


@dataclass(frozen=True)
class ServingPlan:
    engine: str
    pool: str  # capacity | latency | maru (LMCache's Maru backend on devdax devices)
    ranks: tuple[Rank, ...]
    nodes: tuple[PoolNode, ...]
    per_rank: int  # bytes, a multiple of STEP
    wanted: int | None  # bytes the capacity model puts off HBM (None: no model)
    bind: BindProbe
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    profile: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    version: tuple[int, ...] = ()
    maru: tuple[MaruDevice, ...] = ()

    @property
    def total(self) -> int:
        return self.per_rank * len(self.ranks)

    @property
    def pool_nodes(self) -> tuple[int, ...]:
        return tuple(n.id for n in self.nodes)

    def to_dict(self) -> dict[str, Any]:
        from .versions import show, table

        return {"engine": self.engine, "version": show(self.version), "options_read": table(self.engine),
                "profile": self.profile, "pool": self.pool,
                "per_rank_bytes": self.per_rank, "total_bytes": self.total, "wanted_bytes": self.wanted,
                "ranks": [{"gpu": r.index, "pci": r.pci, "gpu_node": r.gpu_node, "pool_node": r.pool_node}
                          for r in self.ranks],
                "nodes": [{"node": n.id, "tier": n.tier, "free": n.free, "os_reserve": n.reserve,
                           "weights_page_cache": n.weights_cache, "pinned_overhead": n.pinned_overhead,
                           "usable": n.usable, "ranks": n.ranks} for n in self.nodes],
                "bind": self.bind.to_dict(), "settings": self.settings,
                "maru": [{"device": m.name, "path": m.path, "size": m.size, "node": m.node} for m in self.maru],
                "notes": list(self.notes),
                "warnings": list(self.warnings)}


# -- which nodes -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CxlNode:
    id: int
    zone: str | None  # Normal | Movable | None (not online after the plan)
    free: int
    host: int | None  # the socket node its device hangs off
    devices: tuple[str, ...]


def cxl_nodes(facts: Facts, proj: NodeProjection) -> list[CxlNode]:
    """CXL nodes as the plan leaves them: from the DAX devices' projection, and CPU-less lower-tier nodes."""
    out: dict[int, CxlNode] = {}
    top = min(facts.tiers) if facts.tiers else None
    for d in proj.dax:
        if d.node is None or d.use == "maru":  # kept as devdax for Maru: not memory of any node
            continue
        node = facts.node(d.node)
        online_now = node is not None and node.mem_total > 0
        prev = out.get(d.node)
        base = prev.free if prev else (node.mem_free if online_now and node is not None else 0)
        add = d.range[1] - d.range[0] if d.comes_online and d.range else 0
        zone = d.zone if d.online else None
        if prev is not None and prev.zone != zone:
            zone = None  # mixed: not one zone a pinned pool can count on
        out[d.node] = CxlNode(d.node, zone, base + add, prev.host if prev else d.host_node,
                              (*(prev.devices if prev else ()), d.name))
    maru = {d.node for d in proj.dax if d.use == "maru"}  # a Maru device's node, even while it is still online
    for n in facts.nodes:
        if n.id in out or n.id in maru or n.has_cpu or not n.mem_total or n.tier is None or top is None or \
                n.tier <= top:
            continue
        out[n.id] = CxlNode(n.id, "Normal" if n.has_normal_memory else "Movable", n.mem_free, None, ())
    return [out[k] for k in sorted(out)]


def _distance(facts: Facts, a: int | None, b: int) -> int:
    node = facts.node(a) if a is not None else None
    if node is None:
        return 255
    ids = [n.id for n in facts.nodes]
    row = node.distances
    return row[ids.index(b)] if b in ids and len(row) == len(ids) else row[b] if b < len(row) else 255


def _nearest(facts: Facts, gpu_node: int | None, cands: list[CxlNode]) -> CxlNode:
    behind = [c for c in cands if c.host is not None and c.host == gpu_node]
    if behind:
        return behind[0]
    return min(cands, key=lambda c: (_distance(facts, gpu_node, c.id), c.id))


# -- the plan ----------------------------------------------------------------------------------------------------

def _dram_reserve(total: int) -> int:
    return min(max(4 * GiB, total * 5 // 100), total // 2)  # a small node keeps half


def _cxl_reserve(total: int) -> int:
    return min(max(1 * GiB, total * 2 // 100), total // 4)  # a small node keeps a quarter


def plan(engine: str, facts: Facts, proj: NodeProjection, gpus: list[tuple[str, int | None]],
         workload: Any | None, hbm: int | None, bind: Any, *, ranks: int | None = None,
         weights_file: int | None = None, dram_offload: int = 0, profile: str = "",
         hugetlb: int = 0, version: tuple[int, ...] | None = None) -> ServingPlan:
    """Pure: the pool for ``engine``. ``gpus``: (PCI address, NUMA node) in PCI order; ``workload``: the capacity
    model's :class:`~nodeagent.checks.capacity.Workload` (or None); ``weights_file``: the checkpoint's bytes;
    ``bind(nodes) -> BindProbe``; ``hugetlb``: the bytes the node reserves as HugePages (every size);
    ``version``: the engine release to render for (default: the newest pinned one, :mod:`.versions`)."""
    from .versions import MARU_OPTION, default, has, option, parse, show

    version = version or parse(default(engine))
    notes: list[str] = []
    warnings: list[str] = []
    maru = maru_devices(facts, proj)
    for m in maru:
        if not m.ready:
            warnings.append(f"{m.name} not devdax yet: the profile keeps it for Maru; apply the profile before "
                            "starting Maru" + (" (with --allow-disruptive: its online memory must go offline "
                                               "first)" if m.online else ""))
    maru_key = MARU_OPTION[engine]
    if maru and engine != "lmcache" and not has(engine, version, maru_key):
        first = option(engine, maru_key).since
        notes.append(f"{', '.join(m.name for m in maru)} kept as devdax for Maru (memory.dax use: maru): "
                     f"{engine} {show(version)} predates Maru's {maru_key} (first in {show(first) if first else '?'})"
                     ", so the pool below leaves them out; render a newer release, or --engine lmcache, for Maru")
    elif maru and not has(engine, version, maru_key):
        first = option("lmcache", "maru_path").since
        warnings.append(f"{', '.join(m.name for m in maru)} kept as devdax for Maru, but LMCache {show(version)} has "
                        f"no Maru backend (maru_path, first in {show(first) if first else '?'}): use a newer "
                        "LMCache to use it")
    if engine == "sglang" and hugetlb:
        # SGLang checks its HiCache host pool against psutil's available memory, the kernel's MemAvailable,
        # which leaves reserved HugePages out whether or not they are in use (sgl-project/sglang#34972, open
        # as of SGLang 0.5).
        warnings.append(f"this node reserves {format_size(hugetlb)} as HugePages: SGLang's HiCache checks its host "
                        "pool against MemAvailable, which leaves reserved HugePages out (sgl-project/sglang#34972), "
                        "so with SGLANG_HUGEPAGE_SIZE set its start can fail with \"Not enough host memory\" while "
                        "the HugePages are free; the size rendered here comes from free memory, which leaves them "
                        "out too")
    dram = [n for n in facts.nodes if n.has_cpu and n.mem_total]
    if not dram:
        dram = [n for n in facts.nodes if n.mem_total][:1]
    if not gpus:
        gpus = [("(no GPU found)", dram[0].id if dram else 0)]
        warnings.append("no GPU found in the hardware facts: one rank assumed, on the first DRAM node")
    count = ranks or len(gpus)
    if count > len(gpus):
        warnings.append(f"{count} ranks asked, {len(gpus)} GPUs found: ranks beyond the GPUs take the last GPU's "
                        "node")
    chosen = [gpus[min(i, len(gpus) - 1)] for i in range(count)]
    cxl = cxl_nodes(facts, proj)
    normal = [c for c in cxl if c.zone == "Normal"]
    stranded = [c for c in cxl if c.zone != "Normal"]
    pool = "capacity" if normal else "latency"

    def gpu_node(n: int | None) -> int:
        if n is not None and facts.node(n) is not None:
            return n
        return dram[0].id if dram else 0

    rank_list: list[Rank] = []
    for i, (pci, node) in enumerate(chosen):
        if node is None:
            notes.append(f"GPU {pci} reports no NUMA node (numa_node -1): its pool goes to node{gpu_node(node)}")
        target = _nearest(facts, gpu_node(node), normal).id if normal else gpu_node(node)
        rank_list.append(Rank(i, pci, node, target))
    if stranded and not normal:
        what = ", ".join(f"node{c.id} ({'ZONE_MOVABLE' if c.zone == 'Movable' else 'not online'}"
                         f"{': ' + ', '.join(c.devices) if c.devices else ''})" for c in stranded)
        warnings.append(f"CXL {what}: a pinned pool cannot use it — the kernel migrates long-term-pinned pages out "
                        "of ZONE_MOVABLE before pinning, so a pool bound there silently lands on DRAM; the pool is "
                        f"bound to the GPUs' DRAM instead. To let it use CXL: {PROFILE_CHANGE}")
    elif stranded:
        notes.append("not used for the pool (movable or not online): "
                     + ", ".join(f"node{c.id}" for c in stranded))
    # Sizes per pool node.
    by_node: dict[int, int] = {}
    for r in rank_list:
        by_node[r.pool_node] = by_node.get(r.pool_node, 0) + 1
    cpu_ranks: dict[int, int] = {}
    for r in rank_list:
        g = gpu_node(r.gpu_node)
        cpu_ranks[g] = cpu_ranks.get(g, 0) + 1
    nodes: list[PoolNode] = []
    for nid, k in sorted(by_node.items()):
        if pool == "capacity":
            c = next(x for x in normal if x.id == nid)
            total = max(c.free, facts.node(nid).mem_total if facts.node(nid) else 0)  # type: ignore[union-attr]
            note = "" if (facts.node(nid) and facts.node(nid).mem_total) else \
                f"{', '.join(c.devices)}: not online yet (the profile onlines it; apply first)"
            nodes.append(PoolNode(nid, "CXL", c.free, _cxl_reserve(total), 0, 0, k, note))
        else:
            n = facts.node(nid)
            assert n is not None
            wc = weights_file * cpu_ranks.get(nid, 0) // count if weights_file else 0
            nodes.append(PoolNode(nid, "DRAM", n.mem_free, _dram_reserve(n.mem_total), wc,
                                  PINNED_PER_RANK * cpu_ranks.get(nid, 0), k))
    if pool == "capacity":  # the weights' page cache and the pinned overheads stay in the ranks' DRAM
        for g, k in sorted(cpu_ranks.items()):
            n = facts.node(g)
            if n is None:
                continue
            need = _dram_reserve(n.mem_total) + PINNED_PER_RANK * k + \
                (weights_file * k // count if weights_file else 0)
            if n.mem_free < need:
                warnings.append(f"node{g} (DRAM of {k} rank(s)) has {format_size(n.mem_free)} free, less than the "
                                f"{format_size(need)} its OS reserve, weights' page cache and pinned overheads "
                                "need")
    if not weights_file:
        notes.append("no capacity model (checks.capacity): the page cache of the weights is not reserved")
    wanted = None
    if workload is not None and hbm is not None:
        off = max(workload.need() - hbm, 0)
        wanted = max(off, dram_offload) if pool == "latency" else off
        if wanted == 0:
            notes.append("the workload fits HBM at its max_batch: the host pool is a prefix cache, sized to what "
                         "the pool nodes can give")
    maru_pool = bool(maru) and has(engine, version, MARU_OPTION[engine])
    if maru_pool:  # Maru replaces the engine's own host pool: the pool is the devdax device(s), split over the
        from dataclasses import replace  # workers

        pool, nodes = "maru", []
        where = maru[0].node
        rank_list = [replace(r, pool_node=where if where is not None else r.pool_node) for r in rank_list]
        fit = sum(m.size for m in maru) // count
    else:
        fit = min(n.usable // n.ranks for n in nodes) if nodes else 0
    if not wanted and pool == "latency":
        fit //= 2  # a prefix cache in DRAM leaves half of what is usable to everything else on the node
    fit = fit // STEP * STEP
    per = fit if not wanted else min(fit, -(-wanted // (count * STEP)) * STEP)
    if wanted and per * count < wanted:
        warnings.append(f"the capacity model puts {format_size(wanted)} of KV cache off HBM; the pool nodes give "
                        f"{format_size(per)} per rank × {count} = {format_size(per * count)}: lower max_batch or "
                        "add memory")
    if per == 0:
        warnings.append("no host pool fits on the pool nodes after the reserves: offloading stays off")
    pending = [n for n in sorted(by_node) if not (facts.node(n) and facts.node(n).mem_total)]  # type: ignore[union-attr]
    if maru_pool:
        from ..host.numabind import BindProbe

        probe = BindProbe("devdax", (), f"{', '.join(m.path for m in maru)} stays devdax and Maru maps it")
    elif pending:
        from ..host.numabind import BindProbe

        probe = BindProbe("unprobed", tuple(sorted(by_node)),
                          f"{', '.join(f'node{n}' for n in pending)} not online yet: apply the profile, then render "
                          "again to probe the binding")
    else:
        probe = bind(tuple(sorted(by_node)))
    if probe.mode == "none":
        warnings.append(f"the memory policy cannot be set here ({probe.summary}): the pool lands where the "
                        "allocating CPU is")
    elif probe.mode == "preferred":
        warnings.append(f"{probe.summary}: the pool may spill to other nodes when node{probe.nodes[0]} is full")
    sp = ServingPlan(engine, pool, tuple(rank_list), tuple(nodes), per, wanted, probe, tuple(notes),
                     tuple(warnings), profile, version=version, maru=tuple(maru))
    return ServingPlan(**{**sp.__dict__, "settings": settings(sp)})


def maru_devices(facts: Facts, proj: NodeProjection) -> list[MaruDevice]:
    """The DAX devices a ``use: maru`` rule keeps as devdax, with their sizes."""
    from ..facts.dax import from_facts

    dax = from_facts(facts)
    out = []
    for d in proj.dax:
        dev = dax.device(d.name)
        if d.use == "maru" and (dev is not None or d.size):  # the rule says devdax (the model refuses anything
            # else); a device the plan makes in part of a region (memory.dax size) does not exist yet
            out.append(MaruDevice(d.name, dev.size if dev is not None else d.size, d.node,
                                  ready=dev is not None and d.mode_now == "devdax", online=d.online_now))
    return out


# -- the engines' options ----------------------------------------------------------------------------------------

def _wrapper(p: ServingPlan) -> list[str]:
    b = p.bind
    if b.mode in ("membind", "unprobed"):
        return ["numactl", f"--membind={','.join(map(str, b.nodes))}"]
    if b.mode == "preferred":
        return ["numactl", f"--preferred={b.nodes[0]}"]
    return []


def _num(x: float) -> int | float:
    """A size in the option's unit: whole when it is whole, else two decimals (multiples of 0.25 GiB)."""
    return int(x) if x == int(x) else round(x, 2)


def settings(p: ServingPlan) -> dict[str, Any]:
    """The engine's options for ``p`` (names and units as release ``p.version`` reads them; each option's first
    release and source are in :mod:`.versions`)."""
    import json

    from .versions import has

    v = p.version
    gib = _num(p.per_rank / GiB)
    n = len(p.ranks)
    wrap = _wrapper(p)
    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    if p.pool == "maru" and p.engine != "lmcache":
        return _maru_direct(p, env)
    if p.engine == "vllm":
        args: list[str] = []
        semantics = []
        if gib and has("vllm", v, "OffloadingConnector cpu_bytes_to_use"):
            extra = {"cpu_bytes_to_use": p.total, "eviction_policy": "lru"}
            args = ["--kv-transfer-config", json.dumps({"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
                                                        "kv_connector_extra_config": extra}, separators=(",", ":"))]
            semantics.append(f"cpu_bytes_to_use is bytes for the whole engine: vLLM divides it over the "
                             f"{n} rank(s) (tensor × pipeline parallel); eviction_policy lru is vLLM's default "
                             "(arc is the alternative); no secondary_tiers: nodeagent manages no tier below "
                             "this pool")
        elif gib:
            args = ["--kv-offloading-backend", "native", "--kv-offloading-size", str(_num(p.total / GiB))]
            semantics.append("--kv-offloading-size is GiB for the whole engine: vLLM divides it by "
                             "tensor_parallel_size × pipeline_parallel_size (per rank: "
                             f"{gib} GiB × {n} ranks); this release needs the backend named")
        semantics.append("its buffers are pinned")
        numa_bind = has("vllm", v, "--numa-bind")
        if numa_bind and p.pool == "latency" and p.bind.mode == "membind":
            wrap = []
            args += ["--numa-bind", "--numa-bind-nodes", *(str(r.pool_node) for r in p.ranks)]
            semantics.append("--numa-bind runs each worker under numactl --cpunodebind=N --membind=N of its "
                             "GPU's node (--numa-bind-nodes: one node per visible GPU, by CUDA index), so each "
                             "rank's pool lands on its GPU's DRAM")
        else:
            semantics.append("numactl's policy covers every worker: MPOL_BIND over several nodes allocates on the "
                             "one nearest the CPU a rank runs on")
            if numa_bind and p.pool == "capacity":
                semantics.append("--numa-bind is not used: it binds each worker's CPUs and memory to one node "
                                 "with CPUs, so it cannot put the pool on a CPU-less CXL node, and its per-worker "
                                 "numactl would replace this wrapper's policy; the global numactl stays")
        return {"env": env, "wrapper": wrap, "args": args, "semantics": "; ".join(semantics),
                "command": [*wrap, "vllm", "serve", "MODEL", "--tensor-parallel-size", str(n), *args]}
    if p.engine == "sglang":
        gb = int(p.per_rank / 1e9)
        args = ["--enable-hierarchical-cache", "--hicache-size", str(gb)] if gb else []
        semantics = ["--hicache-size is GB (10^9) per rank (each TP rank allocates its own host pool) and "
                     "overrides --hicache-ratio; do not pass --numa-node (it binds each rank with --membind to its "
                     "GPU's node)"]
        if gb and has("sglang", v, "--hicache-mem-layout") and has("sglang", v, "--hicache-io-backend"):
            args += ["--hicache-mem-layout", "page_first", "--hicache-io-backend", "kernel"]
            semantics.append("page_first keeps a page's layers together (SGLang's HiCache best practice) and the "
                             "kernel I/O backend copies with GPU kernels")
        if gb and p.pool == "capacity" and has("sglang", v, "--hicache-write-policy"):
            args += ["--hicache-write-policy", "write_through"]
            semantics.append("write_through backs every page up to the host pool as it is written, so the large "
                             "CXL pool holds all the GPU evicts")
        detect = has("sglang", v, "--disable-hicache-numa-detect")
        if gb and p.pool == "capacity" and detect:
            args.append("--disable-hicache-numa-detect")  # its own detection binds the pool to the GPU's node
        if p.pool == "capacity" and has("sglang", v, "SGLANG_AUTO_NUMA_BIND"):
            env = env | {"SGLANG_AUTO_NUMA_BIND": "0"}
            semantics.append("SGLANG_AUTO_NUMA_BIND=0: otherwise SGLang runs each worker under numactl "
                             "--cpunodebind=N --membind=N of its GPU's node, which replaces the wrapper's policy and "
                             "puts the pool on DRAM (a release that lost this switch, between sgl-project/sglang"
                             "#19452 and #30394, does so anyway: verify-serving shows where the pool went)")
        if p.pool == "latency" and detect:
            wrap = []  # HiCache's NUMA detection already puts each rank's pool on its GPU's node
            semantics.append("HiCache's NUMA detection stays on: it binds each rank's pool to its GPU's node")
        elif not detect:
            semantics.append("this release has no HiCache NUMA detection: numactl's policy places the pool")
        return {"env": env, "wrapper": wrap, "args": args, "semantics": "; ".join(semantics),
                "command": [*wrap, "python3", "-m", "sglang.launch_server", "--model-path", "MODEL", "--tp-size",
                            str(n), *args]}
    mapping = {r.index: r.pool_node for r in p.ranks}
    cfg: dict[str, Any] = {"chunk_size": 256, "local_cpu": True, "max_local_cpu_size": gib}
    semantics = ["max_local_cpu_size is GiB (LMCache allocates × 1024³) per worker: each rank's engine has its "
                 "own pinned buffer; numa_mode manual binds each worker's buffer to the node gpu_to_numa_mapping "
                 "gives its CUDA device index"]
    if p.bind.mode in ("membind", "unprobed"):
        cfg |= {"numa_mode": "manual", "extra_config": {"gpu_to_numa_mapping": mapping}}
        wrap = []
    out: dict[str, Any] = {"env": env | {"LMCACHE_CONFIG_FILE": "lmcache.yaml"}, "wrapper": wrap}
    if p.pool == "maru":
        total = sum(m.size for m in p.maru)
        cfg = {"chunk_size": 256, "local_cpu": False, "max_local_cpu_size": 0,
               "maru_path": f"maru://localhost:{MARU_PORT}", "maru_pool_size": gib}
        out["wrapper"] = []
        out["maru_server"] = _maru_server(p)
        semantics = [f"Maru keeps the KV cache on {', '.join(m.path for m in p.maru)} ({format_size(total)}, devdax: "
                     "memory no NUMA node holds, so no binding applies); maru_pool_size is GiB (× 1024³) each worker "
                     f"asks maru-server for: {format_size(total)} over {n} worker(s); maru-server --dax-path pins "
                     "its pool to these devices (without it, it takes any devdax device); LMCache's own CPU buffer "
                     "is off"]
    out |= {"config": cfg, "semantics": "; ".join(semantics),
            "command": [*out["wrapper"], "vllm", "serve", "MODEL", "--tensor-parallel-size", str(n),
                        "--kv-transfer-config", '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}']}
    return out


def _maru_server(p: ServingPlan) -> list[str]:
    return ["maru-server", "--port", str(MARU_PORT), *(x for m in p.maru for x in ("--dax-path", m.path))]


def _maru_size(n: int) -> str:
    """A Maru pool size as Maru's configs take it (``4G``, ``512M``: binary units)."""
    return f"{n // GiB}G" if n % GiB == 0 else f"{n // 2**20}M"


def _maru_direct(p: ServingPlan, env: dict[str, str]) -> dict[str, Any]:
    """Maru's own vLLM connector or SGLang HiCache backend (xcena-dev/maru docs/source/integration/): no LMCache,
    each worker's MaruHandler asks maru-server for ``maru_pool_size`` of the devdax device(s)."""
    import json

    n = len(p.ranks)
    total = sum(m.size for m in p.maru)
    extra = {"maru_server_url": f"tcp://localhost:{MARU_PORT}", "maru_pool_size": _maru_size(p.per_rank)}
    where = (f"Maru keeps the KV cache on {', '.join(m.path for m in p.maru)} ({format_size(total)}, devdax: memory "
             "no NUMA node holds, so no binding applies); maru_pool_size (binary units) is what each worker's "
             f"MaruHandler asks maru-server for: {format_size(total)} over {n} worker(s); maru-server --dax-path "
             "pins its pool to these devices")
    if p.engine == "vllm":
        cfg = {"kv_connector": "MaruKVConnector", "kv_connector_module_path": "maru_vllm", "kv_role": "kv_both",
               "kv_connector_extra_config": extra}
        args = ["--kv-transfer-config", json.dumps(cfg, separators=(",", ":"))]
        semantics = [where, "MaruKVConnector (pip package maru_vllm) copies between GPU and CXL with no CPU buffer "
                     "and replaces vLLM's own CPU offloading: no OffloadingConnector, no numactl"]
        command = ["vllm", "serve", "MODEL", "--tensor-parallel-size", str(n), *args]
    else:
        backend = {"backend_name": "maru", "module_path": "maru_sglang.maru_storage", "class_name": "MaruStorage",
                   "interface_v1": 1} | extra
        args = ["--enable-hierarchical-cache", "--hicache-write-policy", "write_through", "--hicache-mem-layout",
                "page_first_direct", "--hicache-storage-backend", "dynamic", "--hicache-storage-backend-extra-config",
                json.dumps(backend, separators=(",", ":"))]
        semantics = [where, "Maru is HiCache's L3 (GPU → host DRAM → Maru): the host DRAM pool keeps SGLang's "
                     "default --hicache-ratio; MaruStorage needs page_first_direct and interface_v1 1, and "
                     "write_through so pages reach Maru"]
        command = ["python3", "-m", "sglang.launch_server", "--model-path", "MODEL", "--tp-size", str(n), *args]
    return {"env": env, "wrapper": [], "args": args, "maru_server": _maru_server(p), "semantics": "; ".join(semantics),
            "command": command}


def _yaml(cfg: dict[str, Any], indent: str = "") -> list[str]:
    out = []
    for k, v in cfg.items():
        if isinstance(v, dict):
            out.append(f"{indent}{k}:")
            out += _yaml(v, indent + "  ")
        else:
            out.append(f"{indent}{k}: {str(v).lower() if isinstance(v, bool) else v}")
    return out


def text(p: ServingPlan) -> str:
    import shlex

    s = p.settings
    maru = ", ".join(m.path for m in p.maru)
    pool = {"capacity": "capacity pool on ZONE_NORMAL CXL", "latency": "latency pool on the GPUs' local DRAM",
            "maru": f"Maru's pool on {maru} (devdax, {format_size(sum(m.size for m in p.maru))})"}[p.pool]
    from .versions import show

    lines = [f"serving: {p.engine} {show(p.version)} (options as that release reads them; `--version X` for "
             f"another), profile {p.profile or '(none)'}",
             f"pool: {pool}, {format_size(p.per_rank)} per rank × {len(p.ranks)} = {format_size(p.total)}"
             + (f" (the capacity model puts {format_size(p.wanted)} off HBM)" if p.wanted else "")]
    for r in p.ranks:
        lines.append(f"  rank {r.index}: GPU {r.pci} (node{r.gpu_node if r.gpu_node is not None else '?'}) → "
                     + (f"Maru on {maru}" if p.pool == "maru" else f"pool on node{r.pool_node}"))
    if p.nodes:
        lines.append("sizes per pool node (usable = free − OS reserve − weights' page cache − pinned overheads):")
    for n in p.nodes:
        lines.append(f"  node{n.id} {n.tier}: {format_size(n.free)} − {format_size(n.reserve)} − "
                     f"{format_size(n.weights_cache)} − {format_size(n.pinned_overhead)} = {format_size(n.usable)} "
                     f"for {n.ranks} rank(s)" + (f"; {n.note}" if n.note else ""))
    lines.append(f"bind: {p.bind.summary}")
    lines.append("launch:")
    env = " ".join(f"{k}={v}" for k, v in s["env"].items())
    if "maru_server" in s:
        lines.append(f"  {shlex.join(s['maru_server'])}   (Maru's server, beside maru-resource-manager)")
    lines.append(f"  {env} {shlex.join(s['command'])}")
    if "config" in s:
        lines.append(f"  {s['env']['LMCACHE_CONFIG_FILE']}:")
        lines += [f"    {x}" for x in _yaml(s["config"])]
    lines.append(f"  ({s['semantics']})")
    lines += [f"note: {x}" for x in p.notes]
    lines += [f"warning: {x}" for x in p.warnings]
    return "\n".join(lines)


__all__ = ["ENGINES", "MaruDevice", "ServingPlan", "cxl_nodes", "maru_devices", "plan", "settings", "text"]
