"""The hardware a simulated node's preflight checks look at: PCI GPUs, mounts and their usage, memory bandwidth,
and the fake ``nvidia-smi`` / ``systemd-detect-virt`` executables.

A :data:`~nodeagent_sim.presets.LAYERS` step lays out, from the preset:

- the preset's PCI tree as the kernel lays it out: ``/sys/devices/pciDDDD:BB/<root port>/[<switch upstream port>/
  <downstream port>/]<device>``, each with ``vendor device class numa_node``, the PCIe ones with
  ``current_link_speed`` ("32.0 GT/s PCIe") ``current_link_width max_link_speed max_link_width`` (a conventional
  PCI device, like a BMC's VGA behind its bridge, has none), a ``driver`` link into ``/sys/bus/pci/drivers``, and
  every function linked from ``/sys/bus/pci/devices/<addr>``; by default each GPU on its own root port, an NVMe
  drive, and the console (an ASPEED BMC VGA bound to ``ast``, or QEMU's VGA bound to ``bochs-drm`` in a guest);
- ``/proc/self/mountinfo`` with cgroup v2 where the preset mounts it (:func:`lay_out_mountinfo`);
- ``/proc/mounts`` (and ``/proc/self/mounts``), the mount points as directories, and a simulator-private usage
  table (``.nodeagent-machine/statvfs.json``) that :func:`statvfs` answers from — the host layer's
  ``host.statvfs(path)`` lands here for a simulated root, so nothing is ever asked of this machine's disks;
- ``/proc/sys/kernel/arch``, the DAMON modules' ``enabled`` parameters (off) on kernels that have them;
- ``usr/bin/systemd-detect-virt`` (``nvidia-smi`` and NVML: :mod:`nodeagent_sim.nvidia`), which prints what the
  real tool prints for this node;
- a per-node copy-bandwidth model that :func:`copy_seconds` answers from (figures typical of such machines;
  ``l40-kvm64`` has the 11.7 GB/s of the field report).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

# the answers themselves are the machine plugin's, which loads without this package
from nodeagent_sim_machine import BANDWIDTH, STATVFS, copy_seconds, mbind_target, statvfs  # noqa: F401

from .kernel import MARKER, SimKernel
from .presets import LAYERS, MountDef, PciDef, Preset, aspeed_bmc, gpu_pci, nvme, qemu_vga, root_port
from .tree import RO

BLOCK = 4096

#: (single-thread GB/s, all-CPU GB/s) of DRAM nodes and of CPU-less (CXL / pmem) nodes, per preset.
BANDWIDTH_MODEL: dict[str, tuple[tuple[float, float], tuple[float, float]]] = {
    "h100-cxl": ((19.5, 290.0), (9.1, 52.0)),
    "h100-cxl-autoonline": ((19.5, 290.0), (9.1, 52.0)),
    "l40-kvm64": ((5.9, 11.7), (5.9, 11.7)),
    "workstation": ((24.0, 185.0), (24.0, 185.0)),
    "qemu-3node": ((3.1, 5.2), (2.2, 4.0)),
}
_DEFAULT_MODEL = ((19.5, 290.0), (9.1, 52.0))


def lay_out(k: SimKernel, p: Preset) -> None:
    t = k.tree
    t.file("/proc/sys/kernel/arch", "x86_64", RO)
    _pci(k, p)
    _mounts(k, p)
    _bandwidth(k, p)
    _executable(k.root, "systemd-detect-virt", _detect_virt_script(p))
    # nvidia-smi (and the NVML answers) come from sim/nvidia.py, a later layer.


# -- PCI ------------------------------------------------------------------------------------------------------

def default_pci(p: Preset) -> tuple[PciDef, ...]:
    """The PCI tree of a preset that gives none: each GPU on its own root port (the slot's maximum is the GPU's),
    one NVMe drive, and the console — an ASPEED BMC VGA on a server, QEMU's VGA in a guest."""
    # Root ports as AMD numbers its GPP bridges (00:01.1, 00:02.1...): clear of 00:01.0, where q35 puts its VGA.
    roots = [root_port(f"{g.pci.split(':')[0]}:00:{i + 1:02x}.1", gpu_pci(g), numa_node=g.numa_node,
                       link=(g.link_speed, g.link_width, g.max_link_speed, g.max_link_width))
             for i, g in enumerate(p.gpus)]
    n = len(roots) + 1
    roots.append(root_port(f"0000:00:{n:02x}.1", nvme("0000:01:00.0", 0), numa_node=0))
    if p.display == "aspeed":
        roots.append(aspeed_bmc(0x02, f"0000:00:{n + 1:02x}.1"))
    return tuple(roots)


