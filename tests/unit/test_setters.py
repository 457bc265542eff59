"""Who else sets kernel settings: sysctl.d precedence, TuneD composition (includes, conditions), udev, DAMON."""

from __future__ import annotations

import os
from pathlib import Path

from nodeagent.facts.setters import (
    damon_modules,
    memory_udev_rules,
    setters_of,
    sysctl_d_files,
    sysctl_d_setting,
    tuned_profile,
)
from nodeagent.host import open_host


def put(root: Path, path: str, text: str) -> None:
    p = root / path.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def test_sysctl_d_precedence_masking_and_sysctl_conf(make_node) -> None:
    root = make_node("workstation")
    put(root, "/usr/lib/sysctl.d/50-default.conf", "kernel.numa_balancing = 1\nvm.zone_reclaim_mode=1\n")
    put(root, "/usr/lib/sysctl.d/60-hidden.conf", "kernel.numa_balancing = 3\n")
    put(root, "/etc/sysctl.d/60-hidden.conf", "# the admin's copy hides the vendor's\nvm.swappiness = 10\n")
    put(root, "/usr/lib/sysctl.d/70-masked.conf", "vm.zone_reclaim_mode = 7\n")
    os.symlink("/dev/null", root / "etc/sysctl.d/70-masked.conf")
    put(root, "/run/sysctl.d/80-slash.conf", "; a comment\nkernel/numa_balancing = 0\n")
    put(root, "/etc/sysctl.conf", "vm.zone_reclaim_mode = 4\n")
    host = open_host(root)
    files = sysctl_d_files(host)
    assert files == ["/usr/lib/sysctl.d/50-default.conf", "/etc/sysctl.d/60-hidden.conf",
                     "/run/sysctl.d/80-slash.conf", "/etc/sysctl.conf"]
    nb = sysctl_d_setting(host, "kernel.numa_balancing")
    assert (nb.file, nb.line, nb.value) == ("/run/sysctl.d/80-slash.conf", 2, "0")
    zr = sysctl_d_setting(host, "vm.zone_reclaim_mode")
    assert (zr.source, zr.file, zr.value) == ("sysctl.conf", "/etc/sysctl.conf", "4")
    assert sysctl_d_setting(host, "kernel.numa_balancing_promote_rate_limit_MBps") is None


def test_sysctl_conf_read_once_through_debians_symlink_and_globs(make_node) -> None:
    root = make_node("workstation")
    put(root, "/etc/sysctl.conf", "kernel.numa_balancing = 1\n")
    os.makedirs(root / "etc/sysctl.d", exist_ok=True)
    os.symlink("../sysctl.conf", root / "etc/sysctl.d/99-sysctl.conf")
    put(root, "/etc/sysctl.d/10-glob.conf", "-kernel.numa_bal*ing = 3\n")
    host = open_host(root)
    assert sysctl_d_files(host) == ["/etc/sysctl.d/10-glob.conf", "/etc/sysctl.d/99-sysctl.conf"]
    assert sysctl_d_setting(host, "kernel.numa_balancing").value == "1"
    os.unlink(root / "etc/sysctl.d/99-sysctl.conf")
    put(root, "/etc/sysctl.conf", "# nothing\n")
    s = sysctl_d_setting(host, "kernel.numa_balancing")
    assert (s.key, s.value) == ("-kernel.numa_bal*ing", "3")


THROUGHPUT = """\
[main]
summary=Broadly applicable tuning that provides excellent performance across a variety of common server workloads

[vm]
transparent_hugepages=always

[sysctl]
kernel.sched_min_granularity_ns = 10000000
vm.dirty_ratio = 40

# Marvell ThunderX
[sysctl.thunderx]
type=sysctl
uname_regex=aarch64
cpuinfo_regex=${thunderx_cpuinfo_regex}
kernel.numa_balancing=0

[variables]
thunderx_cpuinfo_regex=CPU part\\s+:\\s+(0x0[aA]1)|(0x0[aA]2)|(0x0[aA]3)
"""


