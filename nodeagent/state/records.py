"""The base of every state file's record (:class:`Record`) and the format they are written in (:data:`FORMAT`)."""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from .shape import ShapeError

#: The format every state file is written in; a file without ``format`` is format 1 (migrated on read).
FORMAT = 2


def _version(data: dict[str, Any], name: str) -> int:
    fmt = data.get("format", 1)
    if isinstance(fmt, bool) or not isinstance(fmt, int) or fmt < 1:
        raise ShapeError(f"format: expected a positive integer, got {fmt!r}")
    if fmt > FORMAT:
        raise ShapeError(f"written by a newer nodeagent (format {fmt}; this one reads up to {FORMAT})")
    return fmt


R = TypeVar("R", bound="Record")


class Record:
    """A state file's content. ``FILE`` names it; :meth:`from_json` validates (raising :class:`ShapeError`)
    and migrates; :meth:`to_json` is what is written (with ``format``). What the store needs to keep the good
    records of a damaged file and to say what was lost, the record says: where the file keeps its records by key
    (``KEYED``), what it holds in words (``HOLDS``) and the names of those it holds (:meth:`held`)."""

    __slots__ = ()
    FILE: ClassVar[str] = ""
    #: The mappings that hold the file's records by key (a path of keys each), each record checked on its own when
    #: the file is damaged; ``()``: the file is one record.
    KEYED: ClassVar[tuple[tuple[str, ...], ...]] = ()
    #: What the file holds, in words, for the warning that says what was lost with it.
    HOLDS: ClassVar[str] = "its records"

    @classmethod
    def in_current_layout(cls, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` laid out as the current format keeps it, for checking its records one by one (a format that
        moved them is lifted here; :meth:`from_json` migrates the rest)."""
        return data

    @classmethod
    def held(cls, data: dict[str, Any]) -> list[str] | None:
        """The names of the records ``data`` (the file, read as JSON) holds, for saying what was lost with it;
        None: its records have no names to give."""
        return None

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def from_json(cls: type[R], data: dict[str, Any]) -> R:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.to_json() == other.to_json()  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_json()!r})"
