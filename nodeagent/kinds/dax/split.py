"""Part of one expander for Maru: a ``memory.dax`` rule with ``size`` splits one dynamic DAX region.

Profile::

    memory:
      auto_online_blocks: offline
      dax:
        - name: maru-part
          match: {dax_regions: [1]}          # one region, or {devices: [dax1.0]}
          mode: devdax
          use: maru
          size: 512GiB                       # Maru's device; a multiple of the region's align
          rest: {mode: system-ram, zone: normal}   # the region's first device keeps the rest

A CXL region's DAX region is dynamic (``drivers/dax/cxl.c`` makes it without ``IORESOURCE_DAX_STATIC``): its
first device ``daxN.0`` starts with the whole region and can be shrunk (its ``size``, written only while no
driver holds it), and ``create`` makes another device in the space that frees. An hmem (soft-reserved) or pmem
region is static: the kernel hides ``create`` and makes sizes read-only, so such a region cannot be split (the
plan refuses it, naming the profile line). The plan's ``split`` change does it in the kernel's order, with
daxctl:

1. ``daxctl offline-memory daxN.0`` (only if its memory is online: disruptive) and ``reconfigure-device
   --mode=devdax`` (only if it is system-ram): kmem must let go of the range;
2. ``daxctl disable-device daxN.0``: ``size`` answers EBUSY while a driver is bound;
3. ``daxctl reconfigure-device -s REST daxN.0``: the device keeps the start of the region;
4. ``daxctl create-device -r N -s SIZE``: writes ``create``, sizes the new seed, binds it to device_dax — the
   Maru device, ``daxN.M`` with the lowest free id;
5. the rest as ``rest`` says: ``reconfigure-device --mode=system-ram [--no-movable] daxN.0`` (hot-add and
   online in that zone) or ``enable-device daxN.0`` (devdax).

Once split, the two devices are planned as any other: the Maru device as the rule says (devdax), ``daxN.0`` as
``rest`` says. A region split some other way is a problem (nodeagent does not re-split what it did not make).
Revert joins the region again: offline and disable ``daxN.0``, ``daxctl destroy-device --force`` the other
devices, grow ``daxN.0`` back to the whole region and put it back in its recorded mode and zone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ...facts.dax import DaxDevice, DaxFacts, DaxRegion, block_ids
from ...plan import Change
from ...util.quantities import format_size
from ...util.vocab import ZONE_KERNEL_NAME

KIND = "dax"


@dataclass(frozen=True)
class RestRule:
    """The rule a split region's first device follows (shaped like a ``DaxRule`` for the planner)."""

    name: str
    mode: str
    zone: str | None
    use: str | None = None
    size: None = None


def size_of(rule: Any) -> int | None:
    return getattr(rule, "size", None)


def region_of(rule: Any) -> int | None:
    """The one region a ``size`` rule splits (None: not a size rule)."""
    if size_of(rule) is None:
        return None
    m = rule.match
    if getattr(m, "dax_regions", None):
        return int(m.dax_regions[0])
    return int(m.devices[0][3:].split(".")[0])


def rest_rule(rule: Any) -> RestRule:
    return RestRule(rule.name, rule.rest.mode, getattr(rule.rest, "zone", None))


def effective(rule: Any, dev: DaxDevice) -> Any:
    """The rule that decides ``dev`` once its region is split: the rest rule for the region's first device."""
    if size_of(rule) is not None and dev.name.endswith(".0"):
        return rest_rule(rule)
    return rule


@dataclass(frozen=True)
class Split:
    """What a ``size`` rule finds in its region."""

    rule: Any
    index: int  # the rule's place in memory.dax (for the profile line)
    region: int
    state: str  # unsplit | split | other | invalid | absent
    first: DaxDevice | None = None  # daxN.0
    maru: DaxDevice | None = None  # the Maru device (split)
    why: str = ""  # invalid/other: what is wrong
    hint: str = ""

    @property
    def rest_size(self) -> int:
        return (self.first.size if self.state == "unsplit" and self.first else 0) - int(self.rule.size)


