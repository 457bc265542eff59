"""Scheme statistics of nodeagent's own kdamonds, for ``status`` and the metrics textfile.

The kernel updates the ``stats/`` files only when asked (``update_schemes_stats`` written to ``state``) or,
from 6.17, every ``refresh_ms`` by itself. Asking is a write, so it belongs to commands that may write
(``apply``, ``status``, ``drift --metrics``) and never to ``facts`` or ``plan``; and it is done only for
kdamonds nodeagent owns (recorded pid = running pid), never for anyone else's::

    from nodeagent.kinds.damon.stats import refresh_stats, read_stats, scheme_rows
    notes = refresh_stats(host, ownership)          # ownership: StateStore.ownership()
    stats = read_stats(gather(host), ownership)     # {"demote-cold-node0": [{"nr_tried": 18, ...}], ...}
    owned = scheme_rows(damon_facts(host), ownership)  # kdamonds, one row per scheme, notes
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...facts import Facts
from ...facts.damon import KDAMONDS, from_facts, retry_busy
from ...facts.damon import gather as gather_damon
from ...host import Host
from ...state import Ownership
from .dest_free import PAUSED
from .model import STATS
from .plan import owned_kdamonds


@dataclass
class OwnedSchemes:
    """nodeagent's kdamonds as the node shows them now, with one row per scheme (``kdamond``, ``name``,
    ``context``, ``scheme``, ``action`` and the counters the kernel has), and why a record is not listed."""

    kdamonds: dict[int, dict[str, Any]] = field(default_factory=dict)  # index → name, pid, state
    schemes: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def damon_facts(host: Host) -> Facts:
    """Facts holding only the DAMON section (read-only): all that ownership checks and statistics need."""
    return Facts(hostname="", kernel_release=host.read_opt("/proc/sys/kernel/osrelease") or "", knobs={},
                 block_size_bytes=None, possible_nodes=[], nodes=[], tiers={},
                 sections={"damon": gather_damon(host)})


def refresh_stats(host: Host, ownership: Ownership | dict[str, Any]) -> list[str]:
    """Ask the kernel to refresh the statistics of nodeagent's running kdamonds. Returns what was done.

    A kdamond with ``refresh_ms`` set refreshes itself and is not asked. Ownership is checked against the
    node right before writing (read-only gathering of the DAMON tree first)."""
    damon = from_facts(damon_facts(host))
    owned, notes = owned_kdamonds(damon, ownership)
    done = list(notes)
    for index, o in sorted(owned.items()):
        if o.name is None:
            continue  # a slot nodeagent emptied: nothing runs there
        kd = o.kdamond
        if not kd.running:
            done.append(f"{o.name}: kdamond {index} is stopped: statistics are as it left them")
            continue
        if int(kd.config.get("refresh_ms", "0") or 0) > 0:
            done.append(f"{o.name}: kdamond {index} refreshes itself every {kd.config['refresh_ms']} ms")
            continue
        retry_busy(host.write, f"{KDAMONDS}/{index}/state", "update_schemes_stats")
        done.append(f"{o.name}: kdamond {index} statistics refreshed")
    return done


def scheme_rows(facts: Facts, ownership: Ownership | dict[str, Any]) -> OwnedSchemes:
    """nodeagent's kdamonds and their schemes' statistics as ``facts`` show them (no write)."""
    damon = from_facts(facts)
    owned, notes = owned_kdamonds(damon, ownership)
    out = OwnedSchemes(notes=list(notes))
    for key, rec in sorted(Ownership.coerce(ownership).kdamonds.items()):
        if rec.name is not None and damon.kdamond(key) is None:
            out.notes.append(f"{rec.name}: kdamond {key}, recorded by nodeagent, no longer exists (the node "
                             "rebooted, or someone rewrote nr_kdamonds): apply the profile again")
    for index, o in sorted(owned.items()):
        if o.name is None:
            continue
        kd = o.kdamond
        out.kdamonds[index] = {"name": o.name, "pid": o.pid, "state": kd.state}
        schemes = kd.tree.context.schemes if kd.tree.context is not None else ()
        per = {i: {"action": sc.action, "paused": sc.access.sz.min == int(PAUSED),  # dest_free (or priming) holds it
                   **{k: v for k, v in (sc.stats or {}).items() if k in STATS}} for i, sc in enumerate(schemes)}
        out.schemes += [{"kdamond": index, "name": o.name, "context": 0, "scheme": i, **per[i]} for i in sorted(per)]
    return out


def read_stats(facts: Facts, ownership: Ownership | dict[str, Any]) -> dict[str, list[dict[str, int]]]:
    """``{kdamond name: [per scheme: {stat: value}]}`` for nodeagent's kdamonds, as the facts show them."""
    rows = scheme_rows(facts, ownership)
    out: dict[str, list[dict[str, int]]] = {kd["name"]: [] for kd in rows.kdamonds.values()}
    for r in rows.schemes:
        stats = {k: v for k, v in r.items() if k in STATS}
        if stats:
            out[r["name"]].append(stats)
    return out
