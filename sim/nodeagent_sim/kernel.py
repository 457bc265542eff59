"""The emulated kernel behind a simulated root.

A simulated root is a plain directory tree plus ``.nodeagent-machine/`` (``meta.json``, a lock, a write journal).
Every write to a kernel attribute — from the agent, the fake daxctl, an Ansible fork or a test playing
"another agent" — goes through :meth:`SimKernel.write`, which takes the lock, validates the value the way the
kernel does (raising ``OSError`` with the kernel's errno), and applies the kernel's reaction to the tree
(numbered children, derived files). The tree *is* the state, so any process sees the same node.

Handlers are registered per path pattern with :func:`rule`; modules for memory, DAX and DAMON add theirs.

Crash safety: one write can change many files (onlining a block: the block's files, node meminfo, node lists,
tiers, the private ``state.json``), and a writer can be killed (SIGKILL) anywhere in it. So every write, and every
batch, is bracketed by an in-flight record ``.nodeagent-machine/inflight.<pid>.json`` (written atomically before the
first change, removed after the last), and the private state is kept in memory during a write and stored once at
its end. A record whose process is gone marks a write cut short: :mod:`.recovery` (run when a root is next opened,
through the machine plugin's ``recover``) finishes or rolls it back and derives the accounting from the tree again.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from nodeagent_sim_machine import MARKER

from nodeagent.util.kfmt import format_bracket, kernel_version

from . import ownfiles
from .tree import Tree

Handler = Callable[["SimKernel", str, str], None]
#: The in-flight record of process ``pid`` (see the module).
INFLIGHT = "inflight.{pid}.json"
#: Set by a writer whose SIGTERM/SIGINT handler ends the process (the fake daxctl): those signals wait until the
#: write in progress is complete, as a real write(2) to sysfs completes before the signal is acted on.
HOLD_SIGNALS = False
_HELD = {signal.SIGTERM, signal.SIGINT}
#: The writes a batch keeps the private state of in memory until its next flush: a memory block's onlining (what
#: recovery derives again from the tree); after any other write of a batch the state is stored at once.
_BATCHED = re.compile(r"^/sys/devices/system/memory/memory\d+/(state|online)$")
_RULES: list[tuple[re.Pattern[str], Handler]] = []
#: (key, func(kernel, items)) run when a batch flushes the items deferred under ``key``.
_FLUSHERS: list[tuple[str, Callable[[SimKernel, set], None]]] = []


def flusher(key: str) -> Callable[[Callable[[SimKernel, set], None]], Callable[[SimKernel, set], None]]:
    """Register ``func(kernel, items)`` to finish the work deferred under ``key`` during a batch."""

    def deco(func: Callable[[SimKernel, set], None]) -> Callable[[SimKernel, set], None]:
        _FLUSHERS.append((key, func))
        return func

    return deco


def rule(pattern: str) -> Callable[[Handler], Handler]:
    """Register ``func(kernel, path, value)`` for writes to paths matching ``pattern`` (full match)."""

    def deco(func: Handler) -> Handler:
        _RULES.append((re.compile(pattern), func))
        return func

    return deco


def einval(msg: str = "") -> OSError:
    return OSError(errno.EINVAL, os.strerror(errno.EINVAL) + (f" ({msg})" if msg else ""))


def ebusy(msg: str = "") -> OSError:
    return OSError(errno.EBUSY, os.strerror(errno.EBUSY) + (f" ({msg})" if msg else ""))


# Filesystems the kernel mounts under /sys that are not sysfs (their writes reach the file's own handler).
_NOT_SYSFS = ("/sys/fs/cgroup/", "/sys/kernel/debug/", "/sys/kernel/tracing/", "/sys/kernel/security/",
              "/sys/kernel/config/", "/sys/fs/bpf/", "/sys/fs/pstore/", "/sys/fs/fuse/connections/")


class SimKernel:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.tree = Tree(self.root)
        self.meta_dir = self.root / MARKER
        self.meta: dict = json.loads(ownfiles.read_text(self.root, "meta.json") or "null")
        if not isinstance(self.meta, dict):
            raise FileNotFoundError(errno.ENOENT, "not a simulated node (no meta.json)", str(self.meta_dir))
        self.version: tuple[int, int] = kernel_version(self.meta["kernel"])
        self._batch: dict | None = None
        #: During one write outside a batch: the private state, stored at its end ({"state", "dirty"}).
        self._txn: dict | None = None

    # -- locking and journal -------------------------------------------------------------------------
    @contextmanager
    def locked(self) -> Iterator[None]:
        """Serialize kernel reactions across processes (the tree is shared state)."""
        b = self._batch
        fd = b["lock"] if b is not None else ownfiles.open_file(self.root, "lock", os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            if b is None:
                os.close(fd)

    def _journal(self, path: str, value: str, outcome: str) -> None:
        line = json.dumps({"t": round(time.time(), 6), "pid": os.getpid(), "path": path, "value": value,
                           "result": outcome}) + "\n"
        if self._batch is not None:
            os.write(self._batch["journal"], line.encode())
            return
        ownfiles.append(self.root, "writes.log", line)

    def journal(self) -> list[dict]:
        """Every write ever made to this node, in order (what tests use to pin ordering)."""
        text = ownfiles.read_text(self.root, "writes.log")
        return [json.loads(line) for line in (text or "").splitlines() if line]

    def state(self) -> dict:
        """Simulator-private state that the kernel keeps but sysfs does not show (e.g. unmovable pages)."""
        held = self._batch if self._batch is not None else self._txn
        if held is not None:
            if held["state"] is None:
                held["state"] = self._load_state()
            return held["state"]
        return self._load_state()

    def _load_state(self) -> dict:
        text = ownfiles.read_text(self.root, "state.json")
        return json.loads(text) if text else {}

    def save_state(self, state: dict) -> None:
        held = self._batch if self._batch is not None else self._txn
        if held is not None:
            held["state"] = state
            held["dirty"] = True
            return
        self._store_state(state)

    # -- in-flight records ---------------------------------------------------------------------------
    def _inflight(self, record: dict | None) -> None:
        """Write this process's in-flight record (atomically), or remove it (None)."""
        name = INFLIGHT.format(pid=os.getpid())
        if record is not None:
            ownfiles.replace(self.root, name, json.dumps({"pid": os.getpid(), **record}))
            return
        with ownfiles.marker_dir(self.root) as dfd:
            try:
                os.unlink(name, dir_fd=dfd)
            except FileNotFoundError:
                pass

    @contextmanager
    def transaction(self, record: dict) -> Iterator[None]:
        """One multi-file change (a write, or recovery's repairs): in-flight record first, the private state kept
        in memory and stored at the end, then the record removed. An error still stores what was changed."""
        if self._batch is not None or self._txn is not None:
            yield
            return
        self._inflight(record)
        self._txn = {"state": None, "dirty": False}
        try:
            yield
        finally:
            txn, self._txn = self._txn, None
            if txn["dirty"]:
                self._store_state(txn["state"])
            self._inflight(None)

    def _store_state(self, state: dict) -> None:
        ownfiles.replace(self.root, "state.json", json.dumps(state, indent=1, sort_keys=True))

    # -- batches -------------------------------------------------------------------------------------
    @contextmanager
    def batch(self, every: float = 0.1) -> Iterator[None]:
        """Many writes by one writer (the fake daxctl onlining 2048 blocks) at the cost of few.

        Each write is still validated, applied and journaled on its own, but the private state is kept in
        memory and the derived files (node meminfo, node lists, memory tiers) are brought up to date every
        ``every`` seconds and at the end rather than after each write: a reader polling meanwhile sees them
        lag by at most that, as it would see a busy kernel's counters lag.
        """
        if self._batch is not None:
            yield
            return
        self._batch = {"state": None, "dirty": False, "pending": {}, "flushed": time.monotonic(), "every": every,
                       "lock": ownfiles.open_file(self.root, "lock", os.O_RDWR | os.O_CREAT),
                       "journal": ownfiles.open_file(self.root, "writes.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT)}
        self._inflight({"batch": True})
        try:
            yield
        finally:
            held = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD) if HOLD_SIGNALS else None
            try:
                try:
                    self.flush()
                finally:
                    os.close(self._batch["lock"])
                    os.close(self._batch["journal"])
                    self._batch = None
                self._inflight(None)  # (not reached when the flush failed: the next open repairs what it left)
            finally:
                if held is not None:
                    signal.pthread_sigmask(signal.SIG_SETMASK, held)

    def defer(self, key: str, item: object) -> bool:
        """Inside a batch, remember ``item`` under ``key`` for the flushers and return True; else False."""
        if self._batch is None:
            return False
        self._batch["pending"].setdefault(key, set()).add(item)
        return True

    def flush(self) -> None:
        """Bring deferred derived files and the private state up to date (a no-op outside a batch)."""
        b = self._batch
        if b is None:
            return
        with self.locked():
            pending, b["pending"] = b["pending"], {}
            for key, fn in _FLUSHERS:
                if pending.get(key):
                    fn(self, pending[key])
            if b["dirty"]:
                self._store_state(b["state"])
                b["dirty"] = False
        b["flushed"] = time.monotonic()

    # -- the write path ------------------------------------------------------------------------------
    def write(self, path: str, value: str) -> None:
        """Write ``value`` to kernel attribute ``path``: its bytes, as ``printf %s value > path`` would (the rules
        read a value with or without the newline ``echo`` adds). A write of no bytes to a sysfs attribute changes
        nothing and succeeds: ``sysfs_kf_write`` returns 0 before the attribute's store sees it (seen on a 6.12
        guest: an empty write to a CXL region's ``targetN`` left the target attached). Other filesystems mounted
        under /sys are not sysfs: debugfs hands the empty string to its parser (``kstrtoull("")``: EINVAL), as
        cgroupfs, tracefs, securityfs and configfs see every write."""
        if value == "" and path.startswith("/sys/") and not path.startswith(_NOT_SYSFS):
            return
        held = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD) if HOLD_SIGNALS else None
        try:
            with self.locked():
                self._write_journaled(path, value)
            b = self._batch
            if b is not None and (time.monotonic() - b["flushed"] >= b["every"] or not _BATCHED.search(path)):
                self.flush()  # (a write other than a block's onlining: its private state is stored at once)
        finally:
            if held is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)

    def _write_journaled(self, path: str, value: str) -> None:
        try:
            _faults.check(self.root, path)  # `nodeagent sim fault`: an errno, or a signal right before the write
            with self.transaction({"path": path, "value": value}):
                self._write_locked(path, value)
        except OSError as exc:
            self._journal(path, value, errno.errorcode.get(exc.errno or 0, "error"))
            raise
        self._journal(path, value, "ok")

    def _write_locked(self, path: str, value: str) -> None:
        local = self.tree.local(path)
        if not local.exists():
            raise OSError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        if local.is_dir():
            raise OSError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if not local.stat().st_mode & 0o200:
            raise OSError(errno.EACCES, os.strerror(errno.EACCES), path)
        for pattern, handler in reversed(_RULES):
            if pattern.fullmatch(path):
                handler(self, path, value)
                return
        self.tree.set(path, value.strip())

    def at_least(self, major: int, minor: int) -> bool:
        return self.version >= (major, minor)


