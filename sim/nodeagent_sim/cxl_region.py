"""The CXL region ABI of the emulated bus (:mod:`nodeagent_sim.cxl`): its rules and its errnos.

Layout and behaviour as captured on a real 6.12 guest (QEMU 10, two cxl-type3 memdevs behind one host bridge;
``tests/realkernel/captured/cxl-*``), and ``drivers/cxl/core/{region,hdm,port}.c`` where the captures are silent:

- ``create_ram_region`` reads the next name (ids come from one pool shared with nvdimm regions); writing that name
  creates the region, any other ``regionN`` is EBUSY, anything else EINVAL. Deleting a region gives its id back
  when it is lower than the one handed out next (``cxl_region_release``).
- ``interleave_ways``: 1, 2, 4, 8, 16, 3, 6, 12 and a power-of-two multiple of the root decoder's ways (EINVAL);
  ``interleave_granularity``: a power of two from 256 to 16384 (EINVAL), equal to the root decoder's when that one
  interleaves (EINVAL); both EBUSY once the region has its size. ``targetN`` files exist for N < ways.
- ``size``: ENXIO before ways and granularity, EINVAL unless a multiple of 256 MiB × ways, ENOSPC beyond the
  window, EBUSY to change it or (0) to free it once every target is attached.
- Endpoint decoders: ``mode`` ram|pmem (EINVAL), ENXIO for a partition the device does not have, EBUSY once it has
  DPA; ``dpa_size``: EINVAL before ``mode`` or unless a multiple of 256 MiB, EBUSY out of id order (allocation and
  release are stacks per endpoint) or while the decoder is in a region, ENOSPC beyond the partition.
- ``targetN``: ENODEV for no such device, EINVAL for a mode mismatch, ENXIO before the size is set, without DPA,
  for a host bridge not in the window or at a position the window's host-bridge order does not give it (x2 and
  more windows), EBUSY for a decoder already in a region, a position taken, a host-bridge port whose switch
  decoders all decode other regions, or a memdev already in the region
  through another of its decoders, EINVAL if its DPA × ways is not the region's size. Writing an empty value
  detaches; a committed region is reset (``commit`` reads 0) first.
- ``commit=1``: ENXIO until every position is filled, and ENXIO on a CPU with the hypervisor bit (the kernel
  cannot invalidate caches there: a QEMU guest needs ``-cpu max,hypervisor=off``); programs the host-bridge and
  endpoint decoders. It makes no DAX device: binding the region to ``cxl_region`` (ENXIO before commit) does —
  ``daxN.0`` (N = region id) with ``memmap_on_memory`` 1, which kmem takes at once and hot-adds as
  ``auto_online_blocks`` says. ``commit=0`` releases the region driver (the DAX device goes) and resets the
  decoders.
- ``delete_region`` (ENODEV for a name that is not a region of this window) tears the region down whatever its
  state. kmem lets a device go whose blocks are all offline (they are removed); where the kernel would strand
  online memory (kmem losing a device with online blocks) the simulator refuses with EBUSY, as ``sim.dax`` does.
"""

from __future__ import annotations

import errno
import os
import re

from . import dax as simdax
from . import devnodes
from .cxl import (
    ACTIVE,
    AT,
    BUS,
    COMMIT,
    DEV,
    IDLE,
    INTERLEAVE_ACTIVE,
    NO_ADDR,
    WAYS,
    MiB256,
    _einval_int,
    _err,
    _hex,
    _link_bus,
    _path,
    _read,
    _region_state,
    _root_of,
    _save_region,
    _set,
    _up,
    alloc_id,
    next_names,
)
from .kernel import SimKernel, ebusy, einval, kstrtobool, rule
from .tree import RO, RW, WO

# -- root decoder: create / delete -------------------------------------------------------------------------

