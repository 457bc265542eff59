"""The hardware a simulated node's preflight checks look at: PCI GPUs, mounts and their usage, memory bandwidth,
and the fake ``nvidia-smi`` / ``systemd-detect-virt`` executables.

A :data:`~nodeagent.sim.presets.LAYERS` step lays out, from the preset:

- ``/sys/devices/pci0000:XX/<root port>/<gpu>`` with ``vendor device class current_link_speed current_link_width
  max_link_speed max_link_width numa_node`` (the root port has its own ``max_link_*``: the slot's limit), linked
  from ``/sys/bus/pci/devices/<addr>``, plus an NVMe controller so that enumeration has something to skip;
- ``/proc/mounts`` (and ``/proc/self/mounts``), the mount points as directories, and a simulator-private usage
  table (``.nodeagent-sim/statvfs.json``) that :func:`statvfs` answers from — the host layer's
  ``host.statvfs(path)`` lands here for a simulated root, so nothing is ever asked of this machine's disks;
- ``/proc/sys/kernel/arch``, the DAMON modules' ``enabled`` parameters (off) on kernels that have them;
- ``usr/bin/nvidia-smi`` (when the preset has GPUs) and ``usr/bin/systemd-detect-virt``, which print what the
  real tools print for this node;
- a per-node copy-bandwidth model that :func:`copy_seconds` answers from (figures typical of such machines;
  ``l40-kvm64`` has the 11.7 GB/s of the field report).
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
from pathlib import Path

from ..kfmt import parse_meminfo
from .kernel import MARKER, SimKernel
from .presets import LAYERS, GpuDef, MountDef, Preset
from .tree import RO

STATVFS = "statvfs.json"
BANDWIDTH = "bandwidth.json"
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
    if k.at_least(5, 16):
        t.file("/sys/module/damon_reclaim/parameters/enabled", "N", 0o644)
    if k.at_least(6, 0):
        t.file("/sys/module/damon_lru_sort/parameters/enabled", "N", 0o644)
    _executable(k.root, "systemd-detect-virt", _detect_virt_script(p))
    if p.gpus:
        _executable(k.root, "nvidia-smi", _nvidia_smi_script(p.gpus))


# -- PCI ------------------------------------------------------------------------------------------------------

def _pci(k: SimKernel, p: Preset) -> None:
    t = k.tree
    devices = [(g.pci, g.vendor, g.device, g.pci_class, g.link_speed, g.link_width, g.max_link_speed,
                g.max_link_width, g.numa_node) for g in p.gpus]
    # One NVMe controller beside the GPUs: enumeration must skip what is not a display controller.
    devices.append(("0000:01:00.0", "0x144d", "0xa80a", "0x010802", "16.0 GT/s PCIe", 4, "16.0 GT/s PCIe", 4, 0))
    for i, (addr, vendor, device, cls, speed, width, max_speed, max_width, numa) in enumerate(devices):
        domain = addr.split(":")[0]
        base = f"/sys/devices/pci{domain}:00/{domain}:00:{i + 1:02x}.0"  # the device's root port
        # The root port: the slot's capability (Gen5 x16 unless the GPU's own maximum is lower).
        t.file(f"{base}/max_link_speed", max_speed, RO)
        t.file(f"{base}/max_link_width", max_width, RO)
        t.file(f"{base}/current_link_speed", speed, RO)
        t.file(f"{base}/current_link_width", width, RO)
        t.file(f"{base}/class", "0x060400", RO)
        dev = f"{base}/{addr}"
        for name, value in (("vendor", vendor), ("device", device), ("class", cls),
                            ("current_link_speed", speed), ("current_link_width", width),
                            ("max_link_speed", max_speed), ("max_link_width", max_width), ("numa_node", numa),
                            ("subsystem_vendor", vendor), ("enable", 1)):
            t.file(f"{dev}/{name}", value, RO)
        t.link(f"/sys/bus/pci/devices/{addr}", f"../../..{dev[4:]}")


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


def _usage(size: int, used: int, inodes: int, inodes_used: int) -> dict[str, int]:
    blocks, used_blocks = size // BLOCK, used // BLOCK
    return {"block_size": BLOCK, "blocks": blocks, "blocks_free": blocks - used_blocks,
            "blocks_avail": blocks - used_blocks, "files": inodes, "files_free": inodes - inodes_used}


def statvfs(root: Path, path: str) -> dict[str, int]:
    """The simulated ``statvfs(path)``: usage of the mount that holds ``path``; ENOENT when it does not exist."""
    local = Path(root) / path.lstrip("/")
    if not os.path.lexists(local):
        raise OSError(errno.ENOENT, os.strerror(errno.ENOENT), path)
    try:
        table: dict[str, dict[str, int]] = json.loads((Path(root) / MARKER / STATVFS).read_text())
    except FileNotFoundError:
        raise OSError(errno.EIO, "this simulated node has no mount table (laid out by an older nodeagent: "
                      "create it again)", path) from None
    norm = os.path.normpath("/" + path.lstrip("/"))
    best = max((m for m in table if norm == m or norm.startswith(m.rstrip("/") + "/")), key=len, default=None)
    if best is None:
        raise OSError(errno.ENOENT, "no simulated mount holds this path", path)
    return table[best]


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


def mbind_target(root: Path, node: int) -> Path:
    """The directory of ``node``, which a buffer can be bound to; EINVAL, as ``mbind`` fails on the real kernel,
    when the node is not online or has no memory."""
    base = Path(root) / "sys/devices/system/node" / f"node{node}"
    try:
        info = parse_meminfo((base / "meminfo").read_text())
    except OSError:
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL) + f" (node {node} is not online)") from None
    if not info.get("MemTotal"):
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL) + f" (node {node} has no memory online)")
    return base


def copy_seconds(root: Path, node: int, threads: int, nbytes: int) -> float:
    """How long the simulated node takes to move ``nbytes`` (read + write) on ``node`` with ``threads`` threads:
    ``threads × single-thread`` figure, capped at the node's all-CPU figure. EINVAL for a node without memory,
    as ``mbind`` fails on the real kernel."""
    base = mbind_target(root, node)
    model = json.loads((Path(root) / MARKER / BANDWIDTH).read_text())
    cpuless = not (base / "cpulist").read_text().strip()
    single, full = model["cpuless" if cpuless else "dram"]
    gbps = min(single * max(threads, 1), full)
    return nbytes / (gbps * 1e9)


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


_GPU_FIELDS = ("index", "name", "memory.total", "pci.bus_id", "pcie.link.gen.current", "pcie.link.gen.max",
               "pcie.link.width.current", "pcie.link.width.max")
_GEN = {"2.5": 1, "5.0": 2, "8.0": 3, "16.0": 4, "32.0": 5, "64.0": 6}


def _gpu_row(i: int, g: GpuDef) -> dict[str, tuple[str, str]]:
    """field → (value with units, value without units)."""
    gen = str(_GEN.get(g.link_speed.split()[0], 1))
    gmax = str(_GEN.get(g.max_link_speed.split()[0], 1))
    bus = "0000" + g.pci.upper()  # nvidia-smi prints an 8-digit domain: 00000000:17:00.0
    return {"index": (str(i), str(i)), "name": (g.name, g.name),
            "memory.total": (f"{g.memory_mib} MiB", str(g.memory_mib)),
            "pci.bus_id": (bus, bus),
            "pcie.link.gen.current": (gen, gen), "pcie.link.gen.max": (gmax, gmax),
            "pcie.link.width.current": (str(g.link_width),) * 2, "pcie.link.width.max": (str(g.max_link_width),) * 2}


def _nvidia_smi_script(gpus: tuple[GpuDef, ...]) -> str:
    rows = [_gpu_row(i, g) for i, g in enumerate(gpus)]
    data = json.dumps({"rows": rows, "names": [g.name for g in gpus]})
    return f"""#!{sys.executable}
