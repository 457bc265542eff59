"""The DAMON kind: its plan (from the profile to the kdamonds wanted here), apply, revert and ownership."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ...facts import Facts
from ...facts.damon import KDAMONDS, DamonFacts, Kdamond, from_facts
from ...host import Host
from ...host.fs import DAMON_WRITES
from ...plan import Change, Problem
from ...state import Original, Ownership, PlanState
from ...util.kfmt import kernel_version
from ..base import ApplyContext, Kind, PlanContext, ResourcePlan, projection_of
from ..projection import NodeProjection, project
from .apply import apply_change
from .nodes import NodeClasses, classes, pair
from .plan import ALL, KIND, other_users, owned_kdamonds, plan_kdamonds, revert_kdamonds
from .spec import Checker, Spec, kdamond_spec

if TYPE_CHECKING:
    from ...profile import LoadedProfile

__all__ = ["DamonResource", "KIND", "build_specs", "revert_kdamonds"]


def _resolve(ref: int | str, nc: NodeClasses, facts: Facts, chk: Checker, path: tuple) -> tuple[int, ...] | None:
    """Nodes a selector means; ``None`` (after recording a problem) for a node id that cannot be used."""
    if isinstance(ref, int):
        if facts.node(ref) is None and ref not in nc.pending:
            chk.fail(path, f"node {ref} is not online here" + (" (and no DAX device brings it online)"
                                                              if ref not in facts.possible_nodes else ""),
                     "use fast/slow or an online node id")
            return None
        return (ref,)
    return nc.resolve(ref)


def build_specs(loaded: LoadedProfile, facts: Facts,
                proj: NodeProjection | None = None) -> tuple[list[Spec], Checker, list[str]]:
    """The kdamonds the profile asks for on this node, with the problems and warnings found on the way."""
    model = loaded.profile.damon
    damon = from_facts(facts)
    nc = classes(proj if proj is not None else project(loaded, facts))
    chk = Checker(damon, loaded.where, facts.kernel_release)
    notes = list(nc.notes) if model and model.kdamonds else []  # what the classes left out matters to kdamonds
    specs: list[Spec] = []
    mem = {n.id: (n.mem_free, n.mem_total) for n in facts.nodes}
    release = kernel_version(facts.kernel_release or "")
    for i, kd in enumerate(model.kdamonds if model else []):
        kernels = getattr(kd, "kernels", None)  # a record from before `kernels` reads as without it
        if kernels is not None and not _admits(kernels, release):
            continue  # written for other kernels: not part of the profile here
        base = ("damon", "kdamonds", i)
        sources: list[int] = []
        for t, target in enumerate(kd.targets):
            got = _resolve(target.node, nc, facts, chk, base + ("targets", t, "node"))
            sources += [n for n in got or () if n not in sources]
        if not sources:
            notes.append(f"{kd.name}: targets {', '.join(str(t.node) for t in kd.targets)} resolve to no node "
                         "here: kdamond not created")
            continue
        if (kd.targets and any(isinstance(t.node, str) for t in kd.targets)) and not facts.tiers:
            chk.fail(base + ("targets",), "fast/slow need memory tiers, which this kernel does not show",
                     "use node ids")
        scheme_dests: list[tuple[int, ...] | None] = []
        empty: list[str] = []
        for j, s in enumerate(kd.schemes):
            refs = [s.target_node] if s.target_node is not None else [d.node for d in s.dests or []]
            if not refs:
                scheme_dests.append(None)
                continue
            dests: list[int] = []
            for ref in refs:
                dests += [n for n in _resolve(ref, nc, facts, chk, base + ("schemes", j, "target_node")) or ()
                          if n not in dests]
            if not dests:
                empty += [str(r) for r in refs]
            scheme_dests.append(tuple(dests))
        if empty:
            notes.append(f"{kd.name}: destination {', '.join(dict.fromkeys(empty))} resolves to no node here "
                         "(no such memory tier): kdamond not created")
            continue
        if kd.pairing == "nearest" and any(t.node == "slow" for t in kd.targets):
            chk.warn_at(base + ("pairing",),
                        "nearest makes one kdamond per source node, and these sources are the lower-tier (CXL) "
                        "nodes: a hot-added expander will need a new kdamond slot, and adding one rewrites "
                        "nr_kdamonds, which stops every kdamond (a disruptive change); pairing: gather makes one "
                        "kdamond per destination, which a new expander joins by a commit")
        pairings, skipped = pair(kd.name, kd.pairing, tuple(sources), scheme_dests, nc)
        notes += skipped
        before, kept = len(chk.problems), []
        for p in pairings:
            spec = kdamond_spec(i, kd, p, nc, chk, mem)
            if spec is not None:
                kept.append(spec)
        new = chk.problems[before:]
        if kd.optional and new and all(entry in chk.missing for entry in new):
            del chk.problems[before:]
            notes.append(f"{kd.name}: left out (optional) — this kernel ({facts.kernel_release or 'unknown'}) lacks "
                         + "; ".join(m.split(": ", 2)[-1] for _, m, _ in new))
            continue
        specs += kept
    names = [s.name for s in specs]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        chk.fail(("damon", "kdamonds"), f"two kdamonds would be named {dup} after pairing", "rename one")
    return specs, chk, notes


class DamonResource(Kind):
    kind = KIND
    revertible = True
    reverts_from_ownership = True
    writes: tuple[str, ...] = DAMON_WRITES  # each attribute file spec.py and apply.py write, by name

    def plan(self, loaded: LoadedProfile, facts: Facts, ctx: PlanContext) -> ResourcePlan:
        model = loaded.profile.damon
        proj = projection_of(loaded, facts, ctx)
        if model is None:
            unmanaged = _unmanaged(from_facts(facts), ctx.state.ownership, proj)
            unmanaged.warnings += other_users([], from_facts(facts), ctx.state.ownership, unmanaged)
            return unmanaged
        damon = from_facts(facts)
        if not damon.sysfs:
            rp = ResourcePlan()
            here = _for_kernel(model.kdamonds, facts)
            if here and all(kd.optional for kd in here):
                rp.warnings.append(f"damon: {', '.join(kd.name for kd in here)} left out (optional) — this "
                                   f"kernel ({facts.kernel_release or 'unknown'}) has no DAMON sysfs interface "
                                   "(kernel 5.18 with CONFIG_DAMON_SYSFS)")
            elif here:
                rp.problems.append(Problem(KIND, "damon", f"{loaded.where('damon')}: damon: this kernel "
                                           f"({facts.kernel_release or 'unknown'}) has no DAMON sysfs interface "
                                           "(/sys/kernel/mm/damon/admin: kernel 5.18 with CONFIG_DAMON_SYSFS)",
                                           hint="remove the damon section, or run a kernel with DAMON sysfs"))
            return rp
        specs, chk, notes = build_specs(loaded, facts, proj)
        if chk.problems:
            return ResourcePlan(problems=[Problem(KIND, t, m, hint=h) for t, m, h in chk.problems],
                                warnings=notes + chk.warnings)
        switches, damon = _disable_modules(getattr(model, "disable_modules", ()) or (), damon)
        rp = plan_kdamonds(specs, damon, ctx.state.ownership, model.coexist, ctx.allow_disruptive)
        rp.warnings += other_users(specs, damon, ctx.state.ownership, rp)
        devices = _devices_by_spec(specs, proj)
        rp.changes = [_before_rezone(_with_profile(c, loaded.name, devices), damon, proj) for c in rp.changes]
        rp.changes = switches + _pauses(loaded, facts, damon, ctx, proj, rp.changes) + rp.changes
        rp.warnings = notes + chk.warnings + rp.warnings + _unguarded(specs, facts)
        return rp

    #: The one originals target stands for all of nodeagent's kdamonds (each is in the ownership records).
    covers_kind = frozenset({ALL})

    def original(self, change: Change, facts: Facts) -> tuple[str, Original]:
        """What revert needs: how many kdamond slots there were before nodeagent's first DAMON change (the
        kdamonds themselves are in the ownership records), or that a module nodeagent disables was enabled."""
        module = change.detail("module")
        if module is not None:
            return change.target, Original(KIND, _module_path(module), {"module": module, "enabled": True})
        return ALL, Original(KIND, f"{KDAMONDS}/nr_kdamonds", {"nr_kdamonds": from_facts(facts).nr_kdamonds})

    def current(self, target: str, facts: Facts) -> tuple[str, Original] | None:
        return self.original(Change(KIND, target, "keep", None, None), facts) if from_facts(facts).sysfs else None

    def revert_unrecorded(self, facts: Facts, state: PlanState, why: str) -> tuple[list[Change], list[Problem]]:
        """Without originals: nodeagent's own kdamonds (ownership) are still stopped; the number of slots there
        were before nodeagent is then unknown, so the slots are kept."""
        if ALL in state.originals.items or not state.ownership.kdamonds:
            return [], []
        rec = Original(KIND, None, {"nr_kdamonds": from_facts(facts).nr_kdamonds})
        changes = [replace(c, revert_of=ALL) for c in self.revert(ALL, rec, facts, state)]
        if not changes:
            return [], []
        return changes, [Problem(KIND, ALL, f"{ALL}: how many kdamond slots there were before nodeagent is not "
                                 f"recorded (lost with {why}): nodeagent's own kdamonds are stopped, the slots kept",
                                 blocking=False)]

    def revert(self, target: str, rec: Original, facts: Facts, state: PlanState) -> list[Change]:
        """Stop and empty every kdamond nodeagent owns (never another's); ``nr_kdamonds`` back when every slot
        is nodeagent's."""
        if isinstance(rec.value, dict) and rec.value.get("module"):
            return _enable_module(str(rec.value["module"]), from_facts(facts), target)
        count = rec.value.get("nr_kdamonds", 0) if isinstance(rec.value, dict) else 0
        return revert_kdamonds(from_facts(facts), state.ownership, int(count))

    def forget(self, target: str, ownership: Ownership) -> None:
        ownership.kdamonds.clear()

    def apply(self, host: Host, change: Change, actx: ApplyContext) -> str:
        return apply_change(host, change, actx, str(change.detail("profile", "")))


def _for_kernel(kdamonds: Any, facts: Facts) -> list[Any]:
    """The profile's kdamonds whose ``kernels`` take this node's kernel release."""
    release = kernel_version(facts.kernel_release or "")
    return [kd for kd in kdamonds if getattr(kd, "kernels", None) is None or _admits(kd.kernels, release)]


def _admits(kernels: Any, release: tuple[int, int]) -> bool:
    """Whether a kdamond's ``kernels: {since, before}`` takes this kernel release (``since`` included)."""
    return ((kernels.since is None or release >= kernel_version(kernels.since))
            and (kernels.before is None or release < kernel_version(kernels.before)))


def _module_path(module: str) -> str:
    return f"/sys/module/{module}/parameters/enabled"


def _disable_modules(modules: Collection[str], damon: DamonFacts) -> tuple[list[Change], DamonFacts]:
    """One change per module of ``modules`` that runs here (first, so that nodeagent's kdamonds can start), and the
    DAMON facts as they will be after them, which the kdamonds are planned against."""
    on = [m for m in modules if damon.modules.get(m)]
    if not on:
        return [], damon
    changes = [Change(KIND, f"damon.module.{m}", "update", "enabled", "disabled",
                      reason=f"damon.disable_modules: {m} runs an exclusive kdamond, and no sysfs kdamond starts "
                      "while it runs: enabled N (revert enables it again)", path=_module_path(m),
                      before_label=f"{m} enabled", after_label=f"{m} disabled", data=(("module", m), ("enable", False)))
               for m in on]
    after = replace(damon, modules={**damon.modules, **{m: False for m in on}},
                    module_kdamonds=tuple({**k, "enabled": False, "pid": None} if k.get("module") in on else k
                                          for k in damon.module_kdamonds))
    return changes, after


def _enable_module(module: str, damon: DamonFacts, target: str) -> list[Change]:
    """Revert of a module nodeagent disabled: enabled again, after nodeagent's kdamonds stop (``late``: the kernel
    refuses to enable a module while any kdamond runs)."""
    if damon.modules.get(module) is not False:
        return []  # enabled again already, or gone
    return [Change(KIND, target, "revert", "disabled", "enabled",
                   reason=f"nodeagent disabled {module}: enabled Y again", path=_module_path(module),
                   before_label=f"{module} disabled", after_label=f"{module} enabled",
                   data=(("module", module), ("enable", True), ("late", True)))]


def _unguarded(specs: list[Spec], facts: Facts) -> list[str]:
    """A warning when kdamonds have dest_free schemes and no ``nodeagent guard`` keeps them here."""
    from ...facts.guard_heartbeat import from_facts as guard_facts

    guarded = [s.name for s in specs if s.guards]
    g = guard_facts(facts)
    if not guarded or not g.known or g.running:
        return []
    seen = f"its last heartbeat is {g.age:.0f}s old (pid {g.pid})" if g.age is not None else "none has run here"
    return [f"damon: {', '.join(guarded)} ha{'s' if len(guarded) == 1 else 've'} dest_free schemes, and no "
            f"`nodeagent guard` keeps them ({seen}): they stay as this plan leaves them while their destination's "
            "free memory moves — enable nodeagent-guard.service (`nodeagent units`), run `nodeagent guard "
            "PROFILE`, or `nodeagent run --apply` (the DaemonSet)"]


def acts_on(kd: Kdamond, proj: NodeProjection) -> tuple[set[int], set[int]]:
    """(nodes a kdamond monitors, nodes its schemes migrate to), from what its files hold now: its paddr regions
    against the projected node ranges, and its migrate schemes' ``target_nid``."""
    monitored = {n for lo, hi in kd.tree.regions() for n, rs in proj.ranges.items() for a, b in rs
                 if a < hi and lo < b}
    dests = {s.target_nid for c in kd.tree.contexts for s in c.schemes
             if s.action.startswith("migrate_") and s.target_nid is not None and s.target_nid >= 0}
    return monitored, dests


def _pinned_by(kd: Kdamond, proj: NodeProjection) -> tuple[list[int], bool]:
    """The pinned-pool nodes ``kd`` acts on, and whether it migrates pages (over or into them)."""
    monitored, dests = acts_on(kd, proj)
    migrates = any(a.startswith("migrate_") for a in kd.tree.actions)
    return sorted((monitored | dests) & set(proj.pinned)), migrates


def _before_rezone(change: Change, damon: DamonFacts, proj: NodeProjection) -> Change:
    """A kdamond of nodeagent's stopped because it acts on a node that becomes a pinned pool goes before the DAX
    changes (it would migrate pages into, or out of, memory being offlined and rezoned)."""
    kd = damon.kdamond(int(change.detail("index", -1))) if change.op == "delete" else None
    if kd is None or not _pinned_by(kd, proj)[0]:
        return change
    return replace(change, before_dax=True)


def _pauses(loaded: LoadedProfile, facts: Facts, damon: DamonFacts, ctx: PlanContext, proj: NodeProjection,
            changes: list[Change]) -> list[Change]:
    """A running kdamond of nodeagent's that monitors, or migrates into, the node of a CXL region this plan tears
    down (a rebuild) is stopped before the teardown (``before_dax``: right before the first change that takes
    memory away), in the kernel's order: DAMON off, then the memory offline. The plan made once the region is
    back (the executor's second stage) starts it again, with the ranges the new region has."""
    from ..cxl_region import planned_teardowns

    torn = planned_teardowns(loaded, facts, ctx.allow_disruptive)
    if not torn:
        return []
    owned, _ = owned_kdamonds(damon, ctx.state.ownership)
    busy = {int(c.detail("index", -1)) for c in changes if c.op == "delete"}
    out = []
    for o in sorted(owned.values(), key=lambda o: o.index):
        kd = o.kdamond
        if not kd.running or o.name is None or o.index in busy:
            continue
        monitored, dests = acts_on(kd, proj)
        hit = [c for c in torn if set(c.nodes) & (monitored | dests)]
        if not hit:
            continue
        regions = ", ".join(str(c.detail("region")) for c in hit)
        nodes = sorted({n for c in hit for n in c.nodes} & (monitored | dests))
        why = f"the teardown of {regions} (node{', node'.join(map(str, nodes))})"
        out.append(Change(KIND, f"damon.{o.name}", "pause", f"kdamond {o.index} running, pid {kd.pid}",
                          f"kdamond {o.index} stopped",
                          reason=f"it acts on node{', node'.join(map(str, nodes))}, whose memory {regions} takes "
                          "away: stopped before the teardown, started again once the region is back",
                          path=f"{KDAMONDS}/{o.index}/state", before_label=f"kdamond {o.index} running, pid {kd.pid}",
                          after_label=f"kdamond {o.index} stopped until {regions} is back",
                          data=(("index", o.index), ("pid", kd.pid), ("why", why), ("profile", loaded.name)),
                          nodes=tuple(nodes), before_dax=True))
    return out


def _unmanaged(damon: DamonFacts, ownership: dict[str, Any], proj: NodeProjection) -> ResourcePlan:
    """A profile without ``damon:`` leaves nodeagent's kdamonds alone, but warns about each that acts on a node the
    profile declares a pinned pool (a migrate kdamond there moves pages over or into the pool)."""
    rp = ResourcePlan()
    if not damon.sysfs or not proj.pinned:
        return rp
    owned, _ = owned_kdamonds(damon, ownership)
    for o in sorted(owned.values(), key=lambda o: o.index):
        nodes, migrates = _pinned_by(o.kdamond, proj)
        if not nodes or o.name is None:
            continue
        where = ", ".join(f"node{n}" for n in nodes)
        what = "migrates pages over or into" if migrates else "acts on"
        rp.warnings.append(f"damon.{o.name} ({o.kdamond.describe()}, nodeagent's) {what} {where}, which this profile "
                           "declares a pinned pool (memory.dax use: pinned-pool); without a damon: section nodeagent "
                           "leaves its kdamonds as they are — add `damon: {kdamonds: []}` to stop them (before the "
                           "DAX devices are rezoned)")
    return rp


def _devices_by_spec(specs: list[Spec], proj: NodeProjection) -> dict[str, list[str]]:
    """Per kdamond to build: the DAX devices behind the nodes it monitors or migrates to."""
    return {s.name: sorted({d for n in (*s.sources, *s.dest_nodes) for d in proj.devices_on(n)}) for s in specs}


def _with_profile(change: Change, profile: str, devices: dict[str, list[str]]) -> Change:
    """The change with the profile's name and the DAX devices behind the nodes of the kdamonds it builds: a
    hot-plugged device's scoped apply finds the kdamonds it affects, and leaves out one that needs another
    device the scope does not online (:mod:`nodeagent.engine.scope`)."""
    names = [str(kd["name"]) for kd in change.detail("kdamonds", ())] or [change.target.removeprefix("damon.")]
    devs = sorted({d for n in names for d in devices.get(n, ())})
    return replace(change, data=change.data + (("profile", profile),), devices=tuple(devs), needs=tuple(devs))
