"""The emulated DAMON sysfs tree: which files each kernel generation creates, with the kernel's defaults.

Three generations matter for nodeagent and are emulated by release: 6.8-like (schemes with filters, goals and
apply_interval_us but no migrate actions), 6.12-like (``target_nid`` with migrate_hot/cold, filters without
``allow``), 6.18-like (``dests/``, ``core_filters/``+``ops_filters/``, ``intervals_goal/``, ``addr_unit``,
``refresh_ms``). Layout and defaults follow ``damon-sysfs-tree-6.18.txt`` and ``realkernel/damon-tree-6.12.txt``:
writable files are mode 600, read-only ones 400; access-pattern maxima default to 0 (matching nothing).
This table is the simulator's own (it does not import the agent's capability table) so the two can disagree
— which is what tests are for.
"""

from __future__ import annotations

from .damon_modules import lay_out as lay_out_modules
from .kernel import SimKernel

ADMIN = "/sys/kernel/mm/damon/admin"
KDAMONDS = f"{ADMIN}/kdamonds"
W = 0o600
R = 0o400

ACTIONS = [("willneed", (5, 18)), ("cold", (5, 18)), ("pageout", (5, 18)), ("hugepage", (5, 18)),
           ("nohugepage", (5, 18)), ("lru_prio", (6, 0)), ("lru_deprio", (6, 0)), ("migrate_hot", (6, 11)),
           ("migrate_cold", (6, 11)), ("stat", (5, 18))]
FILTER_TYPES = [("anon", (6, 3)), ("memcg", (6, 3)), ("addr", (6, 6)), ("target", (6, 6)), ("young", (6, 10)),
                ("hugepage_size", (6, 15)), ("unmapped", (6, 15)), ("active", (6, 15))]
GOAL_METRICS = [("user_input", (6, 9)), ("some_mem_psi_us", (6, 9)), ("node_mem_used_bp", (6, 16)),
                ("node_mem_free_bp", (6, 16)), ("node_memcg_used_bp", (6, 19)), ("node_memcg_free_bp", (6, 19)),
                ("active_mem_bp", (7, 0)), ("inactive_mem_bp", (7, 0))]
#: quotas/goal_tuner's words (7.1; damo: sysfs/damos_quota_goal_tuner)
GOAL_TUNERS = ["consist", "temporal"]
COMMANDS = [("on", (5, 18)), ("off", (5, 18)), ("update_schemes_stats", (5, 18)), ("commit", (5, 19)),
            ("update_schemes_tried_regions", (6, 2)), ("clear_schemes_tried_regions", (6, 2)),
            ("update_schemes_tried_bytes", (6, 6)), ("commit_schemes_quota_goals", (6, 8)),
            ("update_schemes_effective_quotas", (6, 9)), ("update_tuned_intervals", (6, 15))]
MODULES = [("damon_reclaim", (5, 16)), ("damon_lru_sort", (6, 0)), ("damon_stat", (6, 17))]


def names(k: SimKernel, table: list[tuple[str, tuple[int, int]]]) -> list[str]:
    return [n for n, since in table if k.version >= since]


def operations(k: SimKernel) -> list[str]:
    return ["vaddr", "fvaddr", "paddr"] if k.at_least(5, 19) else ["vaddr", "paddr"]


def _files(k: SimKernel, base: str, files: list[tuple[str, str | int, int]]) -> None:
    for name, value, mode in files:
        k.tree.file(f"{base}/{name}", value, mode)


def kdamond(k: SimKernel, base: str) -> None:
    files: list[tuple[str, str | int, int]] = [("state", "off", W), ("pid", -1, R), ("contexts/nr_contexts", 0, W)]
    if k.at_least(6, 17):
        files.append(("refresh_ms", 0, W))
    _files(k, base, files)


def context(k: SimKernel, base: str) -> None:
    iv = "monitoring_attrs/intervals"
    files: list[tuple[str, str | int, int]] = [
        ("operations", "vaddr", W),
        (f"{iv}/sample_us", 5000, W), (f"{iv}/aggr_us", 100000, W), (f"{iv}/update_us", 60000000, W),
        ("monitoring_attrs/nr_regions/min", 10, W), ("monitoring_attrs/nr_regions/max", 1000, W),
        ("targets/nr_targets", 0, W), ("schemes/nr_schemes", 0, W)]
    if k.at_least(5, 19):
        files.append(("avail_operations", "\n".join(operations(k)), R))
    if k.at_least(6, 15):
        files += [(f"{iv}/intervals_goal/{n}", 0, W) for n in ("access_bp", "aggrs", "min_sample_us",
                                                               "max_sample_us")]
    if k.at_least(6, 18):
        files.append(("addr_unit", 1, W))
    _files(k, base, files)