@rule(rf"{AT}/decoder0\.\d+/create_(ram|pmem)_region")
def _create_region(k: SimKernel, path: str, value: str) -> None:
    root = path.split("/")[-2]
    mode = "ram" if path.endswith("create_ram_region") else "pmem"
    m = re.fullmatch(r"region(\d+)", value.strip())
    if not m:
        raise einval(f"expected regionN, got {value.strip()!r}")
    state = k.state()
    cx = state["cxl"]
    want = cx["next"][root]
    if int(m.group(1)) != want:
        raise ebusy(f"the next region of {root} is region{want}")
    name = f"region{want}"
    cx["next"][root] = alloc_id(cx)
    cx["regions"][name] = {"state": IDLE, "mode": mode, "id": want, "ways": 0, "targets": {}}
    k.save_state(state)
    base = f"{_path(k, root)}/{name}"
    k.tree.new_dir(base, {"commit": (0, RW), "devtype": ("cxl_region", RO), "interleave_granularity": (0, RW),
                          "interleave_ways": (0, RW), "modalias": ("cxl:t6", RO), "mode": (mode, RO),
                          "resource": (_hex(NO_ADDR), RO), "size": ("0x0", RW),
                          "uevent": ("DEVTYPE=cxl_region\nMODALIAS=cxl:t6", RW),
                          "uuid": ("", RO if mode == "ram" else RW)})
    for a in ("access0", "access1"):
        k.tree.dir(f"{base}/{a}")
    k.tree.link(f"{base}/subsystem", f"{_up(base)}bus/cxl")
    _link_bus(k, name, base)
    next_names(k, root)


@rule(rf"{AT}/decoder0\.\d+/delete_region")
def _delete_region(k: SimKernel, path: str, value: str) -> None:
    root = path.split("/")[-2]
    name = value.strip()
    if name not in k.state()["cxl"]["regions"] or _root_of(k, name) != root:
        raise _err(errno.ENODEV, f"{name!r} is not a region of {root}")
    info = _region_state(k, name)
    if info["state"] == COMMIT:
        _decommit(k, name)
    for pos in sorted(_region_state(k, name)["targets"], key=int):
        _detach(k, name, int(pos))
    base = _path(k, name)
    k.tree.remove_tree(base)
    k.tree.local(f"{DEV}/{name}").unlink()
    state = k.state()
    cx = state["cxl"]
    del cx["regions"][name]
    rid, nxt = info["id"], cx["next"][root]
    if rid < nxt:  # cxl_region_release: reuse the idled id rather than the cached next one
        cx["ids"].remove(nxt)
        cx["next"][root] = rid
    else:
        cx["ids"].remove(rid)
    k.save_state(state)
    next_names(k, root)


# -- region attributes --------------------------------------------------------------------------------------

def _region_of(path: str) -> str:
    return path.split("/")[-2]


def _root_geometry(k: SimKernel, region: str) -> tuple[str, int, int]:
    root = _root_of(k, region)
    return root, int(_read(k, root, "interleave_ways")), int(_read(k, root, "interleave_granularity"))


@rule(rf"{AT}/region\d+/interleave_ways")
def _ways(k: SimKernel, path: str, value: str) -> None:
    region = _region_of(path)
    val = _einval_int(value)
    _, rways, _ = _root_geometry(k, region)
    if val not in WAYS:
        raise einval(f"interleave_ways {val}: one of {', '.join(map(str, WAYS))}")
    q, r = divmod(val, rways)
    if r or q & (q - 1):
        raise einval(f"interleave_ways {val}: not a power-of-two multiple of the window's {rways}")
    info = _region_state(k, region)
    if info["state"] >= INTERLEAVE_ACTIVE:
        raise ebusy("the region's size is set")
    base = _path(k, region)
    for i in range(max(info["ways"], val)):
        target = f"{base}/target{i}"
        if i < val and not k.tree.exists(target):
            k.tree.file(target, "", RW)
        elif i >= val and k.tree.exists(target):
            k.tree.local(target).unlink()
    info["ways"] = val
    _save_region(k, region, info)
    k.tree.set(path, val)


