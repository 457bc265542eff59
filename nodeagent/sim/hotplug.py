"""Hot-plug on a simulated node: a device appears in the tree and its uevents reach every listener.

``hot_add_dax(kernel, DaxDef)`` lays the device out (devdax mode, :func:`nodeagent.sim.dax.lay_out`) and
emits ``add`` for ``dax/<name>``; with ``system_ram=True`` (a kernel whose dax_cxl/kmem binds new CXL memory
itself) it also hot-adds the range to the target node — online in the zone of the kernel's auto-online policy,
or offline when the policy is ``offline`` — and emits ``add`` (and ``online``) for each memory block, like the
kernel's memory hot-plug. Events go to the listeners of :mod:`nodeagent.host.udev` (``nodeagent watch``), in
the order the kernel sends them. ``emit`` sends any other event (an unrelated ``block``/``net`` device, a
``remove``) so tests can check what is ignored.
"""

from __future__ import annotations

from ..host.udev import UEvent, broadcast
from ..kfmt import format_list
from . import dax as simdax
from . import memory
from .kernel import SimKernel


def emit(k: SimKernel, action: str, subsystem: str, sysname: str, devpath: str = "") -> UEvent:
    ev = UEvent(action, subsystem, sysname, devpath)
    broadcast(k.root, ev)
    log = k.meta_dir / "uevents.log"
    with open(log, "a", encoding="utf-8") as f:
        f.write(ev.to_json() + "\n")
    return ev


def hot_add_dax(k: SimKernel, d: simdax.DaxDef, *, system_ram: bool = False) -> list[UEvent]:
    """Hot-add DAX device ``d``; returns the events emitted, in order. Its target node must be possible: the
    kernel fixes the possible nodes at boot (firmware reserves one per CXL window)."""
    possible = memory.parse_list(k.tree.read(f"{memory.NODE}/possible"))
    if d.target_node not in possible:
        raise ValueError(f"{d.name}: node {d.target_node} is not a possible node here ({format_list(possible)})")
    with k.locked():
        simdax.lay_out(k, d)
    events = [emit(k, "add", "dax", d.name, simdax.device_dir(d).removeprefix("/sys"))]
    if system_ram:
        with k.locked():
            zone = memory.hotplug_policy_zone(k)
            blocks = simdax.to_system_ram(k, d.name, zone)
        for n in blocks:
            events.append(emit(k, "add", "memory", f"memory{n}", f"/devices/system/memory/memory{n}"))
        if zone is not None:
            for n in blocks:
                events.append(emit(k, "online", "memory", f"memory{n}", f"/devices/system/memory/memory{n}"))
    return events
