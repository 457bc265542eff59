"""DAX devices (CXL.mem expanders, pmem): their mode and the zone their memory is onlined in.

Profile::

    memory:
      auto_online_blocks: offline        # the kernel must not online new memory itself: it races daxctl
      dax:
        - name: expanders
          match: {all: true}             # or {devices: [dax2.0]}, {target_nodes: [2, 3]}, {dax_regions: [0]},
                                         #    {min_size: 1TiB}; criteria combine with AND
          mode: system-ram               # or devdax
          zone: movable                  # or normal; system-ram only
          use: tiered                    # optional: tiered | pinned-pool | maru; the plan warns if the zone does
                                         #    not fit; maru (devdax only): kept for Maru's CXL KV store
          # size: 512GiB, rest: {...}    # use: maru only: split one CXL region for Maru (see .split)

Rules are tried in order and the first that matches a device decides it; a device no rule matches is left as
it is, and a rule that matches nothing is reported. For each matched device the plan says one of:

- ``reconfigure`` (devdax → system-ram): ``daxctl reconfigure-device --mode=system-ram [--no-movable]``;
- ``online`` (system-ram with blocks offline, none in the wrong zone): ``daxctl online-memory``;
- ``rezone`` (blocks online in the other zone): offline every block, online them again — disruptive;
- ``reconfigure`` (system-ram → devdax): offline every block, then ``--mode=devdax`` — disruptive when any
  block is online.

Disruptive changes are refused without ``--allow-disruptive``. Before changing a device, nodeagent records its
mode and zone; ``nodeagent revert`` puts it back (:func:`revert_change`: offlining memory is disruptive there
too). Which zone:

- ``movable``: pageable memory the kernel tiers (NUMA-balancing promotion, demotion, DAMON migration); it can
  be offlined again. Kernel allocations cannot use it, and pages pinned long-term (GPU-registered KV-cache
  buffers, RDMA buffers) are migrated out of ZONE_MOVABLE before they are pinned, so a pinned pool cannot live
  there. With demotion and swap both off, a node can run out of memory while this memory is free.
- ``normal``: for pinned pools that the inference engine binds to the CXL node (``--membind`` or its own NUMA
  option); offlining it later is best-effort and may fail.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ...facts import Facts
from ...facts.dax import DaxDevice, DaxFacts, from_facts
from ...host import Host
from ...plan import Change, Problem
from ...state import Original, Ownership, PlanState
from ...util.quantities import format_size
from ...util.vocab import ZONE_KERNEL_NAME
from ..base import ApplyContext, Kind, PlanContext, ResourcePlan, projection_of
from .split import effective, find, join_change, region_of, size_of, split_change

if TYPE_CHECKING:
    from ...profile import LoadedProfile
    from ...profile.model import DaxRule

KIND = "dax"


def matches(rule: DaxRule, dev: DaxDevice) -> bool:
    """Pure: does ``rule`` select ``dev``? (criteria combine with AND; a ``size`` rule selects every device of
    the region it splits)"""
    if size_of(rule) is not None:
        return dev.region == region_of(rule)
    m = rule.match
    if m.all:
        return True
    if m.devices is not None and dev.name not in m.devices:
        return False
    if m.target_nodes is not None and dev.target_node not in m.target_nodes:
        return False
    if m.dax_regions is not None and dev.region not in m.dax_regions:
        return False
    return not (m.min_size is not None and dev.size < m.min_size)


def assign(rules: tuple[DaxRule, ...], devices: list[DaxDevice]) -> tuple[dict[str, DaxRule], list[DaxRule]]:
    """Pure: ``({device: the first rule that matches it}, [rules that match no device])``."""
    chosen: dict[str, DaxRule] = {}
    for dev in devices:
        rule = next((r for r in rules if matches(r, dev)), None)
        if rule is not None:
            chosen[dev.name] = effective(rule, dev)
    used = {r.name for r in chosen.values()}
    return chosen, [r for r in rules if r.name not in used and not any(matches(r, d) for d in devices)]


def state_label(dev: DaxDevice) -> str:
    if dev.mode != "system-ram":
        return dev.mode
    zones = ", ".join(f"{n} {z}" for z, n in sorted(dev.zones.items())) or "none"
    if dev.fully_online and dev.zone:
        return f"system-ram, {dev.zone.lower()} ({dev.blocks_total} blocks online)"
    return f"system-ram, {dev.blocks_online}/{dev.blocks_total} blocks online ({zones})"


def want_label(rule: DaxRule, dev: DaxDevice) -> str:
    if rule.mode == "devdax":
        return "devdax"
    node = f" on node {dev.target_node}" if dev.target_node is not None else ""
    return f"system-ram, {rule.zone} ({dev.blocks_total} blocks{node}, {format_size(dev.size)})"


def diff_device(rule: DaxRule, dev: DaxDevice) -> Change | Problem | None:
    """Pure: the change that brings ``dev`` to what ``rule`` says (None: already there)."""
    zone = ZONE_KERNEL_NAME[rule.zone] if rule.zone else None
    wrong = {z: n for z, n in dev.zones.items() if z != zone}
    steps: tuple[str, ...]
    if dev.mode not in ("system-ram", "devdax", "disabled"):
        return Problem(KIND, dev.name, f"{dev.name} is bound to driver {dev.mode}, which nodeagent does not manage",
                       hint="unbind it from that driver, or remove the device from the rule", blocking=False)
    if rule.mode == "system-ram" and dev.blocks_total == 0:
        return Problem(KIND, dev.name, f"{dev.name} ({format_size(dev.size)}) does not span one whole memory block, "
                       "so kmem cannot add any of it as system RAM", hint="leave it in devdax mode", blocking=False)
    if rule.mode == "system-ram":
        if dev.mode != "system-ram":
            op, steps, disruptive = "reconfigure", ("to-system-ram",), False
        elif wrong:
            op, steps, disruptive = "rezone", ("offline", "online"), True
        elif dev.blocks_online < dev.blocks_total:
            op, steps, disruptive = "online", ("online",), False
        else:
            return None
    else:
        if dev.mode == "devdax":
            return None
        steps = ("offline", "to-devdax") if dev.blocks_online else ("to-devdax",)
        op, disruptive = "reconfigure", bool(dev.blocks_online)
    reason = f"rule {rule.name}"
    if "to-system-ram" in steps and dev.memmap_bytes:
        reason += (f"; hot-adds {format_size(dev.size)}, whose struct pages take {format_size(dev.memmap_bytes)} "
                   "of DRAM (memmap_on_memory is not in effect)")
    if op == "rezone":
        reason += (f"; every block must go offline first: {sum(wrong.values())} blocks are online in "
                   f"{'/'.join(sorted(wrong))}, and blocks holding unmovable pages may refuse (EBUSY)")
    elif disruptive:
        reason += f"; its {dev.blocks_online} online blocks must go offline first"
    data = (("rule", rule.name), ("steps", steps), ("zone", zone), ("from_mode", dev.mode),
            ("from_zones", dict(dev.zones)), ("from_online", dev.blocks_online), ("blocks", dev.blocks_total),
            ("node", dev.target_node))
    # daxctl races the kernel's auto-online policy: it must be offline first
    requires = ("memory.auto_online_blocks",) if "to-system-ram" in steps else ()
    return Change(KIND, dev.name, op, dev.mode if dev.mode != "system-ram" else state_label(dev),
                  rule.mode if rule.mode == "devdax" else f"system-ram/{rule.zone}", reason=reason,
                  disruptive=disruptive, path=f"/sys/bus/dax/devices/{dev.name}",
                  before_label=state_label(dev), after_label=want_label(rule, dev), data=data,
                  devices=(dev.name,), nodes=(dev.target_node,) if dev.target_node is not None else (),
                  requires=requires)


def plan(loaded: LoadedProfile, facts: Facts, ctx: PlanContext) -> ResourcePlan:
    """Pure: compare the profile's DAX rules with the DAX facts."""
    out = ResourcePlan()
    rules = loaded.profile.memory.dax
    if rules is None:
        return out
    dax = from_facts(facts)
    chosen, unused = assign(rules, dax.devices)
    deciding = {r.name for r in chosen.values()}
    # the DAX devices of the CXL regions this plan creates: the cxl_region kind carries their changes
    present = {d.name for d in dax.devices}
    coming = {d.rule for d in projection_of(loaded, facts, ctx).dax if d.name not in present}
    for i, rule in enumerate(rules):
        if rule in unused and rule.name in coming:
            continue
        if rule in unused:
            out.warnings.append(f"memory.dax rule {rule.name!r} ({loaded.where('memory', 'dax', i)}) matches no "
                                f"DAX device on this node ({_inventory(dax)})")
        elif rule.name not in deciding:
            shadowed = ", ".join(d.name for d in dax.devices if matches(rule, d))
            out.warnings.append(f"memory.dax rule {rule.name!r} ({loaded.where('memory', 'dax', i)}) decides "
                                f"nothing: earlier rules already decide {shadowed}")
    owned = ctx.state.ownership.dax
    for dev in dax.devices:
        if dev.name not in chosen:
            mine = (" — nodeagent changed it before; `nodeagent revert` puts it back as it was"
                    if dev.name in owned else "")
            out.warnings.append(f"{dev.name} matches no memory.dax rule: left as it is ({state_label(dev)}){mine}")
    held: set[int] = set()  # regions a size rule has yet to split (or cannot): their devices are its business
    for sp in find(rules, dax):
        if sp.state == "split":
            continue
        if sp.state != "absent":
            held.add(sp.region)
        if sp.state == "unsplit":
            rest, bs = sp.rest_size, dax.block_size
            if bs and sp.rule.rest.mode == "system-ram" and rest % bs:
                where = loaded.where("memory", "dax", sp.index, "size")
                out.warnings.append(
                    f"memory.dax rule {sp.rule.name!r} ({where}): the rest of region {sp.region} ({format_size(rest)})"
                    f" is not a whole number of {format_size(bs)} memory blocks, so {format_size(rest % bs)} of it "
                    "cannot be onlined; a size that is a multiple of the block size loses nothing")
            change = split_change(sp)
            if change.disruptive and not ctx.allow_disruptive:
                change = replace(change, reason=change.reason + "; not done without --allow-disruptive")
            out.changes.append(change)
        elif sp.state in ("invalid", "other"):
            where = loaded.where("memory", "dax", sp.index, "size")
            out.problems.append(Problem(KIND, f"dax{sp.region}.0", f"memory.dax rule {sp.rule.name!r} ({where}): "
                                        f"{sp.why}", hint=sp.hint))
    for dev in dax.devices:
        rule = chosen.get(dev.name)
        if rule is None or dev.region in held:
            continue
        result = diff_device(rule, dev)
        if result is None:
            out.unchanged.append(dev.name)
        elif isinstance(result, Problem):
            out.problems.append(result)
        else:
            if result.disruptive and not ctx.allow_disruptive:
                result = replace(result, reason=result.reason + "; not done without --allow-disruptive")
            out.changes.append(result)
    out.problems += _preconditions(projection_of(loaded, facts, ctx), dax, out.changes)
    out.warnings += advisories(loaded, facts, dax, chosen, ctx, {c.target for c in out.changes})
    return out


