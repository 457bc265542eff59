"""The emulated DAMON sysfs behaves as the captured kernels do (realkernel/NOTES.md steps 4-4c, the 6.18 tree)."""

from __future__ import annotations

import errno

import pytest
from nodeagent_sim import SimKernel
from nodeagent_sim.damon import contend, tick
from nodeagent_sim.damon_presets import foreign_writes, start_foreign

K = "/sys/kernel/mm/damon/admin/kdamonds"
C = f"{K}/0/contexts/0"
S = f"{C}/schemes/0"


def _errno(k: SimKernel, path: str, value: str) -> int:
    with pytest.raises(OSError) as exc:
        k.write(path, value)
    return exc.value.errno or 0


def _paddr_kdamond(k: SimKernel, regions: bool = True) -> None:
    for path, value in [(f"{K}/nr_kdamonds", "1"), (f"{K}/0/contexts/nr_contexts", "1"), (f"{C}/operations", "paddr"),
                        (f"{C}/targets/nr_targets", "1")]:
        k.write(path, value)
    if regions:
        k.write(f"{C}/targets/0/regions/nr_regions", "1")
        k.write(f"{C}/targets/0/regions/0/start", "1048576")
        k.write(f"{C}/targets/0/regions/0/end", "2147348480")
    k.write(f"{C}/schemes/nr_schemes", "1")


def test_counts_create_children_and_running_kdamond_blocks_nr_kdamonds(make_node) -> None:
    k = SimKernel(make_node("qemu-3node"))
    assert k.tree.read(f"{K}/nr_kdamonds") == "0"
    _paddr_kdamond(k)
    assert k.tree.read(f"{K}/0/state") == "off" and k.tree.read(f"{K}/0/pid") == "-1"
    assert k.tree.read(f"{C}/operations") == "paddr"
    assert k.tree.read(f"{C}/avail_operations").split() == ["vaddr", "fvaddr", "paddr"]
    assert _errno(k, f"{K}/0/contexts/nr_contexts", "2") == errno.EINVAL
    k.write(f"{K}/0/state", "on")
    assert k.tree.read(f"{K}/0/state") == "on" and int(k.tree.read(f"{K}/0/pid")) > 0
    assert _errno(k, f"{K}/nr_kdamonds", "2") == errno.EBUSY
    assert _errno(k, f"{K}/0/state", "on") == errno.EBUSY
    k.write(f"{K}/0/state", "off")
    assert _errno(k, f"{K}/0/state", "off") == errno.EPERM  # stopped after running
    k.write(f"{K}/nr_kdamonds", "1")  # wipes the configuration even with the same count
    assert k.tree.read(f"{K}/0/contexts/nr_contexts") == "0"
    assert _errno(k, f"{K}/0/state", "off") == errno.EINVAL  # never started


def test_rewriting_a_count_resets_children_even_with_the_same_value(make_node) -> None:
    k = SimKernel(make_node("qemu-3node"))
    _paddr_kdamond(k)
    k.write(f"{S}/filters/nr_filters", "1")
    k.write(f"{S}/filters/0/matching", "yes")
    assert k.tree.read(f"{S}/filters/0/matching") == "Y"
    assert not k.tree.exists(f"{S}/filters/0/allow")  # 6.12: exclusion filters only
    k.write(f"{S}/filters/nr_filters", "1")
    assert k.tree.read(f"{S}/filters/0/matching") == "N"
    assert k.tree.read(f"{S}/access_pattern/age/max") == "0"  # defaults match nothing


def test_paddr_target_without_regions_runs_and_monitors_nothing(make_node) -> None:
    k = SimKernel(make_node("qemu-3node"))
    _paddr_kdamond(k, regions=False)
    k.write(f"{S}/action", "migrate_cold")
    k.write(f"{K}/0/state", "on")
    k.write(f"{K}/0/state", "update_schemes_stats")
    assert k.tree.read(f"{K}/0/state") == "on"
    assert k.tree.read(f"{S}/stats/nr_tried") == "0" and k.tree.read(f"{S}/stats/sz_applied") == "0"


def test_bad_commit_is_accepted_and_silently_kills_the_kdamond(make_node) -> None:
    k = SimKernel(make_node("qemu-3node"))
    _paddr_kdamond(k)
    k.write(f"{K}/0/state", "on")
    k.write(f"{C}/operations", "vaddr")  # staged: pid_target 0 is no process
    k.write(f"{K}/0/state", "commit")  # returns success...
    assert k.tree.read(f"{K}/0/state") == "off" and k.tree.read(f"{K}/0/pid") == "-1"  # ...and it is gone
    assert _errno(k, f"{K}/0/state", "off") == errno.EPERM
    assert _errno(k, f"{K}/0/state", "commit") == errno.EINVAL
    assert _errno(k, f"{K}/0/state", "on") == errno.EINVAL  # the kernel validates at on


