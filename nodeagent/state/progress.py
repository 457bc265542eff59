"""``progress.json`` (:class:`Progress`): while an apply runs, what it is doing — each change before its first
write, each outcome after; one left behind is a run that never finished."""

from __future__ import annotations

from typing import Any

from .records import FORMAT, Record, _version
from .shape import _int, _list, _obj, _stamp, _str


class Progress(Record):
    """The running apply's record of what it does (intent before action): the changes planned, each outcome so
    far, and the change it is making (``in_flight``, written before that change's first write). Removed when the
    run has recorded its result; one left behind is a run that never finished (:meth:`StateStore.unfinished`)."""

    __slots__ = ("what", "pid", "started", "profile", "profile_digest", "planned", "done", "in_flight")
    FILE = "progress.json"
    HOLDS = "the record of an unfinished run"

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
