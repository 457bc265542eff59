"""What nodeagent remembers about a node, under ``<root>/var/lib/nodeagent``.

- ``lock``: one run at a time (flock; a second run waits up to a bound, then names the holder's pid);
- ``last-applied.json``: profile name and digest, the merged document (``desired``) and the validated profile
  in its versioned plain form (``resolved``, :mod:`nodeagent.resolved`: drift uses it without YAML or pydantic),
  result, time;
- ``originals.json``: each setting's value before nodeagent first changed it (for ``revert``);
- ``ownership.json``: what nodeagent created (kdamonds, onlined devices), so it never touches what it did not;
- ``probes.json``: answers of commands only a reboot changes, for this boot (:mod:`nodeagent.host.boot_cache`).

Every file is written atomically (temp file, fsync, rename). A corrupt file is set aside as
``<name>.corrupt-<time>`` and reported, never a crash and never silently reset.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .host import Host
from .host.boot_cache import PERSIST

STATE_DIR = "/var/lib/nodeagent"


class StateStore:
    def __init__(self, host: Host) -> None:
        self.host = host
        self.warnings: list[str] = []
        self.writable = False  # set while a writing command holds the lock: only then is a corrupt file moved

    def path(self, name: str) -> str:
        return f"{STATE_DIR}/{name}"

    @contextmanager
    def locked(self, timeout: float = 60.0) -> Iterator[None]:
        with self.host.fs.lock(self.path("lock"), timeout):
            self.writable = True
            token = PERSIST.set(True)  # probes run while the lock is held are kept for this boot
            try:
                yield
            finally:
                PERSIST.reset(token)
                self.writable = False

    def load(self, name: str) -> dict[str, Any]:
        raw = self.host.read_opt(self.path(name))
        if raw is None or not raw.strip():
            return {}
        try:
            data = json.loads(raw)
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            return data
        except ValueError as exc:
            if not self.writable:
                self._warn(f"state file {self.path(name)} is corrupt ({exc}); ignored here, set aside by the "
                           "next apply")
                return {}
            aside = f"{name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}"
            self.host.fs.write_file_atomic(self.path(aside), raw)
            self.host.fs.write_file_atomic(self.path(name), "{}\n")
            self._warn(f"state file {self.path(name)} was corrupt ({exc}); set aside as {self.path(aside)}")
            return {}

    def _warn(self, msg: str) -> None:
        if msg not in self.warnings:
            self.warnings.append(msg)

    def save(self, name: str, data: dict[str, Any]) -> None:
        self.host.fs.write_file_atomic(self.path(name), json.dumps(data, indent=2, sort_keys=True) + "\n")

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
                for name in ("last-applied.json", "originals.json", "ownership.json")}


def _now() -> str:
    from .timestamps import rfc3339

    return rfc3339()


def resolved_record(loaded: Any) -> dict[str, Any]:
    """The validated profile as the last-applied record keeps it (``resolved``)."""
    from .resolved import to_record

    return to_record(loaded)
