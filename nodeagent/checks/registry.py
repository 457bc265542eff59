"""The preflight checks, in the order they run and are reported, and the one function that runs them."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ..facts import Facts
from ..host import Host
from ..util.errors import HostError, UsageError
from ..util.vocab import CHECK_NAMES
from .bandwidth import MemoryBandwidthCheckImpl
from .base import Check, CheckContext, CheckReport, CheckResult, Finding, Skip, fold, skipped
from .capacity import CapacityCheckImpl
from .coexist import CoexistenceCheckImpl
from .cpu import CpuCheckImpl
from .disk import DiskCheckImpl
from .latency import LatencyCheckImpl
from .pcie import GpuPcieCheckImpl
from .placement import PlacementCheckImpl

if TYPE_CHECKING:
    from ..profile import LoadedProfile

CHECKS: tuple[Check, ...] = (CpuCheckImpl(), DiskCheckImpl(), GpuPcieCheckImpl(), CapacityCheckImpl(),
                             CoexistenceCheckImpl(), MemoryBandwidthCheckImpl(), LatencyCheckImpl(),
                             PlacementCheckImpl())
BY_NAME: dict[str, Check] = {c.name: c for c in CHECKS}
assert set(BY_NAME) == set(CHECK_NAMES)


def parse_skips(names: Iterable[str]) -> frozenset[str]:
    """``--skip-checks`` values (repeatable, comma-separated allowed; ``all`` skips every check)."""
    out: set[str] = set()
    for item in names:
        for name in (n.strip() for n in item.split(",")):
            if not name:
                continue
            if name == "all":
                out |= set(CHECK_NAMES)
            elif name not in BY_NAME:
                raise UsageError(f"--skip-checks: unknown check {name!r}",
                                 hint=f"checks: {', '.join(CHECK_NAMES)} (or all)")
            else:
                out.add(name)
    return frozenset(out)


def run_checks(host: Host, loaded: LoadedProfile, facts: Facts, skip: frozenset[str] = frozenset()) -> CheckReport:
    """Run every check the profile configures (read-only). A check that raises is reported, never a crash."""
    from ..facts.hardware import LiveHardware
    from ..kinds.knob import desired

    ctx = CheckContext(desired_knobs=desired(loaded), loaded=loaded, hardware=LiveHardware(host))
    results: list[CheckResult] = []
    for check, spec in configured(loaded):
        if check.name in skip:
            results.append(skipped(check.name, spec.severity, "skipped by --skip-checks"))
            continue
        start = time.monotonic()
        result = run_one(check, host, spec, facts, ctx)
        evidence = dict(result.evidence)
        evidence["seconds"] = round(time.monotonic() - start, 3)
        results.append(CheckResult(result.name, result.severity, result.status, result.summary, result.findings,
                                   evidence, result.reason))
    node = (facts.hostname or "node") + (f" (simulated {facts.simulated})" if facts.simulated else "")
    return CheckReport(loaded.name, node, tuple(results))


def configured(loaded: LoadedProfile) -> Iterator[tuple[Check, Any]]:
    """The checks the profile configures, in report order, each with its section of the profile."""
    for check in CHECKS:
        spec = getattr(loaded.profile.checks, check.name)
        if spec is not None:
            yield check, spec


def run_one(check: Check, host: Host | None, spec: object, facts: Facts, ctx: CheckContext,
            extra: dict[str, object] | None = None) -> CheckResult:
    """One check's result: its findings folded under its severity, a Skip as skipped, a HostError as a failure."""
    try:
        findings, evidence = check.run(host, spec, facts, ctx)  # type: ignore[arg-type]
        return fold(check.name, spec.severity, findings, {**evidence, **(extra or {})})  # type: ignore[attr-defined]
    except Skip as exc:
        return skipped(check.name, spec.severity, str(exc))  # type: ignore[attr-defined]
    except HostError as exc:
        return fold(check.name, spec.severity, [_error_finding(exc)], dict(extra or {}))  # type: ignore[attr-defined]


def _error_finding(exc: HostError) -> Finding:
    return Finding("fail", f"the check could not read the node: {exc.message}", exc.hint)