def _pci(k: SimKernel, p: Preset) -> None:
    t = k.tree
    roots = p.pci or default_pci(p)
    for rp in roots:
        domain, bus = rp.address.split(":")[:2]
        add_pci_device(k, f"/sys/devices/pci{domain}:{bus}", rp)
    if p.display == "qemu":
        add_pci_device(k, "/sys/devices/pci0000:00", qemu_vga())
    t.dir("/sys/bus/pci/drivers")


def add_pci_device(k: SimKernel, parent: str, d: PciDef) -> None:
    """One function's directory as the kernel lays it out, its ``/sys/bus/pci/devices`` link, its ``driver``
    link (and the driver's link back), then the devices of its secondary bus inside it."""
    t = k.tree
    dev = f"{parent}/{d.address}"
    for name, value in (("vendor", d.vendor), ("device", d.device), ("class", d.pci_class),
                        ("subsystem_vendor", d.vendor), ("numa_node", d.numa_node), ("enable", 1)):
        t.file(f"{dev}/{name}", value, RO)
    if d.link is not None:
        speed, width, max_speed, max_width = d.link
        for name, value in (("current_link_speed", speed), ("current_link_width", width),
                            ("max_link_speed", max_speed), ("max_link_width", max_width)):
            t.file(f"{dev}/{name}", value, RO)
    t.link(f"/sys/bus/pci/devices/{d.address}", f"../../..{dev[4:]}")
    if d.driver:
        drv = f"/sys/bus/pci/drivers/{d.driver}"
        t.link(f"{dev}/driver", os.path.relpath(drv, dev))
        t.link(f"{drv}/{d.address}", os.path.relpath(dev, drv))
    for c in d.children:
        add_pci_device(k, dev, c)


# -- mounts and their usage --------------------------------------------------------------------------------------

def _mounts(k: SimKernel, p: Preset) -> None:
    lines = ["sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0",
             "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0"]
    table: dict[str, dict[str, int]] = {
        "/sys": _usage(0, 0, 0, 0), "/proc": _usage(0, 0, 0, 0),
    }
    # Every node has a root filesystem; a preset that lists none gets a modest one.
    mounts = p.mounts or (MountDef("/", "/dev/vda1", "ext4", 20 * 1024**3, 6 * 1024**3),)
    for m in mounts:
        opts = "rw,relatime" + (",attr2,inode64,noquota" if m.fstype == "xfs" else "")
        lines.append(f"{m.device} {m.path} {m.fstype} {opts} 0 0")
        table[m.path] = _usage(m.size, m.used, m.inodes, m.inodes_used)
        k.tree.dir(m.path)
    text = "\n".join(lines)
    k.tree.file("/proc/mounts", text, RO)
    k.tree.file("/proc/self/mounts", text, RO)
    (k.meta_dir / STATVFS).write_text(json.dumps(table, indent=1))


