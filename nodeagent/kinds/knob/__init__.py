"""Scalar kernel knobs: sysctls and sysfs attributes with one value each (see ``facts/knobs.py`` for the table).

Desired values come from the profile's ``kernel:`` and ``memory:`` sections; a key that is absent is unmanaged.
A knob whose attribute the running kernel lacks, or a value that needs a newer kernel, is a blocking problem
in the plan, found before anything is written.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ...facts import Facts
from ...facts.knobs import BY_KEY, KNOBS, Knob, range_on, version_tuple
from ...host import Host
from ...plan import Change, Problem
from ...state import Original, PlanState
from ..base import ApplyContext, Kind, PlanContext, ResourcePlan

if TYPE_CHECKING:
    from ...profile import LoadedProfile

KIND = "knob"


def desired(loaded: LoadedProfile) -> dict[str, Any]:
    """``{knob key: value}`` for every knob the profile sets."""
    data = loaded.profile.model_dump(by_alias=False, exclude_none=True)
    out: dict[str, Any] = {}
    for knob in KNOBS:
        node: Any = data
        for part in knob.key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            out[knob.key] = node
    return out



def observe(facts: Facts) -> dict[str, Any]:
    """``{knob key: parsed value}``; a knob the kernel lacks maps to ``None``."""
    return {k.key: (k.parse(raw) if (raw := facts.knobs.get(k.key)) is not None else None) for k in KNOBS}


def _too_old(facts: Facts, since: str) -> bool:
    have = facts.kernel_version
    return have != (0, 0) and have < version_tuple(since)[:2]


def diff(want: dict[str, Any], have: dict[str, Any], facts: Facts) -> ResourcePlan:
    out = ResourcePlan()
    for key, value in want.items():
        knob = BY_KEY[key]
        current = have.get(key)
        if current is None and knob.missing:
            # debugfs is no ABI: a tuning that lives there is set where the kernel offers it, and left out with a
            # warning where it does not, instead of blocking the whole profile (a Secure Boot node locks it down).
            why, fix = knob.missing
            if _too_old(facts, knob.since):
                why, fix = f"introduced in {knob.since}", f"run a kernel >= {knob.since}, or remove {key}"
            out.warnings.append(f"{key}: {knob.path} is not available on kernel {facts.kernel_release or 'unknown'} "
                                f"({why}): left out, the kernel's own value applies — {fix}")
            continue
        if current is None:
            out.problems.append(Problem(KIND, key, f"{key}: {knob.path} does not exist on kernel "
                                        f"{facts.kernel_release or 'unknown'} (introduced in {knob.since})",
                                        hint=f"remove {key} from the profile, or run a kernel >= {knob.since}"))
            continue
        need = knob.value_since.get(value)
        if need and _too_old(facts, need):
            out.problems.append(Problem(KIND, key, f"{key}: value {knob.label(value)} needs kernel {need}; this "
                                        f"node runs {facts.kernel_release}", hint=f"use a kernel >= {need}"))
            continue
        bounds = range_on(knob, facts.kernel_version) if isinstance(value, int) else None
        if bounds and not bounds[1] <= value <= bounds[2]:
            fix = next((f"run a kernel >= {since}" for since, lo, hi in knob.ranges
                        if lo <= value <= hi and version_tuple(since)[:2] > facts.kernel_version), "")
            out.problems.append(Problem(
                KIND, key, f"{key}: {knob.label(value)} is outside {bounds[1]}..{bounds[2]}, what kernel "
                f"{facts.kernel_release} takes for {knob.path} (since {bounds[0]}; the kernel would refuse the write "
                "with EINVAL)", hint=f"set {key} within {bounds[1]}..{bounds[2]}"
                + (f", or {fix}" if fix else "")))
            continue
        if knob.same(current, value):
            out.unchanged.append(key)
            continue
        out.changes.append(_change(knob, current, value))
    return out


def _change(knob: Knob, before: Any, after: Any) -> Change:
    return Change(KIND, knob.key, "set", before, after, reason="profile sets it", path=knob.path,
                  before_label=knob.label(before), after_label=knob.label(after),
                  disruptive=knob.disruptive)


#: Knobs applied after every other resource (registry.py): NUMA balancing last, once demotion is on, the CXL nodes
#: are online, DAMON runs and a stuck fast node has room again — promotions that fail on a full fast node make the
#: kernel back off its NUMA scanning, which delays every later promotion.
#: min_free_kbytes comes late too: onlining memory with THP on lets khugepaged raise it to its recommendation
#: (set_recommended_min_free_kbytes), so it is written once the DAX nodes are online.
LATE: tuple[str, ...] = ("kernel.min_free_kbytes", "kernel.numa_balancing")


class KnobResource(Kind):
    """The knobs of the profile; ``only``/``exclude`` split them into apply phases (see :data:`LATE`)."""

    kind = KIND
    revertible = True
    #: What its apply writes (each knob's attribute): on the host layer's allow-list, see tests/unit/test_write_allow.py
    writes: tuple[str, ...] = tuple(re.escape(k.path) for k in KNOBS)

    def __init__(self, only: tuple[str, ...] | None = None, exclude: tuple[str, ...] = ()) -> None:
        self.only = only
        self.exclude = exclude

    def plan(self, loaded: LoadedProfile, facts: Facts, ctx: PlanContext) -> ResourcePlan:
        want = {k: v for k, v in desired(loaded).items()
                if (self.only is None or k in self.only) and k not in self.exclude}
        return diff(want, observe(facts), facts)

    def original(self, change: Change, facts: Facts) -> tuple[str, Original]:
        return change.target, Original(KIND, change.path, change.before)

    def current(self, target: str, facts: Facts) -> tuple[str, Original] | None:
        knob, raw = BY_KEY.get(target), facts.knobs.get(target)
        if knob is None or raw is None:
            return None
        return target, Original(KIND, knob.path, knob.parse(raw))

    def revert(self, target: str, original: Original, facts: Facts, state: PlanState) -> list[Change]:
        """Pure: the knob back to its value before nodeagent managed it (disruptive if setting it is)."""
        knob = BY_KEY.get(target)
        if knob is None:
            raise ValueError(f"{target}: not a knob this version of nodeagent knows")
        raw = facts.knobs.get(target)
        if raw is None:
            raise ValueError(f"{target}: {knob.path} does not exist on this kernel any more")
        current, value = knob.parse(raw), original.value
        if current == value:
            return []
        return [Change(KIND, target, "revert", current, value,
                       reason=f"the value before nodeagent managed it (recorded {original.recorded or '?'})",
                       path=knob.path, before_label=knob.label(current), after_label=knob.label(value),
                       disruptive=knob.disruptive)]

    def apply(self, host: Host, change: Change, actx: ApplyContext) -> str:
        knob = BY_KEY[change.target]
        host.write(knob.path, knob.format(change.after))
        return f"wrote {knob.format(change.after)} to {knob.path}"
