"""CXL regions as a managed kind, on the simulator's CXL nodes: plan, apply in the kernel's order, idempotence,
rebuilds gated like offlining, revert, drift, the boot apply by serial, ``--device memN``, and every impossible
request ending in one message with the profile's file:line and the fix."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel, create

from nodeagent.engine.core import Engine
from nodeagent.facts.cxl import from_facts as cxl_of
from nodeagent.facts.dax import from_facts as dax_of
from nodeagent.host import open_host
from nodeagent.kinds.cxl_region.wait import wait_for_memdevs
from nodeagent.profile import load_profile
from nodeagent.state import Ownership, StateStore
from nodeagent.util.errors import ProfileError

S1, S2 = 0x4C454F0001, 0x4C454F0002  # qemu-cxl: mem1 and mem0
DAX = "  dax:\n    - {name: all, match: {all: true}, mode: system-ram, zone: movable}\n"


def profile(tmp: Path, regions: str, *, dax: str = DAX, online: str = "offline") -> Path:
    rules = textwrap.indent(textwrap.dedent(regions), "      ")
    text = ("apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: t}\nmemory:\n"
            f"  auto_online_blocks: {online}\n  cxl:\n    regions:\n{rules}{dax}")
    path = tmp / "p.yaml"
    path.write_text(text)
    return path


def node(tmp: Path, preset: str = "qemu-cxl", name: str = "n") -> Path:
    return create(tmp / name, preset)


def regions(root: Path) -> dict[tuple[int, ...], tuple[int, int, bool]]:
    eng = Engine(open_host(root))
    from nodeagent.facts import gather

    c = cxl_of(gather(eng.host))
    serial = {m.name: m.serial for m in c.memdevs}
    return {tuple(serial[m] for m in r.memdevs): (r.interleave_ways, r.interleave_granularity, r.committed)
            for r in c.regions}


def apply(root: Path, path: Path, **kw):  # type: ignore[no-untyped-def]
    return Engine(open_host(root)).apply(load_profile(path), skip_checks=frozenset({"all"}), **kw)


def plan(root: Path, path: Path, **kw):  # type: ignore[no-untyped-def]
    return Engine(open_host(root)).plan(load_profile(path), **kw)


# -- the default rule ----------------------------------------------------------------------------------------

def test_every_bare_memdev_gets_a_ram_region_online_movable_and_a_second_plan_is_empty(tmp_path: Path) -> None:
    root = node(tmp_path)
    p = profile(tmp_path, "- {name: each, memdevs: {without_region: true}}\n")
    first = plan(root, p)
    assert [(c.kind, c.op) for c in first.changes if c.kind != "knob"] == [("cxl_region", "create"),
                                                                           ("cxl_region", "online")] * 2
    creates = [c for c in first.changes if c.op == "create"]
    assert [c.detail("serials") for c in creates] == [(S1,), (S2,)]
    assert all(c.requires == ("memory.auto_online_blocks",) for c in creates)
    # what a change concerns is in its fields: the memdev, the region it makes, the DAX device that region gets
    assert [c.devices for c in creates] == [("mem1", "region0", "dax0.0"), ("mem0", "region1", "dax1.0")]
    onlines = [c for c in first.changes if c.op == "online"]
    assert [c.needs for c in onlines] == [(c.target,) for c in creates] and all(c.nodes for c in onlines)
    # the DAX rule decides the devices the regions will have: it is not said to match nothing
    assert not [w for w in first.warnings if "matches no DAX device" in w], first.warnings
    result = apply(root, p)
    assert result.status == "converged", result.verify_errors
    assert regions(root) == {(S1,): (1, 256, True), (S2,): (1, 256, True)}
    from nodeagent.facts import gather

    devs = dax_of(gather(open_host(root))).devices
    assert [(d.mode, d.zones, d.target_node) for d in devs] == [("system-ram", {"Movable": 2}, 2)] * 2
    again = plan(root, p)
    assert again.changes == () and not again.problems
    owned = json.loads((root / "var/lib/nodeagent/ownership.json").read_text())["cxl_region"]
    assert sorted(owned) == [f"{S1:#x}", f"{S2:#x}"] and owned[f"{S1:#x}"]["rule"] == "each"


def test_memdevs_without_serials_are_known_by_their_pci_function(tmp_path: Path) -> None:
    root = node(tmp_path)
    for mem in ("mem0", "mem1"):  # QEMU without sn=, or a device without a Device Serial Number: serial 0
        _edit(root, f"/sys/bus/cxl/devices/{mem}/serial", "0x0")
    p = profile(tmp_path, "- {name: each, memdevs: {without_region: true}}\n")
    first = plan(root, p)
    assert [c.target for c in first.changes if c.op == "create"] == ["region@pci:0000:0d:00.0",
                                                                     "region@pci:0000:0e:00.0"]
    assert sum("knows it by its PCI function" in w for w in first.warnings) == 2
    result = apply(root, p)
    assert result.status == "converged", result.verify_errors
    from nodeagent.facts import gather

    assert len(cxl_of(gather(open_host(root))).regions) == 2 and plan(root, p).changes == ()


def test_a_dax_rule_that_no_device_the_plan_makes_matches_is_still_said(tmp_path: Path) -> None:
    """Only the rules that decide a device the regions will have are quiet: a rule for a node 7 that no region
    lands in still matches nothing, with the node's inventory."""
    root = node(tmp_path)
    dax = DAX + "    - {name: ghost, match: {target_nodes: [7]}, mode: devdax}\n"
    first = plan(root, profile(tmp_path, "- {name: each, memdevs: {without_region: true}}\n", dax=dax))
    said = [w for w in first.warnings if "matches no DAX device" in w]
    assert len(said) == 1 and "rule 'ghost'" in said[0] and "(it has none)" in said[0], first.warnings


