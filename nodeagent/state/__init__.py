"""What nodeagent remembers about a node, under ``<root>/var/lib/nodeagent``: the one module that reads and
writes those files. Every other module asks it for a typed record and hands it a record to write.

- ``lock``: one run at a time (flock; a second run waits up to a bound, then names the holder's pid);
- ``last-applied.json`` (:class:`LastApplied`): profile name, path and digest, the merged document (``desired``)
  and the validated profile in its versioned plain form (``resolved``, :mod:`nodeagent.profile.resolved`: drift uses it
  without YAML or pydantic), result, time, and what ``revert`` put back since (``reverted``);
- ``originals.json`` (:class:`Originals`): each setting's value before nodeagent first managed it (for
  ``revert``);
- ``ownership.json`` (:class:`Ownership`): what nodeagent created or changed (kdamonds, DAX devices, CXL
  regions), so it never touches what it did not;
- ``drift.json`` (:class:`DriftRecord`): the open drift items and, apart, what cannot be done (``drift
  --record``);
- ``last-checks.json`` (:class:`LastChecks`): the last preflight check results (for the metrics and labels);
- ``advisories.json`` (:class:`~nodeagent.state.advisories.AdvisoriesShown`): which advisories were shown in
  full, per profile and kernel release (so that they are said once, then counted);
- ``probes.json`` (:class:`Probes`): answers of commands only a reboot changes, for this boot
  (:mod:`nodeagent.state.boot_cache`);
- ``journal.jsonl``: the history journal (:mod:`nodeagent.state.journal`, at :data:`JOURNAL`);
- ``progress.json`` (:class:`Progress`) and ``.reserve``: while an apply runs, what it is doing (each change
  before its first write, each outcome after) and room held for its records (:meth:`StateStore.reserve`).

Every file carries its ``format`` (:data:`FORMAT`) and every time in it is RFC 3339 UTC
(:mod:`nodeagent.util.timestamps`). A record is validated when it is read (:meth:`StateStore.read`): a file of the
previous format (no ``format`` key) is migrated on read and written in the new one by the next write; a file
that is not JSON, of the wrong shape, or of a newer format is reported in :attr:`StateStore.warnings` (naming the
file and the field) and read as empty — set aside as ``<name>.corrupt-<time>`` when a writing command holds the
lock (renamed: the file itself moves, nothing is copied), with what was lost in it, never a crash and never
silently reset. A state file with more than one hard link is refused, read or written: it is another file's too.
Every write goes through :meth:`StateStore.write_record` (atomic: temp file, fsync, rename, fsync of the
directory; on ENOSPC the room an apply holds is given back and the write tried again).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, TypeVar

from ..util import jsonin
from ..util.timestamps import parse as parse_time
from ..util.timestamps import rfc3339

if TYPE_CHECKING:
    from ..host import Host

STATE_DIR = "/var/lib/nodeagent"
JOURNAL = f"{STATE_DIR}/journal.jsonl"
#: The format every state file is written in; a file without ``format`` is format 1 (migrated on read).
FORMAT = 2


class ShapeError(ValueError):
    """A state record of the wrong shape; the message names the field (``items.knob:x.first_seen``)."""


# -- validation helpers --------------------------------------------------------------------------------------
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


def _version(data: dict[str, Any], name: str) -> int:
    fmt = data.get("format", 1)
    if isinstance(fmt, bool) or not isinstance(fmt, int) or fmt < 1:
        raise ShapeError(f"format: expected a positive integer, got {fmt!r}")
    if fmt > FORMAT:
        raise ShapeError(f"written by a newer nodeagent (format {fmt}; this one reads up to {FORMAT})")
    return fmt


# -- the records ---------------------------------------------------------------------------------------------
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


class Reverted(NamedTuple):
    """A target ``revert`` put back (and nodeagent stopped managing) since the last apply."""

    kind: str
    time: str  # RFC 3339
    whole_kind: bool = False  # the target stands for every item of its kind (nodeagent's kdamonds)

    def covers(self, kind: str, target: str, key: str) -> bool:
        return kind == self.kind and (self.whole_kind or target == key)


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


class OwnedDevice(NamedTuple):
    """A DAX device nodeagent configured: what it made it, by which rule, when. ``building``: what nodeagent was
    making it (recorded before daxctl's first write, with the device as it was then; gone once it is done)."""

    mode: str | None
    zone: str | None
    rule: str | None
    time: str | None
    building: str | None = None

    def to_json(self) -> dict[str, Any]:
        d = {"mode": self.mode, "zone": self.zone, "rule": self.rule, "time": self.time}
        return {**d, "building": self.building} if self.building else d


class OwnedKdamond(NamedTuple):
    """A kdamond slot nodeagent built (``name`` None: a slot it emptied), the pid it ran as and the files it
    wrote (what makes a stopped kdamond recognizably nodeagent's)."""

    name: str | None
    pid: int | None
    config: dict[str, str]
    profile: str | None = None
    recorded: str | None = None
    building: bool = False  # recorded before its first write: nodeagent's to finish until it runs

    def to_json(self) -> dict[str, Any]:
        d = {"name": self.name, "pid": self.pid, "config": self.config, "profile": self.profile,
             "recorded": self.recorded}
        return {**d, "building": True} if self.building else d


class OwnedRegion(NamedTuple):
    """A CXL region nodeagent made, keyed by its memdevs' identities across boots (serial, else PCI function):
    what the boot apply makes again and revert tears down; ``region`` is the kernel's name when it was made."""

    members: list[str]  # the memdevs' identities in position order ("0x4c454f0001", "pci:0000:0d:00.0")
    serials: list[int]
    ways: int | None
    granularity: int | None
    rule: str | None
    region: str | None
    root: str | None
    time: str | None
    dax: list[str] = []  # the DAX devices it got (their ownership records go with it)
    #: Recorded before the creation's first kernel write, gone once it is made: what it sets up besides the region
    #: (``{"decoders": [endpoint decoders], "dpa_size": bytes each, "pid": the apply's}``), so that what a run
    #: stopped half-way leaves is known as nodeagent's own (the next plan tears it down and makes the region).
    building: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        d = {"members": self.members, "serials": self.serials, "ways": self.ways,
             "granularity": self.granularity, "rule": self.rule, "region": self.region, "root": self.root,
             "time": self.time, "dax": self.dax}
        return {**d, "building": self.building} if self.building is not None else d

    @classmethod
    def from_json(cls, d: Any, where: str) -> OwnedRegion:
        d = _obj(d, where)
        serials = [_int(s, f"{where}.serials[{i}]") or 0 for i, s in enumerate(_list(d.get("serials"),
                                                                                      f"{where}.serials"))]
        members = [str(_str(m, f"{where}.members[{i}]", optional=False))
                   for i, m in enumerate(_list(d.get("members"), f"{where}.members"))]
        return cls(members or [f"{s:#x}" for s in serials], serials, _int(d.get("ways"), f"{where}.ways"),
                   _int(d.get("granularity"), f"{where}.granularity"), _str(d.get("rule"), f"{where}.rule"),
                   _str(d.get("region"), f"{where}.region"), _str(d.get("root"), f"{where}.root"),
                   _stamp(d.get("time"), f"{where}.time"),
                   [str(_str(x, f"{where}.dax[{i}]", optional=False)) for i, x in enumerate(_list(d.get("dax"),
                                                                                                   f"{where}.dax"))],
                   _building(d.get("building"), f"{where}.building"))


def _building(v: Any, where: str) -> dict[str, Any] | None:
    """An :class:`OwnedRegion`'s ``building`` (absent in a file written before it existed)."""
    if v is None:
        return None
    v = _obj(v, where)
    return {"decoders": [str(_str(x, f"{where}.decoders[{i}]", optional=False))
                         for i, x in enumerate(_list(v.get("decoders"), f"{where}.decoders"))],
            "dpa_size": _int(v.get("dpa_size"), f"{where}.dpa_size"), "pid": _int(v.get("pid"), f"{where}.pid")}


class CheckResult(NamedTuple):
    name: str
    severity: str
    status: str


R = TypeVar("R", bound="Record")


class Record:
    """A state file's content. ``FILE`` names it; :meth:`from_json` validates (raising :class:`ShapeError`)
    and migrates; :meth:`to_json` is what is written (with ``format``)."""

    __slots__ = ()
    FILE: ClassVar[str] = ""

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def from_json(cls: type[R], data: dict[str, Any]) -> R:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.to_json() == other.to_json()  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_json()!r})"


