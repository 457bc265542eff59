"""The CXL bus as the kernel's CXL subsystem shows it under ``/sys/bus/cxl/devices`` (read-only).

Layout as captured on a real 6.12 guest (QEMU 10 cxl-type3, ``tests/realkernel/captured/cxl-*``):

- ``rootN`` (platform ``ACPI0017:00``) → root decoders ``decoderN.M``: one per CXL window (CFMWS) with its host
  physical ``start``/``size``, ``interleave_ways``/``_granularity``, ``cap_ram``/``cap_pmem`` and the host bridges
  it interleaves (``target_list``), plus ``create_ram_region`` (the next region name);
- ``portN`` (a host bridge ``pci0000:XX`` or a switch) → switch decoders; ``endpointN`` (its ``uport`` is the
  memdev) → endpoint decoders with ``mode`` (``none``/``ram``/``pmem``), ``dpa_size``/``dpa_resource``, and the
  ``region`` they belong to; a decoder is enabled (decodes) while that region is committed — its ``size`` alone
  does not say (it keeps the region's size after a reset);
- ``memN`` under its PCI function (``/sys/devices/pci0000:0c/0000:0c:00.0/0000:0d:00.0/memN``): ``serial``,
  ``ram/size``, ``pmem/size``, ``firmware_version``, ``numa_node`` (-1 in QEMU); the PCIe link is the function's;
- ``regionN`` under its root decoder: ``mode``, ``uuid`` (empty for ram), ``resource``/``size``,
  ``interleave_ways``/``_granularity``, ``targetK`` (endpoint decoders by position), ``commit``; once bound to the
  ``cxl_region`` driver, ``dax_regionN`` and the DAX device ``daxN.0`` under it.

Memdev numbers follow probe order, which is not stable across boots (two QEMU memdevs swapped between two boots):
the serial is a memdev's identity. ``cxl list`` (cxl-cli) cross-checks the sysfs walk where it is installed
(:mod:`nodeagent.facts.cxl_cli`); disagreements are reported, sysfs stays the source.
"""

from __future__ import annotations

import os
import re
from dataclasses import field, replace
from typing import Any

from ..host import Host
from ..util.dataclass import asdict, dataclass
from . import SECTIONS, Facts

CXL_BUS = "/sys/bus/cxl"
CXL = f"{CXL_BUS}/devices"
DAX = "/sys/bus/dax/devices"
#: The modules a CXL.mem expander needs to become memory, in the order they matter.
MODULES = ("cxl_acpi", "cxl_pci", "cxl_port", "cxl_mem", "dax_cxl", "kmem")
#: What each does, for the hint of a missing one.
MODULE_ROLE = {
    "cxl_acpi": "the CXL windows (CFMWS) and host bridges from ACPI",
    "cxl_pci": "the memdevs of CXL type-3 PCI devices",
    "cxl_port": "ports and their HDM decoders",
    "cxl_mem": "endpoints of memdevs",
    "dax_cxl": "a DAX device for each RAM region",
    "kmem": "onlining DAX devices as system RAM",
}


@dataclass(frozen=True)
class Link:
    speed: str | None
    width: int | None
    max_speed: str | None
    max_width: int | None


@dataclass(frozen=True)
class Memdev:
    name: str
    serial: int | None
    ram_size: int
    pmem_size: int
    firmware_version: str | None
    pci: str | None  # the PCI function, 0000:0d:00.0
    host_bridge: str | None  # pci0000:0c
    numa_node: int | None  # None: the kernel gives none (-1)
    endpoint: str | None  # endpointN, None until cxl_mem attached it
    driver: str | None  # cxl_mem when probed
    link: Link | None


@dataclass(frozen=True)
class Decoder:
    name: str
    kind: str  # root | switch | endpoint
    port: str  # rootN | portN | endpointN
    start: int | None
    size: int | None  # HPA decoded; 0 while the decoder is not committed (root: the window)
    interleave_ways: int | None
    interleave_granularity: int | None
    locked: bool
    targets: list[str] = field(default_factory=list)  # root/switch: target_list ids in position order
    region: str | None = None
    cap_ram: bool | None = None  # root decoders
    cap_pmem: bool | None = None
    mode: str | None = None  # endpoint: none | ram | pmem
    dpa_resource: int | None = None
    dpa_size: int | None = None
    state: str = "disabled"  # enabled: it decodes (a root decoder, or one of a committed region), as cxl list says


