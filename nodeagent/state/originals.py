"""``originals.json`` (:class:`Originals`): each setting's value before nodeagent first managed it (for ``revert``)."""

from __future__ import annotations

from typing import Any, NamedTuple

from .records import FORMAT, Record, _version
from .shape import _obj, _stamp, _str


class Original(NamedTuple):
    """A setting's value before nodeagent first managed it (``value`` is the kind's own JSON)."""

    kind: str
    path: str | None
    value: Any
    recorded: str | None = None  # RFC 3339

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.path, "value": self.value, "recorded": self.recorded}

    @classmethod
    def from_json(cls, d: Any, where: str) -> Original:
        d = _obj(d, where)
        return cls(_str(d.get("kind", "knob"), f"{where}.kind", optional=False) or "knob",
                   _str(d.get("path"), f"{where}.path"), d.get("value"), _stamp(d.get("recorded"), f"{where}.recorded"))


class Originals(Record):
    """``{target: Original}``: what revert puts back."""

    __slots__ = ("items",)
    FILE = "originals.json"
    KEYED = (("originals",),)
    HOLDS = "the original value of"

    def __init__(self, items: dict[str, Original] | None = None) -> None:
        self.items = items or {}

    def __bool__(self) -> bool:
        return bool(self.items)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "originals": {t: o.to_json() for t, o in sorted(self.items.items())}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Originals:
        # format 1: the targets at the top level
        items = data if _version(data, cls.FILE) == 1 else _obj(data.get("originals"), "originals", {})
        return cls({t: Original.from_json(rec, f"originals.{t}" if "originals" in data else t)
                    for t, rec in items.items()})

    @classmethod
    def in_current_layout(cls, data: dict[str, Any]) -> dict[str, Any]:
        if "originals" in data:
            return data
        return {"format": FORMAT, "originals": {k: v for k, v in data.items() if k != "format"}}  # format 1

    @classmethod
    def held(cls, data: dict[str, Any]) -> list[str] | None:
        keys = list((data.get("originals") if isinstance(data.get("originals"), dict) else data).keys())
        return [k for k in keys if k != "format"]
