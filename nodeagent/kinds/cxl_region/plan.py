"""Pure planning of CXL RAM regions: which memdevs go into which region, on which window, and what must change.

A memdev is named by its serial, never by ``memN`` (probe order changes between boots). For each rule of
``memory.cxl.regions`` (first rule that selects a memdev decides it) the memdevs it selects are grouped into
*sets*: one per memdev (``ways: 1``) or ``ways`` of them in position order. A set is:

- **unchanged** when one committed RAM region holds exactly its memdevs, in its positions, at its granularity;
- **created** when none of its memdevs is in a region: a root decoder (CXL window) is chosen that has RAM
  capability, interleaves the set's host bridges in an order the positions fit, can do its ways and
  granularity, and has the room; each member's next free endpoint decoder gets ``mode ram`` and its DPA;
- **rebuilt** when a region holds some of its memdevs differently (granularity, members, positions, not
  committed): the region is torn down first, in the kernel's order — disruptive when its memory is online.

What cannot be done is a (non-blocking) problem naming the rule's file:line and the fix: the other sets still
go ahead, a half interleave set is never built.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import field, replace
from typing import TYPE_CHECKING, Any

from ...facts import Facts
from ...facts.cxl import CxlFacts, Decoder, Memdev, Region
from ...facts.cxl import from_facts as cxl_facts
from ...facts.dax import DaxDevice, memmap_bytes
from ...facts.dax import from_facts as dax_facts
from ...plan import Change, Problem
from ...state import OwnedRegion
from ...util.dataclass import dataclass
from ...util.quantities import format_size
from .names import CXL, KIND, ident, key, rules_of, target

if TYPE_CHECKING:
    from ...profile import LoadedProfile

MiB256 = 256 * 1024**2


@dataclass
class Pool:
    """The kernel's region ids (one pool with nvdimm regions) as far as the facts show them: each root decoder
    holds the id it hands out next; creating takes it and the decoder caches the lowest free one."""

    next: dict[str, int]
    used: set[int]

    @classmethod
    def of(cls, cxl: CxlFacts) -> Pool:
        nxt = {r: int(n[6:]) for r, n in cxl.next_region.items() if re.fullmatch(r"region\d+", n)}
        return cls(nxt, {int(r.name[6:]) for r in cxl.regions} | set(nxt.values()))

    def take(self, root: str) -> int:
        rid = self.next[root] if root in self.next else min(set(range(len(self.used) + 1)) - self.used)
        self.used.add(rid)
        i = 0
        while i in self.used:
            i += 1
        self.used.add(i)
        self.next[root] = i
        return rid

    def give(self, root: str, rid: int) -> None:
        if root in self.next and rid < self.next[root]:
            self.used.discard(self.next[root])
            self.next[root] = rid
        else:
            self.used.discard(rid)


@dataclass
class Window:
    decoder: Decoder
    hbs: list[str]  # host bridges in the window's interleave order
    node: int | None  # the NUMA node its memory joins
    taken: list[tuple[int, int]] = field(default_factory=list)  # (start, size) of regions in it

    def place(self, size: int) -> int | None:
        """The lowest free start for ``size`` bytes (the kernel's HPA allocator takes the first fit), or None
        when the window has no such gap."""
        start = self.decoder.start or 0
        end = start + (self.decoder.size or 0)
        at = start
        for s, n in sorted(self.taken):
            if at + size <= s:
                break
            at = max(at, s + n)
        return at if at + size <= end else None


def windows(cxl: CxlFacts, facts: Facts) -> list[Window]:
    """The root decoders with their host bridges by name and the node each one's memory joins.

    A window that holds a region shows its node (the region's DAX device's ``target_node``). A window without
    one has the node Linux reserved for it at boot: ``acpi_parse_cfmws`` (drivers/acpi/numa/srat.c) runs after
    every SRAT entry is parsed and gives each CFMWS window that SRAT does not cover a fake proximity domain past
    the highest SRAT one, which ``acpi_map_pxm_to_node`` maps to the next node id — so the windows hold the
    highest possible node ids, in CFMWS order, which is the root decoders' order (cxl_acpi walks the CEDT in
    the same order). A region takes its window's node (``phys_to_target_node`` of its start). Where that rule
    cannot hold (a node it names is online, or another device's: SRAT covers the window), the nodes that are
    possible and used by nothing are taken in window order; the executor plans the kinds that depend on the
    node again once the region exists (:meth:`nodeagent.engine.core.Engine.apply`)."""
    uid_hb = dict(cxl.ports.get("root0", {}).get("dports", {}))
    devices = dax_facts(facts).devices
    dax_node = {d.name: d.target_node for d in devices}
    out = []
    for d in cxl.root_decoders():
        w = Window(d, [uid_hb.get(t, t) for t in d.targets], None)
        for r in cxl.regions:
            if r.root_decoder == d.name:
                w.taken.append((r.start or 0, r.size))
                w.node = next((dax_node[x] for x in r.dax_devices if dax_node.get(x) is not None), w.node)
        out.append(w)
    online = {n.id for n in facts.nodes}
    region_dax = {x for r in cxl.regions for x in r.dax_devices}
    taken = {d.target_node for d in devices if d.name not in region_dax and d.target_node is not None}
    possible = sorted(facts.possible_nodes)
    order = sorted(out, key=lambda w: _decoder_order(w.decoder.name))
    top = possible[-len(order):] if order and len(possible) >= len(order) else []
    fits = top and all(w.node in (None, n) and (w.node == n or (n not in online and n not in taken))
                       for w, n in zip(order, top, strict=True))
    if fits:
        for w, n in zip(order, top, strict=True):
            w.node = n
        return out
    spare = [n for n in possible if n not in online and n not in taken and n not in {w.node for w in out}]
    for w in (w for w in order if w.node is None):
        w.node = spare.pop(0) if spare else None
    return out


def _decoder_order(name: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", name))


@dataclass(frozen=True)
class Member:
    memdev: Memdev
    decoder: str  # the endpoint decoder it gets (the next free one)
    dpa: int


@dataclass
class Ctx:
    loaded: Any
    facts: Facts
    cxl: CxlFacts
    windows: list[Window]
    pool: Pool
    owned: dict[str, OwnedRegion]  # the regions nodeagent made, by set key (Ownership.regions)
    allow_disruptive: bool
    block_size: int | None
    online_policy: str | None
    torn: set[str] = field(default_factory=set)  # regions this plan tears down
    freed: set[str] = field(default_factory=set)  # endpoint decoders whose DPA this plan frees outside a region
    half: set[str] = field(default_factory=set)  # regions nodeagent's stopped creations left, torn down by this plan
    changes: list[Change] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    planned_dax: list[DaxDevice] = field(default_factory=list)
    switch_taken: dict[str, int] = field(default_factory=dict)  # port → switch decoders this plan's regions take

    def ident(self, m: Memdev) -> str:
        return ident(m, self.cxl.memdevs)

    def ident_of(self, memdev: str) -> str:
        m = self.cxl.memdev(memdev)
        return self.ident(m) if m is not None else memdev


def _where(c: Ctx, i: int, *sub: str | int) -> str:
    return c.loaded.where("memory", "cxl", "regions", i, *sub)


def _label(m: Memdev) -> str:
    return f"{m.name} (serial {m.serial:#x})" if m.serial is not None else f"{m.name} (no serial)"


def _inventory(cxl: CxlFacts) -> str:
    if not cxl.memdevs:
        return "it has no CXL memdev"
    return "it has " + ", ".join(f"{_label(m)} on {m.host_bridge or '?'}" for m in cxl.memdevs)


def _problem(c: Ctx, i: int, rule: Any, tgt: str, msg: str, hint: str, *sub: str | int,
             memdevs: Iterable[Memdev] = ()) -> None:
    """A rule's problem; ``memdevs``: the memdevs it concerns, so that ``apply --device memN`` keeps it."""
    c.problems.append(Problem(KIND, tgt, f"memory.cxl.regions rule {rule.name!r} ({_where(c, i, *sub)}): {msg}",
                              hint=hint, blocking=False, devices=tuple(m.name for m in memdevs)))


def region_of(cxl: CxlFacts, m: Memdev) -> Region | None:
    return next((r for r in cxl.regions if m.name in r.memdevs), None)


# -- selection ---------------------------------------------------------------------------------------------

def select(c: Ctx, i: int, rule: Any, claimed: set[str]) -> list[list[Memdev]]:
    """The sets ``rule`` asks for, in position order (problems for what it cannot select)."""
    sel = rule.memdevs
    cxl = c.cxl
    if sel.serials is not None:
        found: list[Memdev] = []
        for j, s in enumerate(sel.serials):
            ms = [m for m in cxl.memdevs if m.serial == s]
            if not ms:
                _problem(c, i, rule, target(list(sel.serials)), f"serial {s:#x} is not on this node "
                         f"({_inventory(cxl)})", "correct the serial (`nodeagent facts` lists the memdevs), or "
                         "check that the expander is plugged in and cxl_pci probed it (`dmesg | grep cxl`)",
                         "memdevs", "serials", j)
                continue
            if len(ms) > 1:
                _problem(c, i, rule, target(list(sel.serials)), f"serial {s:#x} is reported by "
                         f"{', '.join(m.name for m in ms)}: a serial shared by several devices names none of them",
                         "give the devices distinct serial numbers (QEMU: cxl-type3 sn=), or select them by "
                         "host_bridges", "memdevs", "serials", j)
                continue
            found.append(ms[0])
        chosen = [m for m in found if m.name not in claimed]
        if rule.ways > 1:  # never half a set
            return [chosen] if len(chosen) == len(sel.serials) else []
        return [[m] for m in chosen]  # a region each: the memdevs that are there get theirs
    if sel.host_bridges is not None:
        cands = [m for m in cxl.memdevs if m.host_bridge in sel.host_bridges and m.name not in claimed]
        missing = [hb for hb in sel.host_bridges if not any(m.host_bridge == hb for m in cxl.memdevs)]
        if missing:
            c.warnings.append(f"memory.cxl.regions rule {rule.name!r} ({_where(c, i, 'memdevs')}): no memdev behind "
                              f"{', '.join(missing)} ({_inventory(cxl)})")
    else:  # without_region: memdevs no region uses, and those of regions this rule made before (ownership)
        mine = {x for rec in c.owned.values() if rec.rule == rule.name for x in rec.members}
        cands = [m for m in cxl.memdevs if m.name not in claimed
                 and (region_of(cxl, m) is None or (c.ident(m) in mine and _owned_region(c, region_of(cxl, m)))
                      or getattr(region_of(cxl, m), "name", None) in c.half)]
    # in the order of what identifies them across boots (serial, else PCI function), never of memN
    cands.sort(key=lambda m: (0, m.serial, "") if c.ident(m).startswith("0x") else (1, 0, c.ident(m)))
    if rule.ways == 1:
        return [[m] for m in cands]
    sets = [cands[k:k + rule.ways] for k in range(0, len(cands) - len(cands) % rule.ways, rule.ways)]
    left = cands[len(sets) * rule.ways:]
    if left:
        _problem(c, i, rule, target([c.ident(m) for m in left]),
                 f"{', '.join(_label(m) for m in left)} left over: ways {rule.ways} needs {rule.ways} memdevs per "
                 "region, and a half interleave set is not built", "add the missing memdevs, or give them a rule of "
                 "their own (ways: 1)", "ways", memdevs=left)
    return sets


def _owned_region(c: Ctx, r: Region | None) -> bool:
    if r is None:
        return False
    return key([c.ident_of(n) for n in r.memdevs]) in c.owned


def _serial_of(cxl: CxlFacts, memdev: str) -> int | None:
    m = cxl.memdev(memdev)
    return m.serial if m else None


# -- one set -----------------------------------------------------------------------------------------------

def plan_set(c: Ctx, i: int, rule: Any, members: list[Memdev]) -> None:
    cxl = c.cxl
    tgt = target([c.ident(m) for m in members])
    names = [m.name for m in members]
    for m in members:
        if m.serial in (None, 0) or sum(1 for o in cxl.memdevs if o.serial == m.serial) > 1:
            c.warnings.append(f"{_label(m)}: its serial does not tell it apart from the other memdevs, so nodeagent "
                              f"knows it by its PCI function ({c.ident(m)}): moved to another slot, it is another "
                              "memdev")
        if m.endpoint is None:
            _problem(c, i, rule, tgt, f"{_label(m)} has no CXL endpoint (cxl_mem did not attach it)",
                     "load cxl_mem (`modprobe cxl_mem`); `dmesg | grep cxl` says why a probe failed", "memdevs",
                     memdevs=members)
            return
    regions = {r.name: r for m in members if (r := region_of(cxl, m)) is not None}
    if len(regions) == 1 and not set(regions) & c.half:  # (a region left half-made is made again)
        (r,) = regions.values()
        root = cxl.decoder(r.root_decoder)
        want_gran = rule.granularity or (root.interleave_granularity if root else None)  # absent: the window's
        same = (r.memdevs == names and r.interleave_ways == len(members) and r.type == "ram" and r.committed
                and (want_gran is None or r.interleave_granularity == want_gran))
        if same:
            c.unchanged.append(tgt)
            return
    before = len(c.changes)
    for r in regions.values():
        plan_teardown(c, r, f"rule {rule.name}: {_describe_want(rule, members)}")
    gated = any(ch.disruptive for ch in c.changes[before:]) or any(
        ch.disruptive and ch.op == "delete" and ch.target == tgt for ch in c.changes[:before])
    start = len(c.changes)
    plan_create(c, i, rule, members, tgt)
    if gated:  # the new region needs the old one gone: it waits for --allow-disruptive with it
        c.changes[start:] = [replace(ch, disruptive=True, reason=ch.reason + "; after the teardown before it, which "
                                     "is disruptive") for ch in c.changes[start:]]


def _describe_want(rule: Any, members: list[Memdev]) -> str:
    gran = f", {rule.granularity}B" if rule.granularity else ""
    return f"wants {', '.join(_label(m) for m in members)} in a ram region x{len(members)}{gran}"


def region_label(r: Region) -> str:
    return (f"{r.name}: {r.type} x{r.interleave_ways} {r.interleave_granularity}B over {', '.join(r.memdevs)}, "
            f"{format_size(r.size)}, {'committed' if r.committed else 'not committed'}")


def plan_teardown(c: Ctx, r: Region, why: str) -> None:
    """Tear ``r`` down in the kernel's order: its DAX memory offline (daxctl), commit 0, targets, size, DPA,
    delete — disruptive when any of its memory is online."""
    if r.name in c.torn:
        return
    c.torn.add(r.name)
    c.changes.append(_teardown(c, r, why))


def _teardown(c: Ctx, r: Region, why: str, idents: list[str] | None = None, serials: list[int] | None = None,
              decoders: list[str] | None = None) -> Change:
    dax = dax_facts(c.facts)
    devs = [d for d in dax.devices if d.name in r.dax_devices]
    online = sum(d.blocks_online for d in devs)
    serials = serials if serials is not None else [_serial_of(c.cxl, n) or 0 for n in r.memdevs]
    idents = idents if idents is not None else [c.ident_of(n) for n in r.memdevs]
    decoders = decoders if decoders is not None else [t for t in r.targets if t]
    reason = f"{why}; {r.name} is {region_label(r)}"
    if online:
        reason += (f"; its {online} online memory blocks ({', '.join(d.name for d in devs)}) must go offline first, "
                   "and blocks holding unmovable pages may refuse (EBUSY)")
    if online and not c.allow_disruptive:
        reason += "; not done without --allow-disruptive"
    dpa = {d.name: d for d in c.cxl.decoders if d.name in decoders}
    nodes = sorted({d.target_node for d in devs if d.target_node is not None})
    for w in c.windows:
        if w.decoder.name == r.root_decoder:
            w.taken = [t for t in w.taken if t != (r.start or 0, r.size)]
            c.pool.give(w.decoder.name, int(r.name[6:]))
    return Change(
        KIND, target(idents), "delete", region_label(r), "none", reason=reason, disruptive=bool(online),
        path=f"{CXL}/{r.name}", before_label=region_label(r), after_label="no region",
        devices=(*(m for m in r.memdevs if m), r.name, *(d.name for d in devs)), nodes=tuple(nodes),
        data=(("region", r.name), ("root", r.root_decoder), ("memdevs", tuple(r.memdevs)),
              ("serials", tuple(serials)), ("idents", tuple(idents)), ("decoders", tuple(decoders)),
              ("dax", tuple((d.name, d.blocks_online, dict(d.zones), d.mode) for d in devs)),
              ("dpa", tuple(sorted((n, d.dpa_size or 0) for n, d in dpa.items()))),
              ("committed", r.committed)))


def plan_leftovers(c: Ctx, rec: OwnedRegion) -> None:
    """What a creation of nodeagent's left when its run stopped half-way (its record says ``building``), torn
    down in the kernel's order so that the creation after it finds the memdevs bare: the region it was making,
    where the kernel has it under the recorded root decoder with no target but the recorded decoders, and the DPA
    of the recorded endpoint decoders (of the recorded size) that no other region holds. Only what the record
    names: DPA no record names stays someone else's (:func:`plan_create` refuses it)."""
    b = rec.building
    if b is None:
        return
    names = set(b.get("decoders") or ())
    r = next((x for x in c.cxl.regions if x.name == rec.region), None)
    if r is not None and (r.root_decoder != rec.root or r.type != "ram" or not {t for t in r.targets if t} <= names):
        c.warnings.append(f"{target(rec.members)}: nodeagent was making {rec.region} when its run (pid "
                          f"{b.get('pid')}) stopped, but {region_label(r)} is not what it began: left as it is")
        r = None
    decs = [d for d in c.cxl.decoders if d.name in names and d.kind == "endpoint" and d.dpa_size
            and d.region in (None, r.name if r is not None else None)
            and b.get("dpa_size") in (None, d.dpa_size)]
    if r is None and not decs:
        return  # nothing of it is left (a reboot, or the run stopped before its first write)
    freed = sorted({d.name for d in decs} | ({t for t in r.targets if t} if r is not None else set()),
                   key=_decoder_order)
    c.freed |= set(freed)
    on = [m.name for d in decs for m in c.cxl.memdevs if m.endpoint == d.port]
    left = ", ".join(f"{d.name} ({format_size(d.dpa_size or 0)} of DPA)" for d in decs)
    why = (f"nodeagent's creation of {rec.region or 'a region'} over {', '.join(rec.members)} stopped half-way (run "
           f"pid {b.get('pid')}, {rec.time or 'time unknown'})" + (f"; {left} left outside any region" if left and
                                                                   r is None else ""))
    if r is not None:
        c.torn.add(r.name)
        c.half.add(r.name)
        ch = _teardown(c, r, why + "; torn down before it is made again", list(rec.members), list(rec.serials),
                       freed)
        c.changes.append(replace(ch, devices=tuple(dict.fromkeys((*ch.devices, *on))),
                                 data=(*ch.data, ("leftovers", True))))
        return
    c.changes.append(Change(
        KIND, target(rec.members), "delete", f"DPA of {', '.join(freed)} outside any region", "none",
        reason=why + "; freed before the region is made again", path=f"{CXL}/{freed[-1]}/dpa_size",
        before_label=f"DPA of {', '.join(freed)} outside any region", after_label="DPA freed",
        devices=tuple(dict.fromkeys(on)),
        data=(("region", None), ("root", rec.root), ("memdevs", tuple(on)), ("serials", tuple(rec.serials)),
              ("idents", tuple(rec.members)), ("decoders", tuple(freed)), ("dax", ()),
              ("dpa", tuple((d.name, d.dpa_size or 0) for d in decs)), ("committed", False), ("leftovers", True))))


def _free_decoder(c: Ctx, m: Memdev) -> tuple[str | None, int]:
    """The endpoint decoder ``m`` gets (DPA is allocated in decoder id order, a stack) and the RAM DPA other
    decoders of it hold outside the regions this plan tears down."""
    decs = sorted((d for d in c.cxl.decoders if d.kind == "endpoint" and d.port == m.endpoint),
                  key=lambda d: int(d.name.split(".")[1]))
    kept = [d for d in decs if (d.dpa_size or 0) and d.region not in c.torn and d.name not in c.freed]
    used = sum(d.dpa_size or 0 for d in kept if d.mode == "ram")
    last = max((int(d.name.split(".")[1]) for d in kept), default=-1)
    free = next((d.name for d in decs if int(d.name.split(".")[1]) > last), None)
    return free, used


def _route(c: Ctx, m: Memdev) -> list[str]:
    """The ports between ``m``'s endpoint and the root (host bridges, switches), nearest first."""
    out: list[str] = []
    port = c.cxl.ports.get(m.endpoint or "", {}).get("parent")
    while port and port in c.cxl.ports and not port.startswith("root") and port not in out:
        out.append(port)
        port = c.cxl.ports[port].get("parent")
    return out


def _switch_shortage(c: Ctx, members: list[Memdev]) -> tuple[str, str] | None:
    """A port on the members' way to the root with no switch decoder left for one more region — (port, what it
    holds) — or None. Each region takes one decoder of every port it passes (drivers/cxl/core/region.c
    cxl_rr_alloc_decoder: "no decoder available", EBUSY at the target's attach), shared by the members behind
    that port; a decoder of a region this plan tears down counts as free."""
    for port in dict.fromkeys(p for m in members for p in _route(c, m)):
        decs = [d for d in c.cxl.decoders if d.kind == "switch" and d.port == port]
        if not decs:
            continue
        held = sorted({d.region for d in decs if d.region and d.region not in c.torn}, key=_decoder_order)
        if len(decs) - len(held) - c.switch_taken.get(port, 0) <= 0:
            host = c.cxl.ports[port].get("host") or port
            what = ", ".join(held) if held else "none"
            return port, (f"{port} ({host}) has {len(decs)} HDM decoder(s), all taken (regions: {what}"
                          + (f", and {c.switch_taken[port]} this plan creates" if c.switch_taken.get(port) else "")
                          + ")")
    return None


def _positions(w: Window, members: list[Memdev], fixed: bool) -> list[Memdev] | str:
    """``members`` in an order whose positions the window's host-bridge order gives (position p belongs to host
    bridge hbs[p % len(hbs)]); the reason when there is none."""
    hbs = w.hbs
    if fixed:
        for p, m in enumerate(members):
            if hbs[p % len(hbs)] != m.host_bridge:
                return (f"position {p} ({_label(m)}, behind {m.host_bridge}) belongs to host bridge "
                        f"{hbs[p % len(hbs)]} in {w.decoder.name} (its order: {', '.join(hbs)})")
        return members
    by_hb: dict[str, list[Memdev]] = {}
    for m in members:
        by_hb.setdefault(m.host_bridge or "", []).append(m)
    out = []
    for p in range(len(members)):
        q = by_hb.get(hbs[p % len(hbs)]) or []
        if not q:
            return f"{w.decoder.name} interleaves {', '.join(hbs)}: the memdevs do not fill its positions evenly"
        out.append(q.pop(0))
    return out


def fit(c: Ctx, w: Window, rule: Any, members: list[Memdev], size: int) -> tuple[list[Memdev], int, int] | str:
    """``(members in position order, granularity, start)`` for a region of ``members`` in window ``w``, or why
    ``w`` cannot hold it (the kernel's rules: drivers/cxl/core/region.c)."""
    d = w.decoder
    ways, rways, rgran = len(members), d.interleave_ways or 1, d.interleave_granularity or 256
    if not d.cap_ram:
        return f"{d.name} cannot map RAM (cap_ram 0)"
    outside = sorted({m.host_bridge or "?" for m in members} - set(w.hbs))
    if outside:
        return f"{d.name} interleaves {', '.join(w.hbs)}, not {', '.join(outside)}"
    q, rem = divmod(ways, rways)
    if rem or q & (q - 1):
        return f"{d.name} interleaves {rways} ways: a region of it has {rways} x a power of two ways, not {ways}"
    gran = rule.granularity or rgran
    if gran < rgran:
        return f"granularity {gran} is below {d.name}'s {rgran}"
    if rways > 1 and gran != rgran:
        return f"{d.name} interleaves at {rgran}: a region of it has that granularity, not {gran}"
    order = _positions(w, members, rule.memdevs.serials is not None)
    if isinstance(order, str):
        return order
    start = w.place(size)
    if start is None:
        free = (d.size or 0) - sum(n for _, n in w.taken)
        return f"{d.name} ({format_size(d.size or 0)}) has no {format_size(size)} free ({format_size(free)} left)"
    return order, gran, start


def plan_create(c: Ctx, i: int, rule: Any, members: list[Memdev], tgt: str) -> None:
    picks: list[tuple[Memdev, str]] = []
    for m in members:
        dec, used = _free_decoder(c, m)
        if used:
            _problem(c, i, rule, tgt, f"{_label(m)} has {format_size(used)} of its RAM capacity (DPA) allocated to "
                     "an endpoint decoder outside any region (a region torn down half-way?)",
                     "free it with `cxl disable-region`/`cxl destroy-region` or `echo 0 > .../dpa_size` of that "
                     "decoder (the highest-numbered first), then apply again", "memdevs", memdevs=members)
            return
        if dec is None:
            _problem(c, i, rule, tgt, f"{_label(m)} has no free endpoint decoder", "tear down a region it is in "
                     "first", "memdevs", memdevs=members)
            return
        picks.append((m, dec))
    short = _switch_shortage(c, members)
    if short is not None:
        _problem(c, i, rule, tgt, f"{', '.join(_label(m) for m in members)}: no region can be routed: {short[1]}",
                 "interleave the memdevs behind that port into fewer regions (a larger `ways` shares one decoder), "
                 "or tear down a region that passes it", "memdevs", memdevs=members)
        return
    dpa = min(m.ram_size for m in members) // MiB256 * MiB256
    if dpa == 0:
        _problem(c, i, rule, tgt, f"{', '.join(_label(m) for m in members)}: no volatile (RAM) capacity of 256 MiB "
                 "or more", "remove it from the rule (a pmem-only device is not managed)", "memdevs",
                 memdevs=members)
        return
    size = dpa * len(members)
    reasons = []
    for w in c.windows:
        got = fit(c, w, rule, members, size)
        if isinstance(got, str):
            reasons.append(got)
            continue
        order, gran, start = got
        break
    else:
        what = "; ".join(reasons) if reasons else "it has no CXL window (root decoder)"
        _problem(c, i, rule, tgt, f"no CXL window can hold a ram region x{len(members)} of "
                 f"{format_size(size)} over {', '.join(_label(m) for m in members)}: {what}",
                 "change ways or granularity to what a window can do (`nodeagent facts` lists the windows), "
                 "or free room in it", "ways" if rule.ways > 1 else "memdevs", memdevs=members)
        return
    w.taken.append((start, size))
    for port in dict.fromkeys(p for m in members for p in _route(c, m)):
        c.switch_taken[port] = c.switch_taken.get(port, 0) + 1
    dec_of = dict((m.name, d) for m, d in picks)
    rid = c.pool.take(w.decoder.name)
    region = f"region{rid}"
    serials = [m.serial or 0 for m in order]
    idents = [c.ident(m) for m in order]
    tgt = target(idents)
    after = (f"ram x{len(order)} {gran}B over {', '.join(_label(m) for m in order)}, {format_size(size)} in "
             f"{w.decoder.name}" + (f" (node {w.node})" if w.node is not None else ""))
    data = (("rule", rule.name), ("root", w.decoder.name), ("region", region), ("ways", len(order)),
            ("granularity", gran), ("size", size), ("dpa_size", dpa),
            ("memdevs", tuple(m.name for m in order)), ("serials", tuple(serials)), ("idents", tuple(idents)),
            ("decoders", tuple(dec_of[m.name] for m in order)))
    # the memdevs, the region and the DAX device dax_cxl will make for it: what `apply --device` names
    devices = (*(m.name for m in order), region, f"dax{rid}.0")
    c.changes.append(Change(KIND, tgt, "create", "no region", after, reason=f"rule {rule.name}",
                            path=f"{CXL}/{w.decoder.name}/create_ram_region", before_label="no region",
                            after_label=after, data=data, devices=devices,
                            nodes=(w.node,) if w.node is not None else (),
                            requires=("memory.auto_online_blocks",)))
    bs = c.block_size
    first, last = (-(-start // bs), (start + size) // bs) if bs else (0, 0)
    # dax_cxl asks for the memmap on the region; the kernel puts it there only if its parameter allows
    self_hosted = dax_facts(c.facts).memmap_allowed
    blocks = max(0, last - first)
    # Where its memory hangs off: the members' host bridge node (firmware's _PXM of the host bridge), when they
    # share one — the proximity the pairing reads before the new node has NUMA distances.
    hosts = {m.numa_node for m in order}
    host = hosts.pop() if len(hosts) == 1 else None
    dev = DaxDevice(name=f"dax{rid}.0", region=rid, size=size, align=2 * 1024**2, resource=start,
                    target_node=w.node, numa_node=host, mode="system-ram", memmap_on_memory=True,
                    blocks_total=blocks, blocks_present=blocks, blocks_online=0,
                    backing="cxl", cxl_region=region, cxl_memdevs=[m.name for m in order],
                    memmap_bytes=0 if self_hosted else memmap_bytes(blocks, bs or 0), memmap_self_hosted=self_hosted)
    c.planned_dax.append(dev)
    online = _online_change(c, dev, tgt, data, devices)
    if online is not None:
        c.changes.append(online)


def _online_change(c: Ctx, dev: DaxDevice, tgt: str, data: tuple, devices: tuple[str, ...]) -> Change | None:
    """The DAX rules' decision for the DAX device the region will have (dax_cxl makes ``dax<region id>.0``; kmem
    takes it with its blocks offline under ``auto_online_blocks: offline``), carried out by the DAX kind's apply
    once the device is there."""
    from ..dax import assign, diff_device, matches, split

    rules = tuple(c.loaded.profile.memory.dax or ())
    chosen, _ = assign(rules, [dev]) if rules else ({}, [])
    rule = chosen.get(dev.name)
    if rule is None:
        c.warnings.append(f"{dev.name} (the DAX device of {tgt}) matches no memory.dax rule: it stays as kmem "
                          "leaves it (system-ram, its blocks offline)")
        return None
    got: Change | Problem | None
    # the rule itself, not the rest it gives daxN.0 once split: part of the region for Maru is split off before
    # any of it is onlined
    whole = next((r for r in rules if matches(r, dev)), None)
    if whole is not None and split.region_of(whole) == dev.region:
        sp = split.planned(whole, rules.index(whole), dev)
        if sp.state == "invalid":
            where = c.loaded.where("memory", "dax", sp.index, "size")
            c.problems.append(Problem("dax", dev.name, f"memory.dax rule {whole.name!r} ({where}): {sp.why}",
                                      hint=sp.hint))
            return None
        got = split.split_change(sp)
        got = replace(got, data=(*got.data, ("dax_op", "split")))
    else:
        got = diff_device(rule, dev)
    if not isinstance(got, Change):
        return None
    keep = tuple(kv for kv in data if kv[0] in ("memdevs", "serials", "idents", "region"))
    return replace(got, kind=KIND, op="online", target=dev.name, reason=f"{got.reason}; once {tgt} is committed",
                   data=(*got.data, *keep, ("region_key", key(dict(keep)["idents"])), ("planned", True)),
                   devices=devices, needs=(tgt,),
                   requires=tuple(dict.fromkeys((*got.requires, "memory.auto_online_blocks"))))


def plan(loaded: LoadedProfile, facts: Facts, owned: dict[str, OwnedRegion], allow_disruptive: bool,
         online_policy: str | None) -> Ctx:
    """Pure: the changes, problems and warnings of the profile's region rules on a node with ``facts``."""
    cxl = cxl_facts(facts)
    c = Ctx(loaded, facts, cxl, windows(cxl, facts), Pool.of(cxl), owned, allow_disruptive,
            facts.block_size_bytes, online_policy)
    rules = rules_of(loaded)
    if not rules:
        return c
    if not cxl.present and any(r.memdevs.serials for r in rules):
        c.problems.append(Problem(KIND, "cxl", "memory.cxl.regions names memdevs, but this node has no CXL bus "
                                  f"(/sys/bus/cxl) ({loaded.where('memory', 'cxl')})",
                                  hint="load the CXL modules (modprobe -a cxl_acpi cxl_pci cxl_mem), or remove "
                                       "memory.cxl from the profile", blocking=False))
        return c
    for _, rec in sorted(c.owned.items()):  # first, what nodeagent's own stopped creations left half-made
        plan_leftovers(c, rec)
    claimed: set[str] = set()
    for i, rule in enumerate(rules):
        sets = select(c, i, rule, claimed)
        for members in sets:
            claimed |= {m.name for m in members}
            plan_set(c, i, rule, members)
        if not sets and rule.memdevs.serials is None and not any(p.message.startswith(
                f"memory.cxl.regions rule {rule.name!r}") for p in c.problems) and not rule.memdevs.without_region:
            c.warnings.append(f"memory.cxl.regions rule {rule.name!r} ({_where(c, i)}) selects no memdev "
                              f"({_inventory(cxl)})")
    on_node = {c.ident(m) for m in cxl.memdevs}
    index = {r.name: i for i, r in enumerate(rules)}
    for rec in c.owned.values():
        members = rec.members
        gone = [x for x in members if x not in on_node]
        if gone and rec.rule in index:
            i = index[rec.rule]
            _problem(c, i, rules[i], target(members),
                     f"nodeagent made {rec.region or 'a region'} over {', '.join(members)}, but "
                     f"{', '.join(gone)} is not on this node ({_inventory(cxl)}), so the region is not made again",
                     "if the memdev is still probing, apply again (the boot unit waits for it: --wait-memdevs); if "
                     "it was removed for good, `nodeagent revert` that region's target to forget it", "memdevs")
    onl = [ch.target for ch in c.changes if ch.op == "online"]
    if onl and dax_facts(facts).daxctl is None:
        c.problems.append(Problem(KIND, "daxctl", "daxctl is not installed on this node, and onlining "
                                  f"{', '.join(onl)} (the DAX devices of the regions to create) needs it",
                                  hint="install the daxctl package (Debian/Ubuntu: apt install daxctl; Fedora/RHEL: "
                                       "dnf install daxctl)"))
    adds = [ch.target for ch in c.changes if ch.op == "create"]
    if adds and online_policy and online_policy.startswith("online"):
        c.problems.append(Problem(
            KIND, "memory.auto_online_blocks",
            f"auto_online_blocks is {online_policy!r}: the kernel would online the memory of {', '.join(adds)} "
            "itself when kmem takes its DAX device at commit (dax_cxl binds it at once), in the zone the kernel "
            "picks rather than the one memory.dax asks for",
            hint="add `auto_online_blocks: offline` under memory: in the profile (nodeagent sets it before "
                 "creating any region)"))
    return c
