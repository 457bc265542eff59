"""Drift: how the node has moved away from the profile it was given, since when, and probably why.

``detect`` re-plans the last applied profile (the validated profile ``last-applied.json`` keeps, read without
YAML or pydantic) — or a given one — against fresh facts with the same pure :func:`nodeagent.engine.core.make_plan` that
``apply`` uses: every change that plan would make is a drift item (its resource is the change's kind), every
problem (a device that vanished, a knob the kernel lost) is reported too. So each resource kind drifts the
moment it can be planned, with no drift code of its own. Each item gets its likely causes from the finders in
:mod:`.causes`.

``record`` (``drift --record``) keeps the open items in ``drift.json`` (:class:`nodeagent.state.DriftRecord`) —
which is where "first seen" comes from — and journals what changed since the last check: a ``drift`` event for
an item first seen or seen with a new value, a ``resolved`` event for one that is gone. An apply closes the
items it fixes.

A plan's problems are not drift: they are what apply *cannot do* on this node (a kdamond refused while a DAMON
module runs, a device bound to another driver). The report lists them apart, as "cannot be done"; ``drift``
exits 5 when there are any (apply would be partial, the code apply itself uses), else 3 when anything drifted.
``record`` keeps them apart too: under ``cannot_be_done`` in ``drift.json`` (never among ``items``), journalled
as ``cannot-be-done`` events (first seen, or with a new message) and as ``resolved`` events with
``"cannot_be_done": true`` once gone.

What ``nodeagent revert`` put back is not drift either: nodeagent stopped managing it. The last-applied record
marks each reverted target (:class:`nodeagent.state.Reverted`); a plan change for one is listed apart as
``reverted`` (with the revert as its cause), never counted as drift, never recorded by ``drift --record``. After a
full revert, bare ``drift`` has nothing to compare and says so (exit 0: "reverted at T by nodeagent revert;
nothing managed"); after a partial revert the still-managed items are checked as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import field, replace
from typing import TYPE_CHECKING, Any

from ..plan import Change, Problem
from ..profile.resolved import ResolvedProfile, from_record
from ..state import DriftEntry, DriftRecord, LastApplied, Unfixable
from ..state.journal import Journal, iso
from ..util.dataclass import dataclass
from ..util.errors import NodeagentError

if TYPE_CHECKING:
    from ..engine.core import Engine
    from ..profile import LoadedProfile
    from .causes import Cause

__all__ = ["Cause", "DriftItem", "DriftReport", "desired_profile", "detect", "detect_and_record", "problem_key",
           "record"]


def problem_key(p: Problem) -> str:
    return f"{p.kind}:{p.target}"


@dataclass(frozen=True)
class DriftItem:
    resource: str  # the resource kind: "knob", "dax", "damon"
    target: str
    expected: Any
    actual: Any
    expected_label: str
    actual_label: str
    path: str | None = None
    op: str = "set"
    first_seen: float | None = None  # None: not recorded before (this check is the first sighting)
    causes: tuple[Cause, ...] = ()
    change: Change | None = field(default=None, compare=False, repr=False)  # what apply would do about it

    @property
    def key(self) -> str:
        return f"{self.resource}:{self.target}"

    @classmethod
    def from_change(cls, c: Change) -> DriftItem:
        return cls(c.kind, c.target, c.after, c.before,
                   c.after_label if c.after_label is not None else str(c.after),
                   c.before_label if c.before_label is not None else str(c.before), c.path, c.op, change=c)

    def to_dict(self) -> dict[str, Any]:
        return {"resource": self.resource, "target": self.target, "expected": self.expected_label,
                "actual": self.actual_label, "path": self.path, "op": self.op,
                "first_seen": iso(self.first_seen) if self.first_seen else None,
                "causes": [c.to_dict() for c in self.causes]}


@dataclass(frozen=True)
class DriftReport:
    profile: str
    profile_digest: str
    source: str  # where the desired state came from: "last-applied" or a profile path
    node: str
    checked: float
    items: tuple[DriftItem, ...]
    problems: tuple[Problem, ...] = ()
    last_apply: dict[str, Any] = field(default_factory=dict)  # time, status, profile of the last apply
    notes: tuple[str, ...] = ()
    recorded: bool = False
    advisories: tuple[str, ...] = ()  # the plan's warnings: the same on every check of a converged node
    reverted: tuple[DriftItem, ...] = ()  # away from the profile because `nodeagent revert` put them back
    reverted_at: str | None = None  # a full revert: when (nothing is managed since)

    @property
    def converged(self) -> bool:
        return not self.items and not self.problems

    @property
    def cannot_be_done(self) -> tuple[Problem, ...]:
        """What apply cannot do on this node: listed apart from drift (not something that moved)."""
        return self.problems

    def by_resource(self) -> dict[str, int]:
        """Drifted items per resource kind (what cannot be done is not drift: see :attr:`cannot_be_done`)."""
        out: dict[str, int] = {}
        for i in self.items:
            out[i.resource] = out.get(i.resource, 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"converged": self.converged, "profile": self.profile, "profile_digest": self.profile_digest,
                "source": self.source, "node": self.node, "checked": iso(self.checked),
                "items": [i.to_dict() for i in self.items], "problems": [p.to_dict() for p in self.problems],
                "cannot_be_done": [p.to_dict() for p in self.problems],
                "by_resource": self.by_resource(), "last_apply": self.last_apply, "notes": list(self.notes),
                "advisories": list(self.advisories), "recorded": self.recorded,
                "reverted": [i.to_dict() for i in self.reverted],
                "reverted_at": self.reverted_at, "managed": self.reverted_at is None}


def desired_profile(last: LastApplied) -> LoadedProfile | ResolvedProfile:
    """The profile of the last apply: the validated profile ``last-applied.json`` keeps (``resolved``, see
    :mod:`nodeagent.profile.resolved`), used as it is — no YAML, no validation. A record written before that existed (or
    of a version this nodeagent does not read) has only the merged document (``desired``): validated again."""
    desired = last.desired
    if last.fully_reverted:
        raise NodeagentError(f"profile {last.profile!r} was reverted on this node, so there is nothing to "
                             "drift from", hint="give a profile: nodeagent drift PROFILE, or apply one")
    if not desired:
        raise NodeagentError("no profile has been applied on this node yet, so there is nothing to drift from",
                             hint="give a profile: nodeagent drift PROFILE, or apply one first")
    try:
        return from_record(last.resolved)
    except ValueError:
        pass
    import yaml

    from ..profile import load_profile_text

    shown = "/var/lib/nodeagent/last-applied.json (desired)"
    return load_profile_text(yaml.safe_dump(desired, sort_keys=False), shown)


def detect(engine: Engine, loaded: LoadedProfile | ResolvedProfile | None = None, *,
           now: float | None = None) -> DriftReport:
    """Compare the node with ``loaded`` (default: the last applied profile). Read-only."""
    last = engine.state.last_applied()
    notes: list[str] = []
    source = "last-applied"
    checked = time.time() if now is None else now
    if loaded is None and last.fully_reverted:
        node = (engine.host.read_opt("/proc/sys/kernel/hostname") or "node").strip()
        return DriftReport(last.profile or "", last.profile_digest or "", source, node, checked, (),
                           last_apply=last.summary(), reverted_at=last.time or "?",
                           notes=(f"reverted at {last.time or '?'} by nodeagent revert; nothing managed",))
    if loaded is None:
        loaded = desired_profile(last)
    else:
        source = loaded.path
        if last.profile_digest and last.profile_digest != loaded.digest:
            notes.append(f"{loaded.path} differs from the profile last applied here ({last.profile!r}, "
                         f"{last.time or '?'}): drift is measured against {loaded.path}")
    facts = engine.facts(loaded)
    plan = engine.plan(loaded, facts=facts)
    open_items = engine.state.drift().items
    items = []
    reverted = []
    if plan.changes:  # the cause finders (sysctl.d, TuneD, udev...) are loaded only when something drifted
        from .causes import Cause, find_causes
    for change in plan.changes:
        item = DriftItem.from_change(change)
        # reverted: its own target, or one its change needs (a CXL region's DAX device comes with the region)
        mark = next((m for t, m in last.reverted.items()
                     if any(m.covers(item.resource, x, t) for x in (item.target, *change.needs))), None)
        if mark is not None:
            reverted.append(replace(item, causes=(Cause("revert", f"put back by nodeagent revert at {mark.time}: not "
                                                        "managed since (`nodeagent apply` manages it again)"),)))
            continue
        seen = open_items.get(item.key)
        item = replace(item, first_seen=seen.first_seen if seen else None)
        items.append(replace(item, causes=find_causes(engine.host, item, last)))
    if last.status not in (None, "converged", "unchanged", "reverted"):
        notes.append(f"the last apply ended {last.status!r}: some items may never have been in place")
    summary = last.summary()
    return DriftReport(loaded.name, loaded.digest, source, plan.node, checked, tuple(items), plan.problems, summary,
                       tuple(notes), reverted=tuple(reverted), advisories=tuple(plan.warnings))


def detect_and_record(engine: Engine, loaded: LoadedProfile | ResolvedProfile | None = None, *,
                      amend: Callable[[DriftReport], DriftReport] | None = None) -> DriftReport:
    """``drift --record``: measure and record under one hold of the state lock, so that no apply runs in between
    (drift measured before an apply and recorded after it would be stale). ``amend`` adds to the report before
    it is recorded."""
    with engine.state.locked(engine.lock_timeout):
        report = detect(engine, loaded)
        return record(engine, amend(report) if amend is not None else report, locked=True)


def record(engine: Engine, report: DriftReport, *, locked: bool = False) -> DriftReport:
    """Keep the open items in ``drift.json`` and journal what changed since the last recorded check.

    Takes the state lock (``locked``: the caller holds it — measure under the same lock: :func:`detect_and_record`);
    returns the report with each item's ``first_seen`` filled in."""
    with nullcontext() if locked else engine.state.locked(engine.lock_timeout):
        before = engine.state.drift()
        old, old_apart = before.items, before.cannot_be_done
        new: dict[str, DriftEntry] = {}
        apart: dict[str, Unfixable] = {}
        events: list[dict[str, Any]] = []
        items = []
        for item in report.items:
            prev = old.get(item.key)
            first = prev.first_seen if prev and prev.first_seen else report.checked
            new[item.key] = DriftEntry(item.resource, item.target, item.expected_label, item.actual_label, first,
                                       report.checked)
            if prev is None or prev.actual != item.actual_label:
                events.append({"event": "drift", "resource": item.resource, "target": item.target,
                               "expected": item.expected_label, "actual": item.actual_label,
                               "first_seen": iso(first), "profile": report.profile,
                               "cause": item.causes[0].message if item.causes else None})
            items.append(replace(item, first_seen=first))
        for p in report.cannot_be_done:  # not drift: kept and journalled apart
            key = problem_key(p)
            was = old_apart.get(key)
            first = was.first_seen if was and was.first_seen else report.checked
            apart[key] = Unfixable(p.kind, p.target, p.message, p.hint, first, report.checked)
            if was is None or was.message != p.message:
                events.append({"event": "cannot-be-done", "resource": p.kind, "target": p.target,
                               "message": p.message, "hint": p.hint, "first_seen": iso(first),
                               "profile": report.profile})
        for key, gone in old.items():
            if key not in new:
                events.append({"event": "resolved", "resource": gone.resource, "target": gone.target,
                               "by": "outside nodeagent", "was": gone.actual})
        for key, left in old_apart.items():
            if key not in apart:
                events.append({"event": "resolved", "resource": left.resource, "target": left.target,
                               "was": left.message, "cannot_be_done": True})
        engine.state.write_record(DriftRecord(report.profile, report.profile_digest, report.checked, new, apart))
        Journal(engine.host).append(events)
    return replace(report, items=tuple(items), recorded=True)


def __getattr__(name: str) -> Any:
    if name == "Cause":  # re-exported, imported on first use (see detect)
        from .causes import Cause

        return Cause
    raise AttributeError(name)