def test_the_shipped_profiles_change_nothing_where_the_regions_exist(tmp_path: Path) -> None:
    root = node(tmp_path, "h100-cxl-committed")
    for name in ("cxl-inference", "cxl-kv-pool"):
        p = plan(root, Path(__file__).parents[2] / "profiles" / f"{name}.yaml")
        assert [c for c in p.changes if c.kind == "cxl_region"] == [] and not [x for x in p.problems
                                                                              if x.kind == "cxl_region"]


def test_an_interleave_set_by_serial_in_position_order(tmp_path: Path) -> None:
    root = node(tmp_path)
    p = profile(tmp_path, f"- {{name: pair, memdevs: {{serials: [{S2:#x}, {S1:#x}]}}, ways: 2}}\n")
    result = apply(root, p)
    assert result.status == "converged", result.verify_errors
    assert regions(root) == {(S2, S1): (2, 256, True)}
    assert plan(root, p).changes == ()


def tear_down_region0(root: Path) -> SimKernel:
    """Someone else tears region0 (mem1's, decoder3.0) down, in the kernel's order."""
    k = SimKernel(root)
    for path, value in (("/sys/bus/cxl/devices/region0/commit", "0"), ("/sys/bus/cxl/devices/region0/target0", "\n"),
                        ("/sys/bus/cxl/devices/region0/size", "0"), ("/sys/bus/cxl/devices/decoder3.0/dpa_size", "0"),
                        ("/sys/bus/cxl/devices/decoder0.0/delete_region", "region0")):
        k.write(path, value)
    return k


# -- rebuilds, revert, drift ---------------------------------------------------------------------------------

def test_a_differing_region_is_a_disruptive_rebuild_torn_down_in_the_kernels_order(tmp_path: Path) -> None:
    root = node(tmp_path)
    apply(root, profile(tmp_path, f"- {{name: one, memdevs: {{serials: [{S1:#x}]}}}}\n"))
    wider = profile(tmp_path, f"- {{name: one, memdevs: {{serials: [{S1:#x}]}}, granularity: 1024}}\n")
    p = plan(root, wider)
    ops = [(c.op, c.disruptive) for c in p.changes if c.kind == "cxl_region"]
    assert ops == [("delete", True), ("create", True), ("online", True)]  # the new one waits for the teardown
    assert "--allow-disruptive" in p.changes[0].reason
    blocked = apply(root, wider)
    assert [o.status for o in blocked.outcomes if o.change.kind == "cxl_region"] == ["blocked"] * 3
    assert regions(root) == {(S1,): (1, 256, True)}
    done = apply(root, wider, allow_disruptive=True)
    assert done.status == "converged", done.verify_errors
    assert regions(root) == {(S1,): (1, 1024, True)}
    writes = [json.loads(line) for line in (root / ".nodeagent-machine" / "writes.log").read_text().splitlines()]
    teardown = [w["path"].rsplit("/", 1)[1] for w in writes if w["result"] == "ok"]
    teardown = teardown[teardown.index("commit", teardown.index("commit") + 1):]  # after the first region's commit
    order = [a for a in teardown if a in ("commit", "target0", "size", "dpa_size", "delete_region")][:5]
    assert order == ["commit", "target0", "size", "dpa_size", "delete_region"]


