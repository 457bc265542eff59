"""The resource kinds, in the order their changes are applied (auto-online policy first, before DAX)."""

from __future__ import annotations

from .base import Kind, check_kind
from .cxl_region import CxlRegionResource
from .damon.kind import DamonResource
from .dax import DaxResource
from .interleave import InterleaveResource
from .knob import LATE, KnobResource
from .placement import PlacementResource

# Knobs first (auto_online_blocks must be off before daxctl runs or a CXL region is committed, demotion on before
# anything demotes), then the CXL regions (their DAX devices appear, kmem-bound and offline), then DAX
# (the CXL nodes come online), then the placement pass (a fast node kswapd gave up on gets room, by demotion to
# those nodes), then DAMON (its slow-node targets need those nodes online; its promotion must find room on the
# fast node, or it lands on another node), weighted interleave's weights once every node they name has memory
# (6.16+ has a node's weight file only then), and NUMA balancing last (see knobs.LATE).
RESOURCES: tuple[Kind, ...] = (KnobResource(exclude=LATE), CxlRegionResource(), DaxResource(),
                               PlacementResource(), DamonResource(), InterleaveResource(),
                               KnobResource(only=LATE))
BY_KIND: dict[str, Kind] = {r.kind: r for r in RESOURCES}


def _validate(kinds: tuple[Kind, ...]) -> None:
    """Each kind against the base, when the registry is imported: a kind that misses a hook fails every command
    and the first test, not a revert months later."""
    errors = [e for k in kinds for e in check_kind(k)]
    if errors:
        raise TypeError("nodeagent.kinds.registry: " + "; ".join(errors))


_validate(RESOURCES)
