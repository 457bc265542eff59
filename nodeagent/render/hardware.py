"""The hardware facts (``facts.hardware.gather``) as text, for ``nodeagent facts``."""

from __future__ import annotations

import textwrap
from typing import Any

from ..util.quantities import format_size


def _size(n: int) -> str:
    """``df -h``-like: 1648GiB, 12.5TiB."""
    for unit, f in (("TiB", 1024**4), ("GiB", 1024**3)):
        if n >= 10 * f or (unit == "GiB" and n >= f):
            return f"{n / f:.1f}{unit}".replace(".0" + unit, unit)
    return format_size(n)

#: Flags worth naming present or absent on one line (what the cpu check and inference stacks look for).
NOTABLE_FLAGS = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "hypervisor")


def _link(d: dict[str, Any]) -> str:
    if d["link"] is None:
        return "no PCIe link (conventional PCI)"
    return f"{d['link']} (max {d['max_link']})"


def hardware_text(doc: dict[str, Any] | None) -> str:
    """Lines to append to the facts text ("" when the hardware facts were not gathered)."""
    if not doc:
        return ""
    from ..checks.pcie import gpu_evidence
    from ..facts.hardware import pci_from_dict

    out = ["", "hardware:"]
    cpu = doc.get("cpu")
    virt = doc.get("virtualization") or {}
    if cpu:
        what = f" — {cpu['virtual_model']}" if cpu.get("virtual_model") else ""
        out.append(f"  cpu: {cpu['count']} × {cpu['model']} ({cpu['vendor']}, {doc.get('arch', '?')}){what}; "
                   f"virtualization {virt.get('kind') or 'none'}")
        flags = set(cpu["flags"])
        out.append("  notable flags: " + " ".join(f if f in flags else f"-{f}" for f in NOTABLE_FLAGS))
        out += textwrap.wrap(" ".join(cpu["flags"]), 110, initial_indent=f"  flags ({len(flags)}): ",
                             subsequent_indent="    ")
    else:
        out.append("  cpu: /proc/cpuinfo is missing")
    devices = [gpu_evidence(pci_from_dict(d)) for d in doc.get("pci", [])]
    gpus = [d for d in devices if d["kind"] == "gpu"]
    out.append(f"  GPUs: {len(gpus)}" + ("" if gpus else " (none on the PCI bus)"))
    for g in gpus:
        hop = g.get("narrowest_hop")
        narrow = f", narrowest hop {hop['link']} at {hop['device']}" if hop and hop["device"] != g["address"] else ""
        node = f"node {g['numa_node']}" if g["numa_node"] is not None else "node ?"
        out.append(f"    {g['address']}  {g['vendor']} {g['device']}  {_link(g)}  {node}{narrow}"
                   + (f"  [{g['driver']}]" if g.get("driver") else ""))
    for label, kind in (("display-only", "display"), ("not judged", "other")):
        for d in (x for x in devices if x["kind"] == kind):
            out.append(f"  {label}: {d['address']}  {d['vendor']} {d['device']}  {d['why']}")
    for s in doc.get("pci_oversubscription", []):
        out.append(f"  shared uplink {s['uplink']} ({s['link']}): {len(s['gpus'])} GPUs, {s['ratio']}")
    mem = doc.get("gpu_memory")
    if mem:
        out.append(f"  GPU memory: {_size(mem['total_bytes'])} ({len(mem['per_gpu_mib'])} × "
                   f"{mem['names'][0]}, {mem['source']})")
    elif doc.get("gpu_memory_error"):
        out.append(f"  GPU memory: unknown ({doc['gpu_memory_error']})")
    for ev in (doc.get("memory_bandwidth") or {}).get("nodes", []):
        out.append(f"  memory bandwidth node{ev['node']}: {ev['all_cpus_gbps']:g} GB/s with {ev['threads']} CPUs, "
                   f"{ev['single_thread_gbps']:g} GB/s with one")
    for disk in doc.get("disks", []):
        u = disk.get("usage")
        if not u:
            out.append(f"  disk {disk['path']}: {disk['device']} {disk['fstype']}, usage unknown ({disk.get('error')})")
            continue
        size, free = u["blocks"] * u["block_size"], u["blocks_avail"] * u["block_size"]
        inodes = f", {u['files_free']:,} of {u['files']:,} inodes free" if u["files"] else ""
        out.append(f"  disk {disk['path']}: {disk['device']} {disk['fstype']}, {_size(free)} free of "
                   f"{_size(size)}{inodes}")
    checked = doc.get("checked_paths") or {}
    for cp in checked.get("paths", []):
        state = "exists" if cp["exists"] else f"missing (its filesystem: that of {cp['measured']})"
        where = f"on {cp['mount']} ({cp['device']}, {cp['fstype']})" if cp.get("mount") else "on no known mount"
        out.append(f"  disk check path {cp['path']} (profile {checked.get('profile')}): {state}, {where}")
    return "\n".join(out)
