"""Real CXL end to end: bare memdevs → ``apply profiles/cxl-inference.yaml`` → committed regions, their DAX devices
online in ZONE_MOVABLE on a CPU-less node, kdamonds over it, an empty second plan — and after a reboot (a second
boot of the same layout, nodeagent's state directory kept as a disk keeps it) the boot unit's apply makes them
again, from the memdevs' serials. The same steps run on the simulator's ``qemu-cxl`` preset (in the probe order
each boot of the guest had), and each step must agree. The profile applied is the shipped one with its demotion
capped at 4 KiB/s (``tcg_profile``: under TCG the guest's own pages must stay off emulated CXL memory).

The two-host-bridge shape (layout ``cxl-2hb``: one memdev per host bridge, a window per bridge and one over both,
an SRAT node below the windows' nodes) gets one boot of its own: one apply converges, the regions land on the
nodes the plan named, the second plan and apply are empty, and the simulator's ``qemu-cxl-2hb`` agrees.

Cost: two boots of the ``cxl`` layout and one of ``cxl-2hb`` (QEMU 10, TCG), ~5-8 min in all on 2 shared cores.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import harness
import pytest
import yaml
from worlds import (
    CXL_LAYOUT,
    CXL_MODULES,
    CXL_MODULES_2HB,
    Agent,
    Dump,
    Outcome,
    Setup,
    assert_same,
    cxl_2hb_preset,
    cxl_preset,
    cxl_shape,
    cxl_sim_root,
    dump_summary,
    run_guest,
    run_sim,
)

from nodeagent.facts.cxl import from_dict

SHIPPED = harness.REPO_ROOT / "profiles" / "cxl-inference.yaml"
#: the applies skip the checks: the guest's virtual CPU and disk fail the profile's checks
APPLY = "apply --yes --skip-checks all {profile}"
#: what the boot unit (nodeagent-apply.service) runs, with the checks skipped as above
BOOT_APPLY = "apply --yes --skip-checks all --wait-memdevs 60s {profile}"


def tcg_profile(dest: Path) -> Path:
    """The shipped profile with its demotion capped at 4 KiB/s, written to ``dest/profiles`` (beside base.yaml).

    Under TCG emulated CXL memory is MMIO to QEMU: every access, instruction fetch and atomic on it takes the slow
    path. At 1 GiB/s the shipped profile's demotion moves the guest's own idle pages there (its shells, the page
    cache of python and nodeagent) within seconds, and a later step could then run for more than the 600 s bound
    (seen in CI, in `plan` after the boot apply). The regions, DAX onlining, kdamonds and plans this scenario checks
    are the shipped profile's all the same; what DAMON does to the pages is the placement benchmark's business,
    on a layout whose slow tier is RAM to QEMU."""
    doc = yaml.safe_load(SHIPPED.read_text())
    capped = 0
    for kd in doc["damon"]["kdamonds"]:
        for scheme in kd["schemes"]:
            if scheme["action"] == "migrate_cold":
                scheme["quota"]["size"] = "4KiB"
                capped += 1
    assert capped, "the shipped profile has no migrate_cold scheme to cap"
    out = dest / "profiles"
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(SHIPPED.parent / "base.yaml", out / "base.yaml")
    (out / SHIPPED.name).write_text(yaml.safe_dump(doc, sort_keys=False))
    return out / SHIPPED.name
STATE = "/var/lib/nodeagent"
SERIALS = {0x4C454F0001, 0x4C454F0002}

#: not nodeagent's: QEMU's emulation of what the shipped profile makes likely (harness.LAYOUTS["cxl"])
STRADDLE = "fpstate-straddle"


def boot1(straddle: Path, profile: Path) -> list[Any]:
    return [
        CXL_MODULES,
        CXL_LAYOUT,
        Agent("facts-bare", "facts"),
        Agent("plan-bare", f"plan {profile}"),
        Agent("apply", APPLY.format(profile=profile)),
        Agent("plan-again", f"plan {profile}"),
        Agent("apply-again", APPLY.format(profile=profile)),
        Agent("facts-applied", "facts"),
        Dump("dump-applied"),
        # FPU state saved across a page of node 0 and a page of the CXL node the apply onlined (the guest only)
        Setup(STRADDLE, f"{straddle} $(cat /sys/bus/dax/devices/dax*/target_node | head -n1)"),
        # what survives the reboot: nodeagent's state directory (on disk on a real node; the guest's root is tmpfs)
        Setup("state", f"tar -C / -c {STATE.lstrip('/')} | base64 -w0"),
    ]


def boot2(state_b64: str, profile: Path) -> list[Any]:
    return [
        Setup("restore", f"mkdir -p {STATE} && echo {state_b64} | base64 -d | tar -C / -x"),
        CXL_MODULES,
        Agent("facts-boot", "facts"),
        Agent("boot-apply", BOOT_APPLY.format(profile=profile)),
        Agent("plan-again", f"plan {profile}"),
        Agent("facts-applied", "facts"),
        Dump("dump-applied"),
    ]


def preset_for(facts_doc: dict) -> str:
    """The qemu-cxl preset in the probe order this boot had (memdevs and endpoints each probe in either order)."""
    return cxl_preset(facts_doc)


@pytest.fixture(scope="module")
def worlds(cxl_guest: harness.Guest, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    guest = cxl_guest
    tmp = tmp_path_factory.mktemp("cxlr")
    straddle = harness.build_native("fpstate_straddle", guest.assets.cache_dir / "native")
    # under the harness's cache, which the guest sees through its root (the host's, over 9p), as it does the
    # straddle program; removed however the boots end
    where = Path(tempfile.mkdtemp(prefix="cxlr-profile.", dir=guest.assets.cache_dir))
    try:
        profile = tcg_profile(where)
        real1, res1 = run_guest(guest, boot1(straddle, profile), label="cxl-regions-boot1", layout="cxl",
                                timeout=600)
        assert real1["state"].rc == 0, real1["state"].stderr
        _capture(real1, "cxl-1hb")
        real2, res2 = run_guest(guest, boot2(real1["state"].stdout.strip(), profile), label="cxl-regions-boot2",
                                layout="cxl", timeout=600)
        root1 = cxl_sim_root(tmp, "regions-boot1", preset_for(real1["facts-bare"].doc()))
        root2 = cxl_sim_root(tmp, "regions-boot2", preset_for(real2["facts-boot"].doc()))
        try:
            sim1 = run_sim(root1, boot1(straddle, profile)[:-1])
            shutil.copytree(root1 / STATE.lstrip("/"), root2 / STATE.lstrip("/"), dirs_exist_ok=True)
            sim2 = run_sim(root2, boot2("", profile)[1:])
            sim2["restore"] = Outcome(0, "", "")
        finally:
            shutil.rmtree(root1, ignore_errors=True)
            shutil.rmtree(root2, ignore_errors=True)
    finally:
        shutil.rmtree(where, ignore_errors=True)
    for n, res in (("boot1", res1), ("boot2", res2)):
        took = ", ".join(f"{k} {s.seconds:.1f}s" for k, s in res.steps.items() if s.seconds and s.seconds >= 1)
        print(f"\n[realkernel] cxl regions {n}: {res.guest.wall_seconds:.1f}s wall ({took})")
    return (real1, real2), (sim1, sim2)


def _ok(o: Outcome, what: str) -> Any:
    assert o.rc == 0, f"{what}: rc {o.rc}\n{o.stdout[-3000:]}\n{o.stderr[-3000:]}"
    return o.doc()


def _plan_shape(doc: dict) -> list[tuple[str, str, str, str]]:
    return [(c["kind"], c["target"], c["op"], str(c.get("after_label") or c["after"])) for c in doc["changes"]]


def _apply_shape(doc: dict) -> list[tuple[str, str, str]]:
    return [(o["kind"], o["target"], o["status"]) for o in doc["outcomes"]]


def _state_of(doc: dict) -> dict[str, Any]:
    """Regions by their serials, with their DAX devices' mode, zone and node."""
    cxl = from_dict(doc["sections"]["cxl"])
    serial = {m.name: m.serial for m in cxl.memdevs}
    dax = {d["name"]: d for d in doc["sections"]["dax"]["devices"]}
    out = {}
    for r in cxl.regions:
        devs = [dax[d] for d in r.dax_devices]
        out[tuple(serial[m] for m in r.memdevs)] = {
            "ways": r.interleave_ways, "committed": r.committed, "size": r.size,
            "dax": [(d["mode"], d["zones"], d["target_node"], d["blocks_online"] == d["blocks_total"]) for d in devs]}
    return out


