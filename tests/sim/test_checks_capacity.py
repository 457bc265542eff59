"""capacity: the arithmetic, the tiers a node has, and the story of each preset."""

from __future__ import annotations

from nodeagent.checks.capacity import Tier, evaluate, struct_pages, workload
from nodeagent.profile.checks import CapacityCheck
from tests.checks_helpers import messages, one

GB = 10**9
GiB = 1024**3
MODEL = {"params": "70B", "dtype": "bf16", "layers": 80, "kv_heads": 8, "head_dim": 128}
SPEC = {"model": MODEL, "max_batch": 96, "context_length": 16384, "dram_offload": "80GiB"}


def spec(**over) -> CapacityCheck:  # type: ignore[no-untyped-def]
    return CapacityCheck.model_validate({**SPEC, **over})


def test_the_arithmetic() -> None:
    w = workload(spec())
    assert w.weights == 168 * GB  # 70e9 × 2 B × 1.2
    assert w.kv_per_token == 2 * 80 * 8 * 128 * 2 == 327_680  # 320 KiB
    assert w.kv_per_sequence == 327_680 * 16384 == 5_368_709_120
    assert w.need() == 168 * GB + 96 * 5_368_709_120 == 683_396_075_520
    assert workload(spec(model={**MODEL, "kv_dtype": "fp8"})).kv_per_token == 163_840
    assert w.largest_batch(100 * GB) == -1 and w.largest_batch(168 * GB) == 0
    assert struct_pages(4 * 1024**4) == 64 * GiB  # 64 B per 4 KiB page = 1.5625 %


def test_fits_in_hbm_passes_and_an_unused_cxl_tier_is_flagged() -> None:
    tiers = [Tier("HBM", 1000 * GB, "x"), Tier("DRAM", 0, "x"), Tier("CXL", 2000 * GB, "x")]
    f = evaluate(spec(max_batch=60), tiers)
    assert [x.status for x in f] == ["pass", "pass", "warn"]
    assert "fits in HBM: 456.5GiB of 931.3GiB" in f[1].message
    assert "holds nothing at batch 60: the batch was not retuned when the tier was added" in f[2].message


def test_spill_is_reported_per_tier_and_a_missing_tier_fails() -> None:
    hbm = Tier("HBM", 5 * 95830 * 1024**2, "5 × H100 NVL")
    dram = Tier("DRAM", 80 * GiB, "offload")
    f = evaluate(spec(), [hbm, dram, Tier("CXL", 4000 * GB, "dax", ("dax0.0",))])
    assert f[-1].status == "warn"
    assert "needs 636.5GiB, HBM holds 467.9GiB; 80.0GiB to DRAM, 88.5GiB to CXL" in f[-1].message
    assert "largest batch that fits: HBM 62, HBM+DRAM 78, HBM+DRAM+CXL" in f[-1].message
    assert "set max_batch ≤ 62" in f[-1].remedy and "dax0.0" in f[-1].remedy
    f = evaluate(spec(), [hbm, dram])
    assert f[-1].status == "fail"
    assert "it needs a CXL tier of at least 88.5GiB, which this node lacks" in f[-1].message


def test_h100_cxl_batch_96_spills_to_cxl_and_batch_128_fits_only_with_it(make_node) -> None:
    root = make_node("h100-cxl")
    r = one(root, "capacity", {**SPEC, "severity": "warning"})
    assert r.status == "warn"
    assert r.evidence["hbm"] == 5 * 95830 * 1024**2 and "nvidia-smi" in r.evidence["hbm_source"]
    assert r.evidence["cxl_pending"] == {"dax0.0": 2 * 1024**4, "dax1.0": 2 * 1024**4}
    assert r.evidence["struct_pages_for_cxl"] == 64 * GiB
    assert r.evidence["placement"]["CXL"] > 0 and r.evidence["unplaced"] == 0
    assert "88.5GiB to CXL" in messages(r)
    r128 = one(root, "capacity", {**SPEC, "max_batch": 128})
    lb = r128.evidence["largest_batch"]
    assert lb["HBM"] < lb["HBM+DRAM"] < 128 <= lb["HBM+DRAM+CXL"]
    assert r128.evidence["placement"]["CXL"] > 0 and r128.evidence["unplaced"] == 0