# -- scalar knobs -------------------------------------------------------------------------------------

_INT = re.compile(r"\s*[+-]?\d+\s*")


def parse_int(value: str) -> int:
    if not _INT.fullmatch(value):
        raise einval(f"not an integer: {value.strip()!r}")
    return int(value)


@rule(r"/proc/sys/kernel/numa_balancing")
def _numa_balancing(k: SimKernel, path: str, value: str) -> None:
    n = parse_int(value)
    # Modes 2/3 (memory tiering) arrived in 5.18; 6.12 reads back even 4 (captured on a real 6.12 guest).
    high = 4 if k.at_least(6, 12) else 3 if k.at_least(5, 18) else 1
    if not 0 <= n <= high:
        raise einval(f"numa_balancing accepts 0..{high}")
    k.tree.set(path, n)


@rule(r"/proc/sys/kernel/numa_balancing_promote_rate_limit_MBps")
def _promote_rate(k: SimKernel, path: str, value: str) -> None:
    n = parse_int(value)
    if not 0 <= n <= 2**32 - 1:
        raise einval()
    k.tree.set(path, n)


#: NUMA balancing's scan and promotion tunables since 5.13 (sysctls before): debugfs u32 files.
NUMA_BALANCING_DEBUGFS = "/sys/kernel/debug/sched/numa_balancing"


