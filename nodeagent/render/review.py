"""Rendering reviews (plans against captured facts, optionally against a baseline profile) as text and Markdown.

The Markdown is a review comment for a profile pull request, from the jinja2 template
``templates/review.md.j2``: a summary table, then per node what the change does, the plan with disruptive
changes flagged, what cannot be done there (unsupported settings), warnings and failed checks.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from ..engine.review import NodeReview, PlanDelta
from ..plan import Change, Plan, Problem
from ..profile import LoadedProfile
from .text import plan_text

_OP_MARK = {"set": "~", "update": "~", "create": "+", "delete": "-", "reconfigure": "~", "start": "+", "stop": "-"}


def _before(c: Change) -> str:
    return c.before_label if c.before_label is not None else str(c.before)


def _after(c: Change) -> str:
    return c.after_label if c.after_label is not None else str(c.after)


# -- text --------------------------------------------------------------------------------------------------------

def delta_text(delta: PlanDelta) -> str:
    if delta.empty:
        out = ["  The profile change does not change what would be done on this node."]
    else:
        out = ["  The profile change alters the plan:"]
        out += [f"  + {c.target}: now also {_before(c)} → {_after(c)}" + ("  [disruptive]" if c.disruptive else "")
                for c in delta.added]
        out += [f"  - {c.target}: no longer {_before(c)} → {_after(c)}" for c in delta.removed]
        out += [f"  ~ {b.target}: {_before(b)} → {_after(b)} (baseline: {_after(a)})"
                + ("  [disruptive]" if b.disruptive else "") for a, b in delta.different]
        out += [f"  ! new problem: {p.message}" for p in delta.new_problems]
        out += [f"  ✓ resolved: {p.message}" for p in delta.resolved_problems]
    if delta.no_longer_managed:
        out.append(f"  no longer managed (left as they are): {', '.join(delta.no_longer_managed)}")
    if delta.newly_managed:
        out.append(f"  newly managed, already as wanted: {', '.join(delta.newly_managed)}")
    return "\n".join(out)


def review_text(reviews: list[NodeReview]) -> str:
    blocks = []
    for r in reviews:
        head = f"== {r.label}  ({r.snapshot.source}, kernel {r.snapshot.facts.kernel_release or '?'})"
        parts = [head]
        if r.delta is not None:
            parts.append(delta_text(r.delta))
        parts.append(plan_text(r.plan))
        blocks.append("\n".join(parts))
    blocks.append(summary(reviews))
    return "\n\n".join(blocks)


def summary(reviews: list[NodeReview]) -> str:
    n = len(reviews)
    nodes = f"{n} node" + ("s" if n != 1 else "")
    blocked = sum(1 for r in reviews if r.plan.blocked)
    tail = f"; {blocked} cannot carry it out" if blocked else ""
    if reviews and reviews[0].delta is not None:
        moved = sum(1 for r in reviews if r.delta is not None and not r.delta.empty)
        return f"The profile change alters the plan on {moved} of {nodes}{tail}."
    changing = sum(1 for r in reviews if r.plan.changes)
    return f"{changing} of {nodes} would change{tail}."


# -- Markdown ----------------------------------------------------------------------------------------------------

def md_cell(value: Any) -> str:
    """Text safe inside a Markdown table cell: pipes escaped, line breaks folded."""
    return str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def md_code(value: Any) -> str:
    """Inline code that survives backticks in the value."""
    text = md_cell(value)
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


@cache
def _environment() -> Any:
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("nodeagent.render", "templates"), autoescape=False,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined)
    env.filters["cell"] = md_cell
    env.filters["code"] = md_code
    return env


def _change_row(c: Change) -> dict[str, Any]:
    return {"mark": _OP_MARK.get(c.op, "~"), "target": c.target, "op": c.op, "before": _before(c),
            "after": _after(c), "disruptive": c.disruptive, "path": c.path,
            "reason": c.reason if c.reason and c.reason != "profile sets it" else ""}


def _problem(p: Problem) -> dict[str, Any]:
    return {"target": p.target, "message": p.message, "hint": p.hint, "blocking": p.blocking}


def _plan_view(plan: Plan) -> dict[str, Any]:
    return {"changes": [_change_row(c) for c in plan.changes], "problems": [_problem(p) for p in plan.problems],
            "warnings": list(plan.warnings), "unchanged": list(plan.unchanged),
            "disruptive": len(plan.disruptive), "blocked": plan.blocked}


def _delta_view(delta: PlanDelta) -> dict[str, Any]:
    rows = [{"what": "added", "target": c.target, "now": _before(c), "baseline": "(no change)", "new": _after(c),
             "disruptive": c.disruptive} for c in delta.added]
    rows += [{"what": "dropped", "target": c.target, "now": _before(c), "baseline": _after(c),
              "new": "(no change)", "disruptive": False} for c in delta.removed]
    rows += [{"what": "different", "target": b.target, "now": _before(b), "baseline": _after(a), "new": _after(b),
              "disruptive": b.disruptive} for a, b in delta.different]
    return {"empty": delta.empty, "rows": rows, "new_problems": [_problem(p) for p in delta.new_problems],
            "resolved_problems": [_problem(p) for p in delta.resolved_problems],
            "no_longer_managed": list(delta.no_longer_managed), "newly_managed": list(delta.newly_managed)}


def _checks_view(checks: list[dict[str, Any]] | None, source: str | None = None) -> dict[str, Any] | None:
    if checks is None:
        return None
    bad = [c for c in checks if c.get("status") in ("fail", "warn")]
    failed = [c for c in bad if c.get("status") == "fail"]
    warned = [c for c in bad if c.get("status") == "warn"]
    offline = [c for c in checks if c.get("status") == "skipped"
               and str(c.get("reason") or "").startswith("cannot run offline")]
    passed = sum(1 for c in checks if c.get("status") == "pass")
    cell = ", ".join([f"❌ {c['name']}" for c in failed] + [f"⚠️ {c['name']}" for c in warned]) or \
        (f"✅ {passed} passed" if passed else "–")
    return {"total": len(checks), "failed": failed, "warned": warned, "offline": [c["name"] for c in offline],
            "source": source, "cell": cell}


def review_markdown(reviews: list[NodeReview], profile: LoadedProfile, baseline: LoadedProfile | None = None,
                    *, offline: bool = True) -> str:
    """The review comment (see the module docstring)."""
    nodes = []
    for r in reviews:
        f = r.snapshot.facts
        nodes.append({"label": r.label, "source": r.snapshot.source, "kernel": f.kernel_release or "?",
                      "simulated": f.simulated, "captured": r.snapshot.captured.get("time"),
                      "plan": _plan_view(r.plan),
                      "delta": _delta_view(r.delta) if r.delta is not None else None,
                      "checks": _checks_view(r.checks, getattr(r, "checks_source", None))})
    return _environment().get_template("review.md.j2").render(
        profile={"name": profile.name, "path": profile.path},
        baseline={"name": baseline.name, "path": baseline.path} if baseline is not None else None,
        nodes=nodes, summary=summary(reviews), offline=offline)