def test_effective_quota_follows_a_commit_only_after_a_quota_reset(make_node) -> None:
    k = SimKernel(make_node("qemu-3node"))
    _paddr_kdamond(k)
    k.write(f"{S}/quotas/bytes", "268435456")
    k.write(f"{K}/0/state", "on")
    k.write(f"{S}/quotas/bytes", "536870912")
    k.write(f"{K}/0/state", "commit")
    k.write(f"{K}/0/state", "update_schemes_effective_quotas")
    assert k.tree.read(f"{S}/quotas/effective_bytes") == "268435456"  # as captured on 6.12
    k.write(f"{K}/0/state", "update_schemes_stats")
    k.write(f"{K}/0/state", "update_schemes_effective_quotas")
    assert k.tree.read(f"{S}/quotas/effective_bytes") == "536870912"


def test_values_are_validated_like_the_kernel(make_node) -> None:
    k = SimKernel(make_node("qemu-3node"))
    _paddr_kdamond(k)
    assert _errno(k, f"{S}/filters/nr_filters", "-1") == errno.EINVAL
    k.write(f"{S}/filters/nr_filters", "1")
    assert _errno(k, f"{S}/filters/0/type", "bogus") == errno.EINVAL
    assert _errno(k, f"{S}/filters/0/type", "unmapped") == errno.EINVAL  # 6.15
    k.write(f"{S}/filters/0/type", "young")
    assert _errno(k, f"{C}/operations", "xaddr") == errno.EINVAL
    assert _errno(k, f"{S}/access_pattern/age/max", str(2**32)) == errno.EINVAL
    assert _errno(k, f"{S}/access_pattern/sz/max", "abc") == errno.EINVAL
    k.write(f"{S}/access_pattern/sz/max", str(2**64 - 1))
    k.write(f"{S}/target_nid", "-1")
    assert _errno(k, f"{K}/0/state", "bogus_cmd") == errno.EINVAL
    k.write(f"{K}/0/state", "on")
    assert _errno(k, f"{K}/0/state", "commit_schemes_quota_goals") == errno.EINVAL  # no goals


@pytest.mark.parametrize("kernel, present, absent", [
    ("6.8.0", ["filters/nr_filters", "quotas/goals/nr_goals", "apply_interval_us"],
     ["target_nid", "dests/nr_dests", "core_filters/nr_filters"]),
    ("6.12.0", ["target_nid", "filters/nr_filters", "quotas/effective_bytes"],
     ["dests/nr_dests", "core_filters/nr_filters", "stats/sz_ops_filter_passed"]),
    ("6.18.0", ["target_nid", "dests/nr_dests", "core_filters/nr_filters", "ops_filters/nr_filters",
                "filters/nr_filters", "stats/sz_ops_filter_passed"], []),
])
def test_three_kernel_generations(make_node, kernel: str, present: list[str], absent: list[str]) -> None:
    k = SimKernel(make_node("qemu-3node", kernel=kernel))
    _paddr_kdamond(k)
    for name in present:
        assert k.tree.exists(f"{S}/{name}"), name
    for name in absent:
        assert not k.tree.exists(f"{S}/{name}"), name
    newest = kernel == "6.18.0"
    for path in (f"{K}/0/refresh_ms", f"{C}/addr_unit", f"{C}/monitoring_attrs/intervals/intervals_goal/aggrs"):
        assert k.tree.exists(path) == newest, path
    if kernel == "6.8.0":
        assert _errno(k, f"{S}/action", "migrate_cold") == errno.EINVAL
    else:
        k.write(f"{S}/action", "migrate_cold")


def test_a_held_sysfs_lock_makes_writes_fail_with_ebusy_and_change_nothing(make_node) -> None:
    k = SimKernel(make_node("qemu-3node"))
    contend(k, 1)
    assert _errno(k, f"{K}/nr_kdamonds", "1") == errno.EBUSY
    assert k.tree.read(f"{K}/nr_kdamonds") == "0"
    k.write(f"{K}/nr_kdamonds", "1")
    assert k.tree.read(f"{K}/nr_kdamonds") == "1"


def test_modules_and_sysfs_kdamonds_exclude_each_other(make_node) -> None:
    k = SimKernel(make_node("qemu-3node"))
    _paddr_kdamond(k)
    k.write("/sys/module/damon_reclaim/parameters/enabled", "Y")
    assert _errno(k, f"{K}/0/state", "on") == errno.EBUSY
    k.write("/sys/module/damon_reclaim/parameters/enabled", "N")
    k.write(f"{K}/0/state", "on")
    assert _errno(k, "/sys/module/damon_lru_sort/parameters/enabled", "Y") == errno.EBUSY
    assert not k.tree.exists("/sys/module/damon_stat/parameters/enabled")  # 6.17


