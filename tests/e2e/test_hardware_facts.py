"""Hardware facts (`facts`, `facts --save`), the facts format version rule, and checks judged from saved facts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nodeagent_sim.presets import capture_like

from nodeagent.facts import hardware
from nodeagent.host import open_host
from tests.e2e.cli_helpers import run

REPO = Path(__file__).resolve().parents[2]
PROFILE = str(REPO / "profiles" / "cxl-inference.yaml")
OFFLINE_CAPABLE = ("cpu", "disk", "gpu_pcie", "capacity", "placement")


def _save(root: Path, path: Path, capsys) -> dict:
    code, _, err = run(["--root", str(root), "facts", "--save", str(path)], capsys)
    assert code == 0, err
    return json.loads(path.read_text())


def test_facts_show_cpu_gpus_display_only_and_disks(make_node, capsys) -> None:
    root = make_node("hgx-h100")
    code, out, _ = run(["--root", str(root), "facts"], capsys)
    assert code == 0
    assert "cpu: 224 × Intel(R) Xeon(R) Platinum 8480+ (GenuineIntel, x86_64); virtualization none" in out
    assert "notable flags: avx avx2 fma f16c avx512f avx512_bf16 avx512_vnni amx_tile -hypervisor" in out
    assert "GPUs: 8" in out and "display-only: 0000:05:00.0  ASPEED 0x2000  bound to ast" in out
    assert "shared uplink 0000:19:00.0 (Gen5 x16): 2 GPUs, 2:1" in out
    assert "GPU memory: " in out and "8 × NVIDIA H100 80GB HBM3, nvidia-smi" in out
    assert "disk /models: /dev/md0 xfs" in out
    code, out, _ = run(["--root", str(root), "--format", "json", "facts"], capsys)
    hw = json.loads(out)["sections"]["hardware"]
    gpu = next(d for d in hw["pci"] if d["kind"] == "gpu")
    assert gpu["numa_node"] == 0 and gpu["path"][0] == "0000:18:01.0" and len(gpu["hops"]) == 2


def test_a_static_copy_of_a_guest_shows_its_cpu_model_and_flags(scratch_dir: Path, capsys) -> None:
    """A copy of /sys and /proc (no simulator marker: no command may run) still has the hardware facts."""
    copy = capture_like("l40-kvm64", scratch_dir / "copy")
    assert not (copy / ".nodeagent-machine").exists() and not (copy / "usr/bin/nvidia-smi").exists()
    code, out, err = run(["--root", str(copy), "facts"], capsys)
    assert code == 0, err
    assert "cpu: 8 × Common KVM processor (GenuineIntel, x86_64) — QEMU's kvm64 model; virtualization kvm" in out
    assert "flags (" in out and "hypervisor" in out and "-avx2" in out
    assert "GPUs: 3" in out and "display-only: 0000:00:01.0  QEMU 0x1111" in out


def test_plan_and_drift_never_gather_hardware(make_node, capsys, monkeypatch) -> None:
    def refuse(*_a, **_k):
        raise AssertionError("hardware facts gathered")

    monkeypatch.setattr(hardware, "gather", refuse)
    monkeypatch.setattr(hardware, "read_pci_displays", refuse)
    root = make_node("h100-cxl")
    assert run(["--root", str(root), "plan", PROFILE], capsys)[0] == 0
    assert run(["--root", str(root), "drift", PROFILE], capsys)[0] in (0, 1, 2, 3)


@pytest.mark.parametrize("preset", ["l40-kvm64", "hgx-h100", "qemu-3node"])
def test_offline_checks_say_what_the_live_checks_say(make_node, tmp_path: Path, capsys, preset: str) -> None:
    root = make_node(preset)
    _save(root, tmp_path / f"{preset}.json", capsys)
    _, out, _ = run(["--root", str(root), "--format", "json", "check", PROFILE], capsys)
    live = {r["name"]: r for r in json.loads(out)["results"]}
    code, out, _ = run(["--format", "json", "check", PROFILE, "--facts", str(tmp_path)], capsys)
    (node,) = json.loads(out)["nodes"]
    offline = {r["name"]: r for r in node["results"]}
    for name in OFFLINE_CAPABLE:
        assert offline[name]["status"] == live[name]["status"], name
        if name != "disk":  # offline, a path that is not a mount point is named with the filesystem it is on
            assert offline[name]["summary"] == live[name]["summary"], name
    assert node["cannot_run_offline"] == ["coexistence"]
    assert "cannot run offline: it reads the node's TuneD profile" in offline["coexistence"]["reason"]
    assert code == (4 if any(r["status"] == "fail" for r in live.values()) else 0)


def test_offline_bandwidth_probe_cannot_run_and_says_so(make_node, tmp_path: Path, capsys) -> None:
    root = make_node("workstation")
    _save(root, tmp_path / "w.json", capsys)
    prof = tmp_path / "bw.yaml"
    prof.write_text("apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: bw}\n"
                    "checks:\n  memory_bandwidth: {min_gbps: 40}\n  cpu: {require_flags: [avx2]}\n")
    code, out, _ = run(["check", str(prof), "--facts", str(tmp_path / "w.json")], capsys)
    assert code == 0
    assert "- memory_bandwidth [error] skipped: cannot run offline: it is a bandwidth probe" in out
    assert "offline: memory_bandwidth cannot run from saved facts" in out
    assert "✓ cpu [error] pass" in out
    code, out, _ = run(["check", str(prof), "--skip-checks", "cpu", "--facts", str(tmp_path / "w.json")], capsys)
    assert code == 0 and "- cpu [error] skipped: skipped by --skip-checks" in out
    code, _, err = run(["--root", str(root), "check", str(prof), "--facts", str(tmp_path)], capsys)
    assert code == 64 and "--root and --simulate do not apply" in err


def test_previous_format_is_read_newer_refused(make_node, tmp_path: Path, capsys) -> None:
    doc = _save(make_node("l40-kvm64"), tmp_path / "n.json", capsys)
    v1 = dict(doc, format="nodeagent-facts/v1")
    v1["sections"] = {k: v for k, v in doc["sections"].items() if k != "hardware"}
    old = tmp_path / "old" / "n.json"
    old.parent.mkdir()
    old.write_text(json.dumps(v1))
    code, out, err = run(["plan", PROFILE, "--facts", str(old)], capsys)
    assert code == 0, err
    code, out, _ = run(["check", PROFILE, "--facts", str(old)], capsys)
    assert code == 0  # cpu and disk cannot be judged without hardware facts: skipped, saying why
    assert "- cpu [error] skipped: cannot run offline: the facts file has no hardware facts " \
           "(format nodeagent-facts/v1)" in out
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps(dict(doc, format="nodeagent-facts/v3")))
    for args in (["plan", PROFILE, "--facts", str(newer)], ["check", PROFILE, "--facts", str(newer)]):
        code, _, err = run(args, capsys)
        assert code == 65 and "was written by a newer nodeagent" in err and "Traceback" not in err


def test_markdown_review_has_a_checks_column(make_node, tmp_path: Path, capsys) -> None:
    for preset in ("l40-kvm64", "hgx-h100"):
        _save(make_node(preset), tmp_path / f"{preset}.json", capsys)
    code, out, _ = run(["--format", "markdown", "plan", PROFILE, "--facts", str(tmp_path)], capsys)
    assert code == 0
    assert "| node | kernel | to change | disruptive | cannot be done | checks |" in out
    # hgx-h100 has no CXL: the shipped profile's node reclaim would free its DRAM in place (the placement advisory)
    assert "| ❌ cpu, ❌ disk, ⚠️ capacity |" in out and "| ⚠️ placement |" in out
    assert "`coexistence` cannot run offline" in out
    code, out, _ = run(["--format", "json", "plan", PROFILE, "--facts", str(tmp_path)], capsys)
    assert {n["checks_source"] for n in json.loads(out)["nodes"]} == {"offline"}


def _reference(name: str) -> Path:
    for base in Path(__file__).resolve().parents[3:5]:
        if (base / "shared/reference" / name).is_file():
            return base / "shared/reference" / name
    pytest.skip(f"shared/reference/{name} is not here (it is beside the repository in CI and dev trees)")


def _fields(text: str) -> list[str]:
    return [line.partition(":")[0].strip() for line in text.split("\n\n")[0].splitlines() if ":" in line]


def test_cpuinfo_parses_the_real_capture_and_the_simulator_prints_its_fields(make_node, scratch_dir: Path) -> None:
    ref = _reference("cpuinfo-amd-epyc-vm-6.18.txt")
    node = scratch_dir / "ref"
    (node / "proc").mkdir(parents=True)
    (node / "proc/cpuinfo").write_text(ref.read_text())
    cpu = hardware.read_cpuinfo(open_host(node))
    assert cpu is not None and (cpu.model, cpu.vendor, cpu.count) == ("AMD EPYC", "AuthenticAMD", 1)
    assert {"avx2", "fma", "avx512f", "hypervisor"} <= set(cpu.flags) and cpu.flags[0] == "fpu"
    assert hardware.classify_model(cpu.model) is None  # a host-like model: not the kvm64 class
    real = [f for f in _fields(ref.read_text()) if f != "TLB size"]  # TLB size: AMD only
    for preset in ("h100-cxl", "l40-kvm64", "hgx-h100"):
        assert _fields((make_node(preset) / "proc/cpuinfo").read_text()) == real, preset


def test_measured_bandwidth_is_saved_and_judged_offline(make_node, tmp_path: Path, capsys) -> None:
    root = make_node("l40-kvm64")  # 11.7 GB/s all-CPU: the field report's kvm64 guest
    code, out, err = run(["--root", str(root), "facts", "--measure-bandwidth", "--save", str(tmp_path / "n.json")],
                         capsys)
    assert code == 0, err
    assert "memory bandwidth node0: 11.7 GB/s with 8 CPUs" in out
    prof = tmp_path / "bw.yaml"
    prof.write_text("apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: bw}\n"
                    "checks:\n  memory_bandwidth: {min_gbps: 40}\n")
    code, live, _ = run(["--root", str(root), "check", str(prof)], capsys)
    code_off, out, _ = run(["check", str(prof), "--facts", str(tmp_path / "n.json")], capsys)
    assert code == code_off == 4
    assert "node node0: 11.7 GB/s with 8 CPUs, 5.9 GB/s with one (256MiB buffers) — below min_gbps 40 " \
           "(measured when the facts were captured)" in out
    assert "below min_gbps 40" in live