@dataclass(frozen=True)
class Region:
    name: str
    root_decoder: str
    type: str  # ram | pmem
    uuid: str | None
    start: int | None
    size: int
    interleave_ways: int
    interleave_granularity: int
    targets: list[str]  # endpoint decoders in position order ("" = position not filled)
    memdevs: list[str]  # the memdev behind each position
    committed: bool
    driver: str | None  # cxl_region when bound (what makes the DAX device)
    dax_devices: list[str] = field(default_factory=list)

    @property
    def decode_state(self) -> str:
        return "commit" if self.committed else "reset"


@dataclass(frozen=True)
class DaxOwner:
    device: str
    owner: str  # cxl-region | dax_hmem | pmem | other
    region: str | None = None
    driver: str | None = None  # kmem | device_dax | None


@dataclass(frozen=True)
class CxlFacts:
    present: bool  # /sys/bus/cxl exists (cxl_core loaded)
    modules: dict[str, str]  # name → loaded | builtin | available (not loaded) | absent
    memdevs: list[Memdev]
    decoders: list[Decoder]
    regions: list[Region]
    ports: dict[str, dict[str, Any]]  # name → {"host": ..., "parent": ..., "dports": [...]}
    next_region: dict[str, str]  # root decoder → the name its create_ram_region hands out next
    dax: list[DaxOwner]
    cxl_cli: str | None = None  # the cxl executable, None when not installed
    cli_differences: list[str] = field(default_factory=list)
    pci_functions: list[str] = field(default_factory=list)  # PCI functions of class CXL memory device (0x0502)

    @property
    def missing_modules(self) -> list[str]:
        return [m for m, s in self.modules.items() if s in ("available", "absent")]

    def memdev(self, name: str) -> Memdev | None:
        return next((m for m in self.memdevs if m.name == name), None)

    def decoder(self, name: str) -> Decoder | None:
        return next((d for d in self.decoders if d.name == name), None)

    def root_decoders(self) -> list[Decoder]:
        return [d for d in self.decoders if d.kind == "root"]

    @property
    def unprobed(self) -> list[str]:
        """CXL memory devices on PCI that no memdev stands for (cxl_pci not loaded, or its probe failed)."""
        return [p for p in self.pci_functions if p not in {m.pci for m in self.memdevs}]

    @property
    def bare_memdevs(self) -> list[Memdev]:
        """Memdevs no region uses: capacity that is not memory yet."""
        used = {m for r in self.regions for m in r.memdevs}
        return [m for m in self.memdevs if m.name not in used]


def from_facts(facts: Facts) -> CxlFacts:
    """The ``cxl`` section of ``facts``, typed (empty when the facts were gathered without it)."""
    return from_dict(facts.sections.get("cxl") or {})


def from_dict(d: dict[str, Any]) -> CxlFacts:
    def memdev(m: dict[str, Any]) -> Memdev:
        link = m.get("link")
        return Memdev(**{**m, "link": Link(**link) if link else None})

    return CxlFacts(
        present=bool(d.get("present")), modules=dict(d.get("modules", {})),
        memdevs=[memdev(m) for m in d.get("memdevs", [])],
        decoders=[Decoder(**x) for x in d.get("decoders", [])],
        regions=[Region(**r) for r in d.get("regions", [])], ports=dict(d.get("ports", {})),
        next_region=dict(d.get("next_region", {})), dax=[DaxOwner(**x) for x in d.get("dax", [])],
        cxl_cli=d.get("cxl_cli"), cli_differences=list(d.get("cli_differences", [])),
        pci_functions=list(d.get("pci_functions", [])))


# -- reading ---------------------------------------------------------------------------------------------

def _int(text: str | None, base: int = 0) -> int | None:
    try:
        return int(text.strip(), base) if text is not None and text.strip() else None
    except ValueError:
        return None


def _flag(text: str | None) -> bool | None:
    return None if text is None else text.strip() in ("1", "Y", "y")


def _str(text: str | None) -> str | None:
    return text.strip() if text is not None and text.strip() else None


def _link_name(host: Host, path: str) -> str | None:
    target = host.fs.readlink(path)
    return os.path.basename(target) if target else None


def _real(host: Host, path: str) -> str:
    """The kernel path a sysfs link resolves to (``/sys/devices/...``), root-relative."""
    root = host.fs.real_root
    real = os.path.realpath(root + path if root != "/" else path)
    return "/" + os.path.relpath(real, root) if root != "/" else real


def _numbered(name: str, *prefixes: str) -> bool:
    """``name`` is one of ``prefixes`` and a decimal number (``re.fullmatch(r"(root|port)\\d+", name)``, without
    compiling a pattern for each kind of name)."""
    return any(name.startswith(p) and name[len(p):].isdecimal() for p in prefixes)