def target(k: SimKernel, base: str) -> None:
    files: list[tuple[str, str | int, int]] = [("pid_target", 0, W), ("regions/nr_regions", 0, W)]
    if k.at_least(6, 19):  # damo: sysfs/obsolete_target
        files.append(("obsolete_target", "N", W))
    _files(k, base, files)


def region(k: SimKernel, base: str) -> None:
    _files(k, base, [("start", 0, W), ("end", 0, W)])


def scheme(k: SimKernel, base: str) -> None:
    files: list[tuple[str, str | int, int]] = [("action", "stat", W)]
    for part in ("sz", "nr_accesses", "age"):
        files += [(f"access_pattern/{part}/min", 0, W), (f"access_pattern/{part}/max", 0, W)]
    files += [("quotas/ms", 0, W), ("quotas/bytes", 0, W), ("quotas/reset_interval_ms", 0, W),
              ("quotas/weights/sz_permil", 0, W), ("quotas/weights/nr_accesses_permil", 0, W),
              ("quotas/weights/age_permil", 0, W),
              ("watermarks/metric", "none", W), ("watermarks/interval_us", 0, W), ("watermarks/high", 0, W),
              ("watermarks/mid", 0, W), ("watermarks/low", 0, W)]
    files += [(f"stats/{s}", 0, R) for s in ("nr_tried", "sz_tried", "nr_applied", "sz_applied", "qt_exceeds")]
    # tried_regions/ arrived in 6.2 (its numbered regions appear on update_schemes_tried_regions); its total_bytes
    # in 6.6, with the update_schemes_tried_bytes command (damo's sysfs/schemes_tried_regions_sz: 6.6)
    if k.at_least(6, 2):
        k.tree.dir(f"{base}/tried_regions")
    if k.at_least(6, 6):
        files.append(("tried_regions/total_bytes", 0, R))
    if k.at_least(6, 3):
        files.append(("filters/nr_filters", 0, W))
    if k.at_least(6, 7):
        files.append(("apply_interval_us", 0, W))
    if k.at_least(6, 8):
        files.append(("quotas/goals/nr_goals", 0, W))
    if k.at_least(6, 9):
        files.append(("quotas/effective_bytes", 0, R))
    if k.at_least(6, 11):
        files.append(("target_nid", -1, W))
    if k.at_least(6, 14):
        files.append(("stats/sz_ops_filter_passed", 0, R))
    if k.at_least(6, 15):
        files += [("core_filters/nr_filters", 0, W), ("ops_filters/nr_filters", 0, W)]
    if k.at_least(6, 17):
        files.append(("dests/nr_dests", 0, W))
    if k.at_least(7, 0):  # damo: sysfs/damos_stat_nr_snapshots, sysfs/damos_max_nr_snapshots
        files += [("stats/nr_snapshots", 0, R), ("stats/max_nr_snapshots", 0, W)]
    if k.at_least(7, 1):  # damo: sysfs/damos_quota_goal_tuner
        files.append(("quotas/goal_tuner", "consist", W))
    _files(k, base, files)


def filter_(k: SimKernel, base: str) -> None:
    files: list[tuple[str, str | int, int]] = [
        # memcg_path reads "\n" while unset (sysfs_emit "%s\n"), as the 6.12 guest's `grep -r` shows: not empty
        ("type", "anon", W), ("matching", "N", W), ("memcg_path", "\n", W), ("addr_start", 0, W),
        ("addr_end", 0, W), ("damon_target_idx", 0, W)]
    if k.at_least(6, 14):
        files.append(("allow", "N", W))
    if k.at_least(6, 15):
        files += [("min", 0, W), ("max", 0, W)]
    _files(k, base, files)


def goal(k: SimKernel, base: str) -> None:
    files: list[tuple[str, str | int, int]] = [("target_value", 0, W), ("current_value", 0, W)]
    if k.at_least(6, 9):
        files.append(("target_metric", "user_input", W))
    if k.at_least(6, 16):
        files.append(("nid", 0, W))
    if k.at_least(6, 19):  # the memcg of node_memcg_{used,free}_bp goals (damo: ..._node_memcg_used_free)
        files.append(("path", "\n", W))
    _files(k, base, files)


def dest(k: SimKernel, base: str) -> None:
    _files(k, base, [("id", 0, W), ("weight", 0, W)])


#: The directory holding each ``nr_*`` file and the maker of its numbered children.
CHILDREN = {"nr_kdamonds": kdamond, "nr_contexts": context, "nr_targets": target, "nr_regions": region,
            "nr_schemes": scheme, "nr_filters": filter_, "nr_goals": goal, "nr_dests": dest}


def lay_out(k: SimKernel) -> None:
    """What a kernel with DAMON shows at boot: the special-purpose modules it has (5.16+), disabled, and (5.18+)
    the sysfs interface without a kdamond."""
    lay_out_modules(k)
    if k.at_least(5, 18):
        k.tree.file(f"{KDAMONDS}/nr_kdamonds", 0, W)
