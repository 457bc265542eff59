"""``placement``: tiering settings that were measured to fail together, before anything is applied.

The same advisories ``plan`` prints (:mod:`nodeagent.kinds.placement.advice`), as findings: a stuck fast node
without a demotion pass, migrate_hot without a young filter or a strict destination, migrate_cold without a young
filter, DAMON watermarks on system-wide free memory, demotion without promotion and the reverse, DAMON demotion
with nothing to promote, the multi-gen LRU's ``min_ttl_ms``: 0 under demotion with swap (the OOM killer never fires),
above 0 without swap (kswapd of a full node with nothing to demote to kills while other nodes have room).
Each finding carries what was measured and the fix. Severity ``warning`` by default:
with ``error`` an advisory stops ``apply``.

Example::

    checks:
      placement: {}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..facts import Facts
from ..host import Host
from ..kinds.placement.advice import advisories
from .base import CheckContext, Finding, Skip

if TYPE_CHECKING:
    from ..profile.checks import PlacementCheck


class PlacementCheckImpl:
    name = "placement"

    def run(self, host: Host, spec: PlacementCheck, facts: Facts,
            ctx: CheckContext) -> tuple[list[Finding], dict[str, Any]]:
        if ctx.loaded is None:
            raise Skip("no profile to judge")
        found = advisories(ctx.loaded, facts)
        findings = [Finding("fail", f"{a.where}: {a.message} (measured: {a.evidence})", a.fix) for a in found]
        if not findings:
            findings = [Finding("pass", "no tiering settings known to fail together")]
        return findings, {"advisories": [a.to_dict() for a in found]}
