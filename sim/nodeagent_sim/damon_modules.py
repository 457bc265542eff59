"""The DAMON special-purpose modules of a simulated node: DAMON_RECLAIM, DAMON_LRU_SORT, DAMON_STAT.

Each is a built-in module with parameters under ``/sys/module/<name>/parameters`` (mm/damon/reclaim.c,
lru_sort.c, stat.c and modules-common.h): writable ones mode 600, results 400, with the kernel's defaults.
Enabling one starts a kdamond the kernel runs *exclusively* (``damon_start(..., true)``): it fails with EBUSY
while any kdamond runs (a sysfs one or another module's), and while it runs the sysfs interface cannot start
one (``state=on`` → EBUSY, see :mod:`.damon`). The kdamond is a kernel thread named ``kdamond.0`` (the kernel
numbers a kdamond by how many run when it starts), never a directory under ``/sys/kernel/mm/damon/admin``;
DAMON_RECLAIM and DAMON_LRU_SORT show its pid in ``kdamond_pid`` (-1 while disabled), DAMON_STAT nowhere.

:func:`enable` is what ``nodeagent sim kdamond DIR --module NAME`` does; the ``h100-cxl-damon-stat`` preset
boots with DAMON_STAT enabled (``CONFIG_DAMON_STAT_ENABLED_DEFAULT=y``).
"""

from __future__ import annotations

from .kernel import SimKernel

W, R = 0o600, 0o400
_MON = [("sample_interval", 5000, W, (5, 16)), ("aggr_interval", 100000, W, (5, 16)),
        ("min_nr_regions", 10, W, (5, 16)), ("max_nr_regions", 1000, W, (5, 16)),
        ("monitor_region_start", 0, W, (5, 16)), ("monitor_region_end", 0, W, (5, 16))]


def _stats(names: tuple[str, str, str]) -> list[tuple[str, str | int, int, tuple[int, int]]]:
    tried, applied, exceeds = names
    return [(f"nr_{tried}", 0, R, (5, 16)), (f"bytes_{tried}", 0, R, (5, 16)), (f"nr_{applied}", 0, R, (5, 16)),
            (f"bytes_{applied}", 0, R, (5, 16)), (f"nr_{exceeds}", 0, R, (5, 16))]


#: module → (since, [(parameter, default, mode, since)]).
PARAMETERS: dict[str, tuple[tuple[int, int], list[tuple[str, str | int, int, tuple[int, int]]]]] = {
    "damon_reclaim": ((5, 16), [
        ("enabled", "N", W, (5, 16)), ("commit_inputs", "N", W, (5, 19)), ("min_age", 120000000, W, (5, 16)),
        ("quota_ms", 10, W, (5, 16)), ("quota_sz", 134217728, W, (5, 16)),
        ("quota_reset_interval_ms", 1000, W, (5, 16)), ("wmarks_interval", 5000000, W, (5, 16)),
        ("wmarks_high", 500, W, (5, 16)), ("wmarks_mid", 400, W, (5, 16)), ("wmarks_low", 200, W, (5, 16)),
        ("quota_mem_pressure_us", 0, W, (6, 9)), ("quota_autotune_feedback", 0, W, (6, 9)),
        *_MON, ("skip_anon", "N", W, (6, 1)), ("kdamond_pid", -1, R, (5, 16)),
        *_stats(("reclaim_tried_regions", "reclaimed_regions", "quota_exceeds"))]),
    "damon_lru_sort": ((6, 0), [
        ("enabled", "N", W, (6, 0)), ("commit_inputs", "N", W, (6, 0)), ("hot_thres_access_freq", 500, W, (6, 0)),
        ("cold_min_age", 120000000, W, (6, 0)), ("quota_ms", 10, W, (6, 0)),
        ("quota_reset_interval_ms", 1000, W, (6, 0)), ("wmarks_interval", 5000000, W, (6, 0)),
        ("wmarks_high", 200, W, (6, 0)), ("wmarks_mid", 150, W, (6, 0)), ("wmarks_low", 50, W, (6, 0)),
        *_MON, ("kdamond_pid", -1, R, (6, 0)),
        *_stats(("lru_sort_tried_hot_regions", "lru_sorted_hot_regions", "hot_quota_exceeds")),
        *_stats(("lru_sort_tried_cold_regions", "lru_sorted_cold_regions", "cold_quota_exceeds"))]),
    "damon_stat": ((6, 17), [
        ("enabled", "N", W, (6, 17)), ("estimated_memory_bandwidth", 0, R, (6, 17)),
        ("memory_idle_ms_percentiles", ",".join(["0"] * 101), R, (6, 17)), ("aggr_interval_us", 0, R, (6, 18))]),
}