def test_online_cxl_nodes_count_as_the_cxl_tier(make_node) -> None:
    r = one(make_node("h100-cxl-autoonline"), "capacity", SPEC)
    assert r.evidence["cxl_nodes"] == [2, 3] and r.evidence["cxl_pending"] == {}
    assert r.evidence["struct_pages_for_cxl"] == 0
    assert r.status == "warn"


def test_workstation_needs_a_cxl_tier_it_lacks(make_node) -> None:
    r = one(make_node("workstation"), "capacity", SPEC)
    assert r.status == "fail"
    assert "it needs a CXL tier of at least 460.9GiB, which this node lacks" in messages(r)
    r = one(make_node("workstation"), "capacity", {**SPEC, "severity": "warning"})
    assert r.status == "warn"


def test_gpu_memory_from_the_profile_and_skip_without_any(make_node) -> None:
    r = one(make_node("workstation"), "capacity", {**SPEC, "gpu_memory": "1TB"})
    assert r.evidence["hbm"] == 10**12 and r.status == "pass"
    r = one(make_node("qemu-3node"), "capacity", SPEC)
    assert r.status == "skipped" and "nvidia-smi is not installed" in r.reason


def test_cxl_struct_pages_are_drams_unless_the_kernel_lets_them_go_on_the_device(make_node) -> None:
    """A device that asks for its memmap on itself (dax_cxl sets memmap_on_memory on every CXL region) still
    takes DRAM for its struct pages while memory_hotplug.memmap_on_memory is N, the kernel's default."""
    from nodeagent_sim.kernel import SimKernel

    root = make_node("h100-cxl")
    k = SimKernel(root)
    for dev in ("dax0.0", "dax1.0"):
        k.tree.set(f"/sys/bus/dax/devices/{dev}/memmap_on_memory", "1")
    r = one(root, "capacity", {**SPEC, "severity": "warning"})
    assert r.evidence["struct_pages_for_cxl"] == 64 * GiB  # 1.56 % of 4 TiB, in DRAM
    k.tree.set("/sys/module/memory_hotplug/parameters/memmap_on_memory", "Y")
    r = one(root, "capacity", {**SPEC, "severity": "warning"})
    assert r.evidence["struct_pages_for_cxl"] == 0  # on the devices now


def test_cxl_regions_this_apply_creates_count_as_the_cxl_tier_and_say_so(make_node) -> None:
    """Bare memdevs: the profile's memory.cxl.regions create the CXL tier in this apply; the check counts it."""
    from pathlib import Path

    from nodeagent.checks import run_checks
    from nodeagent.facts import gather
    from nodeagent.host import open_host
    from nodeagent.profile import load_profile

    root = make_node("h100-cxl-memdevs")
    loaded = load_profile(str(Path(__file__).resolve().parents[2] / "profiles" / "cxl-inference.yaml"))
    host = open_host(root)
    report = run_checks(host, loaded, gather(host, planning=True, profile=loaded),
                        frozenset({"cpu", "disk", "gpu_pcie", "coexistence", "placement"}))
    (r,) = [x for x in report.results if x.name == "capacity"]
    assert r.status == "warn", messages(r)
    assert r.evidence["cxl_created"] == {"dax0.0": 2 * 1024**4, "dax1.0": 2 * 1024**4}
    assert r.evidence["unplaced"] == 0 and r.evidence["struct_pages_for_cxl"] == 64 * GiB
    assert "88.5GiB to CXL (4,096.0GiB of CXL, created by this apply)" in messages(r)
    assert "which this node lacks" not in messages(r)
    assert "dax0.0 (of region0, created by this apply; this profile onlines it)" in messages(r)
