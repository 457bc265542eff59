"""What the running kernel's DAMON sysfs interface can do, found without ever writing to it.

Probing by writing (creating a kdamond to see which files appear, trying an action name) is what damo does;
on a shared node it can wipe or fail someone else's kdamonds (``nr_kdamonds`` rewrites every kdamond), so
nodeagent never does it. Instead:

1. **Markers** — files whose presence in an *existing* kdamond tree proves a feature: ``target_nid`` ⇒ the
   migrate actions (6.11), ``dests/`` ⇒ weighted destinations (6.17), ``core_filters/`` ⇒ split filter
   directories (6.15)... A marker whose parent directory exists but which is absent proves the feature absent.
2. **Vocabulary tables** — what no file lists (DAMOS action names, filter types, ``state`` commands, quota-goal
   metrics) is looked up by feature level: the newest feature a marker proves, else the kernel release.

Versions are those of the upstream merge (damo's feature list and the kernel's own history agree).
"""

from __future__ import annotations

from typing import Any

from ..util.dataclass import dataclass
from ..util.vocab import DAMON_ACTIONS as ACTIONS
from ..util.vocab import DAMON_FILTER_TYPES as FILTER_TYPES
from ..util.vocab import DAMON_GOAL_METRICS as GOAL_METRICS
from ..util.vocab import DAMON_GOAL_TUNERS as GOAL_TUNERS

Version = tuple[int, int]


def ver(text: str) -> Version:
    major, minor = text.split(".")[:2]
    return int(major), int(minor)


@dataclass(frozen=True)
class Feature:
    name: str
    since: str
    marker: str | None  # file or directory under kdamonds/<N>/, indexes as '*'; None: not visible in the tree
    parent: str | None = None  # directory whose presence makes the marker observable
    what: str = ""

    @property
    def version(self) -> Version:
        return ver(self.since)


_CTX = "contexts/*"
_SCHEME = "contexts/*/schemes/*"
_FILTER = "contexts/*/schemes/*/*filters/*"
_GOAL = "contexts/*/schemes/*/quotas/goals/*"

FEATURES: tuple[Feature, ...] = (
    Feature("sysfs", "5.18", None, what="the DAMON sysfs interface"),
    Feature("commit", "5.19", None, what="online `commit` of a running kdamond"),
    Feature("avail_operations", "5.19", f"{_CTX}/avail_operations", _CTX, "the avail_operations file"),
    # the directory (6.2): its total_bytes came in 6.6 (damo: sysfs/schemes_tried_regions_sz)
    Feature("tried_regions", "6.2", f"{_SCHEME}/tried_regions", _SCHEME, "scheme tried regions"),
    Feature("filters", "6.3", f"{_SCHEME}/filters/nr_filters", _SCHEME, "DAMOS filters"),
    Feature("apply_interval", "6.7", f"{_SCHEME}/apply_interval_us", _SCHEME, "per-scheme apply_interval_us"),
    Feature("quota_goals", "6.8", f"{_SCHEME}/quotas/goals/nr_goals", _SCHEME, "quota goals"),
    Feature("effective_quota", "6.9", f"{_SCHEME}/quotas/effective_bytes", _SCHEME, "effective quota bytes"),
    Feature("goal_metric", "6.9", f"{_GOAL}/target_metric", _GOAL, "quota goal metrics (target_metric)"),
    Feature("migrate", "6.11", f"{_SCHEME}/target_nid", _SCHEME, "migrate_hot/migrate_cold with target_nid"),
    Feature("filter_allow", "6.14", f"{_FILTER}/allow", _FILTER, "allow filters (the `allow` file)"),
    Feature("sz_ops_filter_passed", "6.14", f"{_SCHEME}/stats/sz_ops_filter_passed", _SCHEME,
            "the sz_ops_filter_passed statistic"),
    Feature("core_ops_filters", "6.15", f"{_SCHEME}/core_filters/nr_filters", _SCHEME,
            "core_filters/ and ops_filters/ directories"),
    Feature("intervals_goal", "6.15", f"{_CTX}/monitoring_attrs/intervals/intervals_goal/aggrs", _CTX,
            "monitoring intervals auto-tuning (intervals_goal/)"),
    Feature("filter_size", "6.15", f"{_FILTER}/min", _FILTER, "hugepage_size filter bounds (min/max)"),
    Feature("goal_nid", "6.16", f"{_GOAL}/nid", _GOAL, "per-node quota goals (nid)"),
    Feature("dests", "6.17", f"{_SCHEME}/dests/nr_dests", _SCHEME, "weighted action destinations (dests/)"),
    Feature("refresh_ms", "6.17", "refresh_ms", "", "automatic refresh of kdamond files (refresh_ms)"),
    Feature("addr_unit", "6.18", f"{_CTX}/addr_unit", _CTX, "addr_unit"),
    Feature("goal_path", "6.19", f"{_GOAL}/path", _GOAL, "memcg quota goals (path)"),
    # stats/nr_snapshots (read-only) and stats/max_nr_snapshots (writable) came in one series (damo:
    # sysfs/damos_stat_nr_snapshots, sysfs/damos_max_nr_snapshots)
    Feature("nr_snapshots", "7.0", f"{_SCHEME}/stats/max_nr_snapshots", _SCHEME,
            "snapshot counts of a scheme (stats/nr_snapshots, max_nr_snapshots)"),
    Feature("goal_tuner", "7.1", f"{_SCHEME}/quotas/goal_tuner", _SCHEME, "the quota goal tuner (quotas/goal_tuner)"),
)
BY_NAME = {f.name: f for f in FEATURES}