class LastApplied(Record):
    """The last apply (or the revert that closed it: ``status`` ``reverted``). Empty: nothing applied yet."""

    __slots__ = ("profile", "profile_path", "profile_digest", "desired", "resolved", "status", "outcomes",
                 "verify_errors", "problems", "scope", "time", "applied_time", "managed", "reverted")
    FILE = "last-applied.json"

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


class Originals(Record):
    """``{target: Original}``: what revert puts back."""

    __slots__ = ("items",)
    FILE = "originals.json"

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


class Ownership(Record):
    """What nodeagent created or changed on the node: DAX devices (by name), kdamond slots (by index) and CXL
    regions (by their memdevs' identities, :func:`nodeagent.kinds.cxl_region.names.key`; under
    ``cxl_region``, where a format-1 file of the CXL regions' first version kept them too)."""

    __slots__ = ("dax", "kdamonds", "regions")
    FILE = "ownership.json"

    def __init__(self, dax: dict[str, OwnedDevice] | None = None,
                 kdamonds: dict[int, OwnedKdamond] | None = None,
                 regions: dict[str, OwnedRegion] | None = None) -> None:
        self.dax = dax or {}
        self.kdamonds = kdamonds or {}
        self.regions = regions or {}

    def __bool__(self) -> bool:
        return bool(self.dax or self.kdamonds or self.regions)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"format": FORMAT, "dax": {n: o.to_json() for n, o in sorted(self.dax.items())}}
        d["damon"] = {"kdamonds": {str(i): k.to_json() for i, k in sorted(self.kdamonds.items())}}
        if self.regions:  # absent when there are none: a file without regions reads the same in every version
            d["cxl_region"] = {k: r.to_json() for k, r in sorted(self.regions.items())}
        return d

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Ownership:
        _version(data, cls.FILE)  # format 1 had the same layout
        dax = {}
        for name, rec in _obj(data.get("dax"), "dax", {}).items():
            w = f"dax.{name}"
            rec = _obj(rec, w)
            dax[name] = OwnedDevice(_str(rec.get("mode"), f"{w}.mode"), _str(rec.get("zone"), f"{w}.zone"),
                                    _str(rec.get("rule"), f"{w}.rule"), _stamp(rec.get("time"), f"{w}.time"),
                                    _str(rec.get("building"), f"{w}.building"))
        kds = {}
        damon = _obj(data.get("damon"), "damon", {})
        for key, rec in _obj(damon.get("kdamonds"), "damon.kdamonds", {}).items():
            w = f"damon.kdamonds.{key}"
            if not str(key).isdigit():
                raise ShapeError(f"{w}: a kdamond index must be a number")
            rec = _obj(rec, w)
            config = _obj(rec.get("config"), f"{w}.config", {})
            kds[int(key)] = OwnedKdamond(_str(rec.get("name"), f"{w}.name"), _int(rec.get("pid"), f"{w}.pid"),
                                         {str(k): str(v) for k, v in config.items()},
                                         _str(rec.get("profile"), f"{w}.profile"),
                                         _stamp(rec.get("recorded"), f"{w}.recorded"), bool(rec.get("building")))
        regions = {str(k): OwnedRegion.from_json(rec, f"cxl_region.{k}")
                   for k, rec in _obj(data.get("cxl_region"), "cxl_region", {}).items()}
        return cls(dax, kds, regions)

    @classmethod
    def coerce(cls, value: Ownership | dict[str, Any] | None) -> Ownership:
        """An :class:`Ownership` from itself or from its JSON (a facts document's ``state``)."""
        if isinstance(value, Ownership):
            return value
        return cls.from_json(value) if value else cls()


