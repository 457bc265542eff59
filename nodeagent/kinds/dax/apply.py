"""Carrying out one planned DAX change with daxctl, verifying every step from sysfs.

The device is re-read first: if it is gone, or no longer what the plan saw, nothing is done to it. Each step
runs daxctl (progress polled from sysfs while it runs), then re-reads the device; daxctl's closing summary is
never taken as proof. When offlining fails part-way (a block holding unmovable pages answers EBUSY), the
blocks that did go offline are onlined again in their old zone, so the device is left as it was; when
onlining fails part-way, what is online stays online (it is usable memory) and the result says how much.
After a daxctl failure, later DAX changes of the same run are skipped.
"""

from __future__ import annotations

import time

from ...facts.dax import DaxDevice, block_state, read_device
from ...facts.numa import read_block_size
from ...host import Host
from ...plan import Change
from ...state import OwnedDevice, Ownership
from ...util.errors import ChangeSkipped, CommandError, HostError, MissingError, NotRecorded
from ...util.quantities import format_size
from ...util.timestamps import rfc3339
from ..base import ApplyContext
from . import daxctl as _daxctl
from . import state_label

FAILED = "dax_failed"


def apply_change(host: Host, change: Change, actx: ApplyContext) -> str:
    if actx.scratch.get(FAILED):
        raise ChangeSkipped(f"not attempted: {actx.scratch[FAILED]}")
    return Applier(host, change, actx).run()


