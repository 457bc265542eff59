"""From the profile's ``damon:`` section to the exact sysfs files of each kdamond, in the order the kernel needs.

Conversion rules (the profile reference repeats them):

- durations → microseconds (``*_us`` files), quota time and reset interval → whole milliseconds;
- ``age`` → aggregation intervals: ``min`` rounds up, ``max`` down (a warning says so when the age is not a
  multiple of ``aggregate``); with ``intervals_goal`` the kernel retunes ``sample`` and ``aggregate`` together
  (their ratio stays) and rescales each region's age, but a scheme's age bounds stay counts, so their time
  meaning follows the tuned interval — the plan warns with the resulting range;
- ``nr_accesses`` percentages → counts of the ``aggregate / sample`` samples an interval holds;
- an omitted ``max`` is written as the type's largest value (2^64-1 bytes, 2^32-1 accesses or intervals): the
  kernel's default max is 0, which matches nothing; an omitted ``min`` is 0;
- filters: on kernels with ``core_filters/`` and ``ops_filters/`` (6.15) ``addr``/``target`` go to the former,
  every other type to the latter, and the deprecated ``filters/`` is never written; ``allow: true`` needs the
  ``allow`` file (6.14) — older kernels only exclude, which is ``allow: false``;
- destinations: one destination is ``target_nid`` (6.11) and ``dests/`` stays empty; ``dests/`` weights are
  honoured only by vaddr/fvaddr migration (6.17), paddr migration reads ``target_nid`` alone — so several
  destinations are expressed by pairing (``nearest``/``split``), never by ``dests/`` on paddr.

Every writable file of the kdamond is specified (defaults included), so what the kernel shows can be compared
file by file with what nodeagent wants; type-specific filter files of other types are left alone.
"""

from __future__ import annotations

import re
from functools import cache
from typing import TYPE_CHECKING, Any

from ...facts.damon import DamonFacts
from ...facts.damon_caps import ACTION_OPS, since_of
from ...util.dataclass import dataclass
from ...util.quantities import approx_size, format_duration_us, format_size
from . import dest_free, model, prime
from .model import CORE_FILTER_TYPES
from .nodes import NodeClasses, Pairing

if TYPE_CHECKING:
    from ...profile.damon import Filter, Goal, Kdamond, Scheme

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1
Writes = list[tuple[str, str]]

