"""Revert: put back what the node had before nodeagent changed it, then forget that nodeagent managed it.

``originals.json`` holds, per target, what it was before nodeagent first changed it (``{target: {kind, path,
value, recorded}}``; each resource kind says what to record, see ``Resource.original``): a knob's value, a DAX
device's mode and zone, the number of kdamond slots before nodeagent's first DAMON change. ``plan_revert``
turns it into an ordinary :class:`~nodeagent.plan.Plan` — the changes that put each target back, planned by
the revert planner of its kind, last-applied kind first (kdamonds stop before the memory they migrate to goes
offline; ``auto_online_blocks`` goes back last) — so ``revert --dry-run`` prints exactly what ``revert`` does,
and disruptive changes (taking memory offline) are flagged and refused without ``--allow-disruptive`` like in
apply. ``execute_revert`` applies it through the resource kind's own ``apply``, re-reads the node, then for
every target that is back (or already was) drops its original, its open drift items and its ownership records,
and journals a ``revert`` event. When everything was reverted the last-applied record is closed (``status:
reverted``): the node no longer drifts from a profile.

- ``knob``: the value before;
- ``dax``: the device's mode and zone before (devdax, or system-ram fully online in one zone); offlining its
  memory is disruptive;
- ``damon``: every kdamond nodeagent owns is stopped and emptied (a kdamond that is not nodeagent's is never
  touched), and when every slot is nodeagent's, ``nr_kdamonds`` goes back to its old count.

A kind that cannot be reverted shows as a non-blocking problem. Kinds register a :class:`RevertKind` in
:data:`KINDS`: ``plan(host, facts, target, record) -> changes`` (none: already at the original),
optionally their own ``apply`` and ``forget`` (drop the ownership records of a reverted target).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .errors import HostError
from .facts import Facts
from .facts.knobs import BY_KEY
from .host import Host
from .journal import Journal
from .plan import Change, Outcome, Plan, Problem, Result
from .resources.base import ApplyContext
from .resources.registry import BY_KIND

if TYPE_CHECKING:
    from .engine import Engine


def _prune(ownership: dict[str, Any], target: str) -> None:
    for records in ownership.values():
        if isinstance(records, dict):
            records.pop(target, None)


@dataclass(frozen=True)
class RevertKind:
    plan: Callable[[Host, Facts, str, dict[str, Any]], Change | list[Change] | None]
    apply: Callable[[Host, Change, ApplyContext], str] | None = None  # default: the resource kind's apply
    forget: Callable[[dict[str, Any], str], None] = _prune  # drop ownership records of a reverted target


def _plan_knob(host: Host, facts: Facts, target: str, rec: dict[str, Any]) -> Change | None:
    knob = BY_KEY.get(target)
    if knob is None:
        raise ValueError(f"{target}: not a knob this version of nodeagent knows")
    raw = facts.knobs.get(target)
    if raw is None:
        raise ValueError(f"{target}: {knob.path} does not exist on this kernel any more")
    current, original = knob.parse(raw), rec.get("value")
    if current == original:
        return None
    return Change("knob", target, "revert", current, original, reason=f"the value before nodeagent changed it "
                  f"(recorded {rec.get('recorded', '?')})", path=knob.path, before_label=knob.label(current),
                  after_label=knob.label(original), disruptive=knob.disruptive)


def _plan_dax(host: Host, facts: Facts, target: str, rec: dict[str, Any]) -> Change | None:
    from .facts.dax import from_facts
    from .resources.dax import revert_change

    dev = from_facts(facts).device(target)
    if dev is None:
        raise ValueError(f"{target}: the DAX device no longer exists (hot-unplugged, or its region was torn down)")
    return revert_change(dev, rec)


def _plan_damon(host: Host, facts: Facts, target: str, rec: dict[str, Any]) -> list[Change]:
    from .facts.damon import from_facts
    from .resources.damon import revert_kdamonds
    from .state import StateStore

    ownership = StateStore(host).load("ownership.json")
    return revert_kdamonds(from_facts(facts), ownership, int((rec.get("value") or {}).get("nr_kdamonds", 0)))


def _forget_damon(ownership: dict[str, Any], target: str) -> None:
    ownership.pop("damon", None)


KINDS: dict[str, RevertKind] = {"knob": RevertKind(_plan_knob), "dax": RevertKind(_plan_dax),
                                "damon": RevertKind(_plan_damon, forget=_forget_damon)}
#: Revert runs the kinds in the reverse of their apply order.
_ORDER = {kind: -i for i, kind in enumerate(BY_KIND)}
_OF = "revert_of"  # the originals target a revert change belongs to (in its data)


def plan_revert(engine: Engine, targets: Collection[str] | None = None, facts: Facts | None = None) -> Plan:
    """Pure apart from reading the node: what revert would change."""
    originals = engine.state.load("originals.json")
    facts = facts or engine.facts()
    changes: list[Change] = []
    problems: list[Problem] = []
    unchanged: list[str] = []
    wanted = set(targets) if targets is not None else None
    if wanted is not None:
        for t in sorted(wanted - set(originals)):
            problems.append(Problem("revert", t, f"{t}: nodeagent has no original value recorded for it",
                                    hint="see `nodeagent status` for what nodeagent changed", blocking=True))
    for target, rec in originals.items():
        if wanted is not None and target not in wanted:
            continue
        kind = str(rec.get("kind", "knob"))
        planner = KINDS.get(kind)
        if planner is None:
            problems.append(Problem(kind, target, f"{target}: reverting {kind} is not supported by this version",
                                    hint="undo it by hand", blocking=False))
            continue
        try:
            planned = planner.plan(engine.host, facts, target, rec)
        except ValueError as exc:
            problems.append(Problem(kind, target, str(exc), blocking=False))
            continue
        mine = [planned] if isinstance(planned, Change) else list(planned or [])
        if not mine:
            unchanged.append(target)
        changes += [replace(c, data=(*c.data, (_OF, target))) for c in mine]
    if wanted is None:
        lost_changes, lost_problems = _lost(engine, facts, originals)
        changes += lost_changes
        problems += lost_problems
    changes.sort(key=lambda c: _ORDER.get(c.kind, 1))
    node = (facts.hostname or "node") + (f" (simulated {facts.simulated})" if facts.simulated else "")
    return Plan("revert", "", tuple(changes), tuple(problems), (), tuple(unchanged), node=node)


def _lost(engine: Engine, facts: Facts, originals: dict[str, Any]) -> tuple[list[Change], list[Problem]]:
    """When ``originals.json`` was set aside (corrupt, or of the wrong shape), the settings nodeagent changed (its
    last apply says so) whose original went with it are named, and left as they are. Without the kdamonds'
    original, nodeagent's own kdamonds, which ownership records, are still stopped (the number of slots before
    nodeagent is then unknown: kept)."""
    from .facts.damon import from_facts
    from .resources.damon.plan import ALL

    why = engine.state.set_aside.get("originals.json")
    lost = f" (lost with {why})" if why else ""
    applied = {o.get("target"): o.get("kind") for o in engine.state.last_applied().get("outcomes") or []
               if isinstance(o, dict) and o.get("status") == "applied"}
    problems = [Problem(str(kind or "knob"), str(t), f"{t}: the value it had before nodeagent changed it is not "
                        f"recorded{lost}: revert leaves it as it is", hint="set it back by hand", blocking=False)
                for t, kind in applied.items() if why and t and t not in originals and kind != "damon"]
    changes: list[Change] = []
    owned = ((engine.state.load("ownership.json").get("damon") or {}).get("kdamonds") or {})
    if ALL not in originals and owned:
        damon = from_facts(facts)
        changes = [replace(c, data=(*c.data, (_OF, ALL)))
                   for c in _plan_damon(engine.host, facts, ALL, {"value": {"nr_kdamonds": damon.nr_kdamonds}})]
        if changes:
            problems.append(Problem("damon", ALL, f"{ALL}: how many kdamond slots there were before nodeagent is "
                                    f"not recorded{lost}: nodeagent's own kdamonds are stopped, the slots kept",
                                    blocking=False))
    return changes, problems


def _of(change: Change) -> str:
    return str(change.detail(_OF, change.target))


def execute_revert(engine: Engine, *, targets: Collection[str] | None = None, dry_run: bool = False,
                   allow_disruptive: bool = False, confirm: Callable[[Plan], bool] | None = None) -> Result:
    if dry_run:
        return Result(plan_revert(engine, targets), dry_run=True)
    engine.require_root()
    with engine.state.locked(engine.lock_timeout):
        plan = plan_revert(engine, targets)
        if plan.blocked:
            return Result(plan)
        if plan.changes and confirm is not None and not confirm(plan):
            return Result(plan, dry_run=True)
        actx = ApplyContext(allow_disruptive=allow_disruptive, state=engine.state)
        outcomes: list[Outcome] = []
        for change in plan.changes:
            if change.disruptive and not allow_disruptive:
                outcomes.append(Outcome(change, "blocked", "disruptive: not done without --allow-disruptive"))
                continue
            kind = KINDS[change.kind]
            try:
                msg = (kind.apply or BY_KIND[change.kind].apply)(engine.host, change, actx)
                outcomes.append(Outcome(change, "applied", msg))
            except HostError as exc:
                outcomes.append(Outcome(change, "failed", exc.render()))
        after = plan_revert(engine, sorted({_of(c) for c in plan.changes})) if plan.changes else None
        still = {c.target: c for c in after.changes} if after else {}
        errors = [f"{t}: wrote {c.before_label or c.before} back, but the node now reads {c.after_label or c.after}"
                  for t, c in still.items() if any(o.change.target == t and o.status == "applied" for o in outcomes)]
        left = {_of(c) for c in still.values()} | {_of(o.change) for o in outcomes if o.status != "applied"}
        done = set(plan.unchanged) | {_of(o.change) for o in outcomes if _of(o.change) not in left}
        result = Result(plan, tuple(outcomes), tuple(errors))
        _forget(engine, done, complete=targets is None and result.ok)
        Journal(engine.host).append([{"event": "revert", "status": result.status,
                                      "changes": [o.to_dict() for o in outcomes], "reverted": sorted(done),
                                      "problems": [p.message for p in plan.problems]}])
        return result


def _forget(engine: Engine, done: set[str], *, complete: bool) -> None:
    """Drop the originals, open drift items and ownership records of the reverted targets."""
    st = engine.state
    originals = st.load("originals.json")
    kinds = {t: str(originals.get(t, {}).get("kind", "knob")) for t in done}
    if done & set(originals):
        st.save("originals.json", {k: v for k, v in originals.items() if k not in done})
    drift = st.load("drift.json")
    items = drift.get("items", {})
    gone_kinds = {"damon"} & set(kinds.values())  # its one target stands for all of nodeagent's kdamonds
    kept = {k: v for k, v in items.items() if v.get("target") not in done and v.get("resource") not in gone_kinds}
    if kept != items:
        st.save("drift.json", {**drift, "items": kept})
    ownership = st.load("ownership.json")
    pruned = json.loads(json.dumps(ownership))
    for target, kind in kinds.items():
        KINDS.get(kind, RevertKind(_plan_knob)).forget(pruned, target)
    pruned = {k: v for k, v in pruned.items() if v or k not in ownership or ownership[k] == v}
    if pruned != ownership:
        st.save("ownership.json", pruned)
    if complete:
        last = st.last_applied()
        if last:
            st.record_apply({"profile": last.get("profile"), "profile_digest": last.get("profile_digest"),
                             "status": "reverted", "reverted_profile_time": last.get("time"), "desired": None,
                             "outcomes": [], "verify_errors": [], "problems": []})
