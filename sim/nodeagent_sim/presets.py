"""Documented simulated nodes, and a generator of large ones for benchmarks.

Where the shapes come from: the server presets follow ``lspci -tv``, ``numactl -H`` and ``/proc/cpuinfo`` of
the machines they name (Supermicro AS-8125GS H100 servers, an HGX H100 board as DGX H100 documents it, a
Sapphire Rapids node with SNC-2), the guests follow QEMU's q35 machine and the real 6.12 guest of
tests/realkernel. Every server has its BMC's VGA (ASPEED AST2600 behind its PCIe-to-PCI bridge, bound to
``ast``); every guest QEMU's standard VGA (1234:1111, bochs-drm). /proc/cpuinfo has the fields of
shared/reference/cpuinfo-*.txt.

=====================  ===========================================================================================
``h100-cxl``           2 sockets (nodes 0-1, 1 TiB DRAM, 192 CPUs), five 96 GB GPUs, two 2 TiB CXL.mem expanders
                       as devdax ``dax0.0``/``dax1.0`` (target nodes 2, 3) not yet onlined; 2 GiB memory blocks;
                       kernel 6.12; numa_balancing=0, demotion off, auto_online_blocks=online.
``h100-cxl-autoonline`` the same node as it boots with dax_cxl/kmem auto-binding: both expanders already
                       system-ram, online in ZONE_NORMAL, nodes 2-3 in memory_tier22.
``l40-kvm64``          KVM guest, 8 vCPUs of QEMU's ``kvm64`` model (``Common KVM processor``: no avx2/fma),
                       153 GiB RAM, three L40 GPUs passed through on q35 root ports, QEMU's std VGA on
                       00:01.0, model disk 94 % full; kernel 6.8 — the field report's guest. :func:`capture_like`
                       lays it out as a static copy of such a guest's /sys and /proc (no simulator, no commands).
``workstation``        bare metal, one 96 GB GPU, AVX-512, 256 GiB DRAM, no CXL; kernel 6.18.
``qemu-3node``         the real-kernel test guest: node 0 with 2 CPUs, node 1 CPU-less DRAM, legacy-pmem
                       ``dax0.0`` (1006 MiB at 0x181200000) that becomes node 2; 128 MiB blocks; kernel 6.12.
``hgx-h100``           2-socket HGX H100 (Xeon 8480+, 2 TiB DRAM): 8 GPUs behind 4 PCIe switches (2 per Gen5 x16
                       uplink), ConnectX-7 NICs and NVMe on the switches, ASPEED BMC VGA bound to ``ast``; no CXL;
                       kernel 6.8.
``snc2-cxl``           2-socket Sapphire Rapids with SNC-2: 4 DRAM nodes (0-3) on 2 sockets, a 512 GiB CXL.mem
                       expander per socket as devdax (nodes 4, 5; both halves of a socket equidistant from it),
                       four H100 NVL GPUs, ASPEED BMC VGA; kernel 6.12.
``stress``             8 CXL devices of 2 TiB in 128 MiB blocks, online (131,072 blocks): the benchmark's
                       converged large node.
=====================  ===========================================================================================
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from nodeagent.util.kfmt import format_bracket, format_list

from . import dax as simdax
from . import fake_daxctl, memory
from .kernel import DEFAULT_KNOBS, KNOB_SINCE, MARKER, THP_ENABLED, SimKernel
from .tree import RO, RW, Tree

GiB = 1024**3
TiB = 1024**4


@dataclass(frozen=True)
class NumaDef:
    id: int
    cpus: tuple[int, ...]
    start: int  # physical address of the node's DRAM
    size: int
    used: int = 0  # bytes the running system already uses on the node


@dataclass(frozen=True)
class GpuDef:
    name: str = "NVIDIA H100 NVL"
    memory_mib: int = 95830
    pci: str = "0000:17:00.0"
    vendor: str = "0x10de"
    device: str = "0x2321"
    pci_class: str = "0x030200"
    link_speed: str = "32.0 GT/s PCIe"
    link_width: int = 16
    max_link_speed: str = "32.0 GT/s PCIe"
    max_link_width: int = 16
    numa_node: int = 0


#: A PCIe link as sysfs shows it: (current_link_speed, current_link_width, max_link_speed, max_link_width).
Link = tuple[str, int, str, int]
GEN5_X16: Link = ("32.0 GT/s PCIe", 16, "32.0 GT/s PCIe", 16)
GEN4_X4: Link = ("16.0 GT/s PCIe", 4, "16.0 GT/s PCIe", 4)


@dataclass(frozen=True)
class PciDef:
    """A PCI function under ``/sys/devices/pciDDDD:BB/...``: what its sysfs directory holds, and the devices
    below it (a bridge's secondary bus). ``link`` None: a conventional PCI device (no PCIe capability, so no
    link attributes: a BMC's VGA behind its PCIe-to-PCI bridge, QEMU's VGA on the root bus)."""

    address: str
    vendor: str
    device: str
    pci_class: str
    driver: str | None = None
    link: Link | None = GEN4_X4
    numa_node: int = -1
    children: tuple[PciDef, ...] = ()


def root_port(address: str, child: PciDef | tuple[PciDef, ...], *, link: Link | None = None, numa_node: int = -1,
              vendor: str = "0x1022", device: str = "0x14ab") -> PciDef:
    """A root port (AMD Genoa's GPP bridge 1022:14ab by default) with the devices of its secondary bus; its link
    is the one below it (the kernel reads the same Link Status from both ends), maximum the slot's."""
    kids = child if isinstance(child, tuple) else (child,)
    return PciDef(address, vendor, device, "0x060400", "pcieport", link or kids[0].link or GEN5_X16, numa_node, kids)


def gpu_pci(g: GpuDef, driver: str | None = "nvidia") -> PciDef:
    return PciDef(g.pci, g.vendor, g.device, g.pci_class, driver,
                  (g.link_speed, g.link_width, g.max_link_speed, g.max_link_width), g.numa_node)


def aspeed_bmc(bus: int, rp: str, numa_node: int = 0, vendor: str = "0x1022", device: str = "0x14ab") -> PciDef:
    """The BMC video every server has: ASPEED AST2600 (1a03:2000, bound to ``ast``), a conventional PCI device
    behind ASPEED's PCIe-to-PCI bridge (1a03:1150), whose link to the root port trains at Gen2 x1."""
    vga = PciDef(f"0000:{bus + 1:02x}:00.0", "0x1a03", "0x2000", "0x030000", "ast", None, numa_node)
    bridge = PciDef(f"0000:{bus:02x}:00.0", "0x1a03", "0x1150", "0x060400", None,
                    ("5.0 GT/s PCIe", 1, "5.0 GT/s PCIe", 1), numa_node, (vga,))
    return root_port(rp, bridge, numa_node=numa_node, vendor=vendor, device=device)


def qemu_vga() -> PciDef:
    """QEMU's standard VGA (1234:1111) at 00:01.0 on the q35 root bus, bound to ``bochs-drm``: no PCIe link."""
    return PciDef("0000:00:01.0", "0x1234", "0x1111", "0x030000", "bochs-drm", None, -1)


def nvme(address: str, numa_node: int = -1, device: str = "0xa80a") -> PciDef:
    """A Samsung PM9A3-class NVMe drive (144d:a80a, class 0x010802), Gen4 x4."""
    return PciDef(address, "0x144d", device, "0x010802", "nvme", GEN4_X4, numa_node)


def connectx7(address: str, numa_node: int = -1) -> PciDef:
    """An NVIDIA/Mellanox ConnectX-7 NIC (15b3:1021, class 0x020000, mlx5_core), Gen5 x16."""
    return PciDef(address, "0x15b3", "0x1021", "0x020000", "mlx5_core", GEN5_X16, numa_node)


def pcie_switch(bus: int, endpoints: list[PciDef], numa_node: int, *, uplink: Link = GEN5_X16) -> PciDef:
    """A PCIe switch (Broadcom PEX89104, 1000:c030) under its root port at ``0000:BB:01.0``: the upstream port on
    bus BB+1, one downstream port per endpoint on bus BB+2, each endpoint alone on its own bus (the addresses
    of ``endpoints`` are kept; their bus must be BB+3 and up)."""
    dsps = tuple(PciDef(f"0000:{bus + 2:02x}:{i:02x}.0", "0x1000", "0xc030", "0x060400", "pcieport",
                        ep.link or GEN5_X16, numa_node, (ep,)) for i, ep in enumerate(endpoints))
    usp = PciDef(f"0000:{bus + 1:02x}:00.0", "0x1000", "0xc030", "0x060400", "pcieport", uplink, numa_node, dsps)
    return root_port(f"0000:{bus:02x}:01.0", usp, link=uplink, numa_node=numa_node, vendor="0x8086",
                     device="0x352a")


@dataclass(frozen=True)
class MountDef:
    path: str
    device: str
    fstype: str
    size: int
    used: int
    inodes: int = 10_000_000
    inodes_used: int = 100_000


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    kernel: str
    block_size: int
    nodes: tuple[NumaDef, ...]
    possible_nodes: int
    dax: tuple[simdax.DaxDef, ...] = ()
    dax_online_zone: str | None = None  # set: the devices are already system-ram, online in this zone
    cpu_model: str = "AMD EPYC 9454 48-Core Processor"
    cpu_vendor: str = "AuthenticAMD"
    cpu_flags: tuple[str, ...] = ()
    sockets: int = 1
    hypervisor: str | None = None  # "kvm" for a guest
    dmi_vendor: str = "Supermicro"
    dmi_product: str = "AS -8125GS-TNHR"
    gpus: tuple[GpuDef, ...] = ()
    # The PCI tree below the host bridges (root ports and what hangs off them). Empty: each GPU on its own root
    # port plus one NVMe drive, and ``display`` for the console.
    pci: tuple[PciDef, ...] = ()
    display: str | None = "aspeed"  # "aspeed" (BMC VGA bound to ast), "qemu" (std VGA, bochs-drm), None
    mounts: tuple[MountDef, ...] = ()
    cmdline: str = "BOOT_IMAGE=/boot/vmlinuz root=/dev/nvme0n1p2 ro quiet"
    knobs: dict[str, str] = field(default_factory=dict)
    distances: dict[int, tuple[int, ...]] = field(default_factory=dict)
    node_tier: dict[int, int] = field(default_factory=dict)
    hostname: str = "node"
    files: dict[str, str] = field(default_factory=dict)  # extra /etc files (tuned, sysctl.d, udev rules)
    daxctl: bool | None = None  # the (fake) daxctl in /usr/bin; None: installed when the preset has DAX devices
    daxctl_udev_rule: bool = False  # Debian's daxctl package: udev rule + /etc/daxctl.conf.d reconfiguring on add
    # Where cgroup v2 is mounted (None: not at all); hybrid: systemd's legacy layout, v1 controllers (memory
    # among them) under a tmpfs at /sys/fs/cgroup and a controller-less v2 at /sys/fs/cgroup/unified.
    cgroup2_mount: str | None = "/sys/fs/cgroup"
    cgroup_hybrid: bool = False
    swap: int = 0  # bytes of swap (/proc/meminfo SwapTotal): a swap partition or file


BASE_FLAGS = ("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 "
              "ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc "
              "cpuid extd_apicid pni pclmulqdq ssse3 cx16 sse4_1 sse4_2 x2apic movbe popcnt aes xsave "
              "rdrand lahf_lm abm sse4a").split()
HOST_FLAGS = tuple(BASE_FLAGS + "fma avx f16c bmi1 avx2 bmi2 erms avx512f avx512dq avx512cd avx512bw avx512vl "
                                "avx512_bf16 avx512_vnni sha_ni vaes".split())
#: QEMU's kvm64 model: SSE3 at most, no AVX, no FMA; the guest still sees the hypervisor bit.
KVM64_FLAGS = tuple("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr "
                    "sse sse2 ht syscall nx lm constant_tsc nopl xtopology cpuid tsc_known_freq pni cx16 x2apic "
                    "hypervisor lahf_lm".split())

#: What h100-cxl ships besides the kernel: a TuneD profile built on a stock one (whose numa_balancing=0 is only
#: in an aarch64/ThunderX section), and Debian daxctl's udev rule with an example config that does nothing.
H100_FILES = {
    "/etc/tuned/active_profile": "gpu-inference",
    "/etc/tuned/profiles/gpu-inference/tuned.conf": (
        "[main]\nsummary=GPU inference node (site profile)\ninclude=throughput-performance\n\n"
        "[vm]\ntransparent_hugepages=always\n\n[sysctl]\nvm.swappiness=1\n"),
    "/usr/lib/tuned/profiles/throughput-performance/tuned.conf": (
        "[main]\nsummary=Server throughput (stock profile, abridged)\n\n"
        "[variables]\nthunderx_cpuinfo_regex=CPU part\\s+:\\s+(0x0?516)|(0x0?af)|(0x0?a[0-3])|(0x0?b8)\\b\n\n"
        "[cpu]\ngovernor=performance\n\n[sysctl]\nvm.swappiness=10\n\n"
        "[sysctl.thunderx]\ntype=sysctl\nuname_regex=aarch64\ncpuinfo_regex=${thunderx_cpuinfo_regex}\n"
        "kernel.numa_balancing=0\n"),
}

#: Extra layout steps other modules register (checks hardware, DAMON): ``step(kernel, preset)``.
LAYERS: list[Callable[[SimKernel, Preset], None]] = []

#: x86-64's low zones: ZONE_DMA below 16 MiB, ZONE_DMA32 below 4 GiB, ZONE_NORMAL above.
_DMA_END, _DMA32_END = 16 * 1024**2, 4 * 1024**3


def thp_recommended_min_free_kb(nodes: tuple[NumaDef, ...]) -> int:
    """khugepaged's recommendation (mm/khugepaged.c set_recommended_min_free_kbytes, at khugepaged's start and
    after memory is onlined): per populated zone up to ZONE_NORMAL (ZONE_MOVABLE is left out), 2 pageblocks free
    plus MIGRATE_PCPTYPES² more, at most 5 % of the free buffer pages; 2 MiB pageblocks of 4 KiB pages."""
    zones = 0
    for n in nodes:
        end = n.start + n.size
        zones += (n.start < _DMA_END) + (n.start < _DMA32_END and end > _DMA_END) + (end > _DMA32_END)
    pageblock = 512
    pages = pageblock * zones * 2 + pageblock * zones * 3 * 3
    lowmem_pages = sum(n.size for n in nodes) // 4096
    return min(pages, lowmem_pages // 20) * 4


def _two_sockets(dram: int, cores: int) -> tuple[NumaDef, NumaDef]:
    half = dram // 2
    n0 = tuple(list(range(0, cores)) + list(range(2 * cores, 3 * cores)))
    n1 = tuple(list(range(cores, 2 * cores)) + list(range(3 * cores, 4 * cores)))
    return (NumaDef(0, n0, 0, half, used=24 * GiB), NumaDef(1, n1, half, half, used=16 * GiB))


def _h100(autoonline: bool) -> Preset:
    cxl = (simdax.DaxDef("dax0.0", 0, 2, 1 * TiB, 2 * TiB, kind="cxl", numa_node=0),
           simdax.DaxDef("dax1.0", 1, 3, 3 * TiB, 2 * TiB, kind="cxl", numa_node=1))
    gpus = tuple(GpuDef(pci=f"0000:{bus:02x}:00.0", numa_node=i // 3)
                 for i, bus in enumerate((0x17, 0x3d, 0x63, 0x9a, 0xc0)))
    return Preset(
        name="h100-cxl-autoonline" if autoonline else "h100-cxl",
        description=("2-socket H100 server with two 2 TiB CXL.mem expanders "
                     + ("auto-onlined at boot in ZONE_NORMAL" if autoonline else "as devdax, not yet onlined")),
        kernel="6.12.0-nodeagent-sim", block_size=2 * GiB, nodes=_two_sockets(1 * TiB, 48),
        # possible 4-5: empty CXL windows the firmware reserves nodes for, where hot-added expanders go
        possible_nodes=6, dax=cxl, dax_online_zone="Normal" if autoonline else None, daxctl_udev_rule=autoonline,
        cpu_flags=HOST_FLAGS, sockets=2, gpus=gpus, hostname="h100-cxl",
        mounts=(MountDef("/", "/dev/nvme0n1p2", "ext4", 960 * GiB, 120 * GiB),
                MountDef("/models", "/dev/nvme1n1", "xfs", 7680 * GiB, 2900 * GiB)),
        distances={0: (10, 21, 14, 24, 14, 24), 1: (21, 10, 24, 14, 24, 14), 2: (14, 24, 10, 26, 26, 26),
                   3: (24, 14, 26, 10, 26, 26), 4: (14, 24, 26, 26, 10, 26), 5: (24, 14, 26, 26, 26, 10)},
        node_tier={2: memory.KMEM_TIER, 3: memory.KMEM_TIER},
        cmdline=Preset.cmdline + (" memhp_default_state=online" if autoonline else ""),
        files=H100_FILES,
    )


def _l40_kvm64() -> Preset:
    return Preset(
        name="l40-kvm64", description="KVM guest with the kvm64 virtual CPU model, three L40 GPUs, disk 94% full",
        kernel="6.8.0-nodeagent-sim", block_size=128 * 1024**2,
        nodes=(NumaDef(0, tuple(range(8)), 0, 153 * GiB, used=6 * GiB),), possible_nodes=1,
        cpu_model="Common KVM processor", cpu_vendor="GenuineIntel", cpu_flags=KVM64_FLAGS, hypervisor="kvm",
        display="qemu",
        dmi_vendor="QEMU", dmi_product="Standard PC (Q35 + ICH9, 2009)", hostname="l40-vm",
        gpus=tuple(GpuDef(name="NVIDIA L40", memory_mib=46068, pci=f"0000:0{i + 6}:00.0", device="0x26b5",
                          pci_class="0x030000", link_speed="16.0 GT/s PCIe", max_link_speed="16.0 GT/s PCIe")
                   for i in range(3)),
        mounts=(MountDef("/", "/dev/vda1", "ext4", 200 * GiB, 60 * GiB),
                MountDef("/models", "/dev/vdb", "ext4", 2000 * GiB, 1880 * GiB)),
        knobs={"/proc/sys/kernel/numa_balancing": "0"},
        files={"/etc/sysctl.d/60-vm-image-tuning.conf": "# baked into the VM image\nkernel.numa_balancing = 0\n"
               "vm.swappiness = 10\n"},
    )


def _workstation() -> Preset:
    return Preset(
        name="workstation", description="bare-metal workstation: one 96 GB GPU, AVX-512, 256 GiB DRAM, no CXL",
        kernel="6.18.0-nodeagent-sim", block_size=2 * GiB,
        nodes=(NumaDef(0, tuple(range(64)), 0, 256 * GiB, used=12 * GiB),), possible_nodes=1,
        cpu_model="AMD Ryzen Threadripper PRO 7985WX 64-Cores", cpu_flags=HOST_FLAGS,
        dmi_vendor="ASUS", dmi_product="Pro WS WRX90E-SAGE SE", hostname="workstation",
        gpus=(GpuDef(name="NVIDIA RTX PRO 6000 Blackwell", memory_mib=97887, pci="0000:c1:00.0",
                     device="0x2bb1", pci_class="0x030000", link_speed="32.0 GT/s PCIe",
                     max_link_speed="32.0 GT/s PCIe"),),
        mounts=(MountDef("/", "/dev/nvme0n1p2", "ext4", 3700 * GiB, 900 * GiB),),
    )


def _qemu_3node() -> Preset:
    return Preset(
        name="qemu-3node", description="the real-kernel test guest: node0 CPUs, node1 CPU-less DRAM, pmem dax0.0",
        kernel="6.12.95+deb12-amd64", block_size=128 * 1024**2,
        nodes=(NumaDef(0, (0, 1), 0, 2 * GiB, used=72 * 1024**2),
               NumaDef(1, (), 4 * GiB, 2 * GiB, used=34 * 1024**2)),
        possible_nodes=3,
        dax=(simdax.DaxDef("dax0.0", 0, 2, 0x181200000, 1054867456, kind="pmem", numa_node=0),),
        cpu_model="QEMU TCG CPU version 2.5+", cpu_flags=HOST_FLAGS + ("hypervisor",), hypervisor="kvm",
        display="qemu",
        dmi_vendor="QEMU", dmi_product="Standard PC (Q35 + ICH9, 2009)", hostname="qemu-3node",
        cmdline="console=ttyS0 memmap=1G!6G", distances={0: (10, 20, 20), 1: (20, 10, 20), 2: (20, 20, 10)},
        node_tier={2: memory.KMEM_TIER},
        # As the 6.12 guest boots (tests/realkernel): numa_balancing auto-enabled (more than one node), and
        # Debian's kernel is built with CONFIG_TRANSPARENT_HUGEPAGE_ALWAYS (enabled reads `[always] madvise never`).
        knobs={"/proc/sys/kernel/numa_balancing": "1",
               "/sys/kernel/mm/transparent_hugepage/enabled": format_bracket(THP_ENABLED, "always")},
    )


#: HGX H100 8-GPU: SXM5 H100 80GB (10de:2330) as nvidia-smi names it.
H100_SXM = dict(name="NVIDIA H100 80GB HBM3", memory_mib=81559, device="0x2330", pci_class="0x030200")
SPR_FLAGS = tuple(BASE_FLAGS[:-2] + "fma avx f16c bmi1 avx2 bmi2 erms avx512f avx512dq avx512cd avx512bw avx512vl "
                                    "avx512_bf16 avx512_vnni avx512_fp16 amx_bf16 amx_tile amx_int8 sha_ni "
                                    "vaes".split())


def _hgx() -> Preset:
    """A 2-socket HGX H100 server (the layout of DGX H100 / HGX reference boards, ``lspci -tv`` of such nodes):
    four Broadcom PEX89104 PCIe switches, two per socket, each with two H100 SXM5 GPUs, two ConnectX-7 NICs and
    one NVMe drive on its downstream ports, its uplink Gen5 x16 to a Sapphire Rapids root port — so two GPUs
    share each x16 uplink (2:1, by design). The console is the ASPEED AST2600 BMC's VGA, bound to ``ast``;
    the OS drive and a management NIC (Intel X710, i40e) sit on root ports of socket 0. No CXL; 8 GiB of swap
    (a swap file on the OS drive)."""
    gpus: list[GpuDef] = []
    roots: list[PciDef] = []
    for sw, bus in enumerate((0x18, 0x38, 0x98, 0xb8)):
        node = sw // 2
        g = [GpuDef(**H100_SXM, pci=f"0000:{bus + 3 + i:02x}:00.0", numa_node=node) for i in range(2)]  # type: ignore[arg-type]
        gpus += g
        ends = [gpu_pci(x) for x in g] + [connectx7(f"0000:{bus + 5 + i:02x}:00.0", node) for i in range(2)] + \
            [nvme(f"0000:{bus + 7:02x}:00.0", node)]
        roots.append(pcie_switch(bus, ends, node))
    roots.append(root_port("0000:00:06.0", nvme("0000:01:00.0", 0, device="0xa808"), numa_node=0,
                           vendor="0x8086", device="0x352b"))
    roots.append(root_port("0000:00:1c.0", PciDef("0000:03:00.0", "0x8086", "0x1572", "0x020000", "i40e",
                                                  ("8.0 GT/s PCIe", 8, "8.0 GT/s PCIe", 8), 0),
                           numa_node=0, vendor="0x8086", device="0x7ab8"))
    roots.append(aspeed_bmc(0x04, "0000:00:1c.4", 0, vendor="0x8086", device="0x7abc"))
    return Preset(
        name="hgx-h100", description="2-socket HGX H100: 8 GPUs behind 4 PCIe switches, ASPEED BMC VGA, NVMe, NICs",
        kernel="6.8.0-nodeagent-sim", block_size=2 * GiB, nodes=_two_sockets(2 * TiB, 56), possible_nodes=2,
        cpu_model="Intel(R) Xeon(R) Platinum 8480+", cpu_vendor="GenuineIntel", cpu_flags=SPR_FLAGS, sockets=2,
        dmi_vendor="Supermicro", dmi_product="SYS-821GE-TNHR", hostname="hgx-h100", gpus=tuple(gpus),
        pci=tuple(roots),
        mounts=(MountDef("/", "/dev/nvme0n1p2", "ext4", 1788 * GiB, 140 * GiB),
                MountDef("/models", "/dev/md0", "xfs", 4 * 3576 * GiB, 3100 * GiB)),
        distances={0: (10, 21), 1: (21, 10)}, swap=8 * GiB,
    )


def _snc2_cxl() -> Preset:
    """A 2-socket Sapphire Rapids node booted with sub-NUMA clustering (SNC-2, the BIOS's "SNC2" setting): each
    socket is two DRAM nodes, so four DRAM nodes on two sockets (nodes 0-1 on socket 0, 2-3 on socket 1, SLIT 12
    between the halves of a socket, 21 across), and one 512 GiB CXL.mem expander per socket as devdax (target
    nodes 4, 5). Both halves of a socket are the same distance (14) from that socket's expander: distance ties
    are normal here. Four H100 NVL GPUs, two per socket, the ASPEED BMC VGA; kernel 6.12."""
    cores = 28  # per SNC half: 56-core sockets, 2 threads per core
    nodes = []
    for n in range(4):
        cpus = tuple(list(range(n * cores, (n + 1) * cores)) + list(range(4 * cores + n * cores,
                                                                         4 * cores + (n + 1) * cores)))
        nodes.append(NumaDef(n, cpus, n * 256 * GiB, 256 * GiB, used=(12 if n == 0 else 6) * GiB))
    cxl = (simdax.DaxDef("dax0.0", 0, 4, 1 * TiB, 512 * GiB, kind="cxl", numa_node=0),
           simdax.DaxDef("dax1.0", 1, 5, 1 * TiB + 512 * GiB, 512 * GiB, kind="cxl", numa_node=2))
    gpus = tuple(GpuDef(pci=f"0000:{bus:02x}:00.0", numa_node=(0, 1, 2, 3)[i])
                 for i, bus in enumerate((0x1a, 0x3a, 0x9a, 0xba)))
    return Preset(
        name="snc2-cxl", description="2-socket SNC-2 node: 4 DRAM nodes on 2 sockets, a CXL expander per socket",
        kernel="6.12.0-nodeagent-sim", block_size=2 * GiB, nodes=tuple(nodes), possible_nodes=6, dax=cxl,
        cpu_model="Intel(R) Xeon(R) Platinum 8480+", cpu_vendor="GenuineIntel", cpu_flags=SPR_FLAGS, sockets=2,
        dmi_vendor="Supermicro", dmi_product="SYS-221H-TNR", hostname="snc2-cxl", gpus=gpus,
        mounts=(MountDef("/", "/dev/nvme0n1p2", "ext4", 960 * GiB, 90 * GiB),
                MountDef("/models", "/dev/nvme1n1", "xfs", 7680 * GiB, 2100 * GiB)),
        distances={0: (10, 12, 21, 21, 14, 24), 1: (12, 10, 21, 21, 14, 24), 2: (21, 21, 10, 12, 24, 14),
                   3: (21, 21, 12, 10, 24, 14), 4: (14, 14, 24, 24, 10, 26), 5: (24, 24, 14, 14, 26, 10)},
        node_tier={4: memory.KMEM_TIER, 5: memory.KMEM_TIER},
    )


def large(n_devices: int = 8, device_size: int = 2 * TiB, block_size: int = 128 * 1024**2,
          online_zone: str | None = "Movable", name: str = "stress") -> Preset:
    """A big CXL node for benchmarks: ``n_devices`` expanders on nodes 2.., optionally already online."""
    base = _h100(False)
    devs = tuple(simdax.DaxDef(f"dax{i}.0", i, 2 + i, 1 * TiB + i * device_size, device_size, numa_node=i % 2)
                 for i in range(n_devices))
    return replace(base, name=name, description=f"{n_devices} CXL devices of {device_size // GiB} GiB, "
                   f"{block_size // 1024**2} MiB blocks", block_size=block_size, dax=devs,
                   dax_online_zone=online_zone, possible_nodes=2 + n_devices, distances={},
                   node_tier={2 + i: memory.KMEM_TIER for i in range(n_devices)})


PRESETS: dict[str, Callable[[], Preset]] = {
    "h100-cxl": lambda: _h100(False),
    "h100-cxl-autoonline": lambda: _h100(True),
    "l40-kvm64": _l40_kvm64,
    "workstation": _workstation,
    "qemu-3node": _qemu_3node,
    "hgx-h100": _hgx,
    "snc2-cxl": _snc2_cxl,
    "stress": large,
    "small": lambda: large(1, 64 * GiB, 128 * 1024**2, name="small"),
}


def get(name: str) -> Preset:
    try:
        return PRESETS[name]()
    except KeyError:
        raise KeyError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}") from None


def build(preset: Preset, root: Path, *, kernel: str | None = None) -> Path:
    """Lay out ``preset`` under ``root`` (which must be empty or absent)."""
    if kernel:
        preset = replace(preset, kernel=kernel)
    root = Path(root)
    if root.exists() and any(root.iterdir()):
        raise FileExistsError(f"{root} is not empty")
    t = Tree(root)
    meta = {"version": 1, "preset": preset.name, "kernel": preset.kernel,
            "node_tier": {str(k): v for k, v in preset.node_tier.items()},
            "distances": {str(k): list(v) for k, v in preset.distances.items()},
            "spec": json.loads(json.dumps(asdict(preset), default=str)), "layers": layer_names()}
    t.file(f"/{MARKER}/meta.json", json.dumps(meta, indent=1), RW)
    k = SimKernel(root)
    _proc_and_etc(k, preset)
    _cpus(k, preset)
    _memory(k, preset)
    from .cxl_presets import expanders  # (the CXL bus behind CXL DAX devices; cxl_presets imports this module)

    for d in preset.dax:
        if d.kind != "cxl":
            simdax.lay_out(k, d)
    expanders(k, preset.dax)
    for d in preset.dax:
        if preset.dax_online_zone:
            simdax.to_system_ram(k, d.name, preset.dax_online_zone)
    if preset.daxctl if preset.daxctl is not None else bool(preset.dax):
        fake_daxctl.install(root)
    if preset.daxctl_udev_rule:
        _daxctl_udev(k)
    for step in LAYERS:
        step(k, preset)
    return root


#: What Debian's daxctl package installs: a udev rule that starts ``daxdev-reconfigure@<dev>.service`` (which
#: runs ``daxctl reconfigure-device --check-config <dev>``) for every DAX device added, and a config directory.
DAXCTL_UDEV_RULE = ('ACTION=="add", SUBSYSTEM=="dax", TAG+="systemd", '
                    'PROGRAM="/usr/bin/systemd-escape -p --template=daxdev-reconfigure@.service $env{DEVNAME}", '
                    'ENV{SYSTEMD_WANTS}="%c"')
DAXCTL_CONF_EXAMPLE = """# daxctl reads every *.conf here when reconfigure-device runs with --check-config
# (as the udev rule's service does on every DAX device added). A section such as
#   [reconfigure-device <unique-name>]
#   nvdimm.uuid = <namespace uuid>
#   mode = system-ram
#   online = true
#   movable = false
# reconfigures the matching device. This example file configures nothing."""


#: An operator's daxctl configuration that onlines every CXL device in ZONE_NORMAL on hot-add: with the udev
#: rule, a second agent acting on the devices nodeagent manages (h100-cxl-autoonline has it).
DAXCTL_CONF_ACTIVE = """[reconfigure-device cxl-expanders]
nvdimm.uuid = 6446d084-7205-4d8b-a442-cb6d265631a8
mode = system-ram
online = true
movable = false"""


def _daxctl_udev(k: SimKernel) -> None:
    # Debian 12 is merged-/usr: the package's /lib/udev and /lib/systemd files live under /usr/lib.
    k.tree.file("/usr/lib/udev/rules.d/90-daxctl-device.rules", DAXCTL_UDEV_RULE, RW)
    k.tree.file("/usr/lib/systemd/system/daxdev-reconfigure@.service",
                "[Unit]\nDescription=Automatic daxctl device reconfiguration\n\n[Service]\nType=forking\n"
                'ExecStart=/bin/sh -c "exec daxctl reconfigure-device --check-config %I"', RW)
    k.tree.file("/etc/daxctl.conf.d/daxctl.example.conf", DAXCTL_CONF_EXAMPLE, RW)
    k.tree.file("/etc/daxctl.conf.d/cxl-expanders.conf", DAXCTL_CONF_ACTIVE, RW)


def _proc_and_etc(k: SimKernel, p: Preset) -> None:
    t = k.tree
    t.file("/proc/sys/kernel/osrelease", p.kernel, RO)
    t.file("/proc/version", f"Linux version {p.kernel} (nodeagent-sim) #1 SMP PREEMPT_DYNAMIC", RO)
    t.file("/proc/sys/kernel/hostname", p.hostname, RW)
    t.file("/etc/hostname", p.hostname, RW)
    t.file("/etc/os-release", 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"', RW)
    t.file("/proc/cmdline", p.cmdline, RO)
    t.file("/proc/sys/kernel/random/boot_id", f"{uuid.uuid4()}\n", RO)  # a new boot per node laid out
    # MemTotal and MemFree follow the online memory blocks and each node's used memory (memory.derive).
    t.file("/proc/meminfo", "\n".join(f"{key + ':':<16}{(p.swap // 1024 if key.startswith('Swap') else 0):>8} kB"
                                      for key in ("MemTotal", "MemFree", "MemAvailable", "SwapTotal", "SwapFree")),
           RO)
    keys = ["numa_hit", "numa_miss", "numa_foreign", "numa_interleave", "numa_local", "numa_other",
            "pgpromote_success", "pgpromote_candidate", "pgdemote_kswapd", "pgdemote_direct",
            "pgdemote_khugepaged", "numa_pte_updates", "numa_huge_pte_updates", "numa_hint_faults",
            "numa_hint_faults_local", "numa_pages_migrated", "pgmigrate_success", "pgmigrate_fail"]
    # in the order of shared/reference/vmstat-tiering-keys-6.18.txt
    if k.at_least(6, 14):
        keys.insert(keys.index("pgdemote_khugepaged") + 1, "pgdemote_proactive")
    if k.at_least(6, 18):
        keys.insert(keys.index("pgpromote_candidate") + 1, "pgpromote_candidate_nrl")
    t.file("/proc/vmstat", "\n".join(f"{key} 0" for key in keys), RO)
    knobs = dict(DEFAULT_KNOBS)
    knobs.update(p.knobs)
    for path, value in knobs.items():
        since = KNOB_SINCE.get(path)
        if since and not k.at_least(*since):
            continue
        t.file(path, value, RW)
    # The multi-gen LRU (6.1), on as distributions build it (CONFIG_LRU_GEN_ENABLED): the Debian 6.12 guest's
    # reclaim runs through it (bench/placement/results/kv-explore/s13: node reclaim without unmap scans nothing).
    if k.at_least(6, 1):
        t.file("/sys/kernel/mm/lru_gen/enabled", "0x0007", RW)
        t.file("/sys/kernel/mm/lru_gen/min_ttl_ms", "0", RW)  # lru_gen_min_ttl starts at 0: no OOM guard
    # min_free_kbytes as init_per_zone_wmark_min boots it: sqrt(16 x lowmem KiB), 128 KiB to 256 MiB (the boot
    # DRAM standing in for the kernel's free buffer pages); raised by khugepaged's
    # set_recommended_min_free_kbytes when THP is not `never` (its default here: madvise).
    if "/proc/sys/vm/min_free_kbytes" not in p.knobs:
        lowmem_kb = sum(n.size for n in p.nodes) // 1024
        value = min(max(math.isqrt(lowmem_kb * 16), 128), 262144)
        t.file("/proc/sys/vm/min_free_kbytes", max(value, thp_recommended_min_free_kb(p.nodes)), RW)
    t.file("/sys/devices/system/memory/block_size_bytes", f"{p.block_size:x}", RO)
    # memory_hotplug module parameters as a 6.x kernel shows them (online_policy arrived in 5.15).
    if k.at_least(5, 15):
        for name, value, mode in (("online_policy", "contig-zones", RW), ("auto_movable_ratio", 301, RW),
                                  ("auto_movable_numa_aware", "Y", RW), ("memmap_on_memory", "N", RO)):
            t.file(f"/sys/module/memory_hotplug/parameters/{name}", value, mode)
    t.file("/etc/hostname", p.hostname, RW)
    for path, content in p.files.items():
        t.file(path, content, RW)
    t.dir("/var/lib")


def _cpus(k: SimKernel, p: Preset) -> None:
    t = k.tree
    cpus = sorted(c for n in p.nodes for c in n.cpus)
    for c in cpus:
        t.file(f"/sys/devices/system/cpu/cpu{c}/online", 1, RW)
    for name in ("online", "possible", "present"):
        t.file(f"/sys/devices/system/cpu/{name}", format_list(cpus), RO)
    node_of = {c: n.id for n in p.nodes for c in n.cpus}
    per_socket = max(len(cpus) // max(p.sockets, 1), 1)
    family, model, stepping, microcode, cache, bugs = _cpu_ids(p)
    socket_of = {c: (node_of[c] * p.sockets // max(len(p.nodes), 1) if p.sockets > 1 else 0) for c in cpus}
    blocks = []
    for c in cpus:
        # the fields and their order as a 6.x kernel prints them (shared/reference/cpuinfo-*.txt)
        blocks.append("\n".join([
            f"processor\t: {c}", f"vendor_id\t: {p.cpu_vendor}", f"cpu family\t: {family}", f"model\t\t: {model}",
            f"model name\t: {p.cpu_model}", f"stepping\t: {stepping}", f"microcode\t: {microcode}",
            "cpu MHz\t\t: 2596.132", f"cache size\t: {cache}", f"physical id\t: {socket_of[c]}",
            f"siblings\t: {per_socket}", f"core id\t\t: {c % per_socket}", f"cpu cores\t: {per_socket}",
            f"apicid\t\t: {c}", f"initial apicid\t: {c}", "fpu\t\t: yes", "fpu_exception\t: yes",
            "cpuid level\t: 13" if p.cpu_model == "Common KVM processor" else "cpuid level\t: 32", "wp\t\t: yes",
            f"flags\t\t: {' '.join(p.cpu_flags)}", f"bugs\t\t: {bugs}", "bogomips\t: 5192.26",
            "clflush size\t: 64", "cache_alignment\t: 64", "address sizes\t: 48 bits physical, 48 bits virtual",
            "power management:",
        ]))
    t.file("/proc/cpuinfo", "\n\n".join(blocks) + "\n", RO)
    t.file("/sys/class/dmi/id/sys_vendor", p.dmi_vendor, RO)
    t.file("/sys/class/dmi/id/product_name", p.dmi_product, RO)


#: (cpu family, model, stepping, microcode, cache size, bugs) as /proc/cpuinfo shows them, by model name.
_CPU_IDS = {
    "Common KVM processor": (15, 6, 1, "0x1", "16384 KB", "cpu_meltdown spectre_v1 spectre_v2 spec_store_bypass "
                             "l1tf mds swapgs itlb_multihit mmio_unknown"),
    "Intel(R) Xeon(R) Platinum 8480+": (6, 143, 8, "0x2b0004b1", "107520 KB", "spectre_v1 spectre_v2 "
                                        "spec_store_bypass swapgs eibrs_pbrsb bhi"),
    "AMD Ryzen Threadripper PRO 7985WX 64-Cores": (25, 24, 1, "0xa108105", "1024 KB", "sysret_ss_attrs spectre_v1 "
                                                   "spectre_v2 spec_store_bypass srso"),
}
_AMD_IDS = (25, 17, 1, "0xa101148", "1024 KB", "sysret_ss_attrs spectre_v1 spectre_v2 spec_store_bypass srso")


def _cpu_ids(p: Preset) -> tuple[int, int, int, str, str, str]:
    if p.cpu_model in _CPU_IDS:
        return _CPU_IDS[p.cpu_model]
    if p.cpu_vendor == "GenuineIntel":
        return (6, 6, 3, "0x1", "16384 KB", "spectre_v1 spectre_v2 spec_store_bypass")
    return _AMD_IDS


def _memory(k: SimKernel, p: Preset) -> None:
    t = k.tree
    ids = [n.id for n in p.nodes]
    t.file(f"{memory.NODE}/possible", format_list(range(p.possible_nodes)), RO)
    for name in ("online", "has_cpu", "has_memory", "has_normal_memory", "has_generic_initiator"):
        t.file(f"{memory.NODE}/{name}", "", RO)
    t.file(f"{memory.TIERS}/uevent", "", RW)
    memory.power(k, memory.TIERS)
    for bus in ("node", "memory", "memory_tiering"):  # where the nodes', blocks' and tiers' subsystem links lead
        t.dir(f"/sys/bus/{bus}/devices")
    for n in p.nodes:
        dist = list(p.distances.get(n.id, [10 if i == n.id else 21 for i in range(p.possible_nodes)]))
        memory.add_node(k, n.id, list(n.cpus), dist, used_kb=n.used // 1024)
        memory.add_blocks(k, n.id, n.start, n.size, "Normal")
    if ids:
        t.set("/sys/devices/system/memory/memory0/valid_zones", "none")


def layer_names() -> list[str]:
    """The registered layout steps, recorded in meta.json so that a cached node laid out without one is redone."""
    return [f"{step.__module__}.{step.__qualname__}" for step in LAYERS]


def create(root: Path, name: str, *, kernel: str | None = None) -> Path:
    return build(get(name), root, kernel=kernel)


def capture_like(name: str, dest: Path) -> Path:
    """Lay out preset ``name`` as a static capture of the node's /sys, /proc and /etc (what ``tar`` of a real
    node gives): no simulator marker, no fake executables — so nodeagent treats it as another machine's root,
    runs no command for it and writes nothing; the facts come from the files alone."""
    dest = Path(dest)
    tmp = dest.with_name(dest.name + ".sim")
    build(get(name), tmp)
    import shutil  # (with bz2, lzma and zlib: loaded by the two helpers that copy or delete trees)

    # no marker, and no /dev: a capture of /sys and /proc holds no device nodes (copying one would read it)
    shutil.copytree(tmp, dest, symlinks=True,
                    ignore=lambda d, names: [n for n in names if n == MARKER or (n == "dev" and Path(d) == tmp)])
    for tool in ("nvidia-smi", "systemd-detect-virt", "daxctl"):
        (dest / "usr/bin" / tool).unlink(missing_ok=True)
    remove(tmp)
    return dest


def remove(root: Path) -> None:
    """Delete a simulated node (it refuses a directory that is not one)."""
    if not (Path(root) / MARKER / "meta.json").is_file():
        raise ValueError(f"{root} is not a simulated node")
    for p in Path(root).rglob("*"):
        if p.is_file() and not p.is_symlink():
            p.chmod(0o644)
    import shutil

    shutil.rmtree(root)


from .cxl_presets import PRESETS as _CXL_PRESETS  # noqa: E402  (nodes with a CXL bus: sim/cxl_presets.py)

PRESETS.update(_CXL_PRESETS)
