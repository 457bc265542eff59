"""Readable text for the day-2 commands: drift, history, status, revert."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ..plan import Result
from ..state.journal import iso
from ..util.quantities import format_size
from .text import advisory_lines, change_line


def _when(ts: float | None) -> str:
    return iso(ts) if ts else "now"


def drift_text(report: Any, *, verbose: bool = True, shown: Collection[str] = ()) -> str:  # drift.DriftReport
    """``verbose``: every advisory of the profile in full; else those in ``shown`` (already shown in full for this
    profile and kernel) are counted in one line (see render.text.advisory_lines)."""
    last = report.last_apply
    head = f"Drift on {report.node} from profile {report.profile}"
    if report.source != "last-applied":
        head += f" ({report.source})"
    elif last.get("time"):
        head += f" (last applied {last['time']}, {last.get('status', '?')})"
    out = [head + ":"]
    for item in report.items:
        seen = (f"first seen {_when(item.first_seen)}" if item.first_seen
                else "first seen now" + ("" if report.recorded else " (not recorded: drift --record keeps it)"))
        out.append(f"  ~ {item.target}  expected {item.expected_label}, actual {item.actual_label}  [{item.resource}]"
                   f"  {seen}")
        if item.causes:
            out.append(f"      likely cause: {item.causes[0].message}")
            out += [f"      also: {c.message}" for c in item.causes[1:]]
        else:
            out.append("      likely cause: none found (no sysctl.d, TuneD or udev setting for it: changed at run "
                       "time by another program or by hand)")
    for p in report.cannot_be_done:
        out.append(f"  ! cannot be done: {p.message}" + (f"\n      hint: {p.hint}" if p.hint else ""))
    for item in report.reverted:
        out.append(f"  - {item.target}  profile {item.expected_label}, now {item.actual_label}  [{item.resource}]"
                   f"  reverted (not drift): {item.causes[0].message}")
    if report.reverted_at is not None:
        out[0] = f"Drift on {report.node}: profile {report.profile} reverted at {report.reverted_at}:"
        out.append(f"Nothing to drift from: reverted at {report.reverted_at} by nodeagent revert; nothing managed.")
        return "\n".join(out)
    for n in report.notes:
        out.append(f"  note: {n}")
    out += advisory_lines(report.advisories, full=verbose, shown=shown, command="drift -v",
                          label="note")
    if report.converged:
        if report.reverted:
            out.append(f"No drift: {len(report.reverted)} setting(s) of profile {report.profile} were put back by "
                       "nodeagent revert (not managed since); the rest matches.")
        else:
            out.append(f"No drift: the node matches profile {report.profile}.")
    else:
        counts = ", ".join(f"{k}: {v}" for k, v in sorted(report.by_resource().items()))
        if report.items:
            out.append(f"{len(report.items)} drifted ({counts}). `nodeagent apply` brings the node back.")
        if report.cannot_be_done:
            out.append(f"{len(report.cannot_be_done)} cannot be done on this node (not drift): apply would be "
                       "partial until the node or the profile changes as each says.")
    return "\n".join(out)


_KINDS = {"memory": "memory blocks", "dax": "DAX devices", "region": "CXL regions", "mem": "CXL memdevs"}
LINE = 160  # a history line longer than this is folded ("and N more")


def fold_names(names: list[str], runs: int = 3) -> str:
    """Device names, long runs folded: ``dax1.0, 513 memory blocks: memory32–memory544``."""
    import re

    groups: dict[str, list[int]] = {}
    plain: list[str] = []
    for name in names:
        m = re.fullmatch(r"([a-z]+)([0-9]+)", name)
        if m:
            groups.setdefault(m.group(1), []).append(int(m.group(2)))
        else:
            plain.append(name)
    out = list(plain)
    for prefix, ids in groups.items():
        ids = sorted(set(ids))
        if len(ids) <= 3:
            out += [f"{prefix}{i}" for i in ids]
            continue
        spans: list[tuple[int, int]] = []
        for i in ids:
            if spans and i == spans[-1][1] + 1:
                spans[-1] = (spans[-1][0], i)
            else:
                spans.append((i, i))
        shown = [f"{prefix}{a}" if a == b else f"{prefix}{a}–{prefix}{b}" for a, b in spans[:runs]]
        extra = len(spans) - runs
        more = f" and {extra} more run{'s' if extra > 1 else ''}" if extra > 0 else ""
        out.append(f"{len(ids)} {_KINDS.get(prefix, prefix + ' devices')}: {', '.join(shown)}{more}")
    return ", ".join(out)


def _fold(parts: list[str], room: int) -> str:
    """``parts`` joined, as many as fit in ``room`` characters, then "and N more"."""
    shown: list[str] = []
    for i, part in enumerate(parts):
        rest = len(parts) - i
        tail = f" and {rest} more" if rest > 1 else ""
        if shown and len(", ".join([*shown, part])) + len(tail) > room:
            return ", ".join(shown) + f" and {rest} more"
        shown.append(part)
    return ", ".join(shown)


def _short(value: Any, width: int = 32) -> str:
    text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _event_line(e: dict[str, Any]) -> str:
    kind = e.get("event", "?")
    when = e.get("time") or iso(float(e.get("ts", 0)))
    if kind == "apply":
        applied = [c for c in e.get("changes", []) if c.get("status") == "applied"]
        failed = [c for c in e.get("changes", []) if c.get("status") in ("failed", "blocked")]
        scope = f" scope {','.join(e['scope'])}" if e.get("scope") else ""
        text = f"apply {e.get('profile')}{scope}: {e.get('status')}"
        if applied:  # `history --format json` has every change in full
            changes = [f"{c['target']} {_short(c.get('before'))} → {_short(c.get('after'))}" for c in applied]
            text += f" — {len(applied)} changed: " + _fold(changes, LINE - len(text))
        if failed:
            text += " — not done: " + _fold([f"{c['target']} ({c['status']})" for c in failed], LINE // 2)
    elif kind == "drift":
        text = f"drift {e.get('target')} [{e.get('resource')}]: expected {e.get('expected')}, actual {e.get('actual')}"
        if e.get("cause"):
            text += f" — likely cause: {e['cause']}"
    elif kind == "cannot-be-done":
        text = f"cannot be done {e.get('target')} [{e.get('resource')}]: {e.get('message')}"
    elif kind == "resolved" and e.get("cannot_be_done"):
        text = f"resolved {e.get('target')} [{e.get('resource')}]: no longer cannot be done (was: {e.get('was')})"
    elif kind == "resolved":
        text = f"resolved {e.get('target')} [{e.get('resource')}] by {e.get('by')}"
    elif kind == "revert":
        text = f"revert: {e.get('status')} — " + (", ".join(e.get("reverted", [])) or "nothing to revert")
    elif kind == "hotplug":
        devices = fold_names(str(e.get("device") or "").split(","))
        text = f"hotplug {e.get('action')} {e.get('subsystem')}: {devices}: {e.get('result', '')}"
    else:
        text = kind
    return f"{when}  {text}"


def history_text(events: list[dict[str, Any]], skipped: int = 0) -> str:
    if not events:
        return "No history recorded" + (" matching the filters." if skipped >= 0 else ".")
    out = [_event_line(e) for e in events]
    if skipped:
        out.append(f"({skipped} unreadable journal lines skipped)")
    return "\n".join(out)


def status_text(s: dict[str, Any]) -> str:
    sim = f" (simulated {s['simulated']})" if s.get("simulated") else ""
    out = [f"node {s.get('node') or '?'}{sim}  kernel {s.get('kernel')}"]
    last = s.get("last_apply")
    if last:
        scope = f" scope {','.join(last['scope'])}" if last.get("scope") else ""
        out.append(f"last apply: profile {last.get('profile')} at {last.get('time')}: {last.get('status')}{scope} "
                   f"({last['applied']} applied, {last['failed']} failed, {last['blocked']} blocked)")
        out += [f"  verify: {e}" for e in last.get("verify_errors", [])]
        if last.get("profile_changed"):
            out.append(f"  note: {last['profile_changed']}")
    else:
        out.append("last apply: none (no profile applied on this node)")
    d = s.get("drift")
    if d is None:
        out.append("drift: (no applied profile to compare with)")
    elif "error" in d:
        out.append(f"drift: cannot measure: {d['error']}")
    elif d["converged"]:
        out.append("drift: none — the node matches the profile")
    else:
        counts = ", ".join(f"{k}: {v}" for k, v in sorted(d["by_resource"].items()))
        out.append(f"drift: {len(d['items'])} ({counts})" if d["items"] else "drift: none")
        for i in d["items"]:
            cause = f" — {i['causes'][0]['message']}" if i["causes"] else ""
            since = f" since {i['first_seen']}" if i.get("first_seen") else ""
            out.append(f"  ~ {i['target']}: expected {i['expected']}, actual {i['actual']}{since}{cause}")
        apart = d.get("cannot_be_done") or [{"message": p} for p in d.get("problems", [])]
        if apart:
            out.append(f"cannot be done on this node (not drift; apply would be partial): {len(apart)}")
        for p in apart:
            since = f" (since {p['first_seen']})" if p.get("first_seen") else ""
            out.append(f"  ! {p['message']}{since}" + (f"\n      hint: {p['hint']}" if p.get("hint") else ""))
    changed = s.get("changed_by_nodeagent", [])
    out.append(f"managed by nodeagent (revert restores what they were): {', '.join(changed) if changed else 'nothing'}")
    kd = s.get("kdamonds", {})
    if kd.get("owned"):
        out.append("owned kdamonds:")
        for key, rec in kd["owned"].items():
            out.append(f"  kdamond {key}: " + ", ".join(f"{k}={v}" for k, v in rec.items()))
            for sc in kd.get("schemes") or []:
                if str(sc["kdamond"]) != str(key):
                    continue
                paused = ("paused (matches no region while its destination is nearly full; the guard resumes it "
                          "when there is room), " if sc.get("paused") else "")
                out.append(f"    scheme {sc['kdamond']}/{sc['context']}/{sc['scheme']} {sc.get('action') or ''}: "
                           f"{paused}tried {sc.get('nr_tried')} regions ({_size(sc.get('sz_tried'))}), applied "
                           f"{sc.get('nr_applied')} ({_size(sc.get('sz_applied'))}), quota exceeded "
                           f"{sc.get('qt_exceeds')}")
    else:
        out.append("owned kdamonds: none")
    out += [f"    {n}" for n in kd.get("notes") or []]
    out += damon_users_lines(s.get("damon_users") or [])
    out.append("memory tiers (faster first): " + (", ".join(f"memory_tier{t['tier']}=[{','.join(map(str, t['nodes']))}]"
                                                           for t in s.get("tiers", [])) or "none"))
    for n in s.get("nodes", []):
        pct = f"{100 * n['used_ratio']:.0f}%" if n["used_ratio"] is not None else "-"
        kind = "CPU-less" if n["cpuless"] else "CPUs"
        tier = n["tier"] if n["tier"] is not None else "-"
        out.append(f"  node{n['node']}  tier {tier:>3}  {format_size(n['used_bytes']):>9} of "
                   f"{format_size(n['total_bytes']):>9} used ({pct:>4})  {kind}")
    if s.get("recent"):
        out.append("recent events:")
        out += ["  " + _event_line(e) for e in s["recent"]]
    out += [f"warning: {w}" for w in s.get("warnings", [])]
    return "\n".join(out)


def damon_users_lines(users: list[dict[str, Any]]) -> list[str]:
    """The DAMON users nodeagent does not own, each with what it means for a profile."""
    if not users:
        return ["DAMON users nodeagent does not own: none"]
    out = [f"DAMON users nodeagent does not own: {len(users)}"]
    for u in users:
        out += [f"  {u['description']}", f"      {u['effect']}"]
    return out


def _size(n: Any) -> str:
    return format_size(n) if isinstance(n, int) else "?"


def revert_text(result: Result) -> str:
    plan = result.plan
    if result.dry_run or not result.outcomes:
        out = [f"Revert on {plan.node}:"]
        out += [change_line(c) for c in plan.changes]
        out += [f"  ! {p.message}" + (f"\n      hint: {p.hint}" if p.hint else "") for p in plan.problems]
        if not plan.changes:
            out.append(f"Nothing to revert: {len(plan.unchanged)} recorded settings already hold their original "
                       "values." if plan.unchanged else "Nothing to revert: nodeagent recorded no original values.")
        elif result.dry_run:
            out.append(f"{len(plan.changes)} to revert (dry run: nothing was written).")
        return "\n".join(out)
    out = [f"Reverted on {plan.node}:"]
    for o in result.outcomes:
        mark = {"applied": "✓", "failed": "✗"}.get(o.status, "-")
        c = o.change
        before = c.before_label if c.before_label is not None else str(c.before)
        after = c.after_label if c.after_label is not None else str(c.after)
        out.append(f"  {mark} {c.target}: {before} → {after}"
                   + ("" if o.status == "applied" else f" — {o.status}: {o.message}"))
    out += [f"  ! {p.message}" for p in plan.problems]
    out += [f"  ✗ verify: {e}" for e in result.verify_errors]
    out += [f"  ✗ record: {e}" for e in result.record_errors]
    out.append(f"Result: {result.status}.")
    return "\n".join(out)
