"""One timestamp format everywhere nodeagent writes or prints one: RFC 3339 in UTC, ``2026-12-01T08:29:31Z``.

State records, the journal, facts files and every command's output use it, so a time read in one place can be
compared with (and parsed like) a time read in another. :func:`parse` also reads what older versions wrote:
the ``+0000`` / ``+00:00`` spellings and the Unix timestamps ``drift.json`` kept.
"""

from __future__ import annotations

import time
from datetime import datetime


def rfc3339(ts: float | None = None) -> str:
    """``ts`` (default: now) as ``YYYY-MM-DDTHH:MM:SSZ``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if ts is None else ts))


def parse(value: object) -> float | None:
    """A Unix timestamp from an RFC 3339 time with a zone (``Z``, ``+0000`` or ``+HH:MM``, fractions allowed) or
    from a number; ``None`` for anything else (a time without a zone is ambiguous: not a time nodeagent wrote)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str) or len(value) < 20 or value[10] not in "Tt ":
        return None
    try:
        dt = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    return dt.timestamp() if dt.tzinfo is not None else None
