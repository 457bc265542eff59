"""``nodeagent watch PROFILE``: the udev rule's reaction to hot-plug, without systemd.

It listens for ``add`` events of the ``dax``, ``memory`` and ``cxl`` subsystems (:mod:`nodeagent.host.udev`),
waits until ``debounce`` seconds pass without a new one (a 2 TiB device arrives as thousands of memory-block
events), then runs one apply scoped to the devices it saw (:mod:`nodeagent.engine.scope`: memory blocks resolve to
their DAX device) and journals a ``hotplug`` event with the result. An apply that cannot get the state lock
(another run holds it) is retried after another quiet period; one that fails otherwise (the kernel refuses a
write) is reported and journaled, and the watch goes on; SIGTERM or SIGINT stop it cleanly between
applies (an apply in progress finishes first), and it exits 0.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..host.udev import UEvent, open_events, wait_readable
from ..state.journal import Journal
from ..util.errors import LockTimeoutError, NodeagentError

if TYPE_CHECKING:
    from ..engine.core import Engine
    from ..profile import LoadedProfile

SUBSYSTEMS = ("dax", "memory", "cxl")
ACTIONS = ("add",)


@dataclass
class Watcher:
    engine: Engine
    loaded: LoadedProfile
    debounce: float = 2.0
    log: Callable[[str], None] = print
    stop_event: threading.Event = field(default_factory=threading.Event)
    applies: int = 0

    def stop(self) -> None:
        """Stop after the apply in progress, if any (safe from a signal handler or another thread)."""
        self.stop_event.set()
        wake = getattr(self, "_wake_w", None)
        if wake is not None:
            try:
                os.write(wake, b"x")
            except OSError:
                pass

    def run(self, *, max_applies: int | None = None) -> int:
        """Watch until stopped (or until ``max_applies`` scoped applies ran). Returns the exit code (0)."""
        self._wake_r, wake_w = os.pipe()
        self._wake_w: int | None = wake_w
        os.set_blocking(self._wake_r, False)
        source = open_events(self.engine.host, SUBSYSTEMS)
        previous = self._install_signals()
        pending: dict[str, UEvent] = {}
        last_event = 0.0
        self.log(f"watching {', '.join(SUBSYSTEMS)} add events for profile {self.loaded.name} "
                 f"(debounce {self.debounce:g}s)")
        try:
            while not self.stop_event.is_set():
                timeout = None if not pending else max(0.0, last_event + self.debounce - time.monotonic())
                ready = wait_readable([source.fileno(), self._wake_r], timeout)
                if self._wake_r in ready:
                    try:
                        os.read(self._wake_r, 64)
                    except BlockingIOError:
                        pass
                if source.fileno() in ready:
                    for ev in source.receive():
                        if ev.action in ACTIONS and ev.subsystem in SUBSYSTEMS:
                            pending.setdefault(ev.sysname, ev)
                            last_event = time.monotonic()
                if pending and time.monotonic() - last_event >= self.debounce and not self.stop_event.is_set():
                    events, pending = list(pending.values()), {}
                    if not self._react(events):
                        pending = {e.sysname: e for e in events}  # retry after another debounce period
                        last_event = time.monotonic() + max(1.0 - self.debounce, 0.0)
                    if max_applies is not None and self.applies >= max_applies:
                        break
        finally:
            source.close()
            self._restore_signals(previous)
            wake_w, self._wake_w = self._wake_w, None
            os.close(self._wake_r)
            os.close(wake_w)
        self.log("watch stopped")
        return 0

    def _react(self, events: list[UEvent]) -> bool:
        """One scoped apply for ``events``. False when it could not start (the state lock is held by another
        run): the caller keeps the events and tries again later."""
        names = sorted({e.sysname for e in events})
        from ..render.ops_text import fold_names

        shown = fold_names(names)
        self.log(f"hot-plug: {shown}: reconciling")
        try:
            result = self.engine.apply(self.loaded, scope=names)
            status = result.status
            done = [o.change.target for o in result.outcomes if o.status == "applied"]
            self.log(f"hot-plug: {status}" + (f" ({', '.join(done)})" if done else " (nothing to change)"))
        except LockTimeoutError as exc:
            self.log(f"hot-plug: apply failed: {exc.message}; will retry")
            return False
        except NodeagentError as exc:
            status = f"error: {exc.message}"
            self.log(f"hot-plug: apply failed: {exc.render()}")
        except Exception as exc:  # a watcher must outlive one bad apply; the next event gets a fresh one
            status = f"error: {type(exc).__name__}: {exc}"
            self.log(f"hot-plug: apply failed unexpectedly: {type(exc).__name__}: {exc}")
        self.applies += 1
        try:
            with self.engine.state.locked(self.engine.lock_timeout):
                Journal(self.engine.host).append([{"event": "hotplug", "action": "add",
                                                   "subsystem": ",".join(sorted({e.subsystem for e in events})),
                                                   "device": ",".join(names), "result": status}])
        except NodeagentError as exc:
            self.log(f"hot-plug: could not journal the event: {exc.message}")
        return True

    def _install_signals(self) -> dict[int, object]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, lambda *_: self.stop())
        return previous

    def _restore_signals(self, previous: dict[int, object]) -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