def test_revert_tears_down_the_regions_nodeagent_made(tmp_path: Path) -> None:
    root = node(tmp_path)
    p = profile(tmp_path, "- {name: each, memdevs: {without_region: true}}\n")
    apply(root, p)
    eng = Engine(open_host(root))
    assert sorted(eng.state.ownership().regions) == [f"{S1:#x}", f"{S2:#x}"]
    rp = eng.revert_plan()
    mine = [c for c in rp.changes if c.kind == "cxl_region"]
    assert [c.op for c in mine] == ["revert", "revert"] and all(c.disruptive for c in mine)
    assert [c.revert_of for c in mine] == [f"region@{S1:#x}", f"region@{S2:#x}"]
    assert {"mem1", "region0", "dax0.0"} <= set(mine[0].devices)
    held = eng.revert()  # the one executor's disruptive gate: nothing torn down without --allow-disruptive
    assert {o.status for o in held.outcomes if o.change.kind == "cxl_region"} == {"blocked"} and len(regions(root)) == 2
    result = eng.revert(allow_disruptive=True)
    assert result.ok, (result.outcomes, result.verify_errors)
    assert regions(root) == {}
    assert not eng.state.ownership() and not eng.state.originals().items  # no record left of regions or DAX devices
    assert "cxl_region" not in json.loads((root / "var/lib/nodeagent/ownership.json").read_text())
    # drift understands the revert: the regions and their DAX devices are put back, not drift
    from nodeagent.drift import detect

    report = detect(eng, load_profile(p))
    assert report.items == () and {i.target for i in report.reverted} >= {f"region@{S1:#x}", "dax0.0"}
    assert all(c.source == "revert" for i in report.reverted for c in i.causes)


def test_revert_forgets_a_region_nodeagent_made_that_is_gone_already(tmp_path: Path) -> None:
    """The generic clean-up after a revert drops the region's ownership record through the kind's ``forget``,
    also when there was nothing to tear down."""
    root = node(tmp_path)
    apply(root, profile(tmp_path, f"- {{name: one, memdevs: {{serials: [{S1:#x}]}}}}\n", dax=""))
    tear_down_region0(root)
    eng = Engine(open_host(root))
    assert [c for c in eng.revert_plan().changes if c.kind == "cxl_region"] == []
    assert eng.revert().ok
    assert not eng.state.ownership().regions and f"region@{S1:#x}" not in eng.state.originals().items


def test_drift_reports_a_region_that_is_gone(tmp_path: Path) -> None:
    from nodeagent.drift import detect

    root = node(tmp_path)
    p = profile(tmp_path, f"- {{name: one, memdevs: {{serials: [{S1:#x}]}}}}\n", dax="")
    apply(root, p)
    tear_down_region0(root)
    report = detect(Engine(open_host(root)), load_profile(p))
    assert [(i.resource, i.target) for i in report.items] == [("cxl_region", f"region@{S1:#x}")]
    (item,) = report.items
    assert [c.source for c in item.causes] == ["cxl-region"] and "torn down outside nodeagent" in item.causes[0].message


def test_drift_reports_a_region_nodeagent_made_that_was_made_again_differently(tmp_path: Path) -> None:
    from nodeagent_sim.cxl import create_region

    from nodeagent.drift import detect

    root = node(tmp_path)
    p = profile(tmp_path, "- {name: each, memdevs: {without_region: true}}\n", dax="")
    apply(root, p)
    k = tear_down_region0(root)
    create_region(k, "decoder0.0", ["decoder3.0"], 256 << 20, granularity=4096)  # by hand, another granularity
    report = detect(Engine(open_host(root)), load_profile(p))
    assert {(i.resource, i.target) for i in report.items} == {("cxl_region", f"region@{S1:#x}")}  # rebuild
    assert any("made or changed outside nodeagent" in c.message for i in report.items for c in i.causes)
    (change,) = [c for c in plan(root, p).changes if c.op == "delete"]
    assert "4096B" in change.before_label and change.disruptive is False  # its DAX memory is not online


