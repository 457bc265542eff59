"""The DAMON plan: which kdamonds to build, update, start or stop, and what stands in the way. Pure.

Kernel rules the plan follows (``../shared/reference/realkernel/NOTES.md`` shows each on a real 6.12):

- Writing ``nr_kdamonds`` wipes every kdamond's configuration and fails with EBUSY while any kdamond runs.
  So an update *in place* is possible only inside an existing kdamond (stage values, ``commit``); adding a
  kdamond when no slot is free is a count change: disruptive when all kdamonds are nodeagent's (stop, rewrite,
  rebuild, restart) and impossible beside a kdamond nodeagent does not own (``coexist: take-over`` makes
  replacing it an explicit, disruptive choice).
- Rewriting any ``nr_*`` file resets its children to defaults, even with the same number: a count is written
  only when it changes, and then everything below it is written again.
- Removing a kdamond stops it and empties its slot (``nr_contexts`` 0, recorded as nodeagent's empty slot,
  reused before any count change); the count drops to 0 only when every slot is nodeagent's and the profile
  keeps no kdamond.
- While a DAMON module (damon_reclaim, damon_lru_sort, damon_stat) runs, ``state=on`` fails with EBUSY:
  starting is predicted to fail and left out; commits of running kdamonds still work.

Ownership: nodeagent records each kdamond it created (index, pid, the configuration it wrote). A running
kdamond is nodeagent's only if its pid is the recorded one; a stopped one only if its files still hold what
nodeagent wrote. Everything else that holds a configuration is foreign and is never stopped, rewritten or
renumbered (except by an explicit ``take-over``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...facts.damon import DamonFacts, Kdamond
from ...facts.damon import other_users as users_of
from ...plan import Change, Problem
from ...state import Ownership
from ...util.dataclass import dataclass
from ..base import ResourcePlan
from . import dest_free
from .model import diff_writes, untuned
from .spec import Spec

KIND = "damon"
ALL = "damon.kdamonds"

@dataclass(frozen=True)
class Owned:
    index: int
    name: str | None  # None: a slot nodeagent emptied (it may reuse it, or drop it with the count)
    pid: int | None
    kdamond: Kdamond
    #: The files nodeagent last wrote there (its record): what the kernel's tuning started from.
    written: dict[str, str] | None = None


def owned_kdamonds(damon: DamonFacts, ownership: Ownership | dict[str, Any] | None
                   ) -> tuple[dict[int, Owned], list[str]]:
    """Which kdamonds are nodeagent's, checked against the node (never trusted from the record alone)."""
    owned: dict[int, Owned] = {}
    notes: list[str] = []
    for index, rec in Ownership.coerce(ownership).kdamonds.items():
        kd = damon.kdamond(index)
        if kd is None:
            continue  # the slot is gone (reboot, or someone rewrote nr_kdamonds): nothing to own
        seen = untuned(rec.config, kd.config)  # intervals the kernel tuned are still the ones written
        same_config = all(seen.get(k) == v for k, v in rec.config.items())
        # A kdamond nodeagent was building when its run stopped holds part of its configuration, and is nodeagent's
        # to finish as long as nobody started it since.
        building = rec.building and not kd.running
        if kd.running and rec.pid not in (None, kd.pid):
            notes.append(f"{kd.describe()} was created by nodeagent as {rec.name} (pid {rec.pid}) "
                         "but now runs as another process: treated as not managed by nodeagent")
        elif not same_config and not building and not (kd.running and rec.pid == kd.pid):
            notes.append(f"{kd.describe()} no longer holds the configuration nodeagent wrote for "
                         f"{rec.name}: treated as not managed by nodeagent")
        else:
            owned[kd.index] = Owned(kd.index, rec.name, kd.pid if kd.running else None, kd, dict(rec.config))
    return owned, notes


