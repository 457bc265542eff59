"""Preflight checks: the traps that silently cost an inference node most of its throughput.

``run_checks(host, loaded, facts, skip)`` runs the checks the profile's ``checks:`` section configures and
returns a :class:`CheckReport`; ``apply`` runs them before planning (an error-severity failure writes nothing),
``nodeagent check`` runs them alone. Checks only read the node, through the rooted host — hardware through
:class:`~nodeagent.facts.hardware.Hardware`, which a saved facts file can answer too, so ``check --facts``
(:mod:`.offline`) runs the same checks against saved nodes.
"""

from .base import CheckReport, CheckResult, Finding
from .registry import BY_NAME, CHECKS, parse_skips, run_checks

__all__ = ["BY_NAME", "CHECKS", "CheckReport", "CheckResult", "Finding", "parse_skips", "run_checks"]
