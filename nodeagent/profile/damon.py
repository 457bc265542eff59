"""The profile's ``damon:`` section: kdamonds that move pages between memory tiers, in human units.

Example (cold DRAM pages to CXL; the kernel side is DAMON's sysfs interface)::

    damon:
      coexist: refuse                 # or take-over: stop and replace kdamonds nodeagent does not own
      kdamonds:
        - name: demote-cold
          operations: paddr           # the default and the only one: targets are nodes (vaddr is refused)
          monitoring: {sample: 5ms, aggregate: 100ms, update: 1s, regions: {min: 10, max: 1000}}
          optional: true              # left out (with a warning) on a kernel that cannot run it
          targets: [{node: fast}]     # monitored memory: the nodes of the top memory tier
          pairing: nearest            # one kdamond per source node, to its nearest destination
          schemes:
            - action: migrate_cold
              target_node: slow       # destination: nodes of the lower tiers
              access: {size: {min: 4KiB}, nr_accesses: {max: 0}, age: {min: 3s}}
              quota: {time: 10ms, size: 256MiB, reset_interval: 1s}
              watermarks: {metric: free_mem_rate, interval: 1s, high: 500, mid: 400, low: 50}
              filters: [{type: young, matching: true}]   # skip pages accessed since the last check
              apply_interval: 1s

``kernels: {since: "6.16"}`` keeps a kdamond to the kernels it is written for (``before`` for the ones it is not);
``disable_modules: [damon_stat]`` switches a DAMON module off first (revert switches it back on).

Node selectors are ``fast`` (nodes of the top memory tier), ``slow`` (nodes of the lower tiers) or a node id.
Everything is validated here; what depends on the node (which kernel features exist, which nodes a class
means, how ages convert to aggregation intervals) is decided by the plan (``nodeagent.kinds.damon``).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from ..util.kfmt import kernel_version
from ..util.quantities import format_duration_us, parse_duration_us, parse_percent, parse_size
from ..util.vocab import DAMON_ACTIONS, DAMON_FILTER_TYPES, DAMON_GOAL_METRICS, DAMON_GOAL_TUNERS
from .checks import Percent

ACTIONS = tuple(DAMON_ACTIONS)
FILTER_TYPES = tuple(DAMON_FILTER_TYPES)
GOAL_METRICS = tuple(DAMON_GOAL_METRICS)
U32_MAX = 2**32 - 1


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)


def _strict_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise PydanticCustomError("bool", "expected true or false, got {got}", {"got": _show(value)})


def _unit(parse: Any, what: str) -> Any:
    def check(value: Any) -> int:
        try:
            return int(parse(value))
        except ValueError:
            raise PydanticCustomError("unit", "expected {what}, got {got}", {"what": what, "got": _show(value)}) \
                from None

    return check


Duration = Annotated[int, BeforeValidator(_unit(parse_duration_us, "a duration such as 100ms or 2s"))]
Size = Annotated[int, BeforeValidator(_unit(parse_size, "a size such as 4KiB or 256MiB"))]


def _node(value: Any) -> int | str:
    if value in ("fast", "slow"):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1024:
        return value
    raise PydanticCustomError("node", "expected fast, slow or a node id, got {got}", {"got": _show(value)})


def _ratio(scale: int, what: str) -> Any:
    """An integer in the kernel's unit (permil: 0-1000, basis points: 0-10000) or a percentage string."""

    def check(value: Any) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= scale:
            return value
        if isinstance(value, str) and value.strip().endswith("%"):
            try:
                return round(parse_percent(value) * scale / 100)
            except ValueError:
                pass
        raise PydanticCustomError("ratio", "expected {what} from 0 to {scale} or a percentage such as 40%, got {got}",
                                  {"what": what, "scale": scale, "got": _show(value)})

    return check