#: What each numeric file under a kdamond holds, as mm/damon/sysfs.c and sysfs-schemes.c parse it: ``kstrtoul``
#: is an unsigned long (64 bits on the LP64 machines nodeagent runs on), ``kstrtouint`` an unsigned int,
#: ``kstrtoint`` an int. ``age`` and ``nr_accesses`` are parsed as unsigned long but land in the unsigned int
#: fields of ``struct damos_access_pattern``: 32 bits is what they hold, and a larger value is silently cut.
#: A value outside its file's range is a plan problem, so apply never starts a kdamond it cannot finish.
KERNEL_RANGES = {"unsigned long": (0, U64_MAX), "unsigned int": (0, U32_MAX), "int": (-(2**31), 2**31 - 1)}
#: A value in this range fits every type of :data:`KERNEL_RANGES`: its file's type need not be looked up.
_FITS_ALL = (max(lo for lo, _ in KERNEL_RANGES.values()), min(hi for _, hi in KERNEL_RANGES.values()))
_S = r"contexts/0/schemes/(\d+)/"
#: (file, relative to the kdamond, as a regular expression; its C type; the profile field it comes from, below
#: the kdamond). Compiled on first use (:func:`kernel_types`): a plan whose values all fit every type needs none.
KERNEL_TYPE_RULES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
        (r"refresh_ms", "unsigned int", ("stats_refresh",)),
        (r"(contexts/nr_contexts|.*/nr_(targets|regions|schemes|filters|goals|dests))", "int", ()),
        (r"contexts/0/addr_unit", "unsigned long", ()),
        (r".*/intervals/sample_us", "unsigned long", ("monitoring", "sample")),
        (r".*/intervals/aggr_us", "unsigned long", ("monitoring", "aggregate")),
        (r".*/intervals/update_us", "unsigned long", ("monitoring", "update")),
        (r".*/intervals_goal/access_bp", "unsigned long", ("monitoring", "intervals_goal", "access")),
        (r".*/intervals_goal/aggrs", "unsigned long", ("monitoring", "intervals_goal", "aggregations")),
        (r".*/intervals_goal/min_sample_us", "unsigned long", ("monitoring", "intervals_goal", "min_sample")),
        (r".*/intervals_goal/max_sample_us", "unsigned long", ("monitoring", "intervals_goal", "max_sample")),
        (r".*/monitoring_attrs/nr_regions/(min|max)", "unsigned long", ("monitoring", "regions", "{1}")),
        (r".*/pid_target", "int", ()),
        (r".*/regions/\d+/(start|end)", "unsigned long", ()),
        (_S + r"target_nid", "int", ("schemes", "{s}", "target_node")),
        (_S + r"apply_interval_us", "unsigned long", ("schemes", "{s}", "apply_interval")),
        (_S + r"access_pattern/sz/(min|max)", "unsigned long", ("schemes", "{s}", "access", "size", "{2}")),
        (_S + r"access_pattern/nr_accesses/(min|max)", "unsigned int",
         ("schemes", "{s}", "access", "nr_accesses", "{2}")),
        (_S + r"access_pattern/age/(min|max)", "unsigned int", ("schemes", "{s}", "access", "age", "{2}")),
        (_S + r"quotas/ms", "unsigned long", ("schemes", "{s}", "quota", "time")),
        (_S + r"quotas/bytes", "unsigned long", ("schemes", "{s}", "quota", "size")),
        (_S + r"quotas/reset_interval_ms", "unsigned long", ("schemes", "{s}", "quota", "reset_interval")),
        (_S + r"quotas/weights/(sz|nr_accesses|age)_permil", "unsigned int", ("schemes", "{s}", "quota", "weights")),
        (_S + r"quotas/goals/(\d+)/(target|current)_value", "unsigned long",
         ("schemes", "{s}", "quota", "goals", "{2}", "{3}")),
        (_S + r"quotas/goals/(\d+)/nid", "int", ("schemes", "{s}", "quota", "goals", "{2}", "node")),
        (_S + r"watermarks/(interval_us|high|mid|low)", "unsigned long", ("schemes", "{s}", "watermarks")),
        (_S + r"\w+/\d+/(addr_start|addr_end|min|max)", "unsigned long", ("schemes", "{s}", "filters")),
        (_S + r"\w+/\d+/damon_target_idx", "int", ("schemes", "{s}", "filters")),
        (_S + r"stats/max_nr_snapshots", "unsigned long", ("schemes", "{s}", "max_snapshots")),
)


@cache
def kernel_types() -> tuple[tuple[re.Pattern[str], str, tuple[str, ...]], ...]:
    """:data:`KERNEL_TYPE_RULES` with each file pattern compiled."""
    return tuple((re.compile(rx), ctype, field) for rx, ctype, field in KERNEL_TYPE_RULES)


def __getattr__(name: str) -> Any:
    if name == "KERNEL_TYPES":  # the compiled table, compiled when first asked for
        return kernel_types()
    raise AttributeError(name)


def _plain_runs(rx: str) -> tuple[str, ...]:
    """The runs of plain characters of ``rx`` outside its groups: every string the pattern matches contains each."""
    runs, run, depth, i = [], "", 0, 0
    while i < len(rx):
        c = rx[i]
        if c in "*+?{" and run:  # its last character may be absent or repeated
            run = run[:-1]
        if depth == 0 and (c.isalnum() or c in "_/-"):
            run += c
        elif depth == 0 and c == "|":  # an alternative of the whole pattern: nothing is common to all
            return ()
        else:
            runs.append(run)
            run = ""
            depth += (c in "([{") - (c in ")]}")
            i += c == "\\"  # an escape (\d, \.) is not plain
        i += 1
    return tuple(r for r in (*runs, run) if r)