# Simulated nvidia-smi: answers --query-gpu=...,--format=csv[,noheader][,nounits] and -L like the real one.
import sys
DATA = {data}
FIELDS = {list(_GPU_FIELDS)!r}
UNITS = {{"memory.total": " [MiB]"}}
args = sys.argv[1:]
if args in (["-L"], ["--list-gpus"]):
    for i, name in enumerate(DATA["names"]):
        print(f"GPU {{i}}: {{name}} (UUID: GPU-00000000-0000-0000-0000-00000000000{{i}})")
    sys.exit(0)
query = fmt = None
for a in args:
    if a.startswith("--query-gpu="):
        query = a.split("=", 1)[1].split(",")
    elif a.startswith("--format="):
        fmt = a.split("=", 1)[1].split(",")
    else:
        print(f"Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.")
        sys.exit(2)
if query is None or fmt is None or "csv" not in fmt:
    print("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.")
    sys.exit(2)
for f in query:
    if f not in FIELDS:
        print(f'Field "{{f}}" is not a valid field to query.')
        sys.exit(2)
nounits = "nounits" in fmt
if "noheader" not in fmt:
    print(", ".join(f + ("" if nounits else UNITS.get(f, "")) for f in query))
for row in DATA["rows"]:
    print(", ".join(row[f][1 if nounits else 0] for f in query))
"""


LAYERS.append(lay_out)