def _inventory(dax: DaxFacts) -> str:
    if not dax.devices:
        return "it has none"
    return "it has " + ", ".join(f"{d.name} ({format_size(d.size)}, node {d.target_node})" for d in dax.devices)


def _preconditions(proj: Any, dax: DaxFacts, changes: list[Change]) -> list[Problem]:
    problems: list[Problem] = []
    if changes and dax.daxctl is None:
        problems.append(Problem(KIND, "daxctl", "daxctl is not installed on this node, and "
                                f"{', '.join(c.target for c in changes)} need it",
                                hint="install the daxctl package (Debian/Ubuntu: apt install daxctl; "
                                     "Fedora/RHEL: dnf install daxctl)"))
    adds = [c.target for c in changes if "to-system-ram" in c.detail("steps", ())]
    policy = proj.knob("memory.auto_online_blocks")
    if adds and policy and policy.startswith("online"):
        problems.append(Problem(
            KIND, "memory.auto_online_blocks",
            f"auto_online_blocks is {policy!r}: the kernel would online {', '.join(adds)} itself as soon as "
            "daxctl hot-adds it, racing daxctl (which aborts with EBUSY, exit 240, rather than let the memory "
            "land in the wrong zone)",
            hint="add `auto_online_blocks: offline` under memory: in the profile (nodeagent sets it before "
                 "touching any DAX device)"))
    return problems


