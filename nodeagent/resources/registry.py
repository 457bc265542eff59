"""The resource kinds, in the order their changes are applied (auto-online policy first, before DAX)."""

from __future__ import annotations

from .base import Resource
from .damon import DamonResource
from .dax import DaxResource
from .knobs import KnobResource

# Knobs first (auto_online_blocks must be off before daxctl runs), then DAX (the CXL nodes come online),
# then DAMON (its slow-node targets need those nodes online).
RESOURCES: tuple[Resource, ...] = (KnobResource(), DaxResource(), DamonResource())
BY_KIND: dict[str, Resource] = {r.kind: r for r in RESOURCES}