@rule(re.escape(NUMA_BALANCING_DEBUGFS) + r"/(scan_delay_ms|scan_period_(min|max)_ms|scan_size_mb|hot_threshold_ms)")
def _numa_balancing_debugfs(k: SimKernel, path: str, value: str) -> None:
    """debugfs_create_u32's fops: kstrtoull(buf, 0) (0x10 is 16, 010 is 8, a leading + is taken; a minus sign or a
    word is EINVAL, over 2^64-1 ERANGE), then stored into the u32 as is: a larger value is truncated, not refused.
    Nothing checks the value (scan_size_mb 0 would divide by zero in task_scan_min(); the profile refuses it)."""
    m = re.fullmatch(r"\+?(?:0[xX]([0-9a-fA-F]+)|(0[0-7]*)|([1-9][0-9]*))", value.strip())
    if not m:
        raise einval()
    n = int(m[1], 16) if m[1] else int(m[2], 8) if m[2] else int(m[3])
    if n > 2**64 - 1:
        raise OSError(errno.ERANGE, os.strerror(errno.ERANGE))
    k.tree.set(path, n & 0xFFFFFFFF)


@rule(r"/proc/sys/vm/zone_reclaim_mode")
def _zone_reclaim(k: SimKernel, path: str, value: str) -> None:
    n = parse_int(value)
    if n < 0:
        raise einval()
    k.tree.set(path, n)