def test_tuned_include_chain_conditions_and_overrides(make_node) -> None:
    root = make_node("workstation")  # no TuneD files of its own
    put(root, "/usr/lib/tuned/throughput-performance/tuned.conf", THROUGHPUT)
    put(root, "/usr/lib/tuned/hpc-compute/tuned.conf",
        "[main]\ninclude=throughput-performance\n[sysctl]\nvm.zone_reclaim_mode=1  # comment\n"
        "[sysfs]\n/sys/kernel/mm/transparent_hugepage/def*=madvise\n")
    # The admin customises the shipped profile under the same name; it includes the shipped one.
    put(root, "/etc/tuned/hpc-compute/tuned.conf",
        "[main]\ninclude=hpc-compute\n[sysctl]\nkernel.numa_balancing=1\n[vm]\ndrop=transparent_hugepages\n"
        "transparent_hugepage.defrag=never\n[cpu]\nenabled=false\ngovernor=performance\n")
    put(root, "/etc/tuned/active_profile", "hpc-compute\n")
    host = open_host(root)
    prof = tuned_profile(host)
    assert prof is not None and prof.names == ["hpc-compute"] and not prof.running
    assert prof.files == ["/etc/tuned/hpc-compute/tuned.conf", "/usr/lib/tuned/hpc-compute/tuned.conf",
                          "/usr/lib/tuned/throughput-performance/tuned.conf"]
    got = {(s.plugin, s.key): (s.value, s.file, s.line) for s in prof.settings}
    assert got[("sysctl", "kernel.numa_balancing")] == ("1", "/etc/tuned/hpc-compute/tuned.conf", 4)
    assert got[("sysctl", "vm.zone_reclaim_mode")][0] == "1"
    assert ("vm", "transparent_hugepages") not in got  # dropped by the admin's copy
    assert got[("vm", "transparent_hugepage.defrag")][0] == "never"
    skipped = dict(prof.skipped)
    assert skipped["cpu"] == "enabled=false"
    assert skipped["sysctl.thunderx"].startswith("cpuinfo_regex 'CPU part")  # this x86 node is not a ThunderX
    # The attribute view: who sets numa_balancing and THP defrag on this node.
    nb = setters_of(host, "/proc/sys/kernel/numa_balancing")
    assert [(s.source, s.value) for s in nb] == [("tuned", "1")]
    assert "TuneD profile hpc-compute (not running now" in nb[0].detail
    defrag = setters_of(host, "/sys/kernel/mm/transparent_hugepage/defrag")
    assert sorted(s.value for s in defrag) == ["madvise", "never"]


def test_tuned_conditional_unit_applies_where_it_matches(make_node) -> None:
    root = make_node("workstation")
    put(root, "/usr/lib/tuned/throughput-performance/tuned.conf", THROUGHPUT.replace("uname_regex=aarch64\n", ""))
    put(root, "/proc/cpuinfo", "processor\t: 0\nCPU part\t: 0x0a1\n")
    put(root, "/etc/tuned/active_profile", "throughput-performance")
    put(root, "/run/tuned/tuned.pid", "1234\n")
    host = open_host(root)
    prof = tuned_profile(host)
    assert prof.running
    nb = setters_of(host, "/proc/sys/kernel/numa_balancing")
    assert [(s.source, s.value) for s in nb] == [("tuned", "0")]
    assert nb[0].detail == "TuneD profile throughput-performance (running), [sysctl.thunderx]"