def test_refresh_ms_makes_the_kernel_refresh_statistics_itself(make_node) -> None:
    k = SimKernel(make_node("qemu-3node", kernel="6.18.0"))
    _paddr_kdamond(k)
    k.write(f"{S}/action", "pageout")
    k.write(f"{S}/quotas/bytes", str(64 << 20))
    k.write(f"{K}/0/refresh_ms", "1000")
    k.write(f"{K}/0/state", "on")
    assert k.tree.read(f"{S}/quotas/effective_bytes") == "0"
    tick(k)
    assert int(k.tree.read(f"{S}/stats/nr_tried")) > 0
    assert k.tree.read(f"{S}/quotas/effective_bytes") == str(64 << 20)  # 6.17 refreshes these too


@pytest.mark.parametrize("kernel, layer", [("6.12.0", "filters"), ("6.18.0", "ops_filters")])
def test_a_foreign_kdamond_like_this_machines(make_node, kernel: str, layer: str) -> None:
    k = SimKernel(make_node("qemu-3node", kernel=kernel))
    assert start_foreign(k) == 77
    assert k.tree.read(f"{K}/0/state") == "on" and k.tree.read(f"{K}/0/pid") == "77"
    assert k.tree.read(f"{S}/action") == "pageout"
    assert k.tree.read(f"{S}/{layer}/0/type") == "anon"
    with pytest.raises(ValueError):
        start_foreign(k)


def test_foreign_preset(make_node) -> None:
    k = SimKernel(make_node("h100-cxl-foreign-kdamond"))
    assert k.tree.read(f"{K}/0/state") == "on" and k.tree.read(f"{K}/0/pid") == "77"


def test_memcg_path_reads_a_newline_even_when_unset(make_node) -> None:
    """sysfs_emit("%s\\n"): `grep -r` over the guest's tree shows memcg_path with an empty value, not nothing."""
    k = SimKernel(make_node("qemu-3node"))
    _paddr_kdamond(k)
    k.write(f"{S}/filters/nr_filters", "1")
    memcg = k.tree.local(f"{S}/filters/0/memcg_path")
    assert memcg.read_text() == "\n"
    k.write(f"{S}/filters/0/memcg_path", "/workload\n")
    assert memcg.read_text() == "/workload\n"


def test_foreign_writes_monitor_the_region_given(make_node) -> None:
    k = SimKernel(make_node("qemu-3node"))
    writes = dict(foreign_writes(k, (4 << 30, 6 << 30)))
    assert writes[f"{C}/targets/0/regions/0/end"] == str(6 << 30)
    assert start_foreign(k, region=(4 << 30, 6 << 30)) == 77
    assert k.tree.read(f"{C}/targets/0/regions/0/start") == str(4 << 30)


@pytest.mark.parametrize("kernel, refresh", [("6.15.0", False), ("7.3.0", True)])
def test_an_intervals_goal_retunes_the_intervals_the_files_show(make_node, kernel: str, refresh: bool) -> None:
    """kdamond_tune_intervals: the sampling interval moves within the goal's bounds, the aggregation interval
    keeps its committed ratio to it; sysfs shows them on update_tuned_intervals or (6.17+) every refresh_ms."""
    k = SimKernel(make_node("qemu-3node", kernel=kernel))
    _paddr_kdamond(k)
    iv = f"{C}/monitoring_attrs/intervals"
    for name, v in [("sample_us", "5000"), ("aggr_us", "100000"), ("intervals_goal/access_bp", "400"),
                    ("intervals_goal/aggrs", "3"), ("intervals_goal/min_sample_us", "5000"),
                    ("intervals_goal/max_sample_us", "15000")]:
        k.write(f"{iv}/{name}", v)
    if refresh:
        k.write(f"{K}/0/refresh_ms", "1000")
    k.write(f"{K}/0/state", "on")
    seen = []
    for _ in range(3):
        if refresh:
            tick(k)
        else:
            k.write(f"{K}/0/state", "update_tuned_intervals")
        seen.append((k.tree.read(f"{iv}/sample_us"), k.tree.read(f"{iv}/aggr_us")))
    assert seen == [("10000", "200000"), ("15000", "300000"), ("15000", "300000")]  # max_sample_us caps it
    k.write(f"{iv}/intervals_goal/aggrs", "0")  # a goal with aggrs 0 is off: a commit stops the tuning
    k.write(f"{iv}/sample_us", "5000")
    k.write(f"{iv}/aggr_us", "100000")
    k.write(f"{K}/0/state", "commit")
    k.write(f"{K}/0/state", "update_tuned_intervals")
    assert (k.tree.read(f"{iv}/sample_us"), k.tree.read(f"{iv}/aggr_us")) == ("5000", "100000")