def _changed(writes: list[tuple[str, str]], observed: dict[str, str], limit: int = 6) -> str:
    shown = [f"{p} {observed.get(p, '(absent)')} → {v}" for p, v in writes[:limit]]
    more = f" (+{len(writes) - limit} more)" if len(writes) > limit else ""
    return "; ".join(shown) + more


def _kd_data(spec: Spec, index: int, writes: list[tuple[str, str]], command: str | None,
             expect_pid: int | None, stop_pid: int | None = None) -> tuple[tuple[str, Any], ...]:
    return (("index", index), ("name", spec.name), ("writes", [list(w) for w in writes]), ("command", command),
            ("expect_pid", expect_pid), ("stop_pid", stop_pid), ("config", spec.config),
            ("dest_nodes", list(spec.dest_nodes)), ("prime", [list(w) for w in spec.prime]))


def _in_place(spec: Spec, index: int, kd: Kdamond, mine: bool, replaces: Owned | None,
              can_commit: bool = True, written: dict[str, str] | None = None) -> Change | None:
    """Build, update or start ``spec`` inside existing slot ``index`` (no count change). ``written``: the files
    nodeagent last wrote to its own kdamond there, from which the kernel may have tuned the intervals."""
    spec = dest_free.resolve(spec, kd.config)  # a guarded scheme between its thresholds stays as it is
    # the running kdamond's intervals as the kernel tuned them (intervals goal) are the committed ones, not drift
    observed = untuned(spec.config, kd.config, written) if mine and kd.running else kd.config
    change = _in_slot(spec, index, kd, observed, mine, replaces, can_commit)
    return _follows(change, spec, observed) if mine and kd.running else change


def _in_slot(spec: Spec, index: int, kd: Kdamond, observed: dict[str, str], mine: bool, replaces: Owned | None,
             can_commit: bool) -> Change | None:
    writes = diff_writes(spec.writes, observed)
    target = f"damon.{spec.name}"
    base = f"kdamond {index}"
    how = "\n      ".join([spec.how, *dest_free.reasons(spec, writes, observed)])
    if mine and kd.running and not can_commit:  # 5.18: no `commit` yet, so an update is stop, stage, on
        if not writes:
            return None
        return Change(KIND, target, "update", f"running (pid {kd.pid})", spec.summary,
                      reason=f"{how}\n      this kernel has no online commit (5.19): stop {base}, stage "
                      f"{len(writes)} file(s), state=on (a new pid): {_changed(writes, observed)}",
                      path=_path(index), before_label=f"{base} running, pid {kd.pid}",
                      after_label=f"{base} restarted", data=_kd_data(spec, index, writes, "on", None, kd.pid))
    if mine and kd.running:
        if not writes:
            return None
        return Change(KIND, target, "update", f"running (pid {kd.pid})", spec.summary,
                      reason=f"{how}\n      stage {len(writes)} file(s) in {base}, then commit (pid {kd.pid} "
                      f"must survive): {_changed(writes, observed)}", path=_path(index),
                      before_label=f"{base} running, pid {kd.pid}", after_label=f"{base} committed, same pid",
                      data=_kd_data(spec, index, writes, "commit", kd.pid))
    if mine:
        op, before = "start", f"{base} stopped"
    elif replaces is not None:
        op, before = "create", f"{base}: {replaces.name} (no longer in the profile)"
    else:
        op, before = "create", f"free slot {base}"
    stop = replaces.pid if replaces is not None and kd.running else None
    steps = (f"stop {replaces.name} (pid {stop}), " if stop else "") + f"write {len(writes)} file(s) in {base}, " \
        "then state=on"
    return Change(KIND, target, op, before, spec.summary, reason=f"{how}\n      {steps}", path=_path(index),
                  before_label=before, after_label=f"{base} running: {spec.summary}",
                  data=_kd_data(spec, index, writes, "on", None, stop))


