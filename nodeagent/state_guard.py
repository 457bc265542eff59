"""Crash safety of the state directory: intent before action, space held for the records, bad files set aside.

**Intent before action.** An apply keeps ``progress.json`` while it runs (:class:`Progress`): before each change
the change it is about to make (``in_flight``), after it the outcome (``done``). Each write is atomic and
fsynced before the change starts, so whatever stops the run — SIGKILL, a power cut, a full disk — the record on
disk names every change made, the one in progress included. A clean end removes the file; the next apply that
finds one journals what the unfinished run did (:func:`unfinished`, an ``apply`` event with status
``incomplete``) and then finishes the job or cleans up, as its plan says. Multi-write changes also record
themselves in ``ownership.json`` before their first write (a kdamond "building", a DAX device being
reconfigured or onlined), so a half-built kdamond is nodeagent's to finish, never a foreign one.

**Space before the first change.** :func:`reserve` allocates (``posix_fallocate``) room for every record the
run will write in ``.reserve`` beside them, before anything is changed: a state directory that is full or
read-only refuses the apply then, with nothing written. A record that meets ENOSPC later gives the reserve back
and is written again (:func:`save`).

**Bad state is set aside.** :func:`validate` checks each record of a file against its shape; a file that is not
JSON, or records of the wrong shape, are moved aside (``<name>.corrupt-<time>-<pid>``) with a warning naming the
file and what was lost, and the rest is kept — never an internal error, never silently reset.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .errors import HostError, NoSpaceError

if TYPE_CHECKING:
    from .state import StateStore

PROGRESS = "progress.json"
RESERVE = ".reserve"
FORMAT = 1
#: Beyond the records' own size: the journal's event, the ownership records of what gets built, fs overhead.
SLACK = 64 * 1024


# -- intent before action ----------------------------------------------------------------------------------------
class Progress:
    """The running apply's record (see the module). Its writes raise :class:`HostError`: the caller makes no
    change whose intent could not be written."""

    def __init__(self, store: StateStore, what: str, profile: str | None, digest: str | None,
                 planned: list[dict[str, Any]]) -> None:
        self.store = store
        self.record: dict[str, Any] = {
            "format": FORMAT, "what": what, "pid": os.getpid(), "started": _now(), "profile": profile,
            "profile_digest": digest, "planned": planned, "done": [], "in_flight": None}

    def begin(self) -> None:
        self._save()

    def intent(self, kind: str, target: str, op: str) -> None:
        """Before the change's first write."""
        self.record["in_flight"] = {"kind": kind, "target": target, "op": op, "since": _now()}
        self._save()

    def done(self, outcome: dict[str, Any]) -> None:
        """After the change, whatever its outcome."""
        self.record["done"].append(outcome)
        self.record["in_flight"] = None
        self._save()

    def note(self, outcome: dict[str, Any]) -> None:
        """An outcome with no write (skipped, blocked): kept with the next write of the record."""
        self.record["done"].append(outcome)

    def end(self) -> None:
        """The run recorded its result: the progress record goes."""
        self.store.host.fs.remove(self.store.path(PROGRESS))

    def _save(self) -> None:
        save(self.store, PROGRESS, self.record)


def unfinished(store: StateStore) -> dict[str, Any] | None:
    """The progress record a run left without finishing (it was killed, or could not write its result), as an
    ``apply`` journal event with status ``incomplete``; None when there is none. Set aside when unreadable."""
    rec = store.load(PROGRESS)
    if not rec:
        return None
    done = [o for o in rec.get("done") or [] if isinstance(o, dict)]
    flight = rec.get("in_flight") if isinstance(rec.get("in_flight"), dict) else None
    applied = [o.get("target") for o in done if o.get("status") == "applied"]
    where = (f"while making {flight.get('target')} ({flight.get('op')}, since {flight.get('since')})" if flight
             else "between two changes, or before writing its result")
    message = (f"the {rec.get('what', 'apply')} started {rec.get('started', '?')} by pid {rec.get('pid', '?')} did not "
               f"finish: it stopped {where}; {len(applied)} change(s) had been made"
               + (f" ({', '.join(str(t) for t in applied)})" if applied else ""))
    return {"event": rec.get("what", "apply"), "status": "incomplete", "profile": rec.get("profile"),
            "profile_digest": rec.get("profile_digest"), "started": rec.get("started"), "pid": rec.get("pid"),
            "changes": done, "in_flight": flight, "message": message}


# -- space before the first change ---------------------------------------------------------------------------------
def estimate(records: list[Any]) -> int:
    """Bytes to hold for writing ``records`` (each replaced atomically: old and new side by side), plus slack."""
    return sum(2 * len(json.dumps(r, indent=2, sort_keys=True, default=str)) for r in records) + SLACK


