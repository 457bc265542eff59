"""``nodeagent guard PROFILE``: keeps the profile's ``dest_free`` schemes paused while their destination is full.

A scheme with ``dest_free`` wants to be paused while its destination node has less than ``pause_below`` free, as
written once it has more than ``resume_above``, and as it is in between (:mod:`nodeagent.kinds.damon.dest_free`):
the plan follows the node's free memory, so somebody has to re-plan as that memory moves. This loop does, at a cost
a 1 s tick can afford: every ``interval`` it reads, per guarded scheme of nodeagent's running kdamonds, the
destination's ``MemFree`` (one meminfo file) and the scheme's minimum region size (one DAMON file) — reads only.
When the decision differs from what the kernel holds, it runs an apply scoped to that kdamond: the engine's one
executor (state lock, ownership record, ``commit`` with the same pid, verify, journal), preflight checks skipped
(they belong to a full apply). Which schemes are guarded and their kdamond slots come from a fresh plan, made again
only when what they depend on moved — every ``refresh`` seconds and after each apply the guard reads the kdamond
slots' pids, nodeagent's ownership records and the online nodes (:func:`signature`: a new profile applied, a
hot-added node, a rebuilt kdamond) — and at least every ``replan`` (10 min): a full plan gathers every fact, seconds
of CPU under an emulator, and must not compete with the workload every 30 s. The thresholds follow the destination's
``MemTotal``, read with its ``MemFree``. At every plan and every signature check it writes its heartbeat
(:mod:`nodeagent.facts.guard_heartbeat`), which ``plan`` reads. An apply that cannot get the state lock (another
run holds it) is tried again at the next tick; one that fails otherwise is reported and the loop goes on. SIGTERM or
SIGINT stop it between ticks (exit 0).

Why a loop and not the kernel: before 6.16 DAMON has no per-node condition for a scheme (DAMOS watermarks measure
the whole system), and 6.16's ``node_mem_used_bp`` quota goal throttles a scheme rather than stopping it. Why not a
faster path that writes the two files itself: the pause must be recorded as nodeagent's (ownership, drift, history)
like any other change, and one executor does that.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..util import jsonin
from ..util.errors import HostError, LockTimeoutError, NodeagentError
from ..util.kfmt import parse_meminfo
from ..util.quantities import approx_size

if TYPE_CHECKING:
    from ..engine.core import Engine
    from ..profile import LoadedProfile

KDAMONDS = "/sys/kernel/mm/damon/admin/kdamonds"
NODE = "/sys/devices/system/node"


@dataclass(frozen=True)
class Watched:
    """One guarded scheme of one of nodeagent's kdamonds, as the last plan saw it."""

    name: str  # the kdamond (damon.<name>)
    index: int  # its slot
    scheme: int
    action: str
    node: int
    pause_pct: float  # of the destination's MemTotal, read with its MemFree at every tick
    resume_pct: float

    @property
    def file(self) -> str:
        return f"{KDAMONDS}/{self.index}/contexts/0/schemes/{self.scheme}/access_pattern/sz/min"


def watched(engine: Engine, loaded: LoadedProfile) -> list[Watched]:
    """The guarded schemes of nodeagent's kdamonds on this node now (from a fresh plan's specs)."""
    from ..facts.damon import from_facts
    from ..kinds.damon.kind import build_specs
    from ..kinds.damon.plan import owned_kdamonds

    facts = engine.facts(loaded)
    specs, chk, _ = build_specs(loaded, facts)
    if chk.problems:
        return []
    owned, _ = owned_kdamonds(from_facts(facts), engine.state.plan_state().ownership)
    slot = {o.name: o.index for o in owned.values() if o.name is not None and o.kdamond.running}
    return [Watched(s.name, slot[s.name], g.scheme, g.action, g.node, g.pause_pct, g.resume_pct)
            for s in specs if s.name in slot for g in s.guards if g.total]


def node_memory(engine: Engine, node: int) -> tuple[int, int] | None:
    """The node's (MemFree, MemTotal) in bytes (``None``: it has no meminfo, gone)."""
    text = engine.host.read_opt(f"{NODE}/node{node}/meminfo")
    info = parse_meminfo(text) if text is not None else {}
    if "MemFree" not in info or not info.get("MemTotal"):
        return None
    return info["MemFree"] * 1024, info["MemTotal"] * 1024


def signature(engine: Engine) -> tuple[object, ...]:
    """What says the guarded schemes may have changed (read-only, a few small files): the kdamond slots and their
    pids, nodeagent's ownership records, the online nodes. The guard plans afresh only when it moves."""
    host = engine.host
    n = (host.read_opt(f"{KDAMONDS}/nr_kdamonds") or "0").strip()
    pids = tuple((host.read_opt(f"{KDAMONDS}/{i}/pid") or "").strip() for i in range(int(n) if n.isdigit() else 0))
    # which slot is whose (the record's timestamps and configurations move with every commit)
    kds = engine.state.ownership().kdamonds
    owned = tuple(sorted((str(i), k.name, str(k.pid)) for i, k in kds.items()))
    return (n, pids, owned, host.read_opt(f"{NODE}/online"))


