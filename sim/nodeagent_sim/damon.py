"""Emulated DAMON sysfs semantics (``/sys/kernel/mm/damon/admin``), as captured on real 6.12 and 6.18 kernels.

- Writing ``nr_kdamonds`` fails with EBUSY while any kdamond runs; otherwise it wipes every kdamond and
  creates ``0..N-1`` with defaults. Every other ``nr_*`` write (accepted while running: values are staged)
  recreates its children with defaults, even when the number is unchanged. ``nr_contexts`` above 1: EINVAL.
- Values are checked as the kernel checks them: unknown operations, actions, filter types, goal metrics and
  watermark metrics, non-numbers and out-of-range numbers are EINVAL.
- ``state``: ``on`` (EBUSY if running or while a DAMON module runs; EINVAL for an invalid configuration),
  ``off`` (EPERM on a stopped kdamond that ran, EINVAL on one that never ran), ``commit`` (EINVAL when not
  running; an invalid configuration is *accepted* and silently kills the kdamond), ``update_schemes_stats``
  and the other commands of the kernel generation; unknown words: EINVAL.
- A paddr target with no regions runs and monitors nothing (statistics stay 0).
- Each kdamond's running configuration is a snapshot taken at ``on``/``commit`` (simulator state); the tree
  shows staged values, exactly as the kernel does. Pids are made up (200, 201...).
- DAMON's sysfs takes its lock with a trylock: while another process holds it, writes fail with EBUSY and
  change nothing (:func:`contend` makes the next N writes do that).
- The special-purpose modules' ``enabled`` parameters (damon_reclaim, damon_lru_sort, damon_stat) take
  kstrtobool; enabling one while any kdamond runs is EBUSY, and while one is enabled ``on`` is EBUSY (the
  kernel starts a module's kdamond exclusively). An enabled module runs a ``kdamond.0`` thread that has no
  directory under ``admin/`` (:mod:`.damon_modules`).
"""

from __future__ import annotations

import errno
import os
import re
from typing import Any

from . import damon_layout as lay
from . import damon_modules, damos, kthreads
from .kernel import SimKernel, ebusy, einval, kstrtobool, rule

A = re.escape(lay.KDAMONDS)
_U32 = ("nr_accesses/min", "nr_accesses/max", "age/min", "age/max", "_permil", "access_bp", "aggrs",
        "refresh_ms", "/id", "/weight", "addr_unit")
_SIGNED = ("target_nid", "damon_target_idx", "pid_target", "/nid")


def damon_rule(pattern: str):  # type: ignore[no-untyped-def]
    """:func:`rule` for DAMON files: while another process holds the sysfs lock (see :func:`contend`), the
    kernel's trylock fails and the write returns EBUSY without doing anything."""

    def deco(func):  # type: ignore[no-untyped-def]
        def guarded(k: SimKernel, path: str, value: str) -> None:
            state, d = _st(k)
            if d.get("contended", 0) > 0:
                d["contended"] -= 1
                k.save_state(state)
                raise ebusy("damon_sysfs_lock is held by another process")
            func(k, path, value)

        rule(pattern)(guarded)
        return func

    return deco


def contend(k: SimKernel, writes: int) -> None:
    """Make the next ``writes`` DAMON writes fail with EBUSY, as while another tool holds the sysfs lock."""
    with k.locked():
        state, d = _st(k)
        d["contended"] = writes
        k.save_state(state)


def _st(k: SimKernel) -> tuple[dict[str, Any], dict[str, Any]]:
    state = k.state()
    return state, state.setdefault("damon", {"next_pid": 200, "kdamonds": {}})


def _kd_state(d: dict[str, Any], index: str) -> dict[str, Any]:
    return d["kdamonds"].setdefault(index, {"running": False, "pid": -1, "started": False, "snapshot": None,
                                            "stats": {}})


def running(k: SimKernel) -> list[int]:
    _, d = _st(k)
    return sorted(int(i) for i, s in d["kdamonds"].items() if s["running"])


