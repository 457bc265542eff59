"""The records planning reads, together (:class:`PlanState`): read before planning, so that a bad one is found then
and not halfway through an apply."""

from __future__ import annotations

from typing import Any, NamedTuple

from .last_applied import LastApplied
from .originals import Originals
from .ownership import Ownership
from .shape import ShapeError


class PlanState(NamedTuple):
    """The records planning reads (what nodeagent owns; the last apply; the originals)."""

    last_applied: LastApplied = LastApplied()
    originals: Originals = Originals()
    ownership: Ownership = Ownership()

    def get(self, name: str, default: Any = None) -> Any:
        """The record called ``name`` (``ownership``...): for code written against the dict this used to be
        (``ctx.state.get("ownership") or {}`` still works: an empty record is falsy, and the DAMON and DAX
        helpers take a record or its JSON)."""
        return getattr(self, name, default) if name in self._fields else default

    def to_json(self) -> dict[str, Any]:
        return {"last_applied": self.last_applied.to_json() if self.last_applied else {},
                "originals": self.originals.to_json() if self.originals else {},
                "ownership": self.ownership.to_json() if self.ownership else {}}

    @classmethod
    def coerce(cls, value: PlanState | dict[str, Any] | None) -> PlanState:
        """From itself or from a facts document's ``state`` (each part validated; a bad part reads empty)."""
        if isinstance(value, PlanState):
            return value
        parts: dict[str, Any] = {}
        for name, rec in (("last_applied", LastApplied), ("originals", Originals), ("ownership", Ownership)):
            raw = (value or {}).get(name)
            try:
                parts[name] = rec.from_json(raw) if isinstance(raw, dict) and raw else rec()
            except ShapeError:
                parts[name] = rec()
        return cls(**parts)
