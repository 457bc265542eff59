"""The DAX profile section and the pure planning: validation, matching, diffs, refusals and warnings."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

import pytest

from nodeagent.facts import Facts
from nodeagent.facts.dax import DaxDevice, block_ids
from nodeagent.facts.numa import NumaNode
from nodeagent.kinds.base import PlanContext
from nodeagent.kinds.dax import assign, diff_device, plan
from nodeagent.profile import load_profile, load_profile_text
from nodeagent.util.errors import ProfileError

REPO = Path(__file__).resolve().parents[2]
TiB, GiB = 1024**4, 1024**3

HEAD = "apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: t}\n"


def profile(dax_yaml: str, extra: str = "") -> object:
    return load_profile_text(HEAD + extra + "memory:\n  auto_online_blocks: offline\n  dax:\n" + dax_yaml)


def dev(name: str = "dax0.0", node: int = 2, mode: str = "devdax", online: int = 0, zones: dict | None = None,
        size: int = 2 * TiB, total: int = 1024) -> DaxDevice:
    return DaxDevice(name=name, region=int(name[3:].split(".")[0]), size=size, align=2 * 1024**2,
                     resource=TiB * (1 + 2 * int(name[3:].split(".")[0])), target_node=node, numa_node=0, mode=mode,
                     memmap_on_memory=False, blocks_total=total, blocks_present=total if mode == "system-ram" else 0,
                     blocks_online=online, zones=zones or {}, backing="cxl", cxl_region="region0",
                     cxl_memdevs=["mem0"], memmap_bytes=32 * GiB)


def facts(devices: list[DaxDevice], *, knobs: dict | None = None, udev: str | None = None, swap: int = 0,
          daxctl: str | None = "/usr/bin/daxctl", daxctl_conf: list | None = None) -> Facts:
    base = {"memory.auto_online_blocks": "online", "kernel.demotion_enabled": "false"}
    base.update(knobs or {})
    nodes = [NumaNode(0, "0-47", True, True, 512 * GiB, 480 * GiB, 4), NumaNode(1, "48-95", True, True, 512 * GiB,
                                                                             490 * GiB, 4)]
    return Facts(hostname="n", kernel_release="6.12.0", knobs=base, block_size_bytes=2 * GiB,
                 possible_nodes=[0, 1, 2, 3], nodes=nodes, tiers={4: [0, 1]},
                 sections={"dax": {"devices": [asdict(d) for d in devices], "block_size": 2 * GiB, "daxctl": daxctl,
                                   "udev_rule": udev, "daxctl_conf": daxctl_conf or [], "cmdline": {},
                                   "hotplug_params": {}, "swap_total": swap}})


RULE = "    - name: cxl\n      match: {all: true}\n      mode: system-ram\n      zone: movable\n"


# -- the profile section ----------------------------------------------------------------------------------

@pytest.mark.parametrize("rule, message", [
    ("    - name: a\n      match: {devices: [dax0]}\n      mode: system-ram\n      zone: movable\n",
     "memory.dax[0].match.devices[0]: expected a DAX device name such as dax0.0, got 'dax0'"),
    ("    - name: a\n      match: {target_nodes: [-1]}\n      mode: system-ram\n      zone: movable\n",
     "memory.dax[0].match.target_nodes[0]: expected an integer from 0 to 1023, got -1"),
    ("    - name: a\n      match: {devices: []}\n      mode: system-ram\n      zone: movable\n",
     "memory.dax[0].match.devices: expected at least one device, got an empty list"),
    ("    - name: a\n      match: {all: true, dax_regions: [0]}\n      mode: system-ram\n      zone: movable\n",
     "all: true matches every device and cannot be combined with dax_regions"),
    ("    - name: a\n      match: {all: false}\n      mode: devdax\n", "all: false matches no device"),
    ("    - name: a\n      match: {}\n      mode: devdax\n", "a match needs a criterion"),
    ("    - name: a\n      match: {min_size: lots}\n      mode: devdax\n",
     "memory.dax[0].match.min_size: expected a size such as 512MiB, 2TiB or a byte count, got 'lots'"),
    ("    - name: a\n      match: {all: true}\n      mode: system-ram\n", "zone is required with mode system-ram"),
    ("    - name: a\n      match: {all: true}\n      mode: devdax\n      zone: normal\n",
     "zone applies only to mode system-ram"),
    ("    - name: a\n      match: {all: true}\n      mode: system-ram\n      zone: kernel\n",
     "memory.dax[0].zone: expected one of movable, normal, got 'kernel'"),
    ("    - name: a\n      match: {all: true}\n      mode: devdax\n      use: cache\n",
     "memory.dax[0].use: expected one of tiered, pinned-pool, maru, got 'cache'"),
    (RULE + RULE, "two dax rules are named 'cxl'"),
])
def test_invalid_rules_are_named_with_their_position(rule: str, message: str) -> None:
    with pytest.raises(ProfileError) as err:
        profile(rule)
    assert message in str(err.value)
    assert "<inline>:" in str(err.value)


def test_extends_merges_dax_rules_by_name(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text(HEAD + "memory:\n  dax:\n" + RULE +
                                        "    - name: other\n      match: {devices: [dax9.0]}\n      mode: devdax\n")
    (tmp_path / "child.yaml").write_text(HEAD.replace("name: t", "name: c") + "extends: [base.yaml]\nmemory:\n"
                                         "  dax:\n    - name: cxl\n      zone: normal\n      use: pinned-pool\n")
    rules = load_profile(tmp_path / "child.yaml").profile.memory.dax
    assert [r.name for r in rules] == ["cxl", "other"]
    assert (rules[0].mode, rules[0].zone, rules[0].use) == ("system-ram", "normal", "pinned-pool")


def test_shipped_profiles_state_their_zone_and_use() -> None:
    tiered = load_profile(REPO / "profiles" / "cxl-inference.yaml").profile.memory
    pool = load_profile(REPO / "profiles" / "cxl-kv-pool.yaml").profile.memory
    assert [(r.zone, r.use) for r in tiered.dax] == [("movable", "tiered")]
    assert [(r.zone, r.use) for r in pool.dax] == [("normal", "pinned-pool")]
    assert tiered.auto_online_blocks == pool.auto_online_blocks == "offline"


# -- matching ------------------------------------------------------------------------------------------------

def test_first_matching_rule_decides_and_unused_rules_are_found() -> None:
    loaded = profile("    - name: big\n      match: {min_size: 1TiB, target_nodes: [3]}\n      mode: devdax\n"
                     + RULE + "    - name: never\n      match: {dax_regions: [7]}\n      mode: devdax\n")
    devices = [dev("dax0.0", node=2), dev("dax1.0", node=3), dev("dax2.0", node=4, size=512 * GiB)]
    chosen, unused = assign(loaded.profile.memory.dax, devices)
    assert {n: r.name for n, r in chosen.items()} == {"dax0.0": "cxl", "dax1.0": "big", "dax2.0": "cxl"}
    assert [r.name for r in unused] == ["never"]


def test_block_ids_round_inwards_like_kmem() -> None:
    # The real qemu-3node device: 1006 MiB at 0x181200000 with 128 MiB blocks -> memory49..memory55.
    assert list(block_ids(0x181200000, 1054867456, 128 * 1024**2)) == list(range(49, 56))


# -- diffs ---------------------------------------------------------------------------------------------------

def rule_of(zone: str = "movable", mode: str = "system-ram"):  # type: ignore[no-untyped-def]
    text = f"    - name: r\n      match: {{all: true}}\n      mode: {mode}\n" + (
        f"      zone: {zone}\n" if mode == "system-ram" else "")
    return profile(text).profile.memory.dax[0]


@pytest.mark.parametrize("device, want, op, steps, disruptive", [
    (dev(mode="devdax"), rule_of("movable"), "reconfigure", ("to-system-ram",), False),
    (dev(mode="disabled"), rule_of("normal"), "reconfigure", ("to-system-ram",), False),
    (dev(mode="system-ram", online=0), rule_of("movable"), "online", ("online",), False),
    (dev(mode="system-ram", online=512, zones={"Movable": 512}), rule_of("movable"), "online", ("online",), False),
    (dev(mode="system-ram", online=1024, zones={"Normal": 1024}), rule_of("movable"), "rezone", ("offline", "online"),
     True),
    (dev(mode="system-ram", online=512, zones={"Movable": 512}), rule_of("normal"), "rezone", ("offline", "online"),
     True),
    (dev(mode="system-ram", online=1024, zones={"Movable": 1024}), rule_of(mode="devdax"), "reconfigure",
     ("offline", "to-devdax"), True),
    (dev(mode="system-ram", online=0), rule_of(mode="devdax"), "reconfigure", ("to-devdax",), False),
    (dev(mode="disabled"), rule_of(mode="devdax"), "reconfigure", ("to-devdax",), False),
])
def test_diff_device(device: DaxDevice, want, op: str, steps: tuple, disruptive: bool) -> None:  # type: ignore[no-untyped-def]
    change = diff_device(want, device)
    assert change is not None and not hasattr(change, "blocking")
    assert (change.op, change.detail("steps"), change.disruptive) == (op, steps, disruptive)


@pytest.mark.parametrize("device, want", [
    (dev(mode="system-ram", online=1024, zones={"Movable": 1024}), rule_of("movable")),
    (dev(mode="system-ram", online=1024, zones={"Normal": 1024}), rule_of("normal")),
    (dev(mode="devdax"), rule_of(mode="devdax")),
])
def test_converged_device_plans_nothing(device: DaxDevice, want) -> None:  # type: ignore[no-untyped-def]
    assert diff_device(want, device) is None


def test_device_bound_to_another_driver_is_reported_not_touched() -> None:
    problem = diff_device(rule_of(), dev(mode="dax_hmem"))
    assert problem is not None and getattr(problem, "blocking", True) is False
    assert "bound to driver dax_hmem" in problem.message


# -- plan-level refusals and advisories -------------------------------------------------------------------

def test_plan_reports_a_rule_that_matches_nothing_with_its_position() -> None:
    loaded = profile(RULE + "    - name: ghost\n      match: {devices: [dax7.0]}\n      mode: devdax\n")
    rp = plan(loaded, facts([dev()]), PlanContext())
    assert any("rule 'ghost' (<inline>:" in w and "matches no DAX device" in w and "dax0.0 (2TiB, node 2)" in w
               for w in rp.warnings)


def test_plan_needs_daxctl_before_anything_is_written() -> None:
    rp = plan(profile(RULE), facts([dev()], daxctl=None), PlanContext())
    assert [p.target for p in rp.problems if p.blocking] == ["daxctl"]
    assert "apt install daxctl" in (rp.problems[0].hint or "")


def test_plan_refuses_to_race_the_kernels_auto_online_policy() -> None:
    no_policy = load_profile_text(HEAD + "memory:\n  dax:\n" + RULE)
    rp = plan(no_policy, facts([dev()]), PlanContext())
    assert [p.target for p in rp.problems] == ["memory.auto_online_blocks"]
    assert "exit 240" in rp.problems[0].message and "auto_online_blocks: offline" in (rp.problems[0].hint or "")
    # With the profile setting it (the knob is applied first), the same node plans cleanly.
    assert plan(profile(RULE), facts([dev()]), PlanContext()).problems == []


def test_disruptive_change_says_it_needs_the_flag() -> None:
    device = dev(mode="system-ram", online=1024, zones={"Normal": 1024})
    refused = plan(profile(RULE), facts([device]), PlanContext()).changes[0]
    allowed = plan(profile(RULE), facts([device]), PlanContext(allow_disruptive=True)).changes[0]
    assert refused.disruptive and "not done without --allow-disruptive" in refused.reason
    assert "--allow-disruptive" not in allowed.reason and "unmovable pages may refuse (EBUSY)" in allowed.reason


def test_plan_warns_when_zone_and_use_disagree() -> None:
    loaded = profile("    - name: pool\n      match: {all: true}\n      mode: system-ram\n      zone: movable\n"
                     "      use: pinned-pool\n")
    warnings = plan(loaded, facts([dev()]), PlanContext()).warnings
    assert any("'pool' is for a pinned pool but puts it in ZONE_MOVABLE" in w for w in warnings)
    loaded = profile("    - name: tier\n      match: {all: true}\n      mode: system-ram\n      zone: normal\n"
                     "      use: tiered\n")
    warnings = plan(loaded, facts([dev()]), PlanContext()).warnings
    assert any("'tier' is for tiered (pageable) memory but onlines it in ZONE_NORMAL" in w for w in warnings)


def test_plan_warns_of_oom_with_movable_memory_and_no_demotion_or_swap() -> None:
    warn = "can run out of memory with this memory free"
    assert any(warn in w for w in plan(profile(RULE), facts([dev()]), PlanContext()).warnings)
    with_demotion = profile(RULE, extra="kernel:\n  demotion_enabled: true\n")
    assert not any(warn in w for w in plan(with_demotion, facts([dev()]), PlanContext()).warnings)
    assert not any(warn in w for w in plan(profile(RULE), facts([dev()], swap=GiB), PlanContext()).warnings)


def test_plan_advises_the_lasting_fix_for_memory_onlined_at_boot() -> None:
    device = dev(mode="system-ram", online=1024, zones={"Normal": 1024})
    warnings = plan(profile(RULE), facts([device]), PlanContext()).warnings
    assert any("memhp_default_state=offline" in w and "does not edit the boot loader" in w for w in warnings)
    owned = PlanContext(state={"ownership": {"dax": {"dax0.0": {"zone": "Normal"}}}})
    assert not any("memhp_default_state" in w for w in plan(profile(RULE), facts([device]), owned).warnings)


def test_plan_reports_the_daxctl_udev_rule_as_a_second_agent() -> None:
    inert = facts([dev()], udev="/lib/udev/rules.d/90-daxctl-device.rules")
    assert not any("90-daxctl" in w for w in plan(profile(RULE), inert, PlanContext()).warnings)
    f = facts([dev()], udev="/lib/udev/rules.d/90-daxctl-device.rules",
              daxctl_conf=[{"section": "reconfigure-device cxl0", "file": "/etc/daxctl.conf.d/cxl.conf"}])
    warnings = plan(profile(RULE), f, PlanContext()).warnings
    assert any(w.startswith("/lib/udev/rules.d/90-daxctl-device.rules runs `daxctl reconfigure-device "
                            "--check-config`") and "second agent" in w for w in warnings)


def test_memmap_cost_is_in_the_reason() -> None:
    change = plan(profile(RULE), facts([dev()]), PlanContext()).changes[0]
    assert "struct pages take 32GiB of DRAM (memmap_on_memory is not in effect)" in change.reason
    on_device = replace(dev(), memmap_on_memory=True, memmap_bytes=0)
    assert "struct pages" not in plan(profile(RULE), facts([on_device]), PlanContext()).changes[0].reason


def test_device_smaller_than_a_block_cannot_become_system_ram() -> None:
    problem = diff_device(rule_of(), dev(size=64 * 1024**2, total=0))
    assert problem is not None and "does not span one whole memory block" in problem.message


# -- revert: back to the recorded original ----------------------------------------------------------------

def test_revert_change_puts_a_device_back_as_recorded() -> None:
    from nodeagent.kinds.dax import revert_change
    from nodeagent.state import Original

    online = dev(mode="system-ram", online=1024, zones={"Movable": 1024})
    rec = Original("dax", None, {"mode": "devdax", "zone": None, "zones": {}, "online": 0, "blocks": 1024}, "t")
    ch = revert_change(online, rec)
    assert (ch.op, ch.detail("steps"), ch.disruptive, ch.after_label) == ("revert", ("offline", "to-devdax"), True,
                                                                          "devdax")
    assert revert_change(dev(), rec) is None  # already devdax
    normal = Original("dax", None, {"mode": "system-ram", "zone": "Normal", "zones": {"Normal": 1024}, "online": 1024,
                                    "blocks": 1024})
    ch = revert_change(online, normal)
    assert (ch.detail("steps"), ch.detail("zone"), ch.disruptive) == (("offline", "online"), "Normal", True)
    partly = Original("dax", None, {"mode": "system-ram", "zone": "Normal", "zones": {"Normal": 10}, "online": 10,
                                    "blocks": 1024})
    with pytest.raises(ValueError, match="restores only devdax or system-ram fully online in one zone"):
        revert_change(online, partly)
