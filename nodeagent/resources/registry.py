"""The resource kinds, in the order their changes are applied (auto-online policy first, before DAX)."""

from __future__ import annotations

from .base import Resource
from .damon import DamonResource
from .knobs import KnobResource

RESOURCES: tuple[Resource, ...] = (KnobResource(), DamonResource())  # DAMON last: it needs DAX nodes online
BY_KIND: dict[str, Resource] = {r.kind: r for r in RESOURCES}
