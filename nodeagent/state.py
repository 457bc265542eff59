"""What nodeagent remembers about a node, under ``<root>/var/lib/nodeagent``.

- ``lock``: one run at a time (flock; a second run waits up to a bound, then names the holder's pid);
- ``last-applied.json``: profile name and digest, the merged document (``desired``) and the validated profile
  in its versioned plain form (``resolved``, :mod:`nodeagent.resolved`: drift uses it without YAML or pydantic),
  result, time;
- ``originals.json``: each setting's value before nodeagent first changed it (for ``revert``);
- ``ownership.json``: what nodeagent created (kdamonds, onlined devices), so it never touches what it did not;
- ``probes.json``: answers of commands only a reboot changes, for this boot (:mod:`nodeagent.host.boot_cache`).

Every file is written atomically (temp file, fsync, rename, fsync of the directory). Each record is checked
against its shape when read; a corrupt file, or records of the wrong shape, are set aside as
``<name>.corrupt-<time>-<pid>`` and reported with what was lost, never a crash and never silently reset. While an
apply runs, ``progress.json`` says what it is doing and ``.reserve`` holds room for its records
(:mod:`nodeagent.state_guard`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from . import state_guard
from .errors import HostError, NoSpaceError
from .host import Host
from .host.boot_cache import PERSIST

STATE_DIR = "/var/lib/nodeagent"


class StateStore:
    def __init__(self, host: Host) -> None:
        self.host = host
        self.warnings: list[str] = []
        self.writable = False  # set while a writing command holds the lock: only then is a corrupt file moved
        self.set_aside: dict[str, str] = {}  # file → what happened to it ("set aside as ...", "corrupt"), this run

    def path(self, name: str) -> str:
        return f"{STATE_DIR}/{name}"

    @contextmanager
    def locked(self, timeout: float = 60.0) -> Iterator[None]:
        with ExitStack() as stack:
            try:
                stack.enter_context(self.host.fs.lock(self.path("lock"), timeout))
            except HostError as exc:  # the state directory cannot even hold the lock: nothing has been done
                raise type(exc)(f"cannot take the state lock: {exc.message}; nothing was written", path=STATE_DIR,
                                hint=exc.hint or f"make {STATE_DIR} writable (a read-only filesystem? a full disk?), "
                                "then run again") from None
            self.writable = True
            token = PERSIST.set(True)  # probes run while the lock is held are kept for this boot
            try:
                yield
            finally:
                PERSIST.reset(token)
                self.writable = False

    def load(self, name: str) -> dict[str, Any]:
        """The file's records, each checked against its shape (:func:`nodeagent.state_guard.validate`). A file
        that is not a JSON object, or records of the wrong shape, are set aside (by a writing command) with a
        warning naming the file and what was lost — never an error, never silently reset."""
        raw = self.host.read_opt(self.path(name))
        if raw is None or not raw.strip():
            return {}
        try:
            data = json.loads(raw)
            if not isinstance(data, dict):
                raise ValueError(f"a JSON {type(data).__name__}, not an object")
        except ValueError as exc:
            return self._set_aside(name, raw, {}, f"is corrupt ({exc})", ["every record in it"])
        clean, lost = state_guard.validate(name, data)
        if lost:
            return self._set_aside(name, raw, clean, "has records of the wrong shape", lost)
        return data

    def _set_aside(self, name: str, raw: str, keep: dict[str, Any], what: str, lost: list[str]) -> dict[str, Any]:
        shown = ", ".join(lost[:6]) + (f" and {len(lost) - 6} more" if len(lost) > 6 else "")
        self.set_aside[name] = f"{self.path(name)}, which {what}"
        if not self.writable:
            self._warn(f"state file {self.path(name)} {what}: {shown} ignored here; set aside by the next apply")
            return keep
        aside = state_guard.aside_name(name)
        try:
            self.host.fs.write_file_atomic(self.path(aside), raw)
            self.save(name, keep)
        except HostError as exc:
            self._warn(f"state file {self.path(name)} {what}: {shown} ignored; it could not be set aside "
                       f"({exc.message})")
            return keep
        self.set_aside[name] = f"{self.path(name)}, which {what} (set aside as {self.path(aside)})"
        self._warn(f"state file {self.path(name)} {what}: set aside as {self.path(aside)}; lost: {shown}")
        return keep

    def _warn(self, msg: str) -> None:
        if msg not in self.warnings:
            self.warnings.append(msg)

    def save(self, name: str, data: dict[str, Any]) -> None:
        """Replace the file atomically (temp, fsync, rename, fsync of the directory). On a full filesystem the
        space an apply holds for its records (:func:`nodeagent.state_guard.reserve`) is given back, and the
        write tried once more."""
        text = json.dumps(data, indent=2, sort_keys=True) + "\n"
        try:
            self.host.fs.write_file_atomic(self.path(name), text)
        except NoSpaceError:
            if not state_guard.release(self):
                raise
            self.host.fs.write_file_atomic(self.path(name), text)

    # -- the records -----------------------------------------------------------------------------------
    def remember_originals(self, items: dict[str, dict[str, Any]]) -> None:
        """Record ``{target: {"path":..., "value":...}}`` for targets not yet recorded (first change wins)."""
        originals = self.load("originals.json")
        new = {k: v for k, v in items.items() if k not in originals}
        if new:
            originals.update({k: {**v, "recorded": _now()} for k, v in new.items()})
            self.save("originals.json", originals)

    def record_apply(self, record: dict[str, Any]) -> None:
        """``record``: profile, profile_digest, status, outcomes... with ``desired`` (the merged document, what
        older versions read) and ``resolved`` (:func:`resolved_record`, what drift plans against)."""
        self.save("last-applied.json", {**record, "time": _now()})

    def last_applied(self) -> dict[str, Any]:
        return self.load("last-applied.json")

    def load_all(self) -> dict[str, dict[str, Any]]:
        """Every record (so that a corrupt one is found before planning, not halfway through an apply)."""
        return {name.removesuffix(".json").replace("-", "_"): self.load(name)
                for name in ("last-applied.json", "originals.json", "ownership.json", "drift.json")}


def _now() -> str:
    from .timestamps import rfc3339

    return rfc3339()


def resolved_record(loaded: Any) -> dict[str, Any]:
    """The validated profile as the last-applied record keeps it (``resolved``)."""
    from .resolved import to_record

    return to_record(loaded)
