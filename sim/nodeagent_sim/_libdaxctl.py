"""The emulation behind the fake daxctl: ndctl v76's ``daxctl/device.c`` and ``libdaxctl.c`` step by step,
acting on a simulated node through :class:`~nodeagent_sim.kernel.SimKernel` (see :mod:`.fake_daxctl`)."""

from __future__ import annotations

import errno
import json
import os
import signal
from pathlib import Path

from .kernel import SimKernel

BUS = "/sys/bus/dax"
MEM = "/sys/devices/system/memory"
NODE = "/sys/devices/system/node"
#: command → (word in "specify a device to ...", closing summary, what failed).
WORDS = {
    "reconfigure-device": ("reconfigure", "reconfigured {n} {noun}", "reconfiguring devices"),
    "online-memory": ("online memory for", "onlined memory for {n} {noun}", "onlining memory"),
    "offline-memory": ("offline memory for", "offlined memory for {n} {noun}", "offlining memory"),
    "destroy-device": ("destroy", "destroyed {n} {noun}", "destroying devices"),
    "disable-device": ("disable", "disabled {n} {noun}", "disabling device"),
    "enable-device": ("enable", "enabled {n} {noun}", "enabling device"),
}


class Daxctl:
    def __init__(self, root: Path) -> None:
        self.k = SimKernel(root)
        self.t = self.k.tree
        self.err: list[str] = []
        self.out: list[str] = []
        self.opts: dict[str, str | bool] = {}
        self._in_dev: dict[tuple[str, str], bool] = {}
        self.size_arg: int | None = None  # --size, parsed

    # -- reading the tree -----------------------------------------------------------------------------
    def read(self, path: str) -> str:
        return self.t.read(path).strip()

    def devices(self) -> list[str]:
        """Devices in region, then device, order (what daxctl_region_foreach/daxctl_dev_foreach give)."""
        names = [n for n in os.listdir(self.t.local(f"{BUS}/devices")) if n.startswith("dax")]
        return sorted(names, key=lambda n: tuple(int(x) for x in n[3:].split(".")))

    def driver(self, dev: str) -> str | None:
        link = self.t.local(f"{BUS}/devices/{dev}/driver")
        return os.path.basename(os.readlink(link)) if link.is_symlink() else None

    def attr(self, dev: str, name: str) -> str:
        return self.read(f"{BUS}/devices/{dev}/{name}")

    def node_path(self, dev: str) -> str:
        return f"{NODE}/node{self.attr(dev, 'target_node')}"

    def memblocks(self, dev: str) -> list[str]:
        """The node's memoryN entries whose phys_index falls in the device's range (``memblock_in_dev``)."""
        node_dir = self.t.local(self.node_path(dev))
        if not node_dir.is_dir():
            return []
        start = int(self.attr(dev, "resource"), 16)
        end = start + int(self.attr(dev, "size")) - 1
        bs = int(self.read(f"{MEM}/block_size_bytes"), 16)
        out = []
        for name in os.listdir(node_dir):  # readdir order, as daxctl sees it
            if not name.startswith("memory") or name.startswith("memory_"):
                continue
            key = (dev, name)
            if key not in self._in_dev:
                res = int(self.read(f"{MEM}/{name}/phys_index"), 16) * bs
                self._in_dev[key] = start <= res <= end
            if self._in_dev[key]:
                out.append(name)
        return out

    def is_online(self, block: str) -> bool:
        return self.read(f"{MEM}/{block}/state").startswith("online")

    def count_online(self, dev: str) -> int:
        return sum(self.is_online(b) for b in self.memblocks(dev))

    def zone(self, dev: str) -> str | None:
        """``daxctl_memory_is_movable``'s scan: Movable, Normal, "unknown" (mixed), or None (a block offline)."""
        found: str | None = None
        for b in self.memblocks(dev):
            if not self.is_online(b):
                return None
            z = self.read(f"{MEM}/{b}/valid_zones")
            z = z if z in ("Movable", "Normal") else "unknown"
            if found is None:
                found = z
            elif found != z:
                found = "unknown"
        return found

    # -- writing through the emulated kernel ------------------------------------------------------------
    def write(self, path: str, value: str) -> int:
        """0, or the negative errno of the write (as ``sysfs_write_attr`` returns). SIGTERM waits until the
        write is over: a kernel's attribute write is whole whenever daxctl dies (see :func:`.fake_daxctl.main`)."""
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            self.k.write(path, value)
            return 0
        except OSError as exc:
            return -(exc.errno or errno.EIO)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def lib_err(self, fn: str, text: str) -> None:
        self.err.append(f"libdaxctl: {fn}: {text}")

    # -- libdaxctl ----------------------------------------------------------------------------------------
    def unbind(self, dev: str) -> None:
        drv = self.driver(dev)
        if drv is None:
            return
        if self.write(f"{BUS}/drivers/{drv}/remove_id", dev) == 0:
            self.write(f"{BUS}/drivers/{drv}/unbind", dev)

    def disable(self, dev: str) -> int:
        if self.driver(dev) is None:
            return 0
        self.unbind(dev)
        if self.driver(dev) is not None:
            self.lib_err("daxctl_dev_disable", f"{dev}: failed to disable")
            return -errno.EBUSY
        return 0

    def enable(self, dev: str, driver: str) -> int:
        if self.driver(dev) is not None:
            return 0
        rc = self.write(f"{BUS}/drivers/{driver}/new_id", dev)
        rc = self.write(f"{BUS}/drivers/{driver}/bind", dev)  # quiet: EBUSY once new_id attached it
        if self.driver(dev) is None:
            self.lib_err("daxctl_dev_enable", f"{dev}: failed to enable")
            return rc or -errno.ENXIO
        return 0

    def memory_op_online(self, dev: str, zone: str) -> int:
        """``daxctl_memory_online_with_zone``: online each offline block; returns how many it onlined.

        As in v76, the zone check after onlining only runs when no block was onlined (the function returns the
        positive count first), and then ``MEM_GET_ZONE``'s own count returns before the comparison too: a block
        that lands in the wrong zone is never reported here. Only the JSON's ``movable`` shows it.
        """
        word = "online_movable" if zone == "Movable" else "online_kernel"
        count = 0
        blocks = self.memblocks(dev)
        for b in blocks:
            if self.is_online(b):
                continue
            rc = self.write(f"{MEM}/{b}/state", word)
            if rc and self.is_online(b):
                rc = 0  # onlined by another agent meanwhile
            if rc < 0:
                return rc
            count += 1
        if count:
            return count
        if any(not self.is_online(b) for b in blocks):
            return -errno.ENXIO
        if blocks:
            return len(blocks)
        self.lib_err("daxctl_memory_online_with_zone", f"{dev}:\n  WARNING: detected a race while onlining "
                     "memory\n  See 'man daxctl-reconfigure-device' for more details")
        return -errno.EBUSY

    def memory_op_offline(self, dev: str) -> int:
        count = 0
        node_path = self.node_path(dev)
        for b in self.memblocks(dev):
            if not self.is_online(b):
                continue
            rc = self.write(f"{MEM}/{b}/state", "offline")
            if rc:
                if not self.is_online(b):
                    continue
                self.lib_err("offline_one_memblock",
                             f"{dev}: Failed to offline {node_path}/{b}/state: {os.strerror(-rc)}")
                return rc
            count += 1
        return count

    # -- daxctl/device.c -------------------------------------------------------------------------------
    def dev_online_memory(self, dev: str) -> int:
        total = len(self.memblocks(dev))
        num_on = self.count_online(dev)
        if num_on:
            self.err.append(f"{dev}:\n  WARNING: detected a race while onlining memory\n"
                            "  Some memory may not be in the expected zone. It is\n"
                            "  recommended to disable any other onlining mechanisms,\n"
                            "  and retry. If onlining is to be left to other agents,\n"
                            "  use the --no-online option to suppress this warning")
        if num_on == total:
            self.err.append(f"{dev}: all memory sections ({num_on}) already online")
            return 1
        if num_on > 0:
            self.err.append(f"{dev}: {num_on} memory section{'' if num_on == 1 else 's'} already online")
        rc = self.memory_op_online(dev, "Normal" if self.opts.get("no-movable") else "Movable")
        if rc < 0:
            self.err.append(f"{dev}: failed to online memory: {os.strerror(-rc)}")
            return rc
        if self.opts.get("verbose"):
            self.err.append(f"{dev}: {rc} memory section{'' if rc == 1 else 's'} onlined")
        num_on = self.count_online(dev)
        if num_on < total:
            self.err.append(f"{dev}: failed to online {total - num_on} memory sections")
            return -errno.ENXIO
        return 0

    def dev_offline_memory(self, dev: str) -> int:
        total = len(self.memblocks(dev))
        num_off = total - self.count_online(dev)
        if num_off == total:
            self.err.append(f"{dev}: all memory sections ({num_off}) already offline")
            return 1
        if num_off:
            self.err.append(f"{dev}: {num_off} memory section{'' if num_off == 1 else 's'} already offline")
        rc = self.memory_op_offline(dev)
        if rc < 0:
            self.err.append(f"{dev}: failed to offline memory: {os.strerror(-rc)}")
            return rc
        if self.opts.get("verbose"):
            self.err.append(f"{dev}: {rc} memory section{'' if rc == 1 else 's'} offlined")
        num_on = self.count_online(dev)
        if num_on:
            self.err.append(f"{dev}: failed to offline {num_on} memory sections")
            return -errno.ENXIO
        return 0

    def reconfig_system_ram(self, dev: str) -> int:
        if self.opts.get("no-online") or not self.opts.get("no-movable"):
            policy = self.t.read(f"{MEM}/auto_online_blocks") if self.t.exists(f"{MEM}/auto_online_blocks") else ""
            if not self.opts.get("force") and policy.startswith("online"):
                self.err.append(f"{dev}: error: kernel policy will auto-online memory, aborting")
                return -errno.EBUSY
        skip_enable = False
        if self.driver(dev) is not None:
            if self.driver(dev) == "kmem":
                self.err.append(f"{dev} was already in system-ram mode")
                skip_enable = True
            else:
                rc = self.disable(dev)
                if rc < 0:
                    return rc
        if not skip_enable:
            rc = self.enable(dev, "kmem")
            if rc:
                return rc
        if self.opts.get("no-online"):
            return 0
        return self.dev_online_memory(dev)

    def reconfig_devdax(self, dev: str) -> int:
        if self.driver(dev) is not None:
            if self.driver(dev) != "kmem":
                self.err.append(f"{dev} was already in devdax mode")
                return 1
            if self.opts.get("force"):
                rc = self.dev_offline_memory(dev)
                if rc < 0:
                    return rc
            online = self.count_online(dev)
            if online:
                if self.opts.get("verbose"):
                    self.err.append(f"{dev}: found {online} memory sections online")
                    self.err.append(f"{dev}: refusing to change modes")
                return -errno.EBUSY
            rc = self.disable(dev)
            if rc:
                self.err.append(f"{dev}: disable failed: {os.strerror(-rc)}")
                return rc
        return self.enable(dev, "device_dax")

    # -- dynamic regions: daxctl_dev_set_size, daxctl_region_create_dev/destroy_dev -------------------------
    def region_attrs(self, dev_or_rid: str | int) -> str:
        """``<region>/dax_region`` of a device's region (the device's parent directory)."""
        if isinstance(dev_or_rid, int):
            dev = next(d for d in self.devices() if int(d[3:].split(".")[0]) == dev_or_rid)
        else:
            dev = dev_or_rid
        real = os.path.realpath(self.t.local(f"{BUS}/devices/{dev}"))
        return "/" + os.path.relpath(os.path.dirname(real), self.t.root) + "/dax_region"

    def set_size(self, dev: str, size: int) -> int:
        rc = self.write(f"{BUS}/devices/{dev}/size", str(size))
        if rc < 0:
            self.lib_err("daxctl_dev_set_size", f"{dev}: failed to set size {size}: {os.strerror(-rc)}")
        return rc

    def dev_destroy(self, dev: str) -> int:
        if self.driver(dev) is not None and not self.opts.get("force"):
            self.err.append(f"{dev} is active, specify --force for deletion")
            return -errno.ENXIO
        rc = self.disable(dev)
        if rc:
            self.err.append(f"{dev}: disable failed: {os.strerror(-rc)}")
            return rc
        rc = self.set_size(dev, 0)
        if rc < 0:
            return rc
        return self.write(f"{self.region_attrs(dev)}/delete", dev)

    def do_xble(self, dev: str, enable: bool) -> int:
        if self.driver(dev) == "kmem":
            self.err.append(f"{dev}: status operations are only applicable in devdax mode")
            return -errno.ENXIO
        rc = self.enable(dev, "device_dax") if enable else self.disable(dev)
        if rc:
            self.err.append(f"{dev}: {'enable' if enable else 'disable'} failed: {os.strerror(-rc)}")
        return rc

    def do_create(self, rid: int, jdevs: list[dict]) -> int:
        attrs = self.region_attrs(rid)
        if self.write(f"{attrs}/create", "1") < 0:
            return -errno.ENOSPC
        seed = self.read(f"{attrs}/seed") if self.t.exists(f"{attrs}/seed") else ""
        if not seed:
            return -errno.ENOSPC
        size = self.size_arg if self.size_arg is not None else int(self.read(f"{attrs}/available_size"))
        if size <= 0:
            return -errno.ENOSPC
        rc = self.set_size(seed, size)
        if rc < 0:
            return rc
        rc = self.enable(seed, "device_dax")
        if rc:
            self.err.append(f"{seed}: enable failed: {os.strerror(-rc)}")
            return rc
        jdevs.append(self.dev_json(seed))
        return 0

    def create_command(self) -> int:
        region = self.opts.get("region")
        rids = sorted({int(d[3:].split(".")[0]) for d in self.devices()})
        jdevs: list[dict] = []
        rc, processed = -errno.ENXIO, 0
        for rid in rids:
            if isinstance(region, str) and region != "all" and region.removeprefix("region") != str(rid):
                continue
            rc = self.do_create(rid, jdevs)
            if rc == 0:
                processed += 1
        self.emit(jdevs)
        if rc < 0:
            self.err.append(f"error creating devices: {os.strerror(-rc)}")
        self.err.append(f"created {processed} device{'' if processed == 1 else 's'}")
        return rc

    def do_reconfig(self, dev: str, jdevs: list[dict]) -> int:
        if self.size_arg is not None:  # do_reconfig: a resize and nothing else (no JSON)
            rc = self.set_size(dev, self.size_arg)
            return rc if rc < 0 else 0
        mode = self.opts.get("mode")
        if mode == "system-ram":
            rc = self.reconfig_system_ram(dev)
        elif mode == "devdax":
            rc = self.reconfig_devdax(dev)
        else:
            self.err.append(f"{dev}: unknown mode requested: 0")
            rc = -errno.EINVAL
        if rc < 0:
            return rc
        jdevs.append(self.dev_json(dev))
        return 0

    def do_xline(self, dev: str, online: bool) -> int:
        if self.driver(dev) != "kmem":
            self.err.append(f"{dev}: memory operations are not applicable in devdax mode")
            return -errno.ENXIO
        return self.dev_online_memory(dev) if online else self.dev_offline_memory(dev)

    # -- JSON as json-c prints it ----------------------------------------------------------------------
    def size(self, n: int) -> int | str:
        if not self.opts.get("human"):
            return n
        for unit, mult, dunit, dmult in (("TiB", 1 << 40, "TB", 10**12), ("GiB", 1 << 30, "GB", 10**9),
                                         ("MiB", 1 << 20, "MB", 10**6), ("KiB", 1 << 10, "KB", 10**3)):
            if n >= mult:
                return f"{n / mult:.2f} {unit} ({n / dmult:.2f} {dunit})"
        return f"{n}"

    def dev_json(self, dev: str, mappings: bool = False) -> dict:
        j: dict = {"chardev": dev, "size": self.size(int(self.attr(dev, "size")))}
        node = int(self.attr(dev, "target_node"))
        if node >= 0:
            j["target_node"] = node
        align = int(self.attr(dev, "align"))
        if align > 0:
            j["align"] = self.size(align)
        kmem = self.driver(dev) == "kmem"
        j["mode"] = "system-ram" if kmem else "devdax"
        if kmem and int(self.attr(dev, "resource"), 16):
            j["online_memblocks"] = self.count_online(dev)
            j["total_memblocks"] = len(self.memblocks(dev))
            zone = self.zone(dev)
            if zone is not None:
                j["movable"] = zone == "Movable"
        if self.driver(dev) is None:
            j["state"] = "disabled"
        if mappings:
            base = f"{BUS}/devices/{dev}"
            maps = []
            for name in sorted(os.listdir(self.t.local(base))):
                if name.startswith("mapping"):
                    start = int(self.read(f"{base}/{name}/start"), 16)
                    end = int(self.read(f"{base}/{name}/end"), 16)
                    maps.append({"page_offset": int(self.read(f"{base}/{name}/page_offset"), 16),
                                 "start": start, "end": end, "size": self.size(end - start + 1)})
            if maps:
                j["mappings"] = maps
        return j

    def emit(self, items: list) -> None:
        if items:
            self.out.append(json.dumps(items, indent=2, separators=(",", ":")))

    # -- commands ------------------------------------------------------------------------------------------
    def selected(self, ident: str) -> list[str]:
        region = self.opts.get("region")
        out = []
        for dev in self.devices():
            rid, did = (int(x) for x in dev[3:].split("."))
            if isinstance(region, str) and region != "all" and region.removeprefix("region") != str(rid):
                continue
            if ident in ("all", dev) or ident == f"{rid}.{did}":
                out.append(dev)
        return out

    def device_command(self, cmd: str, ident: str) -> int:
        jdevs: list[dict] = []
        rc, processed = -errno.ENXIO, 0
        for dev in self.selected(ident):
            if cmd == "reconfigure-device":
                rc = self.do_reconfig(dev, jdevs)
            elif cmd == "destroy-device":
                rc = self.dev_destroy(dev)
            elif cmd in ("disable-device", "enable-device"):
                rc = self.do_xble(dev, cmd == "enable-device")
            else:
                rc = self.do_xline(dev, cmd == "online-memory")
            if rc == 0:
                processed += 1
        self.emit(jdevs)
        _, summary, failed = WORDS[cmd]
        if rc < 0:
            self.err.append(f"error {failed}: {os.strerror(-rc)}")
        self.err.append(summary.format(n=processed, noun="device" if processed == 1 else "devices"))
        return rc

    def list_command(self) -> int:
        o = self.opts
        ident = str(o.get("dev") or "all")
        devs = [d for d in self.selected(ident) if o.get("idle") or int(self.attr(d, "size"))]
        if o.get("regions"):
            regions: dict[int, dict] = {}
            for d in devs:
                rid = int(d[3:].split(".")[0])
                reg = regions.setdefault(rid, {"id": rid, "size": 0, "align": int(self.attr(d, "align"))})
                reg["size"] += int(self.attr(d, "size"))
                if o.get("devices"):
                    reg.setdefault("devices", []).append(self.dev_json(d, bool(o.get("mappings"))))
            for reg in regions.values():
                reg["size"], reg["align"] = self.size(reg["size"]), self.size(reg["align"])
            self.emit(list(regions.values()))
        else:
            self.emit([self.dev_json(d, bool(o.get("mappings"))) for d in devs])
        return 0
