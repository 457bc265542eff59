"""The kernel's vocabularies, shared by the profile model (what users write) and the knob codecs (what the
kernel reads and prints). A leaf module: no imports from the rest of nodeagent."""

from __future__ import annotations

#: /proc/sys/kernel/numa_balancing: names for the kernel's mode numbers (mode 2 = memory tiering, 5.18+).
NUMA_BALANCING = {0: "disabled", 1: "normal", 2: "memory-tiering", 3: "normal+memory-tiering"}
NUMA_BALANCING_BY_NAME = {v: k for k, v in NUMA_BALANCING.items()}

THP_ENABLED = ("always", "madvise", "never")
THP_DEFRAG = ("always", "defer", "defer+madvise", "madvise", "never")
AUTO_ONLINE_BLOCKS = ("offline", "online", "online_movable", "online_kernel")

#: /proc/sys/vm/zone_reclaim_mode bits (the kernel's RECLAIM_ZONE, RECLAIM_WRITE, RECLAIM_UNMAP: the last lets node
#: reclaim unmap mapped pages, which swaps anonymous ones out where no lower tier takes them).
ZONE_RECLAIM_BITS = {1: "reclaim", 2: "write-dirty", 4: "unmap"}

#: DAX device modes (daxctl's words) and the zones system-ram memory can be onlined in (the profile's words;
#: the kernel's valid_zones says Movable/Normal).
DAX_MODES = ("system-ram", "devdax")
DAX_ZONES = ("movable", "normal")
ZONE_KERNEL_NAME = {"movable": "Movable", "normal": "Normal"}
#: What a DAX rule's memory is for; the plan warns when a rule's zone does not fit it. ``maru``: a devdax device
#: kept for Maru (XCENA's CXL KV-cache store, an LMCache backend), which maps /dev/daxX.Y itself.
DAX_USES = ("tiered", "pinned-pool", "maru")

#: Bytes per element of the dtypes a model's weights or KV cache are stored in (the capacity check).
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4, "float32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "float16": 2, "bfloat16": 2,
    "fp8": 1, "int8": 1, "float8": 1, "fp6": 0.75, "int4": 0.5, "fp4": 0.5, "nf4": 0.5,
}
#: The check names, as the profile's ``checks:`` section, ``--skip-checks`` and reports spell them.
CHECK_NAMES = ("cpu", "disk", "gpu_pcie", "memory_bandwidth", "latency", "capacity", "coexistence", "placement")

#: DAMON's names that no sysfs file lists (the profile validates them; the facts judge them by release), each with
#: the release that introduced it or the capability feature that proves it (nodeagent.facts.damon_caps).
DAMON_ACTIONS: dict[str, str] = {
    "willneed": "5.18", "cold": "5.18", "pageout": "5.18", "hugepage": "5.18", "nohugepage": "5.18",
    "lru_prio": "6.0", "lru_deprio": "6.0", "migrate_hot": "migrate", "migrate_cold": "migrate", "stat": "5.18",
}
DAMON_FILTER_TYPES: dict[str, str] = {
    "anon": "6.3", "memcg": "6.3", "addr": "6.6", "target": "6.6", "young": "6.10", "hugepage_size": "6.15",
    "unmapped": "6.15", "active": "6.15",
}
DAMON_GOAL_METRICS: dict[str, str] = {
    "user_input": "6.8", "some_mem_psi_us": "6.9", "node_mem_used_bp": "6.16", "node_mem_free_bp": "6.16",
    "node_memcg_used_bp": "6.19", "node_memcg_free_bp": "6.19", "active_mem_bp": "7.0",
    "inactive_mem_bp": "7.0",
}
#: ``quotas/goal_tuner`` (7.1): how quota goals tune the effective quota. ``consist`` (the kernel's default) keeps
#: adjusting it in proportion to how far the goal is; ``temporal`` goes to the largest quota while the goal is
#: unmet and to zero once it is met (damo: damos_qgtuner_consist/_temporal).
DAMON_GOAL_TUNERS: dict[str, str] = {"consist": "goal_tuner", "temporal": "goal_tuner"}