@cache
def _runs(i: int) -> tuple[str, ...]:
    return _plain_runs(KERNEL_TYPE_RULES[i][0])


@cache
def _compiled(i: int) -> re.Pattern[str]:
    return re.compile(KERNEL_TYPE_RULES[i][0])


def kernel_type(file: str) -> tuple[str, tuple[str, ...], re.Match[str]] | None:
    """The C type of the kdamond file ``file`` (relative to the kdamond) and the profile field behind it. A rule
    whose pattern's plain text ``file`` lacks is not tried, so a lookup compiles only the patterns that can match."""
    for i, (_, ctype, field) in enumerate(KERNEL_TYPE_RULES):
        if all(run in file for run in _runs(i)):
            m = _compiled(i).fullmatch(file)
            if m:
                return ctype, field, m
    return None


def check_kernel_ranges(base: tuple, writes: Writes, scheme_of: list[int], chk: Checker) -> None:
    """Every numeric value fits the type of the kernel file it goes to (see :data:`KERNEL_TYPE_RULES`); one that
    does not is a problem at the profile field it came from, with the converted value and the file's type."""
    for file, value in writes:
        digits = value[1:] if value.startswith("-") else value
        if not digits.isdecimal():  # (what ``-?\d+`` matches: only integers are checked)
            continue
        if _FITS_ALL[0] <= int(value) <= _FITS_ALL[1]:
            continue  # whatever the file's type, it holds this
        found = kernel_type(file)
        if found is None:
            continue
        ctype, field, m = found
        lo, hi = KERNEL_RANGES[ctype]
        if lo <= int(value) <= hi:
            continue
        path = base + tuple(_field_part(part, m, scheme_of) for part in field)
        age = "/age/" in file
        unit = " aggregation intervals" if age else ""
        chk.fail(path, f"becomes {value}{unit} for the kernel's {file.rsplit('/', 2)[-2] + '/' if age else ''}"
                 f"{file.rsplit('/', 1)[-1]}, which holds an {ctype} ({lo} to {hi})",
                 "lower it, or raise monitoring.aggregate (ages are counted in aggregation intervals)" if age
                 else f"lower it to what an {ctype} holds")


def _field_part(part: str, m: re.Match[str], scheme_of: list[int]) -> str | int:
    if part == "{s}":
        return scheme_of[int(m.group(1))]
    if part.startswith("{"):
        g = m.group(int(part[1:-1]))
        return int(g) if g.isdigit() else g
    return part


@dataclass(frozen=True)
class Spec:
    """One kdamond to build: its name, where it came from, and every file value in write order."""

    name: str
    profile_index: int
    how: str
    sources: tuple[int, ...]
    dest_nodes: tuple[int, ...]
    #: The kdamond's tree as the profile wants it on this node (:mod:`.model`).
    tree: model.Kdamond
    summary: str
    #: The scheme files of the priming configuration the kdamond starts with (:mod:`.prime`), or nothing.
    prime: tuple[tuple[str, str], ...] = ()
    #: The schemes paused while their destination is nearly full (:mod:`.dest_free`), with what the plan decided.
    guards: tuple[dest_free.Guard, ...] = ()

    @property
    def writes(self) -> tuple[tuple[str, str], ...]:
        """Every file of :attr:`tree` in write order."""
        return tuple(self.tree.files())

    @property
    def config(self) -> dict[str, str]:
        return dict(self.tree.files())


