"""One timestamp format everywhere nodeagent writes or prints one: RFC 3339 in UTC, ``2026-12-01T08:29:31Z``.

State records, the journal, facts files and every command's output use it, so a time read in one place can be
compared with (and parsed like) a time read in another. Readers still accept the older ``+0000`` spelling.
"""

from __future__ import annotations

import time


def rfc3339(ts: float | None = None) -> str:
    """``ts`` (default: now) as ``YYYY-MM-DDTHH:MM:SSZ``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if ts is None else ts))