def _count(value: Any) -> int | str:
    """nr_accesses: a count per aggregation interval, or a percentage of the most a region can get."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= U32_MAX:
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*\d+(\.\d+)?\s*%\s*", value):
        pct = parse_percent(value)
        return f"{pct:g}%"
    raise PydanticCustomError("count", "expected an access count or a percentage such as 5%, got {got}",
                              {"got": _show(value)})


def _uint(limit: int) -> Any:
    def check(value: Any) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= limit:
            return value
        raise PydanticCustomError("range", "expected an integer from 0 to {hi}, got {got}",
                                  {"hi": limit, "got": _show(value)})

    return check


def _choice(choices: tuple[str, ...]) -> Any:
    def check(value: Any) -> str:
        if isinstance(value, str) and value in choices:
            return value
        raise PydanticCustomError("choice", "expected one of {choices}, got {got}",
                                  {"choices": ", ".join(choices), "got": _show(value)})

    return check


NodeRef = Annotated[int | str, BeforeValidator(_node)]
Permil = Annotated[int, BeforeValidator(_ratio(1000, "a per-thousand value"))]
Count = Annotated[int | str, BeforeValidator(_count)]
Bool = Annotated[bool, BeforeValidator(_strict_bool)]
Weight = Annotated[int, BeforeValidator(_uint(U32_MAX))]


class SizeRange(Strict):
    min: Size | None = None
    max: Size | None = None


class CountRange(Strict):
    min: Count | None = None
    max: Count | None = None


class AgeRange(Strict):
    min: Duration | None = None
    max: Duration | None = None


class Access(Strict):
    """The access pattern a region must show for the action to apply. An omitted bound is open: ``min`` 0,
    ``max`` the type's largest value (the kernel's own default max is 0, which matches nothing)."""

    size: SizeRange = SizeRange()
    nr_accesses: CountRange = CountRange()
    age: AgeRange = AgeRange()


class Weights(Strict):
    """Prioritisation under a quota, per thousand (relative weights)."""

    size: Weight = 0
    nr_accesses: Weight = 0
    age: Weight = 0


class Goal(Strict):
    """A quota goal: DAMON tunes the effective quota so that ``metric`` approaches ``target``.

    ``target`` units by metric: ``*_bp`` metrics take a percentage (``30%``) or basis points; ``some_mem_psi_us``
    a duration per reset interval; ``user_input`` a plain number (with ``current`` as the value you feed).
    ``node`` names the node of ``node_*`` metrics; ``memcg`` the cgroup path of ``node_memcg_*`` metrics."""

    metric: Annotated[str, BeforeValidator(_choice(GOAL_METRICS))]
    target: int
    current: Annotated[int, BeforeValidator(_uint(2**63 - 1))] | None = None
    node: NodeRef | None = None
    memcg: str | None = None
    optional: Bool = False  # on a kernel without this metric the goal is left out (the fixed quota applies)

    @model_validator(mode="before")
    @classmethod
    def _target_units(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "target" not in data or not isinstance(data.get("metric"), str):
            return data
        metric = data["metric"]
        if metric.endswith("_bp"):
            check = _ratio(10000, "basis points")
        elif metric == "some_mem_psi_us":
            check = _unit(parse_duration_us, "a duration such as 10ms")
        else:
            check = _uint(2**63 - 1)
        try:
            return {**data, "target": check(data["target"])}
        except PydanticCustomError as exc:
            raise ValueError(f"target: {exc}") from None

    @model_validator(mode="after")
    def _check(self) -> Goal:
        if self.metric.startswith("node_") and self.node is None:
            raise ValueError(f"metric {self.metric} needs `node:` (the node whose memory it measures)")
        if "memcg" in self.metric and not self.memcg:
            raise ValueError(f"metric {self.metric} needs `memcg:` (a cgroup path)")
        if self.current is not None and self.metric != "user_input":
            raise ValueError("`current` is only for metric user_input (the kernel measures the others)")
        return self


class Quota(Strict):
    """Limits per ``reset_interval``: ``time`` spent applying the action and ``size`` of memory acted on
    (0 or omitted: no limit). ``weights`` order candidates when a limit is hit; ``goals`` auto-tune it, the way
    ``goal_tuner`` says (7.1: ``consist``, the kernel's default, or ``temporal``: the whole quota while a goal is
    unmet, nothing once it is met)."""

    time: Duration | None = None
    size: Size | None = None
    reset_interval: Duration = 1_000_000
    weights: Weights = Weights()
    goals: list[Goal] = []
    goal_tuner: Annotated[str, BeforeValidator(_choice(tuple(DAMON_GOAL_TUNERS)))] | None = None


class Watermarks(Strict):
    """Activate the scheme only while ``metric`` (free memory, per thousand) is between ``low`` and ``high``;
    it starts once the metric falls below ``mid``. Checked every ``interval``."""

    metric: Annotated[str, BeforeValidator(_choice(("none", "free_mem_rate")))] = "none"
    interval: Duration = 0
    high: Permil = 0
    mid: Permil = 0
    low: Permil = 0

    @model_validator(mode="after")
    def _order(self) -> Watermarks:
        if self.metric != "none":
            if not self.high >= self.mid >= self.low:
                raise ValueError(f"expected high >= mid >= low, got high {self.high}, mid {self.mid}, low {self.low}")
            if self.interval <= 0:
                raise ValueError("interval: expected a duration above 0 when a metric is set")
        return self


class AddrRange(Strict):
    start: Annotated[int, BeforeValidator(_uint(2**64 - 1))]
    end: Annotated[int, BeforeValidator(_uint(2**64 - 1))]


class Filter(Strict):
    """Pages the action skips (``allow: false``, the default) or is restricted to (``allow: true``): those whose
    ``type`` test gives ``matching``. Type-specific keys: ``memcg`` (memcg), ``range`` (addr), ``target``
    (target), ``size`` (hugepage_size)."""

    type: Annotated[str, BeforeValidator(_choice(FILTER_TYPES))]
    matching: Bool = True
    allow: Bool = False
    memcg: str | None = None
    range: AddrRange | None = None
    target: Annotated[int, BeforeValidator(_uint(2**31 - 1))] | None = None
    size: SizeRange | None = None

    @model_validator(mode="after")
    def _specific(self) -> Filter:
        needs = {"memcg": "memcg", "addr": "range", "target": "target", "hugepage_size": "size"}
        for key in ("memcg", "range", "target", "size"):
            if getattr(self, key) is not None and needs.get(self.type) != key:
                raise ValueError(f"`{key}` does not apply to a {self.type} filter")
        key = needs.get(self.type)
        if key and getattr(self, key) is None:
            raise ValueError(f"a {self.type} filter needs `{key}`")
        return self


class Dest(Strict):
    node: NodeRef
    weight: Weight = 1


class DestFree(Strict):
    """A migrate scheme paused while its destination node is nearly full, and resumed once it has room again.

    DAMON's migrate destination is not strict (measured on 6.12): a page it cannot place on a full destination goes
    to that node's fallback node (another DRAM node, first in a CXL node's zonelist), where no tier wants it. Free
    memory of the destination (its ``MemFree``, as a percentage of its ``MemTotal``) under ``pause_below`` pauses
    the scheme; over ``resume_above`` it runs as written; in between it stays as it is (hysteresis). The kernel
    has no per-node switch for a scheme before 6.16 (watermarks measure the whole system), so nodeagent does it:
    the plan's desired state of the scheme follows the destination's free memory (paused: its minimum region
    size is the largest value, so it matches no region), and ``nodeagent guard`` re-plans it every second."""

    pause_below: Percent
    resume_above: Percent

    @model_validator(mode="after")
    def _order(self) -> DestFree:
        if not 0 < self.pause_below < self.resume_above <= 90:
            raise ValueError(f"expected 0 < pause_below < resume_above <= 90%, got pause_below "
                             f"{self.pause_below:g}%, resume_above {self.resume_above:g}%")
        return self


class Scheme(Strict):
    action: Annotated[str, BeforeValidator(_choice(ACTIONS))]
    target_node: NodeRef | None = None
    dests: list[Dest] | None = None
    access: Access = Access()
    quota: Quota | None = None
    watermarks: Watermarks | None = None
    filters: list[Filter] = []
    apply_interval: Duration | None = None
    dest_free: DestFree | None = None
    #: 7.0: the scheme deactivates itself once it has worked on this many DAMON snapshots (omitted or 0: never).
    max_snapshots: Annotated[int, BeforeValidator(_uint(2**64 - 1))] | None = None

    @model_validator(mode="after")
    def _destination(self) -> Scheme:
        migrate = self.action.startswith("migrate_")
        if migrate and self.target_node is None and not self.dests:
            raise ValueError(f"action {self.action} needs `target_node:` (fast, slow or a node id)")
        if not migrate and (self.target_node is not None or self.dests):
            raise ValueError(f"`target_node`/`dests` apply only to migrate_hot and migrate_cold, not {self.action}")
        if self.target_node is not None and self.dests:
            raise ValueError("give either `target_node` or `dests`, not both")
        if self.dest_free is not None and not migrate:
            raise ValueError(f"`dest_free` applies only to migrate_hot and migrate_cold, not {self.action}")
        return self


class Regions(Strict):
    min: Annotated[int, BeforeValidator(_uint(U32_MAX))] = 10
    max: Annotated[int, BeforeValidator(_uint(U32_MAX))] = 1000

    @model_validator(mode="after")
    def _order(self) -> Regions:
        if self.min < 3:
            raise ValueError(f"min: the kernel needs at least 3 regions, got {self.min}")
        if self.min > self.max:
            raise ValueError(f"expected min <= max, got min {self.min}, max {self.max}")
        return self


class IntervalsGoal(Strict):
    """Let the kernel tune ``sample`` (and ``aggregate`` with it) so that ``access`` of the regions show
    accesses within ``aggregations`` aggregation intervals, between ``min_sample`` and ``max_sample``."""

    access: Annotated[int, BeforeValidator(_ratio(10000, "basis points"))]
    aggregations: Annotated[int, BeforeValidator(_uint(U32_MAX))]
    min_sample: Duration
    max_sample: Duration

    @model_validator(mode="after")
    def _order(self) -> IntervalsGoal:
        if not 0 < self.min_sample <= self.max_sample:
            raise ValueError("expected 0 < min_sample <= max_sample")
        if self.aggregations <= 0:
            raise ValueError("aggregations: expected a count above 0")
        return self


class Monitoring(Strict):
    """Sampling and aggregation intervals and the number of regions (the kernel's defaults when omitted)."""

    sample: Duration = 5_000
    aggregate: Duration = 100_000
    update: Duration = 60_000_000
    regions: Regions = Regions()
    intervals_goal: IntervalsGoal | None = None

    @model_validator(mode="after")
    def _order(self) -> Monitoring:
        if self.sample <= 0:
            raise ValueError("sample: expected a duration above 0")
        if self.sample > self.aggregate:
            raise ValueError(f"expected sample <= aggregate, got {format_duration_us(self.sample)} > "
                             f"{format_duration_us(self.aggregate)}")
        return self


class Target(Strict):
    node: NodeRef


def _paddr_only(value: Any) -> str:
    """Targets are NUMA nodes (their physical ranges): only paddr monitors those. vaddr and fvaddr monitor a
    process's virtual address space, named by pid — per-workload placement that the profile cannot express."""
    if value == "paddr":
        return value
    if value in ("vaddr", "fvaddr"):
        raise PydanticCustomError(
            "operations", "{got} monitors a process's virtual address space (a pid); this profile's targets are NUMA "
            "nodes, which only paddr monitors: remove operations (paddr is the default) or set paddr",
            {"got": value})
    raise PydanticCustomError("operations", "expected paddr, got {got}", {"got": _show(value)})


def _release(value: Any) -> str:
    """A kernel release such as ``"6.16"`` (a string: YAML reads 6.10 as the number 6.1)."""
    if isinstance(value, str) and re.fullmatch(r"\d+\.\d+", value.strip()):
        return value.strip()
    raise PydanticCustomError("release", "expected a kernel release in quotes such as \"6.16\", got {got}",
                              {"got": _show(value)})


class Kernels(Strict):
    """The kernel releases a kdamond is for: ``since`` (included) and ``before`` (excluded). On any other kernel
    the kdamond is not part of the profile, as if it were not written — a recipe for newer kernels beside the one
    it replaces on older ones."""

    since: Annotated[str, BeforeValidator(_release)] | None = None
    before: Annotated[str, BeforeValidator(_release)] | None = None

    @model_validator(mode="after")
    def _order(self) -> Kernels:
        if self.since is None and self.before is None:
            raise ValueError("give `since`, `before` or both")
        if self.since and self.before and kernel_version(self.since) >= kernel_version(self.before):
            raise ValueError(f"expected since < before, got since {self.since}, before {self.before}")
        return self


class Kdamond(Strict):
    """One kdamond (expanded per source node by ``pairing``). ``optional: true``: on a kernel that lacks something
    it needs (an action, a filter type, a file), the kdamond is left out with a warning naming what is missing,
    instead of the whole profile being refused — for kdamonds that improve on what the kernel does anyway."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$", max_length=48)
    optional: Bool = False
    kernels: Kernels | None = None
    operations: Annotated[str, BeforeValidator(_paddr_only)] = "paddr"
    monitoring: Monitoring = Monitoring()
    targets: list[Target] = Field(min_length=1)
    pairing: Literal["nearest", "gather", "split"] = "nearest"
    schemes: list[Scheme] = []
    stats_refresh: Duration | None = None
    # A young filter reads "accessed bit set or idle flag clear", and only DAMON sets the idle flag: a page DAMON
    # never checked (one reclaim demoted, one allocated before the kdamond ran) passes as young. ``prime`` (the
    # default): a kdamond whose schemes act on young pages first walks its memory once with a young filter (which
    # marks every page it finds young as idle), and only then do those schemes apply.
    prime: Bool = True


class Damon(Strict):
    """Kdamonds nodeagent builds and owns. ``coexist`` says what to do when kdamonds it does not own are in the
    way: ``refuse`` (default: leave them, apply the rest, exit 5) or ``take-over`` (stop and replace them —
    disruptive, needs ``--allow-disruptive``)."""

    coexist: Literal["refuse", "take-over"] = "refuse"
    kdamonds: list[Kdamond] = []
    #: DAMON's special-purpose modules to keep disabled (each runs an exclusive kdamond, and while one runs no sysfs
    #: kdamond can start): disabled before nodeagent's kdamonds start, enabled again by revert. A module this kernel
    #: does not have needs nothing.
    disable_modules: list[Literal["damon_reclaim", "damon_lru_sort", "damon_stat"]] = []

    @model_validator(mode="after")
    def _unique(self) -> Damon:
        names = [k.name for k in self.kdamonds]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"kdamond names must be unique, got {', '.join(dup)} more than once")
        return self
