"""One timestamp format everywhere nodeagent writes or prints one: RFC 3339 in UTC, ``2026-12-01T08:29:31Z``.

State records, the journal, facts files and every command's output use it, so a time read in one place can be
compared with (and parsed like) a time read in another. :func:`parse` also reads what older versions wrote:
the ``+0000`` / ``+00:00`` spellings and the Unix timestamps ``drift.json`` kept.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime


def rfc3339(ts: float | None = None) -> str:
    """``ts`` (default: now) as ``YYYY-MM-DDTHH:MM:SSZ``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if ts is None else ts))


def parse(value: object) -> float | None:
    """A Unix timestamp from an RFC 3339 time (``Z``, ``+0000`` or ``+HH:MM``, fractions allowed) or from a
    number; ``None`` for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str) or len(value) < 19:
        return None
    text = value.strip()
    try:
        base = time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None
    rest = text[19:]
    frac = 0.0
    if rest.startswith("."):
        digits = rest[1:len(rest) - len(rest[1:].lstrip("0123456789"))]
        rest = rest[1 + len(digits):]
        frac = float("0." + digits) if digits else 0.0
    if rest in ("Z", "z", "+0000", "+00:00", "-00:00"):
        offset = 0
    elif len(rest) in (5, 6) and rest[0] in "+-" and rest[1:3].isdigit() and rest[-2:].isdigit():
        offset = (int(rest[1:3]) * 3600 + int(rest[-2:]) * 60) * (1 if rest[0] == "+" else -1)
    else:
        return None
    return datetime(*base[:6], tzinfo=UTC).timestamp() - offset + frac
