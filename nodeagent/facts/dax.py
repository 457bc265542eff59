"""DAX devices and the memory behind them, from one rooted sysfs walk (the same code on a real host and on a
simulated root).

For each ``/sys/bus/dax/devices/daxR.N``: region, size, alignment, ``resource`` (physical address), target
node, mode (from the driver it is bound to: ``kmem`` = system-ram, ``device_dax`` = devdax, none = disabled),
``memmap_on_memory``, and — for system-ram — how many of its memory blocks are online and in which zone; plus
the CXL region and memdevs behind it. Besides the devices: whether daxctl is installed (its path; it is only
ever run to change things), Debian's daxctl udev rule and the ``/etc/daxctl.conf.d`` sections it acts on, the
memory-hotplug settings on the kernel command line and in ``/sys/module/memory_hotplug/parameters``, and
swap. Memory tiers and which nodes have CPUs are in the core facts.

Blocks are read one by one only when needed: when a device's target node holds exactly that device's blocks
and no ZONE_NORMAL memory, the node's MemTotal says how many are online (all movable), which keeps a node with
tens of thousands of blocks quick to observe.
"""

from __future__ import annotations

import os
import re
from dataclasses import field
from typing import Any

from ..host import Host
from ..util.dataclass import asdict, dataclass
from ..util.kfmt import cmdline_params, parse_list, parse_meminfo
from . import SECTIONS, Facts
from .numa import node_blocks, read_block_size, read_zones
from .setters import daxctl_sections, udev_rules

DAX_DEVICES = "/sys/bus/dax/devices"
MEM = "/sys/devices/system/memory"
NODE = "/sys/devices/system/node"
CXL_DEVICES = "/sys/bus/cxl/devices"
#: Kernel command-line parameters that decide how hot-added memory comes online.
HOTPLUG_CMDLINE = ("memhp_default_state", "memory_hotplug.online_policy", "memory_hotplug.auto_movable_ratio",
                   "memory_hotplug.memmap_on_memory", "movable_node", "movablecore", "kernelcore")
HOTPLUG_PARAMS = ("online_policy", "auto_movable_ratio", "auto_movable_numa_aware", "memmap_on_memory")
#: struct page bytes per 4 KiB page: the DRAM that hot-added memory costs when its memmap is not on itself.
MEMMAP_PER_PAGE = 64
PAGE = 4096
HOTPLUG_PARAMS_DIR = "/sys/module/memory_hotplug/parameters"
#: memory_hotplug.memmap_on_memory values with which a device's own memmap_on_memory takes effect. The kernel
#: puts the struct pages on the hot-added memory only when both ask for it (mhp_supports_memmap_on_memory());
#: dax_cxl sets the device's attribute for every CXL region, but the parameter defaults to N.
MEMMAP_ON_MEMORY_ALLOWED = frozenset({"Y", "y", "1", "force"})


@dataclass(frozen=True)
class DaxDevice:
    name: str
    region: int
    size: int
    align: int | None
    resource: int | None  # physical start address
    target_node: int | None  # the node its memory joins as system-ram (None: the kernel gave none)
    numa_node: int | None  # the node of the device itself
    mode: str  # system-ram | devdax | disabled | other driver's name
    memmap_on_memory: bool | None
    blocks_total: int  # memory blocks its range covers (rounded inwards, as kmem hot-adds it)
    blocks_present: int  # of those, hot-added now
    blocks_online: int
    zones: dict[str, int] = field(default_factory=dict)  # online blocks per zone, as valid_zones names them
    backing: str = "other"  # cxl | pmem | hmem | other
    cxl_region: str | None = None
    cxl_memdevs: list[str] = field(default_factory=list)
    memmap_bytes: int = 0  # DRAM its struct pages take once hot-added (0 when they go on the device itself)
    #: its struct pages are on the device itself, or go there when it is hot-added: its memmap_on_memory and the
    #: kernel's memory_hotplug.memmap_on_memory both set
    memmap_self_hosted: bool = False

    @property
    def zone(self) -> str | None:
        """The one zone all online blocks are in; None when none is online or they are mixed."""
        return next(iter(self.zones)) if len(self.zones) == 1 else None

    @property
    def fully_online(self) -> bool:
        return self.mode == "system-ram" and self.blocks_total > 0 and self.blocks_online == self.blocks_total