def _numbered_pair(name: str, prefix: str) -> bool:
    """``name`` is ``prefix`` and two decimal numbers joined by a dot (``decoder0.1``, ``dax0.0``)."""
    first, dot, second = name[len(prefix):].partition(".") if name.startswith(prefix) else ("", "", "")
    return bool(dot) and first.isdecimal() and second.isdecimal()


def _sort_key(name: str) -> tuple[Any, ...]:
    return tuple(int(x) if x.isdigit() else x for x in re.split(r"(\d+)", name))


def read_modules(host: Host, release: str) -> dict[str, str]:
    """Each CXL module: ``loaded`` (``/sys/module/NAME/initstate``), ``builtin`` (``modules.builtin``),
    ``available`` (in ``modules.dep``: modprobe would load it) or ``absent``."""
    base = f"/lib/modules/{release}"
    builtin = _module_names(host.read_opt(f"{base}/modules.builtin") or "")
    dep = _module_names(host.read_opt(f"{base}/modules.dep") or "")
    out = {}
    for m in MODULES:
        if host.fs.exists(f"/sys/module/{m}/initstate"):
            out[m] = "loaded"
        elif m in builtin:
            out[m] = "builtin"
        elif m in dep:
            out[m] = "available"
        else:
            out[m] = "absent"
    return out


def _module_names(text: str) -> set[str]:
    names = set()
    for line in text.splitlines():
        path = line.split(":", 1)[0].strip()
        if path:
            names.add(re.sub(r"\.ko(\.(xz|gz|zst))?$", "", os.path.basename(path)).replace("-", "_"))
    return names


def read_memdev(host: Host, name: str) -> Memdev:
    base = f"{CXL}/{name}"
    real = _real(host, base)
    parts = real.split("/")
    bridge = next((p for p in parts if re.fullmatch(r"pci[0-9a-f]{4}:[0-9a-f]{2}", p)), None)
    pci = parts[-2] if len(parts) > 2 and re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d", parts[-2]) \
        else None
    link = None
    if pci:
        d = host.fs.read_attrs(os.path.dirname(real), ("current_link_speed", "current_link_width", "max_link_speed",
                                                        "max_link_width"))
        speed, width = d["current_link_speed"], d["current_link_width"]
        if speed is not None or width is not None:
            link = Link(_str(speed), _int(width, 10), _str(d["max_link_speed"]), _int(d["max_link_width"], 10))
    a = host.fs.read_attrs(base, ("numa_node", "serial", "firmware_version"))
    numa = _int(a["numa_node"], 10)
    return Memdev(
        name=name, serial=_int(a["serial"]),
        ram_size=_int(host.read_opt(f"{base}/ram/size")) or 0, pmem_size=_int(host.read_opt(f"{base}/pmem/size")) or 0,
        firmware_version=_str(a["firmware_version"]), pci=pci, host_bridge=bridge,
        numa_node=numa if numa is not None and numa >= 0 else None, endpoint=None,
        driver=_link_name(host, f"{base}/driver"), link=link)


#: What each kind of decoder's facts read (after ``devtype``).
_DECODER_ATTRS = {kind: ("target_list", "start", "size", "interleave_ways", "interleave_granularity", "locked",
                         "region", *extra)
                  for kind, extra in (("root", ("cap_ram", "cap_pmem")), ("switch", ()),
                                      ("endpoint", ("mode", "dpa_resource", "dpa_size")))}


def read_decoder(host: Host, name: str) -> Decoder | None:
    base = f"{CXL}/{name}"
    devtype = _str(host.read_opt(f"{base}/devtype")) or ""
    kind = {"cxl_decoder_root": "root", "cxl_decoder_switch": "switch", "cxl_decoder_endpoint": "endpoint"}.get(devtype)
    if kind is None:
        return None
    a = host.fs.read_attrs(base, _DECODER_ATTRS[kind])  # (one walk to the decoder, then an openat per attribute)
    port = os.path.basename(os.path.dirname(_real(host, base)))
    targets = (a["target_list"] or "").strip()
    mode = _str(a["mode"]) if kind == "endpoint" else None
    dpa = _int(a["dpa_resource"]) if kind == "endpoint" else None
    return Decoder(
        name=name, kind=kind, port=port, start=_int(a["start"]),
        size=_int(a["size"]), interleave_ways=_int(a["interleave_ways"], 10),
        interleave_granularity=_int(a["interleave_granularity"], 10),
        locked=bool(_flag(a["locked"])),
        targets=[t for t in targets.split(",") if t] if kind != "endpoint" else [],
        region=_str(a["region"]),
        cap_ram=_flag(a["cap_ram"]) if kind == "root" else None,
        cap_pmem=_flag(a["cap_pmem"]) if kind == "root" else None,
        mode=mode, dpa_resource=None if dpa is None or dpa == 2**64 - 1 else dpa,
        dpa_size=_int(a["dpa_size"]) if kind == "endpoint" else None)