def find(rules: tuple[Any, ...], dax: DaxFacts) -> list[Split]:
    """Pure: each ``size`` rule's region and how far it is split."""
    out = []
    for i, rule in enumerate(rules):
        rid = region_of(rule)
        if rid is None:
            continue
        size = int(rule.size)
        devs = sorted((d for d in dax.devices if d.region == rid), key=lambda d: int(d.name.split(".")[1]))
        reg = dax.region(rid)
        first = next((d for d in devs if d.name == f"dax{rid}.0"), None)
        sized = [d for d in devs if d.size]
        if first is None:
            out.append(Split(rule, i, rid, "absent", why=f"region {rid} has no DAX device on this node"))
            continue
        if reg is None:  # facts without the regions: nothing can be told about the split, so nothing is planned
            out.append(Split(rule, i, rid, "invalid", first, why=(
                f"the DAX facts say nothing of region {rid} itself (its size, align, whether it is dynamic)"),
                hint="gather the facts again with this nodeagent (nodeagent facts), then plan"))
            continue
        if not reg.dynamic:
            out.append(Split(rule, i, rid, "invalid", first, why=(
                f"region {rid} ({first.backing}) is static: the kernel cannot resize its devices or make new ones "
                "in it (IORESOURCE_DAX_STATIC; only CXL regions are dynamic)"),
                hint="drop size to keep the whole device for Maru, or use a CXL region"))
            continue
        others = [d for d in sized if d.name != first.name]
        if not others and first.size == reg.size:
            bad = _invalid(size, reg, first)
            out.append(Split(rule, i, rid, "invalid", first, why=bad[0], hint=bad[1]) if bad
                       else Split(rule, i, rid, "unsplit", first))
        elif len(others) == 1 and others[0].size == size and first.size + size == reg.size:
            out.append(Split(rule, i, rid, "split", first, others[0]))
        else:
            shape = ", ".join(f"{d.name} {format_size(d.size)}" for d in sized)
            out.append(Split(rule, i, rid, "other", first, why=(
                f"region {rid} is split as {shape or 'nothing'} (of {format_size(reg.size)}), not into a Maru "
                f"device of {format_size(size)} and the rest"),
                hint="give back the other devices (daxctl destroy-device --force), or give the size they have"))
    return out


def _invalid(size: int, reg: DaxRegion, first: DaxDevice) -> tuple[str, str] | None:
    align = max(reg.align or 0, first.align or 0, 2 * 1024**2)
    if size >= reg.size:
        return (f"size {format_size(size)} leaves nothing of region {reg.id} ({format_size(reg.size)}) for the rest",
                f"give less than {format_size(reg.size)}, or drop size (and rest) to keep the whole device for Maru")
    if size % align:
        return (f"size {format_size(size)} is not a multiple of region {reg.id}'s align ({format_size(align)}): the "
                "kernel refuses the device size (EINVAL)",
                f"round it to a multiple of {format_size(align)}")
    return None


def planned(rule: Any, index: int, dev: DaxDevice) -> Split:
    """Pure: what a ``size`` rule finds in the DAX device a CXL region this plan creates will have (dax_cxl's
    ``daxN.0`` over the whole region, which kmem takes with its blocks offline): a dynamic region, unsplit — or
    a ``size`` it cannot take. Planning the split with the region, rather than once its device is onlined whole,
    keeps the rest's blocks offline until the split is made: one apply, and nothing disruptive."""
    reg = DaxRegion(dev.region, dev.size, dev.align, True, 0, None)
    bad = _invalid(int(rule.size), reg, dev)
    if bad:
        return Split(rule, index, dev.region, "invalid", dev, why=bad[0], hint=bad[1])
    return Split(rule, index, dev.region, "unsplit", dev)


def as_found(change: Change, dev: DaxDevice) -> Change:
    """Pure: the change planned for the DAX device a new CXL region gets, from the driver it really has. The plan
    takes kmem's with its blocks offline (the dax bus matches a CXL device to kmem by type), but device_dax takes
    it when its id table names the device: ``daxctl reconfigure-device --mode=devdax daxN.M`` puts the name there
    (``new_id``) and it stays after the region is gone — seen on a 6.12 guest, where apply, revert, apply made
    region1's ``dax1.0`` come back devdax. With nothing of it online either way, the steps start from there."""
    want = change.detail("final_mode") or ("devdax" if "to-devdax" in change.detail("steps", ()) else "system-ram")
    if change.detail("dax_op") == "split":
        steps = (*steps_to_unbind(dev), "resize", "create", *steps_to_mode(want))
    elif want == "system-ram":
        steps = ("online",) if dev.mode == "system-ram" else ("to-system-ram",)
    else:
        steps = ("to-devdax",) if dev.mode == "system-ram" else ("enable",) if dev.mode == "disabled" else ()
    kept = tuple(kv for kv in change.data if kv[0] not in ("steps", "from_mode", "from_online", "from_zones",
                                                            "final_mode"))
    return replace(change, before=dev.mode, before_label=dev.mode,
                   data=(*kept, ("steps", steps), ("from_mode", dev.mode), ("from_online", dev.blocks_online),
                         ("from_zones", dict(dev.zones)), ("final_mode", want)))


def view(splits: list[Split], devices: list[DaxDevice], block_size: int | None) -> list[DaxDevice]:
    """Pure: ``devices`` as they will be once the unsplit regions are split (for the projection): the first
    device shrunk to the rest, and the Maru device made, both not yet bound."""
    out = list(devices)
    for sp in splits:
        if sp.state != "unsplit" or sp.first is None:
            continue
        first, size = sp.first, int(sp.rule.size)
        rest = first.size - size
        ids = {int(d.name.split(".")[1]) for d in devices if d.region == sp.region}
        new = next(i for i in range(1, len(ids) + 2) if i not in ids)
        start = first.resource or 0
        blocks = len(block_ids(start, rest, block_size)) if block_size and first.resource is not None else 0
        shrunk = replace(first, size=rest, mode="disabled", blocks_total=blocks, blocks_present=0, blocks_online=0,
                         zones={})
        maru = replace(first, name=f"dax{sp.region}.{new}", size=size, resource=start + rest, mode="disabled",
                       blocks_total=0, blocks_present=0, blocks_online=0, zones={}, memmap_bytes=0)
        out = [shrunk if d.name == first.name else d for d in out] + [maru]
    return out


