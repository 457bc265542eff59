"""Part of one expander for Maru (``memory.dax`` ``size``): the plan splits a dynamic (CXL) DAX region in the
kernel's order, apply converges (the next plan is empty), drift sees the Maru device change, revert joins the
region again; static regions, sizes past the region and unaligned sizes are refused at plan time with the
profile line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nodeagent_sim import fake_daxctl

from nodeagent.cli.main import main
from nodeagent.profile import load_profile
from nodeagent.util.errors import ProfileError

REPO = Path(__file__).resolve().parents[2]
PART = REPO / "tests" / "data" / "serving" / "cxl-maru-part.yaml"
GiB = 1024**3


def _json(capsys, argv: list[str]) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(["--format", "json", *argv])
    return code, json.loads(capsys.readouterr().out)


def _devices(root: Path) -> dict:
    from nodeagent.facts import gather
    from nodeagent.facts.dax import from_facts
    from nodeagent.host import open_host

    return {d.name: d for d in from_facts(gather(open_host(root))).devices}


def test_split_apply_converge_drift_revert(make_node, capsys, tmp_path: Path) -> None:
    root = make_node("snc2-cxl")  # dax0.0 (node4), dax1.0 (node5): 512 GiB CXL regions, devdax at boot
    prof = tmp_path / "part.yaml"  # region 1 only (dax0.0 is left as it is): fewer blocks to online
    prof.write_text(PART.read_text().replace("512GiB", "128GiB").split("    - name: kv-pool")[0]
                    + "damon:\n  kdamonds: []\n")
    code, plan = _json(capsys, ["--root", str(root), "plan", str(prof)])
    assert code == 0
    (split,) = [c for c in plan["changes"] if c["target"].startswith("dax")]
    assert split["target"] == "dax1.0" and split["op"] == "split" and not split["disruptive"]
    code, doc = _json(capsys, ["--root", str(root), "render", "serving", "--engine", "lmcache", str(prof)])
    assert code == 0 and doc["maru"][0]["device"] == "dax1.1" and doc["maru"][0]["size"] == 128 * GiB
    assert any("dax1.1 not devdax yet" in w for w in doc["warnings"])  # made by the apply

    assert main(["--root", str(root), "apply", "-y", str(prof)]) == 0
    argvs = [c["argv"][1:] for c in fake_daxctl.commands(root)]
    i = argvs.index(["disable-device", "dax1.0"])  # the kernel's order: unbind, shrink, create, online the rest
    assert argvs[i + 1] == ["reconfigure-device", "-s", str(384 * GiB), "dax1.0"]
    assert argvs[i + 2] == ["create-device", "-r", "1", "-s", str(128 * GiB)]
    assert argvs[i + 3] == ["reconfigure-device", "--mode=system-ram", "--no-movable", "dax1.0"]
    devs = _devices(root)
    assert devs["dax1.1"].mode == "devdax" and devs["dax1.1"].size == 128 * GiB
    assert devs["dax1.0"].size == 384 * GiB and devs["dax1.0"].zones == {"Normal": devs["dax1.0"].blocks_total}
    code, plan = _json(capsys, ["--root", str(root), "plan", str(prof)])
    assert code == 0 and plan["changes"] == [] and not plan["problems"], plan  # converged
    assert {"dax1.0", "dax1.1"} <= set(plan["unchanged"])

    code, doc = _json(capsys, ["--root", str(root), "render", "serving", "--engine", "lmcache"])
    assert code == 0 and doc["maru"] == [{"device": "dax1.1", "path": "/dev/dax1.1", "size": 128 * GiB, "node": 5}]
    assert doc["settings"]["maru_server"][-2:] == ["--dax-path", "/dev/dax1.1"]

    assert fake_daxctl.run(root, ["disable-device", "dax1.1"])[0] == 0  # another agent unbinds Maru's device
    code, drift = _json(capsys, ["--root", str(root), "drift"])
    assert code == 3 and [i["target"] for i in drift["items"]] == ["dax1.1"], drift
    assert main(["--root", str(root), "apply", "-y", str(prof)]) == 0
    assert _devices(root)["dax1.1"].mode == "devdax"

    code, _ = _json(capsys, ["--root", str(root), "revert", "--yes", "--allow-disruptive"])
    assert code == 0
    devs = _devices(root)
    assert "dax1.1" not in devs and devs["dax1.0"].size == 512 * GiB and devs["dax1.0"].mode == "devdax"


def test_a_split_of_online_memory_is_disruptive(make_node, capsys) -> None:
    """Both expanders booted as system RAM online: dax1.0 must go offline before its region can be split."""
    root = make_node("h100-cxl-autoonline")
    code, plan = _json(capsys, ["--root", str(root), "plan", str(PART)])
    split = next(c for c in plan["changes"] if c["target"] == "dax1.0")
    assert split["op"] == "split" and split["disruptive"] and "--allow-disruptive" in split["reason"]
    assert split["data"]["steps"][:3] == ["offline", "to-devdax", "disable"], split


def test_a_static_region_is_refused_with_the_profile_line(make_node, capsys, tmp_path: Path) -> None:
    root = make_node("h100-cxl-hmem")  # dax1.0: dax_hmem, soft-reserved (static)
    code, plan = _json(capsys, ["--root", str(root), "plan", str(PART)])
    (p,) = [p for p in plan["problems"] if p["target"] == "dax1.0"]
    assert "cxl-maru-part.yaml:19:" in p["message"] and "static" in p["message"], p
    assert code != 0


def test_sizes_the_region_cannot_take(make_node, capsys, tmp_path: Path) -> None:
    from nodeagent_sim.kernel import SimKernel

    root = make_node("h100-cxl")
    # a region aligned to 1 GiB (as a DAX region may be, e.g. pmem's PUD alignment): 1026 MiB is 2 MiB-aligned only
    SimKernel(root).tree.set("/sys/devices/platform/ACPI0017:00/root0/decoder0.1/region1/dax_region1/dax_region/"
                             "align", GiB)
    for size, why in (("2TiB", "leaves nothing"), ("4TiB", "leaves nothing"),
                      ("1026MiB", "not a multiple of region 1's align")):
        prof = tmp_path / "p.yaml"
        prof.write_text(PART.read_text().replace("size: 512GiB", f"size: {size}"))
        code, plan = _json(capsys, ["--root", str(root), "plan", str(prof)])
        (p,) = [p for p in plan["problems"] if p["target"] == "dax1.0"]
        assert code != 0 and "p.yaml:19:" in p["message"] and why in p["message"], p


HEAD = "apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: t}\nmemory:\n  dax:\n"


@pytest.mark.parametrize(("rule", "want"), [
    ("{name: m, match: {dax_regions: [1]}, mode: devdax, size: 1GiB, rest: {mode: devdax}}", "needs use: maru"),
    ("{name: m, match: {dax_regions: [1, 2]}, mode: devdax, use: maru, size: 1GiB, rest: {mode: devdax}}",
     "match exactly one region"),
    ("{name: m, match: {dax_regions: [1]}, mode: devdax, use: maru, size: 1GiB}", "size needs rest"),
    ("{name: m, match: {dax_regions: [1]}, mode: devdax, use: maru, size: 3MiB, rest: {mode: devdax}}",
     "multiple of 2 MiB"),
    ("{name: m, match: {dax_regions: [1]}, mode: devdax, use: maru, size: 1GiB, rest: {mode: system-ram}}",
     "zone is required"),
    ("{name: m, match: {dax_regions: [1]}, mode: devdax, use: maru, rest: {mode: devdax}}", "rest applies only"),
])
def test_size_rules_are_checked_at_load(tmp_path: Path, rule: str, want: str) -> None:
    p = tmp_path / "p.yaml"
    p.write_text(HEAD + f"    - {rule}\n")
    with pytest.raises(ProfileError) as exc:
        load_profile(p)
    (err,) = exc.value.errors
    assert "p.yaml:6:" in err and want in err, err
