"""Scoped applies: reconcile only what one hot-plugged device affects (``apply --device NAME``).

A udev ``add`` event names a device (``dax1.0``, ``memory42``, ``region0``). The scope is that name plus what it
resolves to on the node:

- ``memoryN`` — also the DAX device whose range holds memory block N (its ``resource``/``size``);
- ``memory`` (the udev rule's single instance for every memory-block event, so that a 2 TiB hot-add of 16,384
  blocks starts one reconcile, not 16,384) — every DAX device bound to kmem (the word itself matches nothing);
- a CXL region, decoder or port (``region0``) — every DAX device below it in sysfs.
- a CXL memdev (``mem1``) — the regions it is in and their DAX devices; a region change lists its memdevs, its
  region and its DAX device among its ``devices`` (so a bare memdev's region is planned by ``apply --device
  mem1``).

A change is in scope when one of those names is among the devices it concerns (:attr:`Change.devices`, an
explicit field each kind fills in) or appears as a whole word in its target — ``memory.dax[expanders].dax1.0``
and a change with ``devices=("dax1.0",)`` are both in the scope of ``dax1.0``; ``dax1.01`` and ``memory420`` are
not in the scope of ``dax1.0`` and ``memory42``. Nothing else of a change (its path, its kind's ``data``) is
searched. A DAMON change lists the DAX devices behind the nodes its kdamond monitors or migrates to, so a
kdamond that pairs with a hot-added node is in that device's scope — unless it also ``needs`` a device whose
own change is not in the scope (its node would not be online when it starts).

Node-wide settings (kernel knobs) name no device and are not in a device's scope — a hot-plug event does not
re-apply them (``nodeagent-apply.service`` and ``apply`` do) — except the ones an in-scope change
``requires`` (:attr:`Change.requires`): onlining a DAX device needs ``memory.auto_online_blocks`` offline first, so when
that knob drifted its change comes along. The changes left out are listed in a warning of the scoped plan.
A scoped apply verifies within its scope: the engine re-plans the whole profile and restricts that plan the
same way, so what is left in scope is a verify error and what is out of scope stays for a full apply.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import replace

from ..facts.numa import read_block_size
from ..host import Host
from ..plan import Change, Plan

DAX_DEVICES = "/sys/bus/dax/devices"
KMEM = "/sys/bus/dax/drivers/kmem"


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![A-Za-z0-9_-]){re.escape(name)}(?![A-Za-z0-9_-]|\.\d)")


def in_scope(change: Change, names: Collection[str]) -> bool:
    """True when ``change`` concerns one of ``names``: one of its ``devices``, or its target naming one as a whole
    word (see the module docs)."""
    return bool(set(change.devices) & set(names)) or any(_pattern(n).search(change.target) for n in names)


def restrict(plan: Plan, names: Collection[str]) -> Plan:
    """The part of ``plan`` in scope: its changes and problems that concern one of ``names`` (among their
    ``devices``, or named in their target), and the changes
    those require (in plan order). Pure."""
    names = set(names)
    chosen = {i for i, c in enumerate(plan.changes) if in_scope(c, names)}
    while True:
        required = {t for i in chosen for t in plan.changes[i].requires}
        more = {i for i, c in enumerate(plan.changes) if c.target in required} - chosen
        if not more:
            break
        chosen |= more
    while True:  # a change that needs a change left out (a kdamond migrating to a device not onlined here) goes
        out = {c.target for i, c in enumerate(plan.changes) if i not in chosen}
        drop = {i for i in chosen if out & set(plan.changes[i].needs)}
        if not drop:
            break
        chosen -= drop
    changes = tuple(c for i, c in enumerate(plan.changes) if i in chosen)
    problems = tuple(p for p in plan.problems
                     if set(p.devices) & names or any(_pattern(n).search(p.target) for n in names))
    unchanged = tuple(u for u in plan.unchanged if any(_pattern(n).search(u) for n in names))
    left = [c.target for i, c in enumerate(plan.changes) if i not in chosen]
    warnings = plan.warnings
    if left:
        warnings += (f"not in the scope of {', '.join(sorted(names))}, left for a full `nodeagent apply`: "
                     f"{', '.join(left)}",)
    return replace(plan, changes=changes, problems=problems, unchanged=unchanged, warnings=warnings)


# -- resolving device names on the node (read-only) -----------------------------------------------------------
def _dax_range(host: Host, dev: str) -> tuple[int, int] | None:
    base = f"{DAX_DEVICES}/{dev}"
    start, size = host.read_opt(f"{base}/resource"), host.read_opt(f"{base}/size")
    try:
        return (int(start, 16), int(size)) if start and size else None
    except ValueError:
        return None


def device_of_block(host: Host, block: int) -> str | None:
    """The DAX device whose physical range holds memory block ``block``, if any."""
    bs = read_block_size(host)
    if not bs:
        return None
    lo, hi = block * bs, (block + 1) * bs
    for dev in host.fs.listdir(DAX_DEVICES):
        rng = _dax_range(host, dev)
        if rng and rng[0] < hi and lo < rng[0] + rng[1]:
            return dev
    return None


def expand(host: Host, names: Iterable[str]) -> set[str]:
    """The scope of hot-plug device ``names``: the names and the DAX devices they lead to."""
    out: set[str] = set()
    for name in names:
        name = name.strip()
        if not name:
            continue
        if name == "memory":  # an alias, not a device name: "memory" would match every memory-block path
            out |= set(host.fs.listdir(KMEM)) & set(host.fs.listdir(DAX_DEVICES))
            continue
        out.add(name)
        if m := re.fullmatch(r"memory(\d+)", name):
            dev = device_of_block(host, int(m.group(1)))
            if dev:
                out.add(dev)
        elif re.fullmatch(r"mem\d+", name):  # a CXL memdev: the regions it is in and their DAX devices
            from ..kinds.cxl_region.scope import memdev_scope

            out |= memdev_scope(host, name)
        elif not name.startswith("dax"):
            for dev in host.fs.listdir(DAX_DEVICES):
                link = host.fs.readlink(f"{DAX_DEVICES}/{dev}") or ""
                if f"/{name}/" in link:
                    out.add(dev)
    return out


def require_devices(host: Host, names: Iterable[str]) -> None:
    """Refuse (usage error, exit 64) a ``--device`` the node does not have: a typo or a stale udev event must say
    so, not reconcile an empty scope and report success."""
    from ..util.errors import UsageError

    missing = []
    for name in names:
        name = name.strip()
        if name == "memory":
            continue
        if re.fullmatch(r"memory\d+", name):
            path = f"/sys/devices/system/memory/{name}"
        elif re.fullmatch(r"dax\d+\.\d+", name):
            path = f"{DAX_DEVICES}/{name}"
        elif re.fullmatch(r"(region|decoder|port|endpoint|mem|root|nvdimm-bridge)[\d.]*", name):
            path = f"/sys/bus/cxl/devices/{name}"
        else:
            raise UsageError(f"--device {name!r}: not a device name nodeagent knows (daxX.Y, memoryN, memory, or a "
                             "CXL region, decoder or port such as region0)",
                             hint="give the name udev passes (%k), e.g. --device dax1.0")
        if not host.fs.exists(path):
            missing.append(f"{name} ({path})")
    if missing:
        raise UsageError(f"--device: this node has no {', '.join(missing)}",
                         hint="check the name (`nodeagent facts` lists the DAX devices), or run a full "
                              "`nodeagent apply`")