@pytest.mark.realkernel
@pytest.mark.parametrize("boot", [0, 1], ids=["first-boot", "after-reboot"])
def test_the_shipped_profile_makes_regions_online_movable_memory(worlds, boot: int) -> None:  # type: ignore[no-untyped-def]
    real = worlds[0][boot]
    bare = from_dict(real["facts-bare" if boot == 0 else "facts-boot"].doc()["sections"]["cxl"])
    assert not bare.regions and {m.serial for m in bare.memdevs} == SERIALS  # no region at boot
    applied = _ok(real["apply" if boot == 0 else "boot-apply"], "apply")
    assert applied["status"] == "converged", json.dumps(applied, indent=1)[-4000:]
    assert _ok(real["plan-again"], "second plan")["changes"] == []
    facts = real["facts-applied"].doc()
    state = _state_of(facts)
    assert set(state) == {(s,) for s in SERIALS}  # a ram region x1 per memdev
    for r in state.values():
        assert r["committed"] and r["ways"] == 1 and r["dax"] == [("system-ram", {"Movable": 2}, 2, True)]
    node2 = next(n for n in facts["nodes"] if n["id"] == 2)
    assert node2["cpulist"] == "" and node2["mem_total"] > 0  # a CPU-less node
    kd = facts["sections"]["damon"]["kdamonds"]
    assert [k["state"] for k in kd] == ["on"] * len(kd) and len(kd) == 3  # demote x2 (per DRAM node), promote x1
    # DAMON paired to the node the regions landed on: node 0 and node 1 demote to it, its memory promotes to node 0
    pairs = _damon_pairing(facts)
    cxl_ranges = _merged((d["resource"], d["resource"] + d["size"]) for d in facts["sections"]["dax"]["devices"])
    assert sorted(nid for action, _, nid in pairs if action == "migrate_cold") == [2, 2], pairs
    assert [(r, nid) for action, r, nid in pairs if action == "migrate_hot"] == [(cxl_ranges, 0)], pairs
    if boot == 0:
        again = _ok(real["apply-again"], "second apply")
        assert (again["status"], again["changed"], again["plan"]["changes"], again["outcomes"]) == (
            "converged", False, [], [])