def steps_to_unbind(dev: DaxDevice) -> tuple[str, ...]:
    """daxctl steps that leave ``dev`` bound to no driver (its size can then change)."""
    if dev.mode == "system-ram":
        return (("offline",) if dev.blocks_online else ()) + ("to-devdax", "disable")
    if dev.mode == "devdax":
        return ("disable",)
    return ()


def steps_to_mode(mode: str | None) -> tuple[str, ...]:
    """daxctl steps that bind an unbound device as ``mode`` says."""
    return {"system-ram": ("to-system-ram",), "devdax": ("enable",)}.get(mode or "", ())


def split_change(sp: Split) -> Change:
    """Pure: the change that splits ``sp``'s region (see :mod:`.split`)."""
    from . import state_label

    dev, rule = sp.first, sp.rule
    assert dev is not None
    size, rest = int(rule.size), dev.size - int(rule.size)
    rest_mode, rest_zone = rule.rest.mode, getattr(rule.rest, "zone", None)
    zone = ZONE_KERNEL_NAME[rest_zone] if rest_zone else None
    steps = (*steps_to_unbind(dev), "resize", "create", *steps_to_mode(rest_mode))
    disruptive = bool(dev.blocks_online)
    after = f"devdax {format_size(size)} for Maru + {format_size(rest)} {rest_mode}" + (f"/{rest_zone}" if zone else "")
    reason = (f"rule {rule.name}: region {sp.region} ({format_size(dev.size)}) split into a Maru device of "
              f"{format_size(size)} and the rest ({format_size(rest)}) on {dev.name}")
    if disruptive:
        reason += f"; its {dev.blocks_online} online blocks must go offline first"
    data = (("rule", rule.name), ("steps", steps), ("zone", zone), ("from_mode", dev.mode),
            ("from_zones", dict(dev.zones)), ("from_online", dev.blocks_online), ("blocks", dev.blocks_total),
            ("node", dev.target_node), ("region", sp.region), ("size", dev.size), ("resize_to", rest),
            ("maru_size", size), ("final_mode", rest_mode))
    requires = ("memory.auto_online_blocks",) if "to-system-ram" in steps else ()
    return Change(KIND, dev.name, "split", state_label(dev), after, reason=reason, disruptive=disruptive,
                  path=f"/sys/bus/dax/devices/{dev.name}", before_label=f"{state_label(dev)}, {format_size(dev.size)}",
                  after_label=after, data=data, devices=(dev.name,),
                  nodes=(dev.target_node,) if dev.target_node is not None else (), requires=requires)


def join_change(dev: DaxDevice, was: dict[str, Any], dax: DaxFacts, why: str) -> Change:
    """Pure: the change that gives ``dev``'s region back to ``dev`` alone, as ``was`` (its recorded original)
    says: the other devices destroyed, ``dev`` grown back and put in its old mode and zone."""
    from . import state_label

    others = tuple(d.name for d in dax.devices if d.region == dev.region and d.name != dev.name)
    mode, zone = was.get("mode"), was.get("zone")
    steps = (*steps_to_unbind(dev), "destroy", "resize", *steps_to_mode(mode))
    disruptive = bool(dev.blocks_online)
    if disruptive:
        why += f"; its {dev.blocks_online} online blocks must go offline first"
    size = int(was["size"])
    after = f"{mode}" + (f"/{zone.lower()}" if zone and mode == "system-ram" else "") + f", {format_size(size)}"
    data = (("rule", "original"), ("steps", steps), ("zone", zone if mode == "system-ram" else None),
            ("from_mode", dev.mode), ("from_zones", dict(dev.zones)), ("from_online", dev.blocks_online),
            ("blocks", dev.blocks_total), ("node", dev.target_node), ("region", dev.region), ("size", dev.size),
            ("resize_to", size), ("destroy", others), ("final_mode", mode))
    requires = ("memory.auto_online_blocks",) if "to-system-ram" in steps else ()
    return Change(KIND, dev.name, "revert", state_label(dev), after, reason=why, disruptive=disruptive,
                  path=f"/sys/bus/dax/devices/{dev.name}",
                  before_label=f"{state_label(dev)}, {format_size(dev.size)} (+ {', '.join(others) or 'nothing'})",
                  after_label=after, data=data, devices=(dev.name, *others),
                  nodes=(dev.target_node,) if dev.target_node is not None else (), requires=requires)


__all__ = ["RestRule", "Split", "as_found", "effective", "find", "join_change", "planned", "region_of", "rest_rule",
           "size_of", "split_change", "steps_to_mode", "steps_to_unbind", "view"]
