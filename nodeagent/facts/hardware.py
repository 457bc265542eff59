"""Read-only observations of the hardware the preflight checks judge: CPU, virtualization, PCI GPUs and
display-only devices (a BMC's VGA is not a GPU), GPU memory, mounts (DAX devices: :mod:`.dax`). Everything
goes through the rooted host; nothing here writes.

These are gathered on demand by the checks that need them (not by every ``facts`` run: ``nvidia-smi`` alone
can take a second), and each returns plain data that serializes to JSON as a check's evidence.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import field
from typing import Any

from ..host import Host
from ..host.mountinfo import unescape
from ..util.dataclass import asdict, dataclass
from ..util.errors import CommandError, HostError
from ..util.kfmt import cmdline_params  # noqa: F401  (re-exported: checks and drift causes use it from here)

PCI = "/sys/bus/pci/devices"
#: PCI class codes of GPUs: VGA-compatible (0x0300) and 3D controllers (0x0302, what datacenter GPUs report).
GPU_CLASSES = {0x0300: "VGA compatible controller", 0x0302: "3D controller"}
PCI_VENDORS = {"0x10de": "NVIDIA", "0x1002": "AMD", "0x8086": "Intel", "0x1ae0": "Google", "0x1d0f": "Amazon"}


# -- CPU -----------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CpuInfo:
    model: str
    vendor: str
    count: int
    flags: tuple[str, ...]  # enabled on every CPU (the intersection)
    models: tuple[str, ...] = ()  # every distinct model name, when CPUs differ

    @property
    def has_hypervisor_flag(self) -> bool:
        return "hypervisor" in self.flags


_CPUINFO_KEYS = frozenset({"processor", "model name", "cpu model", "vendor_id", "cpu implementer", "flags", "features"})


def read_cpuinfo(host: Host) -> CpuInfo | None:
    """``/proc/cpuinfo`` as the kernel shows it (the flags are what the OS enabled, not raw CPUID)."""
    text = host.read_opt("/proc/cpuinfo")
    if text is None:
        return None
    models: list[str] = []
    vendor = ""
    flag_texts: list[str] = []
    for block in re.split(r"\n\s*\n", text.strip()):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if sep and (key := key.strip().lower()) in _CPUINFO_KEYS:  # (a CPU has ~25 lines; 7 matter)
                fields[key] = value.strip()
        if "processor" not in fields:
            continue
        models.append(fields.get("model name", fields.get("cpu model", "")))
        vendor = vendor or fields.get("vendor_id", fields.get("cpu implementer", ""))
        flag_texts.append(fields.get("flags") or fields.get("features") or "")
    if not flag_texts:
        return None
    common = set.intersection(*(set(t.split()) for t in dict.fromkeys(flag_texts)))  # CPUs mostly share one
    first = (re.search(r"^(?:flags|features)\s*:(.*)$", text, re.M) or re.match("()", "")).group(1).split()
    distinct = tuple(dict.fromkeys(models))
    # in the kernel's order (the first CPU's), as /proc/cpuinfo prints them
    flags = tuple(dict.fromkeys(f for f in first if f in common)) or tuple(sorted(common))
    return CpuInfo(models[0], vendor, len(models), flags, distinct if len(distinct) > 1 else ())


#: Generic hypervisor CPU models: (pattern on the model name, what it is). They expose a lowest-common-denominator
#: instruction set whatever the host has.
GENERIC_MODELS: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(p), what) for p, what in (
    (r"^Common KVM processor$", "QEMU's kvm64 model"),
    (r"^Common 32-bit KVM processor$", "QEMU's kvm32 model"),
    (r"^QEMU Virtual CPU version", "QEMU's qemu64/qemu32 model"),
    (r"^QEMU TCG CPU version", "QEMU's TCG (software-emulated) CPU"),
    (r"^Virtual CPU [0-9a-f]+$", "a generic hypervisor CPU model"),
))
#: QEMU's named models (``-cpu Haswell``, ``EPYC-Rome``...): real instruction sets, but fixed ones — the guest
#: sees that model's flags, not the host's.
NAMED_QEMU_MODELS = re.compile(
    r"^(Intel (Core|Xeon) Processor \(|Intel Core i7 9xx|Intel Xeon E3-12xx|Intel Xeon E312xx|Westmere E56xx|"
    r"AMD Opteron \d+ \(Gen|AMD Opteron \d+xx class|AMD EPYC(-\w+)? Processor|Hygon Dhyana Processor)")

def classify_model(model: str) -> tuple[str, str] | None:
    """``("generic", what)``, ``("named", what)`` or None for a model name that looks like real hardware."""
    for pattern, what in GENERIC_MODELS:
        if pattern.search(model):
            return "generic", what
    if NAMED_QEMU_MODELS.search(model):
        return "named", "a named QEMU CPU model"
    return None


@dataclass(frozen=True)
class Virtualization:
    """Every sign of a hypervisor, each with where it was seen. ``kind`` is None on bare metal."""

    kind: str | None
    evidence: tuple[str, ...] = field(default_factory=tuple)


#: DMI sys_vendor / product_name words that name a hypervisor.
_DMI_VIRT = (("QEMU", "kvm"), ("KVM", "kvm"), ("VMware", "vmware"), ("innotek", "oracle"), ("VirtualBox", "oracle"),
             ("Xen", "xen"), ("Microsoft Corporation", "microsoft"), ("Amazon EC2", "amazon"), ("Google", "google"),
             ("OpenStack", "kvm"), ("Parallels", "parallels"), ("Bochs", "bochs"), ("Cloud Hypervisor", "kvm"))


def read_virtualization(host: Host, cpu: CpuInfo | None) -> Virtualization:
    evidence: list[str] = []
    problems: list[str] = []
    kinds: list[str] = []
    if cpu is not None and cpu.has_hypervisor_flag:
        evidence.append("/proc/cpuinfo: the 'hypervisor' flag is set")
    hv = (host.read_opt("/sys/hypervisor/type") or "").strip()
    if hv:
        evidence.append(f"/sys/hypervisor/type: {hv}")
        kinds.append(hv)
    vendor = (host.read_opt("/sys/class/dmi/id/sys_vendor") or "").strip()
    product = (host.read_opt("/sys/class/dmi/id/product_name") or "").strip()
    for word, kind in _DMI_VIRT:
        if word in vendor or (word in product and word != "Google"):
            evidence.append(f"DMI: sys_vendor {vendor!r}, product_name {product!r}")
            kinds.append(kind)
            break
    if host.commands.which("systemd-detect-virt"):
        try:
            out = host.cached_probe("systemd-detect-virt --vm",  # per boot: a VM does not stop being one
                        lambda: host.run(["systemd-detect-virt", "--vm"], timeout=10).stdout).strip()
            if out and out != "none":
                evidence.append(f"systemd-detect-virt --vm: {out}")
                kinds.insert(0, out)
        except CommandError as exc:  # the other signs stand; the evidence says why this one is missing
            problems.append(f"systemd-detect-virt could not run: {exc}")
    if not evidence:
        return Virtualization(None, tuple(problems))
    return Virtualization(kinds[0] if kinds else "unknown", tuple(evidence + problems))


def read_cmdline(host: Host) -> str:
    return (host.read_opt("/proc/cmdline") or "").strip()


def arch(host: Host, cpu: CpuInfo | None) -> str:
    """The machine's architecture (``uname -m``), from ``/proc/sys/kernel/arch`` or the shape of cpuinfo."""
    text = (host.read_opt("/proc/sys/kernel/arch") or "").strip()
    if text:
        return text
    if cpu is not None and cpu.vendor.startswith("0x"):
        return "aarch64"
    return "x86_64"