def advisories(loaded: LoadedProfile, facts: Facts, dax: DaxFacts, chosen: dict[str, DaxRule],
               ctx: PlanContext, changing: set[str]) -> list[str]:
    """Pure: what an operator should know before this profile's DAX rules take effect."""
    out: list[str] = []
    for rule in loaded.profile.memory.dax or ():
        if rule.use == "pinned-pool" and rule.zone == "movable":
            out.append(f"rule {rule.name!r} is for a pinned pool but puts it in ZONE_MOVABLE: pages pinned "
                       "long-term (GPU-registered KV-cache buffers, RDMA buffers) are migrated out of ZONE_MOVABLE "
                       "before they are pinned, so the pool would not stay on the CXL node; use zone: normal")
        if rule.use == "tiered" and rule.zone == "normal":
            out.append(f"rule {rule.name!r} is for tiered (pageable) memory but onlines it in ZONE_NORMAL: the "
                       "kernel may put unmovable allocations there and offlining it later is best-effort; use "
                       "zone: movable")
    movable = sorted(n for n, r in chosen.items() if r.mode == "system-ram" and r.zone == "movable")
    demotion = projection_of(loaded, facts, ctx).knob("kernel.demotion_enabled")
    if movable and demotion not in ("true", "1") and dax.swap_total == 0:
        out.append(f"{', '.join(movable)} will be ZONE_MOVABLE memory while demotion is off and there is no "
                   "swap: kernel allocations cannot use it and anonymous memory cannot be moved there under "
                   "pressure, so the node can run out of memory with this memory free; set "
                   "kernel.demotion_enabled: true (or add swap)")
    owned = ctx.state.ownership.dax
    early = [d.name for d in dax.devices if d.name in changing and d.mode == "system-ram" and d.blocks_online
             and d.name not in owned]
    if early and dax.cmdline.get("memhp_default_state") != "offline":
        out.append(f"{', '.join(early)} were onlined before nodeagent ran (at boot, CXL RAM regions are bound to "
                   "kmem and onlined by the kernel's auto-online policy). For a lasting fix put "
                   "memhp_default_state=offline on the kernel command line (or memory_hotplug.online_policy="
                   "auto-movable with memory_hotplug.auto_movable_ratio to let the kernel choose ZONE_MOVABLE); "
                   "nodeagent does not edit the boot loader")
    if dax.udev_rule and dax.daxctl_conf:  # without a [reconfigure-device] section the rule changes nothing
        conf = f"; active sections: {', '.join(s['section'] for s in dax.daxctl_conf)}"
        out.append(f"{dax.udev_rule} runs `daxctl reconfigure-device --check-config` on every DAX device added, per "
                   f"/etc/daxctl.conf.d{conf}: a second agent acting on the same devices as nodeagent; keep its "
                   "configuration in line with this profile or mask the rule (ln -s /dev/null "
                   "/etc/udev/rules.d/90-daxctl-device.rules)")
    adds = [d for d in dax.devices if d.name in chosen and chosen[d.name].mode == "system-ram"
            and d.mode != "system-ram" and d.memmap_bytes]
    memmap = sum(d.memmap_bytes for d in adds)
    free = sum(n.mem_free for n in facts.nodes if n.has_cpu)
    if memmap and free and memmap > free // 2:
        out.append(f"onlining {', '.join(d.name for d in adds)} puts {format_size(memmap)} of struct pages in DRAM "
                   f"(memmap_on_memory not in effect), more than half of the {format_size(free)} free on the CPU nodes")
    return out


