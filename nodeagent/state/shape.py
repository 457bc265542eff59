"""The checks a state record's fields pass when it is read: each raises :class:`ShapeError` naming the field
(``items.knob:x.first_seen``) and what it expected; times are read in any spelling older versions wrote and kept as
RFC 3339 (:mod:`nodeagent.util.timestamps`)."""

from __future__ import annotations

from typing import Any

from ..util.timestamps import parse as parse_time
from ..util.timestamps import rfc3339


class ShapeError(ValueError):
    """A state record of the wrong shape; the message names the field (``items.knob:x.first_seen``)."""


def _type(v: Any) -> str:
    return "null" if v is None else {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(v), type(v).__name__)


def _obj(v: Any, where: str, default: dict | None = None) -> dict[str, Any]:
    if v is None and default is not None:
        return default
    if not isinstance(v, dict):
        raise ShapeError(f"{where}: expected an object, got {_type(v)}")
    return v


def _list(v: Any, where: str) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise ShapeError(f"{where}: expected a list, got {_type(v)}")
    return v


def _str(v: Any, where: str, *, optional: bool = True) -> str | None:
    if v is None and optional:
        return None
    if not isinstance(v, str):
        raise ShapeError(f"{where}: expected a string, got {_type(v)}")
    return v


def _int(v: Any, where: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise ShapeError(f"{where}: expected an integer, got {_type(v)}")
    return v


def _when(v: Any, where: str, *, optional: bool = False) -> float | None:
    """A time as a Unix timestamp; the file may hold RFC 3339 (any of the spellings older versions wrote) or a
    number (``drift.json`` before format 2)."""
    if v is None and optional:
        return None
    t = parse_time(v)
    if t is None:
        raise ShapeError(f"{where}: expected an RFC 3339 time, got {v!r}")
    return t


def _stamp(v: Any, where: str) -> str | None:
    """A time kept as text, normalized to RFC 3339 (``None`` when absent)."""
    t = _when(v, where, optional=True)
    return None if t is None else rfc3339(t)
