"""Carrying out one region change through the kernel's CXL sysfs ABI, in the kernel's order.

Create (what ``cxl create-region -t ram`` does, drivers/cxl/core/region.c): read the root decoder's
``create_ram_region`` and write that name back → the region's ``interleave_granularity`` and
``interleave_ways`` → each member's endpoint decoder ``mode=ram`` and ``dpa_size`` (decoder id order) → the
region's ``size`` → ``targetN`` in position order → ``commit=1`` → bind it to ``cxl_region`` (commit alone makes
no DAX device) → wait for dax_cxl's ``daxN.0`` and kmem taking it. The memdevs are re-read first and named by
serial: if one moved to another name since the plan, the change is refused. Before the first kernel write the
region is on record as nodeagent's, ``building`` (root decoder, name, endpoint decoders, DPA, pid), and once it is
made as nodeagent's region: a run stopped anywhere in between leaves what the next plan tears down before it makes
the region (:func:`.plan.plan_leftovers`). A step the kernel refuses undoes what this change made, in the teardown
order; what the kernel refuses to undo stays on record, and the failure says what it is.

Delete (teardown): the DAX memory offline and the device back to devdax (daxctl, as the DAX kind does it) →
``commit=0`` (releases cxl_region: the DAX device goes) → ``targetN`` emptied → ``size=0`` → each decoder's
``dpa_size=0``, highest id first → ``delete_region``.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Any

from ...facts.cxl import read as read_cxl
from ...facts.numa import read_block_size
from ...host import Host
from ...plan import Change
from ...state import OwnedRegion, Ownership
from ...util.errors import ChangeSkipped, HostError, MissingError
from ...util.timestamps import rfc3339
from ..base import ApplyContext
from .names import CXL, ident, key

BUS = "/sys/bus/cxl"
#: How long dax_cxl may take to expose the region's DAX device (and kmem to take it) after the bind.
DAX_TIMEOUT = 30.0
SCRATCH = "cxl_region:dax:"  # + set key → the DAX device the region got


#: What detaches a region's target: store_targetN detaches on a newline alone. An empty write never reaches it
#: (sysfs drops a write of 0 bytes and reports success), which left the target attached and the region's size
#: write answering EBUSY (seen on a 6.12 guest).
DETACH = "\n"

def _memdevs_now(host: Host, change: Change) -> dict[str, str]:
    """``{memdev: endpoint}`` of the change's memdevs (by identity) as the node names them now (refused if they
    moved)."""
    facts = read_cxl(host)
    out = {}
    for name, who in zip(change.detail("memdevs", ()), change.detail("idents", ()), strict=True):
        m = next((x for x in facts.memdevs if ident(x, facts.memdevs) == who), None)
        if m is None:
            raise MissingError(f"{change.target}: memdev {who} is gone since the plan was made",
                               hint="run `nodeagent plan` again")
        if m.name != name:
            raise HostError(f"{change.target}: {who} is {m.name} now, {name} when the plan was made "
                            "(the memdevs probed again); nothing was done", hint="run `nodeagent plan` again")
        out[name] = m.endpoint or ""
    return out


def create(host: Host, change: Change, actx: ApplyContext) -> str:
    _memdevs_now(host, change)
    root = change.detail("root")
    name = (host.read(f"{CXL}/{root}/create_ram_region") or "").strip()
    before = _building(actx, change, name)  # nodeagent's, before its first kernel write
    done: list[tuple[str, str]] = []  # undo steps, newest last

    def w(path: str, value: str, undo: tuple[str, str] | None = None) -> None:
        host.write(path, value)
        if undo is not None:
            done.append(undo)

    start = time.monotonic()
    try:
        w(f"{CXL}/{root}/create_ram_region", name, (f"{CXL}/{root}/delete_region", name))
        base = f"{CXL}/{name}"
        w(f"{base}/interleave_granularity", str(change.detail("granularity")))
        w(f"{base}/interleave_ways", str(change.detail("ways")))
        decoders = list(change.detail("decoders", ()))
        for dec in decoders:
            w(f"{CXL}/{dec}/mode", "ram")
            w(f"{CXL}/{dec}/dpa_size", str(change.detail("dpa_size")), (f"{CXL}/{dec}/dpa_size", "0"))
        w(f"{base}/size", str(change.detail("size")), (f"{base}/size", "0"))
        for pos, dec in enumerate(decoders):
            w(f"{base}/target{pos}", dec, (f"{base}/target{pos}", DETACH))
        w(f"{base}/commit", "1", (f"{base}/commit", "0"))
        if host.fs.readlink(f"{base}/driver") is None:
            host.write(f"{BUS}/drivers/cxl_region/bind", name)
    except HostError as exc:
        left = _undo(host, done)
        if not left:
            try:
                _restore(actx, change, before)
            except HostError:
                pass  # (the record says building; the next plan finds nothing left of it)
        made = ("what was made was torn down again" if not left else
                f"undoing it failed at {'; '.join(left)}: the ownership record names what is left, and the next "
                "apply tears it down and makes the region")
        raise HostError(f"{change.target}: the kernel refused a step of creating {name}: {exc.render()}; {made}",
                        path=exc.path, hint="see `dmesg | grep cxl` for the kernel's reason") from None
    dax = _wait_dax(host, name)
    actx.scratch[SCRATCH + key(change.detail("idents"))] = dax
    _own(actx, change, name, dax)
    return (f"{name} committed: {change.after_label}; {dax} ({_driver(host, dax) or 'no driver'}) in "
            f"{time.monotonic() - start:.1f}s")


def _driver(host: Host, dax: str) -> str | None:
    link = host.fs.readlink(f"/sys/bus/dax/devices/{dax}/driver")
    return link.rsplit("/", 1)[-1] if link else None


def _wait_dax(host: Host, region: str) -> str:
    """The DAX device dax_cxl makes for ``region``, once kmem (or device_dax) has it."""
    deadline = time.monotonic() + DAX_TIMEOUT
    rid = region.removeprefix("region")
    while True:
        names = [n for n in host.fs.listdir(f"{CXL}/{region}/dax_region{rid}") if n.startswith("dax")]
        if names and _driver(host, names[0]):
            return names[0]
        if time.monotonic() > deadline:
            raise HostError(f"{region} is committed and bound, but dax_cxl made no DAX device for it within "
                            f"{DAX_TIMEOUT:.0f}s", path=f"{CXL}/{region}",
                            hint="load dax_cxl and kmem (`modprobe -a dax_cxl kmem`), then apply again")
        time.sleep(0.1)


def _undo(host: Host, done: list[tuple[str, str]]) -> list[str]:
    """The undo steps, newest first; those the kernel refused (``path=value: why``)."""
    left = []
    for path, value in reversed(done):
        try:
            host.write(path, value)
        except HostError as exc:
            left.append(f"{path}={value!r}: {exc.message}")
    return left


def _record(change: Change, region: str, dax: list[str], building: dict[str, Any] | None = None) -> OwnedRegion:
    return OwnedRegion(list(change.detail("idents")), [int(s) for s in change.detail("serials")],
                       change.detail("ways"), change.detail("granularity"), change.detail("rule"), region,
                       change.detail("root"), rfc3339(), dax, building)


def _building(actx: ApplyContext, change: Change, region: str) -> OwnedRegion | None:
    """Before the creation's first kernel write: the region on record as nodeagent's, being built — its root
    decoder, name, the endpoint decoders it sets and their DPA, this run's pid (a run stopped anywhere in it leaves
    what the next plan tears down, :func:`.plan.plan_leftovers`). The record it replaces (None: none)."""
    if actx.state is None:
        return None
    building = {"decoders": list(change.detail("decoders", ())), "dpa_size": change.detail("dpa_size"),
                "pid": os.getpid()}
    with actx.state.edit(Ownership) as owned:
        k = key(change.detail("idents"))
        before = owned.regions.get(k)
        owned.regions[k] = _record(change, region, [], building)
    return before


def _restore(actx: ApplyContext, change: Change, before: OwnedRegion | None) -> None:
    """A creation the kernel refused and that was undone in full: the record is what it was before."""
    if actx.state is None:
        return
    with actx.state.edit(Ownership) as owned:
        k = key(change.detail("idents"))
        if before is None:
            owned.regions.pop(k, None)
        else:
            owned.regions[k] = before


def _own(actx: ApplyContext, change: Change, region: str, dax: str) -> None:
    if actx.state is None:
        return
    with actx.state.edit(Ownership) as owned:
        owned.regions[key(change.detail("idents"))] = _record(change, region, [dax])


def forget_region(owned: Ownership, set_key: str) -> None:
    """Drop a region's ownership record and those of the DAX devices it had (they went with it)."""
    rec = owned.regions.pop(set_key, None)
    for dax in rec.dax if rec is not None else ():
        owned.dax.pop(dax, None)