def _follows(change: Change | None, spec: Spec, observed: dict[str, str]) -> Change | None:
    """A change that only pauses or resumes dest_free schemes says what it follows (the engine's verify names
    it when that moved while the apply ran, rather than blaming the kernel)."""
    writes = diff_writes(spec.writes, observed)
    paths = {g.path for g in spec.guards}
    if change is None or not writes or any(p not in paths for p, _ in writes):
        return change
    nodes = sorted({g.node for g in spec.guards if g.path in dict(writes)})
    why = "; ".join(dest_free.reasons(spec, writes, observed))
    return replace(change, data=change.data + (("follows", "the free memory of " + ", ".join(
        f"node{n}" for n in nodes) + (f" ({why})" if why else "")),))


def _path(index: int) -> str:
    return f"/sys/kernel/mm/damon/admin/kdamonds/{index}"


def _blocked_by_modules(damon: DamonFacts, what: str) -> Problem:
    mods = ", ".join(damon.enabled_modules)
    return Problem(KIND, what, f"damon: cannot start {what}: {mods} "
                   f"{'is' if len(damon.enabled_modules) == 1 else 'are'} enabled, and DAMON refuses to start "
                   "sysfs kdamonds while a special-purpose module runs its own context (state=on → EBUSY)",
                   hint="disable the module (echo N > /sys/module/<module>/parameters/enabled) or drop the "
                   "kdamond from the profile", blocking=False)


def plan_kdamonds(specs: list[Spec], damon: DamonFacts, ownership: Ownership | dict[str, Any], coexist: str,
                  allow_disruptive: bool) -> ResourcePlan:
    rp = ResourcePlan()
    owned, notes = owned_kdamonds(damon, ownership)
    rp.warnings += notes
    foreign = [k for k in damon.kdamonds if k.index not in owned and not k.empty]
    free = [k.index for k in damon.kdamonds if (k.index not in owned and k.empty)
            or (k.index in owned and owned[k.index].name is None and not k.running)]
    by_name = {o.name: o for o in owned.values() if o.name is not None}
    names = {s.name for s in specs}
    removals = [o for o in owned.values() if o.name is not None and o.name not in names]
    slots = sorted(free + [o.index for o in removals])
    placed: list[tuple[Spec, int | None]] = []
    for s in specs:
        if s.name in by_name:
            placed.append((s, by_name[s.name].index))
        else:
            placed.append((s, slots.pop(0) if slots else None))
    starts_blocked = bool(damon.enabled_modules)

    steps: list[Change] = []
    reused = {index for _, index in placed if index is not None}
    for o in sorted(removals, key=lambda o: o.index):
        if o.index in reused:
            continue  # the kdamond that takes its slot replaces it
        steps.append(Change(KIND, f"damon.{o.name}", "delete", o.kdamond.describe(), None,
                            reason=f"not in the profile: {'stop it, ' if o.kdamond.running else ''}empty slot "
                            f"{o.index} (nr_contexts 0)", path=_path(o.index),
                            before_label=o.kdamond.describe(), after_label=f"stopped, slot {o.index} empty",
                            data=(("index", o.index), ("pid", o.pid), ("running", o.kdamond.running))))
    for s, index in placed:
        if index is None:
            continue
        kd = damon.kdamond(index)
        owner = owned.get(index)
        if kd is None:
            continue
        mine = owner is not None and owner.name == s.name
        ch = _in_place(s, index, kd, mine, owner if owner is not None and owner.name and not mine else None,
                       damon.has("commit"), owner.written if mine and owner is not None else None)
        if ch is None:
            rp.unchanged.append(f"damon.{s.name}")
        elif ch.detail("command") == "on" and starts_blocked:
            rp.problems.append(_blocked_by_modules(damon, f"damon.{s.name}"))
        else:
            steps.append(ch)

    homeless = [s for s, index in placed if index is None]
    rebuild: Change | None = None
    if homeless:
        rebuild, problem = _growth(specs, homeless, damon, owned, foreign, coexist)
        if problem is not None:
            rp.problems.append(problem)
        elif rebuild is not None and starts_blocked:
            rp.problems.append(_blocked_by_modules(damon, ALL))
            rebuild = None
    if rebuild is not None and (not rebuild.disruptive or allow_disruptive):
        rp.changes.append(rebuild)  # it rebuilds everything: the in-place steps would be undone
        rp.unchanged = [u for u in rp.unchanged if not u.startswith("damon.")]
        return rp
    rp.changes += sorted(steps, key=lambda c: c.op != "delete")
    if rebuild is not None:
        rp.changes.append(rebuild)
    if not specs and damon.nr_kdamonds > 0 and all(k.index in owned for k in damon.kdamonds):
        rp.changes.append(Change(KIND, ALL, "reconfigure", damon.nr_kdamonds, 0,
                                 reason="no kdamond left in the profile: nr_kdamonds 0 (after stopping nodeagent's)",
                                 path="/sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds",
                                 before_label=f"{damon.nr_kdamonds} slot(s)", after_label="0",
                                 data=(("stop", []), ("count", 0), ("kdamonds", []))))
    return rp