def read_region(host: Host, name: str, endpoint_memdev: dict[str, str]) -> Region:
    base = f"{CXL}/{name}"
    a = host.fs.read_attrs(base, ("interleave_ways", "resource", "mode", "uuid", "size", "interleave_granularity",
                                  "commit"))
    ways = _int(a["interleave_ways"], 10) or 0
    t = host.fs.read_attrs(base, [f"target{i}" for i in range(ways)])
    targets = [(t[f"target{i}"] or "").strip() for i in range(ways)]
    memdevs = []
    for t in targets:
        port = os.path.basename(os.path.dirname(_real(host, f"{CXL}/{t}"))) if t else ""
        memdevs.append(endpoint_memdev.get(port, ""))
    real = _real(host, base)
    dax_region = f"{real}/dax_{name}"
    dax = sorted((n for n in host.fs.listdir(dax_region) if _numbered_pair(n, "dax")), key=_sort_key)
    res = _int(a["resource"])
    return Region(
        name=name, root_decoder=os.path.basename(os.path.dirname(real)),
        type=_str(a["mode"]) or "ram", uuid=_str(a["uuid"]),
        start=None if res is None or res == 2**64 - 1 else res, size=_int(a["size"]) or 0,
        interleave_ways=ways, interleave_granularity=_int(a["interleave_granularity"], 10) or 0,
        targets=targets, memdevs=memdevs, committed=bool(_flag(a["commit"])),
        driver=_link_name(host, f"{base}/driver"), dax_devices=dax)


def read_ports(host: Host, names: list[str]) -> dict[str, dict[str, Any]]:
    out = {}
    for name in names:
        base = f"{CXL}/{name}"
        dports = sorted((n for n in host.fs.listdir(base) if _numbered(n, "dport")), key=_sort_key)
        out[name] = {
            "host": _link_name(host, f"{base}/uport"),
            "parent": os.path.basename(os.path.dirname(_real(host, base))),
            "dports": {d[5:]: _link_name(host, f"{base}/{d}") for d in dports},
            "decoders_committed": _int(host.read_opt(f"{base}/decoders_committed"), 10),
        }
    return out


def read_dax_owners(host: Host) -> list[DaxOwner]:
    """Which driver's range each DAX device is: a CXL region's, dax_hmem's (soft-reserved), pmem's."""
    out = []
    names = sorted((n for n in host.fs.listdir(DAX) if _numbered_pair(n, "dax")), key=_sort_key)
    for n in names:
        real = _real(host, f"{DAX}/{n}")
        region = next((c for c in real.split("/") if _numbered(c, "region")
                       and host.fs.exists(f"{CXL}/{c}")), None)
        if region:
            owner = "cxl-region"
        elif re.search(r"/hmem\.?\d+/", real):
            owner = "dax_hmem"
        elif "/ndbus" in real:
            owner = "pmem"
        else:
            owner = "other"
        out.append(DaxOwner(n, owner, region, _link_name(host, f"{DAX}/{n}/driver")))
    return out


def read_pci_functions(host: Host) -> list[str]:
    """PCI functions whose class is CXL memory device (base 0x05, sub-class 0x02), with or without a driver."""
    out = []
    for name in host.fs.listdir("/sys/bus/pci/devices"):
        cls = (host.read_opt(f"/sys/bus/pci/devices/{name}/class") or "").strip().lower()
        if cls.startswith("0x0502"):
            out.append(name)
    return out


def read(host: Host, release: str = "") -> CxlFacts:
    modules = read_modules(host, release)
    present = host.fs.is_dir(CXL)
    names = host.fs.listdir(CXL)
    memdevs = [read_memdev(host, n) for n in sorted((n for n in names if _numbered(n, "mem")), key=_sort_key)]
    port_names = sorted((n for n in names if _numbered(n, "root", "port", "endpoint")), key=_sort_key)
    ports = read_ports(host, port_names)
    endpoint_memdev = {p: info["host"] for p, info in ports.items() if p.startswith("endpoint") and info["host"]}
    memdevs = [Memdev(**{**asdict(m), "link": m.link,
                         "endpoint": next((p for p, md in endpoint_memdev.items() if md == m.name), None)})
               for m in memdevs]
    decoders = [d for n in sorted((n for n in names if _numbered_pair(n, "decoder")), key=_sort_key)
                if (d := read_decoder(host, n)) is not None]
    regions = [read_region(host, n, endpoint_memdev)
               for n in sorted((n for n in names if _numbered(n, "region")), key=_sort_key)]
    committed = {r.name for r in regions if r.committed}
    decoders = [replace(d, state="enabled" if d.kind == "root" or d.region in committed else "disabled")
                for d in decoders]
    next_region = {d.name: nxt for d in decoders if d.kind == "root"
                   if (nxt := _str(host.read_opt(f"{CXL}/{d.name}/create_ram_region")))}
    return CxlFacts(present=present, modules=modules, memdevs=memdevs, decoders=decoders, regions=regions,
                    ports=ports, next_region=next_region, dax=read_dax_owners(host),
                    pci_functions=read_pci_functions(host))