def online(host: Host, change: Change, actx: ApplyContext) -> str:
    """The DAX kind's apply, on the DAX device the region got (its name is known once the region is made)."""
    from ..dax.apply import apply_change

    name = actx.scratch.get(SCRATCH + str(change.detail("region_key")))
    if name is None:
        raise ChangeSkipped(f"{change.target}: its region was not created in this apply")
    from ...facts.dax import read_device
    from ..dax.split import as_found

    dev = read_device(host, name, read_block_size(host) or 0)
    if dev is not None and dev.blocks_online == 0 and dev.mode in ("devdax", "disabled", "system-ram") and (
            dev.mode, dev.zones) != (change.detail("from_mode"), change.detail("from_zones")):
        change = as_found(change, dev)  # device_dax took it, not kmem: nothing of it is online either way
    # the DAX kind's own op (a split, for a Maru part of the region), which its verification reads
    op = change.detail("dax_op") or change.op
    return apply_change(host, replace(change, kind="dax", op=op, target=name, path=f"/sys/bus/dax/devices/{name}"),
                        actx)


def delete(host: Host, change: Change, actx: ApplyContext) -> str:
    """Tear a region down in the kernel's order, each step only where it is not undone already. ``leftovers``:
    what a creation of nodeagent's stopped half-way left (the region, if it got that far, and the endpoint
    decoders' DPA, :func:`.plan.plan_leftovers`)."""
    from ..dax.apply import apply_change

    region, root = change.detail("region"), change.detail("root")
    leftovers = bool(change.detail("leftovers", False))
    base = f"{CXL}/{region}" if region else None
    there = base is not None and host.fs.exists(base)
    if not there and not leftovers:
        raise MissingError(f"{region} is gone since the plan was made", hint="run `nodeagent plan` again")
    notes = []
    if there and base is not None:
        for name, online_blocks, zones, mode in change.detail("dax", ()):
            if mode == "system-ram":  # offline, then devdax: kmem lets the range go only with its memory offline
                steps = ("offline", "to-devdax") if online_blocks else ("to-devdax",)
                dax = Change("dax", name, "reconfigure", mode, "devdax", path=f"/sys/bus/dax/devices/{name}",
                             data=(("steps", steps), ("from_mode", mode), ("from_online", online_blocks),
                                   ("from_zones", dict(zones)), ("zone", None)))
                notes.append(apply_change(host, dax, replace(actx, state=None)))
        if (host.read_opt(f"{base}/commit") or "").strip() == "1":
            host.write(f"{base}/commit", "0")
        ways = (host.read_opt(f"{base}/interleave_ways") or "").strip()
        for pos in range(max(len(change.detail("decoders", ())), int(ways) if ways.isdigit() else 0)):
            if (host.read_opt(f"{base}/target{pos}") or "").strip():
                host.write(f"{base}/target{pos}", DETACH)
        if _nonzero(host.read_opt(f"{base}/size")):
            host.write(f"{base}/size", "0")
    for dec in sorted(change.detail("decoders", ()), key=lambda d: -int(d.split(".")[1])):
        if _nonzero(host.read_opt(f"{CXL}/{dec}/dpa_size")):
            host.write(f"{CXL}/{dec}/dpa_size", "0")
    if there:
        host.write(f"{CXL}/{root}/delete_region", region)
    _disown(actx, change)
    what = f"{region} torn down" if there else "the DPA it had allocated freed"
    return what + (f" ({'; '.join(notes)})" if notes else "")


def _nonzero(text: str | None) -> bool:
    """A size attribute that holds something (``0x0``, ``0x0000000000000000`` — %pa — and absent do not); one
    that does not read as a number is taken as holding something (the write says what the kernel thinks)."""
    try:
        return int((text or "0").strip(), 0) != 0
    except ValueError:
        return True


def _disown(actx: ApplyContext, change: Change) -> None:
    if actx.state is None:
        return
    with actx.state.edit(Ownership) as owned:
        forget_region(owned, key(change.detail("idents")))


def apply(host: Host, change: Change, actx: ApplyContext) -> str:
    ops: dict[str, Any] = {"create": create, "online": online, "delete": delete, "revert": delete}
    return ops[change.op](host, change, actx)