def lay_out_mountinfo(k: SimKernel, p: Preset) -> None:
    """``/proc/self/mountinfo`` as a systemd host shows it: the root filesystem, the kernel's pseudo filesystems,
    cgroup v2 where the preset mounts it (unified at ``/sys/fs/cgroup``, or systemd's hybrid layout with the v1
    controllers beside a controller-less ``/sys/fs/cgroup/unified``), then the preset's other mounts."""
    mounts = p.mounts or (MountDef("/", "/dev/vda1", "ext4", 20 * 1024**3, 6 * 1024**3),)
    root = next((m for m in mounts if m.path == "/"), mounts[0])
    rows: list[tuple[int, str, str, str, str, str]] = []  # parent id, mount point, options, type, source, super

    def add(parent: int, point: str, opts: str, fstype: str, source: str, sup: str = "rw") -> int:
        rows.append((parent, point, opts, fstype, source, sup))
        return 20 + len(rows)

    top = add(1, "/", "rw,relatime", root.fstype, root.device, "rw,errors=remount-ro" if root.fstype == "ext4"
              else "rw,attr2,inode64,noquota")
    sys_id = add(top, "/sys", "rw,nosuid,nodev,noexec,relatime", "sysfs", "sysfs")
    add(top, "/proc", "rw,nosuid,nodev,noexec,relatime", "proc", "proc")
    dev = add(top, "/dev", "rw,nosuid,relatime", "devtmpfs", "udev", "rw,size=65536k,nr_inodes=1048576,mode=755")
    add(dev, "/dev/pts", "rw,nosuid,noexec,relatime", "devpts", "devpts", "rw,gid=5,mode=620,ptmxmode=000")
    if p.cgroup_hybrid:
        cg = add(sys_id, "/sys/fs/cgroup", "ro,nosuid,nodev,noexec", "tmpfs", "tmpfs", "ro,mode=755,inode64")
        add(cg, "/sys/fs/cgroup/unified", "rw,nosuid,nodev,noexec,relatime", "cgroup2", "cgroup2", "rw,nsdelegate")
        for ctl in ("systemd", "memory", "cpu,cpuacct", "pids"):
            add(cg, f"/sys/fs/cgroup/{ctl}", "rw,nosuid,nodev,noexec,relatime", "cgroup", "cgroup",
                "rw,xattr,name=systemd" if ctl == "systemd" else f"rw,{ctl}")
            k.tree.dir(f"/sys/fs/cgroup/{ctl}")
        k.tree.dir("/sys/fs/cgroup/unified")
    elif p.cgroup2_mount:
        add(sys_id if p.cgroup2_mount.startswith("/sys/") else top, p.cgroup2_mount,
            "rw,nosuid,nodev,noexec,relatime", "cgroup2", "cgroup2", "rw,nsdelegate,memory_recursiveprot")
        k.tree.dir(p.cgroup2_mount)
    for m in mounts:
        if m is not root:
            add(top, m.path, "rw,relatime", m.fstype, m.device,
                "rw,attr2,inode64,noquota" if m.fstype == "xfs" else "rw")
    lines = []
    for i, (parent, point, opts, fstype, source, sup) in enumerate(rows):
        shared = f" shared:{i + 1}" if point != "/sys/fs/cgroup" or not p.cgroup_hybrid else ""
        lines.append(f"{21 + i} {parent} 0:{21 + i} / {_escape(point)} {opts}{shared} - {fstype} "
                     f"{_escape(source)} {sup}")
    k.tree.file("/proc/self/mountinfo", "\n".join(lines) + "\n", RO)


def _escape(path: str) -> str:
    """The kernel's octal escapes in mount paths (space, tab, newline, backslash)."""
    return "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in path)


def _usage(size: int, used: int, inodes: int, inodes_used: int) -> dict[str, int]:
    blocks, used_blocks = size // BLOCK, used // BLOCK
    return {"block_size": BLOCK, "blocks": blocks, "blocks_free": blocks - used_blocks,
            "blocks_avail": blocks - used_blocks, "files": inodes, "files_free": inodes - inodes_used}


def set_usage(root: Path, mount: str, *, used: int | None = None, size: int | None = None,
              inodes_used: int | None = None) -> None:
    """Change a simulated mount's usage (tests: "the disk filled up")."""
    p = Path(root) / MARKER / STATVFS
    table = json.loads(p.read_text())
    u = table[mount]
    bs = u["block_size"]
    if size is not None:
        used_blocks = u["blocks"] - u["blocks_free"]
        u["blocks"] = size // bs
        u["blocks_free"] = u["blocks_avail"] = u["blocks"] - used_blocks
    if used is not None:
        u["blocks_free"] = u["blocks_avail"] = u["blocks"] - used // bs
    if inodes_used is not None:
        u["files_free"] = u["files"] - inodes_used
    p.write_text(json.dumps(table, indent=1))


# -- memory bandwidth --------------------------------------------------------------------------------------------

def _bandwidth(k: SimKernel, p: Preset) -> None:
    dram, far = BANDWIDTH_MODEL.get(p.name, _DEFAULT_MODEL)
    (k.meta_dir / BANDWIDTH).write_text(json.dumps({"dram": dram, "cpuless": far}))


# -- fake executables -------------------------------------------------------------------------------------------

def _executable(root: Path, name: str, text: str) -> None:
    path = Path(root) / "usr/bin" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _detect_virt_script(p: Preset) -> str:
    virt = p.hypervisor or "none"
    return f"""#!/bin/sh
# Simulated systemd-detect-virt: prints the virtualization technology, exit 1 (and "none") on bare metal.
quiet=0; only=all
for a in "$@"; do
  case "$a" in
    -q|--quiet) quiet=1 ;;
    -v|--vm) only=vm ;;
    -c|--container) only=container ;;
    -h|--help) echo "systemd-detect-virt [OPTIONS...]"; exit 0 ;;
    *) echo "systemd-detect-virt: unrecognized option '$a'" >&2; exit 1 ;;
  esac
done
virt={virt}
[ "$only" = container ] && virt=none
[ "$quiet" = 1 ] || echo "$virt"
[ "$virt" = none ] && exit 1
exit 0
"""


LAYERS.append(lay_out)
LAYERS.append(lay_out_mountinfo)
