"""Check reports as text: one line per check, then its findings, evidence and the fix for each problem."""

from __future__ import annotations

from typing import Any

from ..checks.base import CheckReport, CheckResult

_MARK = {"pass": "✓", "warn": "!", "fail": "✗", "skipped": "-"}
_FINDING_MARK = {"pass": "·", "warn": "!", "fail": "✗"}


def _evidence_line(r: CheckResult) -> str | None:
    ev: dict[str, Any] = {k: v for k, v in r.evidence.items() if k != "seconds"}
    if r.name == "cpu" and ev:
        virt = ev.get("virtualization", "none")
        return (f"evidence: model {ev.get('model')!r}, vendor {ev.get('vendor')}, {ev.get('cpus')} CPUs, "
                f"virtualization {virt}" + (f" ({'; '.join(ev['virtualization_evidence'])})"
                                            if ev.get("virtualization_evidence") else ""))
    if r.name == "gpu_pcie" and (ev.get("gpus") or ev.get("display_only")):
        parts = [", ".join(f"{g['address']} {g['link']} (max {g['max_link']})" for g in ev.get("gpus", []))]
        if ev.get("display_only"):
            parts.append("display-only, not judged: " + ", ".join(
                f"{d['address']} {d['vendor']}" + (f" ({d['driver']})" if d.get("driver") else "")
                for d in ev["display_only"]))
        return "evidence: " + "; ".join(p for p in parts if p)
    return None


def result_text(r: CheckResult) -> list[str]:
    status = r.status.upper() if r.status == "fail" else r.status
    head = f"  {_MARK.get(r.status, '?')} {r.name} [{r.severity}] {status}"
    if r.status == "skipped":
        return [f"{head}: {r.reason}"]
    out = [head]
    shown: set[str] = set()
    for f in r.findings:
        out.append(f"      {_FINDING_MARK.get(f.status, '?')} {f.message}")
        if f.remedy and f.status != "pass":
            out.append(f"        fix: {f.remedy}" if f.remedy not in shown else "        fix: as above")
            shown.add(f.remedy)
    ev = _evidence_line(r)
    if ev:
        out.append(f"      {ev}")
    return out


def report_text(report: CheckReport, *, applying: bool = False, hint: bool = True) -> str:
    out = [f"Checks for profile {report.profile} on {report.node}:"]
    if not report.results:
        out.append("  (the profile configures no checks)")
    for r in report.results:
        out += result_text(r)
    c = report.counts()
    summary = f"{c['pass']} passed, {c['warn']} warned, {c['fail']} failed, {c['skipped']} skipped"
    if report.failed:
        names = ", ".join(r.name for r in report.failed)
        summary += (f". Error-severity checks failed ({names})"
                    + (": nothing was written." if applying else "."))
        if hint:
            summary += f" To go ahead anyway: {report.skip_hint}"
    out.append(summary + ("" if summary.endswith(".") else "."))
    return "\n".join(out)


def offline_text(pairs: list[tuple[Any, CheckReport]]) -> str:
    """``check --facts``: each saved node's report, and which checks could not run from saved facts."""
    from ..checks.offline import offline_names

    out = []
    for snap, report in pairs:
        out.append(f"[{snap.source}]")
        out.append(report_text(report, hint=False))
        for w in snap.warnings:
            out.append(f"  warning: {w}")
        names = offline_names(report)
        if names:
            out.append(f"  offline: {', '.join(names)} cannot run from saved facts (reasons above); run "
                       "`nodeagent check` on the node for them.")
    return "\n".join(out)
