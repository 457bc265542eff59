"""coexistence: TuneD (with includes and conditional units), sysctl.d, udev, memhp_default_state, DAMON modules."""

from __future__ import annotations

from tests.checks_helpers import messages, one, set_file

MANAGED = {"kernel": {"numa_balancing": "memory-tiering", "transparent_hugepage": {"enabled": "madvise"}},
           "memory": {"auto_online_blocks": "offline"}}


def test_tuned_conflict_is_named_with_its_file_and_the_conditional_section_is_not(make_node) -> None:
    r = one(make_node("h100-cxl"), "coexistence", {}, **MANAGED)
    assert r.status == "fail"
    text = messages(r)
    assert ("fail: TuneD profile gpu-inference: [vm] transparent_hugepages=always "
            "(/etc/tuned/profiles/gpu-inference/tuned.conf) sets kernel.transparent_hugepage.enabled to always; "
            "the profile wants madvise") in text
    assert "pass: TuneD profile gpu-inference: [sysctl.thunderx] kernel.numa_balancing=0" in text
    assert "not on this node: uname_regex=aarch64 does not match" in text
    assert r.evidence["tuned"]["files"] == ["/usr/lib/tuned/profiles/throughput-performance/tuned.conf",
                                            "/etc/tuned/profiles/gpu-inference/tuned.conf"]


def test_the_thunderx_section_applies_on_a_thunderx(make_node) -> None:
    root = make_node("h100-cxl")
    set_file(root, "/proc/sys/kernel/arch", "aarch64")
    set_file(root, "/proc/cpuinfo", "processor\t: 0\nCPU implementer\t: 0x43\nCPU part\t: 0x0af\n"
             "Features\t: fp asimd\n")
    r = one(root, "coexistence", {}, **MANAGED)
    assert "fail: TuneD profile gpu-inference: [sysctl.thunderx] kernel.numa_balancing=0" in messages(r)


def test_a_site_profile_can_drop_the_conflict(make_node) -> None:
    root = make_node("h100-cxl")
    set_file(root, "/etc/tuned/profiles/gpu-inference/tuned.conf",
             "[main]\ninclude=throughput-performance\n[vm]\ntransparent_hugepages=madvise\n")
    r = one(root, "coexistence", {}, **MANAGED)
    assert r.status == "pass", messages(r)
    assert "agrees with the profile" in messages(r)


def test_missing_tuned_profile_warns(make_node) -> None:
    root = make_node("h100-cxl")
    set_file(root, "/etc/tuned/active_profile", "no-such-profile")
    r = one(root, "coexistence", {}, **MANAGED)
    assert r.status == "warn" and "TuneD profile 'no-such-profile' not found" in messages(r)


def test_sysctl_d_conflict_and_etc_overrides_usr_lib(make_node) -> None:
    root = make_node("l40-kvm64")
    r = one(root, "coexistence", {}, **MANAGED)
    assert r.status == "fail"
    assert ("/etc/sysctl.d/60-vm-image-tuning.conf:2 sets kernel.numa_balancing = 0 at every boot; the profile "
            "wants 2 (memory-tiering)") in messages(r)
    set_file(root, "/usr/lib/sysctl.d/70-tiering.conf", "kernel.numa_balancing = 2\n")
    r = one(root, "coexistence", {}, **MANAGED)
    assert r.status == "pass"  # 70- sorts after 60-: its value (the profile's) is the one the boot leaves
    assert r.evidence["sysctl_d"]["sets"]["kernel.numa_balancing"]["at"] == "/usr/lib/sysctl.d/70-tiering.conf:1"
    assert not any(f.status == "fail" and "sysctl" in f.message for f in r.findings)
    # The same file name in /etc masks the one in /usr/lib.
    set_file(root, "/etc/sysctl.d/70-tiering.conf", "# disabled here\n")
    r = one(root, "coexistence", {}, **MANAGED)
    assert r.evidence["sysctl_d"]["sets"]["kernel.numa_balancing"]["at"].startswith("/etc/sysctl.d/60-")


def test_udev_rules_memhp_and_damon_modules(make_node) -> None:
    root = make_node("workstation")
    assert one(root, "coexistence", {}, **MANAGED).status == "pass"
    set_file(root, "/etc/udev/rules.d/40-memory-hotplug.rules",
             'SUBSYSTEM=="memory", ACTION=="add", ATTR{state}=="offline", ATTR{state}="online"\n')
    set_file(root, "/proc/cmdline", "root=/dev/nvme0n1p2 ro memhp_default_state=online_movable")
    set_file(root, "/sys/module/damon_reclaim/parameters/enabled", "Y")
    r = one(root, "coexistence", {}, **MANAGED)
    assert r.status == "fail"
    text = messages(r)
    assert "fail: /etc/udev/rules.d/40-memory-hotplug.rules:1 onlines hot-added memory blocks itself" in text
    assert "fail: kernel command line memhp_default_state=online_movable hurts" in text
    assert "warn: /sys/module/damon_reclaim/parameters/enabled = Y: DAMON_RECLAIM" in text
    set_file(root, "/proc/cmdline", "root=/dev/nvme0n1p2 ro memhp_default_state=offline")
    assert "memhp_default_state=offline helps" in messages(one(root, "coexistence", {}, **MANAGED))


def test_daxctl_rule_is_inert_without_config_and_active_with_it(make_node) -> None:
    from nodeagent_sim.presets import DAXCTL_UDEV_RULE

    root = make_node("h100-cxl")
    set_file(root, "/usr/lib/udev/rules.d/90-daxctl-device.rules", DAXCTL_UDEV_RULE)
    r = one(root, "coexistence", {}, **{"kernel": {"numa_balancing": "memory-tiering"}})
    assert "has no [reconfigure-device] section, so it changes nothing" in messages(r)
    set_file(root, "/etc/daxctl.conf.d/cxl.conf", "[reconfigure-device cxl0]\nmode = system-ram\nonline = true\n")
    r = one(root, "coexistence", {}, **{"kernel": {"numa_balancing": "memory-tiering"}})
    assert r.status == "warn"
    assert "daxctl reconfigures DAX devices at every boot as /etc/daxctl.conf.d/cxl.conf:1 says" in messages(r)


def test_a_unit_whose_condition_tuned_computes_is_a_warning(make_node) -> None:
    root = make_node("h100-cxl")
    set_file(root, "/etc/tuned/profiles/gpu-inference/tuned.conf",
             "[main]\ninclude=throughput-performance\n[sysctl.guest]\ntype=sysctl\n"
             "cpuinfo_regex=${f:virt_check:hypervisor:nothing}\nkernel.numa_balancing=0\n")
    r = one(root, "coexistence", {}, **MANAGED)
    assert r.status == "warn", messages(r)
    assert ("warn: TuneD profile gpu-inference: [sysctl.guest] kernel.numa_balancing=0 "
            "(/etc/tuned/profiles/gpu-inference/tuned.conf) sets kernel.numa_balancing to 0; the profile wants "
            "2 (memory-tiering) (may apply: cpuinfo_regex") in messages(r)