#: What ``drift.json`` written before "cannot be done" was kept apart put as a problem's expected value.
_OLD_PROBLEM = "(as the profile says)"


class DriftRecord(Record):
    """``drift --record``'s open items: drift (``items``) and, apart, what cannot be done, keyed
    ``kind:target``."""

    __slots__ = ("profile", "profile_digest", "checked", "items", "cannot_be_done")
    FILE = "drift.json"

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


def _unfixable(rec: Any, where: str, key: str) -> Unfixable:
    rec = _obj(rec, where)
    kind, _, target = key.partition(":")
    first = _when(rec.get("first_seen"), f"{where}.first_seen") or 0.0
    return Unfixable(_str(rec.get("resource", kind), f"{where}.resource", optional=False) or kind,
                     _str(rec.get("target", target), f"{where}.target", optional=False) or target,
                     str(rec.get("message")), _str(rec.get("hint"), f"{where}.hint"), first,
                     _when(rec.get("last_seen", first), f"{where}.last_seen") or first)


class LastChecks(Record):
    """The preflight check results of the last run that ran them (``check``, ``apply``, the k8s agent)."""

    __slots__ = ("results",)
    FILE = "last-checks.json"

    def __init__(self, results: list[CheckResult] | None = None) -> None:
        self.results = results or []

    def __bool__(self) -> bool:
        return bool(self.results)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "results": [r._asdict() for r in self.results]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LastChecks:
        _version(data, cls.FILE)
        out = []
        for i, r in enumerate(_list(data.get("results"), "results")):
            r = _obj(r, f"results[{i}]")
            out.append(CheckResult(*(_str(r.get(k), f"results[{i}].{k}", optional=False) or ""
                                     for k in CheckResult._fields)))
        return cls(out)


