"""Fault injection on a simulated node: a write that fails with an errno, or a signal right before a write.

The rules live in the simulated node itself (``.nodeagent-machine/faults.json``), so every process on that root
sees them — nodeagent, the fake daxctl it runs, an Ansible fork — and their counters survive across processes:
each check takes ``.nodeagent-machine/faults.lock`` (flock), reads the rules, counts the write and replaces the file
atomically. ``nodeagent sim fault DIR --write REGEX (--errno NAME | --signal NAME) [--after N] [--times N]``
adds a rule; ``--clear`` removes them all.

What is checked, in one order per node (a rule's counter numbers the writes it matches):

- every write to a kernel attribute, by anyone (:meth:`nodeagent_sim.kernel.SimKernel.write`);
- every write of a file nodeagent keeps (state directory, units, feature files): replace, append and rename,
  through the host layer (:class:`nodeagent.host.fs.RootedFS`), named by the kernel path (``/var/lib/...``).

A rule matches a write when ``REGEX`` is found in its path (``re.search``). The first ``after`` matching writes
pass; the next ``times`` fire (``times`` 0: every one from then on). ``errno`` makes the write fail with a real
``OSError`` of that errno, nothing written; ``signal`` sends the signal to the nodeagent process right before the
write — the writer itself, or, for a write by the fake daxctl, the nodeagent that runs it (its parent) — and then
lets the write go on, as a signal that lands just before a write would.

Without ``faults.json`` a check is one ``stat``: the simulator's write path pays nothing else. With
:func:`trace` on, every write checked is also appended to ``.nodeagent-machine/faults.trace`` (one path a line, in
the order the rules count them): how a sweep learns which write is the Nth.
"""

from __future__ import annotations

import errno as _errno
import fcntl
import json
import os
import re
import signal as _signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nodeagent.host import SIM_FAULTS

from . import ownfiles
from .kernel import MARKER

FILE = SIM_FAULTS
LOCK = "faults.lock"
TRACE = "faults.trace"
#: Who receives a signal fault: "self" (the writing process), or "parent" (set by the fake daxctl, whose writes
#: stand for nodeagent's own: the signal goes to the nodeagent that runs it).
TARGET = "self"
#: How many firings the file keeps (newest last), for tests and ``sim fault DIR`` to show.
KEEP_FIRED = 50


@dataclass
class Rule:
    write: str
    errno: str | None = None
    signal: str | None = None
    after: int = 0
    times: int = 1
    seen: int = 0
    fired: int = 0

    def due(self) -> bool:
        """Count one matching write; whether this one fires."""
        self.seen += 1
        if self.seen <= self.after:
            return False
        return self.times == 0 or self.fired < self.times

    def describe(self) -> str:
        what = self.errno if self.errno else self.signal
        count = "every matching write" if self.times == 0 else f"{self.times} time{'s' if self.times != 1 else ''}"
        return (f"{what} on writes matching {self.write!r} after {self.after} ({count}); seen {self.seen}, "
                f"fired {self.fired}")


@dataclass
class Faults:
    rules: list[Rule] = field(default_factory=list)
    fired: list[dict[str, Any]] = field(default_factory=list)
    trace: bool = False

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Faults:
        return cls([Rule(**r) for r in data.get("rules", [])], list(data.get("fired", [])), bool(data.get("trace")))

    def to_dict(self) -> dict[str, Any]:
        return {"rules": [asdict(r) for r in self.rules], "fired": self.fired, "trace": self.trace}


def errno_of(name: str) -> int:
    """``EBUSY`` (or ``ebusy``) → its number; ValueError naming the known ones otherwise."""
    num = getattr(_errno, name.upper(), None)
    if not isinstance(num, int) or not name.upper().startswith("E"):
        raise ValueError(f"{name!r} is not an errno name (e.g. EBUSY, ENOSPC, EROFS, EIO)")
    return num


def signal_of(name: str) -> _signal.Signals:
    """``TERM``, ``SIGTERM`` or ``15`` → the signal; ValueError otherwise."""
    text = name.upper()
    try:
        return _signal.Signals(int(text)) if text.isdigit() else _signal.Signals[text if text.startswith("SIG")
                                                                                   else "SIG" + text]
    except (KeyError, ValueError):
        raise ValueError(f"{name!r} is not a signal name (e.g. TERM, INT, KILL)") from None


