"""Running daxctl (v76 command line) and reading what it says, without trusting its summary.

daxctl is only ever run to change a device; what the node looks like is read from sysfs before and after.
Its output is parsed as daxctl prints it: JSON on stdout with fields omitted rather than null
(``target_node``, ``movable``, ``online_memblocks`` can be absent; ``-u`` output is never requested), and
free-form lines on stderr, which are read even when it exits 0: a race warning there means another agent
onlined memory first, so the zone must be checked.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...host import CommandResult, Host
from ...util import jsonin
from ...util.errors import CommandError

INSTALL_HINT = ("install the daxctl package (Debian/Ubuntu: apt install daxctl; Fedora/RHEL: dnf install daxctl), "
                "version 68 or newer for --no-movable")


@dataclass(frozen=True)
class DaxctlDevice:
    """One object of daxctl's device JSON; fields daxctl left out are None."""

    chardev: str
    size: int | None = None
    target_node: int | None = None
    align: int | None = None
    mode: str | None = None
    online_memblocks: int | None = None
    total_memblocks: int | None = None
    movable: bool | None = None
    state: str | None = None  # "disabled" when present


def parse_device_json(text: str) -> list[DaxctlDevice]:
    """daxctl's device list (``list -D``, ``reconfigure-device``) → devices. Empty output is an empty list."""
    text = text.strip()
    if not text:
        return []
    try:
        data = jsonin.loads(text)
    except ValueError as exc:
        raise ValueError(f"daxctl printed something that is not JSON ({exc})") from None
    items = data if isinstance(data, list) else [data]
    out = []
    for item in items:
        if not isinstance(item, dict) or "chardev" not in item:
            raise ValueError(f"daxctl printed a JSON object without chardev: {item!r}")
        out.append(DaxctlDevice(
            chardev=str(item["chardev"]), size=_num(item.get("size")), target_node=_num(item.get("target_node")),
            align=_num(item.get("align")), mode=item.get("mode"), online_memblocks=_num(item.get("online_memblocks")),
            total_memblocks=_num(item.get("total_memblocks")),
            movable=item["movable"] if isinstance(item.get("movable"), bool) else None, state=item.get("state")))
    return out


def _num(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None  # absent, or a human-readable string from -u (never asked for)
    return value


@dataclass(frozen=True)
class Stderr:
    """daxctl's stderr, sorted into what nodeagent acts on."""

    race: bool = False  # "WARNING: detected a race while onlining memory"
    auto_online_abort: bool = False  # "kernel policy will auto-online memory, aborting"
    busy_blocks: tuple[str, ...] = ()  # memoryN that refused to go offline
    errors: tuple[str, ...] = ()  # lines with "error" or "failed"
    summary: str | None = None  # "reconfigured 1 device": what daxctl attempted, not what happened
    other: tuple[str, ...] = ()  # anything else, kept for the report

    @property
    def first_error(self) -> str | None:
        return self.errors[0] if self.errors else None


_SUMMARY = re.compile(r"^(reconfigured|onlined memory for|offlined memory for) \d+ devices?$")
_BENIGN = re.compile(r"(already in (system-ram|devdax) mode|memory sections? .*already (online|offline)|"
                     r"^\d+ memory sections? (onlined|offlined))")
_RACE_TAIL = ("Some memory may not be in the expected zone", "recommended to disable any other onlining",
              "and retry. If onlining", "use the --no-online option", "See 'man daxctl-reconfigure-device'")


def classify(stderr: str) -> Stderr:
    race = abort = False
    busy: list[str] = []
    errors: list[str] = []
    other: list[str] = []
    summary = None
    for raw in stderr.splitlines():
        line = raw.strip()
        if not line or re.fullmatch(r"dax\d+\.\d+:", line) or any(t in line for t in _RACE_TAIL):
            continue
        if "detected a race while onlining memory" in line:
            race = True
        elif "kernel policy will auto-online memory" in line:
            abort = True
            errors.append(line)
        elif _SUMMARY.match(line):
            summary = line
        elif m := re.search(r"Failed to offline \S*/(memory\d+)/state", line):
            busy.append(m.group(1))
            errors.append(line)
        elif re.search(r"\berror\b|failed|Failed", line):
            errors.append(line)
        elif not _BENIGN.search(line):
            other.append(line)
    return Stderr(race, abort, tuple(busy), tuple(errors), summary, tuple(other))


@dataclass
class Run:
    """One daxctl invocation and what it said."""

    argv: list[str]
    result: CommandResult | None = None
    stderr: Stderr = field(default_factory=Stderr)
    devices: list[DaxctlDevice] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.result is not None and self.result.returncode == 0

    def describe(self) -> str:
        """``daxctl ... exited 240: <the line that says why>``."""
        rc = self.result.returncode if self.result else "?"
        why = self.stderr.first_error or (self.result.stderr.strip().splitlines()[-1]
                                          if self.result and self.result.stderr.strip() else "no message")
        return f"`{' '.join(self.argv)}` exited {rc}: {why}"


def resolve(host: Host) -> str:
    """The daxctl that will run, or a CommandError that says how to install it."""
    exe = host.commands.which("daxctl")
    if exe is None:
        raise CommandError("daxctl is not installed on this node: it is needed to reconfigure DAX devices",
                           hint=INSTALL_HINT)
    return exe


def run(host: Host, argv: list[str], poll: Callable[[], None] | None = None, every: float = 0.2,
        timeout: float = 3600.0) -> Run:
    """Run ``daxctl argv``; call ``poll()`` every ``every`` seconds while it runs (progress from sysfs)."""
    r = Run(["daxctl", *argv])
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = host.run(["daxctl", *argv], timeout=timeout)
        except BaseException as exc:  # handed to the caller's thread below
            box["error"] = exc

    worker = threading.Thread(target=target, name="daxctl", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(every)
        if poll is not None and worker.is_alive():
            poll()
    if "error" in box:
        raise box["error"]
    r.result = box["result"]
    r.stderr = classify(r.result.stderr)
    try:
        r.devices = parse_device_json(r.result.stdout)
    except ValueError:
        r.devices = []
    return r


class Poller:
    """Reports ``what: done/total`` through ``report`` at most every ``every`` seconds."""

    def __init__(self, count: Callable[[], int], total: int, what: str,
                 report: Callable[[str, int, int], None], every: float = 0.2) -> None:
        self.count, self.total, self.what, self.report, self.every = count, total, what, report, every
        self.last = 0.0
        self.shown: int | None = None

    def __call__(self) -> None:
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            self.show(self.count())

    def show(self, done: int) -> None:
        if done != self.shown:
            self.shown = done
            self.report(self.what, done, self.total)

    def finish(self) -> None:
        """The final count, unless it is already on screen."""
        self.show(self.count())
