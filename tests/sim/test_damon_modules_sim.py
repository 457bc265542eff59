"""The simulated DAMON modules follow mm/damon/{reclaim,lru_sort,stat}.c: parameters with the kernel's modes and
defaults, an exclusive kdamond started by ``enabled`` (a ``kdamond.0`` thread, never a sysfs kdamond), and the
kernel's refusals between modules and sysfs kdamonds."""

from __future__ import annotations

import errno
import stat

import pytest
from nodeagent_sim import SimKernel
from nodeagent_sim.damon_modules import enable, module_pids
from nodeagent_sim.damon_presets import start_foreign

K = "/sys/kernel/mm/damon/admin/kdamonds"
P = "/sys/module/{}/parameters"


def _errno(k: SimKernel, path: str, value: str) -> int:
    with pytest.raises(OSError) as exc:
        k.write(path, value)
    return exc.value.errno or 0


def _mode(k: SimKernel, path: str) -> int:
    return stat.S_IMODE(k.tree.local(path).stat().st_mode)


@pytest.mark.parametrize("kernel, present", [
    ("5.15.0", []), ("5.16.0", ["damon_reclaim"]), ("6.12.0", ["damon_reclaim", "damon_lru_sort"]),
    ("6.18.0", ["damon_reclaim", "damon_lru_sort", "damon_stat"]),
])
def test_each_kernel_has_the_modules_of_its_generation(make_node, kernel, present) -> None:
    k = SimKernel(make_node("qemu-3node", kernel=kernel))
    assert [m for m in ("damon_reclaim", "damon_lru_sort", "damon_stat")
            if k.tree.exists(f"{P.format(m)}/enabled")] == present
    assert k.tree.exists(f"{K}/nr_kdamonds") == (kernel >= "5.18")


def test_parameters_have_the_kernel_s_modes_and_defaults(make_node) -> None:
    k = SimKernel(make_node("qemu-3node", kernel="6.18.0"))
    r, s = P.format("damon_reclaim"), P.format("damon_stat")
    assert (k.tree.read(f"{r}/enabled"), k.tree.read(f"{r}/kdamond_pid"), k.tree.read(f"{r}/min_age"),
            k.tree.read(f"{r}/quota_sz")) == ("N", "-1", "120000000", "134217728")
    assert (_mode(k, f"{r}/enabled"), _mode(k, f"{r}/kdamond_pid"), _mode(k, f"{r}/nr_reclaimed_regions")) == (
        0o600, 0o400, 0o400)
    assert _errno(k, f"{r}/kdamond_pid", "5") == errno.EACCES
    assert not k.tree.exists(f"{s}/kdamond_pid")  # DAMON_STAT does not show its kdamond's pid
    assert len(k.tree.read(f"{s}/memory_idle_ms_percentiles").split(",")) == 101
    assert k.tree.exists(f"{P.format('damon_lru_sort')}/nr_lru_sorted_cold_regions")


def test_enabling_starts_an_exclusive_kdamond_outside_sysfs(make_node) -> None:
    k = SimKernel(make_node("qemu-3node", kernel="6.18.0"))
    pid = enable(k, "damon_stat")
    assert pid is not None and module_pids(k) == {"damon_stat": pid}
    assert k.tree.read(f"/proc/{pid}/comm") == "kdamond.0"
    assert k.tree.read(f"{K}/nr_kdamonds") == "0"  # not a sysfs kdamond
    assert k.tree.read(f"{P.format('damon_stat')}/aggr_interval_us") == "100000"
    k.write(f"{P.format('damon_stat')}/enabled", "Y")  # the same value again: no error, same kdamond
    assert module_pids(k) == {"damon_stat": pid}
    assert _errno(k, f"{P.format('damon_reclaim')}/enabled", "Y") == errno.EBUSY  # one exclusive kdamond at a time
    # ...but it picked its region before the start failed, and wrote it back (node1: node0 starts at 1 MiB)
    assert k.tree.read(f"{P.format('damon_reclaim')}/enabled") == "N"
    assert k.tree.read(f"{P.format('damon_reclaim')}/monitor_region_start") == str(4 << 30)
    # nr_kdamonds only cares about sysfs kdamonds; starting one is what the exclusive kdamond refuses
    start = pytest.raises(OSError, start_foreign, k)
    assert start.value.errno == errno.EBUSY and k.tree.read(f"{K}/0/state") == "off"
    assert _errno(k, f"{P.format('damon_stat')}/enabled", "maybe") == errno.EINVAL
    enable(k, "damon_stat", False)
    assert module_pids(k) == {} and not k.tree.exists(f"/proc/{pid}/comm")
    k.write(f"{K}/0/state", "on")
    assert _errno(k, f"{P.format('damon_stat')}/enabled", "Y") == errno.EBUSY  # a sysfs kdamond runs


def test_kdamond_pid_follows_the_module(make_node) -> None:
    k = SimKernel(make_node("qemu-3node"))
    pid = enable(k, "damon_lru_sort")
    base = P.format("damon_lru_sort")
    assert k.tree.read(f"{base}/kdamond_pid") == str(pid) and k.tree.read(f"{base}/enabled") == "Y"
    enable(k, "damon_lru_sort", False)
    assert (k.tree.read(f"{base}/kdamond_pid"), k.tree.read(f"{base}/enabled")) == ("-1", "N")
    assert enable(k, "damon_reclaim") != pid  # a new thread
