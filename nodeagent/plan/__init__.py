"""Plans and results: typed, immutable records shared by everything below the engine.

A :class:`Change` says what one resource will do (``kind, target, op, before, after, reason, disruptive``), and
which devices and NUMA nodes it concerns and which other changes it depends on as explicit fields (what ``apply
--device`` scoping and the executor's ordering read); ``data`` holds what only its own kind's apply step reads.
a :class:`Plan` is the ordered list of them plus what cannot be done (``problems``) and what is advisory
(``warnings``). ``plan``, ``apply --dry-run`` and ``apply`` all render or execute the very same Plan.
"""

from __future__ import annotations

from typing import Any

from ..util.dataclass import asdict, dataclass


@dataclass(frozen=True)
class Change:
    kind: str  # resource kind: "knob", "dax", "damon"
    target: str  # what changes, as the profile names it: "kernel.numa_balancing"
    op: str  # "set", "create", "update", "delete", "reconfigure"...
    before: Any
    after: Any
    reason: str = ""
    disruptive: bool = False
    path: str | None = None  # the kernel attribute, for the reader of a plan
    before_label: str | None = None
    after_label: str | None = None
    data: tuple[tuple[str, Any], ...] = ()  # resource-specific details the apply step needs
    devices: tuple[str, ...] = ()  # the devices the change concerns (DAX devices, CXL regions): --device scope
    nodes: tuple[int, ...] = ()  # the NUMA nodes it concerns
    requires: tuple[str, ...] = ()  # targets whose changes must come along when this one is scoped in
    needs: tuple[str, ...] = ()  # targets whose changes must be made for this one to work (else it is left out)
    before_dax: bool = False  # run before the first DAX change (a kdamond stopped before its memory is rezoned)
    revert_of: str | None = None  # for a revert: the recorded original this change restores

    def detail(self, key: str, default: Any = None) -> Any:
        return dict(self.data).get(key, default)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["data"] = dict(self.data)
        for key in ("devices", "nodes", "requires", "needs"):
            d[key] = list(d[key])
        return d


@dataclass(frozen=True)
class Problem:
    """Something the plan cannot do on this node. ``blocking``: apply refuses to start at all. ``devices``: the
    devices it concerns (a memdev whose region cannot be built), so that a scoped apply of one of them
    (``apply --device mem4``) keeps the problem, as it keeps a change (:attr:`Change.devices`)."""

    kind: str
    target: str
    message: str
    hint: str | None = None
    blocking: bool = True
    devices: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["devices"] = list(d["devices"])
        return d


@dataclass(frozen=True)
class Plan:
    profile: str
    profile_digest: str
    changes: tuple[Change, ...]
    problems: tuple[Problem, ...] = ()
    warnings: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()  # managed targets already as desired
    node: str = ""  # which node the plan is for: "h100-cxl (simulated h100-cxl)"
    kinds: tuple[tuple[str, str], ...] = ()  # (target, kind) of the unchanged targets

    @property
    def empty(self) -> bool:
        return not self.changes

    @property
    def blocked(self) -> bool:
        return any(p.blocking for p in self.problems)

    @property
    def disruptive(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.disruptive)

    def to_dict(self) -> dict[str, Any]:
        return {"profile": self.profile, "profile_digest": self.profile_digest, "node": self.node,
                "changes": [c.to_dict() for c in self.changes], "problems": [p.to_dict() for p in self.problems],
                "warnings": list(self.warnings), "unchanged": list(self.unchanged)}


@dataclass(frozen=True)
class Outcome:
    change: Change
    status: str  # "applied", "failed", "skipped", "blocked"
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.change.target, "kind": self.change.kind, "op": self.change.op,
                "status": self.status, "message": self.message}


@dataclass(frozen=True)
class Result:
    plan: Plan
    outcomes: tuple[Outcome, ...] = ()
    verify_errors: tuple[str, ...] = ()
    dry_run: bool = False
    checks: Any = None  # nodeagent.checks.CheckReport of the preflight checks, when they ran
    # a dry run: what the executor would do with each change ("applied": it would be made; "blocked": held back,
    # with why) — what check modes report, never re-derived from the plan by a caller
    expected: tuple[Outcome, ...] = ()
    interrupted: int | None = None  # the signal that stopped the apply at a safe point (nodeagent.engine.signals)
    record_errors: tuple[str, ...] = ()  # state or journal writes that failed after changes were made

    @property
    def checks_failed(self) -> bool:
        return self.checks is not None and not self.checks.ok

    @property
    def ok(self) -> bool:
        return (not self.verify_errors and not self.plan.problems and not self.checks_failed
                and not self.interrupted and not self.record_errors
                and all(o.status == "applied" for o in self.outcomes))

    @property
    def changed(self) -> bool:
        return any(o.status == "applied" for o in self.outcomes)

    @property
    def went_ahead(self) -> bool:
        """Not a dry run, not refused (failed checks, a plan it cannot carry out, a "no" to the question): the apply
        ran, and wrote its records."""
        return not self.dry_run and not self.checks_failed and not (self.plan.blocked and not self.outcomes)

    @property
    def status(self) -> str:
        if self.checks_failed and not self.outcomes:
            return "checks-failed"
        if self.dry_run:
            return "dry-run"
        if self.interrupted:
            return "interrupted"
        if self.ok:
            return "converged" if self.changed or not self.outcomes else "unchanged"
        return "partial" if self.changed else "failed"

    def to_dict(self) -> dict[str, Any]:
        d = {"status": self.status, "changed": self.changed, "dry_run": self.dry_run,
             "plan": self.plan.to_dict(), "outcomes": [o.to_dict() for o in self.outcomes],
             "verify_errors": list(self.verify_errors)}
        if self.dry_run:
            d["expected"] = [o.to_dict() for o in self.expected]
        if self.interrupted:
            import signal

            d["interrupted"] = signal.Signals(self.interrupted).name
        if self.record_errors:
            d["record_errors"] = list(self.record_errors)
        if self.checks is not None:
            d["checks"] = self.checks.to_dict()
        return d