# -- the boot apply and hot-plug -------------------------------------------------------------------------------

@pytest.mark.parametrize("again", ["qemu-cxl-rp0first", "qemu-cxl-ep-swapped", "qemu-cxl-rp0first-ep-swapped"])
def test_after_a_reboot_in_the_other_probe_order_the_regions_come_back_by_serial(tmp_path: Path, again: str) -> None:
    first = node(tmp_path, "qemu-cxl", "boot1")
    p = profile(tmp_path, "- {name: each, memdevs: {without_region: true}}\n")
    apply(first, p)
    second = node(tmp_path, again, "boot2")  # mem0, or endpoint2, is the other memdev's now
    shutil.copytree(first / "var/lib/nodeagent", second / "var/lib/nodeagent", dirs_exist_ok=True)
    assert wait_for_memdevs(open_host(second), load_profile(p), StateStore(open_host(second)).ownership(),
                            5) == (set(), pytest.approx(0, abs=2))
    result = apply(second, p)
    assert result.status == "converged", result.verify_errors
    assert regions(second) == regions(first)


def test_the_boot_wait_gives_up_on_a_missing_serial_and_the_plan_says_which(tmp_path: Path) -> None:
    root = node(tmp_path)
    p = profile(tmp_path, f"- {{name: pair, memdevs: {{serials: [{S1:#x}, 0x99]}}, ways: 2}}\n")
    ticks = iter(range(1000))
    missing, waited = wait_for_memdevs(open_host(root), load_profile(p), Ownership(), 30, clock=lambda: next(ticks),
                                       sleep=lambda s: None)
    assert missing == {0x99} and 30 <= waited <= 31
    pl = plan(root, p)
    assert [c for c in pl.changes if c.kind == "cxl_region"] == []  # no half set
    (prob,) = [x for x in pl.problems if x.kind == "cxl_region"]
    assert "serial 0x99 is not on this node" in prob.message and f"{p}:" in prob.message and prob.hint


def test_one_region_per_memdev_is_made_for_the_memdevs_that_are_there(tmp_path: Path) -> None:
    root = node(tmp_path)
    pl = plan(root, profile(tmp_path, f"- {{name: each, memdevs: {{serials: [0x99, {S1:#x}]}}}}\n"))
    assert [c.target for c in pl.changes if c.op == "create"] == [f"region@{S1:#x}"]
    assert ["serial 0x99 is not on this node" in x.message for x in pl.problems] == [True]


def test_apply_device_memN_plans_that_memdevs_region(tmp_path: Path) -> None:
    root = node(tmp_path)
    p = profile(tmp_path, "- {name: each, memdevs: {without_region: true}}\n")
    result = apply(root, p, scope=["mem1"])
    assert [(o.change.target, o.status) for o in result.outcomes] == [("memory.auto_online_blocks", "applied"),
                                                                      (f"region@{S1:#x}", "applied"),
                                                                      ("dax0.0", "applied")]
    assert regions(root) == {(S1,): (1, 256, True)}


def test_device_scope_reads_the_region_changes_fields_not_their_data(tmp_path: Path) -> None:
    from dataclasses import replace

    from nodeagent.engine.scope import restrict

    root = node(tmp_path)
    pl = plan(root, profile(tmp_path, "- {name: each, memdevs: {without_region: true}}\n"))
    bare = replace(pl, changes=tuple(replace(c, data=()) for c in pl.changes))  # what only apply reads, gone
    for p in (pl, bare):
        assert [c.target for c in restrict(p, {"mem0"}).changes] == ["memory.auto_online_blocks", f"region@{S2:#x}",
                                                                     "dax1.0"]
        assert [c.target for c in restrict(p, {"dax0.0"}).changes] == ["memory.auto_online_blocks", f"region@{S1:#x}",
                                                                       "dax0.0"]


# -- what cannot be done: one message with file:line and the fix ----------------------------------------------