@pytest.mark.realkernel
@pytest.mark.parametrize("boot", [0, 1], ids=["first-boot", "after-reboot"])
@pytest.mark.parametrize("step", ["plan", "apply", "plan-again", "facts", "dump"])
def test_the_simulator_does_the_same_step_by_step(worlds, boot: int, step: str) -> None:  # type: ignore[no-untyped-def]
    real, sim = worlds[0][boot], worlds[1][boot]
    apply = "apply" if boot == 0 else "boot-apply"
    if step == "plan":
        name = "plan-bare" if boot == 0 else apply
        r, s = real[name].doc(), sim[name].doc()
        r, s = (r.get("plan", r), s.get("plan", s))
        assert_same(f"the plan (boot {boot + 1})", _plan_shape(r), _plan_shape(s))
    elif step == "apply":
        assert_same(f"the apply (boot {boot + 1})", _apply_shape(real[apply].doc()), _apply_shape(sim[apply].doc()))
        if boot == 0:
            assert_same("the second apply", _apply_shape(real["apply-again"].doc()),
                        _apply_shape(sim["apply-again"].doc()))
    elif step == "plan-again":
        assert_same("the second plan", _plan_shape(real["plan-again"].doc()), _plan_shape(sim["plan-again"].doc()))
    elif step == "facts":
        assert_same(f"the facts after apply (boot {boot + 1})", cxl_shape(real["facts-applied"].doc()),
                    cxl_shape(sim["facts-applied"].doc()))
    else:
        assert_same(f"the state dump after apply (boot {boot + 1})", dump_summary(real["dump-applied"]),
                    dump_summary(sim["dump-applied"]))