@dataclass
class Guardian:
    engine: Engine
    loaded: LoadedProfile
    interval: float = 1.0
    refresh: float = 30.0
    log: Callable[[str], None] = print
    stop_event: threading.Event = field(default_factory=threading.Event)
    applies: int = 0
    ticks: int = 0
    schemes: list[Watched] = field(default_factory=list)
    _next_refresh: float = 0.0
    _next_check: float = 0.0
    _signature: tuple[object, ...] | None = None
    #: A fresh plan of the guarded schemes at least this often, whatever the signature says.
    replan: float = 600.0
    _refreshed: bool = False
    _beat_failed: bool = False

    def stop(self) -> None:
        """Stop before the next tick (safe from a signal handler or another thread)."""
        self.stop_event.set()

    def run(self, *, max_ticks: int | None = None) -> int:
        previous = self._install_signals()
        try:
            while not self.stop_event.is_set():
                self.tick()
                if max_ticks is not None and self.ticks >= max_ticks:
                    break
                self.stop_event.wait(self.interval)
        finally:
            self._restore_signals(previous)
            self._last_beat()
        self.log("guard stopped")
        return 0

    def tick(self) -> None:
        """One look at every guarded scheme (planning them afresh first when what they depend on moved), and one
        scoped apply when some scheme's state differs from what its destination's free memory asks for."""
        from ..kinds.damon.dest_free import PAUSED, decide, thresholds

        now = time.monotonic()
        if now >= self._next_check:
            sig = signature(self.engine)
            if sig != self._signature or now >= self._next_refresh:
                self._refresh()
                self._next_refresh = now + self.replan
            else:
                self._heartbeat()
            self._signature = sig
            self._next_check = now + self.refresh
        due: dict[str, list[str]] = {}
        for w in self.schemes:
            mem = node_memory(self.engine, w.node)
            value = self.engine.host.read_opt(w.file)
            if mem is None or value is None:
                self._next_check = 0.0  # a node or a kdamond went away: look again
                continue
            free, total = mem
            lo, hi = thresholds(total, w.pause_pct, w.resume_pct)
            want = decide(free, lo, hi)
            if want != "hold" and (want == "pause") != (value.strip() == PAUSED):
                due.setdefault(w.name, []).append(
                    f"{want} {w.action} → node{w.node} (node{w.node} {approx_size(free)} free; pause under "
                    f"{approx_size(lo)}, resume over {approx_size(hi)})")
        if due and self._apply(due):
            self._next_check = 0.0
        self.ticks += 1

    def _refresh(self) -> None:
        before = {(w.name, w.scheme) for w in self.schemes} if self._refreshed else None
        try:
            self.schemes = watched(self.engine, self.loaded)
        except (NodeagentError, HostError) as exc:
            self.log(f"cannot plan the guarded schemes: {exc.message}; trying again in {self.refresh:g}s")
            return
        self._refreshed = True
        self._heartbeat()
        if {(w.name, w.scheme) for w in self.schemes} != before:
            shown = "; ".join(f"damon.{w.name} scheme {w.scheme} ({w.action} → node{w.node}: pause under "
                              f"{w.pause_pct:g} % free, resume over {w.resume_pct:g} %)" for w in self.schemes)
            self.log(f"guarding {shown}" if shown else
                     "no running kdamond of nodeagent's has a dest_free scheme here: nothing to guard "
                     f"(looking again every {self.refresh:g}s)")

    def _heartbeat(self) -> None:
        """Say, in the state directory, that this guard keeps the node's dest_free schemes (plan reads it:
        :mod:`nodeagent.facts.guard_heartbeat`); a heartbeat that cannot be written is said once and the guard goes
        on."""
        import json
        import os

        from ..facts.guard_heartbeat import HEARTBEAT

        try:
            self.engine.host.fs.write_file_atomic(HEARTBEAT, json.dumps(
                {"pid": os.getpid(), "profile": self.loaded.name, "time": round(time.time(), 1)}) + "\n")
        except (NodeagentError, HostError) as exc:
            if not self._beat_failed:
                self.log(f"cannot write the heartbeat {HEARTBEAT}: {exc.message} (plan will warn that no guard runs)")
            self._beat_failed = True

    def _last_beat(self) -> None:
        """A guard that stops takes its heartbeat away (plan then warns at once, not after it goes stale)."""
        import os

        from ..facts.guard_heartbeat import HEARTBEAT

        text = self.engine.host.read_opt(HEARTBEAT)
        try:
            mine = bool(text) and jsonin.loads(text or "{}").get("pid") == os.getpid()
        except ValueError:
            mine = False
        if mine:
            try:
                self.engine.host.fs.remove(HEARTBEAT)
            except (NodeagentError, HostError):
                pass

    def _apply(self, due: dict[str, list[str]]) -> bool:
        """One apply scoped to the kdamonds in ``due``. True when it ran (whatever its result)."""
        for name, why in due.items():
            self.log(f"damon.{name}: {'; '.join(why)}")
        started = time.monotonic()
        try:
            result = self.engine.apply(self.loaded, scope=[f"damon.{n}" for n in due],
                                       skip_checks=_all_checks())
        except LockTimeoutError as exc:
            self.log(f"apply waits: {exc.message}; trying again at the next tick")
            return False
        except NodeagentError as exc:
            self.log(f"apply failed: {exc.render()}")
            return True
        except Exception as exc:  # a guard must outlive one bad apply; the next tick plans afresh
            self.log(f"apply failed unexpectedly: {type(exc).__name__}: {exc}")
            return True
        self.applies += 1
        done = [o.change.target for o in result.outcomes if o.status == "applied"]
        self.log(f"{result.status} in {time.monotonic() - started:.2f}s"
                 + (f" ({', '.join(done)})" if done else " (nothing to change)"))
        return True

    def _install_signals(self) -> dict[int, object]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        return {sig: signal.signal(sig, lambda *_: self.stop()) for sig in (signal.SIGTERM, signal.SIGINT)}

    def _restore_signals(self, previous: dict[int, object]) -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]


def _all_checks() -> frozenset[str]:
    from ..checks.registry import CHECK_NAMES

    return frozenset(CHECK_NAMES)