def _dir(root: str | os.PathLike[str]) -> Path:
    return Path(root) / MARKER


@contextmanager
def _locked(root: str | os.PathLike[str]) -> Iterator[Faults]:
    """The rules, under the lock; written back (atomically) when the block ends without an error."""
    fd = ownfiles.open_file(root, LOCK, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        faults = load(root)
        yield faults
        ownfiles.replace(root, FILE, json.dumps(faults.to_dict(), indent=1) + "\n")
    finally:
        os.close(fd)


def load(root: str | os.PathLike[str]) -> Faults:
    text = ownfiles.read_text(root, FILE)
    return Faults.from_dict(json.loads(text)) if text is not None else Faults()


def add(root: str | os.PathLike[str], rule: Rule) -> Faults:
    """Add ``rule`` (validated: the regex compiles, exactly one of errno and signal, counts ≥ 0)."""
    try:
        re.compile(rule.write)
    except re.error as exc:
        raise ValueError(f"--write {rule.write!r}: not a regular expression ({exc})") from None
    if (rule.errno is None) == (rule.signal is None):
        raise ValueError("a fault is either an errno or a signal")
    if rule.errno is not None:
        rule.errno = _errno.errorcode[errno_of(rule.errno)]
    if rule.signal is not None:
        rule.signal = signal_of(rule.signal).name
    if rule.after < 0 or rule.times < 0:
        raise ValueError("--after and --times are counts (≥ 0)")
    with _locked(root) as faults:
        faults.rules.append(rule)
        return faults


def trace(root: str | os.PathLike[str], on: bool = True) -> None:
    """Log every write checked from now on to ``faults.trace`` (see the module); ``traced`` reads it back."""
    with _locked(root) as faults:
        faults.trace = on


def traced(root: str | os.PathLike[str]) -> list[str]:
    p = _dir(root) / TRACE
    return p.read_text().splitlines() if p.exists() else []


def clear(root: str | os.PathLike[str]) -> int:
    """Remove every rule; how many there were."""
    p = _dir(root) / FILE
    with _locked(root) as faults:
        n = len(faults.rules)
        faults.rules.clear()
    p.unlink(missing_ok=True)
    return n


def check(root: str | os.PathLike[str], path: str) -> None:
    """Before a write of ``path`` on the node at ``root``: count it against every matching rule and fire what is
    due — raise the errno's ``OSError``, or send the signal and return."""
    if not os.path.exists(_dir(root) / FILE):
        return
    fire: list[Rule] = []
    with _locked(root) as faults:
        if faults.trace:
            ownfiles.append(root, TRACE, path + "\n")
        for rule in faults.rules:
            if re.search(rule.write, path) and rule.due():
                rule.fired += 1
                fire.append(rule)
                faults.fired.append({"t": round(time.time(), 6), "pid": os.getpid(), "path": path,
                                     "fault": rule.errno or rule.signal})
        del faults.fired[:-KEEP_FIRED]
    for rule in fire:
        if rule.signal is not None:
            _send(signal_of(rule.signal))
    for rule in fire:
        if rule.errno is not None:
            num = errno_of(rule.errno)
            raise OSError(num, f"{os.strerror(num)} (injected by nodeagent sim fault)", path)


def _send(sig: _signal.Signals) -> None:
    if TARGET != "parent":
        os.kill(os.getpid(), sig)
        return
    parent = os.getppid()
    os.kill(parent, sig)
    if sig != _signal.SIGKILL:
        # Let the nodeagent's handler run before the write goes on, as it has for a signal to the writer itself
        # (two signals a write apart are two signals, not one pending signal).
        time.sleep(0.05)
        return
    if sig == _signal.SIGKILL:
        # The nodeagent that ran us is gone: so are we (its death signal for us is on its way). Wait for it
        # rather than make writes a real daxctl would not have had time to make.
        deadline = time.monotonic() + 5
        while os.getppid() == parent and time.monotonic() < deadline:
            time.sleep(0.01)