@rule(rf"{AT}/region\d+/interleave_granularity")
def _granularity(k: SimKernel, path: str, value: str) -> None:
    region = _region_of(path)
    val = _einval_int(value)
    if val < 256 or val > 16384 or val & (val - 1):
        raise einval(f"interleave_granularity {val}: a power of two from 256 to 16384")
    _, rways, rgran = _root_geometry(k, region)
    if rways > 1 and val != rgran:
        raise einval(f"interleave_granularity {val}: the window interleaves at {rgran}")
    if _region_state(k, region)["state"] >= INTERLEAVE_ACTIVE:
        raise ebusy("the region's size is set")
    k.tree.set(path, val)


@rule(rf"{AT}/region\d+/size")
def _size(k: SimKernel, path: str, value: str) -> None:
    region = _region_of(path)
    val = _einval_int(value)
    info = _region_state(k, region)
    current = int(_read(k, region, "size"), 0)
    if val == 0:
        if info["state"] >= ACTIVE:
            raise ebusy("every target is attached")
        info["state"] = IDLE
        _save_region(k, region, info)
        _set(k, region, "resource", _hex(NO_ADDR))
        k.tree.set(path, "0x0")
        return
    if current == val:
        return
    if current:
        raise ebusy("free the size first (size=0)")
    ways, gran = info["ways"], int(_read(k, region, "interleave_granularity"))
    if not ways or not gran or (info["mode"] == "pmem" and not _read(k, region, "uuid")):
        raise _err(errno.ENXIO, "interleave_ways and interleave_granularity first")
    if val % (MiB256 * ways):
        raise einval(f"size {val}: a multiple of 256 MiB x {ways}")
    root = _root_of(k, region)
    start = int(_read(k, root, "start"), 0)
    end = start + int(_read(k, root, "size"), 0)
    taken = sorted((int(_read(k, r, "resource"), 0), int(_read(k, r, "size"), 0))
                   for r in k.state()["cxl"]["regions"] if r != region and _root_of(k, r) == root
                   and int(_read(k, r, "size"), 0))
    at = start
    for s, n in taken:
        if at + val <= s:
            break
        at = max(at, s + n)
    if at + val > end:
        raise _err(errno.ENOSPC, f"no {val} bytes free in {root}")
    _set(k, region, "resource", _hex(at))
    k.tree.set(path, _hex(val))
    info["state"] = INTERLEAVE_ACTIVE
    _save_region(k, region, info)


@rule(rf"{AT}/region\d+/target\d+")
def _target(k: SimKernel, path: str, value: str) -> None:
    region = _region_of(path)
    pos = int(path.rsplit("target", 1)[1])
    name = value.strip()
    if not name:
        info = _region_state(k, region)
        if pos >= info["ways"]:
            raise _err(errno.ENXIO, f"position {pos} out of range")
        if str(pos) in info["targets"]:
            if info["state"] == COMMIT:
                _decommit(k, region)
            _detach(k, region, pos)
        return
    _attach(k, region, pos, name)


