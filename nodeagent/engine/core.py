"""The engine: profile + facts → plan → apply → verify → record. One code path for plan, dry run and apply, and
one executor for apply and revert.

``make_plan`` is pure (facts in, plan out), so a plan made offline from saved facts is the plan the node would
make. ``Engine.apply`` takes the state lock, gathers facts, plans, and — unless it is a dry run — executes
that plan in order, records originals before the first write and progress after every change, then re-plans
the whole profile on fresh facts: the apply converged only when that plan is empty, and every change left is a
verify error saying why. A plan that makes CXL region changes runs in two stages (:meth:`Engine._run_staged`):
the changes up to the last region change, then the rest as a plan made on fresh facts once the regions exist
(their node's distances and tier are the kernel's only then).

``make_revert_plan`` is pure too: each recorded original is handed to its kind's ``revert``
(:meth:`nodeagent.kinds.base.Kind.revert`), kinds in the reverse of their apply order (kdamonds stop before the
memory they migrate to goes offline; ``auto_online_blocks`` goes back last). ``Engine.revert`` executes that plan
with the same executor as apply (:meth:`Engine._run`: the same outcomes — applied, skipped, blocked, failed —,
progress, disruptive gate and partial-failure handling), re-plans the revert of what it touched (a target still
not back is a verify error), drops the originals, drift items and ownership records of every target that is
back, marks them reverted in the last-applied record (what ``drift`` reads: a reverted setting is not drift) and
journals a ``revert`` event, exactly like an apply journals its ``apply`` event.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import replace
from typing import TYPE_CHECKING

from ..facts import Facts, gather
from ..host import Host
from ..kinds.base import ApplyContext, PlanContext
from ..kinds.projection import project
from ..kinds.registry import BY_KIND, RESOURCES
from ..plan import Change, Outcome, Plan, Problem, Result
from ..state import (
    STATE_DIR,
    CheckOutcome,
    DriftRecord,
    LastApplied,
    LastChecks,
    Original,
    Originals,
    Ownership,
    PlanState,
    Progress,
    Reverted,
    StateStore,
    resolved_record,
)
from ..state.advisories import advisory_id
from ..state.journal import Journal
from ..util.dataclass import dataclass
from ..util.errors import ChangeSkipped, HostError, LockTimeoutError, NeedsRootError, NotRecorded
from ..util.timestamps import rfc3339
from . import signals
from .scope import expand, restrict

if TYPE_CHECKING:
    from ..checks import CheckReport
    from ..profile import LoadedProfile


def make_plan(loaded: LoadedProfile, facts: Facts, ctx: PlanContext | None = None) -> Plan:
    """Pure: what applying ``loaded`` to a node with ``facts`` would change, and what it cannot do. Every kind
    plans against the same projection of the node after the kinds before it (:mod:`nodeagent.kinds.projection`)."""
    ctx = ctx or PlanContext()
    if ctx.projection is None:
        ctx = replace(ctx, projection=project(loaded, facts, ctx.allow_disruptive))
    changes: list[Change] = []
    problems: list[Problem] = []
    warnings: list[str] = []
    unchanged: list[str] = []
    kinds: list[tuple[str, str]] = []
    for res in RESOURCES:
        rp = res.plan(loaded, facts, ctx)
        changes += rp.changes
        problems += rp.problems
        warnings += rp.warnings
        unchanged += rp.unchanged
        kinds += [(t, res.kind) for t in rp.unchanged]
    changes = _before_dax(changes)
    return Plan(loaded.name, loaded.digest, tuple(changes), tuple(problems), tuple(warnings), tuple(unchanged),
                node=node_name(facts), kinds=tuple(kinds))


def node_name(facts: Facts) -> str:
    return (facts.hostname or "node") + (f" (simulated {facts.simulated})" if facts.simulated else "")


#: Revert runs the kinds in the reverse of their apply order.
_REVERT_ORDER = {kind: -i for i, kind in enumerate(BY_KIND)}


def make_revert_plan(state: PlanState, facts: Facts, targets: Collection[str] | None = None) -> Plan:
    """Pure: the changes that put back every recorded original (or those of ``targets``), each planned by its
    kind. A kind that cannot revert (no ``revert``, or a state it cannot restore) is a non-blocking problem."""
    originals = state.originals.items
    changes: list[Change] = []
    problems: list[Problem] = []
    unchanged: list[str] = []
    wanted = set(targets) if targets is not None else None
    for t in sorted((wanted or set()) - set(originals)):
        problems.append(Problem("revert", t, f"{t}: nodeagent has no original value recorded for it",
                                hint="see `nodeagent status` for what nodeagent changed", blocking=True))
    for target, rec in originals.items():
        if wanted is not None and target not in wanted:
            continue
        kind = BY_KIND.get(rec.kind)
        if kind is None or not kind.revertible:
            problems.append(Problem(rec.kind, target, f"{target}: reverting {rec.kind} is not supported by this "
                                    "version", hint="undo it by hand", blocking=False))
            continue
        try:
            mine = kind.revert(target, rec, facts, state)
        except ValueError as exc:
            problems.append(Problem(rec.kind, target, str(exc), blocking=False))
            continue
        if not mine:
            unchanged.append(target)
        changes += [replace(c, revert_of=target) for c in mine]
    # within a kind, a change marked ``late`` goes after the others (a DAMON module enabled again only once
    # nodeagent's kdamonds are stopped: the kernel refuses it while any runs)
    changes.sort(key=lambda c: (_REVERT_ORDER.get(c.kind, 1), bool(c.detail("late", False))))
    return Plan("revert", "", tuple(changes), tuple(problems), (), tuple(unchanged), node=node_name(facts))


def rezones(change: Change) -> bool:
    """Whether ``change`` takes DAX memory away or rezones it: its kind says so (``rezones(change)``, the DAX kind
    for every change, the CXL region kind for a teardown or its DAX device's onlining)."""
    kind = BY_KIND.get(change.kind)
    return kind is not None and kind.rezones(change)


def _before_dax(changes: list[Change]) -> list[Change]:
    """Changes a later kind marks ``before_dax`` (stopping a kdamond that migrates into memory about to be
    rezoned or taken away) go right before the first change that does that (:func:`rezones`: a DAX change, a CXL
    region's teardown before a rebuild)."""
    early = [c for c in changes if c.before_dax]
    rest = [c for c in changes if not c.before_dax]
    at = next((i for i, c in enumerate(rest) if rezones(c)), None)
    if not early or at is None:
        return changes
    return rest[:at] + early + rest[at:]


@dataclass
class Engine:
    host: Host
    lock_timeout: float = 60.0

    def __post_init__(self) -> None:
        self.state = StateStore(self.host)

    def facts(self, loaded: LoadedProfile | None = None, need: frozenset[str] = frozenset()) -> Facts:
        return gather(self.host, planning=True, profile=loaded, need=need)

    def revert_facts(self) -> Facts:
        """The facts revert plans from: with the sections the recorded originals' kinds need beyond planning's
        (``revert_sections``: the CXL bus for the regions nodeagent made)."""
        kinds = {o.kind for o in self.state.originals().items.values()}
        return self.facts(need=frozenset().union(*(BY_KIND[k].revert_sections for k in kinds if k in BY_KIND)))

    def context(self, allow_disruptive: bool = False) -> PlanContext:
        self.state.drift()  # read (validated) before planning too: a bad drift.json is said with the plan
        self.state.advisories_shown()  # (and a bad advisories.json)
        return PlanContext(allow_disruptive=allow_disruptive, state=self.state.plan_state())

    def plan(self, loaded: LoadedProfile, *, allow_disruptive: bool = False, facts: Facts | None = None,
             scope: Collection[str] | None = None) -> Plan:
        """The plan; with ``scope`` (hot-plugged device names) only the changes that concern those devices
        (see :mod:`nodeagent.engine.scope`)."""
        plan = make_plan(loaded, facts or self.facts(loaded), self.context(allow_disruptive))
        if scope is not None:
            plan = restrict(plan, expand(self.host, scope))
        if not self.state.writable:  # (an apply journals it: Engine._unfinished)
            left = self.state.unfinished()
            if left:
                self.state._warn(f"{left.summary()} — unless it is still running; the next apply finishes it")
        if self.state.warnings:
            plan = replace(plan, warnings=(*plan.warnings, *self.state.warnings))
        return plan

    def checks(self, loaded: LoadedProfile, facts: Facts, skip: frozenset[str] = frozenset()) -> CheckReport:
        """The profile's preflight checks on this node (read-only)."""
        from ..checks import run_checks

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
            facts = self.facts(loaded)
            report = self.checks(loaded, facts, skip_checks)
            plan = self.plan(loaded, allow_disruptive=allow_disruptive, facts=facts, scope=scope)
            if on_plan is not None:
                on_plan(report, plan)
            return Result(plan, dry_run=True, checks=report, expected=expected(plan, allow_disruptive))
        self.require_root()
        with self.state.locked(self.lock_timeout):
            self._unfinished()
            facts = self.facts(loaded)
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
                return Result(plan, dry_run=True, checks=report, expected=expected(plan, allow_disruptive))
            actx = ApplyContext(allow_disruptive=allow_disruptive, state=self.state, progress=progress)
            # From the first write to the last record a signal stops nothing half-way (nodeagent.engine.signals): the
            # executor stops before its next change, and the result says where.
            with signals.deferred():
                record_errors: list[str] = []
                run = self._begin(loaded, plan, facts, scope)  # refuses here, before any change, if it cannot record
                plan, outcomes = self._run_staged(loaded, plan, actx, run, record_errors, scope)
                verify_errors = self._verify(loaded, plan, outcomes, allow_disruptive, scope)
                result = Result(plan, tuple(outcomes), tuple(verify_errors), checks=report,
                                interrupted=signals.pending())
                # Changes were made: a record that cannot be written is said in the result (exit 5), never an
                # error that hides what was done.
                self._close(run, record_errors, [
                    lambda: self._record(loaded, plan, outcomes, result.status, verify_errors, scope=scope),
                    lambda: self._history(loaded, result, scope)])
                return replace(result, record_errors=tuple(dict.fromkeys(record_errors)),
                               interrupted=signals.pending())

    def require_root(self) -> None:
        import os

        if self.host.is_real and os.geteuid() != 0:
            raise NeedsRootError("apply changes kernel settings and needs root", hint="run it with sudo")

    # -- the steps ------------------------------------------------------------------------------------
    def _unfinished(self) -> None:
        """An earlier run that never finished (killed, or unable to write its result) left its progress record:
        journal what it did (an event with status ``incomplete``), so the history says it, then let this run
        finish the job or clean up, as its plan says."""
        left = self.state.unfinished()
        if not left:
            return
        self.state._warn(f"{left.summary()}; this run finishes what it left")
        Journal(self.host).append([{"event": left.what or "apply", "status": "incomplete", "profile": left.profile,
                                    "profile_digest": left.profile_digest, "started": left.started, "pid": left.pid,
                                    "changes": left.done, "in_flight": left.in_flight, "message": left.summary()}])
        self.state.end_run()

    def _begin(self, loaded: LoadedProfile | None, plan: Plan, facts: Facts | None,
               scope: Collection[str] | None = None) -> Progress:
        """Before the first change: the node's trees and the state directory writable, room held for every record
        this run writes, the originals recorded (apply), the run's progress record begun. Any failure here
        raises: nothing was changed."""
        # A read-only /sys, /proc or state directory fails here with one message, before the first write.
        self.host.fs.require_writable(sorted({c.path or "/sys" for c in plan.changes} | {STATE_DIR}))
        what = "apply" if loaded is not None else "revert"
        run = Progress(what, pid=__import__("os").getpid(), started=rfc3339(),
                       profile=loaded.name if loaded is not None else None,
                       profile_digest=loaded.digest if loaded is not None else None,
                       planned=[{"kind": c.kind, "target": c.target, "op": c.op} for c in plan.changes])
        originals = originals_of(plan, facts, self.state.last_applied()) if loaded is not None and facts else {}
        final = [Outcome(c, "applied", "x" * 240).to_dict() for c in plan.changes]
        records: list[object] = [Progress(what, done=final, planned=run.planned), self.state.ownership(),
                                 {"event": final}, Originals({**self.state.originals().items, **originals})]
        if loaded is not None:
            records.append(self._last_applied(loaded, plan, [], "converged", scope=scope).to_json() | {
                "outcomes": final})
        need: int | None = None
        try:
            need = self.state.reserve(records)
            if originals:
                self.state.remember_originals(originals)
            self.state.write_record(run)
            if loaded is not None:
                self._record(loaded, plan, [], "in-progress", scope=scope)
        except HostError as exc:
            self.state.release()
            try:
                self.state.end_run()
            except HostError:
                pass
            size = f" (it needs about {need // 1024} KiB{self._free()})" if need else self._free(", ")
            raise type(exc)(f"cannot {what}: the state directory {STATE_DIR} cannot record what this {what} does"
                            f"{size}: {exc.message}; nothing was changed", path=STATE_DIR,
                            hint=f"free space in {STATE_DIR} (or remount it read-write), then run again") from None
        return run

    def _free(self, lead: str = ", ") -> str:
        try:
            st = self.host.fs.statvfs(STATE_DIR)
        except OSError:
            return ""
        return f"{lead}{st.f_bavail * st.f_frsize // 1024} KiB are free"

    def _close(self, run: Progress, record_errors: list[str], steps: list[Callable[[], None]]) -> None:
        """The run's last records (its result, its journal event); then, when they are on disk, the progress
        record and the room held go. A failure is kept in ``record_errors`` (the result says it: exit 5)."""
        for step in steps:
            try:
                step()
            except HostError as exc:
                record_errors.append(exc.message)
            except Exception as exc:  # noqa: BLE001 (a bug must not hide what was done either)
                record_errors.append(f"internal error while recording ({type(exc).__name__}: {exc}); this is a "
                                     "bug in nodeagent, rerun with NODEAGENT_DEBUG=1 and report it")
        if not record_errors:
            try:
                self.state.end_run()
            except HostError as exc:
                record_errors.append(exc.message)
        self.state.release()

    def _run(self, plan: Plan, actx: ApplyContext, run: Progress | None = None,
             record_errors: list[str] | None = None) -> list[Outcome]:
        """The executor (apply and revert): every change of ``plan`` in order through its kind's ``apply``. A
        disruptive change without ``allow_disruptive`` is ``blocked``; a change its kind skips (a DAX change after
        an earlier DAX failure) is ``skipped``; a host error is ``failed`` and the run goes on with the next
        change. With ``run``, each change's intent is on disk before its first write and its outcome after
        (intent before action): a change whose intent cannot be written is not made, and after an outcome that
        cannot be written no further change is. A signal (:mod:`nodeagent.engine.signals`) stops it before the next
        change."""
        outcomes: list[Outcome] = []
        stop: str | None = None  # why the changes left are not done (a signal, a record that cannot be written)

        def cannot_record(exc: HostError) -> str:
            if record_errors is not None:
                record_errors.append(exc.message)
            return f"the state directory could not record it ({exc.message})"

        def note(outcome: Outcome) -> None:
            outcomes.append(outcome)
            if run is not None:
                run.done.append(outcome.to_dict())

        for change in plan.changes:
            if stop is None and signals.pending():
                stop = f"stopped by {signals.name(signals.pending() or 0)} before this change"
            if stop is not None:
                note(Outcome(change, "skipped", f"not done: {stop}"))
                continue
            held = gate(change, actx.allow_disruptive)
            if held is not None:
                note(Outcome(change, "blocked", held))
                continue
            if run is not None:
                run.in_flight = {"kind": change.kind, "target": change.target, "op": change.op, "since": rfc3339()}
                try:
                    self.state.write_record(run)
                except HostError as exc:  # no change is made that the record on disk cannot follow
                    run.in_flight = None
                    stop = cannot_record(exc)
                    note(Outcome(change, "skipped", f"not done: {stop}"))
                    continue
            try:
                msg = BY_KIND[change.kind].apply(self.host, change, actx)
                note(Outcome(change, "applied", msg))
            except ChangeSkipped as exc:
                note(Outcome(change, "skipped", exc.render()))
            except NotRecorded as exc:  # made, but not on record as done: said so, and nothing more is changed
                note(Outcome(change, "applied", exc.message))
                stop = cannot_record(exc.cause)
            except HostError as exc:
                note(Outcome(change, "failed", exc.render()))
            if run is not None:
                run.in_flight = None
                try:
                    self.state.write_record(run)
                except HostError as exc:  # the change is made, its intent on disk: stop before the next one
                    stop = cannot_record(exc)
        return outcomes

    def _run_staged(self, loaded: LoadedProfile, plan: Plan, actx: ApplyContext, run: Progress,
                    record_errors: list[str], scope: Collection[str] | None) -> tuple[Plan, list[Outcome]]:
        """The executor over ``plan``; when it creates CXL regions, in two stages. A region's node exists only
        once the region is committed and its memory online: its NUMA distances (the SLIT row, HMAT's initiators)
        and memory tier are the kernel's from then on, and the plan could only project them (the window's node,
        its host bridge's proximity). So after the last region change the profile is planned again on fresh
        facts, and the changes after that point (DAX devices, placement, DAMON pairing, the late knobs) are the
        new plan's, for every target the first stage did not touch — one apply, one result. A change whose new
        plan differs from the one shown before says so in its outcome. Returns the plan as executed."""
        last = max((i for i, c in enumerate(plan.changes) if c.kind == "cxl_region"), default=None)
        if last is None:
            return plan, self._run(plan, actx, run, record_errors)
        head, rest = plan.changes[:last + 1], plan.changes[last + 1:]
        outcomes = self._run(replace(plan, changes=head), actx, run, record_errors)
        created = [o.change for o in outcomes if o.change.kind == "cxl_region" and o.status == "applied"]
        if created and not signals.pending() and not record_errors:
            try:
                fresh = make_plan(loaded, self.facts(loaded), self.context(actx.allow_disruptive))
            except HostError:  # the node cannot be read now: the changes planned before go ahead
                fresh = None
            if fresh is not None and scope is not None:
                fresh = restrict(fresh, expand(self.host, scope))
            if fresh is not None and not fresh.blocked:
                # a kdamond paused before a teardown is planned again (its restart) like the kinds after it
                done = {(o.change.kind, o.change.target) for o in outcomes if o.change.op != "pause"}
                rest = tuple(c for c in fresh.changes if (c.kind, c.target) not in done)
        before = {(c.kind, c.target): c for c in plan.changes[last + 1:]}
        tail = self._run(replace(plan, changes=rest), actx, run, record_errors)
        what = ", ".join(dict.fromkeys(str(c.detail("region") or c.target) for c in created if c.op == "create"))
        for o in tail:
            was = before.get((o.change.kind, o.change.target))
            label = o.change.after_label or o.change.after
            if was is None or (was.after_label or was.after) != label or was.data != o.change.data:
                shown = f"planned again once {what or 'the regions'} existed" + (
                    f" (the plan shown said {was.after_label or was.after})" if was is not None
                    and (was.after_label or was.after) != label else "")
                o = replace(o, message=f"{o.message}; {shown}" if o.message else shown)
            outcomes.append(o)
        return replace(plan, changes=(*head, *rest)), outcomes

    def _verify(self, loaded: LoadedProfile, plan: Plan, outcomes: list[Outcome], allow_disruptive: bool,
                scope: Collection[str] | None = None) -> list[str]:
        """Re-plan the whole profile on fresh facts: the apply converged only when that plan is empty (within
        ``scope`` for a scoped apply — what it left out is listed in its plan's warnings). Every change left is
        an error naming it and why: the kernel did not keep a value written, the change failed or was held back,
        or it appeared only once this apply's own changes were made (a decision the plan should have foreseen)."""
        after = make_plan(loaded, self.facts(loaded), self.context(allow_disruptive))
        if scope is not None:
            after = restrict(after, expand(self.host, scope))
        by_target = {o.change.target: o for o in outcomes}
        errors = []
        for change in after.changes:
            o = by_target.get(change.target)
            now, want = change.before_label or change.before, change.after_label or change.after
            follows = change.detail("follows")
            if follows and o is not None and o.status == "applied":  # a desired state that follows a measure
                errors.append(f"{change.target}: wrote {o.change.after_label or o.change.after}, then what it "
                              f"follows moved while this apply ran — {follows}: the next run follows it")
                continue
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
        self.state.record_apply(self._last_applied(loaded, plan, outcomes, status, verify_errors, scope))

    def _last_applied(self, loaded: LoadedProfile, plan: Plan, outcomes: list[Outcome], status: str,
                      verify_errors: list[str] | None = None, scope: Collection[str] | None = None) -> LastApplied:
        managed = {f"{c.kind}:{c.target}" for c in plan.changes} | {f"{k}:{t}" for t, k in plan.kinds}
        reverted: dict[str, Reverted] = {}
        if scope is not None:  # a scoped apply manages its scope again; what it left out stays as it was
            last = self.state.last_applied()
            managed |= set(last.managed)
            reverted = {t: r for t, r in last.reverted.items()
                        if not any(r.covers(m.partition(":")[0], m.partition(":")[2], t) for m in managed)}
        return (LastApplied(
            loaded.name, profile_path=loaded.path, profile_digest=loaded.digest, desired=loaded.data,
            resolved=resolved_record(loaded), status=status, outcomes=[o.to_dict() for o in outcomes],
            verify_errors=list(verify_errors or []), problems=[p.to_dict() for p in plan.problems],
            scope=sorted(scope) if scope is not None else None, managed=sorted(managed), reverted=reverted))

    def _history(self, loaded: LoadedProfile, result: Result, scope: Collection[str] | None) -> None:
        """Journal the apply, close the open drift items it fixed (``drift.json``, see nodeagent.drift), and keep
        what its checks said (:meth:`_keep_checks`)."""
        event = _event("apply", result, profile=loaded.name, profile_digest=loaded.digest)
        if scope is not None:
            event["scope"] = sorted(scope)
        fixed = {f"{o.change.kind}:{o.change.target}" for o in result.outcomes if o.status == "applied"}
        resolved = []
        with self.state.edit(DriftRecord) as drift:
            for key in sorted(fixed & set(drift.items)):
                item = drift.items.pop(key)
                resolved.append({"event": "resolved", "resource": item.resource, "target": item.target,
                                 "by": "apply"})
        Journal(self.host).append([event, *resolved])
        if result.checks is not None:
            self._keep_checks(result.checks)

    def record_checks(self, report: CheckReport) -> None:
        """Keep what a run of the checks outside apply said (``run`` without ``--apply``), under the state lock."""
        with self.state.locked(self.lock_timeout):
            self._keep_checks(report)

    def _keep_checks(self, report: CheckReport) -> None:
        """``last-checks.json``: the metrics and the labels export the last results until the checks run again.
        The caller holds the lock; a run that skipped every check leaves the last results as they are."""
        if report.results:
            self.state.write_record(LastChecks([CheckOutcome(c.name, c.severity, c.status) for c in report.results]))

    # -- advisories said once per profile and kernel (nodeagent.state.advisories) ---------------------------------
    def kernel_release(self) -> str:
        return self.host.read_opt("/proc/sys/kernel/osrelease") or ""

    def advisories_shown(self, profile: str, digest: str, texts: Collection[str]) -> frozenset[str]:
        """Of ``texts`` (a plan's warnings), those already shown in full for this profile on this kernel. Read-only:
        ``plan`` on a read-only state directory reads it too (none recorded: every one is new)."""
        ids = self.state.advisories_shown().ids(profile, digest, self.kernel_release())
        return frozenset(t for t in texts if advisory_id(t) in ids)

    def remember_advisories(self, profile: str, digest: str, texts: Collection[str], timeout: float = 5.0) -> bool:
        """Record ``texts`` as shown in full (under the state lock; nothing when every one already was). What the
        state itself warned about (a corrupt file, an unfinished run) is said every time, never recorded. A courtesy
        record: when it cannot be written (the lock held long by another run, a read-only state directory) the
        advisories are simply shown again next time — False."""
        texts = [t for t in texts if t not in self.state.warnings]
        if not texts or self.advisories_shown(profile, digest, texts) == frozenset(texts):
            return False
        kernel = self.kernel_release()
        try:
            with self.state.locked(min(timeout, self.lock_timeout)):
                return self.state.remember_advisories(profile, digest, kernel, texts)
        except (HostError, LockTimeoutError):
            return False

    # -- revert -----------------------------------------------------------------------------------------
    def revert_plan(self, targets: Collection[str] | None = None, facts: Facts | None = None) -> Plan:
        """What revert would change (read-only)."""
        facts = facts or self.revert_facts()
        plan = make_revert_plan(self.state.plan_state(), facts, targets)
        if targets is None:
            plan = self._lost_originals(plan, facts)
        if self.state.warnings:
            plan = replace(plan, warnings=(*plan.warnings, *self.state.warnings))
        return plan

    def _lost_originals(self, plan: Plan, facts: Facts) -> Plan:
        """When ``originals.json`` was set aside (corrupt, or of the wrong shape), the settings the last apply
        changed whose original went with it are named (left as they are), and nodeagent's own kdamonds, which
        ownership records, are still stopped (the number of slots before nodeagent is then unknown: kept)."""
        why = self.state.set_aside.get(Originals.FILE)
        if why is None:
            return plan
        state = self.state.plan_state()
        originals = state.originals.items
        applied = {o.get("target"): o.get("kind") for o in state.last_applied.outcomes
                   if o.get("status") == "applied"}
        problems = [Problem(str(kind or "knob"), str(t), f"{t}: the value it had before nodeagent changed it is not "
                            f"recorded (lost with {why}): revert leaves it as it is", hint="set it back by hand",
                            blocking=False)
                    for t, kind in applied.items() if t and t not in originals
                    and not (kind in BY_KIND and BY_KIND[kind].reverts_from_ownership)]
        changes: list[Change] = []
        for k in {k.kind: k for k in RESOURCES if k.reverts_from_ownership}.values():
            mine, said = k.revert_unrecorded(facts, state, why)
            changes += mine
            problems += said
        return replace(plan, changes=(*changes, *plan.changes), problems=(*plan.problems, *problems))

    def revert(self, *, targets: Collection[str] | None = None, dry_run: bool = False,
               allow_disruptive: bool = False, confirm: Callable[[Plan], bool] | None = None,
               progress: Callable[[str, int, int], None] | None = None) -> Result:
        """Put back the recorded originals (of ``targets``, default all) with the apply executor, verify, forget
        what is back, journal. A blocked plan (an unknown ``--only`` target) writes nothing."""
        if dry_run:
            plan = self.revert_plan(targets)
            return Result(plan, dry_run=True, expected=expected(plan, allow_disruptive))
        self.require_root()
        with self.state.locked(self.lock_timeout):
            self._unfinished()
            plan = self.revert_plan(targets)
            if plan.blocked:  # journalled like a refused apply
                result = Result(plan)
                Journal(self.host).append([_event("revert", result, reverted=[])])
                return result
            if plan.changes and confirm is not None and not confirm(plan):
                return Result(plan, dry_run=True, expected=expected(plan, allow_disruptive))
            actx = ApplyContext(allow_disruptive=allow_disruptive, state=self.state, progress=progress)
            with signals.deferred():
                return self._revert(plan, actx)

    def _revert(self, plan: Plan, actx: ApplyContext) -> Result:
        """The revert once planned (under the lock, signals deferred): the same executor and records as apply."""
        record_errors: list[str] = []
        run = self._begin(None, plan, None) if plan.changes else None
        outcomes = self._run(plan, actx, run, record_errors) if plan.changes else []
        touched = sorted({c.revert_of or c.target for c in plan.changes})
        after = make_revert_plan(self.state.plan_state(), self.revert_facts(), touched) if touched else None
        still = {c.target: c for c in after.changes} if after else {}
        applied = {o.change.target for o in outcomes if o.status == "applied"}
        errors = [f"{t}: wrote {c.before_label or c.before} back, but the node now reads "
                  f"{c.after_label or c.after}" for t, c in still.items() if t in applied]
        left = {c.revert_of or t for t, c in still.items()}
        left |= {o.change.revert_of or o.change.target for o in outcomes if o.status != "applied"}
        done = set(plan.unchanged) | ({o.change.revert_of or o.change.target for o in outcomes} - left)
        result = Result(plan, tuple(outcomes), tuple(errors), interrupted=signals.pending())
        steps = [lambda: self._forget(done),
                 lambda: Journal(self.host).append([_event("revert", result, reverted=sorted(done))])]
        if run is not None:
            self._close(run, record_errors, steps)
        else:
            for step in steps:
                step()
        return replace(result, record_errors=tuple(dict.fromkeys(record_errors)), interrupted=signals.pending())

    def _forget(self, done: set[str]) -> None:
        """Drop the originals, open drift items and ownership records of the reverted targets, and mark them
        reverted in the last-applied record (closed, ``status: reverted``, once nothing is left to revert)."""
        if not done:
            return
        st = self.state
        with st.edit(Originals) as originals:
            kinds = {t: originals.items[t].kind for t in done if t in originals.items}
            for t in kinds:
                del originals.items[t]
            left = bool(originals.items)
        now = rfc3339()
        marks = {t: Reverted(k, now, k in BY_KIND and t in BY_KIND[k].covers_kind) for t, k in kinds.items()}
        with st.edit(DriftRecord) as drift:
            drift.items = {key: v for key, v in drift.items.items()
                           if left and not any(m.covers(v.resource, v.target, t) for t, m in marks.items())}
            if not left:  # nothing is managed any more: nothing is left that cannot be done either
                drift.cannot_be_done = {}
        with st.edit(Ownership) as ownership:
            for target, kind in kinds.items():
                if kind in BY_KIND:
                    BY_KIND[kind].forget(target, ownership)
        last = st.last_applied()
        if not last or not marks:
            return
        last.reverted.update(marks)
        last.managed = [m for m in last.managed if not any(r.covers(*m.split(":", 1), t) for t, r in marks.items())]
        if not left:  # nothing nodeagent changed is left: the node no longer follows a profile
            last.applied_time, last.time, last.status = last.time, now, "reverted"
            last.desired = last.resolved = None
            last.outcomes, last.verify_errors, last.problems = [], [], []
        st.write_record(last)


def gate(change: Change, allow_disruptive: bool) -> str | None:
    """Why the executor holds ``change`` back (``blocked``), or None when it carries it out."""
    if change.disruptive and not allow_disruptive:
        return "disruptive: not done without --allow-disruptive"
    return None


def expected(plan: Plan, allow_disruptive: bool) -> tuple[Outcome, ...]:
    """What executing ``plan`` would do with each change, as far as it is known without writing: nothing for a
    blocked plan, else each change ``applied`` or held back (``blocked``) by :func:`gate`."""
    if plan.blocked:
        return ()
    out = []
    for c in plan.changes:
        held = gate(c, allow_disruptive)
        out.append(Outcome(c, "blocked", held) if held is not None else Outcome(c, "applied", "would be made"))
    return tuple(out)


def originals_of(plan: Plan, facts: Facts, last: LastApplied) -> dict[str, Original]:
    """What revert needs to put each managed target back: for each change its kind's ``original``, and for each
    target already as the profile wants its kind's ``current`` value — at the first apply that manages it, so
    revert restores what the node had before nodeagent, not what it had when it drifted later. A target the last
    apply managed already records nothing (a drift repair never creates an original)."""
    managed = set(last.managed)
    out: dict[str, Original] = {}

    def keep(rec: tuple[str, Original | dict] | None, kind: str) -> None:
        if rec is None or rec[0] in out:
            return
        target, o = rec
        out[target] = o if isinstance(o, Original) else Original(str(o.get("kind", kind)), o.get("path"),
                                                                  o.get("value"))

    for c in plan.changes:
        if f"{c.kind}:{c.target}" not in managed:
            keep(BY_KIND[c.kind].original(c, facts), c.kind)
    for target, kind in plan.kinds:
        if kind in BY_KIND and target in plan.unchanged and f"{kind}:{target}" not in managed:
            keep(BY_KIND[kind].current(target, facts), kind)
    return out


def _event(name: str, result: Result, **extra: object) -> dict[str, object]:
    """The journal event of an apply or a revert: status, every change with its outcome, problems, verify
    errors."""
    status = "refused" if result.plan.blocked and not result.outcomes else result.status
    return {"event": name, **extra, "status": status,
            "changes": [{**o.to_dict(), "before": o.change.before_label or o.change.before,
                         "after": o.change.after_label or o.change.after} for o in result.outcomes],
            "problems": [p.message for p in result.plan.problems], "verify_errors": list(result.verify_errors)}