# -- PCI GPUs and display-only devices --------------------------------------------------------------------------

#: PCI classes (base class << 8 | subclass) of GPUs and accelerators: VGA (0x0300), 3D (0x0302: datacenter GPUs),
#: other display controller (0x0380: AMD Instinct, Intel Data Center GPU Max) and processing accelerator (0x1200:
#: Habana Gaudi, AMD MI300).
GPU_CLASSES = {0x0300: "VGA compatible controller", 0x0302: "3D controller", 0x0380: "Display controller",
               0x1200: "Processing accelerator"}
#: The vendors whose devices of those classes are GPUs or accelerators nodeagent judges.
COMPUTE_VENDORS = {"0x10de": "NVIDIA", "0x1002": "AMD", "0x8086": "Intel", "0x1da3": "Habana"}
#: Vendors whose display controllers only ever drive a console: BMC video (every server has one, on a Gen1/Gen2
#: x1 link or behind a PCIe-to-PCI bridge) and the emulated adapters of hypervisors.
DISPLAY_VENDORS = {
    "0x1a03": "ASPEED",          # AST2400/2500/2600 BMC video (driver ast): Supermicro, Gigabyte, ASRock Rack, Quanta
    "0x102b": "Matrox",          # G200eR/eW/eH/eW3 in Dell iDRAC, HPE iLO, Lenovo XCC (mgag200)
    "0x19e5": "Huawei",          # iBMC Hi1710/Hi1711 video (hibmc-drm)
    "0x1050": "Nuvoton",         # Winbond/Nuvoton NPCM7xx/8xx BMC video
    "0x18ca": "XGI",             # Volari Z7/Z9/Z11 BMC video of older Supermicro and Tyan boards (xgifb)
    "0x126f": "Silicon Motion",  # SM750/SM768 on Inspur, Loongson and Phytium server boards (sm750fb)
    "0x1013": "Cirrus Logic",    # QEMU's cirrus-vga (cirrus-qemu), old BMCs
    "0x1234": "QEMU",            # QEMU's standard VGA 1234:1111 (bochs-drm)
    "0x1b36": "Red Hat",         # QEMU QXL (qxl)
    "0x1af4": "virtio",          # virtio-gpu (virtio-pci)
    "0x15ad": "VMware",          # SVGA II (vmwgfx)
    "0x80ee": "VirtualBox",      # VBoxVGA / VMSVGA (vboxvideo)
    "0x1414": "Microsoft",       # Hyper-V synthetic video (hyperv_drm)
}
PCI_VENDORS = {**COMPUTE_VENDORS, **DISPLAY_VENDORS, "0x1ae0": "Google", "0x1d0f": "Amazon", "0x144d": "Samsung",
               "0x15b3": "Mellanox", "0x14e4": "Broadcom", "0x1000": "Broadcom/LSI", "0x1022": "AMD"}
