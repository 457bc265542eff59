"""Reviewing a profile without touching a node: plans against captured facts, and how a profile change moves them.

``nodeagent plan PROFILE --facts FILE|DIR`` plans against one facts file or every ``*.json`` in a directory
(one per node class), with the very ``make_plan`` the node runs: no root, no access to any host.
``--baseline OLD.yaml`` plans the old profile too and reports, per node, what the change does: changes added,
changes dropped, changes whose target value differs, problems it introduces or resolves, settings it stops or
starts managing. That is what a reviewer of a profile pull request needs to see.

Exit codes (:func:`exit_code`). With ``--baseline``: 1 when the change makes the profile impossible to carry out
on some node (a new blocking problem: one the baseline did not have), else 2 when it alters the plan of any node,
else 0 — so a node class that was already broken does not fail every later review. Without it, as ``plan``: 1
when the profile cannot be carried out on some node; under ``--detailed-exitcode`` 5 when apply would be partial
on some node (part of the plan cannot be done, or a disruptive change is held back without
``--allow-disruptive``), else 2 when any node would change; else 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from ..facts.snapshot import Snapshot
from ..kinds.base import PlanContext
from ..plan import Change, Plan, Problem
from ..profile import LoadedProfile
from ..profile.checks import CHECK_NAMES
from ..util.errors import ExitCode
from .core import make_plan


def plan_offline(loaded: LoadedProfile, snap: Snapshot, *, allow_disruptive: bool = False) -> Plan:
    """The plan the node of ``snap`` would make for ``loaded`` (pure: reads nothing but its arguments)."""
    plan = make_plan(loaded, snap.facts, PlanContext(allow_disruptive=allow_disruptive, state=snap.state))
    if snap.warnings:
        plan = replace(plan, warnings=(*plan.warnings, *snap.warnings))
    return plan


def _key(c: Change) -> tuple[str, str]:
    return (c.kind, c.target)


_LOCATION = re.compile(r"^\S+:\d+:\d+: ")


def _pkey(p: Problem) -> tuple[str, str, str]:
    """Problems are the same when they say the same thing: the profile file's name and line (which differ
    between a baseline and the changed profile) are not part of it."""
    return (p.kind, p.target, _LOCATION.sub("", p.message))


def _managed(plan: Plan) -> set[str]:
    return {c.target for c in plan.changes} | set(plan.unchanged) | {p.target for p in plan.problems}


@dataclass(frozen=True)
class PlanDelta:
    """How the plan of one node moves from the baseline profile to the new one."""

    added: tuple[Change, ...] = ()  # changes only the new profile makes
    removed: tuple[Change, ...] = ()  # changes only the baseline made
    different: tuple[tuple[Change, Change], ...] = ()  # (baseline, new): same setting, other target or flags
    new_problems: tuple[Problem, ...] = ()
    resolved_problems: tuple[Problem, ...] = ()
    no_longer_managed: tuple[str, ...] = ()
    newly_managed: tuple[str, ...] = ()  # settings the new profile manages that are already as it wants

    @property
    def empty(self) -> bool:
        """No difference in what would be done on the node (management-only differences do not count)."""
        return not (self.added or self.removed or self.different or self.new_problems or self.resolved_problems)

    def to_dict(self) -> dict[str, Any]:
        return {"changes_plan": not self.empty,
                "added": [c.to_dict() for c in self.added], "removed": [c.to_dict() for c in self.removed],
                "different": [{"baseline": a.to_dict(), "new": b.to_dict()} for a, b in self.different],
                "new_problems": [p.to_dict() for p in self.new_problems],
                "resolved_problems": [p.to_dict() for p in self.resolved_problems],
                "no_longer_managed": list(self.no_longer_managed), "newly_managed": list(self.newly_managed)}


def diff_plans(baseline: Plan, new: Plan) -> PlanDelta:
    """Pure: compare two plans of the same node, change by change (keyed by kind and target)."""
    old_by = {_key(c): c for c in baseline.changes}
    new_by = {_key(c): c for c in new.changes}
    added = tuple(c for k, c in new_by.items() if k not in old_by)
    removed = tuple(c for k, c in old_by.items() if k not in new_by)
    different = tuple((old_by[k], c) for k, c in new_by.items() if k in old_by and _differs(old_by[k], c))
    old_p = {_pkey(p): p for p in baseline.problems}
    new_p = {_pkey(p): p for p in new.problems}
    old_m, new_m = _managed(baseline), _managed(new)
    changed_targets = {c.target for c in new.changes} | {p.target for p in new.problems}
    return PlanDelta(
        added, removed, different,
        new_problems=tuple(p for k, p in new_p.items() if k not in old_p),
        resolved_problems=tuple(p for k, p in old_p.items() if k not in new_p),
        no_longer_managed=tuple(sorted(old_m - new_m)),
        newly_managed=tuple(sorted(t for t in new_m - old_m if t not in changed_targets)),
    )


def _differs(a: Change, b: Change) -> bool:
    return (a.op, a.after, a.disruptive, a.data) != (b.op, b.after, b.disruptive, b.data)


@dataclass(frozen=True)
class NodeReview:
    """One node of a review: its new plan, and with a baseline, the old plan and the delta."""

    snapshot: Snapshot
    plan: Plan
    baseline: Plan | None = None
    delta: PlanDelta | None = None
    checks: list[dict[str, Any]] | None = None  # check results: captured with the facts, or judged from them
    facts_summary: dict[str, Any] = field(default_factory=dict)
    checks_source: str | None = None  # "captured" (a check report saved with the facts) | "offline" (judged)

    @property
    def label(self) -> str:
        return self.snapshot.label

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"node": self.label, "facts_file": self.snapshot.source, **self.facts_summary,
                               "plan": self.plan.to_dict()}
        if self.baseline is not None and self.delta is not None:
            out["baseline_plan"] = self.baseline.to_dict()
            out["delta"] = self.delta.to_dict()
        if self.checks is not None:
            out["checks"] = self.checks
            out["checks_source"] = self.checks_source
        return out


def _summary(snap: Snapshot) -> dict[str, Any]:
    f = snap.facts
    out = {"hostname": f.hostname, "kernel_release": f.kernel_release, "simulated": f.simulated}
    if snap.captured.get("time"):
        out["captured"] = snap.captured["time"]
    return out


def review(loaded: LoadedProfile, snapshots: list[Snapshot], *, baseline: LoadedProfile | None = None,
           allow_disruptive: bool = False) -> list[NodeReview]:
    """Plan ``loaded`` (and ``baseline``) against every snapshot, in the order given."""
    out = []
    for snap in snapshots:
        plan = plan_offline(loaded, snap, allow_disruptive=allow_disruptive)
        old = delta = None
        if baseline is not None:
            old = plan_offline(baseline, snap, allow_disruptive=allow_disruptive)
            delta = diff_plans(old, plan)
        checks, source = snap.checks, "captured" if snap.checks is not None else None
        if checks is None and any(getattr(loaded.profile.checks, n, None) is not None for n in CHECK_NAMES):
            from ..checks.offline import run_offline

            checks, source = [r.to_dict() for r in run_offline(loaded, snap).results], "offline"
        out.append(NodeReview(snap, plan, old, delta, checks, _summary(snap), source))
    return out


def exit_code(reviews: list[NodeReview], *, detailed: bool = False, allow_disruptive: bool = False) -> int:
    """See the module docstring."""
    if any(r.delta is not None for r in reviews):
        if any(r.delta is not None and any(p.blocking for p in r.delta.new_problems) for r in reviews):
            return int(ExitCode.ERROR)
        return int(ExitCode.CHANGES) if any(r.delta is not None and not r.delta.empty for r in reviews) else 0
    if any(r.plan.blocked for r in reviews):
        return int(ExitCode.ERROR)
    if detailed and any(r.plan.problems or (r.plan.disruptive and not allow_disruptive) for r in reviews):
        # apply would be partial (something it cannot do, or a disruptive change it holds back): 5 wins over 2
        return int(ExitCode.PARTIAL)
    if detailed and any(r.plan.changes for r in reviews):
        return int(ExitCode.CHANGES)
    return int(ExitCode.OK)


def to_dict(reviews: list[NodeReview], profile: LoadedProfile, baseline: LoadedProfile | None) -> dict[str, Any]:
    """The JSON form of a review (``plan --facts ... --format json``)."""
    out: dict[str, Any] = {"profile": profile.name, "profile_path": profile.path, "profile_digest": profile.digest}
    if baseline is not None:
        out["baseline"] = {"profile": baseline.name, "profile_path": baseline.path,
                           "profile_digest": baseline.digest}
    out["nodes"] = [r.to_dict() for r in reviews]
    return out