class Probes(Record):
    """Probe answers of one boot (``boot_id``)."""

    __slots__ = ("boot_id", "probes")
    FILE = "probes.json"

    def __init__(self, boot_id: str | None = None, probes: dict[str, str] | None = None) -> None:
        self.boot_id = boot_id
        self.probes = probes or {}

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "boot_id": self.boot_id, "probes": dict(sorted(self.probes.items()))}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Probes:
        _version(data, cls.FILE)
        probes = _obj(data.get("probes"), "probes", {})
        return cls(_str(data.get("boot_id"), "boot_id"),
                   {str(k): v for k, v in probes.items() if isinstance(v, str)})


class Progress(Record):
    """The running apply's record of what it does (intent before action): the changes planned, each outcome so
    far, and the change it is making (``in_flight``, written before that change's first write). Removed when the
    run has recorded its result; one left behind is a run that never finished (:meth:`StateStore.unfinished`)."""

    __slots__ = ("what", "pid", "started", "profile", "profile_digest", "planned", "done", "in_flight")
    FILE = "progress.json"

    def __init__(self, what: str | None = None, *, pid: int | None = None, started: str | None = None,
                 profile: str | None = None, profile_digest: str | None = None,
                 planned: list[dict[str, Any]] | None = None, done: list[dict[str, Any]] | None = None,
                 in_flight: dict[str, Any] | None = None) -> None:
        self.what = what
        self.pid = pid
        self.started = started
        self.profile = profile
        self.profile_digest = profile_digest
        self.planned = planned or []
        self.done = done or []
        self.in_flight = in_flight

    def __bool__(self) -> bool:
        return self.what is not None

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "what": self.what, "pid": self.pid, "started": self.started,
                "profile": self.profile, "profile_digest": self.profile_digest, "planned": self.planned,
                "done": self.done, "in_flight": self.in_flight}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Progress:
        _version(data, cls.FILE)
        flight = data.get("in_flight")
        return cls(_str(data.get("what"), "what") or "apply", pid=_int(data.get("pid"), "pid"),
                   started=_stamp(data.get("started"), "started"), profile=_str(data.get("profile"), "profile"),
                   profile_digest=_str(data.get("profile_digest"), "profile_digest"),
                   planned=[_obj(c, f"planned[{i}]") for i, c in enumerate(_list(data.get("planned"), "planned"))],
                   done=[_obj(o, f"done[{i}]") for i, o in enumerate(_list(data.get("done"), "done"))],
                   in_flight=_obj(flight, "in_flight") if flight is not None else None)

    def summary(self) -> str:
        applied = [str(o.get("target")) for o in self.done if o.get("status") == "applied"]
        f = self.in_flight
        where = (f"while making {f.get('target')} ({f.get('op')}, since {f.get('since')})" if f
                 else "between two changes, or before writing its result")
        return (f"the {self.what} started {self.started or '?'} by pid {self.pid or '?'} did not finish: it stopped "
                f"{where}; {len(applied)} change(s) had been made" + (f" ({', '.join(applied)})" if applied else ""))


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


from .advisories import AdvisoriesShown  # noqa: E402  (it builds on the helpers above)

RECORDS: tuple[type[Record], ...] = (LastApplied, Originals, Ownership, DriftRecord, LastChecks, Probes, Progress,
                                     AdvisoriesShown)
