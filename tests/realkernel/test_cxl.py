"""Real CXL: Linux's own CXL subsystem (6.12) on QEMU's cxl-type3 memdevs, and the simulator's ``qemu-cxl`` preset.

One boot of the ``cxl`` layout (two 256 MiB volatile memdevs with distinct serials behind one host bridge, one
4 GiB window; QEMU >= 8, fetched from bookworm-backports when the host's is older): the CXL modules are loaded,
``nodeagent facts`` reads the bare bus; a RAM region is then made through the kernel's sysfs ABI — every refusal
the kernel has on the way (worlds.CXL_CREATE), the 2-way region, commit, the bind that makes dax0.0, which kmem
onlines — facts again; then the teardown in the kernel's order, facts once more. The same steps run against a
fresh simulated node. Each step's errno and every fact must agree.

What the guest shows is kept in ``captured/cxl-*`` (``NODEAGENT_RK_CAPTURE=1`` rewrites them): the tests at the
end replay the captures against the simulator and the parsers without QEMU, so they keep matching on machines
where the guest cannot boot.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import harness
import pytest
from worlds import (
    CXL_CREATE,
    CXL_SCENARIO,
    CXL_TEARDOWN,
    Outcome,
    assert_same,
    cxl_preset,
    cxl_shape,
    cxl_sim_root,
    dump_summary,
    run_guest,
    run_sim,
    sim_writes,
)

from nodeagent.facts.cxl import from_dict
from nodeagent.facts.cxl_cli import cross_check, parse_cxl_list

CAPTURED = harness.CAPTURED_DIR
FACTS_STEPS = ("facts-bare", "facts-region", "facts-after")
SERIALS = {"mem0": 0x4C454F0002, "mem1": 0x4C454F0001}


def preset_for(facts_doc: dict) -> str:
    """The qemu-cxl preset in the probe order the guest had (memdevs and endpoints each probe in either order)."""
    return cxl_preset(facts_doc)


def _sim_root(tmp: Path, name: str, preset: str = "qemu-cxl") -> Path:
    return cxl_sim_root(tmp, name, preset)


@pytest.fixture(scope="module")
def worlds(cxl_guest: harness.Guest, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    real, res = run_guest(cxl_guest, CXL_SCENARIO, label="scenario-cxl", layout="cxl")
    root = _sim_root(tmp_path_factory.mktemp("cxl"), "scenario", preset_for(real["facts-bare"].doc()))
    try:
        sim = run_sim(root, CXL_SCENARIO)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    took = ", ".join(f"{n} {s.seconds:.1f}s" for n, s in res.steps.items() if s.seconds and s.seconds >= 1)
    print(f"\n[realkernel] scenario cxl: {res.guest.wall_seconds:.1f}s wall ({took})")
    if os.environ.get("NODEAGENT_RK_CAPTURE") == "1":
        _capture(real)
    return real, sim


def _capture(real: dict[str, Outcome]) -> None:
    CAPTURED.mkdir(parents=True, exist_ok=True)
    (CAPTURED / "cxl-writes-create.txt").write_text(real["create"].stdout)
    (CAPTURED / "cxl-writes-teardown.txt").write_text(real["teardown"].stdout)
    (CAPTURED / "cxl-list-MDRi-region.json").write_text(real["cxl-list"].stdout)
    for step in FACTS_STEPS:
        doc = real[step].doc()
        keep = {k: doc[k] for k in ("format", "kernel_release", "possible_nodes", "nodes", "tiers")}
        keep["sections"] = {k: doc["sections"][k] for k in ("cxl", "dax")}
        (CAPTURED / f"cxl-{step}.json").write_text(json.dumps(keep, indent=1) + "\n")


pytestmark_rk = pytest.mark.realkernel


@pytestmark_rk
def test_the_guest_shows_both_memdevs_and_nodeagent_sees_them(worlds) -> None:  # type: ignore[no-untyped-def]
    real = worlds[0]
    for step in FACTS_STEPS:
        assert real[step].rc == 0, f"{step}: rc {real[step].rc}\n{real[step].stdout[-2000:]}{real[step].stderr}"
    bare = from_dict(real["facts-bare"].doc()["sections"]["cxl"])
    assert sorted(m.serial for m in bare.memdevs) == sorted(SERIALS.values())
    assert [m.ram_size for m in bare.memdevs] == [256 << 20] * 2 and not bare.regions
    assert bare.missing_modules == [] and bare.modules["cxl_port"] == "builtin"
    assert bare.cxl_cli and bare.cli_differences == [], bare.cli_differences  # cxl list agrees with sysfs


@pytestmark_rk
def test_region_and_dax_device_on_the_real_kernel(worlds) -> None:  # type: ignore[no-untyped-def]
    real = worlds[0]
    lines = real["create"].stdout.splitlines()
    assert lines[-1].endswith("cxl_region/bind ok") and lines[-3].endswith("commit ok"), real["create"].stdout
    cxl = from_dict(real["facts-region"].doc()["sections"]["cxl"])
    (region,) = cxl.regions
    assert (region.name, region.size, region.interleave_ways, region.decode_state) == ("region0", 512 << 20, 2,
                                                                                      "commit")
    assert sorted(region.memdevs) == ["mem0", "mem1"] and region.dax_devices == ["dax0.0"]
    assert [o.owner for o in cxl.dax] == ["cxl-region"] and cxl.dax[0].driver == "kmem"
    assert cxl.cli_differences == []
    after = from_dict(real["facts-after"].doc()["sections"]["cxl"])
    assert not after.regions and after.next_region == {"decoder0.0": "region0"}


@pytestmark_rk
@pytest.mark.parametrize("step", ["create", "teardown"])
def test_the_simulator_refuses_what_the_kernel_refuses(worlds, step: str) -> None:  # type: ignore[no-untyped-def]
    real, sim = worlds
    assert_same(f"the CXL writes ({step})", dict(enumerate(real[step].stdout.splitlines())),
                dict(enumerate(sim[step].stdout.splitlines())))


@pytestmark_rk
@pytest.mark.parametrize("step", FACTS_STEPS)
def test_the_simulator_shows_the_same_facts(worlds, step: str) -> None:  # type: ignore[no-untyped-def]
    real, sim = worlds
    assert sim[step].rc == 0, sim[step].stderr
    assert_same(f"the facts ({step})", cxl_shape(real[step].doc()), cxl_shape(sim[step].doc()))


@pytestmark_rk
def test_the_simulator_shows_the_same_nodes_and_blocks(worlds) -> None:  # type: ignore[no-untyped-def]
    real, sim = worlds
    assert_same("the state dump with the region online", dump_summary(real["region-dump"]),
                dump_summary(sim["region-dump"]))


# --------------------------------------------------------------------------- the captures, without QEMU


def _captured(name: str) -> str:
    path = CAPTURED / name
    if not path.exists():
        pytest.skip(f"no capture {path} (NODEAGENT_RK_CAPTURE=1 python -m pytest tests/realkernel/test_cxl.py)")
    return path.read_text()


def _captured_preset() -> str:
    return preset_for(json.loads(_captured("cxl-facts-bare.json")))


def test_captured_refusals_replay_on_the_simulator(tmp_path: Path) -> None:
    root = _sim_root(tmp_path, "replay", _captured_preset())
    try:
        created = sim_writes(root, CXL_CREATE)
        torn = sim_writes(root, CXL_TEARDOWN)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert_same("the captured CXL writes (create)", dict(enumerate(_captured("cxl-writes-create.txt").splitlines())),
                dict(enumerate(created.splitlines())))
    assert_same("the captured CXL writes (teardown)",
                dict(enumerate(_captured("cxl-writes-teardown.txt").splitlines())), dict(enumerate(torn.splitlines())))


def test_captured_cxl_list_agrees_with_the_captured_sysfs_facts() -> None:
    listing = parse_cxl_list(_captured("cxl-list-MDRi-region.json"))
    facts = from_dict(json.loads(_captured("cxl-facts-region.json"))["sections"]["cxl"])
    assert set(listing["memdevs"]) == {"mem0", "mem1"} and set(listing["regions"]) == {"region0"}
    assert cross_check(facts, listing) == []
    # and a listing that disagrees is reported, field by field
    listing["regions"]["region0"]["size"] = 1 << 30
    del listing["memdevs"]["mem1"]
    assert cross_check(facts, listing) == ["memdev mem1: only sysfs shows it",
                                           "region region0: size 536870912 in sysfs, 1073741824 in cxl list"]


def test_captured_facts_match_the_simulator(tmp_path: Path) -> None:
    """The same layout in the simulator gathers the facts the guest gathered, at each of the three steps."""
    from nodeagent.facts import gather
    from nodeagent.host import open_host

    root = _sim_root(tmp_path, "facts", _captured_preset())
    try:
        docs = {"facts-bare": gather(open_host(root)).to_dict()}
        sim_writes(root, CXL_CREATE)
        docs["facts-region"] = gather(open_host(root)).to_dict()
        sim_writes(root, CXL_TEARDOWN)
        docs["facts-after"] = gather(open_host(root)).to_dict()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for step in FACTS_STEPS:
        assert_same(f"the captured facts ({step})", cxl_shape(json.loads(_captured(f"cxl-{step}.json"))),
                    cxl_shape(docs[step]))


# --------------------------------------------------------------------------- the harness's QEMU >= 8, without QEMU


def _assets(tmp_path: Path) -> harness.Assets:
    return harness._assets_from(tmp_path, "6.12.95+deb12-amd64", "linux-image", ())


def test_the_cxl_command_line(tmp_path: Path) -> None:
    qemu = harness.Qemu("/q/usr/bin/qemu-system-x86_64", (10, 0, 2), Path("/q"))
    cmd = harness.qemu_command(qemu, _assets(tmp_path), harness.LAYOUTS["cxl"], tmp_path / "i", tmp_path / "c",
                               hostroot=True)
    if os.geteuid() == 0 and harness.HOST_QEMU_MODULES.is_dir():  # the host's modules hidden by a tmpfs
        assert cmd[:5] == ["unshare", "--mount", "--propagation", "private", "sh"]
        assert cmd[7] == str(harness.HOST_QEMU_MODULES)
    args = cmd[cmd.index(qemu.binary):]
    assert args[1:3] == ["-L", "/q/usr/share/qemu"]
    assert args[args.index("-machine") + 1] == "q35,cxl=on" and args[args.index("-cpu") + 1] == "max,hypervisor=off"
    devices = [args[i + 1] for i, a in enumerate(args) if a == "-device"]
    assert "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot,bus=pcie.0" in devices
    type3 = [d for d in devices if d.startswith("cxl-type3")]
    assert len(type3) == 2 and len({d.split("sn=")[1] for d in type3}) == 2
    assert all("volatile-memdev=" in d for d in type3)
    assert "cxl-fmw.0.targets.0=cxl.1,cxl-fmw.0.size=4G" in args
    assert qemu.env()["QEMU_MODULE_DIR"] == f"/q/usr/lib/{harness.MULTIARCH}/qemu"


def test_the_cxl_layout_loads_the_block_access_plugin(tmp_path: Path) -> None:
    """Under TCG the cxl layout's QEMU gets native/x86_block_access.so (tests/realkernel/README.md, "Real CXL")."""
    layout = harness.LAYOUTS["cxl"]
    assert layout.qemu_plugins == ("x86_block_access",)
    assert all((harness.NATIVE_DIR / f"{name}.c").is_file() for name in layout.qemu_plugins)
    qemu = harness.Qemu("/q/usr/bin/qemu-system-x86_64", (10, 0, 2), Path("/q"))
    so = tmp_path / "x86_block_access-0.so"
    cmd = harness.qemu_command(qemu, _assets(tmp_path), layout, tmp_path / "i", tmp_path / "c", hostroot=True,
                               plugins=[so])
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "-plugin"] == [str(so)]
    assert "-plugin" not in harness.qemu_command(qemu, _assets(tmp_path), harness.LAYOUTS["3node"], tmp_path / "i",
                                                 tmp_path / "c", hostroot=True)


