"""``nodeagent run [PROFILE]``: the DaemonSet's one long-running process — a small reconcile loop.

It reconciles (checks, plan, and with ``--apply`` the apply) at start and whenever the profile changes; reacts to
hot-plugged DAX/CXL/memory devices with a scoped reconcile (the machinery of :mod:`nodeagent.loops.watch`); measures
drift and rewrites the NFD labels every ``interval`` (with ``--apply`` a drifted node is reconciled again, as a
controller's resync does); with ``--apply``, looks at the profile's ``dest_free`` schemes every ``guard`` seconds
and pauses or resumes them (:mod:`nodeagent.loops.guard`, what ``nodeagent guard`` does on a systemd host); serves the
metrics endpoint (:mod:`nodeagent.metrics.exporter`); and stops on SIGTERM or SIGINT after the step in progress,
exiting 0.

Profile changes: a ConfigMap volume is updated by kubelet writing a new timestamped directory and swapping the
``..data`` symlink, so the profile's own file never changes in place (and a ``subPath`` mount never sees an update
at all). The loop therefore watches the directory: every ``poll`` seconds it stats where the profile's path leads
now (through ``..data``) and reconciles when that file, or its content, changed.

Without ``--apply`` it is plan-only: it writes nothing to the kernel, only its own records (state directory, the
NFD feature file) and says what an apply would change.
"""

from __future__ import annotations

import glob
import hashlib
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..engine.hooks import AfterApply, after_apply
from ..host.udev import UEvent, open_events, wait_readable
from ..util.errors import ExitCode, NodeagentError
from . import labels as lab

if TYPE_CHECKING:
    from ..engine.core import Engine
    from ..profile import LoadedProfile

#: The host's own boot-time apply: when it is enabled, systemd owns the node and `run` refuses to start.
HOST_UNIT = "nodeagent-apply.service"
SYSTEMD_DIR = "/etc/systemd/system"


class OwnerConflictError(NodeagentError):
    """Another owner (the host's nodeagent-apply.service) manages this node."""

    exit_code = ExitCode.OWNER_CONFLICT


def host_unit_enabled(engine: Engine) -> list[str]:
    """The ``*.wants/`` or ``*.requires/`` links that enable nodeagent-apply.service under the root."""
    from ..profile.locate import under_root

    base = under_root(engine.host, SYSTEMD_DIR)
    found = [p for kind in ("wants", "requires") for p in glob.glob(os.path.join(base, f"*.{kind}", HOST_UNIT))
             if os.path.lexists(p)]
    return sorted(os.path.join(SYSTEMD_DIR, os.path.relpath(p, base)) for p in found)


def require_sole_owner(engine: Engine) -> None:
    links = host_unit_enabled(engine)
    if links:
        raise OwnerConflictError(
            f"run: the host's {HOST_UNIT} is enabled ({', '.join(links)}): one owner per node",
            hint=f"on the host: systemctl disable {HOST_UNIT} nodeagent-drift.timer (or `nodeagent units` "
                 "uninstalled), or do not schedule the DaemonSet on this node")


def _fingerprint(path: str) -> tuple[Any, ...] | None:
    """What says the profile changed: where its path leads now, that file's identity and content digest; for a
    path that is there but is no profile file (a FIFO, a device, too large) what it is instead, so that the change
    is noticed once and reported by the load. ``None`` when nothing is there. Read through the one bounded reader:
    a FIFO is never waited on, ``/dev/zero`` never read without end."""
    from ..host.files import MAX_PROFILE_BYTES, InputFileError, read_regular_stat

    real = os.path.realpath(path)
    try:
        data, st = read_regular_stat(real, MAX_PROFILE_BYTES)
    except InputFileError as exc:
        return None if str(exc) == "no such file" else (real, "unreadable", str(exc))
    return real, st.st_ino, st.st_mtime_ns, st.st_size, hashlib.sha256(data).hexdigest()


@dataclass
class Options:
    apply: bool = False
    interval: float = 300.0  # drift + labels
    poll: float = 2.0  # profile directory
    debounce: float = 2.0  # hot-plug events
    labels: str = "auto"  # auto: when the features.d directory exists; always; never
    prefix: str = lab.DEFAULT_PREFIX
    allow_disruptive: bool = False
    guard: float = 1.0  # with apply: dest_free schemes (nodeagent.loops.guard); 0: off