def reserve(store: StateStore, nbytes: int) -> None:
    """Hold ``nbytes`` in the state directory (see the module). :class:`HostError` (ENOSPC, EROFS...) when it
    cannot: the caller refuses before its first change."""
    try:
        store.host.fs.reserve(store.path(RESERVE), nbytes)
    except HostError:
        release(store)
        raise


def release(store: StateStore) -> bool:
    try:
        return store.host.fs.remove(store.path(RESERVE))
    except HostError:
        return False


def save(store: StateStore, name: str, data: dict[str, Any]) -> None:
    """``store.save``, and once more after giving back the reserve when the filesystem is full."""
    try:
        store.save(name, data)
    except NoSpaceError:
        if not release(store):
            raise
        store.save(name, data)


def guarded(store: StateStore, step: Callable[[], None]) -> None:
    """Run a record-writing ``step``; on ENOSPC give back the reserve and run it once more."""
    try:
        step()
    except NoSpaceError:
        if not release(store):
            raise
        step()


# -- bad state set aside -------------------------------------------------------------------------------------------
def _is_records(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, dict) for v in value.values())


def _records(data: dict[str, Any], keep: Callable[[str, Any], bool], what: str) -> tuple[dict[str, Any], list[str]]:
    good = {k: v for k, v in data.items() if keep(k, v)}
    return good, [f"{what} {k}" for k in data if k not in good]


def _originals(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    return _records(data, lambda k, v: isinstance(v, dict) and "value" in v
                    and isinstance(v.get("path", ""), str | None), "the original of")


def _ownership(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    lost: list[str] = []
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key == "damon":
            kds = value.get("kdamonds") if isinstance(value, dict) else None
            if not isinstance(value, dict) or not isinstance(kds, dict):
                lost.append("the record of nodeagent's kdamonds")
                continue
            good, bad = _records(kds, lambda k, v: str(k).isdigit() and isinstance(v, dict)
                                 and isinstance(v.get("config", {}), dict)
                                 and isinstance(v.get("name"), str | None)
                                 and (v.get("pid") is None or isinstance(v.get("pid"), int)), "nodeagent's kdamond")
            out[key] = {**value, "kdamonds": good}
            lost += bad
        elif key == "dax":
            if not _is_records(value):
                good, bad = (_records(value, lambda k, v: isinstance(v, dict), "nodeagent's DAX device")
                             if isinstance(value, dict) else ({}, ["the record of nodeagent's DAX devices"]))
                out[key] = good
                lost += bad
            else:
                out[key] = value
        else:
            out[key] = value
    return out, lost


def _drift(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    out = dict(data)
    lost: list[str] = []
    for key, what in (("items", "the open drift item"), ("cannot_be_done", "the cannot-be-done item")):
        value = data.get(key, {})
        if not isinstance(value, dict):
            out[key] = {}
            lost.append(f"every {what.removeprefix('the ')}")
            continue
        out[key], bad = _records(value, lambda k, v: isinstance(v, dict), what)
        lost += bad
    return out, lost


def _last_applied(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    lost: list[str] = []
    out = dict(data)
    for key, kind in (("profile", str), ("status", str), ("profile_digest", str), ("time", str)):
        if key in data and not isinstance(data[key], kind):
            out.pop(key)
            lost.append(f"its {key}")
    for key in ("outcomes", "verify_errors", "problems"):
        if key in data and not (isinstance(data[key], list)
                                and all(isinstance(x, dict | str) for x in data[key])):
            out[key] = []
            lost.append(f"its {key}")
    for key in ("resolved", "desired"):
        if key in data and not isinstance(data[key], dict):
            out.pop(key)
            lost.append(f"the profile it applied ({key})")
    return out, lost


def _progress(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    ok = isinstance(data.get("done", []), list) and isinstance(data.get("in_flight"), dict | None)
    return (data, []) if ok else ({}, ["the record of an unfinished apply"])


def _checks(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    ok = isinstance(data.get("results", []), list) and all(isinstance(r, dict) for r in data.get("results", []))
    return (data, []) if ok else ({}, ["the last checks' results"])


VALIDATORS: dict[str, Callable[[dict[str, Any]], tuple[dict[str, Any], list[str]]]] = {
    "originals.json": _originals, "ownership.json": _ownership, "drift.json": _drift,
    "last-applied.json": _last_applied, PROGRESS: _progress, "last-checks.json": _checks,
}


def validate(name: str, data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``(what is kept, what was lost)`` of file ``name``'s records (files without a validator: all kept)."""
    check = VALIDATORS.get(name)
    return check(data) if check is not None else (data, [])


def aside_name(name: str) -> str:
    return f"{name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"


def _now() -> str:
    from .timestamps import rfc3339

    return rfc3339()
