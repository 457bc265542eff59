"""Memory latency on a simulated node: the last-level cache, the firmware's declared figures, and the chase.

A :data:`~nodeagent_sim.presets.LAYERS` step lays out, from the preset:

- ``/sys/devices/system/cpu/cpuN/cache/index3/{level,type,size,shared_cpu_list}``: one L3 per node with CPUs
  (as a socket of the machine has it);
- the HMAT figures the firmware declares for each memory node present at boot:
  ``nodeN/access0/initiators/{read,write}_latency`` (ns), ``{read,write}_bandwidth`` (MB/s) and a ``nodeI``
  link per best initiator, as ``drivers/base/node.c`` exposes them (``access1``: CPU initiators only, same
  figures here). Nodes onlined later (a DAX device turned system-ram) have none, as on a kernel before 6.9;
- a simulator-private model (``.nodeagent-machine/latency.json``) that :func:`chase_ns` answers from, the way
  :func:`nodeagent_sim.hardware.copy_seconds` answers for bandwidth: load-to-use latency from a CPU node to a
  memory node is ``local + per_distance × (distance - 10)``, plus ``cxl`` when the memory node has no CPU and
  its tier is a slower one (CXL). Declared figures are lower than measured ones, as an idle HMAT figure is.

``qemu-3node`` models the TCG guest: every node equal, whatever the distances say.
"""

from __future__ import annotations

import json
from pathlib import Path

from nodeagent.util.kfmt import format_list, parse_list

from .hardware import mbind_target
from .kernel import MARKER, SimKernel
from .presets import LAYERS, Preset
from .tree import RO

LATENCY = "latency.json"
NODE = "/sys/devices/system/node"
MiB = 1024**2

#: (local DRAM ns, ns per distance unit above 10, CXL extra ns, L3 bytes per node with CPUs), per preset.
LATENCY_MODEL: dict[str, tuple[float, float, float, int]] = {
    "h100-cxl": (112.0, 7.0, 115.0, 105 * MiB),
    "h100-cxl-autoonline": (112.0, 7.0, 115.0, 105 * MiB),
    "l40-kvm64": (135.0, 7.0, 0.0, 16 * MiB),
    "workstation": (88.0, 7.0, 0.0, 256 * MiB),
    "qemu-3node": (61.0, 0.0, 0.0, 16 * MiB),
}
_DEFAULT_MODEL = (112.0, 7.0, 115.0, 105 * MiB)
#: Declared (HMAT, idle) latency as a share of the modelled load-to-use figure.
DECLARED_SHARE = 0.8


def lay_out(k: SimKernel, p: Preset) -> None:
    local, per, cxl, l3 = LATENCY_MODEL.get(p.name, _DEFAULT_MODEL)
    (k.meta_dir / LATENCY).write_text(json.dumps({"local": local, "per_distance": per, "cxl": cxl,
                                                  "distances": {str(a): list(b) for a, b in p.distances.items()}}))
    t = k.tree
    for n in p.nodes:
        if not n.cpus:
            continue
        for c in n.cpus:
            base = f"/sys/devices/system/cpu/cpu{c}/cache/index3"
            t.file(f"{base}/level", "3", RO)
            t.file(f"{base}/type", "Unified", RO)
            t.file(f"{base}/size", f"{l3 // 1024}K", RO)
            t.file(f"{base}/shared_cpu_list", format_list(n.cpus), RO)
    with_cpus = [n.id for n in p.nodes if n.cpus]
    for n in k.root.joinpath(NODE.lstrip("/")).glob("node[0-9]*"):
        target = int(n.name[4:])
        if not with_cpus:
            break
        try:
            ns = {i: chase_ns(k.root, i, target) for i in with_cpus}
        except OSError:  # a node without memory: nothing to declare
            continue
        best = min(ns.values())
        initiators = [i for i, v in ns.items() if v == best]
        for access in ("access0", "access1"):
            d = f"{NODE}/node{target}/{access}/initiators"
            t.file(f"{d}/read_latency", str(round(best * DECLARED_SHARE)), RO)
            t.file(f"{d}/write_latency", str(round(best * DECLARED_SHARE)), RO)
            t.file(f"{d}/read_bandwidth", "262144", RO)
            t.file(f"{d}/write_bandwidth", "262144", RO)
            for i in initiators:
                t.link(f"{d}/node{i}", f"../../../node{i}")


def _tier_slow(root: Path, node: int) -> bool:
    """The node sits in a memory tier below the default one (memory_tier4 holds DRAM)."""
    tiers = root / "sys/devices/virtual/memory_tiering"
    for d in tiers.glob("memory_tier*"):
        try:
            nodes = (d / "nodelist").read_text()
        except OSError:
            continue
        if node in parse_list(nodes):
            return int(d.name.removeprefix("memory_tier")) > 4
    return False


def chase_ns(root: Path, initiator: int, target: int) -> float:
    """Load-to-use ns from a CPU of node ``initiator`` to memory of node ``target``. EINVAL when ``target`` has
    no memory online (``mbind`` fails so on the real kernel)."""
    root = Path(root)
    base = mbind_target(root, target)
    model = json.loads((root / MARKER / LATENCY).read_text())
    row = model["distances"].get(str(initiator))
    dist = row[target] if row and target < len(row) else (10 if initiator == target else 20)
    ns = model["local"] + model["per_distance"] * (dist - 10)
    cpuless = not (base / "cpulist").read_text().strip() if (base / "cpulist").exists() else True
    if cpuless and _tier_slow(root, target):
        ns += model["cxl"]
    return float(ns)


LAYERS.append(lay_out)