def _dointvec_minmax(pattern: str, lo: int, hi: int) -> None:
    """A sysctl the kernel parses with proc_dointvec_minmax between extra1 = lo and extra2 = hi: else EINVAL."""

    @rule(pattern)
    def _write(k: SimKernel, path: str, value: str) -> None:
        n = parse_int(value)
        if not lo <= n <= hi:
            raise einval()
        k.tree.set(path, n)


@rule(r"/proc/sys/vm/watermark_scale_factor")
def _watermark_scale_factor(k: SimKernel, path: str, value: str) -> None:
    """proc_dointvec_minmax from SYSCTL_ONE to SYSCTL_THREE_THOUSAND since 5.17 (39c65a94cd96), 1000 before."""
    n = parse_int(value)
    if not 1 <= n <= (3000 if k.at_least(5, 17) else 1000):
        raise einval()
    k.tree.set(path, n)


_dointvec_minmax(r"/proc/sys/vm/min_free_kbytes", 0, 2**31 - 1)  # SYSCTL_ZERO, no extra2: up to INT_MAX
_dointvec_minmax(r"/proc/sys/vm/min_(unmapped|slab)_ratio", 0, 100)  # a percentage of the node


def kstrtobool(value: str) -> bool:
    """The kernel's kstrtobool: first characters decide; anything else is EINVAL."""
    s = value.strip().lower()
    if s[:1] in ("y", "1", "t"):
        return True
    if s[:1] in ("n", "0", "f"):
        return False
    if s[:2] == "on":
        return True
    if s[:3] == "off" or s[:2] == "of":
        return False
    raise einval(f"not a boolean: {value.strip()!r}")


@rule(r"/sys/kernel/mm/numa/demotion_enabled")
def _demotion(k: SimKernel, path: str, value: str) -> None:
    k.tree.set(path, "true" if kstrtobool(value) else "false")


#: CONFIG_HZ of the simulated kernel (Debian's): what lru_gen/min_ttl_ms rounds to.
HZ = 250
#: The multi-gen LRU's features (NR_LRU_GEN_CAPS): the LRU itself, leaf and non-leaf accessed-bit clearing; an x86
#: guest has all three.
LRU_GEN_CAPS = 0x0007


@rule(r"/sys/kernel/mm/lru_gen/enabled")
def _lru_gen_enabled(k: SimKernel, path: str, value: str) -> None:
    """enabled_store (mm/vmscan.c): 'n…' turns every feature off, 'y…' every one on, else kstrtouint(buf, 0) of
    the bits; shown as ``0x%04x`` of those the hardware has."""
    word = value.strip()
    if word[:1].lower() == "n":
        caps = 0
    elif word[:1].lower() == "y":
        caps = LRU_GEN_CAPS
    else:
        caps = _kstrtouint(word)
    k.tree.set(path, f"{caps & LRU_GEN_CAPS:#06x}")