def _base(module: str) -> str:
    return f"/sys/module/{module}/parameters"


def lay_out(k: SimKernel) -> None:
    """The modules this kernel generation has, disabled, with the kernel's defaults."""
    for module, (since, params) in PARAMETERS.items():
        if k.version < since:
            continue
        for name, value, mode, added in params:
            if k.version >= added:
                k.tree.file(f"{_base(module)}/{name}", value, mode)


def _biggest_ram(k: SimKernel) -> tuple[int, int] | None:
    """The largest System RAM resource as ``damon_find_biggest_system_ram`` picks it (the first of equal ones),
    as ``(start, end)`` with the resource's *inclusive* end, the way it is written back: here the contiguous runs
    of online memory blocks, the one from address 0 starting at 1 MiB (x86's legacy VGA/BIOS hole splits the
    memory below it off). The 6.12 guest shows it: node0 ``[1 MiB, 2 GiB)`` loses to node1, 4294967296..6442450943."""
    mem = "/sys/devices/system/memory"
    size = int(k.tree.read(f"{mem}/block_size_bytes") or "0", 16)
    online = sorted(int(n[6:]) for n in (p.name for p in k.tree.local(mem).glob("memory[0-9]*"))
                    if k.tree.read(f"{mem}/{n}/state") == "online")
    best: tuple[int, int] | None = None
    run_start = prev = None
    for i in [*online, None]:
        if i is not None and prev is not None and i == prev + 1:
            prev = i
            continue
        if run_start is not None and prev is not None:
            r = (max(run_start * size, 1 << 20), (prev + 1) * size - 1)
            best = r if best is None or r[1] - r[0] > best[1] - best[0] else best
        run_start = prev = i
    return best


def applying(k: SimKernel, module: str) -> None:
    """What enabling does before it tries to start the kdamond (so also when that start fails with EBUSY, as
    the 6.12 guest shows): DAMON_RECLAIM and DAMON_LRU_SORT left without a region pick one and write it back
    into ``monitor_region_start``/``_end``."""
    base = _base(module)
    region = [f"{base}/monitor_region_start", f"{base}/monitor_region_end"]
    if all(k.tree.exists(r) and k.tree.read(r) == "0" for r in region):
        picked = _biggest_ram(k)
        for path, value in zip(region, picked or (), strict=False):
            k.tree.set(path, value)


def started(k: SimKernel, module: str, pid: int) -> None:
    """The module's kdamond runs as ``pid``: what its parameters show."""
    base = _base(module)
    if k.tree.exists(f"{base}/kdamond_pid"):
        k.tree.set(f"{base}/kdamond_pid", pid)
    if module == "damon_stat" and k.tree.exists(f"{base}/aggr_interval_us"):
        k.tree.set(f"{base}/aggr_interval_us", 100000)  # its starting interval, before auto-tuning moves it


def stopped(k: SimKernel, module: str) -> None:
    if k.tree.exists(f"{_base(module)}/kdamond_pid"):
        k.tree.set(f"{_base(module)}/kdamond_pid", -1)


def enable(k: SimKernel, module: str, on: bool = True) -> int | None:
    """Enable (or disable) ``module`` through its ``enabled`` parameter, as an administrator would; the kernel's
    refusals (EBUSY, or ENOENT for a module this kernel lacks) are raised as OSError. Its kdamond's pid."""
    k.write(f"{_base(module)}/enabled", "Y" if on else "N")
    return module_pids(k).get(module)


def module_pids(k: SimKernel) -> dict[str, int]:
    """The enabled modules and the pids of their kdamonds."""
    return {m: int(rec["pid"]) for m, rec in (k.state().get("damon") or {}).get("modules", {}).items()}