def original(change: Change) -> dict[str, Any]:
    """What ``change``'s device was before it (for revert): mode, its online blocks and their zone(s); for a
    split, also its size (the whole region)."""
    was = _was(change.detail("from_mode"), dict(change.detail("from_zones") or {}), change.detail("from_online"),
               change.detail("blocks"))
    return was | {"size": change.detail("size")} if change.op == "split" else was


def _was(mode: Any, zones: dict[str, int], online: Any, blocks: Any) -> dict[str, Any]:
    return {"mode": mode, "zone": next(iter(zones)) if len(zones) == 1 else None, "zones": zones, "online": online,
            "blocks": blocks}


def revert_change(dev: DaxDevice, rec: Original, dax: DaxFacts | None = None) -> Change | None:
    """Pure: the change that puts ``dev`` back as ``rec`` (a recorded :func:`original`) says it was; None when
    it is. Raises ValueError for a state nodeagent cannot restore (a device that was disabled, or only partly
    online)."""
    from ...profile.model import DaxMatch, DaxRule  # revert only: plan and apply load no pydantic

    was = rec.value if isinstance(rec.value, dict) else {}
    mode, zone = was.get("mode"), was.get("zone")
    if was.get("size") and dev.size != was["size"] and dax is not None:  # nodeagent split its region
        if mode == "system-ram" and was.get("online") != was.get("blocks"):
            raise ValueError(f"{dev.name} was system-ram with {was.get('online')} of {was.get('blocks')} blocks "
                             "online before nodeagent split its region; put it back with daxctl by hand")
        return join_change(dev, was, dax, f"its region as it was before nodeagent split it (recorded "
                                          f"{rec.recorded or '?'}): {format_size(int(was['size']))} on {dev.name}")
    profile_zone = {v: k for k, v in ZONE_KERNEL_NAME.items()}.get(zone or "")
    if mode == "devdax":
        rule = DaxRule(name="original", match=DaxMatch(all=True), mode="devdax")
    elif mode == "system-ram" and profile_zone and was.get("online") == was.get("blocks"):
        rule = DaxRule(name="original", match=DaxMatch(all=True), mode="system-ram", zone=profile_zone)
    else:
        how = f"system-ram with {was.get('online')} of {was.get('blocks')} blocks online ({was.get('zones')})" \
            if mode == "system-ram" else str(mode)
        raise ValueError(f"{dev.name} was {how} before nodeagent changed it; nodeagent restores only devdax or "
                         "system-ram fully online in one zone: put it back with daxctl by hand")
    result = diff_device(rule, dev)
    if result is None:
        return None
    if isinstance(result, Problem):
        raise ValueError(result.message)
    why = f"as it was before nodeagent managed it (recorded {rec.recorded or '?'})"
    if result.disruptive:
        why += f"; its {dev.blocks_online} online blocks must go offline first"
    return replace(result, op="revert", reason=why)


