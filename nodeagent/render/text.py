"""Readable text: a plan as a diff (``~ kernel.numa_balancing  0 (disabled) → 2 (memory-tiering)``)."""

from __future__ import annotations

from collections.abc import Collection

from ..facts import Facts
from ..plan import Change, Plan, Result
from ..util.escape import escape_controls
from ..util.quantities import format_size

__all__ = ["escape_controls", "plan_text", "result_text", "facts_text", "change_line", "dax_text"]

_OP_MARK = {"set": "~", "update": "~", "create": "+", "delete": "-", "reconfigure": "~", "start": "+",
            "stop": "-"}


def change_line(c: Change) -> str:
    mark = _OP_MARK.get(c.op, "~")
    before = c.before_label if c.before_label is not None else str(c.before)
    after = c.after_label if c.after_label is not None else str(c.after)
    flag = "  [disruptive]" if c.disruptive else ""
    line = f"  {mark} {c.target}  {before} → {after}{flag}"
    return line + (f"\n      {c.reason}" if c.reason and c.reason != "profile sets it" else "")


def _unchanged_count(plan: Plan) -> int:
    """Unchanged settings, counted the way changes are: DAMON's kdamonds are one setting (``damon.kdamonds``),
    so "5 to change, 4 unchanged" before an apply is "9 managed settings" after it."""
    damon = [u for u in plan.unchanged if u.startswith("damon.")]
    collapsed = 0 if any(c.target == "damon.kdamonds" for c in plan.changes) or not damon else 1
    return len(plan.unchanged) - len(damon) + collapsed


def advisory_lines(warnings: tuple[str, ...] | list[str], *, full: bool, shown: Collection[str] = (),
                   command: str = "plan --advice", label: str = "warning") -> list[str]:
    """A plan's advisories (what the profile cannot do on this kernel, what no guard keeps...): each in full the
    first time, then counted. ``shown``: those already shown in full for this profile on this kernel
    (:mod:`nodeagent.state.advisories`), counted in one line that names ``command`` (which prints them all);
    ``full`` (``-v``): every one in full. The boot unit's apply, the drift timer and a converged Ansible run do not
    repeat the same paragraphs every time; a new kernel or a changed profile shows them again."""
    if full or not shown:
        return [f"  {label}: {w}" for w in warnings]
    fresh = [w for w in warnings if w not in shown]
    out = [f"  {label}: {w}" for w in fresh]
    n = len(warnings) - len(fresh)
    if n:
        out.append(f"  ({n} advisor{'ies' if n != 1 else 'y'} already shown for this profile and kernel; "
                   f"see `nodeagent {command}`)")
    return out


def advice_text(plan: Plan) -> str:
    """``plan --advice``: the profile's advisories on this node in full, and nothing else."""
    head = f"Advisories for profile {plan.profile}" + (f" on {plan.node}" if plan.node else "")
    if not plan.warnings:
        return head + ": none."
    return "\n".join([head + ":", *(f"  - {w}" for w in plan.warnings)])


def plan_text(plan: Plan, *, verbose: bool = True, shown: Collection[str] = ()) -> str:
    """``verbose``: every warning in full; else those in ``shown`` (already shown in full for this profile and
    kernel) are counted in one line (see :func:`advisory_lines`)."""
    out = [f"Plan for profile {plan.profile}" + (f" on {plan.node}" if plan.node else "") + ":"]
    if plan.changes:
        out += [change_line(c) for c in plan.changes]
    for p in plan.problems:
        out.append(f"  ! {p.message}" + (f"\n      hint: {p.hint}" if p.hint else ""))
    out += advisory_lines(plan.warnings, full=verbose, shown=shown)
    n = len(plan.changes)
    unchanged = _unchanged_count(plan)
    summary = f"{n} to change, {unchanged} unchanged"
    if plan.disruptive:
        summary += f", {len(plan.disruptive)} disruptive"
    if plan.problems:
        summary += f", {len(plan.problems)} cannot be done"
    if not plan.changes and not plan.problems:
        summary = f"No changes: the node matches the profile ({unchanged} managed settings)."
    out.append(summary + ("." if not summary.endswith(".") else ""))
    return "\n".join(out)