class Checker:
    """Collects what the profile needs that this kernel lacks, as ``file:line:col: field: message`` lines."""

    def __init__(self, damon: DamonFacts, where: Any, kernel: str) -> None:
        self.caps = damon.capabilities
        self.damon = damon
        self.where = where
        self.kernel = kernel or "unknown"
        self.problems: list[tuple[str, str, str]] = []  # (target, message, hint)
        self.missing: list[tuple[str, str, str]] = []  # the problems that are a feature this kernel lacks
        self.warnings: list[str] = []

    def fail(self, path: tuple, message: str, hint: str) -> None:
        entry = (_dotted(path), f"{self.where(*path)}: {_dotted(path)}: {message}", hint)
        if entry not in self.problems:  # paired kdamonds share the profile's scheme: report it once
            self.problems.append(entry)

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def warn_at(self, path: tuple, message: str) -> None:
        """A warning about one profile field, as ``file:line:col: field: message``."""
        self.warn(f"{self.where(*path)}: {_dotted(path)}: {message}")

    def lacks(self, path: tuple, message: str, hint: str) -> None:
        """A problem that is a kernel feature missing here (an ``optional`` kdamond is left out for it)."""
        self.fail(path, message, hint)
        entry = (_dotted(path), f"{self.where(*path)}: {_dotted(path)}: {message}", hint)
        if entry not in self.missing:
            self.missing.append(entry)

    def need(self, path: tuple, feature: str, what: str) -> bool:
        if self.damon.has(feature):
            return True
        since = since_of(feature)
        self.lacks(path, f"{what} needs kernel {since}; this node runs {self.kernel}",
                   f"remove it from the profile, or run a kernel >= {since}")
        return False

    def vocab(self, path: tuple, kind: str, value: str, noun: str) -> bool:
        if value in self.caps[kind]:
            return True
        since = since_of(value)
        self.lacks(path, f"{noun} {value} needs kernel {since}; this node runs {self.kernel} "
                   f"(available: {', '.join(self.caps[kind]) or 'none'})",
                   f"use one of the available {noun}s, or run a kernel >= {since}")
        return False

    def supports_goal(self, g: Goal) -> bool:
        """Whether this kernel can write goal ``g`` (its metric, and per-node or memcg goals)."""
        if not self.damon.has("quota_goals"):
            return False
        if self.damon.has("goal_metric") and g.metric not in self.caps["goal_metrics"]:
            return False
        if not self.damon.has("goal_metric") and g.metric != "user_input":
            return False
        if g.metric.startswith("node_") and not self.damon.has("goal_nid"):
            return False
        return not ("memcg" in g.metric and not self.damon.has("goal_path"))


def _dotted(path: tuple) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _age(path: tuple, us: int | None, aggr: int, upper: bool, chk: Checker) -> int:
    if us is None:
        return U32_MAX if upper else 0
    count = us // aggr if upper else -(-us // aggr)
    if us % aggr:
        chk.warn(f"{_dotted(path)}: {format_duration_us(us)} is not a multiple of aggregate "
                            f"{format_duration_us(aggr)}: written as {count} intervals "
                            f"({format_duration_us(count * aggr)})")
    return count