class Applier:
    def __init__(self, host: Host, change: Change, actx: ApplyContext) -> None:
        self.host, self.change, self.actx = host, change, actx
        self.name = change.target
        self.zone: str | None = change.detail("zone")
        self.done: list[str] = []  # what was carried out, for the report
        self.notes: list[str] = []
        self.made: DaxDevice | None = None  # the device create-device made (a split)

    # -- reading ------------------------------------------------------------------------------------------
    def block_size(self) -> int:
        return read_block_size(self.host) or 0

    def device(self) -> DaxDevice:
        dev = read_device(self.host, self.name, self.block_size())
        if dev is None:
            raise MissingError(f"{self.name} no longer exists: it disappeared after the plan was made (hot-"
                               "unplugged, or its region was torn down)" + self._so_far(),
                               path=f"/sys/bus/dax/devices/{self.name}", hint="run `nodeagent plan` again")
        return dev

    def _so_far(self) -> str:
        return "; done before that: " + "; ".join(self.done) if self.done else "; nothing was done to it"

    # -- the change -----------------------------------------------------------------------------------------
    def run(self) -> str:
        start = time.monotonic()
        dev = self.device()
        c = self.change
        seen = (dev.mode, dev.blocks_online, dev.zones)
        planned = (c.detail("from_mode"), c.detail("from_online"), c.detail("from_zones"))
        if seen != planned:
            raise HostError(f"{self.name} changed after the plan was made: planned from {c.before_label}, now "
                            f"{state_label(dev)} (another agent is acting on it); nothing was done to it",
                            path=c.path, hint="run `nodeagent plan` again")
        _daxctl.resolve(self.host)
        self.own(dev, building=True)  # nodeagent's before daxctl's first write: a stop half-way is on record
        for step in c.detail("steps", ()):
            getattr(self, "step_" + step.replace("-", "_"))()
        dev = self.device()
        self.verify(dev)
        took = f" in {time.monotonic() - start:.1f}s"
        where = f" on node {dev.target_node}" if dev.target_node is not None else ""
        text = (f"{self.name}: {state_label(dev)}{where}, {format_size(dev.size)}{took}" if dev.mode == "system-ram"
                else f"{self.name}: {dev.mode}{took}")
        text += ("; " + "; ".join(self.notes)) if self.notes else ""
        try:
            self.own(dev)
        except HostError as exc:  # the device is as planned; its record says "building", which the next run ends
            raise NotRecorded(text, exc) from None
        return text

    def verify(self, dev: DaxDevice) -> None:
        want_mode = self.change.detail("final_mode") or \
            ("devdax" if "to-devdax" in self.change.detail("steps", ()) else "system-ram")
        ok = dev.mode == want_mode and (want_mode != "system-ram" or (dev.fully_online and dev.zone == self.zone))
        size = self.change.detail("resize_to")
        if ok and size is not None and dev.size != size:
            ok = False
        if ok and self.change.op == "split":
            maru = self.made
            ok = maru is not None and maru.mode == "devdax" and maru.size == self.change.detail("maru_size")
        if not ok:
            self.fail(f"after {'; '.join(self.done) or 'daxctl'}, {self.name} is {state_label(dev)}, not "
                      f"{self.change.after_label}")

    def own(self, dev: DaxDevice, building: bool = False) -> None:
        """Record the device as nodeagent's: as it is now, or (``building``) as it was when nodeagent started
        changing it, and into what."""
        if self.actx.state is None:
            return
        with self.actx.state.edit(Ownership) as owned:
            owned.dax[self.name] = OwnedDevice(dev.mode, dev.zone, self.change.detail("rule"), rfc3339(),
                                               building=self.change.after_label if building else None)

    def fail(self, message: str, hint: str | None = None) -> None:
        """Record that daxctl-driven work failed (later DAX changes are skipped) and raise."""
        self.actx.scratch[FAILED] = f"DAX changes stopped after {self.name} failed"
        raise CommandError(message, path=self.change.path,
                           hint=hint or "nothing else was changed; fix the cause, then apply again")

    # -- steps -------------------------------------------------------------------------------------------------
    def daxctl(self, argv: list[str], what: str, count_online: bool) -> _daxctl.Run:
        dev = self.device()
        bs = self.block_size()
        total = dev.blocks_total

        def count() -> int:
            online = block_state(self.host, dev, bs)[1]
            return online if count_online else total - online

        poll = None
        if self.actx.progress is not None and total:
            poll = _daxctl.Poller(count, total, f"{self.name}: {what}", self.actx.report)
        run = _daxctl.run(self.host, argv, poll)
        if poll is not None:
            poll.finish()
        return run

    def zone_flag(self, zone: str | None) -> list[str]:
        return ["--no-movable"] if zone == "Normal" else []

    def step_to_system_ram(self) -> None:
        policy = (self.host.read_opt("/sys/devices/system/memory/auto_online_blocks") or "").strip()
        if policy.startswith("online"):
            self.fail(f"refusing to run daxctl on {self.name}: auto_online_blocks is {policy!r}, so the kernel "
                      "would online the memory itself, racing daxctl (it aborts with EBUSY)" + self._so_far(),
                      hint="set memory.auto_online_blocks: offline in the profile")
        argv = ["reconfigure-device", "--mode=system-ram", *self.zone_flag(self.zone), self.name]
        run = self.daxctl(argv, f"onlining memory blocks ({self.zone})", True)
        self.after_online(run, "hot-added and onlined")

    def step_online(self) -> None:
        argv = ["online-memory", *self.zone_flag(self.zone), self.name]
        run = self.daxctl(argv, f"onlining memory blocks ({self.zone})", True)
        self.after_online(run, "onlined")

    def after_online(self, run: _daxctl.Run, verb: str) -> None:
        dev = self.device()
        state = state_label(dev)
        if run.stderr.auto_online_abort:
            self.fail(f"{run.describe()}: the kernel's auto-online policy changed under nodeagent; {self.name} is "
                      f"{state}", hint="set memory.auto_online_blocks: offline in the profile, then apply again")
        good = dev.mode == "system-ram" and dev.fully_online and dev.zone == self.zone
        if not run.ok and not (good and run.result is not None and run.result.returncode == 1):
            self.fail(f"{run.describe()}; {self.name} is now {state}"
                      + (f" — the {dev.blocks_online} online blocks stay online; apply again to finish"
                         if dev.blocks_online else ""))
        if not good:
            why = (" daxctl warned of a race: another agent (the kernel's auto-online policy, udev's daxctl rule) "
                   "onlined memory first;" if run.stderr.race else "")
            summary = f" daxctl said {run.stderr.summary!r} (exit {run.result.returncode if run.result else '?'});" \
                if run.stderr.summary else ""
            self.fail(f"{' '.join(run.argv)}:{summary}{why} but {self.name} is {state}, not "
                      f"{self.change.after_label}",
                      hint="find the other agent onlining memory, then apply again (with --allow-disruptive to "
                           "move blocks that landed in the wrong zone)")
        if run.stderr.race:
            self.notes.append("daxctl warned of a race (some blocks were online already), the zone is right")
        if run.stderr.other:
            self.notes.append("daxctl also said: " + " / ".join(run.stderr.other))
        self.done.append(f"{verb} {dev.blocks_total} blocks in {self.zone}")

    def step_offline(self) -> None:
        before = self.device()
        run = self.daxctl(["offline-memory", self.name], "offlining memory blocks", False)
        dev = self.device()
        if dev.blocks_online == 0:
            self.done.append(f"offlined {before.blocks_online} blocks")
            return
        offlined = before.blocks_online - dev.blocks_online
        busy = ", ".join(run.stderr.busy_blocks) or "a block"
        why = f"{busy} refused to go offline (EBUSY: it holds unmovable pages, e.g. kernel or pinned memory)" \
            if run.stderr.busy_blocks else run.describe()
        restored = self.restore(offlined)
        self.fail(f"{self.name}: {why}; daxctl stopped there with {dev.blocks_online} blocks still online; "
                  f"{restored}",
                  hint=f"find what pinned {busy} (e.g. a driver's long-term pinned buffer) or leave {self.name} "
                       "in its zone; the node needs no repair")

    def restore(self, offlined: int) -> str:
        """Online again, in their old zone, the blocks this change offlined; say what the device is now."""
        if offlined <= 0:
            return f"nothing was offlined; {self.name} is as it was"
        zones = self.change.detail("from_zones") or {}
        zone = max(zones, key=zones.get) if zones else self.zone
        run = _daxctl.run(self.host, ["online-memory", *self.zone_flag(zone), self.name])
        dev = self.device()
        if dev.blocks_online == self.change.detail("from_online") and dev.zones == zones:
            return f"the {offlined} blocks it had offlined were onlined again in {zone}: {self.name} is as it was"
        return (f"onlining the {offlined} offlined blocks again failed ({run.describe()}): {self.name} is now "
                f"{state_label(dev)}")

    # -- splitting a dynamic region (see .split) ----------------------------------------------------------------
    def plain(self, argv: list[str], what: str) -> _daxctl.Run:
        """Run daxctl; fail (naming ``what``) unless it exits 0."""
        run = _daxctl.run(self.host, argv)
        if not run.ok:
            self.fail(f"{what}: {run.describe()}" + self._so_far())
        return run

    def step_disable(self) -> None:
        self.plain(["disable-device", self.name], f"disabling {self.name}")
        if self.device().mode != "disabled":
            self.fail(f"daxctl disable-device {self.name} exited 0 but {self.name} is still bound" + self._so_far())
        self.done.append("disabled")

    def step_enable(self) -> None:
        self.plain(["enable-device", self.name], f"enabling {self.name} as devdax")
        self.done.append("enabled as devdax")

    def step_resize(self) -> None:
        size = int(self.change.detail("resize_to"))
        self.plain(["reconfigure-device", "-s", str(size), self.name], f"resizing {self.name}")
        dev = self.device()
        if dev.size != size:
            self.fail(f"{self.name} is {format_size(dev.size)} after resizing it to {format_size(size)}"
                      + self._so_far())
        self.done.append(f"resized to {format_size(size)}")

    def step_create(self) -> None:
        size, region = int(self.change.detail("maru_size")), self.change.detail("region")
        run = self.plain(["create-device", "-r", str(region), "-s", str(size)],
                         f"making the Maru device in region {region}")
        made = next((d.chardev for d in run.devices if d.chardev), None)
        dev = read_device(self.host, made, self.block_size()) if made else None
        if dev is None or dev.size != size or dev.mode != "devdax":
            self.fail(f"daxctl create-device -r {region} -s {size} exited 0 but made no devdax device of "
                      f"{format_size(size)} ({made or 'none named'})" + self._so_far(),
                      hint=f"look at region {region} (daxctl list -R -D -i), then apply again")
        self.made = dev
        self.notes.append(f"made {made} ({format_size(size)}, devdax) for Maru: /dev/{made}")
        self.done.append(f"made {made}")

    def step_destroy(self) -> None:
        for other in self.change.detail("destroy", ()):
            if read_device(self.host, other, self.block_size()) is None:
                continue
            self.plain(["destroy-device", "--force", other], f"giving back {other}")
            self.done.append(f"destroyed {other}")

    def step_to_devdax(self) -> None:
        run = self.daxctl(["reconfigure-device", "--mode=devdax", self.name], "switching to devdax", False)
        dev = self.device()
        if dev.mode != "devdax":
            self.fail(f"{run.describe()}; {self.name} is {state_label(dev)}")
        self.done.append("switched to devdax")