def _growth(specs: list[Spec], homeless: list[Spec], damon: DamonFacts, owned: dict[int, Owned],
            foreign: list[Kdamond], coexist: str) -> tuple[Change | None, Problem | None]:
    """No free slot for ``homeless``: the count must change, which rebuilds every kdamond."""
    names = ", ".join(s.name for s in homeless)
    if foreign and coexist != "take-over":
        why = "; ".join(f"{k.describe()} is {'running' if k.running else 'configured'} and not managed by "
                        "nodeagent" for k in foreign)
        return None, Problem(KIND, ALL, f"damon: cannot add {names}: no free kdamond slot, and adding one "
                             f"rewrites nr_kdamonds, which wipes every kdamond's configuration and fails (EBUSY) "
                             f"while any runs — {why}",
                             hint="stop that kdamond's owner, or set damon.coexist: take-over to replace it "
                             "(disruptive: needs --allow-disruptive)", blocking=False)
    running = [k for k in damon.kdamonds if k.running]
    stops = [[k.index, k.pid] for k in running]
    steps = [f"stop {k.describe()}" + (" — NOT nodeagent's: taken over" if k.index not in owned else "")
             for k in running]
    steps += [f"discard the configuration of {k.describe()} — NOT nodeagent's: taken over"
              for k in foreign if not k.running]
    steps.append(f"nr_kdamonds {damon.nr_kdamonds} → {len(specs)}"
                 + (" (wipes every kdamond's configuration)" if damon.nr_kdamonds else ""))
    kds = []
    for i, s in enumerate(specs):
        steps.append(f"build {s.name} as kdamond {i}: {s.summary} [{s.how}], state=on")
        kds.append({"index": i, "name": s.name, "writes": [list(w) for w in s.writes], "config": s.config,
                    "dest_nodes": list(s.dest_nodes), "prime": [list(w) for w in s.prime]})
    disruptive = bool(running) or bool(foreign)  # stopping anything, or wiping a configuration not ours
    before = ", ".join(o.name for o in owned.values() if o.name) or "none of nodeagent's"
    return Change(KIND, ALL, "reconfigure", damon.nr_kdamonds, len(specs),
                  reason="\n      ".join([f"{names} need{'s' if len(homeless) == 1 else ''} a new kdamond slot:",
                                          *steps]),
                  disruptive=disruptive, path="/sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds",
                  before_label=f"{damon.nr_kdamonds} kdamond(s) ({before})",
                  after_label=f"{len(specs)} kdamond(s): {', '.join(s.name for s in specs)}",
                  data=(("stop", stops), ("count", len(specs)), ("kdamonds", kds))), None


