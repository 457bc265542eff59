"""Device events (udev ``add``/``remove``/``online``...) for ``nodeagent watch``: the host's event source.

On the machine's own root the source is a pyudev netlink monitor (events after udev has processed them, as
TuneD listens), filtered in the kernel by subsystem. pyudev cannot be rooted at a fake sysfs, so a simulated
root has its own source built the way pyudev's test suite builds its fake monitor — on real file descriptors
that ``select()`` works on: each listener makes a FIFO in ``<root>/.nodeagent-machine/uevents/`` and the simulator
(:func:`broadcast`, called by the machine plugin's hot-plug) writes one JSON line per event into every FIFO that has
a reader, the way the kernel multicasts a uevent to every netlink listener; a FIFO whose reader is gone is
removed. Any other root has no event source.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import stat
from dataclasses import asdict, dataclass
from itertools import count
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..util import jsonin
from ..util.errors import UsageError

if TYPE_CHECKING:
    from . import Host

#: Where listeners of a simulated root keep their FIFOs (relative to the root).
SIM_EVENTS = ".nodeagent-machine/uevents"
_serial = count()


@dataclass(frozen=True)
class UEvent:
    action: str  # add, remove, online, offline, bind, change...
    subsystem: str  # dax, memory, cxl...
    sysname: str  # dax1.0, memory42, region0
    devpath: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


class EventSource(Protocol):
    def fileno(self) -> int: ...

    def receive(self) -> list[UEvent]:
        """Every event waiting now (never blocks)."""
        ...

    def close(self) -> None: ...


class PyudevSource:
    """The machine's udev events for ``subsystems`` (read-only: a netlink socket, never a write)."""

    def __init__(self, subsystems: tuple[str, ...]) -> None:
        import pyudev

        self.subsystems = subsystems
        self.monitor = pyudev.Monitor.from_netlink(pyudev.Context(), source="udev")
        for s in subsystems:
            self.monitor.filter_by(s)
        self.monitor.start()

    def fileno(self) -> int:
        return self.monitor.fileno()

    def receive(self) -> list[UEvent]:
        out = []
        while True:
            device = self.monitor.poll(timeout=0)
            if device is None:
                return out
            out.append(UEvent(device.action or "", device.subsystem or "", device.sys_name, device.device_path))

    def close(self) -> None:
        # pyudev's Monitor has no close(); dropping the last reference closes the netlink socket.
        self.monitor = None  # type: ignore[assignment]


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _events_dir(root: Path, *, create: bool) -> int | None:
    """A descriptor of ``<root>/.nodeagent-machine/uevents``, walked one component at a time from the root with no
    symlink followed (one would lead the FIFOs out of the root); None when it does not exist and ``create`` is
    false. A component that is a symlink or not a directory is refused (:class:`UsageError`, exit 64)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in SIM_EVENTS.split("/"):
            try:
                nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    return None
                os.mkdir(name, 0o700, dir_fd=fd)
                nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except (NotADirectoryError, OSError) as exc:
                if isinstance(exc, NotADirectoryError) or exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UsageError(f"refusing {Path(root) / SIM_EVENTS}: {name} is a symlink or not a directory",
                                     hint="the simulated node's event directory must be its own; remove the "
                                          "link, or lay the node out again") from None
                raise
            os.close(fd)
            fd = nfd
        return fd
    except BaseException:
        os.close(fd)
        raise


class SimSource:
    """A simulated root's events: a FIFO of JSON lines fed by :func:`broadcast`, made and opened through a
    descriptor of the event directory (never by a path a symlink could redirect)."""

    def __init__(self, root: Path, subsystems: tuple[str, ...]) -> None:
        self.subsystems = subsystems
        self._dfd = _events_dir(Path(root), create=True)
        assert self._dfd is not None
        self.name = f"{os.getpid()}-{next(_serial)}.fifo"
        self.path = Path(root) / SIM_EVENTS / self.name  # for messages
        try:
            os.unlink(self.name, dir_fd=self._dfd)
        except FileNotFoundError:
            pass
        os.mkfifo(self.name, 0o600, dir_fd=self._dfd)
        self._rfd = os.open(self.name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self._dfd)
        # no EOF when a writer goes away
        self._keep = os.open(self.name, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self._dfd)
        self._buf = b""

    def fileno(self) -> int:
        return self._rfd

    def receive(self) -> list[UEvent]:
        while True:
            try:
                chunk = os.read(self._rfd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        out = []
        for line in lines:
            try:
                ev = UEvent(**jsonin.loads(line))
            except (ValueError, TypeError):
                continue
            if ev.subsystem in self.subsystems:
                out.append(ev)
        return out

    def close(self) -> None:
        try:
            os.unlink(self.name, dir_fd=self._dfd)
        except OSError:
            pass
        for fd in (self._rfd, self._keep, self._dfd):
            try:
                os.close(fd)
            except OSError:
                pass


def open_events(host: Host, subsystems: tuple[str, ...]) -> EventSource:
    """The event source of ``host``: pyudev on the machine's own root, the FIFO on a simulated one."""
    if host.simulated:
        return SimSource(host.root, subsystems)
    if host.is_real:
        return PyudevSource(subsystems)
    raise UsageError(f"--root {host.root}: no device events can be watched under another root (this machine's "
                     "udev reports this machine's devices)",
                     hint="run watch on the node itself, or on a simulated root")


def broadcast(root: Path, event: UEvent) -> int:
    """Deliver ``event`` to every listener of simulated root ``root``; returns how many got it."""
    dfd = _events_dir(Path(root), create=False)
    if dfd is None:
        return 0
    data = (event.to_json() + "\n").encode()
    delivered = 0
    try:
        for name in sorted(n for n in os.listdir(dfd) if n.endswith(".fifo")):
            try:  # a listener's FIFO, opened where it is: never through a symlink, never a file of another kind
                fd = os.open(name, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # no reader: the listener is gone
                    with contextlib.suppress(OSError):
                        os.unlink(name, dir_fd=dfd)
                continue
            try:
                if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                    continue
                os.write(fd, data)
                delivered += 1
            except BlockingIOError:
                pass  # a full queue drops the event, as a netlink socket overflows
            finally:
                os.close(fd)
    finally:
        os.close(dfd)
    return delivered


def wait_readable(fds: list[int], timeout: float | None) -> list[int]:
    """The descriptors of ``fds`` that are readable within ``timeout`` seconds (EINTR: none)."""
    try:
        ready, _, _ = select.select(fds, [], [], timeout)
    except InterruptedError:
        return []
    return ready


def udev_pci_devices() -> dict[str, str] | None:
    """``{address: class}`` as udev sees the real machine's PCI bus (pyudev); None when udev is unavailable.

    Only meaningful for the real root: pyudev cannot be pointed at another tree.
    """
    try:
        import pyudev

        ctx = pyudev.Context()
        return {d.sys_name: (d.attributes.asstring("class") if "class" in d.attributes.available_attributes
                             else "") for d in ctx.list_devices(subsystem="pci")}
    except Exception:  # no libudev, no /run/udev: the sysfs walk stands alone
        return None