#: Drivers that make a device display-only, whatever its vendor: BMC and firmware framebuffer drivers, emulated
#: adapters. A bound driver decides (it is what the kernel does with the device).
DISPLAY_DRIVERS = frozenset({"ast", "mgag200", "hibmc-drm", "hibmc_drm", "simpledrm", "efifb", "simplefb", "vesafb",
                             "bochs", "bochs-drm", "cirrus", "cirrus-qemu", "qxl", "vmwgfx", "vboxvideo",
                             "hyperv_drm", "hyperv_fb", "matroxfb_base", "xgifb", "sm750fb"})
#: Drivers of GPUs and accelerators. i915 and xe drive Intel's integrated graphics as well as its discrete
#: GPUs, so for them the device's place decides (:func:`_intel_integrated`).
COMPUTE_DRIVERS = frozenset({"nvidia", "nouveau", "amdgpu", "radeon", "i915", "xe", "habanalabs",
                             "nvgrace_gpu_vfio_pci"})
_ADDR = re.compile(r"([0-9a-f]{4}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])")
#: Effective bytes per transfer after line encoding: 8b/10b up to Gen2, 128b/130b from Gen3 (Gen6's FLIT ~ same).
_ENCODING = {1: 0.8, 2: 0.8}


@dataclass(frozen=True)
class PciLink:
    speed: str | None  # "32.0 GT/s PCIe"
    width: int | None
    max_speed: str | None
    max_width: int | None

    @staticmethod
    def gen(speed: str | None) -> int | None:
        """PCIe generation of a link speed text (``16.0 GT/s PCIe`` → 4; "Unknown" → None)."""
        m = re.match(r"\s*([0-9.]+)\s*GT/s", speed or "")
        if not m:
            return None
        return {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6, 128.0: 7}.get(float(m.group(1)))

    @property
    def trained(self) -> bool:
        return bool(self.width) and self.gen(self.speed) is not None

    @staticmethod
    def gbps(speed: str | None, width: int | None) -> float | None:
        """One direction's bandwidth in GB/s of a link at ``speed`` × ``width`` (after line encoding)."""
        gen = PciLink.gen(speed)
        if gen is None or not width:
            return None
        gts = float(re.match(r"\s*([0-9.]+)", speed or "").group(1))  # type: ignore[union-attr]
        return round(gts * width * _ENCODING.get(gen, 128 / 130) / 8, 2)

    def label(self, *, maximum: bool = False) -> str:
        speed, width = (self.max_speed, self.max_width) if maximum else (self.speed, self.width)
        gen = self.gen(speed)
        return f"Gen{gen if gen else '?'} x{width if width is not None else '?'}"


@dataclass(frozen=True)
class PciHop:
    """One PCIe link on the way from a device to its root port: ``device`` is the side below, ``port`` above."""

    device: str
    port: str
    port_role: str  # "root port" | "switch downstream port" | "bridge"
    link: PciLink  # current from the device below; max: the lower of both ends' maximum

    @property
    def gbps(self) -> float | None:
        return PciLink.gbps(self.link.speed, self.link.width)