def other_users(specs: list[Spec], damon: DamonFacts, ownership: Ownership | dict[str, Any] | None,
                rp: ResourcePlan) -> list[str]:
    """One warning per DAMON user nodeagent does not own (:func:`nodeagent.facts.damon.other_users`), saying what
    it means for this plan ``rp`` of ``specs``: whether a new kdamond slot would stop it (taken over, or refused
    without ``coexist: take-over``), which nodes it shares with the profile's kdamonds, and for a module that
    its exclusive kdamond keeps the profile's from starting."""
    owned, _ = owned_kdamonds(damon, ownership)
    grows = any(c.target == ALL and c.op == "reconfigure" and c.after for c in rp.changes)
    refused = any(p.target == ALL and p.message.startswith("damon: cannot add") for p in rp.problems)
    blocked = [p.target for p in rp.problems if p.message.startswith("damon: cannot start")]
    mine = {s.name: (set(s.sources) | set(s.dest_nodes), [v for k, v in s.writes if k.endswith("/action")])
            for s in specs}
    out = []
    for u in users_of(damon, owned):
        if u.kind == "module":
            then = (f"{', '.join(blocked)} cannot start while it runs" if blocked else
                    "this plan starts no kdamond" if specs else "the profile has no kdamond")
            out.append(f"damon: {u.describe()} is not nodeagent's: {u.effect} — {then}")
            continue
        if grows:
            then = ("damon.coexist: take-over: this plan stops it and discards its configuration to make room "
                    "(disruptive)")
        elif refused:
            then = ("the profile needs a new kdamond slot, which would stop it: the kernel refuses nr_kdamonds while "
                    "any kdamond runs (EBUSY), and rewriting it wipes every kdamond's configuration; refused "
                    "without damon.coexist: take-over")
        elif specs:
            then = ("the profile's kdamonds have slots of their own (no nr_kdamonds rewrite): "
                    + ("it keeps running beside them, untouched" if u.running else "it is left untouched"))
        else:
            then = "the profile builds no kdamond on this node: it is left untouched"
        shared = {n for nodes, _ in mine.values() for n in nodes} & set(u.nodes) if u.running else set()
        beside = [f"damon.{name} ({', '.join(acts) or 'monitoring'})" for name, (nodes, acts) in mine.items()
                  if nodes & shared]
        if beside and not grows and not refused:
            then += (f"; it monitors {', '.join(f'node{n}' for n in sorted(shared))}, where {', '.join(beside)} "
                     f"work{'s' if len(beside) == 1 else ''} too: each kdamond spends CPU sampling that memory, and "
                     "their schemes act on it independently")
        out.append(f"damon: {u.describe()} is not nodeagent's — {then}")
    return out


def revert_kdamonds(damon: DamonFacts, ownership: Ownership | dict[str, Any], nr_kdamonds: int) -> list[Change]:
    """Pure: stop and remove every kdamond nodeagent owns (never another's) and, when every slot is
    nodeagent's, set ``nr_kdamonds`` back to ``nr_kdamonds`` (what it was before nodeagent's first DAMON change).
    Empty when nothing of nodeagent's is left."""
    rp = plan_kdamonds([], damon, ownership, "refuse", allow_disruptive=False)
    changes = [replace(c, reason=f"nodeagent created it: {'stop it, ' if c.detail('running') else ''}empty slot "
                       f"{c.detail('index')} (nr_contexts 0)") for c in rp.changes if c.target != ALL]
    owned, _ = owned_kdamonds(damon, ownership)
    if damon.nr_kdamonds != nr_kdamonds and damon.kdamonds and all(k.index in owned for k in damon.kdamonds):
        changes.append(Change(KIND, ALL, "revert", damon.nr_kdamonds, nr_kdamonds,
                              reason="every slot is nodeagent's: nr_kdamonds back to what it was before nodeagent",
                              path="/sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds",
                              before_label=f"{damon.nr_kdamonds} slot(s)", after_label=f"{nr_kdamonds} slot(s)",
                              data=(("stop", []), ("count", nr_kdamonds), ("kdamonds", []))))
    return changes