#: Where a run holds room for its records (:meth:`StateStore.reserve`).
RESERVE = ".reserve"
#: The state directory's files besides the records: the lock, the journal and its rotations, the reserve.
OWN_FILES = ("lock", "journal.jsonl", "journal.jsonl.1", "journal.jsonl.2", RESERVE)
#: Beyond the records' own size: the journal's event, ownership records of what gets built, filesystem overhead.
SLACK = 64 * 1024


# -- the store -----------------------------------------------------------------------------------------------
class StateStore:
    def __init__(self, host: Host) -> None:
        from .boot_cache import attach

        attach(host)  # the probes' per-boot cache is a state file: the state answers the host's probes
        self.host = host
        self.warnings: list[str] = []
        self.writable = False  # set while a writing command holds the lock: only then is a bad file moved
        self.set_aside: dict[str, str] = {}  # file → what became of it, this run (revert names lost originals)

    def path(self, name: str) -> str:
        return f"{STATE_DIR}/{name}"

    @contextmanager
    def locked(self, timeout: float = 60.0) -> Iterator[None]:
        from ..util.errors import HostError, NoSpaceError
        from .boot_cache import PERSIST

        with ExitStack() as stack:
            try:
                stack.enter_context(self.host.fs.lock(self.path("lock"), timeout))
            except HostError as exc:  # the state directory cannot even hold the lock: nothing has been done
                hint = f"free space on the filesystem that holds {STATE_DIR} (df {STATE_DIR}), then run again" \
                    if isinstance(exc, NoSpaceError) else \
                    f"make {STATE_DIR} writable (a read-only filesystem? a full disk?), then run again"
                raise type(exc)(f"cannot take the state lock: {exc.message}; nothing was written", path=STATE_DIR,
                                hint=exc.hint or hint) from None
            try:  # every file of its own a writing run may write in place or set aside: checked before any work
                for name in (*OWN_FILES, *(r.FILE for r in RECORDS)):
                    self.host.fs.require_own(self.path(name))
            except HostError as exc:
                raise type(exc)(f"cannot use the state directory: {exc.message}; nothing was written", path=exc.path,
                                hint=exc.hint) from None
            self.writable = True
            token = PERSIST.set(True)  # probes run while the lock is held are kept for this boot
            try:
                yield
            finally:
                PERSIST.reset(token)
                self.writable = False

    # -- reading and writing records ---------------------------------------------------------------------
    def read(self, kind: type[R]) -> R:
        """The record in ``kind.FILE``, validated (and migrated from the previous format); empty when there is
        none, or when the file is unreadable (see the module docs)."""
        raw = self.host.fs.read_own_opt(self.path(kind.FILE))  # a hard link to another file is refused
        if raw is None or not raw.strip():
            return kind()
        try:
            data = jsonin.loads(raw)
            if not isinstance(data, dict):
                raise ShapeError(f"expected a JSON object, got {_type(data)}")
            return kind.from_json(data)
        except ShapeError as exc:  # records of the wrong shape: the good ones are kept, the bad ones set aside
            kept, lost = _salvage(kind, data) if isinstance(data, dict) else (None, [])
            self._bad(kind.FILE, raw, str(exc), kept, lost)
            return kept if kept is not None else kind()
        except ValueError as exc:  # json.JSONDecodeError
            self._bad(kind.FILE, raw, str(exc))
            return kind()

    def write_record(self, record: Record) -> None:
        """Write ``record`` to its file: atomically (temp file, fsync, rename, fsync of the directory), in the
        current format. On a full filesystem the room a run holds for its records (:meth:`reserve`) is given
        back and the write tried once more."""
        from ..util.errors import NoSpaceError

        text = json.dumps(record.to_json(), indent=2, sort_keys=True) + "\n"
        try:
            self.host.fs.write_file_atomic(self.path(record.FILE), text)
        except NoSpaceError:
            if not self.release():
                raise
            self.host.fs.write_file_atomic(self.path(record.FILE), text)

    # -- crash safety: room for the records, runs that did not finish ------------------------------------------
    def reserve(self, records: list[Any]) -> int:
        """Hold room (``posix_fallocate``, in :data:`RESERVE`) for writing ``records`` — each replaced atomically,
        old and new side by side — before a run's first change: a state directory that is full or read-only
        refuses then (:class:`HostError`), nothing changed. Returns the bytes held."""
        from ..util.errors import HostError

        need = sum(2 * len(json.dumps(r.to_json() if isinstance(r, Record) else r, indent=2, sort_keys=True,
                                      default=str)) for r in records) + SLACK
        try:
            self.host.fs.reserve(self.path(RESERVE), need)
        except HostError:
            self.release()
            raise
        return need

    def release(self) -> bool:
        """Give back the room :meth:`reserve` held (False: none was held, or it could not be removed)."""
        from ..util.errors import HostError

        try:
            return self.host.fs.remove(self.path(RESERVE))
        except HostError:
            return False

    def unfinished(self) -> Progress:
        """The progress record a run left without finishing (killed, or unable to write its result); empty when
        every run finished."""
        return self.read(Progress)

    def end_run(self) -> None:
        """The run recorded its result: its progress record goes."""
        self.host.fs.remove(self.path(Progress.FILE))

    @contextmanager
    def edit(self, kind: type[R]) -> Iterator[R]:
        """Read ``kind``'s record, let the caller change it, write it back if it changed."""
        record = self.read(kind)
        before = record.to_json()
        yield record
        if record.to_json() != before:
            self.write_record(record)

    def _bad(self, name: str, raw: str, why: str, kept: Record | None = None, bad: list[str] | None = None) -> None:
        """Set a bad file aside (when a writing command holds the lock) and say what was lost with it: the bad
        records, when the rest could be ``kept`` (and is written back), else everything it held."""
        from ..util.errors import HostError

        lost = f"{', '.join(bad)} (the rest is kept)" if kept is not None and bad else _held(name, raw)
        self.set_aside[name] = f"{self.path(name)}, which is corrupt ({why})"
        if not self.writable:
            self._warn(f"state file {self.path(name)} is corrupt ({why}); ignored here ({lost} with it), set aside "
                       "by the next apply")
            return
        aside = f"{name}.corrupt-{rfc3339().replace(':', '')}"
        try:
            # Set aside by rename: the file itself moves (its mode, its owner, one link), nothing is copied.
            self.host.fs.rename(self.path(name), self.path(aside))
            if kept is not None:
                self.write_record(kept)
            else:
                self.host.fs.write_file_atomic(self.path(name), "{}\n")
        except HostError as exc:
            self._warn(f"state file {self.path(name)} is corrupt ({why}); ignored ({lost} with it), and it could "
                       f"not be set aside: {exc.message}")
            return
        self.set_aside[name] = f"{self.path(name)}, which was corrupt ({why}; set aside as {self.path(aside)})"
        self._warn(f"state file {self.path(name)} was corrupt ({why}); set aside as {self.path(aside)}; lost: "
                   f"{lost}")

    def _warn(self, msg: str) -> None:
        if msg not in self.warnings:
            self.warnings.append(msg)

    # -- the records by name -------------------------------------------------------------------------------
    def last_applied(self) -> LastApplied:
        return self.read(LastApplied)

    def originals(self) -> Originals:
        return self.read(Originals)

    def ownership(self) -> Ownership:
        return self.read(Ownership)

    def drift(self) -> DriftRecord:
        return self.read(DriftRecord)

    def last_checks(self) -> LastChecks:
        return self.read(LastChecks)

    def advisories_shown(self) -> AdvisoriesShown:
        return self.read(AdvisoriesShown)

    def remember_advisories(self, profile: str, digest: str, kernel: str, texts: list[str]) -> bool:
        """Record ``texts`` as shown in full for this profile on this kernel (the caller holds the lock); False when
        every one already was (nothing written)."""
        with self.edit(AdvisoriesShown) as shown:
            return shown.add(profile, digest, kernel, texts)

    def remember_originals(self, items: dict[str, Original]) -> None:
        """Record ``{target: Original}`` for targets not yet recorded (the first record of a target wins)."""
        with self.edit(Originals) as originals:
            now = rfc3339()
            for target, rec in items.items():
                if target not in originals.items:
                    originals.items[target] = rec._replace(recorded=rec.recorded or now)

    def record_apply(self, record: LastApplied) -> None:
        """Write the last-applied record, stamped now."""
        record.time = rfc3339()
        self.write_record(record)

    def plan_state(self) -> PlanState:
        """Every record planning reads (so that a bad one is found before planning, not halfway through an
        apply)."""
        return PlanState(self.last_applied(), self.originals(), self.ownership())

    def load_all(self) -> dict[str, dict[str, Any]]:
        """:meth:`plan_state` as JSON (a facts document's ``state``)."""
        return self.plan_state().to_json()