def _attach(k: SimKernel, region: str, pos: int, name: str) -> None:
    if not k.tree.local(f"{DEV}/{name}").is_symlink():
        raise _err(errno.ENODEV, f"no {name} on the CXL bus")
    if _read(k, name, "devtype") != "cxl_decoder_endpoint":
        raise einval(f"{name} is not an endpoint decoder")
    info = _region_state(k, region)
    if _read(k, name, "mode") != info["mode"]:
        raise einval(f"{name} is in mode {_read(k, name, 'mode')}, the region is {info['mode']}")
    if info["state"] > INTERLEAVE_ACTIVE:
        raise ebusy(f"{region} already has every target")
    if info["state"] < INTERLEAVE_ACTIVE:
        raise _err(errno.ENXIO, f"{region}: set interleave_ways, interleave_granularity and size first")
    if pos >= info["ways"]:
        raise _err(errno.ENXIO, f"position {pos} out of range")
    if info["targets"].get(str(pos)) == name:
        return
    if str(pos) in info["targets"] or _read(k, name, "region"):
        raise ebusy(f"{name} or position {pos} is taken")
    if int(_read(k, name, "dpa_size"), 0) == 0:
        raise _err(errno.ENXIO, f"{name} has no DPA (dpa_size)")
    endpoint = os.path.basename(os.path.dirname(_path(k, name)))
    for other_pos, other in info["targets"].items():  # cxl_region_validate_position: one memdev, one position
        if os.path.basename(os.path.dirname(_path(k, other))) == endpoint:
            raise ebusy(f"{endpoint}'s memdev is already at position {other_pos} via {other}")
    ep = k.state()["cxl"]["endpoints"][endpoint]
    root = _root_of(k, region)
    hbs = k.state()["cxl"]["windows"][root]["hbs"]
    if ep["hb"] not in hbs:
        raise _err(errno.ENXIO, f"{name}: its host bridge {ep['hb']} is not in {root}")
    if hbs[pos % len(hbs)] != ep["hb"]:
        raise _err(errno.ENXIO, f"{name}: position {pos} belongs to host bridge {hbs[pos % len(hbs)]}")
    if int(_read(k, name, "dpa_size"), 0) * info["ways"] != int(_read(k, region, "size"), 0):
        raise einval(f"{name}: dpa_size x {info['ways']} is not the region's size")
    _switch_decoder(k, region, ep["port"])  # cxl_port_attach_region: a decoder of every port on the way, or EBUSY
    info["targets"][str(pos)] = name
    _set(k, name, "region", region)
    _set(k, name, "interleave_ways", info["ways"])
    _set(k, name, "interleave_granularity", _read(k, region, "interleave_granularity"))
    k.tree.set(f"{_path(k, region)}/target{pos}", name)
    if len(info["targets"]) == info["ways"]:
        info["state"] = ACTIVE
        _setup_targets(k, region, info)
    _save_region(k, region, info)


def _switch_decoder(k: SimKernel, region: str, port: str) -> str:
    """The switch decoder of ``port`` that decodes ``region`` (the first free one, in id order); EBUSY when every
    one decodes another region (drivers/cxl/core/region.c cxl_rr_alloc_decoder: "no decoder available")."""
    n = port.removeprefix("port")
    names = sorted((d for d in os.listdir(k.tree.local(_path(k, port))) if d.startswith(f"decoder{n}.")),
                   key=lambda d: int(d.split(".")[1]))
    for d in names:
        if _read(k, d, "region") in ("", region):
            return d
    raise ebusy(f"{port}: no decoder available")


def _setup_targets(k: SimKernel, region: str, info: dict) -> None:
    """Every position filled: the host bridges' decoders get the region's dports in position order."""
    eps = k.state()["cxl"]["endpoints"]
    by_port: dict[str, list[int]] = {}
    _, rways, _ = _root_geometry(k, region)
    gran = int(_read(k, region, "interleave_granularity"))
    start, size = _read(k, region, "resource"), _read(k, region, "size")
    for pos in range(info["ways"]):
        dec = info["targets"][str(pos)]
        ep = eps[os.path.basename(os.path.dirname(_path(k, dec)))]
        by_port.setdefault(ep["port"], []).append(ep["dport"])
        _set(k, dec, "start", start)
        _set(k, dec, "size", size)
    for port, dports in by_port.items():
        d = _switch_decoder(k, region, port)
        _set(k, d, "region", region)
        _set(k, d, "interleave_ways", len(dports))
        _set(k, d, "interleave_granularity", gran * rways)
        _set(k, d, "target_list", ",".join(map(str, dports)))
    info["switch"] = {p: _switch_decoder(k, region, p) for p in by_port}