@dataclass(frozen=True)
class PciGpu:
    """A GPU, accelerator or display-only device (``kind``), with its link and the links above it."""

    address: str
    vendor: str
    device: str
    pci_class: str
    numa_node: int | None
    link: PciLink
    upstream: str | None = None  # the port above it (root port or switch downstream port)
    upstream_link: PciLink | None = None
    kind: str = "gpu"  # "gpu" | "display" | "other"
    why: str = ""  # why it is of that kind
    driver: str | None = None
    path: tuple[str, ...] = ()  # the bridges from the root port down to the device's port
    hops: tuple[PciHop, ...] = ()  # every link up to the root port, the device's own first
    numa_node_from: str | None = None  # the port whose numa_node was taken (the device's own is -1)

    @property
    def vendor_name(self) -> str:
        return PCI_VENDORS.get(self.vendor, self.vendor)

    @property
    def root_port(self) -> str | None:
        return self.path[0] if self.path else None

    @property
    def bottleneck(self) -> PciHop | None:
        """The hop of least bandwidth (the narrowest or slowest link between the device and the CPU)."""
        known = [h for h in self.hops if h.gbps is not None]
        return min(known, key=lambda h: h.gbps or 0.0) if known else None

    @property
    def switch_uplink(self) -> PciHop | None:
        """The link from the top switch's upstream port to the root port, when the device is behind a switch."""
        return self.hops[-1] if len(self.hops) > 1 and self.hops[-1].port_role == "root port" else None


def _int_opt(text: str | None) -> int | None:
    try:
        return int((text or "").strip())
    except ValueError:
        return None


def _link(host: Host, base: str) -> PciLink:
    def rd(name: str) -> str | None:
        v = host.read_opt(f"{base}/{name}")
        return v.strip() if v is not None and v.strip() else None

    return PciLink(rd("current_link_speed"), _int_opt(rd("current_link_width")), rd("max_link_speed"),
                   _int_opt(rd("max_link_width")))


def _class_code(pci_class: str) -> int | None:
    try:
        return int(pci_class, 16) >> 8
    except ValueError:
        return None


def is_gpu_class(pci_class: str) -> bool:
    """The class of a GPU, accelerator or display controller (whether it is a GPU also takes the vendor)."""
    return _class_code(pci_class) in GPU_CLASSES


def _intel_integrated(address: str, vendor: str, pci_class: str, link: PciLink) -> bool:
    """Intel's integrated graphics: always device 02.0 on the root bus, inside the CPU, with no PCIe link of its
    own — driven by i915/xe like Intel's discrete GPUs, so only its place tells it apart."""
    m = _ADDR.fullmatch(address)
    return (vendor == "0x8086" and m is not None and m.group(2, 3, 4) == ("00", "02", "0")
            and _class_code(pci_class) in (0x0300, 0x0380) and not link.trained)


def classify(address: str, vendor: str, pci_class: str, driver: str | None, link: PciLink) -> tuple[str, str]:
    """``(kind, why)`` of a device of a GPU class: ``gpu`` (judged by gpu_pcie), ``display`` (a console only:
    BMC video, emulated VGA, integrated graphics) or ``other`` (an accelerator of a vendor nodeagent does not
    know). A bound driver decides; without one, the vendor does."""
    name = PCI_VENDORS.get(vendor, vendor)
    if driver in DISPLAY_DRIVERS:
        return "display", f"bound to {driver}, a display-only driver"
    if _intel_integrated(address, vendor, pci_class, link):
        return "display", "Intel integrated graphics (00:02.0 on the root bus, no PCIe link)"
    if driver in COMPUTE_DRIVERS:
        return "gpu", f"bound to {driver}"
    if vendor in DISPLAY_VENDORS:
        return "display", f"{name} display controller (BMC or emulated video)"
    if vendor in COMPUTE_VENDORS:
        return "gpu", f"{name} {GPU_CLASSES.get(_class_code(pci_class) or 0, 'device')}"
    return "other", f"vendor {name} is neither a GPU vendor nor a known display vendor"


def pci_devices(host: Host) -> dict[str, str]:
    """``{address: class}`` of every device under ``/sys/bus/pci/devices`` (the rooted sysfs walk)."""
    return {addr: (host.read_opt(f"{PCI}/{addr}/class") or "").strip() for addr in host.fs.listdir(PCI)}


