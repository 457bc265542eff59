"""``ownership.json`` (:class:`Ownership`): what nodeagent created or changed on the node, one typed record per
object — DAX devices (:class:`OwnedDevice`), kdamond slots (:class:`OwnedKdamond`), CXL regions
(:class:`OwnedRegion`) — so that it never touches what it did not.

The kinds read and write these records (``kinds/dax``, ``kinds/damon``, ``kinds/cxl_region``), but they live here:
the store validates the whole file when it reads it (and salvages the good records of a damaged one), the planner,
``status``, the metrics and the scheme statistics read it without loading any kind, and the state imports nothing
above the host (docs/architecture.md).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .records import FORMAT, Record, _version
from .shape import ShapeError, _int, _list, _obj, _stamp, _str


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


class Ownership(Record):
    """What nodeagent created or changed on the node: DAX devices (by name), kdamond slots (by index) and CXL
    regions (by their memdevs' identities, :func:`nodeagent.kinds.cxl_region.names.key`; under
    ``cxl_region``, where a format-1 file of the CXL regions' first version kept them too)."""

    __slots__ = ("dax", "kdamonds", "regions")
    FILE = "ownership.json"
    KEYED = (("damon", "kdamonds"), ("dax",), ("cxl_region",))
    HOLDS = "nodeagent's record of"

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
    def held(cls, data: dict[str, Any]) -> list[str] | None:
        damon = data.get("damon") if isinstance(data.get("damon"), dict) else {}
        kds = damon.get("kdamonds") if isinstance(damon.get("kdamonds"), dict) else {}
        dax = data.get("dax") if isinstance(data.get("dax"), dict) else {}
        regions = data.get("cxl_region") if isinstance(data.get("cxl_region"), dict) else {}
        return [f"kdamond {k}" for k in kds] + [str(d) for d in dax] + [f"CXL region {r}" for r in regions]

    @classmethod
    def coerce(cls, value: Ownership | dict[str, Any] | None) -> Ownership:
        """An :class:`Ownership` from itself or from its JSON (a facts document's ``state``)."""
        if isinstance(value, Ownership):
            return value
        return cls.from_json(value) if value else cls()