def _detach(k: SimKernel, region: str, pos: int) -> None:
    info = _region_state(k, region)
    name = info["targets"].pop(str(pos))
    _set(k, name, "region", "")
    _set(k, name, "start", "0x0")
    _set(k, name, "size", "0x0")
    k.tree.set(f"{_path(k, region)}/target{pos}", "")
    if not info["targets"]:
        for d in info.pop("switch", {}).values():
            _set(k, d, "region", "")
    info["state"] = INTERLEAVE_ACTIVE
    _save_region(k, region, info)


def _ports_of(k: SimKernel, info: dict) -> list[str]:
    """The ports whose decoders a commit of the region programs: its endpoints and the host bridges' ports, but for a
    passthrough decoder's (:func:`nodeagent_sim.cxl.passthrough`)."""
    cx = k.state()["cxl"]
    eps, through = cx["endpoints"], set(cx.get("passthrough", ()))
    names = [os.path.basename(os.path.dirname(_path(k, d))) for d in info["targets"].values()]
    return sorted({eps[e]["port"] for e in names} - through) + names


@rule(rf"{AT}/region\d+/commit")
def _commit(k: SimKernel, path: str, value: str) -> None:
    region = _region_of(path)
    on = kstrtobool(value)
    info = _region_state(k, region)
    if on and info["state"] >= COMMIT or not on and info["state"] < COMMIT:
        return
    if on and info["state"] < ACTIVE:
        raise _err(errno.ENXIO, f"{region}: not every target is attached")
    if on and _hypervisor(k):
        # cxl_region_invalidate_memregion(): no cache invalidation under a hypervisor (without
        # CONFIG_CXL_REGION_INVALIDATION_TEST, as Debian builds it) — "Failed to synchronize CPU cache state"
        raise _err(errno.ENXIO, "Failed to synchronize CPU cache state (the CPU has the hypervisor bit)")
    if not on:
        _decommit(k, region)
        return
    for d in info.get("switch", {}).values():
        _set(k, d, "start", _read(k, region, "resource"))
        _set(k, d, "size", _read(k, region, "size"))
    for port in _ports_of(k, info):
        _set(k, port, "decoders_committed", int(_read(k, port, "decoders_committed")) + 1)
    info["state"] = COMMIT
    _save_region(k, region, info)
    k.tree.set(path, 1)


def _hypervisor(k: SimKernel) -> bool:
    cpuinfo = k.tree.local("/proc/cpuinfo")
    return cpuinfo.exists() and any(line.startswith("flags") and " hypervisor" in line
                                    for line in cpuinfo.read_text().splitlines())


def _decommit(k: SimKernel, region: str) -> None:
    """commit=0: release the region driver (its DAX device goes), then reset the decoders."""
    if k.tree.local(f"{_path(k, region)}/driver").is_symlink():
        _unbind_region(k, region)
    info = _region_state(k, region)
    # a passthrough decoder has nothing to reset: it keeps the range the region gave it, after the teardown too
    # (6.12 guest, layout cxl-1md: decoder1.0 read start 0x1d0000000, size 256 MiB with region1 gone)
    through = set(k.state()["cxl"].get("passthrough", ()))
    for port, d in info.get("switch", {}).items():
        if port in through:
            continue
        _set(k, d, "start", "0x0")
        _set(k, d, "size", "0x0")
    for port in _ports_of(k, info):
        _set(k, port, "decoders_committed", max(0, int(_read(k, port, "decoders_committed")) - 1))
    info["state"] = ACTIVE
    _save_region(k, region, info)
    _set(k, region, "commit", 0)


# -- the cxl_region driver: the DAX device ------------------------------------------------------------------

@rule(rf"{BUS}/drivers/cxl_region/bind")
def _bind_region(k: SimKernel, path: str, value: str) -> None:
    region = value.strip()
    if region not in k.state()["cxl"]["regions"]:
        raise _err(errno.ENODEV, f"no region {region!r}")
    base = _path(k, region)
    if k.tree.local(f"{base}/driver").is_symlink():
        raise ebusy(f"{region} is bound")
    info = _region_state(k, region)
    if info["state"] != COMMIT:
        raise _err(errno.ENXIO, f"{region} is not committed")
    k.tree.link(f"{base}/driver", f"{_up(base)}bus/cxl/drivers/cxl_region")
    if info["mode"] == "ram":
        add_dax(k, region)