def _chain(host: Host, addr: str) -> list[str]:
    """The kernel paths from the root port down to ``addr`` (from the ``/sys/bus/pci/devices`` link); just the
    device when the link is missing (a copy of /sys that flattened it)."""
    target = host.fs.readlink(f"{PCI}/{addr}")
    if not target:
        return [f"{PCI}/{addr}"]
    full = os.path.normpath(os.path.join(PCI, target))
    parts = full.split("/")
    out: list[str] = []
    for i, part in enumerate(parts):
        if _ADDR.fullmatch(part):
            out.append("/".join(parts[:i + 1]))
    return out or [f"{PCI}/{addr}"]


def _min(a: int | None, b: int | None) -> int | None:
    return min(a, b) if a is not None and b is not None else (a if b is None else b)


def _min_speed(a: str | None, b: str | None) -> str | None:
    if a is None or b is None:
        return a if b is None else b
    return a if (PciLink.gen(a) or 0) <= (PciLink.gen(b) or 0) else b


def _hops(host: Host, chain: list[str], links: dict[str, PciLink]) -> tuple[PciHop, ...]:
    """Every PCIe link from the device up to the root port. Above the device the bridges alternate, from the
    root port down, switch upstream port / downstream port; the link between a switch's two ports is internal,
    so a link is read at the device and at each upstream port (the side below), and its maximum is the lower
    of both ends' maximum."""
    bridges = chain[:-1]
    n = len(bridges)
    # role of each bridge, indexed like ``bridges``: 0 is the root port
    roles = ["root port" if i == 0 else ("switch upstream port" if i % 2 else "switch downstream port")
             for i in range(n)]
    below = [chain[-1]] + [bridges[i] for i in range(n - 1, 0, -1) if roles[i] == "switch upstream port"]
    out = []
    for dev in below:
        idx = chain.index(dev)
        d = links[dev]
        if idx == 0 or (d.speed, d.width, d.max_speed, d.max_width) == (None,) * 4:
            continue  # on the root bus, or a conventional PCI device (behind a PCIe-to-PCI bridge): no link
        port = chain[idx - 1]
        p = links[port]
        link = PciLink(d.speed, d.width, _min_speed(d.max_speed, p.max_speed), _min(d.max_width, p.max_width))
        out.append(PciHop(os.path.basename(dev), os.path.basename(port), roles[idx - 1], link))
    return tuple(out)


def read_pci_displays(host: Host) -> list[PciGpu]:
    """Every device of a GPU class — GPUs, display-only devices, unknown accelerators — with its kind, driver,
    link, the links above it and its NUMA node (the root port's when the device's own is -1)."""
    out = []
    for addr, cls in pci_devices(host).items():
        if not is_gpu_class(cls):
            continue
        base = f"{PCI}/{addr}"
        vendor = (host.read_opt(f"{base}/vendor") or "").strip()
        drv = host.fs.readlink(f"{base}/driver")
        driver = os.path.basename(drv) if drv else None
        chain = _chain(host, addr)
        links = {c: _link(host, c) for c in chain}
        own = links[chain[-1]]
        kind, why = classify(addr, vendor, cls, driver, own)
        node = _int_opt(host.read_opt(f"{base}/numa_node"))
        node_from = None
        if node is None or node < 0:
            node = None
            for port in chain[:-1]:  # the root port first
                pn = _int_opt(host.read_opt(f"{port}/numa_node"))
                if pn is not None and pn >= 0:
                    node, node_from = pn, os.path.basename(port)
                    break
        upstream = os.path.basename(chain[-2]) if len(chain) > 1 else None
        out.append(PciGpu(addr, vendor, (host.read_opt(f"{base}/device") or "").strip(), cls, node, own,
                          upstream, links[chain[-2]] if len(chain) > 1 else None, kind, why, driver,
                          tuple(os.path.basename(c) for c in chain[:-1]), _hops(host, chain, links), node_from))
    return out


def read_gpus(host: Host) -> list[PciGpu]:
    """The GPUs and accelerators (``kind == "gpu"``): what gpu_pcie judges."""
    return [d for d in read_pci_displays(host) if d.kind == "gpu"]


def oversubscription(gpus: list[PciGpu]) -> list[dict[str, object]]:
    """Switch uplinks that more than one GPU shares: the uplink, its link, the GPUs and lanes below it."""
    shared: dict[str, list[PciGpu]] = {}
    for g in gpus:
        up = g.switch_uplink
        if up is not None:
            shared.setdefault(up.device, []).append(g)
    out: list[dict[str, object]] = []
    for usp, below in sorted(shared.items()):
        if len(below) < 2:
            continue
        up = below[0].switch_uplink
        assert up is not None
        lanes = sum(g.link.width or 0 for g in below)
        out.append({"uplink": usp, "root_port": up.port, "link": up.link.label(), "gpus": [g.address for g in below],
                    "downstream_lanes": lanes, "uplink_lanes": up.link.width,
                    "ratio": f"{lanes / up.link.width:g}:1" if up.link.width else None})
    return out