def _number(path: str, value: str) -> int:
    text = value.strip()
    if not re.fullmatch(r"[+-]?(0x[0-9a-fA-F]+|\d+)", text):
        raise einval(f"not a number: {text!r}")
    n = int(text, 0)
    signed = any(path.endswith(s) for s in _SIGNED)
    hi = 2**31 - 1 if signed else 2**32 - 1 if any(s in path for s in _U32) else 2**64 - 1
    lo = -(2**31) if signed else 0
    if not lo <= n <= hi:
        raise einval(f"{n} out of range")
    return n


@damon_rule(A + r"/.+")
def _numeric(k: SimKernel, path: str, value: str) -> None:
    k.tree.set(path, _number(path, value))


def _renumber(k: SimKernel, path: str, value: str, limit: int | None = None) -> None:
    n = _number(path, value)
    if limit is not None and n > limit:
        raise einval(f"at most {limit}")
    parent, name = path.rsplit("/", 1)
    for child in os.listdir(k.tree.local(parent)):
        if child.isdigit():
            k.tree.remove_tree(f"{parent}/{child}")
    for i in range(n):
        k.tree.dir(f"{parent}/{i}")
        lay.CHILDREN[name](k, f"{parent}/{i}")
    k.tree.set(path, n)


@damon_rule(A + r"/nr_kdamonds")
def _nr_kdamonds(k: SimKernel, path: str, value: str) -> None:
    if running(k):
        raise ebusy("a kdamond is running")
    _renumber(k, path, value)
    state, d = _st(k)
    d["kdamonds"] = {}
    k.save_state(state)


@damon_rule(A + r"/\d+/contexts/nr_contexts")
def _nr_contexts(k: SimKernel, path: str, value: str) -> None:
    _renumber(k, path, value, limit=1)


@damon_rule(A + r"/\d+/contexts/0/(targets/nr_targets|targets/\d+/regions/nr_regions|schemes/nr_schemes"
      r"|schemes/\d+/(filters|core_filters|ops_filters)/nr_filters|schemes/\d+/quotas/goals/nr_goals"
      r"|schemes/\d+/dests/nr_dests)")
def _nr_children(k: SimKernel, path: str, value: str) -> None:
    _renumber(k, path, value)


def _word(choices: list[str]):  # type: ignore[no-untyped-def]
    def handler(k: SimKernel, path: str, value: str) -> None:
        word = value.strip()
        allowed = choices(k) if callable(choices) else choices
        if word not in allowed:
            raise einval(f"{word!r} is not accepted")
        k.tree.set(path, word)

    return handler


damon_rule(A + r"/\d+/contexts/0/operations")(_word(lay.operations))  # type: ignore[arg-type]
damon_rule(A + r"/\d+/contexts/0/schemes/\d+/action")(_word(lambda k: lay.names(k, lay.ACTIONS)))  # type: ignore
damon_rule(A + r"/\d+/contexts/0/schemes/\d+/(filters|core_filters|ops_filters)/\d+/type")(
    _word(lambda k: lay.names(k, lay.FILTER_TYPES)))  # type: ignore[arg-type]
damon_rule(A + r"/\d+/contexts/0/schemes/\d+/quotas/goals/\d+/target_metric")(
    _word(lambda k: lay.names(k, lay.GOAL_METRICS)))  # type: ignore[arg-type]
damon_rule(A + r"/\d+/contexts/0/schemes/\d+/watermarks/metric")(_word(["none", "free_mem_rate"]))
damon_rule(A + r"/\d+/contexts/0/schemes/\d+/quotas/goal_tuner")(_word(lay.GOAL_TUNERS))


@damon_rule(A + r"/\d+/contexts/0/schemes/\d+/(filters|core_filters|ops_filters)/\d+/(matching|allow)")
def _yes_no(k: SimKernel, path: str, value: str) -> None:
    k.tree.set(path, "Y" if kstrtobool(value) else "N")


