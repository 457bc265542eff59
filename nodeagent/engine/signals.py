"""SIGTERM and SIGINT: stop at the next safe point, never in the middle of a change.

``handled()`` (the CLI wraps every command in it) installs the handlers. Outside a critical section a signal
stops the command where it is — waiting for the lock, gathering facts, planning: nothing has been written — by
raising :class:`Interrupted`. Inside one (``deferred()``: the engine's execution of a plan, from the first write
to the last record) the signal is only noted: the change in progress is finished — a kdamond is never left half
built, a DAX device's onlining is never cut short by nodeagent — and the executor stops before the next change
(:func:`pending`), records where it stopped, journals it, prints the result and exits ``128 + signal`` (143 for
SIGTERM, 130 for SIGINT).

Child processes (daxctl) run in a process group of their own, so a terminal's Ctrl-C reaches nodeagent only,
and die with nodeagent if it is killed (:mod:`nodeagent.host.commands`). While one runs in a critical section,
the first signal waits for it; a second one stops it (SIGTERM to its process group, SIGKILL after a grace
period) — the change then fails, and the executor stops. A child still running when the command unwinds is
stopped the same way, so none outlives nodeagent or its lock.

``run`` and ``watch`` install their own handlers while they loop (a signal there ends the loop after the step in
progress, exit 0): inside them this module's handlers are not in effect.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from ..host.commands import RUNNING
from ..util.errors import NodeagentError

SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: How long a child gets to exit after SIGTERM before SIGKILL.
GRACE = 5.0


class Interrupted(NodeagentError):
    """A signal stopped the command; ``exit_code`` is 128 + its number."""

    def __init__(self, signum: int, message: str | None = None) -> None:
        name = signal.Signals(signum).name
        super().__init__(message or f"stopped by {name} before any change: nothing was written",
                         hint="run the command again to finish")
        self.signum = signum
        self.exit_code = 128 + signum  # type: ignore[assignment]


class _State:
    depth = 0  # nesting of deferred()
    pending: int | None = None  # the first signal received inside deferred()
    received = 0  # how many signals deferred() has absorbed


_state = _State()


def exit_code(signum: int) -> int:
    return 128 + signum


def name(signum: int) -> str:
    return signal.Signals(signum).name


def _handler(signum: int, frame: object) -> None:
    if _state.depth == 0:
        raise Interrupted(signum)
    _state.received += 1
    if _state.pending is None:
        _state.pending = signum
        _say(f"{name(signum)} received: stopping after the change in progress")
    elif RUNNING:
        _say(f"{name(signum)} again: stopping {', '.join(os.path.basename(a[0]) for a in RUNNING.values())}")
        threading.Thread(target=stop_children, name="stop-children", daemon=True).start()


def _say(text: str) -> None:
    try:
        os.write(2, f"nodeagent: {text}\n".encode())
    except OSError:
        pass


@contextmanager
def handled() -> Iterator[None]:
    """The handlers installed for the duration of a command (main thread only; restored afterwards). A child
    still running when the command unwinds is stopped."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _handler) for s in SIGNALS}
    _state.pending, _state.received = None, 0
    try:
        yield
    finally:
        try:
            stop_children()
        finally:
            for s, h in previous.items():
                signal.signal(s, h)


@contextmanager
def deferred() -> Iterator[None]:
    """A critical section: a signal received inside is noted (:func:`pending`), not raised."""
    _state.depth += 1
    try:
        yield
    finally:
        _state.depth -= 1


def pending() -> int | None:
    """The signal received inside :func:`deferred` (the executor stops at its next safe point), or None."""
    return _state.pending


def clear() -> None:
    """Forget a noted signal (for a caller that has acted on it)."""
    _state.pending, _state.received = None, 0


def stop_children(grace: float = GRACE) -> list[int]:
    """SIGTERM to the process group of every child still running, SIGKILL to those left after ``grace``
    seconds; waits until they are gone. Returns their pids."""
    pids = list(RUNNING)
    for pid in pids:
        _killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    for pid in pids:
        if _alive(pid):
            _killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + grace
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    return pids


def _killpg(pid: int, sig: int) -> None:
    """Signal the process group a child of ours leads (its pgid is its pid: it was started in its own group)."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _alive(pid: int) -> bool:
    """Whether our child ``pid`` still runs (not yet reaped by the thread that waits for it, and not a zombie)."""
    from ..host.commands import child_alive

    return pid in RUNNING and child_alive(pid)
