"""A bare CXL memdev hot-plugged after the first apply (``nodeagent sim hot-add DIR --memdev``): the event's scoped
apply (``apply --device memN``, as the udev unit runs it) or a full apply makes its region on the node of the
window it is carved from, onlines its DAX device, widens the DAMON pairing to it, and the next plan is empty; a
revert returns the node to the shape it had after the hot-plug. A node with no empty root port refuses the
hot-plug with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .cli_helpers import run

PROFILE = "cxl-inference"


def _json(out: str) -> dict:
    return json.loads(out)


def _node(scratch_dir: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    root = scratch_dir / "node"
    assert run(["sim", "create", str(root), "--preset", "h100-cxl-slots"], capsys)[0] == 0
    code, _, err = run(["--root", str(root), "apply", PROFILE, "--yes"], capsys)
    assert code == 0, err
    return root


def _dax_devices(root: Path) -> dict[str, tuple[int, str]]:
    """DAX device → (target node, driver) as the simulated sysfs has it."""
    out = {}
    for dev in sorted((root / "sys/bus/dax/devices").iterdir()):
        drv = dev / "driver"
        out[dev.name] = (int((dev / "target_node").read_text()), drv.resolve().name if drv.exists() else "")
    return out


def _regions(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "sys/bus/cxl/devices").iterdir() if p.name.startswith("region"))


@pytest.mark.parametrize("how", ["scoped", "full"])
def test_a_hot_plugged_memdev_converges_in_one_apply(scratch_dir: Path, capsys: pytest.CaptureFixture[str],
                                                      how: str) -> None:
    root = _node(scratch_dir, capsys)
    assert _regions(root) == ["region0", "region1"]
    code, out, err = run(["--format", "json", "sim", "hot-add", str(root), "--memdev", "--size", "256GiB"], capsys)
    doc = _json(out)
    assert code == 0, err
    assert doc["memdev"] == "mem2" and doc["endpoint"] == "endpoint5"
    assert [(u["action"], u["subsystem"]) for u in doc["uevents"]] == [("add", "cxl")]
    assert doc["uevents"][0]["count"] == 6  # the memdev, its endpoint and the endpoint's 4 decoders
    # the plan before the apply names the window's node (socket 0's window: node 2) for the new region's memory
    code, out, _ = run(["--root", str(root), "--format", "json", "plan", PROFILE], capsys)
    planned = _json(out)
    assert code == 0
    targets = [c["target"] for c in planned["changes"]]
    assert "region@0x1d7e0000a003" in targets and "dax2.0" in targets, targets
    args = ["--root", str(root), "apply", PROFILE, "--yes"] + (["--device", "mem2"] if how == "scoped" else [])
    code, out, err = run(args, capsys)
    assert code == 0, out + err
    assert "Result: converged." in out
    assert _regions(root) == ["region0", "region1", "region2"]
    assert _dax_devices(root)["dax2.0"] == (2, "kmem")
    kdamonds = root / "sys/kernel/mm/damon/admin/kdamonds"
    ends = {p.read_text().strip() for p in kdamonds.glob("*/contexts/0/targets/0/regions/*/end")}
    assert str((1 << 40) + 2 * (256 << 30)) in ends  # the promotion kdamond of node 0 now covers both regions
    code, out, _ = run(["--root", str(root), "plan", PROFILE], capsys)
    assert code == 0 and "No changes" in out, out
    # revert: every region nodeagent made goes, the hot-plugged memdev stays a bare memdev
    code, out, err = run(["--root", str(root), "revert", "--yes", "--allow-disruptive"], capsys)
    assert code == 0, out + err
    assert _regions(root) == [] and (root / "sys/bus/cxl/devices/mem2").is_dir()


def test_a_full_bus_refuses_the_hot_plug_with_the_reason(scratch_dir: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    root = _node(scratch_dir, capsys)
    for _ in range(2):  # one empty slot a socket
        assert run(["sim", "hot-add", str(root), "--memdev", "--size", "512GiB"], capsys)[0] == 0
    code, out, err = run(["--format", "json", "sim", "hot-add", str(root), "--memdev", "--size", "512GiB"], capsys)
    assert code == 64 and "no empty root port" in _json(out)["error"]["message"], (out, err)
    code, _, err = run(["sim", "hot-add", str(root), "--memdev", "--size", "1GiB", "--slot", "0000:30:01.0"],
                       capsys)
    assert code == 64 and "0000:30:01.0" in err
    code, _, err = run(["sim", "hot-add", str(root), "--memdev", "--size", "1GiB", "--node", "2"], capsys)
    assert code == 64 and "--memdev takes" in err
    # both new memdevs fit their sockets' windows (2 TiB each, 256 GiB taken): one apply converges
    code, out, err = run(["--root", str(root), "apply", PROFILE, "--yes"], capsys)
    assert code == 0 and "Result: converged." in out, out + err
    assert {d: n for d, (n, _) in _dax_devices(root).items()} == {"dax0.0": 2, "dax1.0": 3, "dax2.0": 2,
                                                                   "dax3.0": 3}