#: Where a file keeps its records by key (each checked on its own by :func:`_salvage`); ``()``: the top level.
_RECORD_MAPS: dict[str, tuple[tuple[str, ...], ...]] = {
    "originals.json": (("originals",),), "ownership.json": (("damon", "kdamonds"), ("dax",)),
    "drift.json": (("items",), ("cannot_be_done",)), "advisories.json": (("shown",),),
}


def _salvage(kind: type[R], data: dict[str, Any]) -> tuple[R | None, list[str]]:
    """The records of ``data`` that have the right shape, and the names of those that do not (``damon.kdamonds.9``);
    ``(None, [])`` when the file is wrong beyond its records."""
    paths = _RECORD_MAPS.get(kind.FILE)
    if not paths:
        return None, []
    if kind.FILE == "originals.json" and "originals" not in data:  # format 1: the targets at the top level
        data = {"format": FORMAT, "originals": {k: v for k, v in data.items() if k != "format"}}
    try:
        base = json.loads(json.dumps(data))
    except RecursionError:  # nested just short of what the parser refuses: too deep to tell records apart
        return None, []
    for path in paths:
        _put(base, path, {})
    try:
        kind.from_json(base)
    except ShapeError:
        return None, []
    lost: list[str] = []
    for path in paths:
        mapping = _get(data, path)
        if mapping is None:
            continue
        if not isinstance(mapping, dict):
            lost.append(f"{'.'.join(path)} (not an object)")
            continue
        for key, rec in mapping.items():
            _get(base, path)[key] = rec
            try:
                kind.from_json(base)
            except ShapeError:
                del _get(base, path)[key]
                lost.append(".".join((*path, str(key))))
    return kind.from_json(base), lost