def test_sysctl_d_wins_over_tuned_when_tuned_reapplies_it(make_node) -> None:
    root = make_node("workstation")
    put(root, "/etc/tuned/mine/tuned.conf", "[sysctl]\nkernel.numa_balancing=0\n")
    put(root, "/etc/tuned/active_profile", "mine")
    put(root, "/etc/sysctl.d/99-x.conf", "kernel.numa_balancing=1\n")
    host = open_host(root)
    assert [s.source for s in setters_of(host, "/proc/sys/kernel/numa_balancing")] == ["sysctl.d", "tuned"]
    put(root, "/etc/tuned/mine/tuned.conf", "[sysctl]\nreapply_sysctl=0\nkernel.numa_balancing=0\n")
    assert [s.source for s in setters_of(host, "/proc/sys/kernel/numa_balancing")] == ["tuned", "sysctl.d"]


def test_udev_rules_that_online_memory_and_daxctls_rule(make_node) -> None:
    root = make_node("h100-cxl")
    put(root, "/usr/lib/udev/rules.d/40-redhat.rules",
        '# Memory hotadd request\nSUBSYSTEM!="memory", GOTO="memory_hotplug_end"\n'
        'ACTION!="add", GOTO="memory_hotplug_end"\n'
        'SUBSYSTEM=="memory", ACTION=="add", \\\n  ATTR{state}=="offline", ATTR{state}="online"\n')
    daxctl = ('ACTION=="add", SUBSYSTEM=="dax", TAG+="systemd",\\\n  PROGRAM="/usr/bin/systemd-escape -p '
              '--template=daxdev-reconfigure@.service $env{DEVNAME}",\\\n  ENV{SYSTEMD_WANTS}="%c"\n')
    put(root, "/usr/lib/udev/rules.d/90-daxctl-device.rules", daxctl)
    put(root, "/etc/udev/rules.d/90-nodeagent.rules", 'ACTION=="add", SUBSYSTEM=="memory", ATTR{state}="online"\n')
    host = open_host(root)
    rules = memory_udev_rules(host)
    assert [(r.file, r.line, r.what) for r in rules] == [
        ("/usr/lib/udev/rules.d/40-redhat.rules", 4, "onlines hot-added memory blocks")]
    # daxctl's rule only acts with a [reconfigure-device] section in daxctl.conf.d.
    put(root, "/etc/daxctl.conf.d/cxl.conf", "[reconfigure-device cxl-expander]\nnuma_node = 2\nmode = system-ram\n")
    assert [r.file for r in memory_udev_rules(host)][-1] == "/usr/lib/udev/rules.d/90-daxctl-device.rules"


def test_enabled_damon_modules(make_node) -> None:
    root = make_node("h100-cxl")
    put(root, "/sys/module/damon_reclaim/parameters/enabled", "Y\n")
    put(root, "/sys/module/damon_reclaim/parameters/kdamond_pid", "4242\n")
    put(root, "/sys/module/damon_lru_sort/parameters/enabled", "N\n")
    mods = damon_modules(open_host(root))
    assert [(m.name, m.kdamond_pid) for m in mods] == [("DAMON_RECLAIM", 4242)]


def test_tuned_2_23_layout_searches_etc_then_usr_lib_profiles(make_node) -> None:
    """TuneD >= 2.23 keeps profiles in .../tuned/profiles/<name>; a profile left in the old place is not found."""
    root = make_node("workstation")
    put(root, "/usr/lib/tuned/profiles/balanced/tuned.conf", "[sysctl]\nkernel.numa_balancing=1\n")
    put(root, "/etc/tuned/profiles/balanced/tuned.conf", "[main]\ninclude=balanced\n[sysctl]\nvm.swappiness=5\n")
    put(root, "/etc/tuned/old-place/tuned.conf", "[sysctl]\nkernel.numa_balancing=0\n")
    put(root, "/etc/tuned/active_profile", "balanced old-place\n")
    prof = tuned_profile(open_host(root))
    assert prof.dirs == ("/etc/tuned/profiles", "/usr/lib/tuned/profiles")
    # The customised copy first; it includes its own name, which finds the shipped one next.
    assert prof.files == ["/etc/tuned/profiles/balanced/tuned.conf", "/usr/lib/tuned/profiles/balanced/tuned.conf"]
    assert prof.merged == list(reversed(prof.files))
    assert {(s.key, s.value) for s in prof.settings} == {("kernel.numa_balancing", "1"), ("vm.swappiness", "5")}
    assert prof.problems == ["TuneD profile 'old-place' not found in /etc/tuned/profiles, /usr/lib/tuned/profiles"]