@pytest.mark.realkernel
def test_qemu_saves_fpu_state_across_ram_and_cxl_memory(worlds) -> None:  # type: ignore[no-untyped-def]
    """The harness's QEMU, not nodeagent: FXSAVE, XSAVE and an 80-bit store across the edge between a page of node 0
    and a page of the CXL node read back what was saved. QEMU 10.0.2 crashed on this shape (SIGSEGV in access_stq)
    until the cxl layout loaded native/x86_block_access.c; the kernel makes it itself when DAMON demotes the top
    of a stack and a signal frame lands across it."""
    o = worlds[0][0][STRADDLE]
    assert o.rc == 0, f"rc {o.rc}: {o.stdout} {o.stderr}"
    seen = dict(w.split("=", 1) for w in o.stdout.split())
    assert (seen["page0_node"], seen["page1_node"]) == ("0", "2")
    assert (seen["fxsave"], seen["xsave"], seen["fstpt"]) == ("ok", "ok", "ok"), o.stdout
    assert int(seen["xsave_bytes"]) > 512  # the XSAVE area reaches into the CXL page


# --------------------------------------------------------------------------- two host bridges (layout ``cxl-2hb``)
#
# The bare-memdev shape of a two-expander server: one memdev per host bridge, a window per host bridge and one
# interleaving both, and an SRAT node (2, legacy pmem, offline) below the windows' nodes. One boot: the shipped
# profile's apply converges at once (each region on the node its plan named, DAMON paired to those nodes), and the
# second plan and the second apply are empty. The same steps run on the simulator's qemu-cxl-2hb preset.

#: which window and node each memdev's region takes, by serial: decoder0.0 is the window over pci0000:0c (node 3),
#: decoder0.1 the one over pci0000:14 (node 4); decoder0.2 interleaves both and cannot hold an x1 region
TWO_HB = {0x4C454F0001: ("decoder0.0", 3), 0x4C454F0002: ("decoder0.1", 4)}


def two_bridges(profile: Path) -> list[Any]:
    return [
        CXL_MODULES_2HB,
        CXL_LAYOUT,
        Agent("facts-bare", "facts"),
        Agent("plan-bare", f"plan {profile}"),
        Agent("apply", APPLY.format(profile=profile)),
        Agent("plan-again", f"plan {profile}"),
        Agent("apply-again", APPLY.format(profile=profile)),
        Agent("facts-applied", "facts"),
        Dump("dump-applied"),
    ]


def _capture(real: dict[str, Outcome], prefix: str) -> None:
    """``NODEAGENT_RK_CAPTURE=1``: keep the bus layout and the facts before and after in ``captured/``."""
    if os.environ.get("NODEAGENT_RK_CAPTURE") != "1":
        return
    out = harness.CAPTURED_DIR
    (out / f"{prefix}-layout.txt").write_text(real["cxl-layout"].stdout)
    for step in ("facts-bare", "facts-applied"):
        (out / f"{prefix}-{step}.json").write_text(json.dumps(_kept(real[step].doc()), indent=1) + "\n")


