"""The history journal: what nodeagent did and saw on a node, as JSON lines under the state directory.

``/var/lib/nodeagent/journal.jsonl`` gets one line per event — ``apply`` (every apply, scoped or not, with its
result and the changes it made), ``drift`` (a setting first seen away from the profile, or seen with a new
value), ``resolved`` (a drifted setting back as the profile wants), ``revert`` and ``hotplug``. It is bounded:
when a write would take the file past ``max_bytes`` (1 MiB) it is rotated to ``journal.jsonl.1`` and
``.2`` (three files in all; the oldest falls off), so a node that drifts every five minutes for a year still
keeps a few weeks of history and never fills its disk.

Writers hold the state lock (apply, ``drift --record``, revert); readers (``nodeagent history``) do not need it
and skip a torn last line rather than fail.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from ..host import Host
from ..util import jsonin
from ..util.errors import UsageError
from ..util.timestamps import rfc3339
from .store import JOURNAL

MAX_BYTES = 1024 * 1024
KEEP = 3  # files: journal.jsonl, journal.jsonl.1, journal.jsonl.2

EVENTS = ("apply", "drift", "cannot-be-done", "resolved", "revert", "hotplug")


def iso(ts: float) -> str:
    return rfc3339(ts)


class Journal:
    def __init__(self, host: Host, path: str = JOURNAL, *, max_bytes: int = MAX_BYTES, keep: int = KEEP,
                 clock: Callable[[], float] = time.time) -> None:
        self.host = host
        self.path = path
        self.max_bytes = max_bytes
        self.keep = max(keep, 1)
        self.clock = clock
        self.skipped = 0  # unreadable lines met by the last read

    def files(self) -> list[str]:
        """Every journal file, oldest first."""
        return [f"{self.path}.{i}" for i in range(self.keep - 1, 0, -1)] + [self.path]

    # -- writing -----------------------------------------------------------------------------------------
    def append(self, events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """Stamp and append ``events`` (the caller holds the state lock). Returns them as written."""
        now = self.clock()
        stamped = [{"ts": round(now, 3), "time": iso(now), **e} for e in events]
        if not stamped:
            return []
        data = "".join(json.dumps(e, sort_keys=True, default=str) + "\n" for e in stamped)
        size = self.host.fs.size(self.path) or 0
        if size and size + len(data.encode()) > self.max_bytes:
            self._rotate()
        self.host.fs.append(self.path, data)
        return stamped

    def _rotate(self) -> None:
        names = self.files()  # oldest first; the oldest is overwritten by the next one down
        for older, newer in zip(names, names[1:], strict=False):
            if self.host.fs.exists(newer):
                self.host.fs.rename(newer, older)

    # -- reading -----------------------------------------------------------------------------------------
    def read(self) -> Iterator[dict[str, Any]]:
        """Every event, oldest first. Lines that do not parse (a torn write) are counted in ``skipped``."""
        self.skipped = 0
        for name in self.files():
            text = self.host.fs.read_own_opt(name)  # a hard link to another file is refused
            if not text:
                continue
            for line in text.splitlines():
                if not line.strip():
                    continue
                try:
                    event = jsonin.loads(line)
                except ValueError:
                    self.skipped += 1
                    continue
                if well_formed(event):
                    yield event
                else:
                    self.skipped += 1

    def query(self, *, resource: str | None = None, since: float | None = None, event: str | None = None,
              target: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """Events matching every given filter, oldest first; ``limit`` keeps the newest ones."""
        out = [e for e in self.read()
               if (since is None or float(e.get("ts", 0)) >= since)
               and (event is None or e.get("event") == event)
               and (resource is None or resource in resources_of(e))
               and (target is None or target in targets_of(e))]
        return out[-limit:] if limit else out


#: Fields of an event that are text when present (null counts as absent), and those that are lists of text.
_TEXT = ("event", "time", "resource", "target", "profile", "status", "device", "action", "subsystem")
_TEXTS = ("scope", "reverted")


def well_formed(event: Any) -> bool:
    """An event as nodeagent writes it, as far as readers rely on it: an object with a finite number ``ts``, an
    ``event`` name, text where text is read and lists where lists are; ``changes`` a list of objects with text
    targets. A line that parses as JSON but is none of that (``{"ts": "x"}``, ``"changes": "abc"``) is skipped like
    a torn one, never a crash of ``history`` or ``status``."""
    if not isinstance(event, dict):
        return False
    ts = event.get("ts")
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
        return False
    if not isinstance(event.get("event"), str):
        return False
    if any(event.get(k) is not None and not isinstance(event[k], str) for k in _TEXT):
        return False
    if any(k in event and not (isinstance(event[k], list) and all(isinstance(x, str) for x in event[k]))
           for k in _TEXTS):
        return False
    changes = event.get("changes", [])
    return isinstance(changes, list) and all(
        isinstance(c, dict) and all(c.get(k) is None or isinstance(c[k], str) for k in ("kind", "target", "status"))
        for c in changes)


def resources_of(event: dict[str, Any]) -> set[str]:
    """The resource kinds an event concerns: its own ``resource``, or those of the changes it lists."""
    kinds = {event["resource"]} if event.get("resource") else set()
    kinds |= {c.get("kind") for c in event.get("changes", []) if isinstance(c, dict) and c.get("kind")}
    return kinds


def targets_of(event: dict[str, Any]) -> set[str]:
    names = {event["target"]} if event.get("target") else set()
    names |= {c.get("target") for c in event.get("changes", []) if isinstance(c, dict) and c.get("target")}
    return names


_RELATIVE = re.compile(r"(\d+(?:\.\d+)?)\s*(s|m|h|d|w)")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_since(text: str, now: float | None = None) -> float:
    """``--since``: a duration back from now (``90s``, ``30m``, ``2h``, ``7d``, ``1w``, or ``1h30m``), an ISO
    date or time (``2025-01-31``, ``2025-01-31T12:00``, with an optional zone; none means UTC), or a Unix
    timestamp. Returns a Unix timestamp."""
    now = time.time() if now is None else now
    t = text.strip()
    if t and _RELATIVE.sub("", t.replace(" ", "")) == "" and _RELATIVE.search(t):
        return now - sum(float(n) * _UNIT_SECONDS[u] for n, u in _RELATIVE.findall(t.replace(" ", "")))
    try:
        return float(t)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--since {text!r}: expected a duration (30m, 2h, 7d), an ISO time "
                         "(2025-01-31T12:00Z) or a Unix timestamp") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()