@damon_rule(A + r"/\d+/contexts/0/schemes/\d+/((filters|core_filters|ops_filters)/\d+/memcg_path"
      r"|quotas/goals/\d+/path)")
def _text(k: SimKernel, path: str, value: str) -> None:
    k.tree.set(path, value.rstrip("\n") + "\n")  # shown with a newline, also when empty


# -- the running configuration --------------------------------------------------------------------------

def _read(k: SimKernel, path: str, default: str = "0") -> str:
    p = k.tree.local(path)
    return p.read_text().strip() if p.is_file() else default


def _count(k: SimKernel, path: str) -> int:
    return int(_read(k, path))


def snapshot(k: SimKernel, base: str) -> tuple[dict[str, Any] | None, str | None]:
    """The configuration a kdamond would run with, or why the kernel refuses it (EINVAL on ``on``)."""
    if _count(k, f"{base}/contexts/nr_contexts") != 1:
        return None, "a kdamond needs exactly one context"
    ctx = f"{base}/contexts/0"
    ops = _read(k, f"{ctx}/operations")
    if ops not in lay.operations(k):
        return None, f"operations {ops} unavailable"
    iv = f"{ctx}/monitoring_attrs/intervals"
    sample, aggr = int(_read(k, f"{iv}/sample_us")), int(_read(k, f"{iv}/aggr_us"))
    lo, hi = (int(_read(k, f"{ctx}/monitoring_attrs/nr_regions/{n}")) for n in ("min", "max"))
    if sample > aggr or lo < 3 or lo > hi:
        return None, "invalid monitoring attributes"
    if k.at_least(6, 18) and _read(k, f"{ctx}/addr_unit") == "0":
        return None, "addr_unit 0"
    regions: list[tuple[int, int]] = []
    for t in range(_count(k, f"{ctx}/targets/nr_targets")):
        tb = f"{ctx}/targets/{t}"
        if ops == "vaddr" and int(_read(k, f"{tb}/pid_target")) not in _processes(k):
            return None, f"no process {_read(k, f'{tb}/pid_target')}"
        prev = 0
        for r in range(_count(k, f"{tb}/regions/nr_regions")):
            start, end = (int(_read(k, f"{tb}/regions/{r}/{n}")) for n in ("start", "end"))
            if start > end or start < prev:
                return None, "regions must be ordered and must not overlap"
            prev = end
            regions.append((start, end))
    schemes = []
    for s in range(_count(k, f"{ctx}/schemes/nr_schemes")):
        sb = f"{ctx}/schemes/{s}"
        filters = []
        for layer in ("filters", "core_filters", "ops_filters"):
            for f in range(_count(k, f"{sb}/{layer}/nr_filters")):
                fb = f"{sb}/{layer}/{f}"
                if _read(k, f"{fb}/type") == "memcg" and not _cgroup(k, _read(k, f"{fb}/memcg_path", "")):
                    return None, f"memcg {_read(k, f'{fb}/memcg_path', '')!r} not found"
                filters.append([_read(k, f"{fb}/type"), _read(k, f"{fb}/matching", "N") == "Y",
                                _read(k, f"{fb}/allow", "N") == "Y"])
        ap = f"{sb}/access_pattern"
        schemes.append({"action": _read(k, f"{sb}/action"), "bytes": int(_read(k, f"{sb}/quotas/bytes")),
                        "goals": _count(k, f"{sb}/quotas/goals/nr_goals"), "target_nid": _target_nid(k, sb),
                        "sz_min": int(_read(k, f"{ap}/sz/min")),
                        "nr_accesses": [int(_read(k, f"{ap}/nr_accesses/{n}")) for n in ("min", "max")],
                        "filters": filters})
    goal = [int(_read(k, f"{iv}/intervals_goal/{n}")) for n in ("access_bp", "aggrs", "min_sample_us",
                                                                 "max_sample_us")]
    return {"operations": ops, "regions": regions, "min_regions": lo, "schemes": schemes,
            "addr_unit": int(_read(k, f"{ctx}/addr_unit", "1")),
            # the running intervals (kdamond_tune_intervals moves them) and the intervals goal
            "intervals": [sample, aggr], "aggr_samples": aggr // sample if sample else 0, "intervals_goal": goal}, None


def _target_nid(k: SimKernel, sb: str) -> int:
    """Where a migrate action sends pages: ``target_nid``, or (6.17+) the first of ``dests`` when any is set."""
    if _count(k, f"{sb}/dests/nr_dests") > 0:
        return int(_read(k, f"{sb}/dests/0/id", "-1"))
    return int(_read(k, f"{sb}/target_nid", "-1"))


def _processes(k: SimKernel) -> set[int]:
    return {1, *k.state().get("processes", [])}


def _cgroup(k: SimKernel, path: str) -> bool:
    return bool(path) and k.tree.local("/sys/fs/cgroup/" + path.strip("/")).is_dir()


def _set_running(k: SimKernel, base: str, kd: dict[str, Any], on: bool) -> None:
    kd["running"] = on
    if on:
        kthreads.start(k, kd["pid"], f"kdamond.{base.rsplit('/', 1)[1]}")
    else:
        kthreads.stop(k, kd["pid"])
        kd["pid"] = -1
    k.tree.set(f"{base}/state", "on" if on else "off")
    k.tree.set(f"{base}/pid", kd["pid"])


def _module_running(k: SimKernel) -> list[str]:
    return [n for n, _ in lay.MODULES if _read(k, f"/sys/module/{n}/parameters/enabled", "N") == "Y"]


@damon_rule(A + r"/(\d+)/state")
def _state(k: SimKernel, path: str, value: str) -> None:
    cmd = value.strip()
    if cmd not in lay.names(k, lay.COMMANDS):
        raise einval(f"unknown command {cmd!r}")
    base = path.rsplit("/", 1)[0]
    state, d = _st(k)
    kd = _kd_state(d, base.rsplit("/", 1)[1])
    if cmd == "on":
        if kd["running"]:
            raise ebusy("already running")
        if _module_running(k):
            raise ebusy(f"{', '.join(_module_running(k))} runs an exclusive context")
        snap, err = snapshot(k, base)
        if snap is None:
            raise einval(err or "")
        kd.update(started=True, snapshot=snap, stats={}, pid=d["next_pid"],
                  effective=[sc["bytes"] for sc in snap["schemes"]])
        d["next_pid"] += 1
        _set_running(k, base, kd, True)
    elif cmd == "off":
        if not kd["running"]:
            raise OSError(errno.EPERM, os.strerror(errno.EPERM)) if kd["started"] else einval("never started")
        _set_running(k, base, kd, False)
    elif not kd["running"]:
        raise einval(f"{cmd}: kdamond is not running")
    elif cmd == "commit":
        snap, err = snapshot(k, base)
        if snap is None:  # the real kernel returns success and the kdamond exits
            kd["died"] = err
            _set_running(k, base, kd, False)
        else:
            kd["snapshot"] = snap
    elif cmd == "update_schemes_stats":
        _refresh_stats(k, state, base, kd)
    elif cmd == "update_schemes_effective_quotas":  # as of the last quota reset: a commit shows up later
        _refresh_effective(k, base, kd)
    elif cmd == "update_tuned_intervals":
        _tune_intervals(kd)
        _show_intervals(k, base, kd)
    elif cmd == "commit_schemes_quota_goals" and not any(s["goals"] for s in kd["snapshot"]["schemes"]):
        raise einval("no quota goals")
    k.save_state(state)


def _refresh_effective(k: SimKernel, base: str, kd: dict[str, Any]) -> None:
    for i, eff in enumerate(kd.get("effective", [])):
        p = f"{base}/contexts/0/schemes/{i}/quotas/effective_bytes"
        if k.tree.exists(p):
            k.tree.set(p, eff)


def _tune_intervals(kd: dict[str, Any]) -> None:
    """Time passes with an intervals goal enabled (``aggrs`` non-zero): ``kdamond_tune_intervals`` (6.15) moves the
    sampling interval within [min_sample_us, max_sample_us] and sets the aggregation interval to it times
    ``aggr_samples`` (fixed at commit). The simulated memory shows fewer accesses than the goal asks for, so the
    kernel's feedback loop widens the sampling interval, at most 2x per tuning."""
    snap = kd["snapshot"]
    _, aggrs, lo, hi = snap.get("intervals_goal") or (0, 0, 0, 0)
    if not aggrs:
        return
    sample = max(lo, min(hi, snap["intervals"][0] * 2))
    snap["intervals"] = [sample, sample * snap["aggr_samples"]]


def _show_intervals(k: SimKernel, base: str, kd: dict[str, Any]) -> None:
    """``damon_sysfs_upd_tuned_intervals``: the sysfs interval files show the running (tuned) ones."""
    if "intervals" not in kd["snapshot"]:
        return
    iv = f"{base}/contexts/0/monitoring_attrs/intervals"
    for name, v in zip(("sample_us", "aggr_us"), kd["snapshot"]["intervals"], strict=True):
        k.tree.set(f"{iv}/{name}", v)


def _refresh_stats(k: SimKernel, state: dict[str, Any], base: str, kd: dict[str, Any]) -> None:
    """Time passes between two refreshes: one quota interval of DAMOS work on the simulated memory
    (:mod:`.damos`), after which the effective quotas follow the committed ones; the stats files show it."""
    snap = kd["snapshot"]
    kd["effective"] = [sc["bytes"] for sc in snap["schemes"]]
    kthreads.burn(k, kd["pid"], 25)  # the kdamond's CPU time over the interval (a quarter of a second)
    damos.apply(k, state, snap, kd["stats"])
    for i in range(len(snap["schemes"])):
        for name, v in kd["stats"][str(i)].items():
            p = f"{base}/contexts/0/schemes/{i}/stats/{name}"
            if k.tree.exists(p):
                k.tree.set(p, v)


def tick(k: SimKernel) -> None:
    """What time does: kdamonds with ``refresh_ms`` set refresh their statistics themselves."""
    with k.locked():
        state, d = _st(k)
        for index, kd in d["kdamonds"].items():
            base = f"{lay.KDAMONDS}/{index}"
            if kd["running"] and int(_read(k, f"{base}/refresh_ms")) > 0:
                # damon_sysfs_repeat_call_fn (6.17): the tuned intervals, the statistics and the effective quotas
                _tune_intervals(kd)
                _show_intervals(k, base, kd)
                _refresh_stats(k, state, base, kd)
                _refresh_effective(k, base, kd)
        k.save_state(state)


@rule(r"/sys/module/damon_(reclaim|lru_sort|stat)/parameters/enabled")
def _module(k: SimKernel, path: str, value: str) -> None:
    """A module's kdamond starts exclusively (EBUSY while any kdamond runs) as thread ``kdamond.0``."""
    on = kstrtobool(value)
    module = path.split("/")[3]
    state, d = _st(k)
    mods = d.setdefault("modules", {})
    if on == (module in mods):
        return  # the same value again: nothing to do, no error
    if on:
        damon_modules.applying(k, module)
        if running(k) or mods:
            raise ebusy(f"kdamonds are running ({', '.join(mods) or 'sysfs'}): an exclusive start fails")
        pid = d["next_pid"]
        d["next_pid"] += 1
        mods[module] = {"pid": pid}
        kthreads.start(k, pid, "kdamond.0")
        damon_modules.started(k, module, pid)
    else:
        kthreads.stop(k, mods.pop(module)["pid"])
        damon_modules.stopped(k, module)
    k.tree.set(path, "Y" if on else "N")
    k.save_state(state)


from . import damon_presets as _presets  # noqa: E402,F401  (registers the layout step and preset variants)