def _kept(doc: dict) -> dict:
    """What a capture keeps of a facts document: the NUMA layout, and the CXL, DAX and DAMON sections."""
    keep = {k: doc[k] for k in ("format", "kernel_release", "possible_nodes", "nodes", "tiers")}
    keep["sections"] = {k: doc["sections"][k] for k in ("cxl", "dax", "damon")}
    return keep


@pytest.fixture(scope="module")
def two_hb(cxl_guest: harness.Guest, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    guest = cxl_guest
    tmp = tmp_path_factory.mktemp("cxl2hb")
    where = Path(tempfile.mkdtemp(prefix="cxl2hb-profile.", dir=guest.assets.cache_dir))
    try:
        profile = tcg_profile(where)
        real, res = run_guest(guest, two_bridges(profile), label="cxl-2hb", layout="cxl-2hb", timeout=600)
        assert real["cxl-layout"].rc == 0, real["cxl-layout"].stderr
        _capture(real, "cxl-2hb")
        root = cxl_sim_root(tmp, "2hb", cxl_2hb_preset(real["facts-bare"].doc()))
        try:
            sim = run_sim(root, two_bridges(profile))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    finally:
        shutil.rmtree(where, ignore_errors=True)
    took = ", ".join(f"{k} {s.seconds:.1f}s" for k, s in res.steps.items() if s.seconds and s.seconds >= 1)
    print(f"\n[realkernel] cxl two host bridges: {res.guest.wall_seconds:.1f}s wall ({took})")
    return real, sim


def _merged(ranges: Any) -> tuple[tuple[int, int], ...]:
    """Physical ranges ``[start, end)`` sorted, adjacent ones joined (as DAMON's target regions are given)."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if out and out[-1][1] == start:
            out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return tuple(out)


def _damon_pairing(facts: dict) -> list[tuple[str, tuple[tuple[int, int], ...], int]]:
    """Each running kdamond as (action, the physical ranges it monitors, its scheme's target node)."""
    out = []
    for kd in facts["sections"]["damon"]["kdamonds"]:
        c = kd["config"]
        n = int(c["contexts/0/targets/0/regions/nr_regions"])
        at = "contexts/0/targets/0/regions"
        ranges = tuple((int(c[f"{at}/{i}/start"]), int(c[f"{at}/{i}/end"])) for i in range(n))
        assert kd["state"] == "on", kd
        out.append((c["contexts/0/schemes/0/action"], ranges, int(c["contexts/0/schemes/0/target_nid"])))
    return out


@pytest.mark.realkernel
def test_two_host_bridges_converge_in_one_apply(two_hb) -> None:  # type: ignore[no-untyped-def]
    real = two_hb[0]
    bare = real["facts-bare"].doc()
    cxl = from_dict(bare["sections"]["cxl"])
    assert not cxl.regions and {m.serial for m in cxl.memdevs} == set(TWO_HB)
    assert bare["possible_nodes"] == [0, 1, 2, 3, 4, 5]  # SRAT's 0-2, then one node per window
    planned = {c["target"]: c for c in _ok(real["plan-bare"], "plan")["changes"] if c["target"].startswith("region@")}
    applied = _ok(real["apply"], "apply")
    assert applied["status"] == "converged", json.dumps(applied, indent=1)[-4000:]
    assert _ok(real["plan-again"], "second plan")["changes"] == []
    again = _ok(real["apply-again"], "second apply")
    assert (again["status"], again["changed"], again["plan"]["changes"], again["outcomes"]) == (
        "converged", False, [], [])
    facts = real["facts-applied"].doc()
    state = _state_of(facts)
    assert set(state) == {(s,) for s in TWO_HB}
    after = from_dict(facts["sections"]["cxl"])
    for r in after.regions:
        (serial,) = (m.serial for m in after.memdevs if m.name in r.memdevs)
        window, node = TWO_HB[serial]
        assert r.root_decoder == window and state[(serial,)]["dax"] == [("system-ram", {"Movable": 2}, node, True)]
        # the node the plan named is the node the kernel gave the region
        plan = planned[f"region@{serial:#x}"]
        assert plan["nodes"] == [node] and f"in {window} (node {node})" in plan["after_label"], plan
    dax = [(d["resource"], d["resource"] + d["size"]) for d in facts["sections"]["dax"]["devices"]]
    pairs = _damon_pairing(facts)
    demote = [(ranges, nid) for action, ranges, nid in pairs if action == "migrate_cold"]
    promote = [(ranges, nid) for action, ranges, nid in pairs if action == "migrate_hot"]
    assert len(demote) == 2 and all(nid in (3, 4) for _, nid in demote), pairs  # node 0 and node 1, each to CXL
    assert promote == [(_merged(dax), 0)], pairs  # over both CXL nodes, to node 0


@pytest.mark.realkernel
@pytest.mark.parametrize("step", ["plan", "apply", "plan-again", "apply-again", "facts", "dump"])
def test_two_host_bridges_the_simulator_does_the_same(two_hb, step: str) -> None:  # type: ignore[no-untyped-def]
    real, sim = two_hb
    if step in ("plan", "plan-again"):
        name = "plan-bare" if step == "plan" else step
        assert_same(f"the {step} (two host bridges)", _plan_shape(real[name].doc()), _plan_shape(sim[name].doc()))
    elif step in ("apply", "apply-again"):
        assert_same(f"the {step} (two host bridges)", _apply_shape(real[step].doc()), _apply_shape(sim[step].doc()))
    elif step == "facts":
        assert_same("the facts after apply (two host bridges)", cxl_shape(real["facts-applied"].doc()),
                    cxl_shape(sim["facts-applied"].doc()))
    else:
        assert_same("the state dump after apply (two host bridges)", dump_summary(real["dump-applied"]),
                    dump_summary(sim["dump-applied"]))


@pytest.mark.parametrize(("prefix", "preset_of"), [("cxl-2hb", cxl_2hb_preset), ("cxl-1hb", cxl_preset)],
                         ids=["two-host-bridges", "one-host-bridge"])
def test_the_captured_bus_shapes_are_the_simulators(tmp_path: Path, prefix: str, preset_of: Any) -> None:
    """The captured guests (bare, and after the shipped profile's apply) against the simulator's preset in the same
    probe order: the CXL facts (windows, ports, decoders, memdevs), the possible nodes, and after the apply the
    regions, their DAX devices and nodes. Runs without QEMU; ``NODEAGENT_RK_CAPTURE=1`` rewrites the captures."""
    captured = {s: harness.CAPTURED_DIR / f"{prefix}-{s}.json" for s in ("facts-bare", "facts-applied")}
    missing = [str(p) for p in captured.values() if not p.exists()]
    if missing:
        pytest.skip(f"no capture {missing} (NODEAGENT_RK_CAPTURE=1 python -m pytest -m realkernel "
                    "tests/realkernel/test_cxl_regions.py)")
    docs = {s: json.loads(p.read_text()) for s, p in captured.items()}
    where = Path(tempfile.mkdtemp(prefix="cxl-profile.", dir=tmp_path))
    profile = tcg_profile(where)
    root = cxl_sim_root(tmp_path, f"{prefix}-replay", preset_of(docs["facts-bare"]))
    try:
        sim = run_sim(root, [Agent("facts-bare", "facts"), Agent("apply", APPLY.format(profile=profile)),
                             Agent("facts-applied", "facts")])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert sim["apply"].doc()["status"] == "converged"
    for step, doc in docs.items():
        assert_same(f"the captured facts of {prefix} ({step})", cxl_shape(doc), cxl_shape(sim[step].doc()))