#: Operations sets each action works with (others accept the action and silently do nothing).
ACTION_OPS: dict[str, tuple[str, ...]] = {
    "willneed": ("vaddr", "fvaddr"), "cold": ("vaddr", "fvaddr"), "hugepage": ("vaddr", "fvaddr"),
    "nohugepage": ("vaddr", "fvaddr"), "pageout": ("vaddr", "fvaddr", "paddr"), "lru_prio": ("paddr",),
    "lru_deprio": ("paddr",), "migrate_hot": ("paddr", "vaddr", "fvaddr"),
    "migrate_cold": ("paddr", "vaddr", "fvaddr"), "stat": ("vaddr", "fvaddr", "paddr"),
}
COMMANDS: dict[str, str] = {
    "on": "5.18", "off": "5.18", "update_schemes_stats": "5.18", "commit": "5.19",
    "update_schemes_tried_regions": "6.2", "clear_schemes_tried_regions": "6.2",
    "update_schemes_tried_bytes": "6.6", "commit_schemes_quota_goals": "6.8",
    "update_schemes_effective_quotas": "6.9", "update_tuned_intervals": "6.15",
}
WMARK_METRICS = ("none", "free_mem_rate")
#: avail_operations is readable only inside a context; without one, what a kernel of that release offers.
DEFAULT_OPERATIONS: dict[str, str] = {"vaddr": "5.18", "paddr": "5.18", "fvaddr": "5.19"}



@dataclass(frozen=True)
class DamonModuleInfo:
    name: str  # as the kernel's documentation calls it
    purpose: str
    since: str


#: The DAMON special-purpose modules: each runs its own exclusive context outside sysfs.
MODULES: dict[str, DamonModuleInfo] = {
    "damon_reclaim": DamonModuleInfo("DAMON_RECLAIM", "proactive reclaim of cold pages", "5.16"),
    "damon_lru_sort": DamonModuleInfo("DAMON_LRU_SORT", "LRU sorting by access", "6.0"),
    "damon_stat": DamonModuleInfo("DAMON_STAT", "access monitoring", "6.17"),
}


def normalize(relpath: str) -> str:
    """``contexts/0/schemes/12/target_nid`` → ``contexts/*/schemes/*/target_nid``: each path component that is a
    number becomes ``*`` (a path of one component is left as it is). Split, not a regular expression: it runs for
    every file of every kdamond in every command that gathers facts."""
    parts = relpath.split("/")
    return relpath if len(parts) == 1 else "/".join("*" if p.isdecimal() else p for p in parts)


def fnmatchcase(name: str, pattern: str) -> bool:
    """``fnmatch.fnmatchcase`` for patterns whose only wildcard is ``*`` (all of FEATURES'), without compiling a
    regular expression per pattern: ``derive`` runs in every command that gathers facts."""
    first, *middle, last = pattern.split("*") if "*" in pattern else (pattern, pattern)
    if "*" not in pattern:
        return name == pattern
    if len(name) < len(first) + len(last) or not (name.startswith(first) and name.endswith(last)):
        return False
    pos, end = len(first), len(name) - len(last)
    for part in middle:
        pos = name.find(part, pos, end)
        if pos < 0:
            return False
        pos += len(part)
    return True


def derive(kernel: Version, seen: set[str], dirs: set[str], avail_operations: list[str] | None) -> dict[str, Any]:
    """Capabilities as JSON-able data.

    ``seen``: normalized paths of every file found under the kdamonds (``contexts/*/schemes/*/target_nid``),
    ``dirs``: normalized directories found (``contexts/*/schemes/*``; ``""`` is the kdamond directory itself
    when one exists). Markers and parents are shell patterns (``*filters`` covers all three filter
    directories). Each feature gets ``present``, ``since`` and ``source`` (``tree`` or ``version``).
    """
    proven: list[Version] = []
    disproven: list[Version] = []
    tree: dict[str, bool] = {}
    for f in FEATURES:
        if f.marker is None or f.parent is None or not any(fnmatchcase(d, f.parent) for d in dirs):
            continue
        tree[f.name] = any(fnmatchcase(s, f.marker) for s in seen) or any(fnmatchcase(d, f.marker) for d in dirs)
        (proven if tree[f.name] else disproven).append(f.version)
    level = max([kernel, *proven])
    cap = min(disproven) if disproven else None

    def by_level(v: Version) -> bool:
        return v <= level and (cap is None or v < cap)

    features: dict[str, dict[str, Any]] = {}
    for f in FEATURES:
        if f.name in tree:
            features[f.name] = {"present": tree[f.name], "since": f.since, "source": "tree"}
        else:
            features[f.name] = {"present": by_level(f.version), "since": f.since, "source": "version"}

    def vocab(table: dict[str, str]) -> list[str]:
        out = []
        for name, since in table.items():
            ok = features[since]["present"] if since in features else by_level(ver(since))
            if ok:
                out.append(name)
        return out

    ops_source = "tree" if avail_operations is not None else "version"
    ops = avail_operations if avail_operations is not None else vocab(DEFAULT_OPERATIONS)
    return {"level": list(level), "features": features, "operations": ops, "operations_source": ops_source,
            "actions": vocab(ACTIONS), "filter_types": vocab(FILTER_TYPES), "commands": vocab(COMMANDS),
            "goal_metrics": vocab(GOAL_METRICS) if features["quota_goals"]["present"] else [],
            "goal_tuners": vocab(GOAL_TUNERS),
            "wmark_metrics": list(WMARK_METRICS)}


def since_of(name: str) -> str:
    """The release that introduced a feature, action, filter type, command or goal metric."""
    for table in (ACTIONS, FILTER_TYPES, COMMANDS, GOAL_METRICS, GOAL_TUNERS):
        if name in table:
            since = table[name]
            return BY_NAME[since].since if since in BY_NAME else since
    return BY_NAME[name].since
