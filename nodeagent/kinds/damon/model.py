"""The one DAMON model: a kdamond's sysfs tree as typed values, used in both directions.

The plan builds it from the profile (:mod:`.spec`: human units and node classes become the kernel's units and node
ids), the facts read it back from what the kernel shows (:func:`parse`, :attr:`nodeagent.facts.damon.Kdamond.tree`),
the plan diffs the two and apply writes the desired one (:meth:`Kdamond.files`). The shape is the kernel's own
(``Documentation/ABI/testing/sysfs-kernel-mm-damon``)::

    Kdamond ─ refresh_ms, contexts[]
      Context ─ operations, addr_unit, attrs (intervals, intervals_goal, nr_regions), targets[], schemes[]
        Target ─ pid_target, regions[] (start, end)
        Scheme ─ action, target_nid, apply_interval_us, access (sz, nr_accesses, age), quota (ms, bytes,
                 reset_interval_ms, weights, goal_tuner, goals[]), watermarks, filters (filters/ or
                 core_filters/ + ops_filters/), dests, max_nr_snapshots, stats

Values are in the kernel's units (microseconds, bytes, counts of aggregation intervals, node ids). A field that is
``None`` is a file (or directory) this kernel lacks or the model does not set: it is neither written nor compared.
:meth:`Kdamond.files` lists every file in the order the kernel needs (a count before the directories it creates,
a context's operations before its attributes); :func:`parse` is its inverse, ``parse(dict(k.files())) == k``.
Pure: no I/O, nothing of nodeagent's but :mod:`nodeagent.util` (the facts import this module).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import replace

from ...util.dataclass import dataclass

Files = list[tuple[str, str]]
#: Statistics of a scheme (``stats/``, read-only), as the kernel names them; each is there from its release on.
STATS = ("nr_tried", "sz_tried", "nr_applied", "sz_applied", "qt_exceeds", "sz_ops_filter_passed", "nr_snapshots")
#: The filter types DAMON's core handles (by address or target), which go to ``core_filters/`` (6.15+).
CORE_FILTER_TYPES = ("addr", "target")


#: The count files: writing one recreates the numbered directories beside it with defaults.
COUNTS = {"nr_kdamonds", "nr_contexts", "nr_targets", "nr_regions", "nr_schemes", "nr_filters", "nr_goals",
          "nr_dests"}


def diff_writes(desired: Files | tuple[tuple[str, str], ...], observed: Mapping[str, str]) -> Files:
    """The writes that turn ``observed`` (a kdamond's files as read) into ``desired`` (:meth:`Kdamond.files`), in
    order. Rewriting any ``nr_*`` count resets every file below it (even to the same number), so a count is written
    only when it differs, and then everything below it is written again."""
    out: Files = []
    reset: list[str] = []
    for path, value in desired:
        stale = any(path.startswith(p) for p in reset)
        if stale or observed.get(path) != value:
            out.append((path, value))
            name = path.rsplit("/", 1)[-1]
            if name in COUNTS:
                reset.append(path.rsplit("/", 1)[0] + "/" if "/" in path else "")
    return out


#: A context's interval files, relative to the kdamond (one context: ``contexts/0``).
_INTERVALS = re.compile(r"(contexts/\d+/monitoring_attrs/intervals)/sample_us")


def untuned(desired: Mapping[str, str], observed: Mapping[str, str],
            committed: Mapping[str, str] | None = None) -> dict[str, str]:
    """``observed`` with the intervals the kernel tuned read as the ``desired`` ones, for comparing a running
    kdamond with what nodeagent wants (:func:`diff_writes`).

    With an intervals goal enabled (``intervals_goal/aggrs`` non-zero: mm/damon/core.c ``kdamond_fn`` tunes only
    then), ``kdamond_tune_intervals`` moves the sampling interval within [``min_sample_us``, ``max_sample_us``] and
    sets the aggregation interval to it times ``aggr_samples``, which ``damon_set_attrs`` fixed at commit as
    ``aggr_us / sample_us`` (integer division); sysfs shows the tuned pair after ``update_tuned_intervals`` or,
    from 6.17, every ``refresh_ms`` (``damon_sysfs_repeat_call_fn``). Such a pair is what the kernel does with the
    desired one, not drift: it reads as desired when the goal files match and, if ``committed`` (the files
    nodeagent last wrote) is given, the desired intervals and goal are the committed ones, so that a profile that
    changes them still plans a commit."""
    out = dict(observed)
    for path in desired:
        m = _INTERVALS.fullmatch(path)
        if m is None:
            continue
        iv = m.group(1)
        names = [f"{iv}/{n}" for n in ("sample_us", "aggr_us")]
        goal = [f"{iv}/intervals_goal/{n}" for n in ("access_bp", "aggrs", "min_sample_us", "max_sample_us")]
        if any(p not in desired or observed.get(p) != desired[p] for p in goal):
            continue  # no goal, or another one: the kernel tunes toward what it has, which is drift
        if committed is not None and any(committed.get(p) != desired[p] for p in names + goal):
            continue  # the profile changed the intervals or the goal since nodeagent committed them
        try:
            want_sample, want_aggr, seen_sample, seen_aggr, aggrs, lo, hi = (
                int(v) for v in (desired[names[0]], desired[names[1]], observed.get(names[0], ""),
                                 observed.get(names[1], ""), desired[goal[1]], desired[goal[2]], desired[goal[3]]))
        except ValueError:
            continue
        if not aggrs or not want_sample:
            continue
        if lo <= seen_sample <= hi and seen_aggr == seen_sample * (want_aggr // want_sample):
            out[names[0]], out[names[1]] = desired[names[0]], desired[names[1]]
    return out


def _yn(value: bool) -> str:
    return "Y" if value else "N"


@dataclass(frozen=True)
class Range:
    min: int
    max: int


@dataclass(frozen=True)
class Region:
    start: int
    end: int


@dataclass(frozen=True)
class Target:
    pid: int = 0
    regions: tuple[Region, ...] = ()


@dataclass(frozen=True)
class IntervalsGoal:
    """``intervals_goal/`` (6.15): the kernel tunes ``sample_us`` (and ``aggr_us`` with it)."""

    access_bp: int = 0
    aggrs: int = 0
    min_sample_us: int = 0
    max_sample_us: int = 0


@dataclass(frozen=True)
class Attrs:
    """``monitoring_attrs/``: the intervals and the bounds on the number of regions."""

    sample_us: int
    aggr_us: int
    update_us: int
    regions: Range
    intervals_goal: IntervalsGoal | None = None


@dataclass(frozen=True)
class Access:
    """``access_pattern/``: size in bytes, nr_accesses in samples per aggregation, age in aggregation intervals."""

    sz: Range
    nr_accesses: Range
    age: Range


@dataclass(frozen=True)
class Goal:
    """``quotas/goals/<N>/``. ``metric`` None: no ``target_metric`` file (6.8, user_input alone)."""

    target: int
    metric: str | None = None
    current: int | None = None
    nid: int | None = None
    path: str | None = None


@dataclass(frozen=True)
class Quota:
    ms: int = 0
    bytes: int = 0
    reset_interval_ms: int = 0
    weights: tuple[int, int, int] = (0, 0, 0)  # sz, nr_accesses, age (permil)
    #: ``goal_tuner`` (7.1): how the goals tune the effective quota (``consist``, the default, or ``temporal``).
    goal_tuner: str | None = None
    goals: tuple[Goal, ...] | None = None  # None: no goals/ (before 6.8)


@dataclass(frozen=True)
class Watermarks:
    metric: str = "none"
    interval_us: int = 0
    high: int = 0
    mid: int = 0
    low: int = 0


@dataclass(frozen=True)
class Filter:
    """A DAMOS filter. The type-specific files are set (and compared) only for their type."""

    type: str
    matching: bool
    allow: bool | None = None  # None: no ``allow`` file (before 6.14; such a filter only excludes)
    memcg_path: str | None = None  # memcg
    addr: Region | None = None  # addr: addr_start, addr_end
    target_idx: int | None = None  # target: damon_target_idx
    size: Range | None = None  # hugepage_size: min, max (6.15)

    def files(self) -> Iterator[tuple[str, str]]:
        yield "type", self.type
        yield "matching", _yn(self.matching)
        if self.allow is not None:
            yield "allow", _yn(self.allow)
        if self.memcg_path is not None:
            yield "memcg_path", self.memcg_path
        if self.addr is not None:
            yield "addr_start", str(self.addr.start)
            yield "addr_end", str(self.addr.end)
        if self.target_idx is not None:
            yield "damon_target_idx", str(self.target_idx)
        if self.size is not None:
            yield "min", str(self.size.min)
            yield "max", str(self.size.max)


@dataclass(frozen=True)
class Scheme:
    action: str
    access: Access
    quota: Quota
    watermarks: Watermarks
    target_nid: int | None = None  # None: no ``target_nid`` (before 6.11)
    apply_interval_us: int | None = None  # None: no ``apply_interval_us`` (before 6.7)
    #: ``filters/`` (6.3 to 6.14; deprecated once the split directories exist, and then never written)
    filters: tuple[Filter, ...] | None = None
    core_filters: tuple[Filter, ...] | None = None  # 6.15: by address or target
    ops_filters: tuple[Filter, ...] | None = None  # 6.15: by page
    nr_dests: int | None = None  # ``dests/`` (6.17): nodeagent never sets destinations there (paddr ignores them)
    #: ``stats/max_nr_snapshots`` (7.0, writable): the scheme deactivates itself after this many snapshots; 0 never.
    max_nr_snapshots: int | None = None
    #: ``stats/`` as the kernel last refreshed them (read back only; never written nor compared).
    stats: Mapping[str, int] | None = None

    def with_min_size(self, value: int) -> Scheme:
        """This scheme with its minimum region size ``value`` (the largest value: a scheme that applies nowhere)."""
        return replace(self, access=replace(self.access, sz=Range(value, self.access.sz.max)))

    def files(self) -> Iterator[tuple[str, str]]:
        yield "action", self.action
        if self.target_nid is not None:
            yield "target_nid", str(self.target_nid)
        if self.apply_interval_us is not None:
            yield "apply_interval_us", str(self.apply_interval_us)
        for name in ("sz", "nr_accesses", "age"):
            r: Range = getattr(self.access, name)
            yield f"access_pattern/{name}/min", str(r.min)
            yield f"access_pattern/{name}/max", str(r.max)
        q = self.quota
        yield "quotas/ms", str(q.ms)
        yield "quotas/bytes", str(q.bytes)
        yield "quotas/reset_interval_ms", str(q.reset_interval_ms)
        for name, w in zip(("sz", "nr_accesses", "age"), q.weights, strict=True):
            yield f"quotas/weights/{name}_permil", str(w)
        if q.goal_tuner is not None:
            yield "quotas/goal_tuner", q.goal_tuner
        if q.goals is not None:
            yield "quotas/goals/nr_goals", str(len(q.goals))
            for n, g in enumerate(q.goals):
                base = f"quotas/goals/{n}"
                if g.metric is not None:
                    yield f"{base}/target_metric", g.metric
                yield f"{base}/target_value", str(g.target)
                if g.current is not None:
                    yield f"{base}/current_value", str(g.current)
                if g.nid is not None:
                    yield f"{base}/nid", str(g.nid)
                if g.path is not None:
                    yield f"{base}/path", g.path
        wm = self.watermarks
        yield "watermarks/metric", wm.metric
        yield "watermarks/interval_us", str(wm.interval_us)
        yield "watermarks/high", str(wm.high)
        yield "watermarks/mid", str(wm.mid)
        yield "watermarks/low", str(wm.low)
        for layer in ("core_filters", "ops_filters", "filters"):
            chosen: tuple[Filter, ...] | None = getattr(self, layer)
            if chosen is None:
                continue
            yield f"{layer}/nr_filters", str(len(chosen))
            for i, f in enumerate(chosen):
                yield from ((f"{layer}/{i}/{k}", v) for k, v in f.files())
        if self.nr_dests is not None:
            yield "dests/nr_dests", str(self.nr_dests)
        if self.max_nr_snapshots is not None:
            yield "stats/max_nr_snapshots", str(self.max_nr_snapshots)


@dataclass(frozen=True)
class Context:
    operations: str
    attrs: Attrs
    targets: tuple[Target, ...] = ()
    schemes: tuple[Scheme, ...] = ()
    addr_unit: int | None = None  # None: no ``addr_unit`` (before 6.18)

    def files(self) -> Iterator[tuple[str, str]]:
        yield "operations", self.operations
        if self.addr_unit is not None:
            yield "addr_unit", str(self.addr_unit)
        a = self.attrs
        iv = "monitoring_attrs/intervals"
        yield f"{iv}/sample_us", str(a.sample_us)
        yield f"{iv}/aggr_us", str(a.aggr_us)
        yield f"{iv}/update_us", str(a.update_us)
        if a.intervals_goal is not None:
            g = a.intervals_goal
            yield from ((f"{iv}/intervals_goal/{k}", str(v)) for k, v in (
                ("access_bp", g.access_bp), ("aggrs", g.aggrs), ("min_sample_us", g.min_sample_us),
                ("max_sample_us", g.max_sample_us)))
        yield "monitoring_attrs/nr_regions/min", str(a.regions.min)
        yield "monitoring_attrs/nr_regions/max", str(a.regions.max)
        yield "targets/nr_targets", str(len(self.targets))
        for t, target in enumerate(self.targets):
            yield f"targets/{t}/pid_target", str(target.pid)
            yield f"targets/{t}/regions/nr_regions", str(len(target.regions))
            for i, r in enumerate(target.regions):
                yield f"targets/{t}/regions/{i}/start", str(r.start)
                yield f"targets/{t}/regions/{i}/end", str(r.end)
        yield "schemes/nr_schemes", str(len(self.schemes))
        for j, s in enumerate(self.schemes):
            yield from ((f"schemes/{j}/{k}", v) for k, v in s.files())


@dataclass(frozen=True)
class Kdamond:
    contexts: tuple[Context, ...] = ()
    refresh_ms: int | None = None  # None: no ``refresh_ms`` (before 6.17)

    def files(self) -> Files:
        """Every file below ``kdamonds/<N>/`` that this tree sets, in the order the kernel needs them."""
        out: Files = []
        if self.refresh_ms is not None:
            out.append(("refresh_ms", str(self.refresh_ms)))
        out.append(("contexts/nr_contexts", str(len(self.contexts))))
        for c, ctx in enumerate(self.contexts):
            out += [(f"contexts/{c}/{k}", v) for k, v in ctx.files()]
        return out

    def with_min_size(self, schemes: set[int], value: int) -> Kdamond:
        """This tree with the minimum region size of the first context's ``schemes`` (indexes) set to ``value``."""
        if not schemes or not self.contexts:
            return self
        ctx = self.contexts[0]
        changed = tuple(s.with_min_size(value) if j in schemes else s for j, s in enumerate(ctx.schemes))
        return replace(self, contexts=(replace(ctx, schemes=changed), *self.contexts[1:]))

    @property
    def context(self) -> Context | None:
        """The first context (nodeagent builds one per kdamond; so does every DAMON user seen so far)."""
        return self.contexts[0] if self.contexts else None

    @property
    def actions(self) -> list[str]:
        return [s.action for c in self.contexts for s in c.schemes]

    def regions(self) -> list[tuple[int, int]]:
        """The non-empty address ranges of every target's regions, in order."""
        return [(r.start, r.end) for c in self.contexts for t in c.targets for r in t.regions if r.end > r.start]


# ---------------------------------------------------------------------------------------------------------------
# Reading back: the kernel's files (paths relative to ``kdamonds/<N>/``, values as read) → the tree.


class _Reader:
    def __init__(self, files: Mapping[str, str], status: Mapping[str, str] | None) -> None:
        self.files = files
        self.status = status or {}

    def text(self, path: str) -> str | None:
        v = self.files.get(path)
        return None if v is None else v.strip()

    def int(self, path: str, default: int | None = 0) -> int | None:
        v = self.text(path)
        return int(v) if v is not None and re.fullmatch(r"-?\d+", v) else default

    def num(self, path: str) -> int:
        return self.int(path) or 0

    def count(self, path: str) -> int:
        """A ``nr_*`` file; without one (a hand-made or partial reading), the numbered directories beside it."""
        n = self.int(path, None)
        if n is not None:
            return max(n, 0)
        prefix = path.rsplit("/", 1)[0] + "/"
        found = {k[len(prefix):].split("/", 1)[0] for k in self.files if k.startswith(prefix)}
        n = 0
        while str(n) in found:
            n += 1
        return n

    def has(self, path: str) -> bool:
        return path in self.files

    def range(self, base: str) -> Range:
        return Range(self.num(f"{base}/min"), self.num(f"{base}/max"))


def parse(files: Mapping[str, str], status: Mapping[str, str] | None = None) -> Kdamond:
    """The tree that the files of one kdamond hold (``status``: its read-only files, for the statistics). A file
    that is not there leaves its field ``None``; a value that does not read as a number reads as 0."""
    r = _Reader(files, status)
    contexts = tuple(_context(r, f"contexts/{c}") for c in range(r.count("contexts/nr_contexts")))
    return Kdamond(contexts, r.int("refresh_ms", None))


def _context(r: _Reader, base: str) -> Context:
    iv = f"{base}/monitoring_attrs/intervals"
    goal = None
    if r.has(f"{iv}/intervals_goal/aggrs"):
        goal = IntervalsGoal(r.num(f"{iv}/intervals_goal/access_bp"), r.num(f"{iv}/intervals_goal/aggrs"),
                             r.num(f"{iv}/intervals_goal/min_sample_us"), r.num(f"{iv}/intervals_goal/max_sample_us"))
    attrs = Attrs(r.num(f"{iv}/sample_us"), r.num(f"{iv}/aggr_us"), r.num(f"{iv}/update_us"),
                  r.range(f"{base}/monitoring_attrs/nr_regions"), goal)
    targets = []
    for t in range(r.count(f"{base}/targets/nr_targets")):
        tb = f"{base}/targets/{t}"
        regions = tuple(Region(r.num(f"{tb}/regions/{i}/start"), r.num(f"{tb}/regions/{i}/end"))
                        for i in range(r.count(f"{tb}/regions/nr_regions")))
        targets.append(Target(r.num(f"{tb}/pid_target"), regions))
    schemes = tuple(_scheme(r, f"{base}/schemes/{j}") for j in range(r.count(f"{base}/schemes/nr_schemes")))
    return Context(r.text(f"{base}/operations") or "", attrs, tuple(targets), schemes,
                   r.int(f"{base}/addr_unit", None))


def _filters(r: _Reader, base: str) -> tuple[Filter, ...] | None:
    if not r.has(f"{base}/nr_filters"):
        return None
    out = []
    for i in range(r.count(f"{base}/nr_filters")):
        fb = f"{base}/{i}"
        kind = r.text(f"{fb}/type") or ""
        allow = r.text(f"{fb}/allow")
        out.append(Filter(
            kind, r.text(f"{fb}/matching") == "Y", None if allow is None else allow == "Y",
            memcg_path=(r.files.get(f"{fb}/memcg_path", "").strip("\n")) if kind == "memcg" else None,
            addr=Region(r.num(f"{fb}/addr_start"), r.num(f"{fb}/addr_end")) if kind == "addr" else None,
            target_idx=r.num(f"{fb}/damon_target_idx") if kind == "target" else None,
            size=r.range(fb) if kind == "hugepage_size" and r.has(f"{fb}/min") else None))
    return tuple(out)


def _scheme(r: _Reader, base: str) -> Scheme:
    q = f"{base}/quotas"
    goals = None
    if r.has(f"{q}/goals/nr_goals"):
        goals = []
        for n in range(r.count(f"{q}/goals/nr_goals")):
            gb = f"{q}/goals/{n}"
            metric = r.text(f"{gb}/target_metric")
            path = r.files.get(f"{gb}/path")
            goals.append(Goal(r.num(f"{gb}/target_value"), metric, r.int(f"{gb}/current_value", None),
                              r.int(f"{gb}/nid", None), None if path is None else path.strip("\n")))
        goals = tuple(goals)
    quota = Quota(r.num(f"{q}/ms"), r.num(f"{q}/bytes"), r.num(f"{q}/reset_interval_ms"),
                  (r.num(f"{q}/weights/sz_permil"), r.num(f"{q}/weights/nr_accesses_permil"),
                   r.num(f"{q}/weights/age_permil")), r.text(f"{q}/goal_tuner"), goals)
    w = f"{base}/watermarks"
    wm = Watermarks(r.text(f"{w}/metric") or "none", r.num(f"{w}/interval_us"), r.num(f"{w}/high"),
                    r.num(f"{w}/mid"), r.num(f"{w}/low"))
    ap = f"{base}/access_pattern"
    split = r.has(f"{base}/core_filters/nr_filters")
    stats = {name: int(v) for name in STATS
             if (v := (r.status.get(f"{base}/stats/{name}") or "").strip()).isdigit()}
    return Scheme(
        r.text(f"{base}/action") or "", Access(r.range(f"{ap}/sz"), r.range(f"{ap}/nr_accesses"),
                                               r.range(f"{ap}/age")), quota, wm,
        target_nid=r.int(f"{base}/target_nid", None), apply_interval_us=r.int(f"{base}/apply_interval_us", None),
        # once the split directories exist, filters/ is the deprecated view of them: not part of the model
        filters=None if split else _filters(r, f"{base}/filters"),
        core_filters=_filters(r, f"{base}/core_filters"), ops_filters=_filters(r, f"{base}/ops_filters"),
        nr_dests=r.int(f"{base}/dests/nr_dests", None),
        max_nr_snapshots=r.int(f"{base}/stats/max_nr_snapshots", None),
        stats=stats or None)
