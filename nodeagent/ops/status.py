"""``nodeagent status``: the one screen an operator opens first.

It gathers, as plain data: the last apply (profile, time, result, scope), drift against it now (items by
resource, with when each was first seen when ``drift --record`` saw it before; what cannot be done on this node
is listed apart and never counted as drift), what nodeagent changed and can
revert, the kdamonds nodeagent owns with their scheme statistics, the DAMON users it does not own (other
kdamonds, DAMON modules) with what they mean for a profile, the memory tiers with how full each node is, and the
latest journal events. Its one write: asking nodeagent's own running kdamonds to refresh their
statistics (:mod:`nodeagent.ops.schemestats`); everything else is read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..facts import Facts
from ..state.journal import Journal
from ..util.errors import NodeagentError
from .schemestats import collect

if TYPE_CHECKING:
    from ..engine.core import Engine
    from ..state import Ownership, Unfixable


def node_usage(facts: Facts) -> list[dict[str, Any]]:
    """Per NUMA node: tier, total and used bytes, CPU-less or not."""
    out = []
    for n in facts.nodes:
        used = max(n.mem_total - n.mem_free, 0)
        out.append({"node": n.id, "tier": n.tier, "cpuless": not n.has_cpu, "total_bytes": n.mem_total,
                    "used_bytes": used, "used_ratio": (used / n.mem_total) if n.mem_total else None})
    return out


def _kdamonds(engine: Engine) -> dict[str, Any]:
    """nodeagent's kdamonds (refreshed statistics per scheme) and notes; a failure never hides the screen."""
    try:
        owned = collect(engine.host, engine.state.ownership(), refresh=True)
    except NodeagentError as exc:
        return {"owned": {}, "schemes": [], "notes": [f"kdamonds could not be read: {exc.message}"]}
    return {"owned": owned.kdamonds, "schemes": [s.to_dict() for s in owned.schemes], "notes": owned.notes}


def damon_users(facts: Facts, ownership: Ownership) -> list[dict[str, Any]]:
    """The DAMON users nodeagent does not own — kdamonds (running or not) and enabled DAMON modules — each with
    what it means for a profile (``effect``); which kdamonds are nodeagent's, its ownership records decide."""
    from ..facts.damon import from_facts, other_users

    damon = from_facts(facts)
    owned: set[int] = set()
    if ownership.kdamonds:
        from ..kinds.damon.plan import owned_kdamonds

        owned = set(owned_kdamonds(damon, ownership)[0])
    return [u.to_dict() for u in other_users(damon, owned)]


def _since(rec: Unfixable | None) -> str | None:
    from ..state.journal import iso

    return iso(rec.first_seen) if rec and rec.first_seen else None


def gather_status(engine: Engine, *, events: int = 5) -> dict[str, Any]:
    from ..drift import detect, problem_key  # at call time (drift imports the engine)

    st = engine.state
    last = st.last_applied()
    facts = engine.facts()
    out: dict[str, Any] = {"node": facts.hostname, "simulated": facts.simulated, "kernel": facts.kernel_release}
    out["last_apply"] = (last.summary()
                         | {"applied": sum(1 for o in last.outcomes if o.get("status") == "applied"),
                            "failed": sum(1 for o in last.outcomes if o.get("status") == "failed"),
                            "blocked": sum(1 for o in last.outcomes if o.get("status") == "blocked"),
                            "verify_errors": last.verify_errors}) if last else None
    drift: dict[str, Any] | None = None
    if last.desired:
        try:
            report = detect(engine)
            seen = st.drift().cannot_be_done
            drift = {"converged": report.converged, "drifted": len(report.items), "by_resource": report.by_resource(),
                     "items": [i.to_dict() for i in report.items],
                     "cannot_be_done": [{**p.to_dict(), "first_seen": _since(seen.get(problem_key(p)))}
                                        for p in report.cannot_be_done],
                     "problems": [p.message for p in report.cannot_be_done]}
        except NodeagentError as exc:
            drift = {"error": exc.message}
    out["drift"] = drift
    out["changed_by_nodeagent"] = sorted(st.originals().items)
    out["kdamonds"] = _kdamonds(engine)
    out["damon_users"] = damon_users(facts, st.ownership())
    out["tiers"] = [{"tier": t, "nodes": nodes} for t, nodes in facts.tiers.items()]
    out["nodes"] = node_usage(facts)
    journal = Journal(engine.host)
    out["recent"] = journal.query(limit=events) if events else []
    out["warnings"] = list(st.warnings)
    return out
