"""``last-applied.json`` (:class:`LastApplied`): the last apply, or the revert that closed it, and what ``revert``
put back since (:class:`Reverted`)."""

from __future__ import annotations

from typing import Any, NamedTuple

from .records import FORMAT, Record, _version
from .shape import _list, _obj, _stamp, _str


class Reverted(NamedTuple):
    """A target ``revert`` put back (and nodeagent stopped managing) since the last apply."""

    kind: str
    time: str  # RFC 3339
    whole_kind: bool = False  # the target stands for every item of its kind (nodeagent's kdamonds)

    def covers(self, kind: str, target: str, key: str) -> bool:
        return kind == self.kind and (self.whole_kind or target == key)


class LastApplied(Record):
    """The last apply (or the revert that closed it: ``status`` ``reverted``). Empty: nothing applied yet."""

    __slots__ = ("profile", "profile_path", "profile_digest", "desired", "resolved", "status", "outcomes",
                 "verify_errors", "problems", "scope", "time", "applied_time", "managed", "reverted")
    FILE = "last-applied.json"
    HOLDS = "the record of the last apply"

    def __init__(self, profile: str | None = None, *, profile_path: str | None = None,
                 profile_digest: str | None = None, desired: dict[str, Any] | None = None,
                 resolved: dict[str, Any] | None = None, status: str | None = None,
                 outcomes: list[dict[str, Any]] | None = None, verify_errors: list[str] | None = None,
                 problems: list[dict[str, Any]] | None = None, scope: list[str] | None = None,
                 time: str | None = None, applied_time: str | None = None, managed: list[str] | None = None,
                 reverted: dict[str, Reverted] | None = None) -> None:
        self.profile = profile
        self.profile_path = profile_path
        self.profile_digest = profile_digest
        self.desired = desired  # the merged profile document (None after a full revert)
        self.resolved = resolved  # nodeagent.profile.resolved.to_record of the validated profile
        self.status = status  # converged, unchanged, partial, failed, in-progress, reverted
        self.outcomes = outcomes or []
        self.verify_errors = verify_errors or []
        self.problems = problems or []
        self.scope = scope
        self.time = time  # RFC 3339: when this record was written
        self.applied_time = applied_time  # after a full revert: when the reverted profile had been applied
        self.managed = managed or []  # "kind:target" of every setting the profile manages (changed or as wanted)
        self.reverted = reverted or {}  # target → what revert put back since this apply

    def __bool__(self) -> bool:
        return self.status is not None

    @property
    def fully_reverted(self) -> bool:
        return self.status == "reverted"

    def summary(self) -> dict[str, Any]:
        """time, status, profile, profile_digest and scope, as far as known (for reports)."""
        d = {"time": self.time, "status": self.status, "profile": self.profile,
             "profile_digest": self.profile_digest, "scope": self.scope}
        return {k: v for k, v in d.items() if v is not None}

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"format": FORMAT, "profile": self.profile, "profile_path": self.profile_path,
                             "profile_digest": self.profile_digest, "desired": self.desired,
                             "resolved": self.resolved, "status": self.status, "outcomes": self.outcomes,
                             "verify_errors": self.verify_errors, "problems": self.problems, "time": self.time,
                             "managed": self.managed,
                             "reverted": {t: {"kind": r.kind, "time": r.time, "whole_kind": r.whole_kind}
                                          for t, r in sorted(self.reverted.items())}}
        if self.scope is not None:
            d["scope"] = self.scope
        if self.applied_time is not None:
            d["applied_time"] = self.applied_time
        return d

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LastApplied:
        _version(data, cls.FILE)
        reverted = {}
        for t, r in _obj(data.get("reverted"), "reverted", {}).items():
            r = _obj(r, f"reverted.{t}")
            reverted[t] = Reverted(_str(r.get("kind"), f"reverted.{t}.kind", optional=False) or "",
                                   _stamp(r.get("time"), f"reverted.{t}.time") or "",
                                   bool(r.get("whole_kind", False)))
        scope = data.get("scope")
        outcomes = [_obj(o, f"outcomes[{i}]") for i, o in enumerate(_list(data.get("outcomes"), "outcomes"))]
        if "managed" in data:
            managed = [str(m) for m in _list(data.get("managed"), "managed")]
        else:  # format 1 did not keep it: what that apply changed is known to be managed
            managed = sorted({f"{o.get('kind')}:{o.get('target')}" for o in outcomes if o.get("kind")})
        return cls(_str(data.get("profile"), "profile"), profile_path=_str(data.get("profile_path"), "profile_path"),
                   profile_digest=_str(data.get("profile_digest"), "profile_digest"),
                   desired=_obj(data["desired"], "desired") if data.get("desired") is not None else None,
                   resolved=_obj(data["resolved"], "resolved") if data.get("resolved") is not None else None,
                   status=_str(data.get("status"), "status"),
                   outcomes=outcomes,
                   verify_errors=[str(e) for e in _list(data.get("verify_errors"), "verify_errors")],
                   problems=[_obj(p, f"problems[{i}]") for i, p in enumerate(_list(data.get("problems"),
                                                                                  "problems"))],
                   scope=[str(s) for s in _list(scope, "scope")] if scope is not None else None,
                   time=_stamp(data.get("time"), "time"),
                   # format 1 called it reverted_profile_time
                   applied_time=_stamp(data.get("applied_time", data.get("reverted_profile_time")), "applied_time"),
                   managed=managed, reverted=reverted)


def resolved_record(loaded: Any) -> dict[str, Any]:
    """The validated profile as the last-applied record keeps it (``resolved``)."""
    from ..profile.resolved import to_record

    return to_record(loaded)
