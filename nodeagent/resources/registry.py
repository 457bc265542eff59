"""The resource kinds, in the order their changes are applied (auto-online policy first, before DAX)."""

from __future__ import annotations

from .base import Resource
from .dax import DaxResource
from .knobs import KnobResource

RESOURCES: tuple[Resource, ...] = (KnobResource(), DaxResource())
BY_KIND: dict[str, Resource] = {r.kind: r for r in RESOURCES}
