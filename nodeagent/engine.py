"""The engine: profile + facts → plan → apply → verify → record. One code path for plan, dry run and apply.

``make_plan`` is pure (facts in, plan out), so a plan made offline from saved facts is the plan the node would
make. ``Engine.apply`` takes the state lock, gathers facts, plans, and — unless it is a dry run — executes
exactly that plan in order, records originals before the first write and progress after every change,
then re-plans the whole profile on fresh facts: the apply converged only when that plan is empty, and every
change left is a verify error saying why.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from . import signals, state_guard
from .errors import ChangeSkipped, HostError, NeedsRootError
from .facts import Facts, gather
from .host import Host
from .journal import Journal
from .plan import Change, Outcome, Plan, Problem, Result
from .projection import project
from .resources.base import ApplyContext, PlanContext
from .resources.registry import BY_KIND, RESOURCES
from .scope import expand, restrict
from .state import STATE_DIR, StateStore, resolved_record

if TYPE_CHECKING:
    from .checks import CheckReport
    from .profile import LoadedProfile


def make_plan(loaded: LoadedProfile, facts: Facts, ctx: PlanContext | None = None) -> Plan:
    """Pure: what applying ``loaded`` to a node with ``facts`` would change, and what it cannot do. Every kind
    plans against the same projection of the node after the kinds before it (:mod:`nodeagent.projection`)."""
    ctx = ctx or PlanContext()
    if ctx.projection is None:
        ctx = replace(ctx, projection=project(loaded, facts, ctx.allow_disruptive))
    changes: list[Change] = []
    problems: list[Problem] = []
    warnings: list[str] = []
    unchanged: list[str] = []
    for res in RESOURCES:
        rp = res.plan(loaded, facts, ctx)
        changes += rp.changes
        problems += rp.problems
        warnings += rp.warnings
        unchanged += rp.unchanged
    changes = _before_dax(changes)
    node = (facts.hostname or "node") + (f" (simulated {facts.simulated})" if facts.simulated else "")
    return Plan(loaded.name, loaded.digest, tuple(changes), tuple(problems), tuple(warnings), tuple(unchanged),
                node=node)


def _before_dax(changes: list[Change]) -> list[Change]:
    """Changes a later kind marks ``before_dax`` (stopping a kdamond that migrates into memory about to be
    rezoned) go right before the first DAX change."""
    early = [c for c in changes if c.detail("before_dax")]
    first = next((i for i, c in enumerate(changes) if c.kind == "dax"), None)
    if not early or first is None:
        return changes
    rest = [c for c in changes if not c.detail("before_dax")]
    at = next(i for i, c in enumerate(rest) if c.kind == "dax")
    return rest[:at] + early + rest[at:]


@dataclass
class Engine:
    host: Host
    lock_timeout: float = 60.0

    def __post_init__(self) -> None:
        self.state = StateStore(self.host)

    def facts(self) -> Facts:
        return gather(self.host, planning=True)

    def context(self, allow_disruptive: bool = False) -> PlanContext:
        return PlanContext(allow_disruptive=allow_disruptive, state=self.state.load_all())

    def plan(self, loaded: LoadedProfile, *, allow_disruptive: bool = False, facts: Facts | None = None,
             scope: Collection[str] | None = None) -> Plan:
        """The plan; with ``scope`` (hot-plugged device names) only the changes that concern those devices
        (see :mod:`nodeagent.scope`)."""
        plan = make_plan(loaded, facts or self.facts(), self.context(allow_disruptive))
        if scope is not None:
            plan = restrict(plan, expand(self.host, scope))
        if not self.state.writable:  # (an apply journals it: Engine._unfinished)
            left = state_guard.unfinished(self.state)
            if left is not None:
                self.state._warn(f"{left['message']} — unless it is still running; the next apply finishes it")
        if self.state.warnings:
            plan = replace(plan, warnings=(*plan.warnings, *self.state.warnings))
        return plan

    def checks(self, loaded: LoadedProfile, facts: Facts, skip: frozenset[str] = frozenset()) -> CheckReport:
        """The profile's preflight checks on this node (read-only)."""
        from .checks import run_checks

        return run_checks(self.host, loaded, facts, skip)

    def apply(self, loaded: LoadedProfile, *, dry_run: bool = False, allow_disruptive: bool = False,
              confirm: Callable[[Plan], bool] | None = None,
              progress: Callable[[str, int, int], None] | None = None,
              skip_checks: frozenset[str] = frozenset(), scope: Collection[str] | None = None,
              on_plan: Callable[[CheckReport, Plan], None] | None = None) -> Result:
        """Run the preflight checks, then plan and (unless ``dry_run``) execute that very plan, verify, record.

        An error-severity check that fails (and is not in ``skip_checks``) stops here: nothing is written. A
        blocked plan (a problem that makes the whole profile inapplicable) writes nothing either. A disruptive
        change without ``allow_disruptive`` is skipped as ``blocked`` while the rest is applied. With ``scope``
        only the changes that concern those hot-plugged devices are planned and applied. After executing, the
        whole profile is planned again on fresh facts (:meth:`_verify`): the result is ``converged`` only when
        that plan is empty. Every apply that gets the lock is written to the history journal. ``on_plan(checks,
        plan)`` is called once both are known, before ``confirm`` and before anything is written (the CLI prints
        them there).
        """
        if dry_run:
            facts = self.facts()
            report = self.checks(loaded, facts, skip_checks)
            plan = self.plan(loaded, allow_disruptive=allow_disruptive, facts=facts, scope=scope)
            if on_plan is not None:
                on_plan(report, plan)
            return Result(plan, dry_run=True, checks=report)
        self.require_root()
        with self.state.locked(self.lock_timeout):
            self._unfinished()
            facts = self.facts()
            report = self.checks(loaded, facts, skip_checks)
            plan = self.plan(loaded, allow_disruptive=allow_disruptive, facts=facts, scope=scope)
            if on_plan is not None:
                on_plan(report, plan)
            if not report.ok:
                result = Result(plan, checks=report)
                self._history(loaded, result, scope)
                return result
            if plan.blocked or plan.empty:
                if plan.empty and not plan.blocked:
                    self._record(loaded, plan, [], "unchanged", scope=scope)
                self._history(loaded, Result(plan, checks=report), scope)
                return Result(plan, checks=report)
            if confirm is not None and not confirm(plan):
                return Result(plan, dry_run=True, checks=report)
            actx = ApplyContext(allow_disruptive=allow_disruptive, state=self.state, progress=progress)
            # From the first write to the last record a signal stops nothing half-way (nodeagent.signals): the
            # executor stops before its next change, and the result says where.
            with signals.deferred():
                record_errors: list[str] = []
                run = self._begin(loaded, plan, facts, scope)  # refuses here, before any change, if it cannot record
                outcomes = self._execute(loaded, plan, actx, run, record_errors)
                verify_errors = self._verify(loaded, plan, outcomes, allow_disruptive, scope)
                result = Result(plan, tuple(outcomes), tuple(verify_errors), checks=report,
                                interrupted=signals.pending())
                # Changes were made: a record that cannot be written is said in the result (exit 5), never an
                # error that hides what was done.
                for step in (lambda: self._record(loaded, plan, outcomes, result.status, verify_errors, scope=scope),
                             lambda: self._history(loaded, result, scope)):
                    try:
                        step()
                    except HostError as exc:
                        record_errors.append(exc.message)
                    except Exception as exc:  # noqa: BLE001 (a bug must not hide what was done either)
                        record_errors.append(f"internal error while recording ({type(exc).__name__}: {exc}); this "
                                             "is a bug in nodeagent, rerun with NODEAGENT_DEBUG=1 and report it")
                if not record_errors:  # the result is on disk: the progress record and the space held can go
                    try:
                        run.end()
                    except HostError as exc:
                        record_errors.append(exc.message)
                state_guard.release(self.state)
                return replace(result, record_errors=tuple(dict.fromkeys(record_errors)),
                               interrupted=signals.pending())

    def require_root(self) -> None:
        import os

        if self.host.is_real and os.geteuid() != 0:
            raise NeedsRootError("apply changes kernel settings and needs root", hint="run it with sudo")

    # -- the steps ------------------------------------------------------------------------------------
    def _unfinished(self) -> None:
        """An earlier run that never finished (killed, or unable to write its result) left its progress record:
        journal what it did, so the history says it, then let this run finish the job or clean up."""
        event = state_guard.unfinished(self.state)
        if event is None:
            return
        self.state._warn(f"{event['message']}; this apply finishes what it left")
        Journal(self.host).append([event])
        self.host.fs.remove(self.state.path(state_guard.PROGRESS))

    def _begin(self, loaded: LoadedProfile, plan: Plan, facts: Facts,
               scope: Collection[str] | None) -> state_guard.Progress:
        """Before the first change: the node's trees and the state directory writable, room held for every record
        this run writes, the originals recorded, the run's progress record begun. Any failure here raises: nothing
        was changed."""
        originals: dict[str, dict] = {}
        for c in plan.changes:  # what revert needs to put each change back (the first record of a target wins)
            rec = BY_KIND[c.kind].original(c, facts)
            if rec is not None and rec[0] not in originals:
                originals[rec[0]] = rec[1]
        # A read-only /sys, /proc or state directory fails here with one message, before the first write.
        self.host.fs.require_writable(sorted({c.path or "/sys" for c in plan.changes} | {STATE_DIR}))
        planned = [{"kind": c.kind, "target": c.target, "op": c.op} for c in plan.changes]
        run = state_guard.Progress(self.state, "apply", loaded.name, loaded.digest, planned)
        final = self._record_data(loaded, plan, [Outcome(c, "applied", "x" * 240) for c in plan.changes],
                                  "converged", scope=scope)
        need = state_guard.estimate([final, run.record | {"done": final["outcomes"]}, originals,
                                     self.state.load("ownership.json"), self.state.load("originals.json")])
        try:
            state_guard.reserve(self.state, need)
            self.state.remember_originals(originals)
            run.begin()
            self._record(loaded, plan, [], "in-progress", scope=scope)
        except HostError as exc:
            state_guard.release(self.state)
            self._remove_quietly(state_guard.PROGRESS)
            free = self._free(STATE_DIR)
            raise type(exc)(f"cannot apply: the state directory {STATE_DIR} cannot record what this apply does "
                            f"(it needs about {need // 1024} KiB{free}): {exc.message}; nothing was changed",
                            path=STATE_DIR, hint=f"free space in {STATE_DIR} (or remount it read-write), then apply "
                            "again; `nodeagent plan` shows the changes without applying them") from None
        return run

    def _free(self, path: str) -> str:
        try:
            st = self.host.fs.statvfs(path)
        except OSError:
            return ""
        return f", {st.f_bavail * st.f_frsize // 1024} KiB are free"

    def _remove_quietly(self, name: str) -> None:
        try:
            self.host.fs.remove(self.state.path(name))
        except HostError:
            pass

    def _execute(self, loaded: LoadedProfile, plan: Plan, actx: ApplyContext, run: state_guard.Progress,
                 record_errors: list[str] | None = None) -> list[Outcome]:
        """Each change, with its intent on disk before its first write and its outcome after (``run``)."""
        outcomes: list[Outcome] = []
        stop: str | None = None  # why the changes left are not done (a signal, a record that cannot be written)

        def cannot_record(exc: HostError) -> str:
            if record_errors is not None:
                record_errors.append(exc.message)
            return f"the state directory could not record it ({exc.message})"

        for change in plan.changes:
            if stop is None and signals.pending():
                stop = f"stopped by {signals.name(signals.pending() or 0)} before this change"
            if stop is not None:
                outcomes.append(Outcome(change, "skipped", f"not done: {stop}"))
                run.note(outcomes[-1].to_dict())
                continue
            if change.disruptive and not actx.allow_disruptive:
                outcomes.append(Outcome(change, "blocked", "disruptive: not done without --allow-disruptive"))
                run.note(outcomes[-1].to_dict())
                continue
            try:
                run.intent(change.kind, change.target, change.op)
            except HostError as exc:  # no change is made that the record on disk cannot follow
                stop = cannot_record(exc)
                outcomes.append(Outcome(change, "skipped", f"not done: {stop}"))
                continue
            try:
                msg = BY_KIND[change.kind].apply(self.host, change, actx)
                outcomes.append(Outcome(change, "applied", msg))
            except ChangeSkipped as exc:
                outcomes.append(Outcome(change, "skipped", exc.render()))
            except HostError as exc:
                outcomes.append(Outcome(change, "failed", exc.render()))
            try:
                run.done(outcomes[-1].to_dict())
            except HostError as exc:  # the change is made, its intent on disk: stop before the next one
                stop = cannot_record(exc)
        return outcomes

    def _verify(self, loaded: LoadedProfile, plan: Plan, outcomes: list[Outcome], allow_disruptive: bool,
                scope: Collection[str] | None = None) -> list[str]:
        """Re-plan the whole profile on fresh facts: the apply converged only when that plan is empty (within
        ``scope`` for a scoped apply — what it left out is listed in its plan's warnings). Every change left is
        an error naming it and why: the kernel did not keep a value written, the change failed or was held back,
        or it appeared only once this apply's own changes were made (a decision the plan should have foreseen)."""
        after = make_plan(loaded, self.facts(), self.context(allow_disruptive))
        if scope is not None:
            after = restrict(after, expand(self.host, scope))
        by_target = {o.change.target: o for o in outcomes}
        errors = []
        for change in after.changes:
            o = by_target.get(change.target)
            now, want = change.before_label or change.before, change.after_label or change.after
            if o is not None and o.status == "applied":
                errors.append(f"{change.target}: wrote {o.change.after_label or o.change.after}, but the node now "
                              f"reads {now}")
                continue
            if o is None:
                why = "it appeared only once this apply's changes were made (its plan did not foresee it)"
            else:
                why = f"{o.status}: {o.message}" if o.message else o.status
            errors.append(f"{change.target}: still {now}, the profile wants {want} — {why}")
        return errors

    def _record(self, loaded: LoadedProfile, plan: Plan, outcomes: list[Outcome], status: str,
                verify_errors: list[str] | None = None, scope: Collection[str] | None = None) -> None:
        self.state.record_apply(self._record_data(loaded, plan, outcomes, status, verify_errors, scope))

    def _record_data(self, loaded: LoadedProfile, plan: Plan, outcomes: list[Outcome], status: str,
                     verify_errors: list[str] | None = None, scope: Collection[str] | None = None) -> dict:
        return {
            "profile": loaded.name, "profile_path": loaded.path, "profile_digest": loaded.digest,
            "desired": loaded.data, "resolved": resolved_record(loaded), "status": status,
            "outcomes": [o.to_dict() for o in outcomes], "verify_errors": verify_errors or [],
            "problems": [p.to_dict() for p in plan.problems],
            **({"scope": sorted(scope)} if scope is not None else {}),
        }

    def _history(self, loaded: LoadedProfile, result: Result, scope: Collection[str] | None) -> None:
        """Journal the apply, and close the open drift items it fixed (``drift.json``, see nodeagent.drift)."""
        status = "refused" if result.plan.blocked and not result.outcomes else result.status
        event = {"event": "apply", "profile": loaded.name, "profile_digest": loaded.digest, "status": status,
                 "changes": [{**o.to_dict(), "before": o.change.before_label or o.change.before,
                              "after": o.change.after_label or o.change.after} for o in result.outcomes],
                 "problems": [p.message for p in result.plan.problems],
                 "verify_errors": list(result.verify_errors)}
        if scope is not None:
            event["scope"] = sorted(scope)
        fixed = {f"{o.change.kind}:{o.change.target}" for o in result.outcomes if o.status == "applied"}
        drift = self.state.load("drift.json")
        open_items = drift.get("items", {})
        resolved = [{"event": "resolved", "resource": v.get("resource"), "target": v.get("target"), "by": "apply"}
                    for k, v in open_items.items() if k in fixed]
        if resolved:
            self.state.save("drift.json", {**drift, "items": {k: v for k, v in open_items.items()
                                                              if k not in fixed}})
        Journal(self.host).append([event, *resolved])