def result_text(result: Result) -> str:
    if result.dry_run or not result.outcomes:
        text = plan_text(result.plan)
        if result.dry_run and result.plan.changes:
            text += "\n(dry run: nothing was written)"
        return text
    from ..kinds.damon.prime import PRIMING  # here: the read-only commands import this module and no resource

    out = [f"Applied profile {result.plan.profile}" + (f" on {result.plan.node}" if result.plan.node else "") + ":"]
    for o in result.outcomes:
        mark = {"applied": "✓", "failed": "✗"}.get(o.status, "-")
        # A one-off action (the demotion pass, a kdamond's priming walk) leaves no setting to read back: what it did
        # is only in its message.
        said = o.status != "applied" or o.change.kind == "placement" or PRIMING in (o.message or "")
        out.append(f"  {mark} {o.change.target}: {o.status}" + (f" — {o.message}" if said and o.message else ""))
    for p in result.plan.problems:
        out.append(f"  ! {p.message}")
    for e in result.verify_errors:
        out.append(f"  ✗ verify: {e}")
    for e in result.record_errors:
        out.append(f"  ✗ record: {e}")
    if result.interrupted:
        import signal

        left = sum(o.status == "skipped" and o.message.startswith("not done: stopped") for o in result.outcomes)
        out.append(f"Result: interrupted by {signal.Signals(result.interrupted).name} at a safe point "
                   f"({left} change(s) not done); apply again to finish.")
        return "\n".join(out)
    out.append(f"Result: {result.status}.")
    return "\n".join(out)


def outcomes_text(result: Result, *, dry_run: bool = False) -> str:
    """What apply says after the checks and the plan were shown: what it did, or why it did nothing."""
    if not result.plan.changes or result.plan.blocked or (result.checks is not None and not result.checks.ok):
        return ""  # the plan (or the checks) above said it all
    if dry_run:
        return "(dry run: nothing was written)"
    if result.dry_run:
        return "Not confirmed: nothing was written."
    return result_text(result)


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
    out += dax_text(f)
    from ..facts.cxl import summary_lines as cxl_lines

    out += cxl_lines(f)
    from ..facts.damon import summary_lines

    out += summary_lines(f)
    return "\n".join(out)


def dax_text(f: Facts) -> list[str]:
    from ..facts.dax import from_facts

    dax = from_facts(f)
    if not dax.devices and not dax.udev_rule:
        return []
    out = [f"DAX devices (daxctl {dax.daxctl or 'not installed'}):"]
    for d in dax.devices:
        if d.mode == "system-ram":
            zones = ", ".join(f"{n} {z}" for z, n in sorted(d.zones.items())) or "none online"
            state = f"system-ram, {d.blocks_online}/{d.blocks_total} blocks online ({zones})"
        else:
            state = d.mode
        behind = f"  {d.backing}" + (f" {d.cxl_region} [{', '.join(d.cxl_memdevs)}]" if d.cxl_region else "")
        memmap = f"  memmap {format_size(d.memmap_bytes)} in DRAM" if d.memmap_bytes else ""
        out.append(f"  {d.name}  {format_size(d.size):>8}  node {d.target_node if d.target_node is not None else '-'}"
                   f"  {state}{behind}{memmap}")
    if dax.udev_rule:
        out.append(f"  udev: {dax.udev_rule} reconfigures DAX devices on add (/etc/daxctl.conf.d: "
                   f"{len(dax.daxctl_conf)} active sections)")
    if dax.cmdline:
        out.append("  hot-plug on the kernel command line: " + " ".join(f"{k}={v}" for k, v in dax.cmdline.items()))
    return out