def gather(host: Host) -> dict[str, Any]:
    release = (host.read_opt("/proc/sys/kernel/osrelease") or "").strip()
    facts = read(host, release)
    from .cxl_cli import cli_check

    cli, diffs = cli_check(host, facts)
    d = asdict(facts)
    d.update(cxl_cli=cli, cli_differences=diffs)
    return d


SECTIONS["cxl"] = gather


# -- text ----------------------------------------------------------------------------------------------

def _size(n: int | None) -> str:
    from ..util.quantities import format_size

    return format_size(n) if n is not None else "-"


def summary_lines(f: Facts) -> list[str]:
    """The CXL part of ``nodeagent facts`` (nothing on a node without the bus or memdevs)."""
    c = from_facts(f)
    if not (c.memdevs or c.decoders or c.regions or c.pci_functions):
        return []  # no CXL hardware (Debian's kernel has cxl_core built in: an empty bus is every machine's)
    out = [f"CXL bus: {len(c.memdevs)} memdev(s), {len(c.root_decoders())} window(s), {len(c.regions)} region(s)"
           + (f"  (cxl list {c.cxl_cli}: {'agrees' if not c.cli_differences else 'DIFFERS'})" if c.cxl_cli else "")]
    for m in c.memdevs:
        link = f"  link {m.link.speed} x{m.link.width}" if m.link and m.link.speed else ""
        where = f"  {m.pci or '?'} on {m.host_bridge or '?'}  node {m.numa_node if m.numa_node is not None else '-'}"
        cap = f"ram {_size(m.ram_size)}" + (f" pmem {_size(m.pmem_size)}" if m.pmem_size else "")
        serial = f"serial {m.serial:#x}" if m.serial is not None else "serial ?"
        use = next((r.name for r in c.regions if m.name in r.memdevs), None)
        out.append(f"  {m.name}  {cap}  {serial}  fw {m.firmware_version or '?'}{where}{link}  "
                   + (f"in {use}" if use else "no region (capacity not in use)"))
    for d in c.root_decoders():
        caps = "+".join(x for x, on in (("ram", d.cap_ram), ("pmem", d.cap_pmem)) if on) or "none"
        out.append(f"  window {d.name}  [{d.start or 0:#x}, +{_size(d.size)})  x{d.interleave_ways} "
                   f"{d.interleave_granularity}B  {caps}  next region {c.next_region.get(d.name, '-')}")
    for r in c.regions:
        pos = ", ".join(f"{i}:{t or '-'}({m or '?'})"
                        for i, (t, m) in enumerate(zip(r.targets, r.memdevs, strict=True)))
        out.append(f"  {r.name}  {r.type} {_size(r.size)} at {r.start:#x}" if r.start is not None
                   else f"  {r.name}  {r.type} {_size(r.size)}")
        out[-1] += (f"  x{r.interleave_ways} {r.interleave_granularity}B  [{pos}]  {r.decode_state}"
                    f"  {'bound' if r.driver else 'not bound'}  dax: {', '.join(r.dax_devices) or '-'}")
    for o in c.dax:
        if o.owner != "cxl-region":
            out.append(f"  {o.device}  owned by {o.owner}" + (f" ({o.driver})" if o.driver else ""))
    if c.unprobed:
        out.append(f"  CXL memory devices on PCI without a memdev: {', '.join(c.unprobed)} "
                   "(is cxl_pci loaded? `dmesg | grep cxl` says why a probe failed)")
    if c.missing_modules:
        out.append("  modules not loaded: " + ", ".join(f"{m} ({c.modules[m]})" for m in c.missing_modules)
                   + ("; `modprobe -a " + " ".join(m for m in c.missing_modules if c.modules[m] == "available") + "`"
                      if any(c.modules[m] == "available" for m in c.missing_modules) else ""))
    out += [f"  cxl list differs: {d}" for d in c.cli_differences]
    return out
