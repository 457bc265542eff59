"""Emulated device-DAX: ``/sys/bus/dax/devices/daxX.Y`` as device_dax or kmem (system-ram) devices.

Layout as captured on a real 6.12 kernel (``realkernel/out-dax-3node.txt``): the device lives under its region
(``.../regionN/daxN.0/daxN.0`` for legacy pmem, ``.../regionN/dax_regionN/daxN.0`` for CXL) with ``align dev
driver mapping0 memmap_on_memory modalias numa_node power resource size subsystem target_node uevent``, and
``/sys/bus/dax/devices/daxN.0`` links to it. Binding to kmem hot-adds the device's range, rounded inwards to
whole memory blocks, to the target node.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from . import memory
from .kernel import SimKernel
from .tree import RO, RW

BUS = "/sys/bus/dax"


@dataclass(frozen=True)
class DaxDef:
    name: str  # dax0.0
    region: int
    target_node: int
    start: int  # physical address of the range (``resource``)
    size: int
    align: int = 2 * 1024**2
    kind: str = "cxl"  # cxl | pmem
    numa_node: int = 0  # the node of the device itself (its host bridge), not where its memory goes


def device_dir(d: DaxDef) -> str:
    if d.kind == "pmem":
        return f"/sys/devices/platform/e820_pmem/ndbus0/region{d.region}/{d.name}/{d.name}"
    return f"/sys/devices/platform/ACPI0017:00/root0/decoder0.{d.region}/region{d.region}/dax_region{d.region}/{d.name}"


def _up(path: str) -> str:
    """The ``../`` prefix that leads from directory ``path`` back to ``/sys``."""
    return "../" * (len(path.strip("/").split("/")) - 1)


def lay_out(k: SimKernel, d: DaxDef) -> None:
    """Create the device in devdax mode, bound to device_dax."""
    t = k.tree
    base = device_dir(d)
    t.dir(base)
    t.file(f"{base}/align", d.align, RW)
    t.file(f"{base}/dev", f"252:{d.region}", RO)
    t.file(f"{base}/memmap_on_memory", 0, RW)
    t.file(f"{base}/modalias", "dax:t0*", RO)
    t.file(f"{base}/numa_node", d.numa_node, RO)
    t.file(f"{base}/resource", hex(d.start), RO)
    t.file(f"{base}/size", d.size, RW)
    t.file(f"{base}/target_node", d.target_node, RO)
    t.file(f"{base}/uevent", f"MAJOR=252\nMINOR={d.region}\nDEVNAME={d.name}\nDEVTYPE=dax", RW)
    t.file(f"{base}/mapping0/start", hex(d.start), RO)
    t.file(f"{base}/mapping0/end", hex(d.start + d.size - 1), RO)
    t.file(f"{base}/mapping0/page_offset", "0x0", RO)
    region = base.rsplit("/", 1)[0]
    region_attrs = f"{region}/dax_region" if d.kind == "pmem" else region
    t.file(f"{region_attrs}/id", d.region, RO)
    t.file(f"{region_attrs}/size", d.size, RO)
    t.file(f"{region_attrs}/align", d.align, RO)
    t.file(f"{region_attrs}/available_size", 0, RO)
    up = _up(base)
    t.link(f"{base}/subsystem", f"{up}bus/dax")
    t.link(f"{BUS}/devices/{d.name}", f"../../..{device_dir(d)[4:]}")
    for drv in ("device_dax", "kmem"):
        t.dir(f"{BUS}/drivers/{drv}")
    bind(k, d.name, "device_dax")
    state = k.state()
    state.setdefault("dax", {})[d.name] = {"start": d.start, "size": d.size, "node": d.target_node}
    k.save_state(state)


def bind(k: SimKernel, name: str, driver: str) -> None:
    base = "/sys/bus/dax/devices/" + name
    real = os.path.realpath(k.tree.local(base))
    rel = "/" + os.path.relpath(real, k.tree.root)
    k.tree.link(f"{rel}/driver", f"{_up(rel)}bus/dax/drivers/{driver}")
    k.tree.link(f"{BUS}/drivers/{driver}/{name}", f"../../../..{rel}")
    other = "kmem" if driver == "device_dax" else "device_dax"
    stale = k.tree.local(f"{BUS}/drivers/{other}/{name}")
    if stale.is_symlink():
        stale.unlink()


def block_range(k: SimKernel, name: str) -> list[int]:
    """The memory blocks that the device's range covers once hot-added (rounded inwards to blocks)."""
    info = k.state()["dax"][name]
    bs = memory.block_size(k)
    first = -(-info["start"] // bs)
    last = (info["start"] + info["size"]) // bs
    return list(range(first, last))


def to_system_ram(k: SimKernel, name: str, zone: str | None) -> list[int]:
    """Bind to kmem: hot-add the blocks to the target node, online in ``zone`` (None: leave offline)."""
    info = k.state()["dax"][name]
    node = info["node"]
    if not k.tree.exists(f"{memory.NODE}/node{node}"):
        memory.add_node(k, node, [], _distances(k, node))
    ids = block_range(k, name)
    bs = memory.block_size(k)
    memory.add_blocks(k, node, ids[0] * bs, len(ids) * bs, zone)
    bind(k, name, "kmem")
    return ids


def _distances(k: SimKernel, node: int) -> list[int]:
    possible = memory.parse_list(k.tree.read(f"{memory.NODE}/possible"))
    table = k.meta.get("distances", {})
    row = table.get(str(node))
    return row if row else [10 if n == node else 20 for n in range(max(possible) + 1)]
