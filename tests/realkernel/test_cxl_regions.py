"""Real CXL end to end: bare memdevs → ``apply profiles/cxl-inference.yaml`` → committed regions, their DAX devices
online in ZONE_MOVABLE on a CPU-less node, kdamonds over it, an empty second plan — and after a reboot (a second
boot of the same layout, nodeagent's state directory kept as a disk keeps it) the boot unit's apply makes them
again, from the memdevs' serials. The same steps run on the simulator's ``qemu-cxl`` preset (in the probe order
each boot of the guest had), and each step must agree. The profile applied is the shipped one with its demotion
capped at 4 KiB/s (``tcg_profile``: under TCG the guest's own pages must stay off emulated CXL memory).

Cost: two boots of the ``cxl`` layout (QEMU 10, TCG), ~2-4 min in all on 2 shared cores.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import harness
import pytest
import yaml
from worlds import (
    CXL_MODULES,
    Agent,
    Dump,
    Outcome,
    Setup,
    assert_same,
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
        Agent("facts-bare", "facts"),
        Agent("plan-bare", f"plan {profile}"),
        Agent("apply", APPLY.format(profile=profile)),
        Agent("plan-again", f"plan {profile}"),
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
