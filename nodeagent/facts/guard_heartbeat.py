"""Whether ``nodeagent guard`` is keeping this node's dest_free schemes (fact section ``guard``).

A guard (``nodeagent guard``, nodeagent-guard.service, or ``nodeagent run --apply``) writes a heartbeat into the
state directory when it plans its guarded schemes (at start, every ``refresh`` and after each apply): its pid,
the profile and the time. The section reads it back, read-only, with its age at gathering time; a guard whose
heartbeat is older than :data:`STALE` seconds (it stopped, or hangs) does not count. The DAMON plan warns when a
profile has dest_free schemes and no guard counts: nothing would pause them as their destination fills.
"""

from __future__ import annotations

import time
from typing import Any

from ..host import Host
from ..util import jsonin
from ..util.dataclass import dataclass
from . import SECTIONS, Facts

HEARTBEAT = "/var/lib/nodeagent/guard.json"
#: Three refresh periods of the default guard (30 s each).
STALE = 90.0


@dataclass(frozen=True)
class GuardFacts:
    pid: int | None = None
    profile: str | None = None
    age: float | None = None  # seconds since its last heartbeat, when gathered
    known: bool = True  # False: facts gathered before this section existed

    @property
    def running(self) -> bool:
        return self.age is not None and self.age <= STALE


def gather(host: Host) -> dict[str, Any]:
    text = host.read_opt(HEARTBEAT)
    try:
        beat = jsonin.loads(text) if text else None
    except ValueError:
        beat = None
    if not isinstance(beat, dict) or not isinstance(beat.get("time"), int | float):
        return {"pid": None, "profile": None, "age": None}
    pid = beat.get("pid")
    return {"pid": pid if isinstance(pid, int) else None, "profile": str(beat.get("profile") or "") or None,
            "age": round(max(time.time() - float(beat["time"]), 0.0), 1)}


def from_facts(facts: Facts) -> GuardFacts:
    data = facts.sections.get("guard")
    if not isinstance(data, dict):
        return GuardFacts(known=False)
    age = data.get("age")
    return GuardFacts(data.get("pid"), data.get("profile"), float(age) if age is not None else None)


SECTIONS["guard"] = gather