def _made_by_split(target: str, state: PlanState) -> bool:
    """``target`` is not its region's first device, and nodeagent split that region (its first device's
    original records the size it had)."""
    rid, _, idx = target.removeprefix("dax").partition(".")
    if idx in ("", "0"):
        return False
    first = state.originals.items.get(f"dax{rid}.0") if state.originals else None
    return first is not None and isinstance(first.value, dict) and bool(first.value.get("size"))


class DaxResource(Kind):
    kind = KIND
    revertible = True
    writes: tuple[str, ...] = ()  # daxctl (a command) changes the devices and their memory blocks, not nodeagent

    def original(self, change: Change, facts: Facts) -> tuple[str, Original]:
        return change.target, Original(KIND, change.path, original(change))

    def current(self, target: str, facts: Facts) -> tuple[str, Original] | None:
        dev = from_facts(facts).device(target)
        if dev is None:
            return None
        return target, Original(KIND, f"/sys/bus/dax/devices/{target}",
                                _was(dev.mode, dict(dev.zones), dev.blocks_online, dev.blocks_total))

    def revert(self, target: str, rec: Original, facts: Facts, state: PlanState) -> list[Change]:
        dev = from_facts(facts).device(target)
        if _made_by_split(target, state):
            return []  # a device nodeagent made splitting its region: the region's join destroys it
        if dev is None:
            raise ValueError(f"{target}: the DAX device no longer exists (hot-unplugged, or its region was torn "
                             "down)")
        change = revert_change(dev, rec, from_facts(facts))
        return [change] if change is not None else []

    def forget(self, target: str, ownership: Ownership) -> None:
        ownership.dax.pop(target, None)

    def rezones(self, change: Change) -> bool:
        """Every DAX change rezones or takes memory away (the executor stops the kdamonds pinned to it first)."""
        return True

    def plan(self, loaded: LoadedProfile, facts: Facts, ctx: PlanContext) -> ResourcePlan:
        return plan(loaded, facts, ctx)

    def apply(self, host: Host, change: Change, actx: ApplyContext) -> str:
        from .apply import apply_change

        return apply_change(host, change, actx)
