"""Readable text: a plan as a diff (``~ kernel.numa_balancing  0 (disabled) → 2 (memory-tiering)``)."""

from __future__ import annotations

from ..facts import Facts
from ..plan import Change, Plan, Result
from ..profile.units import format_size

_OP_MARK = {"set": "~", "update": "~", "create": "+", "delete": "-", "reconfigure": "~", "start": "+",
            "stop": "-"}


def change_line(c: Change) -> str:
    mark = _OP_MARK.get(c.op, "~")
    before = c.before_label if c.before_label is not None else str(c.before)
    after = c.after_label if c.after_label is not None else str(c.after)
    flag = "  [disruptive]" if c.disruptive else ""
    line = f"  {mark} {c.target}  {before} → {after}{flag}"
    return line + (f"\n      {c.reason}" if c.reason and c.reason != "profile sets it" else "")


def plan_text(plan: Plan) -> str:
    out = [f"Plan for profile {plan.profile}" + (f" on {plan.node}" if plan.node else "") + ":"]
    if plan.changes:
        out += [change_line(c) for c in plan.changes]
    for p in plan.problems:
        out.append(f"  ! {p.message}" + (f"\n      hint: {p.hint}" if p.hint else ""))
    for w in plan.warnings:
        out.append(f"  warning: {w}")
    n = len(plan.changes)
    summary = f"{n} to change, {len(plan.unchanged)} unchanged"
    if plan.disruptive:
        summary += f", {len(plan.disruptive)} disruptive"
    if plan.problems:
        summary += f", {len(plan.problems)} cannot be done"
    if not plan.changes and not plan.problems:
        summary = f"No changes: the node matches the profile ({len(plan.unchanged)} managed settings)."
    out.append(summary + ("." if not summary.endswith(".") else ""))
    return "\n".join(out)


def result_text(result: Result) -> str:
    if result.dry_run or not result.outcomes:
        text = plan_text(result.plan)
        if result.dry_run and result.plan.changes:
            text += "\n(dry run: nothing was written)"
        return text
    out = [f"Applied profile {result.plan.profile}" + (f" on {result.plan.node}" if result.plan.node else "") + ":"]
    for o in result.outcomes:
        mark = {"applied": "✓", "failed": "✗"}.get(o.status, "-")
        out.append(f"  {mark} {o.change.target}: {o.status}" + (f" — {o.message}" if o.status != "applied"
                                                                   else ""))
    for p in result.plan.problems:
        out.append(f"  ! {p.message}")
    for e in result.verify_errors:
        out.append(f"  ✗ verify: {e}")
    out.append(f"Result: {result.status}.")
    return "\n".join(out)


def facts_text(f: Facts) -> str:
    out = [f"host {f.hostname or '?'}  kernel {f.kernel_release}" + (f"  (simulated {f.simulated})"
                                                                    if f.simulated else "")]
    if f.block_size_bytes:
        out.append(f"memory blocks of {format_size(f.block_size_bytes)}")
    out.append("NUMA nodes:")
    for n in f.nodes:
        used = n.mem_total - n.mem_free
        pct = f"{100 * used / n.mem_total:.0f}%" if n.mem_total else "-"
        out.append(f"  node{n.id}  tier {n.tier if n.tier is not None else '-':>3}  "
                   f"{format_size(n.mem_total):>9} total  {pct:>4} used  "
                   f"cpus {n.cpulist or '(none: CPU-less)'}")
    offline = [i for i in f.possible_nodes if not f.node(i)]
    if offline:
        out.append(f"  possible but not online: {', '.join(map(str, offline))}")
    out.append("memory tiers (faster first): " + ", ".join(f"memory_tier{t}=[{','.join(map(str, n))}]"
                                                           for t, n in f.tiers.items()))
    out.append("knobs:")
    for key, raw in f.knobs.items():
        out.append(f"  {key:<48} {raw if raw is not None else '(not on this kernel)'}")
    from ..facts.damon import summary_lines

    out += summary_lines(f)
    return "\n".join(out)