@rule(r"/sys/kernel/mm/lru_gen/min_ttl_ms")
def _lru_gen_min_ttl(k: SimKernel, path: str, value: str) -> None:
    """min_ttl_ms_store: kstrtouint(buf, 0), kept as msecs_to_jiffies (rounded up); shown as jiffies_to_msecs."""
    ms = _kstrtouint(value.strip())
    jiffies = -(-ms * HZ // 1000)
    k.tree.set(path, jiffies * 1000 // HZ)


def _kstrtouint(word: str) -> int:
    """kstrtouint(s, 0): 0x hex, 0 octal, decimal, a leading +; else, or above 2^32-1 (ERANGE there), the
    lru_gen stores answer EINVAL."""
    m = re.fullmatch(r"\+?(?:0[xX]([0-9a-fA-F]+)|(0[0-7]*)|([1-9][0-9]*))", word)
    if not m:
        raise einval()
    n = int(m[1], 16) if m[1] else int(m[2], 8) if m[2] else int(m[3])
    if n > 2**32 - 1:
        raise einval("above 2^32-1")
    return n


THP_ENABLED = ["always", "madvise", "never"]
THP_DEFRAG = ["always", "defer", "defer+madvise", "madvise", "never"]


#: Each knob's value at boot (what a simulated node is laid out with), beside the rules its writes follow.
DEFAULT_KNOBS = {
    "/proc/sys/kernel/numa_balancing": "0",
    "/proc/sys/kernel/numa_balancing_promote_rate_limit_MBps": "65536",
    "/proc/sys/vm/zone_reclaim_mode": "0",
    "/proc/sys/vm/min_unmapped_ratio": "1",
    "/proc/sys/vm/min_slab_ratio": "5",
    "/proc/sys/vm/watermark_scale_factor": "10",
    "/sys/kernel/mm/numa/demotion_enabled": "false",
    "/sys/kernel/mm/transparent_hugepage/enabled": format_bracket(THP_ENABLED, "madvise"),
    "/sys/kernel/mm/transparent_hugepage/defrag": format_bracket(THP_DEFRAG, "madvise"),
    "/sys/devices/system/memory/auto_online_blocks": "online",
    # NUMA balancing's scanner and hot threshold, as a 6.12 guest shows them (kernel/sched/fair.c defaults)
    f"{NUMA_BALANCING_DEBUGFS}/scan_delay_ms": "1000",
    f"{NUMA_BALANCING_DEBUGFS}/scan_period_min_ms": "1000",
    f"{NUMA_BALANCING_DEBUGFS}/scan_period_max_ms": "60000",
    f"{NUMA_BALANCING_DEBUGFS}/scan_size_mb": "256",
    f"{NUMA_BALANCING_DEBUGFS}/hot_threshold_ms": "1000",
}
#: The kernel release that introduced a knob; older simulated kernels do not have its file.
KNOB_SINCE = {
    "/proc/sys/kernel/numa_balancing_promote_rate_limit_MBps": (6, 1),
    "/sys/kernel/mm/numa/demotion_enabled": (5, 15),
    # sysctls (/proc/sys/kernel/numa_balancing_scan_*) before 5.13; hot_threshold_ms arrived in 6.0
    **{f"{NUMA_BALANCING_DEBUGFS}/{name}": (5, 13)
       for name in ("scan_delay_ms", "scan_period_min_ms", "scan_period_max_ms", "scan_size_mb")},
    f"{NUMA_BALANCING_DEBUGFS}/hot_threshold_ms": (6, 0),
}


@rule(r"/sys/kernel/mm/transparent_hugepage/(enabled|defrag)")
def _thp(k: SimKernel, path: str, value: str) -> None:
    choices = THP_ENABLED if path.endswith("enabled") else THP_DEFRAG
    word = value.strip()
    if word not in choices:
        raise einval(f"expected one of {choices}")
    k.tree.set(path, format_bracket(choices, word))


AUTO_ONLINE = ["offline", "online", "online_kernel", "online_movable"]


@rule(r"/sys/devices/system/memory/auto_online_blocks")
def _auto_online(k: SimKernel, path: str, value: str) -> None:
    word = value.strip()
    if word not in AUTO_ONLINE:
        raise einval()
    k.tree.set(path, word)


from . import cxl as _cxl  # noqa: E402,F401  (registers the CXL bus's region ABI)
from . import damon as _damon  # noqa: E402,F401  (registers the DAMON sysfs rules and layout step)
from . import dax as _dax  # noqa: E402,F401  (registers the DAX bus driver rules)
from . import faults as _faults  # noqa: E402  (injected faults, checked before every write)
from . import memory as _memory  # noqa: E402,F401  (registers the memory-block rules)
from . import mempolicy as _mempolicy  # noqa: E402,F401  (weighted interleave's weights)
from . import reclaim as _reclaim  # noqa: E402,F401  (zoneinfo, proactive reclaim, the placement presets)
