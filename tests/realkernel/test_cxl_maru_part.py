"""Part of one expander for Maru on a real kernel: the one-memdev CXL guest (``cxl-1md``, Debian 6.12, QEMU 10).

Phase A: one apply of ``profiles/cxl-maru-part.yaml`` creates the memdev's region (256 MiB, region1) and splits its
DAX region: ``dax1.1`` (128 MiB, devdax) for Maru, ``dax1.0`` keeps the other 128 MiB (one memory block) as
system RAM in ZONE_MOVABLE on the window's node 3. The next plan is empty, ``render serving`` names
``/dev/dax1.1`` for Maru, and revert tears the region down (the boot state: no region).

Phase B: a region made by hand (raw sysfs, ``auto_online_blocks`` offline first), then the split alone (the same
rule with no ``cxl:``): revert cannot tear down a region that is not nodeagent's, so it joins the region again —
``daxctl destroy-device`` the Maru device, ``dax<N>.0`` grown back to the whole region, in its old mode. On the
guest the hand-made region1's ``dax1.0`` came up bound to device_dax, not kmem (phase A's revert had run ``daxctl
reconfigure-device --mode=devdax dax1.0``, which leaves ``dax1.0`` in device_dax's ``new_id`` table), so its old
mode, and the joined device's, is devdax.

The boot (one) is not in ``make test``: ``make realkernel-extra`` runs it (``NODEAGENT_RK_EXTRA=1``). With
``NODEAGENT_RK_CAPTURE=1`` it rewrites ``captured/cxl-1md-maru-*``; those are replayed on the simulator's
``qemu-cxl-1md`` preset without QEMU (in ``make test``).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shlex
import shutil
import tempfile
from pathlib import Path
from typing import Any

import harness
import pytest
import yaml
from test_cxl_regions import APPLY, _kept, _ok
from worlds import (
    CXL,
    CXL_LAYOUT,
    CXL_MODULES_2HB,
    Agent,
    Outcome,
    Setup,
    Writes,
    assert_same,
    cxl_shape,
    cxl_sim_root,
    run_guest,
    run_sim,
)

PREFIX = "cxl-1md-maru"
PRESET = "qemu-cxl-1md"
PROFILE = Path(__file__).parent / "profiles" / "cxl-maru-part.yaml"
NODE = 3
MiB = 1024**2
#: the region nodeagent makes in phase A (the simulator's preset and the kernel agree on its id: see the test)
REG1 = "/sys/devices/platform/ACPI0017:00/root0/decoder0.0/region1/dax_region1/dax_region"
#: phase B's profile in the guest (its region id is known only once the region is made)
PROFILE_B = "/tmp/maru-part-b.yaml"

#: What the guest shows of its DAX devices: daxctl's view, then sysfs (each device, each region's attributes,
#: the character devices, node 3's memory blocks) — bash builtins but for daxctl, ls and readlink.
_SHOW = r"""daxctl list -DRM; echo @@sysfs
for d in /sys/bus/dax/devices/dax*; do [ -e "$d" ] || continue; n=${d##*/}
  for a in size resource align target_node numa_node; do read -r v < $d/$a; echo "$n/$a=$v"; done
  drv=$(readlink $d/driver); echo "$n/driver=${drv##*/}"
  R=$(readlink -f $d/..)/dax_region; [ -d "$R" ] || continue
  for a in id size align available_size seed create; do
    [ -r $R/$a ] && { read -r v < $R/$a; echo "${R#/sys/devices/}/$a=$v"; }; done
  echo "${R#/sys/devices/}/files=$(ls $R | tr '\n' ' ')"
done
echo "chardevs=$(ls /dev | grep '^dax' | tr '\n' ' ')"
for m in /sys/devices/system/node/node3/memory[0-9]*; do [ -e "$m" ] || continue
  read -r s < $m/state; read -r z < $m/valid_zones; echo "${m##*/}=$s $z"; done
grep MemTotal /sys/devices/system/node/node3/meminfo 2>/dev/null
cat /sys/devices/system/memory/auto_online_blocks"""
SHOW = f"bash -c {shlex.quote(_SHOW)}"

#: Phase B's region, by hand in the kernel's order, on the guest's one window and the memdev's endpoint decoder;
#: then phase B's profile with that region's id.
MAKE_REGION = f"""set -e; C={CXL}; echo offline > /sys/devices/system/memory/auto_online_blocks
r=$(cat $C/decoder0.0/create_ram_region); echo $r > $C/decoder0.0/create_ram_region
echo 256 > $C/$r/interleave_granularity; echo 1 > $C/$r/interleave_ways; echo 268435456 > $C/$r/size
ed=$(ls -d $C/endpoint*/decoder*.0 | head -1); ed=${{ed##*/}}
echo ram > $C/$ed/mode; echo 268435456 > $C/$ed/dpa_size; echo $ed > $C/$r/target0
echo 1 > $C/$r/commit; echo $r > /sys/bus/cxl/drivers/cxl_region/bind
for i in $(seq 50); do [ -e /sys/bus/dax/devices/dax${{r#region}}.0 ] && break; sleep 0.2; done
echo "region=$r endpoint=$ed"; ls /sys/bus/dax/devices
sed "s/dax_regions: \\[1\\]/dax_regions: [${{r#region}}]/" {{template}} > {PROFILE_B}; grep dax_regions {PROFILE_B}"""

#: After the split: the kernel's answers the simulator must give too (create with nothing available, a bound
#: device's size, a bound device's delete) — each leaves the split as it is.
PROBES = ((f"{REG1}/create", "1"), ("/sys/bus/dax/devices/dax1.1/size", "0"), (f"{REG1}/delete", "dax1.1"),
          (f"{REG1}/create", "2"))


#: The region's and its endpoint decoder's attributes (where a teardown stops, the kernel's state shows why).
REGION_STATE = (f"C={CXL}; for a in commit interleave_ways size resource mode target0; do "
                "echo \"region1/$a=$(cat $C/region1/$a 2>&1)\"; done; "
                "echo \"region1/driver=$(readlink $C/region1/driver)\"; for a in mode dpa_size dpa_resource start size;"
                " do echo \"decoder2.0/$a=$(cat $C/decoder2.0/$a 2>&1)\"; done; ls $C | tr '\\n' ' '")
#: A teardown by hand, in the kernel's order, after nodeagent's revert (each write's answer)
TEARDOWN = ((f"{CXL}/region1/commit", "0"), (f"{CXL}/region1/target0", ""), (f"{CXL}/region1/size", "0"),
            (f"{CXL}/decoder2.0/dpa_size", "0"), (f"{CXL}/decoder0.0/delete_region", "region1"))


def profile_b(where: Path) -> Path:
    """Phase B's profile (a template: the guest puts its region's id in): the split alone, no ``cxl:``."""
    doc = yaml.safe_load(PROFILE.read_text())
    del doc["memory"]["cxl"]
    doc["metadata"]["name"] = "cxl-maru-part-b"
    out = where / "cxl-maru-part-b.yaml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def steps(profile: Path, template: Path) -> list[Any]:
    return [
        CXL_MODULES_2HB,
        CXL_LAYOUT,
        Setup("block-size", "cat /sys/devices/system/memory/block_size_bytes"),
        Agent("facts-bare", "facts"),
        Agent("plan-bare", f"plan {profile}"),
        Agent("apply", APPLY.format(profile=profile)),
        Setup("shown-split", SHOW),
        Writes("probes", PROBES),
        Agent("plan-again", f"plan {profile}"),
        Agent("facts-split", "facts"),
        Agent("render", f"render serving --engine lmcache {profile}"),
        Setup("region-split", REGION_STATE),
        Agent("revert", "revert --yes --allow-disruptive"),
        Setup("shown-reverted", SHOW),
        Setup("region-reverted", REGION_STATE),
        Writes("teardown", TEARDOWN),
        Setup("region-torn-down", REGION_STATE),
        Agent("facts-reverted", "facts"),
        # apply again after the revert: the re-made region's dax1.0 comes up devdax (device_dax's id table)
        Agent("apply-again", APPLY.format(profile=profile)),
        Setup("shown-again", SHOW),
        Agent("revert-again", "revert --yes --allow-disruptive"),
        # phase B: a region that is not nodeagent's
        Setup("make-region", MAKE_REGION.replace("{template}", str(template))),
        Setup("shown-b-bare", SHOW),
        Agent("apply-b", APPLY.format(profile=PROFILE_B)),
        Setup("shown-b-split", SHOW),
        Agent("plan-b-again", f"plan {PROFILE_B}"),
        Agent("revert-b", "revert --yes --allow-disruptive"),
        Setup("shown-b-joined", SHOW),
        Agent("facts-b-joined", "facts"),
        Setup("dmesg", "dmesg | grep -v '^\\[ *[0-9]\\.' | tail -80"),
    ]


def _dax(doc: dict) -> dict[str, tuple]:
    return {d["name"]: (d["mode"], d["size"], d["target_node"], d["zones"], d["blocks_online"])
            for d in doc["sections"]["dax"]["devices"]}


def _listed(o: Outcome) -> dict[str, dict]:
    """daxctl list -DRM's devices by name (it nests them in their regions; one object when there is one)."""
    text = o.stdout.split("@@sysfs")[0].strip()
    doc = json.loads(text) if text else []
    out = {}
    for item in doc if isinstance(doc, list) else [doc]:
        for dev in item.get("devices", [item] if "chardev" in item else []):
            out[dev["chardev"]] = dev
    return out


def _capture(real: dict[str, Outcome]) -> None:
    if os.environ.get("NODEAGENT_RK_CAPTURE") != "1":
        return
    out = harness.CAPTURED_DIR
    for step in ("facts-bare", "facts-split", "facts-reverted", "facts-b-joined"):
        (out / f"{PREFIX}-{step}.json").write_text(json.dumps(_kept(real[step].doc()), indent=1) + "\n")
    for step in ("shown-split", "shown-reverted", "shown-again", "shown-b-bare", "shown-b-split", "shown-b-joined",
                 "probes", "make-region", "block-size", "region-split",
                 "region-reverted", "teardown", "region-torn-down", "dmesg"):
        o = real[step]
        (out / f"{PREFIX}-{step}.txt").write_text(o.stdout + (f"@@stderr\n{o.stderr}" if o.stderr.strip() else ""))
    for step in ("apply", "apply-b", "revert", "revert-b", "render", "apply-again"):
        (out / f"{PREFIX}-{step}.json").write_text(json.dumps(real[step].doc(), indent=1) + "\n")


@pytest.fixture(scope="module")
def maru_part(cxl_guest: harness.Guest):  # type: ignore[no-untyped-def]
    if os.environ.get("NODEAGENT_RK_EXTRA") != "1":
        pytest.skip("realkernel: the Maru split boot runs in `make realkernel-extra` (NODEAGENT_RK_EXTRA=1)")
    where = Path(tempfile.mkdtemp(prefix="cxlmaru-profile.", dir=cxl_guest.assets.cache_dir))
    try:
        profile = where / PROFILE.name
        shutil.copyfile(PROFILE, profile)
        real, res = run_guest(cxl_guest, steps(profile, profile_b(where)), label=PREFIX, layout="cxl-1md",
                              timeout=1200)
    finally:
        shutil.rmtree(where, ignore_errors=True)
    _capture(real)
    took = ", ".join(f"{k} {s.seconds:.1f}s" for k, s in res.steps.items() if s.seconds and s.seconds >= 1)
    print(f"\n[realkernel] cxl maru part: {res.guest.wall_seconds:.1f}s wall ({took})")
    for name, o in real.items():
        print(f"---- {name} rc={o.rc}\n{o.stdout[-3000:]}\n{o.stderr[-1500:]}")
    return real


@pytest.mark.realkernel
def test_one_apply_creates_the_region_and_splits_it_for_maru(maru_part) -> None:  # type: ignore[no-untyped-def]
    real = maru_part
    assert real["block-size"].stdout.strip() == "8000000"  # 128 MiB memory blocks: the rest is one block
    applied = _ok(real["apply"], "apply")
    assert (real["apply"].rc, applied["status"]) == (0, "converged"), json.dumps(applied, indent=1)[-4000:]
    assert _dax(real["facts-split"].doc()) == {
        "dax1.0": ("system-ram", 128 * MiB, NODE, {"Movable": 1}, 1),
        "dax1.1": ("devdax", 128 * MiB, NODE, {}, 0)}
    listed = _listed(real["shown-split"])
    assert (listed["dax1.0"]["mode"], listed["dax1.0"]["size"], listed["dax1.0"]["movable"]) == (
        "system-ram", 128 * MiB, True)
    assert (listed["dax1.1"]["mode"], listed["dax1.1"]["size"]) == ("devdax", 128 * MiB)
    assert "dax1.1" in real["shown-split"].stdout.split("chardevs=")[1].splitlines()[0].split()
    assert _ok(real["plan-again"], "second plan")["changes"] == []
    render = _ok(real["render"], "render serving")
    assert render["maru"] == [{"device": "dax1.1", "path": "/dev/dax1.1", "size": 128 * MiB, "node": NODE}]


@pytest.mark.realkernel
def test_revert_gives_back_the_boot_state(maru_part) -> None:  # type: ignore[no-untyped-def]
    real = maru_part
    assert (real["revert"].rc, _ok(real["revert"], "revert")["status"]) == (0, "converged")
    assert _dax(real["facts-reverted"].doc()) == {}
    assert _dax(real["facts-reverted"].doc()) == _dax(real["facts-bare"].doc())


@pytest.mark.realkernel
def test_apply_after_revert_converges_in_one_apply(maru_part) -> None:  # type: ignore[no-untyped-def]
    real = maru_part
    again = _ok(real["apply-again"], "apply after revert")
    assert (real["apply-again"].rc, again["status"]) == (0, "converged"), json.dumps(again["outcomes"], indent=1)
    listed = _listed(real["shown-again"])
    assert {n: (d["mode"], d["size"]) for n, d in listed.items()} == {
        "dax1.0": ("system-ram", 128 * MiB), "dax1.1": ("devdax", 128 * MiB)}
    assert (real["revert-again"].rc, _ok(real["revert-again"], "revert again")["status"]) == (0, "converged")


@pytest.mark.realkernel
def test_a_region_not_nodeagents_is_split_then_joined(maru_part) -> None:  # type: ignore[no-untyped-def]
    real = maru_part
    assert real["make-region"].rc == 0, real["make-region"].stderr
    m = re.search(r"region=region(\d+)", real["make-region"].stdout)
    assert m, real["make-region"].stdout
    rid = m.group(1)
    assert (real["apply-b"].rc, _ok(real["apply-b"], "apply B")["status"]) == (0, "converged")
    split = _listed(real["shown-b-split"])
    assert sorted(split) == [f"dax{rid}.0", f"dax{rid}.1"]
    assert _ok(real["plan-b-again"], "plan B")["changes"] == []
    assert (real["revert-b"].rc, _ok(real["revert-b"], "revert B")["status"]) == (0, "converged")
    joined = _listed(real["shown-b-joined"])
    assert list(joined) == [f"dax{rid}.0"] and joined[f"dax{rid}.0"]["size"] == 256 * MiB
    bare = _listed(real["shown-b-bare"])
    assert joined[f"dax{rid}.0"]["mode"] == bare[f"dax{rid}.0"]["mode"]  # its mode before the split


def _replay_steps(profile: Path) -> list[Any]:
    return [Agent("facts-bare", "facts"), Agent("plan", f"plan {profile}"),
            Agent("apply", APPLY.format(profile=profile)), Writes("probes", PROBES),
            Agent("plan-again", f"plan {profile}"), Agent("facts-split", "facts"),
            Agent("render", f"render serving --engine lmcache {profile}"),
            Agent("revert", "revert --yes --allow-disruptive"), Agent("facts-reverted", "facts"),
            Agent("apply-again", APPLY.format(profile=profile))]


def test_the_captured_maru_split_is_the_simulators(tmp_path: Path) -> None:
    """The captured guest (bare, split, reverted) against ``qemu-cxl-1md`` running the same profile: the DAX devices
    and regions, the kernel's answers to the probes, what Maru is given. Runs without QEMU; ``NODEAGENT_RK_CAPTURE=1
    make realkernel-extra`` rewrites the captures."""
    names = ("facts-bare", "facts-split", "facts-reverted")
    captured = {s: harness.CAPTURED_DIR / f"{PREFIX}-{s}.json" for s in names}
    missing = [str(p) for p in (*captured.values(), harness.CAPTURED_DIR / f"{PREFIX}-probes.txt") if not p.exists()]
    if missing:
        pytest.skip(f"no capture {missing} (NODEAGENT_RK_CAPTURE=1 make realkernel-extra)")
    docs = {s: json.loads(p.read_text()) for s, p in captured.items()}
    root = cxl_sim_root(tmp_path, f"{PREFIX}-replay", PRESET)
    try:
        sim = run_sim(root, _replay_steps(PROFILE))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    # the plan made before the region exists shows the split of its device — not the whole device onlined, which
    # would leave the split disruptive for the second stage — and one apply converges, nothing planned again
    (planned,) = [c for c in sim["plan"].doc()["changes"] if c["target"] == "dax1.0"]
    assert planned["after_label"] == "devdax 128MiB for Maru + 128MiB system-ram/movable", planned
    assert not planned["disruptive"] and planned["needs"] == ["region@0x4c454f0001"], planned
    result = sim["apply"].doc()
    assert (sim["apply"].rc, result["status"]) == (0, "converged"), json.dumps(result, indent=1)[-3000:]
    assert all("planned again" not in (o.get("message") or "") for o in result["outcomes"]), result["outcomes"]
    assert sim["plan-again"].doc()["changes"] == []
    for step in names:
        assert_same(f"the captured facts of {PREFIX} ({step})", cxl_shape(docs[step]), cxl_shape(sim[step].doc()))
        assert_same(f"the captured DAX regions of {PREFIX} ({step})", docs[step]["sections"]["dax"].get("regions"),
                    sim[step].doc()["sections"]["dax"].get("regions"))
    probes = (harness.CAPTURED_DIR / f"{PREFIX}-probes.txt").read_text().split("@@stderr")[0]
    assert_same("the kernel's answers after the split", probes, sim["probes"].stdout)
    render = json.loads((harness.CAPTURED_DIR / f"{PREFIX}-render.json").read_text())
    assert_same("what Maru is given", render["maru"], sim["render"].doc()["maru"])
    # apply after revert, in the same boot: the revert's devdax reconfigure left dax1.0 in device_dax's id table,
    # so the re-made region's dax1.0 comes up devdax, not kmem's (the guest showed it); the split starts from there
    again = sim["apply-again"].doc()
    assert (sim["apply-again"].rc, again["status"]) == (0, "converged"), json.dumps(again["outcomes"], indent=1)
    assert "(device_dax)" in again["outcomes"][1]["message"], again["outcomes"]


def test_a_write_of_no_bytes_reaches_no_store(tmp_path: Path) -> None:
    """sysfs drops a write of 0 bytes (``sysfs_kf_write`` returns 0 before the store): on the 6.12 guest an empty
    write to ``region1/target0`` left the target attached, and the region's ``size`` then answered EBUSY. The
    simulator does the same; a newline (``echo > target0``) detaches."""
    from nodeagent_sim import SimKernel

    root = cxl_sim_root(tmp_path, f"{PREFIX}-empty", PRESET)
    try:
        k = SimKernel(root)
        reg = f"{CXL}/region1"
        for path, value in ((f"{CXL}/decoder0.0/create_ram_region", "region1"),
                            (f"{reg}/interleave_granularity", "256"), (f"{reg}/interleave_ways", "1"),
                            (f"{reg}/size", "268435456"),
                            (f"{CXL}/decoder2.0/mode", "ram"), (f"{CXL}/decoder2.0/dpa_size", "268435456"),
                            (f"{reg}/target0", "decoder2.0")):
            k.write(path, value)
        k.write(f"{reg}/target0", "")
        assert k.tree.read(f"{reg}/target0") == "decoder2.0"
        with pytest.raises(OSError) as busy:
            k.write(f"{reg}/size", "0")
        assert busy.value.errno == errno.EBUSY
        k.write(f"{reg}/target0", "\n")
        assert k.tree.read(f"{reg}/target0") == ""
        k.write(f"{reg}/size", "0")
    finally:
        shutil.rmtree(root, ignore_errors=True)
