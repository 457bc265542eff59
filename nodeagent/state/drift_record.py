"""``drift.json`` (:class:`DriftRecord`): ``drift --record``'s open items — drift (:class:`DriftEntry`) and, apart,
what cannot be done (:class:`Unfixable`)."""

from __future__ import annotations

from typing import Any, NamedTuple

from ..util.timestamps import rfc3339
from .records import FORMAT, Record, _version
from .shape import _obj, _str, _when


class DriftEntry(NamedTuple):
    """An open drift item of ``drift.json``."""

    resource: str
    target: str
    expected: str
    actual: str
    first_seen: float
    last_seen: float

    def to_json(self) -> dict[str, Any]:
        return {"resource": self.resource, "target": self.target, "expected": self.expected, "actual": self.actual,
                "first_seen": rfc3339(self.first_seen), "last_seen": rfc3339(self.last_seen)}


class Unfixable(NamedTuple):
    """An open cannot-be-done item of ``drift.json`` (a plan problem: not drift)."""

    resource: str
    target: str
    message: str
    hint: str | None
    first_seen: float
    last_seen: float

    def to_json(self) -> dict[str, Any]:
        return {"resource": self.resource, "target": self.target, "message": self.message, "hint": self.hint,
                "first_seen": rfc3339(self.first_seen), "last_seen": rfc3339(self.last_seen)}


#: What ``drift.json`` written before "cannot be done" was kept apart put as a problem's expected value.
_OLD_PROBLEM = "(as the profile says)"


class DriftRecord(Record):
    """``drift --record``'s open items: drift (``items``) and, apart, what cannot be done, keyed
    ``kind:target``."""

    __slots__ = ("profile", "profile_digest", "checked", "items", "cannot_be_done")
    FILE = "drift.json"
    KEYED = (("items",), ("cannot_be_done",))
    HOLDS = "the open drift item"

    def __init__(self, profile: str | None = None, profile_digest: str | None = None, checked: float | None = None,
                 items: dict[str, DriftEntry] | None = None,
                 cannot_be_done: dict[str, Unfixable] | None = None) -> None:
        self.profile = profile
        self.profile_digest = profile_digest
        self.checked = checked
        self.items = items or {}
        self.cannot_be_done = cannot_be_done or {}

    def __bool__(self) -> bool:
        return self.checked is not None or bool(self.items or self.cannot_be_done)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "profile": self.profile, "profile_digest": self.profile_digest,
                "checked": rfc3339(self.checked) if self.checked is not None else None,
                "items": {k: v.to_json() for k, v in sorted(self.items.items())},
                "cannot_be_done": {k: v.to_json() for k, v in sorted(self.cannot_be_done.items())}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DriftRecord:
        _version(data, cls.FILE)
        items: dict[str, DriftEntry] = {}
        apart: dict[str, Unfixable] = {}
        for key, rec in _obj(data.get("cannot_be_done"), "cannot_be_done", {}).items():
            apart[key] = _unfixable(rec, f"cannot_be_done.{key}", key)
        for key, rec in _obj(data.get("items"), "items", {}).items():
            w = f"items.{key}"
            rec = _obj(rec, w)
            if rec.get("expected") == _OLD_PROBLEM:  # format 1 before cannot-be-done was kept apart
                apart.setdefault(key, _unfixable({**rec, "message": rec.get("actual")}, w, key))
                continue
            first = _when(rec.get("first_seen"), f"{w}.first_seen")
            kind, _, target = key.partition(":")
            items[key] = DriftEntry(_str(rec.get("resource", kind), f"{w}.resource", optional=False) or kind,
                                    _str(rec.get("target", target), f"{w}.target", optional=False) or target,
                                    str(rec.get("expected")), str(rec.get("actual")), first or 0.0,
                                    _when(rec.get("last_seen", first), f"{w}.last_seen") or 0.0)
        return cls(_str(data.get("profile"), "profile"), _str(data.get("profile_digest"), "profile_digest"),
                   _when(data.get("checked"), "checked", optional=True), items, apart)

    @classmethod
    def held(cls, data: dict[str, Any]) -> list[str] | None:
        return list(data.get("items") if isinstance(data.get("items"), dict) else {})


def _unfixable(rec: Any, where: str, key: str) -> Unfixable:
    rec = _obj(rec, where)
    kind, _, target = key.partition(":")
    first = _when(rec.get("first_seen"), f"{where}.first_seen") or 0.0
    return Unfixable(_str(rec.get("resource", kind), f"{where}.resource", optional=False) or kind,
                     _str(rec.get("target", target), f"{where}.target", optional=False) or target,
                     str(rec.get("message")), _str(rec.get("hint"), f"{where}.hint"), first,
                     _when(rec.get("last_seen", first), f"{where}.last_seen") or first)