@pytest.mark.parametrize(("regions_yaml", "words"), [
    ("- {name: z, memdevs: {serials: [0]}}\n", "serial 0 is what a device without a serial number reports"),
    ("- {name: d, memdevs: {serials: [0x1, 0x1]}, ways: 2}\n", "serial 0x1 is listed twice"),
    ("- {name: w, memdevs: {serials: [0x1, 0x2]}, ways: 4}\n", "ways: 4 interleaves 4 memdevs"),
    ("- {name: w, memdevs: {serials: [0x1]}, ways: 5}\n", "expected interleave ways of 1, 2, 3, 4, 6, 8, 12, 16"),
    ("- {name: g, memdevs: {serials: [0x1]}, granularity: 300}\n", "a power of two from 256 to 16384"),
    ("- {name: s, memdevs: {serials: [0x1], without_region: true}}\n", "exactly one of serials"),
    ("- {name: a, memdevs: {serials: [0x1]}}\n- {name: b, memdevs: {serials: [0x1]}}\n", "is in rules 'a' and 'b'"),
])
def test_a_bad_region_rule_is_a_profile_error_with_file_and_line(tmp_path: Path, regions_yaml: str,
                                                                  words: str) -> None:
    with pytest.raises(ProfileError) as err:
        load_profile(profile(tmp_path, regions_yaml))
    (line,) = err.value.errors
    assert words in line and line.startswith(f"{tmp_path / 'p.yaml'}:") and "memory.cxl.regions" in line


def _edit(root: Path, bus_path: str, value: str) -> None:
    """Change what the node's firmware gave (a fixture of the simulated hardware, not a kernel write)."""
    import os

    real = os.path.realpath(root / bus_path.lstrip("/"))
    Path(real).write_text(value + "\n")


@pytest.mark.parametrize(("preset", "setup", "regions_yaml", "words", "fix"), [
    ("qemu-cxl", None, "- {name: x, memdevs: {serials: [0x123]}}\n", "serial 0x123 is not on this node",
     "correct the serial"),
    ("qemu-cxl", [("/sys/bus/cxl/devices/mem0/serial", f"{S1:#x}")],
     f"- {{name: x, memdevs: {{serials: [{S1:#x}]}}}}\n", "is reported by mem0, mem1", "distinct serial numbers"),
    ("h100-cxl-memdevs", None, "- {name: x, memdevs: {serials: [0x1d7e0000a001, 0x1d7e0000a002]}, ways: 2}\n",
     "decoder0.0 interleaves pci0000:30, not pci0000:b0", "change ways or granularity"),
    ("qemu-cxl", [("/sys/bus/cxl/devices/decoder0.0/size", "0x10000000")],
     "- {name: x, memdevs: {without_region: true}}\n", "has no 256MiB free", "free room"),
    ("qemu-cxl", [("/sys/bus/cxl/devices/decoder0.0/interleave_granularity", "1024")],
     f"- {{name: x, memdevs: {{serials: [{S1:#x}]}}, granularity: 512}}\n",
     "granularity 512 is below decoder0.0's 1024", "change ways or granularity"),
    ("qemu-cxl", "dpa", f"- {{name: x, memdevs: {{serials: [{S2:#x}]}}}}\n", "allocated to an endpoint decoder outside",
     "dpa_size"),
    ("qemu-cxl", None, "- {name: x, memdevs: {without_region: true}, ways: 3}\n", "left over: ways 3",
     "add the missing memdevs"),
])
def test_an_impossible_request_is_a_plan_problem_with_file_line_and_fix(  # type: ignore[no-untyped-def]
        tmp_path: Path, preset: str, setup, regions_yaml: str, words: str, fix: str) -> None:
    root = node(tmp_path, preset)
    if setup == "dpa":  # DPA allocated on mem0's first decoder, then left outside any region
        k = SimKernel(root)
        k.write("/sys/bus/cxl/devices/decoder2.0/mode", "ram")
        k.write("/sys/bus/cxl/devices/decoder2.0/dpa_size", str(256 << 20))
    else:
        for path, value in setup or ():
            _edit(root, path, value)
    p = profile(tmp_path, regions_yaml)
    pl = plan(root, p)
    probs = [x for x in pl.problems if x.kind == "cxl_region"]
    assert len(probs) == 1, [x.message for x in pl.problems]
    assert words in probs[0].message and f"{p}:" in probs[0].message and fix in (probs[0].hint or "")
    assert len({c.target for c in pl.changes if c.kind == "cxl_region" and c.op == "create"}) < 2 or "free" in words


def test_auto_online_left_online_is_a_problem_before_any_region_is_made(tmp_path: Path) -> None:
    root = node(tmp_path)
    pl = plan(root, profile(tmp_path, "- {name: each, memdevs: {without_region: true}}\n", online="online"))
    assert any(x.target == "memory.auto_online_blocks" and x.blocking for x in pl.problems)