# -- GPU memory ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GpuMemory:
    names: tuple[str, ...]
    total_bytes: int
    per_gpu_mib: tuple[int, ...]
    source: str


def read_gpu_memory(host: Host) -> GpuMemory | None:
    """Total GPU memory from ``nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits``; None
    when nvidia-smi is not installed or lists no GPU. A :class:`CommandError` (naming the command, why, and the
    fix) when it is installed but could not start or failed: the caller says so instead of skipping quietly."""
    if not host.commands.which("nvidia-smi"):
        return None
    def query() -> str:
        res = host.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
                       timeout=30)
        if res.returncode != 0:
            # nvidia-smi prints its reason on stdout ("NVIDIA-SMI has failed because it couldn't communicate with
            # the NVIDIA driver..."), not stderr.
            lines = (res.stderr.strip() or res.stdout.strip()).splitlines()
            raise CommandError(f"nvidia-smi --query-gpu=name,memory.total exited {res.returncode}: "
                               f"{lines[0] if lines else 'no message'}", path=res.argv[0],
                               returncode=res.returncode,
                               hint="check that the NVIDIA driver is loaded (lsmod | grep nvidia; dmesg | grep NVRM) "
                                    "and that nvidia-smi runs by hand")
        return res.stdout

    # Asked once per boot (host/boot_cache.py); a failure is not kept.
    stdout = host.cached_probe("nvidia-smi --query-gpu=name,memory.total", query)
    names, mibs = [], []
    for line in stdout.splitlines():
        name, sep, mib = line.rpartition(",")
        if not sep or not mib.strip().isdigit():
            continue
        names.append(name.strip())
        mibs.append(int(mib.strip()))
    if not mibs:
        return None
    return GpuMemory(tuple(names), sum(mibs) * 1024**2, tuple(mibs), "nvidia-smi")


# -- mounts --------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Mount:
    device: str
    path: str
    fstype: str


def read_mounts(host: Host) -> list[Mount]:
    text = host.read_opt("/proc/self/mounts") or host.read_opt("/proc/mounts") or ""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            out.append(Mount(unescape(parts[0]), unescape(parts[1]), parts[2]))
    return out


def mount_of(mounts: list[Mount], path: str) -> Mount | None:
    """The mount that holds ``path`` (longest mount-point prefix; the last mounted wins on ties)."""
    norm = os.path.normpath(path)
    best: Mount | None = None
    for m in mounts:
        if norm == m.path or norm.startswith(m.path.rstrip("/") + "/"):
            if best is None or len(m.path) >= len(best.path):
                best = m
    return best


def existing_ancestor(host: Host, path: str) -> str:
    """``path`` itself if it exists on the node, else its nearest existing parent."""
    cur = os.path.normpath(path)
    while cur != "/" and not host.fs.exists(cur):
        cur = os.path.dirname(cur)
    return cur


# -- hardware facts: gathered once, saved, read back -------------------------------------------------------------

#: Filesystem types that hold no data a disk check could mean (the kernel's and systemd's pseudo filesystems).
PSEUDO_FS = frozenset({"proc", "sysfs", "devtmpfs", "devpts", "tmpfs", "ramfs", "cgroup", "cgroup2", "securityfs",
                       "debugfs", "tracefs", "bpf", "mqueue", "hugetlbfs", "pstore", "configfs", "fusectl",
                       "autofs", "binfmt_misc", "nsfs", "efivarfs", "rpc_pipefs", "selinuxfs", "devfs",
                       "fuse.gvfsd-fuse", "fuse.portal"})


@dataclass(frozen=True)
class DiskFacts:
    """One mounted filesystem and its usage (``statvfs``), as the disk check reads it."""

    path: str
    device: str
    fstype: str
    usage: dict[str, int] | None  # StatVfs fields; None when it could not be read
    error: str | None = None


@dataclass(frozen=True)
class CheckedPath:
    """A path a profile's disk check lists, as the check sees it on the node: whether it exists, the path whose
    filesystem is measured (itself, or its nearest existing parent), that filesystem's mount and usage."""

    path: str
    exists: bool
    measured: str
    mount: str | None
    device: str | None
    fstype: str | None
    usage: dict[str, int] | None  # StatVfs fields; None when it could not be read
    error: str | None = None


