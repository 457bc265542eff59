"""Emulated libnvdimm bus behind legacy pmem (``memmap=S!O`` on the command line: ``e820_pmem``), as ndctl 76.1
reads it: ``/sys/class/nd/ndctl0`` (a char device whose ``device`` is ``ndbus0``), ``regionN`` (an IO region,
``nstype`` 4), its ``namespaceN.0`` (``nd_namespace_io``) and the ``nd_dax`` device ``daxN.0`` that claims the
namespace in devdax mode and holds the DAX region and device (:mod:`nodeagent_sim.dax` lays those out).

What the real 6.12 guest shows (``tests/realkernel/captured/ndctl-*``, ``iomem-pmem.txt``): ``ndctl list -RN``
lists region0 (pmem, align 16 MiB) with namespace0.0; after ``ndctl create-namespace -m devdax`` the namespace
is devdax with a ``daxregion`` whose ``dax0.0`` is the device ``daxctl`` lists. The libndctl attributes laid out
are the ones its ``add_bus``/``add_region``/``add_namespace``/``add_dax`` read (a missing one drops the object).
"""

from __future__ import annotations

import uuid as _uuid
from typing import TYPE_CHECKING

from . import devnodes
from .tree import RO, RW, WO

if TYPE_CHECKING:
    from .dax import DaxDef
    from .kernel import SimKernel

BUS_DIR = "/sys/devices/platform/e820_pmem/ndbus0"
#: the nd class's char major (dynamic)
ND_MAJOR = 248
#: ND_DEVICE_NAMESPACE_IO (include/uapi/linux/ndctl.h): an e820 region and its namespace
NSTYPE_IO = 4
DRIVERS = ("nd_bus", "nd_region", "nd_pmem", "dax_pmem", "nd_btt")


def _up(path: str) -> str:
    return "../" * (len(path.strip("/").split("/")) - 1)


def _bind(k: SimKernel, path: str, driver: str) -> None:
    k.tree.link(f"{path}/driver", f"{_up(path)}bus/nd/drivers/{driver}")
    k.tree.link(f"/sys/bus/nd/drivers/{driver}/{path.rsplit('/', 1)[1]}", "../../../.." + path[4:])


def _device(k: SimKernel, path: str, files: dict[str, tuple[str | int, int]]) -> None:
    for name, (value, mode) in files.items():
        k.tree.file(f"{path}/{name}", value, mode)
    k.tree.link(f"{path}/subsystem", f"{_up(path)}bus/nd")
    k.tree.link(f"/sys/bus/nd/devices/{path.rsplit('/', 1)[1]}", "../../.." + path[4:])


def bus(k: SimKernel) -> None:
    """ndbus0 and its control device ndctl0 (once per node)."""
    if k.tree.exists(f"{BUS_DIR}/provider"):
        return
    _device(k, BUS_DIR, {"commands": ("", RO), "provider": ("e820_pmem", RO), "wait_probe": (1, RO),
                         "modalias": ("nd:t0", RO), "uevent": ("", RW)})
    for d in DRIVERS:
        for attr in ("bind", "unbind"):
            k.tree.file(f"/sys/bus/nd/drivers/{d}/{attr}", "", WO)
    _bind(k, BUS_DIR, "nd_bus")
    ctl = f"{BUS_DIR}/ndctl0"
    k.tree.file(f"{ctl}/dev", f"{ND_MAJOR}:0", RO)
    k.tree.file(f"{ctl}/uevent", f"MAJOR={ND_MAJOR}\nMINOR=0\nDEVNAME=ndctl0", RW)
    k.tree.link(f"{ctl}/device", "../../ndbus0")
    k.tree.link(f"{ctl}/subsystem", f"{_up(ctl)}class/nd")
    k.tree.link("/sys/class/nd/ndctl0", "../../devices/platform/e820_pmem/ndbus0/ndctl0")
    devnodes.add(k, ctl, ND_MAJOR, 0, "ndctl0")


def lay_out(k: SimKernel, d: DaxDef) -> None:
    """Region ``d.region`` over the pmem range, its IO namespace, and the nd_dax device that claims it in devdax
    mode (bound to ``dax_pmem``); the DAX region and device inside are :mod:`nodeagent_sim.dax`'s."""
    bus(k)
    r, numa_node = d.region, d.numa_node
    region = f"{BUS_DIR}/region{r}"
    ns = f"{region}/namespace{r}.0"
    nd_dax = f"{region}/{d.name}"
    # the namespace spans the whole memmap= range; the DAX device is what its info block and memmap reserve leave
    # at the end (the capture: memmap=1G!6G, a 1 GiB namespace at 0x180000000, a 1,054,867,456-byte dax0.0 at
    # 0x181200000): the range starts at the 256 MiB boundary below the device
    base = d.start // (256 << 20) * (256 << 20)
    span = -(-(d.start + d.size) // (16 << 20)) * (16 << 20) - base
    _device(k, region, {
        "size": (span, RO), "mappings": (0, RO), "read_only": (0, RW), "modalias": ("nd:t2", RO),
        "numa_node": (numa_node, RO), "target_node": (d.target_node, RO), "align": (16 << 20, RW),
        "nstype": (NSTYPE_IO, RO), "persistence_domain": ("", RO), "resource": (hex(base), RO),
        "available_size": (0, RO), "max_available_extent": (0, RO), "namespace_seed": (f"namespace{r}.1", RO),
        "dax_seed": (f"dax{r}.1", RO), "pfn_seed": (f"pfn{r}.0", RO), "btt_seed": (f"btt{r}.0", RO),
        "devtype": ("nd_pmem", RO), "uevent": ("DEVTYPE=nd_pmem", RW)})
    _bind(k, region, "nd_region")
    _device(k, ns, {
        "nstype": (NSTYPE_IO, RO), "size": (span, RO), "resource": (hex(base), RO), "force_raw": (0, RW),
        "numa_node": (numa_node, RO), "target_node": (d.target_node, RO), "holder": (d.name, RO),
        "holder_class": ("dax", RW), "mode": ("dax", RO), "modalias": ("nd:t4", RO),
        "devtype": ("nd_namespace_io", RO), "uevent": ("DEVTYPE=nd_namespace_io", RW)})
    _device(k, nd_dax, {
        "modalias": ("nd:t7", RO), "uuid": (str(_uuid.uuid5(_uuid.NAMESPACE_OID, f"nodeagent-sim/{d.name}")), RW),
        "mode": ("pmem", RW), "align": (d.align, RW), "resource": (hex(d.start), RO), "size": (d.size, RO),
        "namespace": (f"namespace{r}.0", RW), "supported_alignments": ("4096 2097152 1073741824", RO),
        "numa_node": (numa_node, RO), "devtype": ("nd_dax", RO), "uevent": ("DEVTYPE=nd_dax", RW)})
    _bind(k, nd_dax, "dax_pmem")