def add_dax(k: SimKernel, region: str) -> str:
    """What cxl_region + dax_cxl do for a RAM region: ``dax_regionN`` and ``daxN.0`` (memmap_on_memory 1),
    taken by kmem at once and hot-added as the kernel's auto-online policy says."""
    info = _region_state(k, region)
    rid = info["id"]
    base = _path(k, region)
    dreg = f"{base}/dax_region{rid}"
    k.tree.new_dir(dreg, {"devtype": ("cxl_dax_region", RO), "modalias": ("cxl:t8", RO), "uevent": ("", RW)})
    k.tree.link(f"{dreg}/driver", f"{_up(dreg)}bus/cxl/drivers/cxl_dax_region")
    _link_bus(k, f"dax_region{rid}", dreg)
    start, size = int(_read(k, region, "resource"), 0), int(_read(k, region, "size"), 0)
    simdax.region_files(k, dreg, rid, start, size, 2 * 1024**2, dynamic=True)  # dax_cxl: IORESOURCE_DAX_KMEM
    name = f"dax{rid}.0"
    dev = f"{dreg}/{name}"
    node = k.state()["cxl"]["windows"][_root_of(k, region)]["node"]
    k.tree.new_dir(dev, {"align": (2 * 1024**2, RW), "dev": (f"{simdax.DAX_MAJOR}:{rid}", RO),
                         "memmap_on_memory": (1, RW),
                         "modalias": ("dax:t0*", RO), "numa_node": (-1, RO), "resource": (_hex(start), RO),
                         "size": (size, RW), "target_node": (node, RO),
                         "uevent": (f"MAJOR={simdax.DAX_MAJOR}\nMINOR={rid}\nDEVNAME={name}\nDEVTYPE=dax", RW)})
    for attr, value in (("start", _hex(start)), ("end", _hex(start + size - 1)), ("page_offset", "0x0")):
        k.tree.file(f"{dev}/mapping0/{attr}", value, RO)
    k.tree.link(f"{dev}/subsystem", f"{_up(dev)}bus/dax")
    k.tree.link(f"{simdax.BUS}/devices/{name}", "../../.." + dev[4:])
    devnodes.add(k, dev, simdax.DAX_MAJOR, rid, name)
    for drv in simdax.DRIVERS:
        for attr in ("bind", "unbind", "new_id", "remove_id"):
            if not k.tree.exists(f"{simdax.BUS}/drivers/{drv}/{attr}"):
                k.tree.file(f"{simdax.BUS}/drivers/{drv}/{attr}", "", WO)
    state = k.state()
    state.setdefault("dax", {})[name] = {"start": start, "size": size, "node": node}
    k.save_state(state)
    # dax_cxl marks the range kmem's and it binds at once — unless device_dax's id table names the device
    # (dax_bus_match tries the id tables before the type, device_dax first): daxctl's devdax reconfigure left it
    # there, and on the 6.12 guest region1's dax1.0 came back devdax after a teardown that had made it devdax
    ids = state.get("dax_ids", {})
    simdax.attach(k, name, "device_dax" if name in ids.get("device_dax", ()) else "kmem")
    return name