def read_checked_path(host: Host, path: str, mounts: list[Mount]) -> CheckedPath:
    """What the disk check reads on the node for ``path`` (see :mod:`nodeagent.checks.disk`), as plain facts."""
    exists = host.fs.exists(path)
    measured = path if exists else existing_ancestor(host, path)
    m = mount_of(mounts, measured)
    where = (m.path, m.device, m.fstype) if m else (None, None, None)
    try:
        return CheckedPath(path, exists, measured, *where, asdict(host.statvfs(measured)))
    except HostError as exc:
        return CheckedPath(path, exists, measured, *where, None, exc.message)


def disk_check_paths(doc: Any) -> list[str]:
    """The paths the ``checks.disk.paths`` of a profile document (merged, as last-applied.json keeps it) lists."""
    disk = ((doc or {}).get("checks") or {}).get("disk") if isinstance(doc, dict) else None
    items = disk.get("paths") if isinstance(disk, dict) else None
    return [p["path"] for p in items or () if isinstance(p, dict) and isinstance(p.get("path"), str)]


class Hardware:
    """Where the checks read hardware from: the node itself (:class:`LiveHardware`) or a saved facts file
    (:class:`SavedHardware`). Same answers either way, so a check judges a saved node as it would the live one."""

    offline = False

    def cpuinfo(self) -> CpuInfo | None:
        raise NotImplementedError

    def virtualization(self, cpu: CpuInfo | None) -> Virtualization:
        raise NotImplementedError

    def cmdline(self) -> str:
        raise NotImplementedError

    def pci(self) -> list[PciGpu]:
        raise NotImplementedError

    def gpu_memory(self) -> GpuMemory | None:
        raise NotImplementedError


