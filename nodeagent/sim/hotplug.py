"""Hot-plug on a simulated node: a device appears in the tree and its uevents reach every listener.

``hot_add_dax(kernel, DaxDef)`` lays the device out (devdax mode, :func:`nodeagent.sim.dax.lay_out`) and
emits ``add`` for ``dax/<name>``; with ``system_ram=True`` (a kernel whose dax_cxl/kmem binds new CXL memory
itself) it also hot-adds the range to the target node — online in the zone of the kernel's auto-online policy,
or offline when the policy is ``offline`` — and emits ``add`` (and ``online``) for each memory block, like the
kernel's memory hot-plug. Events go to the listeners of :mod:`nodeagent.host.udev` (``nodeagent watch``), in
the order the kernel sends them. ``emit`` sends any other event (an unrelated ``block``/``net`` device, a
``remove``) so tests can check what is ignored.

``boot(kernel, memhp_default_state)`` re-lays what a 6.3+ kernel does with CXL memory at boot: every CXL DAX
device is bound to kmem and its blocks are onlined as ``memhp_default_state`` says (``offline``: left offline,
the shape the README recommends booting with; ``online``: ZONE_NORMAL; ``online_movable``: ZONE_MOVABLE); the
command line and ``auto_online_blocks`` say the same afterwards. Legacy pmem stays devdax, as it boots.
"""

from __future__ import annotations

from ..host.udev import UEvent, broadcast
from ..kfmt import format_list
from . import dax as simdax
from . import memory
from .kernel import SimKernel

#: memhp_default_state / a block state → the zone its blocks come online in (None: offline).
BOOT_ZONE: dict[str, str | None] = {"offline": None, "online": "Normal", "online_kernel": "Normal",
                                    "online_movable": "Movable"}


def emit(k: SimKernel, action: str, subsystem: str, sysname: str, devpath: str = "") -> UEvent:
    ev = UEvent(action, subsystem, sysname, devpath)
    broadcast(k.root, ev)
    log = k.meta_dir / "uevents.log"
    with open(log, "a", encoding="utf-8") as f:
        f.write(ev.to_json() + "\n")
    return ev


def hot_add_dax(k: SimKernel, d: simdax.DaxDef, *, system_ram: bool = False,
                blocks: str | None = None) -> list[UEvent]:
    """Hot-add DAX device ``d``; returns the events emitted, in order. Its target node must be possible: the
    kernel fixes the possible nodes at boot (firmware reserves one per CXL window). With ``system_ram``,
    ``blocks`` (``online``/``offline``) overrides the auto-online policy for its blocks (``online``: in the
    zone a plain ``online`` chooses)."""
    possible = memory.parse_list(k.tree.read(f"{memory.NODE}/possible"))
    if d.target_node not in possible:
        raise ValueError(f"{d.name}: node {d.target_node} is not a possible node here ({format_list(possible)})")
    with k.locked():
        simdax.lay_out(k, d)
    events = [emit(k, "add", "dax", d.name, simdax.device_dir(d).removeprefix("/sys"))]
    if system_ram:
        with k.locked():
            zone = memory.hotplug_policy_zone(k) if blocks is None else BOOT_ZONE[blocks]
            ids = simdax.to_system_ram(k, d.name, zone)
        for n in ids:
            events.append(emit(k, "add", "memory", f"memory{n}", f"/devices/system/memory/memory{n}"))
        if zone is not None:
            for n in ids:
                events.append(emit(k, "online", "memory", f"memory{n}", f"/devices/system/memory/memory{n}"))
    return events


def boot(k: SimKernel, memhp_default_state: str) -> list[str]:
    """Re-lay the boot-time onlining of CXL memory (see the module docs); returns the devices it bound to kmem."""
    if memhp_default_state not in BOOT_ZONE:
        raise ValueError(f"memhp_default_state must be one of {', '.join(BOOT_ZONE)}, not {memhp_default_state!r}")
    zone = BOOT_ZONE[memhp_default_state]
    bound: list[str] = []
    with k.locked():
        for name in sorted(k.state().get("dax", {})):
            if "/ACPI0017:" not in simdax.device_path(k, name):
                continue  # not CXL: legacy pmem and soft-reserved ranges boot as devdax here
            if simdax.driver_of(k, name) == "kmem":
                for n in simdax.block_range(k, name):
                    if k.tree.exists(f"{memory.MEM}/memory{n}") and \
                            k.tree.read(f"{memory.MEM}/memory{n}/state") == "online":
                        memory.set_block(k, n, None)
                simdax.hot_remove(k, name)
            elif simdax.driver_of(k, name) is not None:
                simdax.unbind(k, name)
            simdax.to_system_ram(k, name, zone)
            bound.append(name)
        cmdline = " ".join(w for w in k.tree.read("/proc/cmdline").split()
                           if not w.startswith("memhp_default_state="))
        k.tree.set("/proc/cmdline", f"{cmdline} memhp_default_state={memhp_default_state}".strip())
        k.tree.set(f"{memory.MEM}/auto_online_blocks", memhp_default_state)
    return bound