def _unbind_region(k: SimKernel, region: str) -> None:
    info = _region_state(k, region)
    base = _path(k, region)
    names = sorted(n for n in k.state().get("dax", {}) if n.startswith(f"dax{info['id']}."))
    for name in names or [f"dax{info['id']}.0"]:  # the seed and every device made in the region since
        if k.tree.local(f"{simdax.BUS}/devices/{name}").is_symlink():
            if simdax.driver_of(k, name) == "kmem":  # kmem lets the range go when its blocks are offline
                simdax.hot_remove(k, name)  # (removed); EBUSY while one is online (the kernel would strand it)
            simdax.unplug(k, name)
    state = k.state()
    state.get("dax_regions", {}).pop(str(info["id"]), None)
    k.save_state(state)
    dreg = f"{base}/dax_region{info['id']}"
    if k.tree.exists(dreg):
        k.tree.remove_tree(dreg)
        k.tree.local(f"{DEV}/dax_region{info['id']}").unlink(missing_ok=True)
    k.tree.local(f"{base}/driver").unlink()


@rule(rf"{BUS}/drivers/cxl_region/unbind")
def _unbind(k: SimKernel, path: str, value: str) -> None:
    region = value.strip()
    if region not in k.state()["cxl"]["regions"] or not k.tree.local(f"{_path(k, region)}/driver").is_symlink():
        raise _err(errno.ENODEV, f"{region!r} is not bound")
    _unbind_region(k, region)


# -- endpoint decoders: mode and DPA -------------------------------------------------------------------------

def _endpoint(k: SimKernel, decoder: str) -> tuple[str, dict]:
    endpoint = os.path.basename(os.path.dirname(_path(k, decoder)))
    return endpoint, k.state()["cxl"]["endpoints"][endpoint]


@rule(rf"{AT}/decoder\d+\.\d+/mode")
def _mode(k: SimKernel, path: str, value: str) -> None:
    dec = path.split("/")[-2]
    word = value.strip()
    if word not in ("ram", "pmem"):
        raise einval(f"mode {word!r}: ram or pmem")
    if int(_read(k, dec, "size"), 0) and _read(k, dec, "region"):
        raise ebusy(f"{dec} decodes")
    _, ep = _endpoint(k, dec)
    if not ep[word]:
        raise _err(errno.ENXIO, f"the device has no {word} partition")
    if int(_read(k, dec, "dpa_size"), 0):
        raise ebusy(f"{dec} has DPA: free it first (dpa_size=0)")
    k.tree.set(path, word)


@rule(rf"{AT}/decoder\d+\.\d+/dpa_size")
def _dpa_size(k: SimKernel, path: str, value: str) -> None:
    dec = path.split("/")[-2]
    size = _einval_int(value)
    if size % MiB256:
        raise einval(f"dpa_size {size}: a multiple of 256 MiB")
    endpoint, ep = _endpoint(k, dec)
    did = int(dec.split(".")[1])
    state = k.state()
    end = state["cxl"]["hdm_end"][endpoint]
    if int(_read(k, dec, "dpa_size"), 0):  # free first (cxl_dpa_free)
        if _read(k, dec, "region"):
            raise ebusy(f"{dec} is in {_read(k, dec, 'region')}")
        if did != end:
            raise ebusy(f"free decoder{endpoint[8:]}.{end} first")
        k.tree.set(path, _hex(0, 16))
        _set(k, dec, "dpa_resource", _hex(NO_ADDR))
        state["cxl"]["hdm_end"][endpoint] = end = did - 1
        k.save_state(state)
    if size == 0:
        return
    mode = _read(k, dec, "mode")
    if mode not in ("ram", "pmem"):
        raise einval(f"{dec}: set mode first")
    if did != end + 1:
        raise ebusy(f"{dec}: decoder{endpoint[8:]}.{end + 1} is next")
    used = 0
    for d in range(did):
        other = f"decoder{endpoint[8:]}.{d}"
        if _read(k, other, "mode") == mode:
            used += int(_read(k, other, "dpa_size"), 0)
    base = 0 if mode == "ram" else ep["ram"]
    if used + size > ep[mode]:
        raise _err(errno.ENOSPC, f"{ep[mode] - used} bytes of {mode} left")
    k.tree.set(path, _hex(size, 16))
    _set(k, dec, "dpa_resource", _hex(base + used))
    state["cxl"]["hdm_end"][endpoint] = did
    k.save_state(state)