@dataclass
class Runner:
    engine: Engine
    profile_path: str
    opts: Options
    log: Callable[[str], None] = print
    stop_event: threading.Event = field(default_factory=threading.Event)
    loaded: LoadedProfile | None = None
    reconciles: int = 0
    _fp: tuple[Any, ...] | None = None
    _guardian: Any = None

    # -- control ------------------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop after the step in progress (safe from a signal handler)."""
        self.stop_event.set()
        w = getattr(self, "_wake_w", None)
        if w is not None:
            try:
                os.write(w, b"x")
            except OSError:
                pass

    def run(self) -> int:
        from ..loops.watch import SUBSYSTEMS, Watcher

        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        previous = {s: signal.signal(s, lambda *_: self.stop()) for s in (signal.SIGTERM, signal.SIGINT)} \
            if threading.current_thread() is threading.main_thread() else {}
        source = open_events(self.engine.host, SUBSYSTEMS)
        mode = "apply" if self.opts.apply else "plan-only (give --apply to change the node)"
        self.log(f"running: profile {self.profile_path}, {mode}; drift and labels every {self.opts.interval:g}s")
        pending: dict[str, UEvent] = {}
        last_event = 0.0
        try:
            self._fp = _fingerprint(self.profile_path)
            self.reconcile("start")
            next_tick = time.monotonic() + self.opts.interval
            next_poll = time.monotonic() + self.opts.poll
            guarding = self.opts.apply and self.opts.guard > 0
            next_guard = time.monotonic() + self.opts.guard if guarding else float("inf")
            while not self.stop_event.is_set():
                now = time.monotonic()
                deadline = min(next_tick, next_poll, next_guard,
                               last_event + self.opts.debounce if pending else float("inf"))
                ready = wait_readable([source.fileno(), self._wake_r], max(deadline - now, 0.0))
                if self._wake_r in ready:
                    try:
                        os.read(self._wake_r, 64)
                    except BlockingIOError:
                        pass
                if self.stop_event.is_set():
                    break
                if source.fileno() in ready:
                    for ev in source.receive():
                        if ev.action == "add" and ev.subsystem in SUBSYSTEMS:
                            pending.setdefault(ev.sysname, ev)
                            last_event = time.monotonic()
                now = time.monotonic()
                if pending and now - last_event >= self.opts.debounce:
                    events, pending = list(pending.values()), {}
                    if not self.hotplug(events, Watcher):
                        pending = {e.sysname: e for e in events}
                        last_event = time.monotonic()
                if now >= next_poll:
                    next_poll = now + self.opts.poll
                    fp = _fingerprint(self.profile_path)
                    if fp != self._fp and fp is not None:
                        self._fp = fp
                        self.reconcile("profile changed")
                if now >= next_tick:
                    next_tick = now + self.opts.interval
                    self.tick()
                if now >= next_guard:
                    next_guard = time.monotonic() + self.opts.guard
                    self.guard()
        finally:
            source.close()
            if self._guardian is not None:
                self._guardian._last_beat()
            for s, h in previous.items():
                signal.signal(s, h)
            os.close(self._wake_r)
            w, self._wake_w = self._wake_w, None
            os.close(w)
        self.log("stopped")
        return 0

    # -- the steps ----------------------------------------------------------------------------------------------
    def _load(self) -> LoadedProfile | None:
        from ..profile.cache import load

        try:
            self.loaded = load(self.profile_path)
        except NodeagentError as exc:  # a bad ConfigMap must not kill the pod: say it, keep the last good one
            keep = f"; keeping profile {self.loaded.name}" if self.loaded is not None else ""
            self.log(f"profile {self.profile_path}: {exc.render()}{keep}")
        return self.loaded

    def reconcile(self, why: str) -> None:
        loaded = self._load()
        if loaded is None:
            self.write_labels(None, state="unknown")
            return
        self.reconciles += 1
        eng = self.engine
        try:
            if self.opts.apply:
                result = eng.apply(loaded, allow_disruptive=self.opts.allow_disruptive)
                self.log(f"reconcile ({why}): profile {loaded.name}: {result.status}"
                         + (f", {len(result.outcomes)} change(s)" if result.outcomes else ""))
                # the hooks every apply goes through (the labels among them, with this loop's expiry)
                done = after_apply(eng, loaded, result, self._after())
                for note in done.notes:
                    self.log(note)
                if done.failed is not None:
                    self.log(f"after the apply: {done.failed.render()}")
                return
            facts = eng.facts(loaded)
            checks = eng.checks(loaded, facts)
            p = eng.plan(loaded, allow_disruptive=self.opts.allow_disruptive, facts=facts)
            n = len(p.changes)
            self.log(f"reconcile ({why}): profile {loaded.name}: plan-only, "
                     + (f"{n} change(s) pending" if n else "nothing to change")
                     + (f", {len(p.problems)} problem(s)" if p.problems else ""))
            eng.record_checks(checks)  # an apply keeps its own
        except NodeagentError as exc:
            self.log(f"reconcile ({why}) failed: {exc.render()}")
        except Exception as exc:  # like watch: one bad reconcile must not end the loop
            self.log(f"reconcile ({why}) failed unexpectedly: {type(exc).__name__}: {exc}")
        self.write_labels(loaded)

    def hotplug(self, events: list[UEvent], watcher_cls: Any) -> bool:
        """A scoped reconcile for hot-plugged devices (as ``watch`` does); plan-only without --apply."""
        names = sorted({e.sysname for e in events})
        if self.loaded is None:
            return True
        if self.opts.apply:
            w = watcher_cls(self.engine, self.loaded, log=self.log)
            if not w._react(events):
                return False
        else:
            try:
                p = self.engine.plan(self.loaded, scope=names)
                self.log(f"hot-plug: {', '.join(names[:4])}{'...' if len(names) > 4 else ''}: plan-only, "
                         f"{len(p.changes)} change(s) pending")
            except NodeagentError as exc:
                self.log(f"hot-plug: plan failed: {exc.render()}")
        self.write_labels(self.loaded)
        return True

    def tick(self) -> None:
        """The interval: drift against what was applied (journaled), a resync when drifted (--apply), labels."""
        from ..drift import detect_and_record

        state = None
        try:
            report = detect_and_record(self.engine, self.loaded)
            state = "partial" if report.cannot_be_done else "converged" if report.converged else "drifted"
            self.log(f"drift: {state}" + (f" ({len(report.items)} item(s))" if report.items else ""))
        except NodeagentError as exc:
            self.log(f"drift: {exc.message}")
        if state == "drifted" and self.opts.apply:
            self.reconcile("drift")
            return
        self.write_labels(self.loaded, state=state)

    def guard(self) -> None:
        """One look at the profile's dest_free schemes (:class:`nodeagent.loops.guard.Guardian`, the same loop as
        ``nodeagent guard``): a scoped apply when one must be paused or resumed."""
        from ..loops.guard import Guardian

        if self.loaded is None:
            return
        g = self._guardian
        if g is None or g.loaded is not self.loaded:  # a new profile: plan its guarded schemes afresh
            g = self._guardian = Guardian(self.engine, self.loaded, interval=self.opts.guard,
                                          log=lambda m: self.log(f"guard: {m}"))
        g.tick()

    def _after(self) -> AfterApply:
        return AfterApply(labels=self.opts.labels, label_prefix=self.opts.prefix, label_source=self.profile_path,
                          label_expires=lab.now_plus(max(3 * self.opts.interval, 600)))

    def write_labels(self, loaded: LoadedProfile | None, *, state: str | None = None) -> None:
        if self.opts.labels == "never" or (self.opts.labels == "auto"
                                           and not lab.features_dir_exists(self.engine.host)):
            return
        try:
            labels = lab.gather(self.engine, loaded, state=state)
            # Stale labels vanish if this pod dies: they expire after three intervals (at least ten minutes).
            text = lab.render(labels, prefix=self.opts.prefix, source=self.profile_path,
                              expires=lab.now_plus(max(3 * self.opts.interval, 600)))
            lab.write(self.engine.host, text)
        except NodeagentError as exc:
            self.log(f"labels: not written: {exc.render()}")
