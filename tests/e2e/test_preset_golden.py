"""Golden tests: each shipped profile's verdict on each preset, and each preset's hardware facts.

A change that moves a verdict (a check now failing on a healthy HGX, a BMC VGA counted as a GPU again) shows up
here as a diff of ``tests/e2e/golden/presets.json``. After a deliberate change, regenerate it with
``NODEAGENT_UPDATE_GOLDEN=1 pytest tests/e2e/test_preset_golden.py`` and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cli_helpers import run

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).with_name("golden") / "presets.json"
PRESETS = ["h100-cxl", "h100-cxl-autoonline", "l40-kvm64", "workstation", "qemu-3node", "hgx-h100", "snc2-cxl"]
PROFILES = ["cxl-inference.yaml", "cxl-kv-pool.yaml"]
UPDATE = os.environ.get("NODEAGENT_UPDATE_GOLDEN") == "1"


def _hardware(doc: dict[str, Any]) -> dict[str, Any]:
    """What a preset's hardware facts must keep saying."""
    hw = doc["sections"]["hardware"]
    pci = hw["pci"]
    return {
        "cpu": {k: hw["cpu"][k] for k in ("model", "vendor", "count", "virtual_model")},
        "virtualization": hw["virtualization"]["kind"],
        "flags": {f: f in hw["cpu"]["flags"] for f in ("avx2", "fma", "avx512f", "amx_tile", "hypervisor")},
        "gpus": [[d["address"], d["vendor"], d["driver"], d["numa_node"], len(d["hops"])]
                 for d in pci if d["kind"] == "gpu"],
        "display_only": [[d["address"], d["vendor"], d["driver"]] for d in pci if d["kind"] == "display"],
        "shared_uplinks": [[s["uplink"], s["ratio"]] for s in hw["pci_oversubscription"]],
        "disks": [d["path"] for d in hw["disks"]],
        "numa_nodes": [n["id"] for n in doc["nodes"]],
    }


def _verdict(root: Path, profile: str, capsys) -> dict[str, Any]:
    code, out, _ = run(["--root", str(root), "--format", "json", "check", str(REPO / "profiles" / profile)], capsys)
    results = json.loads(out)["results"]
    plan_code, plan_out, _ = run(["--root", str(root), "--format", "json", "plan", str(REPO / "profiles" / profile)],
                                 capsys)
    plan = json.loads(plan_out)
    return {"check_exit": code, "checks": {r["name"]: r["status"] for r in results},
            "plan_exit": plan_code, "plan_blocked": bool(plan.get("blocked"))}


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    return {} if UPDATE or not GOLDEN.exists() else json.loads(GOLDEN.read_text())


@pytest.fixture(scope="module")
def fresh() -> dict[str, Any]:
    out: dict[str, Any] = {}
    yield out
    if UPDATE:
        GOLDEN.parent.mkdir(exist_ok=True)
        old = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
        GOLDEN.write_text(json.dumps({**old, **out}, indent=1, sort_keys=True) + "\n")


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_verdicts_and_hardware(preset: str, make_node, tmp_path: Path, golden, fresh, capsys) -> None:
    root = make_node(preset)
    code, _, err = run(["--root", str(root), "facts", "--save", str(tmp_path / "f.json")], capsys)
    assert code == 0, err
    got = {"hardware": _hardware(json.loads((tmp_path / "f.json").read_text())),
           "verdicts": {p: _verdict(root, p, capsys) for p in PROFILES}}
    fresh[preset] = got
    if UPDATE:
        return
    assert preset in golden, f"no golden entry for {preset}: run with NODEAGENT_UPDATE_GOLDEN=1"
    assert got == golden[preset]


def test_golden_holds_what_real_servers_need() -> None:
    """The properties the golden file freezes, spelled out: a healthy server passes its hardware checks."""
    g = json.loads(GOLDEN.read_text())
    for preset in ("h100-cxl", "hgx-h100", "snc2-cxl", "workstation"):
        checks = g[preset]["verdicts"]["cxl-inference.yaml"]["checks"]
        assert checks["cpu"] == checks["disk"] == checks["gpu_pcie"] == "pass", preset
        assert g[preset]["hardware"]["display_only"][0][1:] == ["0x1a03", "ast"], preset
    assert g["hgx-h100"]["hardware"]["shared_uplinks"] and len(g["hgx-h100"]["hardware"]["gpus"]) == 8
    assert g["snc2-cxl"]["hardware"]["numa_nodes"] == [0, 1, 2, 3]
    kvm = g["l40-kvm64"]
    assert kvm["verdicts"]["cxl-inference.yaml"]["checks"]["cpu"] == "fail"
    assert kvm["hardware"]["display_only"] == [["0000:00:01.0", "0x1234", "bochs-drm"]]


@pytest.mark.parametrize("preset", ["h100-cxl", "hgx-h100", "snc2-cxl", "workstation"])
def test_apply_of_the_shipped_profile_goes_ahead_on_healthy_servers(preset: str, make_node, capsys) -> None:
    """With their BMC VGA, NVMe drives, NICs and PCIe switches, the checks let apply run, and it converges."""
    root = make_node(preset)
    code, out, err = run(["--root", str(root), "apply", "--yes", str(REPO / "profiles" / "cxl-inference.yaml")],
                         capsys)
    assert code == 0, out + err
    assert "✓ gpu_pcie [error] pass" in out and "converged" in out