class LiveHardware(Hardware):
    def __init__(self, host: Host) -> None:
        self.host = host
        self._cache: dict[str, Any] = {}

    def _once(self, key: str, fn: Callable[[], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = fn()
        return self._cache[key]

    def cpuinfo(self) -> CpuInfo | None:
        return self._once("cpu", lambda: read_cpuinfo(self.host))  # type: ignore[no-any-return]

    def virtualization(self, cpu: CpuInfo | None) -> Virtualization:
        return self._once("virt", lambda: read_virtualization(self.host, cpu))  # type: ignore[no-any-return]

    def cmdline(self) -> str:
        return read_cmdline(self.host)

    def pci(self) -> list[PciGpu]:
        return self._once("pci", lambda: read_pci_displays(self.host))  # type: ignore[no-any-return]

    def gpu_memory(self) -> GpuMemory | None:
        return read_gpu_memory(self.host)


class SavedHardware(Hardware):
    """The ``hardware`` section of a facts file (see :func:`gather`)."""

    offline = True

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc

    def cpuinfo(self) -> CpuInfo | None:
        c = self.doc.get("cpu")
        if not c:
            return None
        return CpuInfo(c["model"], c["vendor"], int(c["count"]), tuple(c["flags"]), tuple(c.get("models", ())))

    def virtualization(self, cpu: CpuInfo | None) -> Virtualization:
        v = self.doc.get("virtualization") or {}
        return Virtualization(v.get("kind"), tuple(v.get("evidence", ())))

    def cmdline(self) -> str:
        return str(self.doc.get("cmdline", ""))

    def pci(self) -> list[PciGpu]:
        return [pci_from_dict(d) for d in self.doc.get("pci", [])]

    def gpu_memory(self) -> GpuMemory | None:
        m = self.doc.get("gpu_memory")
        if not m:
            if self.doc.get("gpu_memory_error"):
                raise CommandError(f"when the facts were captured: {self.doc['gpu_memory_error']}")
            return None
        return GpuMemory(tuple(m["names"]), int(m["total_bytes"]), tuple(m["per_gpu_mib"]), m["source"])

    def disks(self) -> list[DiskFacts]:
        return [DiskFacts(d["path"], d["device"], d["fstype"], d.get("usage"), d.get("error"))
                for d in self.doc.get("disks", [])]

    def mounts(self) -> list[Mount]:
        """Every mount point when the facts recorded them (``mounts``), else the filesystems with usage."""
        if isinstance(self.doc.get("mounts"), list):
            return [Mount(m["device"], m["path"], m["fstype"]) for m in self.doc["mounts"]]
        return [Mount(d.device, d.path, d.fstype) for d in self.disks()]

    def checked_paths(self) -> dict[str, CheckedPath]:
        """The disk check's paths as the node saw them (``facts --save`` with a profile), by path."""
        rec = self.doc.get("checked_paths") or {}
        return {p["path"]: CheckedPath(**p) for p in rec.get("paths", [])} if isinstance(rec, dict) else {}

    def checked_paths_profile(self) -> str | None:
        """Which profile's disk paths were recorded (None: the facts were saved without one)."""
        rec = self.doc.get("checked_paths")
        return rec.get("profile") if isinstance(rec, dict) else None


def pci_from_dict(d: dict[str, Any]) -> PciGpu:
    """A :class:`PciGpu` back from ``dataclasses.asdict``."""
    d = dict(d)
    d["link"] = PciLink(**d["link"])
    d["upstream_link"] = PciLink(**d["upstream_link"]) if d.get("upstream_link") else None
    d["hops"] = tuple(PciHop(h["device"], h["port"], h["port_role"], PciLink(**h["link"]))
                      for h in d.get("hops", ()))
    d["path"] = tuple(d.get("path", ()))
    return PciGpu(**d)


def gather(host: Host, *, commands: bool = True, checked: tuple[str | None, list[str]] | None = None) -> dict[str, Any]:
    """The node's hardware facts, read from files (so a static copy of /sys and /proc works): CPU model and
    flags, the virtual CPU model and hypervisor, the kernel command line, every GPU / display-only device with
    its link, the hops to its root port and its NUMA node, every mount point, the mounted filesystems with their
    usage. GPU memory where known: AMD's ``mem_info_vram_total`` file, else nvidia-smi when ``commands`` and it
    is installed. ``checked``: (profile name, the paths its disk check lists): each one's existence, filesystem
    and usage as the check would read them (``checked_paths``), so offline checks judge them as on the node."""

    cpu = read_cpuinfo(host)
    virt = read_virtualization(host, cpu)
    doc: dict[str, Any] = {"cpu": None, "virtualization": {"kind": virt.kind, "evidence": list(virt.evidence)},
                           "cmdline": read_cmdline(host), "arch": arch(host, cpu)}
    if cpu is not None:
        kind = classify_model(cpu.model)
        doc["cpu"] = {"model": cpu.model, "vendor": cpu.vendor, "count": cpu.count, "flags": list(cpu.flags),
                      "models": list(cpu.models), "virtual_model": kind[1] if kind else None,
                      "virtual_model_kind": kind[0] if kind else None}
    devices = read_pci_displays(host)
    doc["pci"] = [asdict(d) for d in devices]
    doc["pci_oversubscription"] = oversubscription([d for d in devices if d.kind == "gpu"])
    vram = [(d, _int_opt(host.read_opt(f"{PCI}/{d.address}/mem_info_vram_total"))) for d in devices
            if d.kind == "gpu"]
    known = [(d, b) for d, b in vram if b]
    doc["gpu_memory"] = None
    if known:
        doc["gpu_memory"] = {"names": [f"{d.vendor_name} {d.device}" for d, _ in known],
                             "total_bytes": sum(b or 0 for _, b in known),
                             "per_gpu_mib": [(b or 0) // 1024**2 for _, b in known], "source": "mem_info_vram_total"}
    elif commands:
        try:
            mem = read_gpu_memory(host)
        except CommandError as exc:
            doc["gpu_memory_error"] = str(exc)
        else:
            doc["gpu_memory"] = asdict(mem) if mem else None
    disks = []
    mounts = read_mounts(host)
    doc["mounts"] = [asdict(m) for m in mounts]
    if checked is not None:
        profile, paths = checked
        doc["checked_paths"] = {"profile": profile,
                                "paths": [asdict(read_checked_path(host, p, mounts)) for p in dict.fromkeys(paths)]}
    for m in mounts:
        if m.fstype in PSEUDO_FS or any(d.path == m.path for d in disks):
            continue
        try:
            st = host.statvfs(m.path)
            disks.append(DiskFacts(m.path, m.device, m.fstype, asdict(st)))
        except HostError as exc:
            disks.append(DiskFacts(m.path, m.device, m.fstype, None, exc.message))
    doc["disks"] = [asdict(d) for d in disks]
    return doc


__all__ = ["CheckedPath", "CpuInfo", "DiskFacts", "disk_check_paths", "read_checked_path",
           "GpuMemory", "Hardware", "LiveHardware", "SavedHardware", "classify_model",
           "gather", "Mount", "PciGpu", "PciHop", "PciLink", "Virtualization",
           "arch", "classify", "cmdline_params", "existing_ancestor", "is_gpu_class", "mount_of", "oversubscription",
           "pci_devices", "read_cmdline", "read_cpuinfo", "read_gpu_memory", "read_gpus", "read_mounts",
           "read_pci_displays",
           "read_virtualization"]