@dataclass(frozen=True)
class DaxRegion:
    """A DAX region (``<region device>/dax_region``): a CXL region's is *dynamic* (its devices can be resized and
    more made in it: ``create``, ``available_size`` and ``seed`` exist), an hmem or pmem one *static* (the kernel
    hides those attributes)."""

    id: int
    size: int
    align: int | None
    dynamic: bool
    available: int | None  # bytes no device holds (None: static)
    seed: str | None  # the device ``create`` made that is not bound yet


@dataclass(frozen=True)
class DaxFacts:
    devices: list[DaxDevice]
    block_size: int | None
    daxctl: str | None  # the daxctl executable, None when not installed
    udev_rule: str | None  # the daxctl udev rule in effect (a second agent reconfiguring devices on add)
    daxctl_conf: list[dict[str, Any]]  # active [reconfigure-device ...] sections of /etc/daxctl.conf.d
    cmdline: dict[str, str]  # memory-hotplug parameters given on the kernel command line
    hotplug_params: dict[str, str]  # /sys/module/memory_hotplug/parameters
    swap_total: int  # bytes
    regions: list[DaxRegion] = field(default_factory=list)

    def device(self, name: str) -> DaxDevice | None:
        return next((d for d in self.devices if d.name == name), None)

    def region(self, rid: int) -> DaxRegion | None:
        return next((r for r in self.regions if r.id == rid), None)

    @property
    def memmap_allowed(self) -> bool:
        """The kernel lets a hot-added device keep its struct pages on itself (memory_hotplug.memmap_on_memory)."""
        return self.hotplug_params.get("memmap_on_memory") in MEMMAP_ON_MEMORY_ALLOWED


def from_facts(facts: Facts) -> DaxFacts:
    """The ``dax`` section of ``facts``, typed (empty when the facts were gathered without it)."""
    d = facts.sections.get("dax") or {}
    return DaxFacts(
        devices=[DaxDevice(**x) for x in d.get("devices", [])], block_size=d.get("block_size"),
        daxctl=d.get("daxctl"), udev_rule=d.get("udev_rule"), daxctl_conf=list(d.get("daxctl_conf", [])),
        cmdline=dict(d.get("cmdline", {})), hotplug_params=dict(d.get("hotplug_params", {})),
        swap_total=int(d.get("swap_total", 0)), regions=[DaxRegion(**x) for x in d.get("regions", [])])


def _int(text: str | None, base: int = 10) -> int | None:
    try:
        return int(text.strip(), base) if text is not None else None
    except ValueError:
        return None