def test_tuned_profile_dirs_from_tuned_main_conf_and_optional_includes(make_node) -> None:
    root = make_node("workstation")
    put(root, "/etc/tuned/tuned-main.conf", "daemon = 1\nprofile_dirs = /usr/lib/tuned/profiles,/opt/site/tuned\n")
    put(root, "/usr/lib/tuned/profiles/site/tuned.conf", "[sysctl]\nkernel.numa_balancing=1\n")
    put(root, "/opt/site/tuned/site/tuned.conf", "[main]\ninclude=-not-installed\n[sysctl]\nkernel.numa_balancing=3\n")
    put(root, "/etc/tuned/active_profile", "site")
    host = open_host(root)
    prof = tuned_profile(host)
    assert prof.dirs == ("/opt/site/tuned", "/usr/lib/tuned/profiles")
    assert prof.files == ["/opt/site/tuned/site/tuned.conf"] and prof.problems == []  # "-name": only if it exists
    assert [s.value for s in setters_of(host, "/proc/sys/kernel/numa_balancing")] == ["3"]


def test_tuned_condition_that_calls_a_function_may_apply(make_node) -> None:
    root = make_node("workstation")
    put(root, "/usr/lib/tuned/virt/tuned.conf",
        "[sysctl]\ncpuinfo_regex=${f:virt_check:guest:host}\nkernel.numa_balancing=0\n")
    put(root, "/etc/tuned/active_profile", "virt")
    host = open_host(root)
    (unit,) = tuned_profile(host).units
    assert unit.applies is None and unit.unmet[0].key == "cpuinfo_regex"
    (s,) = setters_of(host, "/proc/sys/kernel/numa_balancing")
    assert "may not apply here: cpuinfo_regex '${f:virt_check:guest:host}' cannot be evaluated" in s.detail


def test_udev_rule_that_runs_a_command_to_online_memory(make_node) -> None:
    root = make_node("workstation")
    put(root, "/etc/udev/rules.d/99-hotplug.rules", '# online new memory\nSUBSYSTEM=="memory", ACTION=="add", '
        'RUN+="/bin/sh -c \'echo online > /sys$devpath/state\'"\n')
    (rule,) = memory_udev_rules(open_host(root))
    assert (rule.file, rule.line, rule.what) == ("/etc/udev/rules.d/99-hotplug.rules", 2,
                                                 "onlines hot-added memory blocks")


def test_tuned_scheduler_plugin_sets_numa_balancing_scan_debugfs_files(make_node) -> None:
    """TuneD's [scheduler] numa_balancing_scan_* options write the debugfs files nodeagent's scan knobs manage (the
    sysctls they replaced in 5.13 no longer exist); its other scheduler options touch nothing of ours."""
    root = make_node("workstation")
    put(root, "/etc/tuned/numa-scan/tuned.conf", "[main]\nsummary=scan faster\n[scheduler]\n"
        "numa_balancing_scan_period_max_ms=2000\nsched_min_granularity_ns=3000000\n")
    put(root, "/etc/tuned/active_profile", "numa-scan\n")
    host = open_host(root)
    got = setters_of(host, "/sys/kernel/debug/sched/numa_balancing/scan_period_max_ms")
    assert [(s.source, s.key, s.value, s.line) for s in got] == [
        ("tuned", "numa_balancing_scan_period_max_ms", "2000", 4)]
    assert setters_of(host, "/sys/kernel/debug/sched/numa_balancing/scan_size_mb") == []
