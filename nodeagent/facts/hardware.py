"""Read-only observations of the hardware the preflight checks judge: CPU, virtualization, PCI GPUs, GPU
memory, mounts (DAX devices: :mod:`.dax`). Everything goes through the rooted host; nothing here writes.

These are gathered on demand by the checks that need them (not by every ``facts`` run: ``nvidia-smi`` alone
can take a second), and each returns plain data that serializes to JSON as a check's evidence.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from ..errors import CommandError
from ..host import Host
from ..host.boot_cache import probe

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


def read_cpuinfo(host: Host) -> CpuInfo | None:
    """``/proc/cpuinfo`` as the kernel shows it (the flags are what the OS enabled, not raw CPUID)."""
    text = host.read_opt("/proc/cpuinfo")
    if text is None:
        return None
    models: list[str] = []
    vendor = ""
    flag_sets: list[set[str]] = []
    for block in re.split(r"\n\s*\n", text.strip()):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip().lower()] = value.strip()
        if "processor" not in fields:
            continue
        models.append(fields.get("model name", fields.get("cpu model", "")))
        vendor = vendor or fields.get("vendor_id", fields.get("cpu implementer", ""))
        flag_sets.append(set((fields.get("flags") or fields.get("features") or "").split()))
    if not flag_sets:
        return None
    common = set.intersection(*flag_sets)
    distinct = tuple(dict.fromkeys(models))
    return CpuInfo(models[0], vendor, len(models), tuple(sorted(common)), distinct if len(distinct) > 1 else ())


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
            out = probe(host, "systemd-detect-virt --vm",  # per boot: a VM does not stop being one
                        lambda: host.run(["systemd-detect-virt", "--vm"], timeout=10).stdout).strip()
            if out and out != "none":
                evidence.append(f"systemd-detect-virt --vm: {out}")
                kinds.insert(0, out)
        except CommandError:
            pass
    if not evidence:
        return Virtualization(None)
    return Virtualization(kinds[0] if kinds else "unknown", tuple(evidence))


def read_cmdline(host: Host) -> str:
    return (host.read_opt("/proc/cmdline") or "").strip()


def cmdline_params(cmdline: str) -> dict[str, str]:
    """``key=value`` parameters of a kernel command line (a bare word maps to ``""``); the last one wins."""
    out: dict[str, str] = {}
    for word in cmdline.split():
        key, _, value = word.partition("=")
        out[key] = value
    return out


def arch(host: Host, cpu: CpuInfo | None) -> str:
    """The machine's architecture (``uname -m``), from ``/proc/sys/kernel/arch`` or the shape of cpuinfo."""
    text = (host.read_opt("/proc/sys/kernel/arch") or "").strip()
    if text:
        return text
    if cpu is not None and cpu.vendor.startswith("0x"):
        return "aarch64"
    return "x86_64"


# -- PCI GPUs ------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PciLink:
    speed: str | None  # "32.0 GT/s PCIe"
    width: int | None
    max_speed: str | None
    max_width: int | None

    @staticmethod
    def gen(speed: str | None) -> int | None:
        """PCIe generation of a link speed text (``16.0 GT/s PCIe`` → 4)."""
        m = re.match(r"\s*([0-9.]+)\s*GT/s", speed or "")
        if not m:
            return None
        return {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6, 128.0: 7}.get(float(m.group(1)))


@dataclass(frozen=True)
class PciGpu:
    address: str
    vendor: str
    device: str
    pci_class: str
    numa_node: int | None
    link: PciLink
    upstream: str | None = None  # the port above it (root port or switch)
    upstream_link: PciLink | None = None

    @property
    def vendor_name(self) -> str:
        return PCI_VENDORS.get(self.vendor, self.vendor)


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


def is_gpu_class(pci_class: str) -> bool:
    try:
        return (int(pci_class, 16) >> 8) in GPU_CLASSES
    except ValueError:
        return False


def pci_devices(host: Host) -> dict[str, str]:
    """``{address: class}`` of every device under ``/sys/bus/pci/devices`` (the rooted sysfs walk)."""
    return {addr: (host.read_opt(f"{PCI}/{addr}/class") or "").strip() for addr in host.fs.listdir(PCI)}


def read_gpus(host: Host) -> list[PciGpu]:
    gpus = []
    for addr, cls in pci_devices(host).items():
        if not is_gpu_class(cls):
            continue
        base = f"{PCI}/{addr}"
        node = _int_opt(host.read_opt(f"{base}/numa_node"))
        upstream = upstream_link = None
        target = host.fs.readlink(base)
        if target:
            parent = os.path.basename(os.path.dirname(target))
            if re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", parent):
                upstream = parent
                real_parent = os.path.normpath(os.path.join(PCI, os.path.dirname(target)))
                upstream_link = _link(host, real_parent)
        gpus.append(PciGpu(addr, (host.read_opt(f"{base}/vendor") or "").strip(),
                           (host.read_opt(f"{base}/device") or "").strip(), cls,
                           node if node is not None and node >= 0 else None, _link(host, base),
                           upstream, upstream_link))
    return gpus


def udev_pci_devices() -> dict[str, str] | None:
    """``{address: class}`` as udev sees the real machine's PCI bus (pyudev); None when udev is unavailable.

    Only meaningful for the real root: pyudev cannot be pointed at another tree.
    """
    try:
        import pyudev

        ctx = pyudev.Context()
        return {d.sys_name: (d.attributes.asstring("class") if "class" in d.attributes.available_attributes
                             else "") for d in ctx.list_devices(subsystem="pci")}
    except Exception:  # no libudev, no /run/udev: the sysfs walk stands alone
        return None


# -- GPU memory ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GpuMemory:
    names: tuple[str, ...]
    total_bytes: int
    per_gpu_mib: tuple[int, ...]
    source: str


def read_gpu_memory(host: Host) -> GpuMemory | None:
    """Total GPU memory from ``nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits``; None
    when nvidia-smi is not installed or fails."""
    if not host.commands.which("nvidia-smi"):
        return None
    try:
        stdout = probe(host, "nvidia-smi --query-gpu=name,memory.total",  # per boot (host/boot_cache.py)
                       lambda: host.run(["nvidia-smi", "--query-gpu=name,memory.total",
                                         "--format=csv,noheader,nounits"], timeout=30, ok_codes=(0,)).stdout)
    except CommandError:
        return None
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


def _unescape(text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def read_mounts(host: Host) -> list[Mount]:
    text = host.read_opt("/proc/self/mounts") or host.read_opt("/proc/mounts") or ""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            out.append(Mount(_unescape(parts[0]), _unescape(parts[1]), parts[2]))
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


__all__ = ["CpuInfo", "GpuMemory", "Mount", "PciGpu", "PciLink", "Virtualization",
           "arch", "cmdline_params", "existing_ancestor", "is_gpu_class", "mount_of", "pci_devices",
           "read_cmdline", "read_cpuinfo", "read_gpu_memory", "read_gpus", "read_mounts",
           "read_virtualization", "udev_pci_devices"]