def _get(data: dict[str, Any], path: tuple[str, ...]) -> Any:
    for p in path:
        if not isinstance(data, dict):
            return None
        data = data.get(p)  # type: ignore[assignment]
    return data


def _put(data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for p in path[:-1]:
        if not isinstance(data.get(p), dict):
            data[p] = {}
        data = data[p]
    data[path[-1]] = value


#: What each file holds, in words, for the warning that says what was lost with it.
_HOLDS = {"originals.json": "the original value of", "ownership.json": "nodeagent's record of",
          "drift.json": "the open drift item", "last-applied.json": "the record of the last apply",
          "last-checks.json": "the last checks' results", "probes.json": "this boot's probe answers",
          "progress.json": "the record of an unfinished run",
          "advisories.json": "the record of the advisories already shown"}


def _held(name: str, raw: str) -> str:
    """What a bad file held, as far as it can be read: its records by name where it parses at all."""
    what = _HOLDS.get(name, "its records")
    try:
        data = jsonin.loads(raw)
    except ValueError:
        return f"every record in it ({what}...)"
    if not isinstance(data, dict):
        return f"every record in it ({what}...)"
    if name == "originals.json":
        keys = list((data.get("originals") if isinstance(data.get("originals"), dict) else data).keys())
        keys = [k for k in keys if k != "format"]
    elif name == "ownership.json":
        damon = data.get("damon") if isinstance(data.get("damon"), dict) else {}
        kds = damon.get("kdamonds") if isinstance(damon.get("kdamonds"), dict) else {}
        dax = data.get("dax") if isinstance(data.get("dax"), dict) else {}
        keys = [f"kdamond {k}" for k in kds] + [str(d) for d in dax]
    elif name == "drift.json":
        items = data.get("items") if isinstance(data.get("items"), dict) else {}
        keys = list(items)
    else:
        return what
    shown = ", ".join(keys[:6]) + (f" and {len(keys) - 6} more" if len(keys) > 6 else "")
    return f"{what} {shown}" if keys else f"{what} nothing"


def resolved_record(loaded: Any) -> dict[str, Any]:
    """The validated profile as the last-applied record keeps it (``resolved``)."""
    from ..profile.resolved import to_record

    return to_record(loaded)