def _accesses(value: int | str | None, max_acc: int, upper: bool) -> int:
    if value is None:
        return U32_MAX if upper else 0
    if isinstance(value, int):
        return value
    exact = float(value.rstrip("%")) * max_acc / 100
    return int(exact) if upper else -int(-exact // 1)


def _filter(path: tuple, f: Filter, chk: Checker) -> model.Filter:
    chk.vocab(path + ("type",), "filter_types", f.type, "filter type")
    if f.allow:
        chk.need(path + ("allow",), "filter_allow", "allow: true (filters that restrict the action to pages)")
    size = None
    if f.type == "hugepage_size" and f.size is not None:
        chk.need(path + ("size",), "filter_size", "hugepage_size bounds")
        size = model.Range(f.size.min or 0, f.size.max if f.size.max is not None else U64_MAX)
    return model.Filter(
        f.type, f.matching, f.allow if chk.damon.has("filter_allow") else None,
        memcg_path=(f.memcg or "") if f.type == "memcg" else None,
        addr=model.Region(f.range.start, f.range.end) if f.type == "addr" and f.range is not None else None,
        target_idx=(f.target or 0) if f.type == "target" else None, size=size)


def _filters(path: tuple, s: Scheme, chk: Checker) -> dict[str, tuple[model.Filter, ...]]:
    """The scheme's filters by directory: ``core_filters``/``ops_filters`` (6.15+) or ``filters`` (6.3+)."""
    if not s.filters:
        if not chk.damon.has("filters"):
            return {}
    elif not chk.need(path + ("filters",), "filters", "DAMOS filters"):
        return {}
    per = [(f, _filter(path + ("filters", i), f, chk)) for i, f in enumerate(s.filters)]
    if chk.damon.has("core_ops_filters"):
        return {"core_filters": tuple(m for f, m in per if f.type in CORE_FILTER_TYPES),
                "ops_filters": tuple(m for f, m in per if f.type not in CORE_FILTER_TYPES)}
    return {"filters": tuple(m for _, m in per)}


def _goal(path: tuple, g: Goal, node: int | None, chk: Checker) -> model.Goal:
    metric = None
    if chk.damon.has("goal_metric"):
        if chk.vocab(path + ("metric",), "goal_metrics", g.metric, "quota goal metric"):
            metric = g.metric
    elif g.metric != "user_input":
        chk.need(path + ("metric",), "goal_metric", f"quota goal metric {g.metric}")
    nid = path_ = None
    if g.metric.startswith("node_") and chk.need(path + ("node",), "goal_nid", "a per-node quota goal"):
        nid = node if node is not None else 0
    if "memcg" in g.metric and chk.need(path + ("memcg",), "goal_path", "a memcg quota goal"):
        path_ = g.memcg or ""
    return model.Goal(g.target, metric, g.current, nid, path_)


def scheme_model(path: tuple, s: Scheme, kd: Kdamond, dest: int | None, goal_nodes: list[int | None],
                 chk: Checker) -> model.Scheme:
    """The kernel's scheme for profile scheme ``s`` (destination node ``dest``), checked against this kernel."""
    chk.vocab(path + ("action",), "actions", s.action, "DAMOS action")
    if s.action in chk.caps["actions"] and kd.operations not in ACTION_OPS[s.action]:
        chk.fail(path + ("action",), f"{s.action} does nothing with {kd.operations} operations "
                 f"(works with {', '.join(ACTION_OPS[s.action])})", "pick an action for these operations")
    if s.dests:
        chk.fail(path + ("dests",), "dests/ weights are honoured only by vaddr/fvaddr migration (6.17); paddr "
                 "migration uses target_nid alone", "use target_node with pairing: nearest or split")
    mon = kd.monitoring
    aggr = mon.aggregate
    max_acc = max(aggr // mon.sample, 1)
    a = s.access
    if s.apply_interval is not None:
        chk.need(path + ("apply_interval",), "apply_interval", "apply_interval")
    access = model.Access(
        model.Range(a.size.min or 0, a.size.max if a.size.max is not None else U64_MAX),
        model.Range(_accesses(a.nr_accesses.min, max_acc, False), _accesses(a.nr_accesses.max, max_acc, True)),
        model.Range(_age(path + ("access", "age", "min"), a.age.min, aggr, False, chk),
                    _age(path + ("access", "age", "max"), a.age.max, aggr, True, chk)))
    q = s.quota
    ms = reset = 0
    if q is not None:
        for key, us in (("time", q.time or 0), ("reset_interval", q.reset_interval)):
            if us % 1000:
                chk.fail(path + ("quota", key), f"{format_duration_us(us)} is not a whole number of milliseconds "
                         "(the kernel takes milliseconds)", "round it to milliseconds")
        ms, reset = (q.time or 0) // 1000, q.reset_interval // 1000
    w = q.weights if q is not None else None
    goals = []
    for i, g in enumerate(q.goals if q is not None else []):
        if g.optional and not chk.supports_goal(g):
            chk.warn_at(path + ("quota", "goals", i), f"this kernel ({chk.kernel}) cannot run a "
                        f"{g.metric} goal{' per node' if g.metric.startswith('node_') else ''} (needs "
                        f"{since_of('goal_nid') if g.metric.startswith('node_') else since_of(g.metric)}): left out, "
                        "the fixed quota applies")
            continue
        goals.append((i, g))
    if goals:
        chk.need(path + ("quota", "goals"), "quota_goals", "quota goals")
    tuner = getattr(q, "goal_tuner", None)  # a record from before goal_tuner reads as without it
    if tuner is not None:
        chk.need(path + ("quota", "goal_tuner"), "goal_tuner", "quota.goal_tuner")
    snapshots = getattr(s, "max_snapshots", None)
    if snapshots:
        chk.need(path + ("max_snapshots",), "nr_snapshots", "max_snapshots")
    quota = model.Quota(
        ms, (q.size or 0) if q else 0, reset, (w.size, w.nr_accesses, w.age) if w else (0, 0, 0),
        goal_tuner=(tuner or "consist") if chk.damon.has("goal_tuner") else None,
        goals=tuple(_goal(path + ("quota", "goals", i), g, goal_nodes[i], chk) for i, g in goals)
        if chk.damon.has("quota_goals") else None)
    wm = s.watermarks
    if wm is not None:
        chk.vocab(path + ("watermarks", "metric"), "wmark_metrics", wm.metric, "watermark metric")
    marks = model.Watermarks(wm.metric, wm.interval, wm.high, wm.mid, wm.low) if wm else model.Watermarks()
    return model.Scheme(
        s.action, access, quota, marks,
        target_nid=(dest if dest is not None else -1) if chk.damon.has("migrate") else None,
        apply_interval_us=(s.apply_interval or 0) if chk.damon.has("apply_interval") else None,
        nr_dests=0 if chk.damon.has("dests") else None,
        max_nr_snapshots=(snapshots or 0) if chk.damon.has("nr_snapshots") else None, **_filters(path, s, chk))


def scheme_writes(path: tuple, s: Scheme, kd: Kdamond, dest: int | None, goal_nodes: list[int | None],
                  chk: Checker) -> Writes:
    """:func:`scheme_model` as the files of the scheme's directory, in write order."""
    return list(scheme_model(path, s, kd, dest, goal_nodes, chk).files())


def kdamond_spec(index: int, kd: Kdamond, p: Pairing, nc: NodeClasses, chk: Checker,
                 mem: dict[int, tuple[int, int]] | None = None) -> Spec | None:
    """The kdamond of pairing ``p``; ``mem``: ``(free, total)`` bytes of each online node, which the schemes
    with ``dest_free`` follow (:mod:`.dest_free`)."""
    base = ("damon", "kdamonds", index)
    mon = kd.monitoring
    if kd.operations not in chk.caps["operations"]:
        chk.fail(base + ("operations",), f"operations {kd.operations} are not available on this kernel "
                 f"(avail_operations: {' '.join(chk.caps['operations']) or 'none'})",
                 "use an operations set the kernel offers")
    if kd.operations != "paddr":
        chk.fail(base + ("operations",), f"targets given by node need paddr operations, not {kd.operations}",
                 "set operations: paddr")
    ranges = sorted(r for n in p.sources for r in nc.ranges.get(n, ()))
    if not ranges:
        chk.warn(f"{p.name}: node{'s' if len(p.sources) > 1 else ''} {', '.join(map(str, p.sources))} "
                 "have no memory to monitor: kdamond not created")
        return None
    if kd.stats_refresh is not None:
        chk.need(base + ("stats_refresh",), "refresh_ms", "stats_refresh")
        if kd.stats_refresh % 1000:
            chk.fail(base + ("stats_refresh",), "expected whole milliseconds", "round it to milliseconds")
    goal = mon.intervals_goal
    if goal is not None:
        chk.need(base + ("monitoring", "intervals_goal"), "intervals_goal", "intervals_goal (interval auto-tuning)")
    schemes: list[model.Scheme] = []
    written: list[Scheme] = []  # the profile's scheme behind each scheme written
    scheme_of: list[int] = []  # the profile's scheme index of each scheme written (pairing repeats some)
    actions: list[str] = []
    guards: list[dest_free.Guard] = []
    for j, (s, dests) in enumerate(zip(kd.schemes, p.dests, strict=True)):
        goal_nodes = [_goal_node(g.node, p, dests, nc, chk, base + ("schemes", j, "quota", "goals", i))
                      for i, g in enumerate(s.quota.goals if s.quota else [])]
        free = getattr(s, "dest_free", None)  # a record from before dest_free reads as without it
        for d in dests or (None,):
            sm = scheme_model(base + ("schemes", j), s, kd, d, goal_nodes, chk)
            what = s.action + (f" → node{d}" if d is not None else "")
            if free is not None and d is not None:
                g = dest_free.guard_for(len(schemes), s.action, d, (mem or {}).get(d), free.pause_below,
                                    free.resume_above, str(sm.access.sz.min))
                guards.append(g)
                if g.state == "pause":
                    sm = sm.with_min_size(int(dest_free.PAUSED))
                    what += f" (paused: node{d} has {approx_size(g.free or 0)} free)"
            schemes.append(sm)
            written.append(s)
            scheme_of.append(j)
            actions.append(what)
    attrs = model.Attrs(
        mon.sample, mon.aggregate, mon.update, model.Range(mon.regions.min, mon.regions.max),
        (model.IntervalsGoal(goal.access, goal.aggregations, goal.min_sample, goal.max_sample) if goal
         else model.IntervalsGoal()) if chk.damon.has("intervals_goal") else None)
    ctx = model.Context(kd.operations, attrs, (model.Target(0, tuple(model.Region(a, b) for a, b in ranges)),),
                        tuple(schemes), 1 if chk.damon.has("addr_unit") else None)
    # Unset in the profile: 5 s, so that the exporter reads fresh statistics without writing (6.17+).
    tree = model.Kdamond((ctx,), (5_000_000 if kd.stats_refresh is None else kd.stats_refresh) // 1000
                         if chk.damon.has("refresh_ms") else None)
    check_kernel_ranges(base, tree.files(), scheme_of, chk)
    if goal is not None and any(s.access.age.min is not None or s.access.age.max is not None for s in kd.schemes):
        ratio = mon.aggregate / mon.sample
        chk.warn(
            f"{p.name}: intervals_goal lets the kernel retune the aggregation interval between "
            f"{format_duration_us(int(goal.min_sample * ratio))} and {format_duration_us(int(goal.max_sample * ratio))}"
            f"; scheme ages are counts of aggregation intervals (computed with aggregate "
            f"{format_duration_us(mon.aggregate)}), so their time meaning scales with it")
    size = sum(end - start for start, end in ranges)
    summary = (f"{kd.operations} over node{','.join(map(str, p.sources))} ({len(ranges)} region"
               f"{'s' if len(ranges) > 1 else ''}, {format_size(size)}); " + ("; ".join(actions) or "no schemes"))
    dest_nodes = tuple(sorted({d for ds in p.dests for d in ds}))
    stage: tuple[tuple[str, str], ...] = ()
    if prime.wanted(kd, written, chk.caps, chk.damon.has("apply_interval")):
        walk = scheme_writes(base + ("prime",), prime.marker(kd), kd, None, [], chk)
        stage = prime.stage_writes(written, [list(sm.files()) for sm in schemes], walk)
        summary += "; primed (one young-filter walk over its memory before it first acts on young pages)"
    return Spec(p.name, index, p.how, p.sources, dest_nodes, tree, summary, stage, tuple(guards))


def _goal_node(ref: int | str | None, p: Pairing, dests: tuple[int, ...], nc: NodeClasses, chk: Checker,
               path: tuple) -> int | None:
    if ref is None or isinstance(ref, int):
        return ref
    members = set(nc.resolve(ref))
    for group in (p.sources, dests):
        hit = [n for n in group if n in members]
        if len(hit) == 1:
            return hit[0]
    if len(members) == 1:
        return next(iter(members))
    chk.fail(path + ("node",), f"`{ref}` is ambiguous for kdamond {p.name} (nodes {sorted(members)})",
             "give a node id")
    return None