def test_the_host_qemu_is_used_when_new_enough(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("NODEAGENT_QEMU", raising=False)
    monkeypatch.setattr(harness, "qemu_binary", lambda: "/usr/bin/qemu-system-x86_64")
    monkeypatch.setattr(harness, "qemu_version", lambda binary, env=None: (8, 2, 2))
    assert harness.ensure_qemu((8, 0), tmp_path) == harness.Qemu("/usr/bin/qemu-system-x86_64", (8, 2, 2))
    monkeypatch.setattr(harness, "qemu_version", lambda binary, env=None: (7, 2, 22))
    monkeypatch.setenv("NODEAGENT_QEMU", "/usr/bin/qemu-system-x86_64")
    with pytest.raises(harness.HarnessUnavailable, match=r"is QEMU 7\.2\.22; this layout needs >= 8\.0"):
        harness.ensure_qemu((8, 0), tmp_path)


def test_a_fetched_qemu_is_reused_from_its_stamp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("NODEAGENT_QEMU", raising=False)
    monkeypatch.setattr(harness, "qemu_binary", lambda: None)
    binary = tmp_path / "qemu/root/usr/bin/qemu-system-x86_64"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    (tmp_path / "qemu/qemu.json").write_text(json.dumps({"recipe": harness.QEMU_RECIPE, "version": [10, 0, 2],
                                                         "packages": ["qemu-system-x86=1:10.0.2"]}))
    got = harness.ensure_qemu((8, 0), tmp_path)
    assert (got.binary, got.version, got.root) == (str(binary), (10, 0, 2), tmp_path / "qemu/root")
    with pytest.raises(harness.HarnessUnavailable, match=r"has QEMU 10\.0\.2; this layout needs >= 11\.0"):
        harness.ensure_qemu((11, 0), tmp_path)
