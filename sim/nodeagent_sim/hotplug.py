"""Hot-plug on a simulated node: a device appears in the tree and its uevents reach every listener.

``hot_add_dax(kernel, DaxDef)`` lays the device out (devdax mode, :func:`nodeagent_sim.dax.lay_out`) and
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

``generated(preset, devices, device_size, block_size)`` is a preset with generated CXL expanders and block size
(``nodeagent sim create --devices/--device-size/--block-size``); ``next_dax(kernel, ...)`` is the definition
of one more expander placed after every range the node has (``nodeagent sim hot-add``).

``hot_add_memdev(kernel, size)`` plugs a bare CXL memdev into an empty root port of a simulated CXL bus
(``nodeagent sim hot-add DIR --memdev --size SIZE``): the shape that needs a region before it is memory.
"""

from __future__ import annotations

from dataclasses import replace

from nodeagent.host.udev import UEvent, broadcast
from nodeagent.util.kfmt import format_list

from . import dax as simdax
from . import memory, ownfiles
from .kernel import SimKernel
from .presets import Preset

#: memhp_default_state / a block state → the zone its blocks come online in (None: offline).
BOOT_ZONE: dict[str, str | None] = {"offline": None, "online": "Normal", "online_kernel": "Normal",
                                    "online_movable": "Movable"}


def emit(k: SimKernel, action: str, subsystem: str, sysname: str, devpath: str = "") -> UEvent:
    ev = UEvent(action, subsystem, sysname, devpath)
    broadcast(k.root, ev)
    ownfiles.append(k.root, "uevents.log", ev.to_json() + "\n")
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
        if d.kind == "cxl":
            from .cxl_presets import expanders

            expanders(k, [d])
        else:
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


def hot_add_memdev(k: SimKernel, ram_size: int, *, serial: int | None = None,
                   slot: tuple[str, str] | None = None) -> list[UEvent]:
    """Hot-plug a bare type-3 memdev into an empty CXL root port (``slot`` = (host bridge, root port), or the
    first free one): cxl_pci adds ``memN``, cxl_mem its endpoint and the endpoint's decoders — no region, no DAX
    device, nothing online (the OS, here nodeagent, makes the region). Emits ``add`` for each new ``cxl`` device
    in that order; returns the events. ValueError when there is no such slot."""
    from . import cxl as simcxl

    with k.locked():
        if serial is None:
            serials = [int(k.tree.read(f"{simcxl.DEV}/{n}/serial").strip(), 16)
                       for n in k.tree.listdir(simcxl.DEV) if n.startswith("mem")]
            serial = max(serials, default=0x1D7E0000A000) + 1
        names = simcxl.hot_add_memdev(k, serial, ram_size, slot)
    return [emit(k, "add", "cxl", name) for name in names]


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


GiB = 1024**3


def generated(p: Preset, devices: int | None = None, device_size: int | None = None,
              block_size: int | None = None, dram_size: int | None = None) -> Preset:
    """``p`` with ``devices`` CXL expanders of ``device_size`` (hanging off the sockets in turn, target nodes after
    the DRAM nodes, equidistant: the emulator's default distances), ``block_size`` memory blocks and, with
    ``dram_size``, that much DRAM per node (laid end to end; what the node uses shrinks in proportion)."""
    bs = block_size or p.block_size
    if bs < 128 * 1024**2 or bs & (bs - 1):
        raise ValueError(f"--block-size: {bs} is not a power of two of at least 128MiB")
    out = replace(p, block_size=bs)
    if dram_size is not None:
        nodes = tuple(replace(n, start=i * dram_size, size=dram_size, used=n.used * dram_size // max(n.size, 1))
                      for i, n in enumerate(p.nodes))
        p = out = replace(out, nodes=nodes)
    for n in p.nodes:
        if n.start % bs or n.size % bs:
            raise ValueError(f"--block-size: node{n.id}'s DRAM ({n.start:#x} + {n.size:#x}) is not a whole number of "
                             f"{bs // 1024**2}MiB blocks")
    if devices is None and device_size is None:
        return out
    count = devices if devices is not None else len(p.dax)
    size = device_size or 64 * GiB
    if size < bs:
        raise ValueError(f"--device-size: {size} bytes is less than one memory block ({bs} bytes)")
    first = len(p.nodes)
    end = max((n.start + n.size for n in p.nodes), default=0)
    base = -(-max(end, 1 << 40) // bs) * bs
    stride = -(-size // bs) * bs
    sockets = [n.id for n in p.nodes if n.cpus] or [0]
    devs = tuple(simdax.DaxDef(f"dax{i}.0", i, first + i, base + i * stride, size, numa_node=sockets[i % len(sockets)])
                 for i in range(count))
    return replace(out, dax=devs, possible_nodes=max(p.possible_nodes, first + count), distances={},
                   node_tier={first + i: memory.KMEM_TIER for i in range(count)},
                   description=f"{p.description}; {count} generated CXL device(s) of {size // GiB} GiB, "
                   f"{bs // 1024**2} MiB blocks")


def next_dax(k: SimKernel, name: str, size: int, node: int, host_node: int) -> simdax.DaxDef:
    """A new CXL expander ``name`` placed after every range the node has, block-aligned, in the next region."""
    state = k.state()
    if name in state.get("dax", {}):
        raise ValueError(f"{name} exists already")
    if size <= 0:
        raise ValueError("--size must be positive")
    bs = memory.block_size(k)
    spec = k.meta.get("spec", {})
    ends = [int(n["start"]) + int(n["size"]) for n in spec.get("nodes", [])]
    ends += [int(d["start"]) + int(d["size"]) for d in state.get("dax", {}).values()]
    start = -(-max(ends + [1 << 40]) // bs) * bs
    regions = [int(n.split(".")[0][3:]) for n in state.get("dax", {}) if n.startswith("dax")]
    region = int(name.split(".")[0][3:]) if name.startswith("dax") and name[3:].split(".")[0].isdigit() \
        else max(regions + [-1]) + 1
    return simdax.DaxDef(name, region, node, start, size, numa_node=host_node)
