"""Shared helpers for the preflight-check tests: build a profile inline and run its checks on a node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from nodeagent_sim import SimKernel

from nodeagent.checks import CheckReport, CheckResult, run_checks
from nodeagent.facts import gather
from nodeagent.host import open_host
from nodeagent.profile import LoadedProfile, load_profile_text


def profile(checks: dict[str, Any], **top: Any) -> LoadedProfile:
    doc = {"apiVersion": "nodeagent/v1", "kind": "NodeProfile", "metadata": {"name": "t"}, **top, "checks": checks}
    return load_profile_text(yaml.safe_dump(doc), "t.yaml")


def run(root: Path, checks: dict[str, Any], skip: frozenset[str] = frozenset(), **top: Any) -> CheckReport:
    host = open_host(root)
    return run_checks(host, profile(checks, **top), gather(host), skip)


def one(root: Path, name: str, spec: dict[str, Any], **top: Any) -> CheckResult:
    report = run(root, {name: spec}, **top)
    (result,) = report.results
    return result


def set_file(root: Path, path: str, text: str) -> None:
    """Change the node's hardware state (what a test plays as "the machine is like this")."""
    k = SimKernel(root)
    if k.tree.exists(path):
        k.tree.set(path, text)
    else:
        k.tree.file(path, text)


def messages(result: CheckResult) -> str:
    return "\n".join(f"{f.status}: {f.message} || {f.remedy}" for f in result.findings)
