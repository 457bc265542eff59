"""The Check protocol and its records: findings, one result per check, and the report of a run.

A check looks at the node through the rooted host (and at the facts already gathered), and returns
:class:`Finding` s — each a ``pass``, ``warn`` or ``fail`` with a message and, when it is not a pass, a remedy in
plain words. The check's :class:`CheckResult` folds them with the profile's severity:

- any ``fail`` finding → the result is ``fail`` when the severity is ``error``, ``warn`` when it is ``warning``;
- else any ``warn`` finding → ``warn``;
- else ``pass``. A check that cannot run here (no GPU, no data, skipped by ``--skip-checks``) is ``skipped``
  with the reason.

Only a ``fail`` result stops ``apply`` (exit 4 from ``check``).
"""

from __future__ import annotations

from dataclasses import field
from typing import Any, Protocol

from ..facts import Facts
from ..host import Host
from ..util.dataclass import dataclass

STATUSES = ("pass", "warn", "fail", "skipped")


@dataclass(frozen=True)
class Finding:
    status: str  # "pass" | "warn" | "fail"
    message: str
    remedy: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "message": self.message, "remedy": self.remedy}


@dataclass(frozen=True)
class CheckResult:
    name: str
    severity: str  # "error" | "warning"
    status: str  # "pass" | "warn" | "fail" | "skipped"
    summary: str
    findings: tuple[Finding, ...] = ()
    evidence: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None  # why it was skipped

    @property
    def remedies(self) -> list[str]:
        return list(dict.fromkeys(f.remedy for f in self.findings if f.remedy and f.status != "pass"))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "severity": self.severity, "status": self.status, "summary": self.summary,
                "reason": self.reason, "findings": [f.to_dict() for f in self.findings],
                "remedies": self.remedies, "evidence": self.evidence}


class Skip(Exception):
    """Raised by a check that cannot run on this node; the message is the reason."""


def fold(name: str, severity: str, findings: list[Finding], evidence: dict[str, Any],
         summary: str | None = None) -> CheckResult:
    """One result from a check's findings, under the profile's severity (see the module docstring)."""
    failed = [f for f in findings if f.status == "fail"]
    warned = [f for f in findings if f.status == "warn"]
    if failed:
        status = "fail" if severity == "error" else "warn"
        text = summary or "; ".join(f.message for f in failed)
    elif warned:
        status = "warn"
        text = summary or "; ".join(f.message for f in warned)
    else:
        status = "pass"
        text = summary or ("; ".join(f.message for f in findings) if findings else "ok")
    return CheckResult(name, severity, status, text, tuple(findings), evidence)


def skipped(name: str, severity: str, reason: str, evidence: dict[str, Any] | None = None) -> CheckResult:
    return CheckResult(name, severity, "skipped", reason, (), evidence or {}, reason)


@dataclass(frozen=True)
class CheckReport:
    profile: str
    node: str
    results: tuple[CheckResult, ...]

    @property
    def failed(self) -> list[CheckResult]:
        return [r for r in self.results if r.status == "fail"]

    @property
    def ok(self) -> bool:
        return not self.failed

    @property
    def skip_hint(self) -> str | None:
        """The options that go ahead despite every failed check (``--skip-checks cpu --skip-checks disk``)."""
        return " ".join(f"--skip-checks {r.name}" for r in self.failed) or None

    def counts(self) -> dict[str, int]:
        return {s: sum(1 for r in self.results if r.status == s) for s in STATUSES}

    def to_dict(self) -> dict[str, Any]:
        return {"profile": self.profile, "node": self.node, "ok": self.ok, "counts": self.counts(),
                "failed": [r.name for r in self.failed], "skip_hint": self.skip_hint,
                "results": [r.to_dict() for r in self.results]}


class Check(Protocol):
    """One preflight check. ``run`` reads the node (through ``host``) and the gathered ``facts``; it never writes.

    ``spec`` is the check's section of the profile (a frozen pydantic model). It returns its findings and the
    evidence it saw (JSON-able), or raises :class:`Skip` with the reason it cannot run here.
    """

    name: str

    def run(self, host: Host, spec: Any, facts: Facts, ctx: CheckContext) -> tuple[list[Finding], dict[str, Any]]:
        ...


@dataclass(frozen=True)
class CheckContext:
    """What a check may know besides its own spec: the whole profile's managed settings."""

    desired_knobs: dict[str, Any] = field(default_factory=dict)  # knob key → value the profile sets
    loaded: Any = None  # the whole LoadedProfile, for checks about how settings combine (placement)
    hardware: Any = None  # facts.hardware.Hardware: the node (live), or a saved facts file (offline checks)
