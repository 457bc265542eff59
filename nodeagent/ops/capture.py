"""A live snapshot of the node: its facts and nodeagent's records, for ``facts``, ``facts --save`` and reviews.

The facts package only reads the kernel; this is where they meet the state's records (and, on request, the
memory-bandwidth check's measurement), so neither facts nor the host imports the state or the checks.
"""

from __future__ import annotations

import time

from .. import __version__
from ..checks.bandwidth import measure_bandwidth
from ..facts import gather
from ..facts.hardware import disk_check_paths
from ..facts.hardware import gather as gather_hardware
from ..facts.snapshot import HARDWARE, Snapshot
from ..host import Host
from ..state import StateStore


def capture(host: Host, *, hardware: bool = False, bandwidth: bool = False,
            checked: tuple[str | None, list[str]] | None = None) -> Snapshot:
    """Gather the node's facts and nodeagent's records (read-only: a corrupt record is reported, not moved).
    ``hardware``: also the hardware facts (``facts``, ``facts --save``, reviews) — never for plan or drift;
    ``bandwidth``: and measure each node's memory bandwidth into them (seconds of copying); ``checked``: the
    profile whose disk-check paths to record (name, paths) — by default the last applied profile's, if any."""
    store = StateStore(host)
    state = store.load_all()
    facts = gather(host)
    if hardware:
        last = state.get("last_applied") or {}
        if checked is None and isinstance(last.get("desired"), dict) and last.get("status") != "reverted":
            checked = (str(last.get("profile")), disk_check_paths(last["desired"]))
        facts.sections[HARDWARE] = gather_hardware(host, checked=checked)
        if bandwidth:
            facts.sections[HARDWARE]["memory_bandwidth"] = measure_bandwidth(host, facts)
    return Snapshot("live", facts, state, tuple(store.warnings),
                    {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "nodeagent": __version__})
