"""Checks against saved facts (``nodeagent check PROFILE --facts DIR``, the review's checks column).

Every check that can judge a node from its facts file runs exactly as on the node — the same code, reading the
hardware through :class:`~nodeagent.facts.hardware.SavedHardware` instead of the host. The others are reported
``skipped`` saying why they need the node itself.
"""

from __future__ import annotations

from typing import Any

from ..facts.hardware import SavedHardware
from ..facts.snapshot import HARDWARE, Snapshot
from ..profile import LoadedProfile
from .base import CheckContext, CheckReport, CheckResult, Finding, fold, skipped
from .registry import configured, run_one

#: Checks that read the node itself, and what they would need from it.
NEEDS_THE_NODE = {
    "memory_bandwidth": "it is a bandwidth probe: it measures the node's memory, and these facts hold no "
                        "measurement (capture them with `nodeagent facts --save FILE --measure-bandwidth`)",
    "coexistence": "it reads the node's TuneD profile, sysctl.d files, udev rules and running kdamonds, which a "
                   "facts file does not hold",
}
#: Checks that need the facts file's hardware section (format v2).
NEEDS_HARDWARE = frozenset({"cpu", "disk", "gpu_pcie"})


def run_offline(loaded: LoadedProfile, snap: Snapshot, skip: frozenset[str] = frozenset()) -> CheckReport:
    """The profile's checks judged from one saved node (read-only; nothing of this machine is read)."""
    from ..kinds.knob import desired

    doc = snap.facts.sections.get(HARDWARE)
    ctx = CheckContext(desired_knobs=desired(loaded), loaded=loaded,
                       hardware=SavedHardware(doc) if isinstance(doc, dict) else None)
    results: list[CheckResult] = []
    for check, spec in configured(loaded):
        if check.name in skip:
            results.append(skipped(check.name, spec.severity, "skipped by --skip-checks"))
            continue
        measured = (ctx.hardware.doc.get("memory_bandwidth") or {}) if ctx.hardware is not None else {}
        if check.name == "memory_bandwidth" and measured.get("nodes"):
            results.append(fold(check.name, spec.severity, _bandwidth_findings(snap, spec, measured),
                                {**measured, "offline": True, "source": "measured when the facts were captured"}))
            continue
        if check.name in NEEDS_THE_NODE:
            results.append(skipped(check.name, spec.severity, f"cannot run offline: {NEEDS_THE_NODE[check.name]}"
                                   + _saved_result(snap, check.name)))
            continue
        if ctx.hardware is None and (check.name in NEEDS_HARDWARE or
                                     (check.name == "capacity" and spec.gpu_memory is None)):
            results.append(skipped(check.name, spec.severity, "cannot run offline: the facts file has no hardware "
                                   f"facts (format {snap.facts.format}); capture them again with `nodeagent facts "
                                   "--save FILE`"))
            continue
        results.append(run_one(check, None, spec, snap.facts, ctx, {"offline": True}))
    return CheckReport(loaded.name, snap.label, tuple(results))


def _bandwidth_findings(snap: Snapshot, spec: Any, measured: dict[str, Any]) -> list[Finding]:
    """``memory_bandwidth`` judged on the figures ``facts --save --measure-bandwidth`` recorded."""
    from ..host import CopyRun
    from .bandwidth import MemoryBandwidthCheckImpl

    buffer, iterations = int(measured["buffer"]), int(measured["iterations"])
    out = []
    for ev in measured["nodes"]:
        node = snap.facts.node(int(ev["node"]))
        if node is None or (spec.nodes is not None and node.id not in spec.nodes):
            continue
        single = CopyRun(node.id, (0,), buffer, iterations, float(ev["single_seconds"]))
        full = CopyRun(node.id, tuple(range(int(ev["threads"]))), buffer, iterations, float(ev["all_seconds"]))
        f = MemoryBandwidthCheckImpl._judge(node, int(ev["measured_from_node"]), single, full, spec)
        out.append(Finding(f.status, f.message + " (measured when the facts were captured)", f.remedy))
    return out or [Finding("warn", "the saved measurement covers none of the nodes this check names", None)]


def _saved_result(snap: Snapshot, name: str) -> str:
    """What a check report saved beside the facts said, when there is one."""
    for r in snap.checks or []:
        if r.get("name") == name and r.get("status"):
            return f"; the facts file holds a {r['status']} result of it: {r.get('summary', '')}"
    return ""


def offline_names(report: CheckReport) -> list[str]:
    """The checks of ``report`` that could not run from saved facts."""
    return [r.name for r in report.results if r.status == "skipped" and (r.reason or "").startswith("cannot run "
                                                                                                   "offline")]


def to_dict(pairs: list[tuple[Snapshot, CheckReport]]) -> dict[str, Any]:
    return {"offline": True, "ok": all(r.ok for _, r in pairs),
            "nodes": [{"facts_file": s.source, **r.to_dict(), "cannot_run_offline": offline_names(r)}
                      for s, r in pairs]}
