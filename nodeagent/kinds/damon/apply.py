"""Carrying out DAMON changes: counts before children, stage values, ``on`` or ``commit``, then read back.

The kernel accepts a ``commit`` of a bad configuration and then silently stops the kdamond, so every ``on``
and ``commit`` is followed by reading ``state`` and ``pid``: a kdamond must be ``on`` afterwards, and after a
commit with the same pid. Before touching a kdamond the apply re-checks what the plan saw (same pid, slot still
free), so a kdamond that changed hands in between is left alone. Ownership is recorded before the first write,
as "building" (so a run stopped anywhere in a build still knows the kdamond is nodeagent's: the next one finishes
it), and again with the pid once it runs. Emptying a slot is recorded the same way before its first write (the
empty slot it is building), so a kdamond half removed is finished too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ...facts.damon import KDAMONDS, retry_busy
from ...host import Host
from ...plan import Change
from ...state import OwnedKdamond, Ownership
from ...util.errors import HostError, NotRecorded
from ...util.kfmt import parse_list
from ...util.quantities import format_size
from ...util.timestamps import rfc3339
from ..base import ApplyContext
from .plan import ALL
from .prime import PRIMING, SCHEMES, final_writes, walk_bytes, walk_index

HAS_MEMORY = "/sys/devices/system/node/has_memory"

#: How long a priming walk may take before the kdamond is committed to the profile's schemes anyway.
PRIME_TIMEOUT_S = 30.0


class KdamondError(HostError):
    """A kdamond did not end up as planned (did not start, died on commit, changed hands)."""


def _read(host: Host, index: int, name: str) -> str:
    return (retry_busy(host.read_opt, f"{KDAMONDS}/{index}/{name}") or "").strip()


def _write(host: Host, path: str, value: str) -> None:
    """One write; a transient EBUSY (another process holds DAMON's sysfs lock) is retried."""
    retry_busy(host.write, path, value)


def _pid(host: Host, index: int) -> int:
    text = _read(host, index, "pid")
    return int(text) if text.lstrip("-").isdigit() else -1


def _building_all(actx: ApplyContext, entries: dict[int, OwnedKdamond]) -> None:
    """Rewriting ``nr_kdamonds`` empties every slot: the records become the kdamonds about to be built there."""
    if actx.state is None:
        return
    with actx.state.edit(Ownership) as own:
        own.kdamonds.clear()
        own.kdamonds.update({i: e._replace(recorded=rfc3339()) for i, e in entries.items()})


def _record(actx: ApplyContext, index: int, entry: OwnedKdamond) -> None:
    if actx.state is None:
        return
    with actx.state.edit(Ownership) as own:
        own.kdamonds[index] = entry._replace(recorded=rfc3339())


def _closing(actx: ApplyContext, index: int, entry: OwnedKdamond, done: str) -> str:
    """The record that closes a change whose writes all took effect (``done``: what they did)."""
    try:
        _record(actx, index, entry)
    except HostError as exc:
        raise NotRecorded(done, exc) from None
    return done


def _require_nodes(host: Host, nodes: list[int], what: str) -> None:
    online = set(parse_list(host.read_opt(HAS_MEMORY) or "", HAS_MEMORY))
    missing = [n for n in nodes if n not in online]
    if missing:
        raise KdamondError(f"{what}: destination node{'s' if len(missing) > 1 else ''} "
                           f"{', '.join(map(str, missing))} {'have' if len(missing) > 1 else 'has'} no memory "
                           "online: not starting a kdamond that would migrate pages there",
                           hint="online the DAX device(s) first (the profile's dax section), then apply again")


def _stop(host: Host, index: int, pid: int, whose: str) -> None:
    now = _pid(host, index)
    if _read(host, index, "state") != "on":
        return
    if now != pid:
        raise KdamondError(f"kdamond {index} runs as pid {now}, not {pid} as planned: it changed hands; not "
                           "stopping it", hint="run plan again")
    _write(host, f"{KDAMONDS}/{index}/state", "off")
    if _read(host, index, "state") != "off":
        raise KdamondError(f"kdamond {index} ({whose}) did not stop")


def _start(host: Host, index: int, command: str, name: str, expect_pid: int | None) -> int:
    """Write ``on`` or ``commit``, then read back: the kdamond must run (with the same pid after a commit)."""
    _write(host, f"{KDAMONDS}/{index}/state", command)
    state, pid = _read(host, index, "state"), _pid(host, index)
    if state != "on":
        if command == "commit":
            raise KdamondError(f"{name}: the kernel accepted the commit to kdamond {index} but the kdamond stopped "
                               "(state off): it rejected the new configuration",
                               hint="check the profile values the kernel validates at commit (memcg paths, "
                               "regions, intervals), then apply again to start it")
        raise KdamondError(f"{name}: kdamond {index} did not start (state {state or '?'})")
    if expect_pid is not None and pid != expect_pid:
        raise KdamondError(f"{name}: kdamond {index} runs as pid {pid} after the commit, not {expect_pid}")
    return pid


def _walked(host: Host, index: int, name: str, marker: int, size: int, timeout: float) -> tuple[int, float]:
    """Bytes the walk (scheme ``marker``) has covered and the seconds it took: until it covered ``size`` or the
    timeout passed. Its quota makes every pass resume where the last one stopped, so the bytes it tried are the
    memory it walked."""
    start = time.monotonic()
    tried = f"{KDAMONDS}/{index}/contexts/0/schemes/{marker}/stats/sz_tried"
    while True:
        if _read(host, index, "state") != "on":
            raise KdamondError(f"{name}: kdamond {index} stopped during its priming walk",
                               hint="check `dmesg` for DAMON errors, then apply again")
        _write(host, f"{KDAMONDS}/{index}/state", "update_schemes_stats")
        text = (retry_busy(host.read_opt, tried) or "").strip()
        done, took = int(text) if text.isdigit() else 0, time.monotonic() - start
        if done >= size or took >= timeout:
            return done, took
        time.sleep(0.1)


def _best_effort(record: Callable[[int | None, dict[str, str]], None], pid: int | None,
                 config: dict[str, str]) -> None:
    """A record kept while a kdamond is primed: if it cannot be written, the priming goes on, and the record that
    closes the change (written after the commit) is what counts — it says so if it fails too."""
    try:
        record(pid, config)
    except HostError:
        pass


def _switch_on(host: Host, index: int, name: str, prime: list, config: dict[str, str], expect_pid: int | None,
               record: Callable[[int | None, dict[str, str]], None],
               timeout: float = PRIME_TIMEOUT_S) -> tuple[int, str]:
    """``on``; with a priming configuration (:mod:`.prime`): stage it, ``on``, wait for the walk, then commit the
    profile's schemes (same pid). Returns the pid and what the priming did. ``record(pid, config)`` keeps the
    ownership record true to what the kernel holds while the priming configuration is in it — before it is
    staged (building) and once it runs (its pid) — so a run stopped anywhere in between leaves a kdamond the next
    run knows as nodeagent's, and commits."""
    if not prime:
        return _start(host, index, "on", name, expect_pid), ""
    staged = {k: v for k, v in config.items() if not k.startswith(f"{SCHEMES}/")} | dict(map(tuple, prime))
    _best_effort(record, None, staged)
    for path, value in prime:
        _write(host, f"{KDAMONDS}/{index}/{path}", value)
    pid = _start(host, index, "on", name, expect_pid)
    _best_effort(record, pid, staged)
    size = walk_bytes(config)
    done, took = _walked(host, index, name, walk_index(prime), size, timeout)
    for path, value in final_writes(list(config.items())):
        _write(host, f"{KDAMONDS}/{index}/{path}", value)
    _start(host, index, "commit", name, pid)
    if done < size:
        return pid, (f"; {PRIMING} covered {format_size(done)} of {format_size(size)} in {timeout:g}s: the rest "
                     "is left to DAMON's sampling")
    return pid, f"; {PRIMING} over its {format_size(size)} in {took:.1f}s"


def _entry(d: dict[str, Any], pid: int | None, profile: str, *, building: bool = False) -> OwnedKdamond:
    """``building``: nodeagent is writing it — its until it runs (plan.owned_kdamonds), whatever of its
    configuration made it to the kernel before a stop."""
    return OwnedKdamond(d["name"], pid, dict(d["config"]), profile, building=building)


def _kdamond(host: Host, change: Change, actx: ApplyContext, profile: str) -> str:
    d = dict(change.data)
    index, name, command = d["index"], d["name"], d["command"]
    if command == "commit":
        if _pid(host, index) != d["expect_pid"] or _read(host, index, "state") != "on":
            raise KdamondError(f"{name}: kdamond {index} no longer runs as pid {d['expect_pid']}: not touching it",
                               hint="run plan again")
    elif d.get("stop_pid"):
        _stop(host, index, d["stop_pid"], "to restart it")
    elif _read(host, index, "state") == "on":
        raise KdamondError(f"{name}: kdamond {index} started since the plan was made: not touching it",
                           hint="run plan again")
    _require_nodes(host, d["dest_nodes"], name)
    _record(actx, index, _entry(d, d["expect_pid"], profile, building=True))  # nodeagent's before its first write
    for path, value in d["writes"]:
        _write(host, f"{KDAMONDS}/{index}/{path}", value)
    if command == "commit":
        pid, primed = _start(host, index, command, name, d["expect_pid"]), ""
    else:
        pid, primed = _switch_on(host, index, name, d.get("prime") or [], d["config"], d["expect_pid"],
                                 lambda pid, cfg: _record(actx, index, _entry({**d, "config": cfg}, pid, profile,
                                                                              building=True)))
    verb = "committed" if command == "commit" else "started"
    done = f"kdamond {index} {verb} ({len(d['writes'])} file(s) written), pid {pid}{primed}"
    return _closing(actx, index, _entry(d, pid, profile), done)


def _delete(host: Host, change: Change, actx: ApplyContext) -> str:
    d = dict(change.data)
    index = d["index"]
    # Recorded before the first write as nodeagent's kdamond being emptied ("building" its empty slot, with the pid
    # it runs as): a run stopped half-way — stopped, or its contexts half removed — leaves a kdamond the next run
    # knows as its own and finishes, never one it takes for another agent's.
    name = change.target.split(".", 1)[1] if "." in change.target else None
    _record(actx, index, OwnedKdamond(name, d["pid"] if d["running"] else None, {"contexts/nr_contexts": "0"},
                                      building=True))
    if d["running"]:
        _stop(host, index, d["pid"], change.target)
    _write(host, f"{KDAMONDS}/{index}/contexts/nr_contexts", "0")
    return _closing(actx, index, OwnedKdamond(None, None, {"contexts/nr_contexts": "0"}),
                    f"kdamond {index} stopped and emptied")


def _rebuild(host: Host, change: Change, actx: ApplyContext, profile: str) -> str:
    d = dict(change.data)
    for index, pid in d["stop"]:
        _stop(host, index, pid, "to rebuild")
    for kd in d["kdamonds"]:
        _require_nodes(host, kd["dest_nodes"], kd["name"])
    # Every slot's configuration goes with this write: the slots are recorded first as nodeagent's kdamonds being
    # built, so a run stopped anywhere from here on leaves no kdamond the next run would take for a foreign one.
    _building_all(actx, {kd["index"]: _entry(kd, None, profile, building=True) for kd in d["kdamonds"]})
    _write(host, f"{KDAMONDS}/nr_kdamonds", str(d["count"]))
    started: list[str] = []
    unrecorded: HostError | None = None
    for kd in d["kdamonds"]:
        for path, value in kd["writes"]:
            _write(host, f"{KDAMONDS}/{kd['index']}/{path}", value)
        pid, primed = _switch_on(host, kd["index"], kd["name"], kd.get("prime") or [], kd["config"], None,
                                 lambda pid, cfg, kd=kd: _record(actx, kd["index"], _entry(
                                     {**kd, "config": cfg}, pid, profile, building=True)))
        started.append(f"{kd['name']} (kdamond {kd['index']}, pid {pid}{primed})")
        try:
            _record(actx, kd["index"], _entry(kd, pid, profile))
        except HostError as exc:  # every kdamond left is on record as nodeagent's, being built: finish building
            unrecorded = unrecorded or exc
    done = f"nr_kdamonds {d['count']}" + (f"; started {', '.join(started)}" if started else "")
    if unrecorded is not None:  # the change is made; the records say "building", which the next run ends
        raise NotRecorded(done, unrecorded)
    return done


def _pause(host: Host, change: Change) -> str:
    """Stop a kdamond of nodeagent's (state off, its files kept) before the memory it acts on is torn down; the
    plan made once that memory is back starts it again."""
    d = dict(change.data)
    _stop(host, d["index"], d["pid"], change.target)
    return f"kdamond {d['index']} stopped (pid {d['pid']}) before {d['why']}; started again once it is back"


def _switch_module(host: Host, change: Change) -> str:
    """``damon.disable_modules``: a module's ``enabled`` parameter, checked after the write (the kernel refuses to
    enable one while any kdamond runs, and stops the module's kdamond when it is disabled)."""
    module, on = str(change.detail("module")), bool(change.detail("enable"))
    path = f"/sys/module/{module}/parameters/enabled"
    retry_busy(host.write, path, "Y" if on else "N")
    now = (host.read_opt(path) or "").strip()
    if now != ("Y" if on else "N"):
        raise HostError(f"{path}: wrote {'Y' if on else 'N'}, the kernel shows {now or '(nothing)'}", path=path,
                        hint="see dmesg; another tool may have switched the module back")
    return f"{module} {'enabled' if on else 'disabled'}"


def apply_change(host: Host, change: Change, actx: ApplyContext, profile: str) -> str:
    if change.detail("module") is not None:
        return _switch_module(host, change)
    if change.target == ALL:
        return _rebuild(host, change, actx, profile)
    if change.op == "delete":
        return _delete(host, change, actx)
    if change.op == "pause":
        return _pause(host, change)
    return _kdamond(host, change, actx, profile)
