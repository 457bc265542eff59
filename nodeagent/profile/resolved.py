"""A validated profile in plain data: what plan, apply and drift use when the profile's files did not change.

Validating a profile costs YAML (with positions) and pydantic, which together are most of a small command's CPU.
Their result is plain data: the merged document, the validated values (defaults filled in), where each value
was written, and the files it came from. :func:`to_record` keeps that in a versioned JSON form, which the
profile cache (:mod:`nodeagent.profile.cache`) and the last-applied record (:mod:`nodeagent.state`) store;
:func:`from_record` turns it back into a :class:`ResolvedProfile`, which the resources read exactly as they
read a :class:`nodeagent.profile.LoadedProfile` (``loaded.profile.memory.dax[0].zone``), without importing
either library.

This module imports nothing from :mod:`nodeagent.profile` (that package loads pydantic).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ..util.dataclass import dataclass

FORMAT = "nodeagent-resolved-profile"
VERSION = 1
KEY = "<key>"  # as nodeagent.profile.load.KEY: a key's own position in the locations map


class Frozen:
    """Read-only attribute access over validated values, shaped like the pydantic model they came from.

    Mappings become :class:`Frozen`, lists become tuples (the models hold tuples), scalars stay."""

    __slots__ = ("_data",)

    def __init__(self, data: dict[str, Any]) -> None:
        object.__setattr__(self, "_data", {k: _wrap(v) for k, v in data.items()})

    def __getattr__(self, name: str) -> Any:
        try:
            return self._data[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __iter__(self) -> Iterator[tuple[str, Any]]:  # as pydantic models iterate: (field, value)
        return iter(self._data.items())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Frozen) and self.model_dump() == other.model_dump()

    def __hash__(self) -> int:
        return hash(json.dumps(self.model_dump(), sort_keys=True, default=str))

    def __repr__(self) -> str:
        return f"Frozen({self.model_dump()!r})"

    def model_dump(self, *, by_alias: bool = False, exclude_none: bool = False) -> dict[str, Any]:
        """The values as a dict, like ``BaseModel.model_dump`` (field names; ``by_alias`` is not kept)."""
        return {k: _unwrap(v, exclude_none) for k, v in self._data.items() if not (exclude_none and v is None)}


def _wrap(value: Any) -> Any:
    if isinstance(value, dict):
        return Frozen(value)
    if isinstance(value, list | tuple):
        return tuple(_wrap(v) for v in value)
    return value


def _unwrap(value: Any, exclude_none: bool) -> Any:
    if isinstance(value, Frozen):
        return value.model_dump(exclude_none=exclude_none)
    if isinstance(value, tuple):
        return tuple(_unwrap(v, exclude_none) for v in value)
    return value


@dataclass(frozen=True)
class Loc:
    file: str
    line: int
    column: int

    def __init__(self, file: str, line: int, column: int) -> None:  # (a cached profile makes one per value)
        object.__setattr__(self, "file", file)
        object.__setattr__(self, "line", line)
        object.__setattr__(self, "column", column)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


def sha256(data: bytes) -> str:
    """Hex sha256 of ``data``. CPython's own implementation when it has one: ``hashlib`` loads OpenSSL's
    libcrypto, which costs more than a small command's whole profile work (same digest either way)."""
    try:
        from _sha256 import sha256 as impl  # type: ignore[import-not-found]
    except ImportError:
        from hashlib import sha256 as impl
    return str(impl(data).hexdigest())


def digest_of(data: dict[str, Any]) -> str:
    """sha256 of a merged profile document (what :attr:`LoadedProfile.digest` computes)."""
    return sha256(json.dumps(data, sort_keys=True, default=str).encode())


@dataclass(frozen=True)
class ResolvedProfile:
    """A validated profile without the validator: the interface of :class:`nodeagent.profile.LoadedProfile`."""

    profile: Frozen
    path: str
    data: dict[str, Any]
    locs: dict[tuple, Loc]
    digest: str

    @property
    def name(self) -> str:
        return str(self.profile.metadata.name)

    def where(self, *path: str | int) -> str:
        """``file:line:col`` of the value at ``path`` (or of its nearest written parent)."""
        key = tuple(path)
        for i in range(len(key), -1, -1):
            if key[:i] in self.locs:
                return str(self.locs[key[:i]])
        return self.path


def to_record(loaded: Any, files: dict[str, str] | None = None) -> dict[str, Any]:
    """The versioned plain form of a validated profile (a ``LoadedProfile`` or a ``ResolvedProfile``).

    ``files``: ``{absolute path: sha256}`` of every file the profile was read from (the profile cache checks
    them; the last-applied record keeps them to say which files were applied)."""
    profile = loaded.profile.model_dump(by_alias=False)
    return {"format": FORMAT, "version": VERSION, "path": loaded.path, "digest": loaded.digest,
            "data": loaded.data, "profile": profile,
            "locs": [[list(p), loc.file, loc.line, loc.column] for p, loc in loaded.locs.items()],
            "files": dict(files or {})}


def from_record(rec: Any) -> ResolvedProfile:
    """The profile kept by :func:`to_record`. ``ValueError`` when ``rec`` is not one of a version read here."""
    if not isinstance(rec, dict) or rec.get("format") != FORMAT:
        raise ValueError("not a resolved profile record")
    if rec.get("version") != VERSION:
        raise ValueError(f"resolved profile record version {rec.get('version')!r}; this nodeagent reads {VERSION}")
    try:
        locs = {tuple(p): Loc(str(f), int(line), int(col)) for p, f, line, col in rec["locs"]}
        return ResolvedProfile(Frozen(rec["profile"]), str(rec["path"]), rec["data"], locs, str(rec["digest"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"resolved profile record is damaged: {exc!r}") from None
