"""``cxl list`` (cxl-cli) against the sysfs walk of :mod:`nodeagent.facts.cxl`.

Run only where cxl-cli is installed, and only ``cxl list -M -D -R -i`` (read-only: memdevs, root decoders,
regions, idle ones included). Its JSON is parsed flat or nested (``-vvv``), as captured from cxl-cli 76.1 in the
real-kernel tier (``tests/realkernel/captured/cxl-list-*.json``); each disagreement is one line of the facts.
"""

from __future__ import annotations

import os
from typing import Any

from ..host import Host
from ..util import jsonin
from ..util.errors import CommandError
from .cxl import CxlFacts, _sort_key


def parse_cxl_list(text: str) -> dict[str, dict[str, dict[str, Any]]]:
    """``cxl list -M -D -R -i`` (flat lists, or ``-vvv``'s nested tree) → {"memdevs"|"decoders"|"regions":
    {name: object}}. cxl-cli prints nothing but a warning, or ``[]``, when it finds nothing."""
    text = text.strip()
    out: dict[str, dict[str, dict[str, Any]]] = {"memdevs": {}, "decoders": {}, "regions": {}}
    if not text:
        return out
    key_of = {"memdev": "memdevs", "decoder": "decoders", "region": "regions"}

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for x in node:
                walk(x)
        elif isinstance(node, dict):
            for k, kind in key_of.items():
                if isinstance(node.get(k), str):
                    out[kind][node[k]] = node
            for v in node.values():
                if isinstance(v, list | dict):
                    walk(v)

    walk(jsonin.loads(text))
    return out


def cross_check(facts: CxlFacts, listing: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """Where ``cxl list`` and the sysfs walk disagree, one line each (empty: they agree)."""
    diffs = []
    mine = {m.name: m for m in facts.memdevs}
    for name in sorted(set(mine) | set(listing["memdevs"]), key=_sort_key):
        m, c = mine.get(name), listing["memdevs"].get(name)
        if m is None or c is None:
            diffs.append(f"memdev {name}: {'only cxl list' if m is None else 'only sysfs'} shows it")
            continue
        for field_name, theirs in (("ram_size", c.get("ram_size", 0)), ("pmem_size", c.get("pmem_size", 0)),
                                   ("serial", c.get("serial")), ("pci", c.get("host"))):
            if getattr(m, field_name) != theirs:
                diffs.append(f"memdev {name}: {field_name} {getattr(m, field_name)!r} in sysfs, {theirs!r} in cxl list")
    regions = {r.name: r for r in facts.regions}
    for name in sorted(set(regions) | set(listing["regions"]), key=_sort_key):
        r, c = regions.get(name), listing["regions"].get(name)
        if r is None or c is None:
            diffs.append(f"region {name}: {'only cxl list' if r is None else 'only sysfs'} shows it")
            continue
        for field_name, ours, theirs in (("size", r.size, c.get("size")),
                                         ("interleave_ways", r.interleave_ways, c.get("interleave_ways")),
                                         ("decode_state", r.decode_state, c.get("decode_state"))):
            if theirs is not None and ours != theirs:
                diffs.append(f"region {name}: {field_name} {ours!r} in sysfs, {theirs!r} in cxl list")
    missing = sorted(set(listing["decoders"]) - {d.name for d in facts.decoders}, key=_sort_key)
    diffs += [f"decoder {n}: only cxl list shows it" for n in missing]
    return diffs


def cli_check(host: Host, facts: CxlFacts) -> tuple[str | None, list[str]]:
    exe = host.commands.which("cxl")
    if exe is None or not facts.present:
        return None, []
    shown = exe if host.is_real else "/" + os.path.relpath(exe, host.root_dir)
    try:
        res = host.run(["cxl", "list", "-M", "-D", "-R", "-i"], timeout=30)
    except CommandError as exc:
        return shown, [f"cxl list could not run: {exc}"]
    if res.returncode != 0:
        return shown, [f"cxl list exited {res.returncode}: {res.stderr.strip()[-200:]}"]
    try:
        listing = parse_cxl_list(res.stdout)
    except (ValueError, RecursionError) as exc:  # RecursionError: walking a document nested just short of too deep
        return shown, [f"cxl list printed no JSON ({exc})"]
    return shown, cross_check(facts, listing)