def block_ids(resource: int, size: int, block_size: int) -> range:
    """The memory blocks kmem hot-adds for ``[resource, resource+size)``: whole blocks inside the range."""
    first = -(-resource // block_size)
    return range(first, max((resource + size) // block_size, first))


def kernel_allows_memmap_on_memory(host: Host) -> bool:
    v = host.read_opt(f"{HOTPLUG_PARAMS_DIR}/memmap_on_memory")
    return v is not None and v.strip() in MEMMAP_ON_MEMORY_ALLOWED


def read_device(host: Host, name: str, block_size: int | None,
                memmap_allowed: bool | None = None) -> DaxDevice | None:
    """One device as sysfs shows it now; None when it does not exist (any more). ``memmap_allowed``: whether
    the kernel lets a device keep its memmap on itself (read here when not given)."""
    base = f"{DAX_DEVICES}/{name}"
    size = _int(host.read_opt(f"{base}/size"))
    if size is None:
        return None
    m = re.fullmatch(r"dax(\d+)\.(\d+)", name)
    region = int(m.group(1)) if m else -1
    driver = host.fs.readlink(f"{base}/driver")
    drv = os.path.basename(driver) if driver else None
    mode = {"kmem": "system-ram", "device_dax": "devdax", None: "disabled"}.get(drv, drv or "disabled")
    resource = _int(host.read_opt(f"{base}/resource"), 16)
    target = _int(host.read_opt(f"{base}/target_node"))
    mom_text = host.read_opt(f"{base}/memmap_on_memory")
    memmap_on_memory = None if mom_text is None else mom_text.strip() in ("1", "Y", "y")
    if memmap_allowed is None:
        memmap_allowed = kernel_allows_memmap_on_memory(host)
    self_hosted = bool(memmap_on_memory) and memmap_allowed
    ids = block_ids(resource, size, block_size) if resource and block_size else range(0)
    present = online = 0
    zones: dict[str, int] = {}
    if mode == "system-ram" and ids:
        present, online, zones = _blocks(host, ids, target, block_size or 0, self_hosted)
    backing, cxl_region, memdevs = _backing(host, base)
    memmap = 0 if self_hosted else memmap_bytes(len(ids), block_size or 0)
    return DaxDevice(name=name, region=region, size=size, align=_int(host.read_opt(f"{base}/align")),
                     resource=resource, target_node=target if target is not None and target >= 0 else None,
                     numa_node=_int(host.read_opt(f"{base}/numa_node")), mode=mode,
                     memmap_on_memory=memmap_on_memory, blocks_total=len(ids), blocks_present=present,
                     blocks_online=online, zones=zones, backing=backing, cxl_region=cxl_region,
                     cxl_memdevs=memdevs, memmap_bytes=memmap, memmap_self_hosted=self_hosted)


def memmap_bytes(blocks: int, block_size: int) -> int:
    """The DRAM the struct pages of ``blocks`` hot-added memory blocks take when they are not on the memory."""
    return blocks * block_size // PAGE * MEMMAP_PER_PAGE


def block_state(host: Host, dev: DaxDevice, block_size: int) -> tuple[int, int, dict[str, int]]:
    """(present, online, {zone: online}) of ``dev``'s blocks now (what progress polling reads)."""
    if dev.resource is None or not block_size:
        return 0, 0, {}
    ids = block_ids(dev.resource, dev.size, block_size)
    return _blocks(host, ids, dev.target_node, block_size, dev.memmap_self_hosted) if ids else (0, 0, {})


def _blocks(host: Host, ids: range, node: int | None, block_size: int,
            memmap_self_hosted: bool) -> tuple[int, int, dict[str, int]]:
    """(present, online, {zone: online}) of the device's blocks."""
    if node is not None and not memmap_self_hosted:
        summary = _node_summary(host, ids, node, block_size)
        if summary is not None:
            return summary
    present = online = 0
    zones: dict[str, int] = {}
    for n in ids:
        state = host.read_opt(f"{MEM}/memory{n}/state")
        if state is None:
            continue
        present += 1
        if state.strip().startswith("online"):
            online += 1
            zone = (host.read_opt(f"{MEM}/memory{n}/valid_zones") or "").split()
            zones[zone[0] if zone else "unknown"] = zones.get(zone[0] if zone else "unknown", 0) + 1
    return present, online, zones


def _node_summary(host: Host, ids: range, node: int, block_size: int) -> tuple[int, int, dict[str, int]] | None:
    """The answer from the node's own summary when it is unambiguous: the node holds exactly these blocks and
    has no ZONE_NORMAL memory, so every online block is movable and MemTotal counts them."""
    zones = read_zones(host).get(node, [])
    if [(z.name, z.start_pfn * PAGE, z.spanned * PAGE, z.holes) for z in zones] == \
            [("Movable", ids[0] * block_size, len(ids) * block_size, False)]:
        return len(ids), len(ids), {"Movable": len(ids)}  # zoneinfo: exactly this range, online, movable
    mine = set(node_blocks(host, node))
    if not mine:
        return (0, 0, {}) if not host.fs.exists(f"{MEM}/memory{ids[0]}") else None
    if mine != set(ids):
        return None
    if node in parse_list(host.read_opt(f"{NODE}/has_normal_memory") or "", f"{NODE}/has_normal_memory"):
        return None
    total_kb = parse_meminfo(host.read_opt(f"{NODE}/node{node}/meminfo") or "").get("MemTotal")
    if total_kb is None or (total_kb * 1024) % block_size:
        return None
    online = total_kb * 1024 // block_size
    if online > len(ids):
        return None
    return len(ids), online, ({"Movable": online} if online else {})


def _backing(host: Host, base: str) -> tuple[str, str | None, list[str]]:
    """What provides the device's memory: a CXL region (and its memdevs), legacy/ACPI pmem, soft-reserved."""
    real = host.fs.realpath(base)
    if "/ndbus" in real:
        return "pmem", None, []
    region = next((c for c in real.split("/") if re.fullmatch(r"region\d+", c)
                   and host.fs.exists(f"{CXL_DEVICES}/{c}")), None)
    if region is None:
        return ("hmem" if "/hmem" in real else "other"), None, []
    memdevs = []
    ways = _int(host.read_opt(f"{CXL_DEVICES}/{region}/interleave_ways")) or 0
    for i in range(ways):
        decoder = (host.read_opt(f"{CXL_DEVICES}/{region}/target{i}") or "").strip()
        if not decoder:
            continue
        endpoint = os.path.dirname(host.fs.realpath(f"{CXL_DEVICES}/{decoder}"))
        uport = host.fs.readlink(f"{endpoint}/uport")
        if uport:
            memdevs.append(os.path.basename(uport))
    return "cxl", region, memdevs


def _udev_rule(host: Host) -> str | None:
    """The file of the udev rule that hands added DAX devices to daxctl (the first, if several), None when none
    is in effect (masked by a link to /dev/null or an empty file of the same name in /etc)."""
    return next((r.file for r in udev_rules(host) if "daxctl" in r.what), None)


def _daxctl_conf(host: Host) -> list[dict[str, Any]]:
    """Active ``[reconfigure-device NAME]`` sections (what daxctl --check-config would apply)."""
    return [{"file": s.file, "section": s.name, "settings": dict(s.settings)} for s in daxctl_sections(host)]


def _cmdline(host: Host) -> dict[str, str]:
    params = cmdline_params(host.read_opt("/proc/cmdline") or "")  # (facts.hardware, which reads it too, is
    return {k: v for k, v in params.items() if k in HOTPLUG_CMDLINE}  # for checks: not imported on this path)


def read_regions(host: Host, names: list[str]) -> list[DaxRegion]:
    """The DAX regions of the devices ``names`` (each read once, through its first device's parent)."""
    out: dict[int, DaxRegion] = {}
    for name in names:
        rid = int(name[3:].split(".")[0])
        if rid in out:
            continue
        attrs = os.path.dirname(host.fs.realpath(f"{DAX_DEVICES}/{name}")) + "/dax_region"
        size = _int(host.read_opt(f"{attrs}/size"))
        if size is None:
            continue
        dynamic = host.fs.exists(f"{attrs}/create")
        seed = (host.read_opt(f"{attrs}/seed") or "").strip() if dynamic else ""
        out[rid] = DaxRegion(rid, size, _int(host.read_opt(f"{attrs}/align")), dynamic,
                             _int(host.read_opt(f"{attrs}/available_size")) if dynamic else None, seed or None)
    return list(out.values())


def gather(host: Host) -> dict[str, Any]:
    block_size = read_block_size(host)
    names = [n for n in host.fs.listdir(DAX_DEVICES) if re.fullmatch(r"dax\d+\.\d+", n)]
    names.sort(key=lambda n: tuple(int(x) for x in n[3:].split(".")))
    params = {p: v.strip() for p in HOTPLUG_PARAMS
              if (v := host.read_opt(f"{HOTPLUG_PARAMS_DIR}/{p}")) is not None}
    allowed = params.get("memmap_on_memory") in MEMMAP_ON_MEMORY_ALLOWED
    devices = [dev for n in names if (dev := read_device(host, n, block_size, allowed)) is not None]
    meminfo = parse_meminfo(host.read_opt("/proc/meminfo") or "")
    daxctl = host.commands.which("daxctl")
    if daxctl and not host.is_real:  # as the node sees it, not where this host keeps the root
        daxctl = "/" + os.path.relpath(daxctl, host.root_dir)
    return {
        "devices": [asdict(d) for d in devices], "block_size": block_size, "daxctl": daxctl,
        "udev_rule": _udev_rule(host), "daxctl_conf": _daxctl_conf(host),
        "cmdline": _cmdline(host), "hotplug_params": params, "swap_total": meminfo.get("SwapTotal", 0) * 1024,
        "regions": [asdict(r) for r in read_regions(host, names)],
    }


SECTIONS["dax"] = gather
