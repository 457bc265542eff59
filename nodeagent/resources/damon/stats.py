"""Scheme statistics of nodeagent's own kdamonds, for ``status`` and ``drift --metrics``.

The kernel updates the ``stats/`` files only when asked (``update_schemes_stats`` written to ``state``) or,
from 6.17, every ``refresh_ms`` by itself. Asking is a write, so it belongs to commands that may write
(``apply``, ``status``, ``drift --metrics``) and never to ``facts`` or ``plan``; and it is done only for
kdamonds nodeagent owns (recorded pid = running pid), never for anyone else's::

    from nodeagent.resources.damon.stats import refresh_stats, read_stats
    notes = refresh_stats(host, ownership)          # ownership: StateStore.load("ownership.json")
    stats = read_stats(gather(host), ownership)     # {"demote-cold-node0": [{"nr_tried": 18, ...}], ...}
"""

from __future__ import annotations

import re
from typing import Any

from ...facts import Facts
from ...facts.damon import KDAMONDS, from_facts, retry_busy
from ...facts.damon import gather as gather_damon
from ...host import Host
from .plan import owned_kdamonds

STATS = ("nr_tried", "sz_tried", "nr_applied", "sz_applied", "qt_exceeds", "sz_ops_filter_passed")


def refresh_stats(host: Host, ownership: dict[str, Any]) -> list[str]:
    """Ask the kernel to refresh the statistics of nodeagent's running kdamonds. Returns what was done.

    A kdamond with ``refresh_ms`` set refreshes itself and is not asked. Ownership is checked against the
    node right before writing (read-only gathering of the DAMON tree first)."""
    facts = Facts(hostname="", kernel_release=host.read_opt("/proc/sys/kernel/osrelease") or "", knobs={},
                  block_size_bytes=None, possible_nodes=[], nodes=[], tiers={},
                  sections={"damon": gather_damon(host)})  # the DAMON section is all this needs
    damon = from_facts(facts)
    owned, notes = owned_kdamonds(damon, ownership)
    done = list(notes)
    for index, o in sorted(owned.items()):
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


def read_stats(facts: Facts, ownership: dict[str, Any]) -> dict[str, list[dict[str, int]]]:
    """``{kdamond name: [per scheme: {stat: value}]}`` for nodeagent's kdamonds, as the facts show them."""
    damon = from_facts(facts)
    owned, _ = owned_kdamonds(damon, ownership)
    out: dict[str, list[dict[str, int]]] = {}
    for _, o in sorted(owned.items()):
        per: dict[int, dict[str, int]] = {}
        for path, value in o.kdamond.status.items():
            m = re.fullmatch(r"contexts/0/schemes/(\d+)/stats/(\w+)", path)
            if m and m.group(2) in STATS and value.strip().isdigit():
                per.setdefault(int(m.group(1)), {})[m.group(2)] = int(value)
        out[o.name] = [per[i] for i in sorted(per)]
    return out
