"""render serving (golden, per preset and engine), the bind probe's fallback, and verify-serving on simulated nodes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel
from nodeagent_sim import serving as simserving

from nodeagent.cli.main import main
from nodeagent.serving.versions import PINNED

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "data" / "serving"
PROFILES = REPO / "profiles"
GiB = 1024**3

#: shape → (preset, profile applied first or None, profile rendered against)
SHAPES = {
    "h100-cxl": ("h100-cxl", None, "cxl-inference"),  # CXL to be onlined movable: the pool goes to DRAM
    "cxl-kv-pool": ("h100-cxl", "cxl-kv-pool", None),  # applied: CXL in ZONE_NORMAL, the last applied profile
    "hgx-h100": ("hgx-h100", None, "cxl-inference"),
    "workstation": ("workstation", None, "cxl-inference"),
}


def _node(make_node, shape: str) -> Path:
    preset, applied, _ = SHAPES[shape]
    root = make_node(preset)
    if applied:
        assert main(["--root", str(root), "apply", "-y", str(PROFILES / f"{applied}.yaml")]) == 0
    return root


def _render(capsys, root: Path, engine: str, profile: str | None, *extra: str) -> tuple[int, dict]:
    capsys.readouterr()
    argv = ["--root", str(root), "--format", "json", "render", "serving", "--engine", engine, *extra]
    if profile:
        argv.append(str(PROFILES / f"{profile}.yaml"))
    code = main(argv)
    return code, json.loads(capsys.readouterr().out)


def _golden(doc: dict) -> dict:
    """What the golden files pin: the settings and the decisions, not the free-memory arithmetic's inputs."""
    return {k: doc[k] for k in ("pool", "per_rank_bytes", "total_bytes", "wanted_bytes", "ranks", "settings",
                                "warnings")} | {"bind": {k: doc["bind"][k] for k in ("mode", "nodes")}}


@pytest.mark.parametrize(("engine", "version"), [(e, v) for e, vs in PINNED.items() for v in vs])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_golden(make_node, capsys, shape: str, engine: str, version: str) -> None:
    """One golden file per preset shape, engine and pinned release: what that release's options render as."""
    root = _node(make_node, shape)
    code, doc = _render(capsys, root, engine, SHAPES[shape][2], "--version", version)
    assert code == 0 and doc["version"] == version
    got = _golden(doc)
    path = GOLDEN / f"{shape}-{engine}-{version}.json"
    if os.environ.get("NODEAGENT_UPDATE_GOLDEN"):
        path.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
    assert got == json.loads(path.read_text()), f"{path} differs (NODEAGENT_UPDATE_GOLDEN=1 rewrites it)"


def test_movable_cxl_is_named_and_the_pool_rebound_to_dram(make_node, capsys) -> None:
    root = _node(make_node, "h100-cxl")
    _, doc = _render(capsys, root, "sglang", "cxl-inference")
    assert doc["pool"] == "latency"
    assert {r["pool_node"] for r in doc["ranks"]} == {0, 1}  # each GPU's own socket
    assert all(r["pool_node"] == r["gpu_node"] for r in doc["ranks"])
    warn = " ".join(doc["warnings"])
    assert "ZONE_MOVABLE" in warn and "cxl-kv-pool.yaml" in warn and "zone: normal, use: pinned-pool" in warn
    assert "--disable-hicache-numa-detect" not in doc["settings"]["args"]


def test_capacity_pool_binds_each_rank_to_the_cxl_node_of_its_socket(make_node, capsys) -> None:
    root = _node(make_node, "cxl-kv-pool")
    for engine in ("vllm", "sglang", "lmcache"):
        _, doc = _render(capsys, root, engine, None)
        assert doc["pool"] == "capacity"
        assert {(r["gpu_node"], r["pool_node"]) for r in doc["ranks"]} == {(0, 2), (1, 3)}
        s = doc["settings"]
        if engine == "vllm":
            assert s["wrapper"] == ["numactl", "--membind=2,3"]
            assert "--numa-bind" not in s["args"]  # it would bind each worker to a node with CPUs
            cfg = json.loads(s["args"][s["args"].index("--kv-transfer-config") + 1])
            assert cfg["kv_connector"] == "OffloadingConnector"
            assert cfg["kv_connector_extra_config"]["cpu_bytes_to_use"] == doc["total_bytes"]  # the whole engine
        elif engine == "sglang":
            assert "--disable-hicache-numa-detect" in s["args"] and s["wrapper"] == ["numactl", "--membind=2,3"]
            gb = int(s["args"][s["args"].index("--hicache-size") + 1])
            assert gb == int(doc["per_rank_bytes"] / 1e9)  # GB per rank
        else:
            cfg = s["config"]
            assert cfg["numa_mode"] == "manual" and cfg["max_local_cpu_size"] * GiB == doc["per_rank_bytes"]
            assert {int(k): v for k, v in cfg["extra_config"]["gpu_to_numa_mapping"].items()} == \
                {r["gpu"]: r["pool_node"] for r in doc["ranks"]}


def test_pool_fits_the_node_after_the_reserves(make_node, capsys) -> None:
    """The class property: per rank × ranks on a node never exceeds what the node has free less its reserves."""
    for shape in SHAPES:
        root = _node(make_node, shape)
        _, doc = _render(capsys, root, "sglang", SHAPES[shape][2])
        for n in doc["nodes"]:
            assert doc["per_rank_bytes"] * n["ranks"] <= n["usable"] <= n["free"]
            assert n["os_reserve"] >= GiB


def test_bind_probe_falls_back_membind_preferred_none(make_node, capsys) -> None:
    root = _node(make_node, "hgx-h100")
    simserving.deny(root, {"membind": "EPERM"})
    _, doc = _render(capsys, root, "vllm", "cxl-inference")
    assert doc["bind"]["mode"] == "preferred" and doc["settings"]["wrapper"] == ["numactl", "--preferred=0"]
    assert doc["bind"]["refused"][0]["mode"] == "membind" and "EPERM" in doc["bind"]["refused"][0]["why"]
    simserving.deny(root, {"membind": "EPERM", "preferred": "EINVAL"})
    _, doc = _render(capsys, root, "vllm", "cxl-inference")
    assert doc["bind"]["mode"] == "none" and doc["settings"]["wrapper"] == []
    assert any("cannot be set" in w for w in doc["warnings"])


def test_pending_pool_nodes_are_not_probed(make_node, capsys) -> None:
    root = make_node("h100-cxl")  # devdax: cxl-kv-pool would online them, not yet done
    _, doc = _render(capsys, root, "vllm", "cxl-kv-pool")
    assert doc["pool"] == "capacity" and doc["bind"]["mode"] == "unprobed"
    assert "not online yet" in doc["bind"]["how"]


def _plan(capsys, root: Path) -> dict:
    return _render(capsys, root, "vllm", None)[1]


def _verify(capsys, root: Path, *args: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(["--root", str(root), "--format", "json", "verify-serving", *args])
    doc = json.loads(capsys.readouterr().out)
    assert doc["format_version"] == 1
    return code, doc


def test_verify_serving_finds_the_pool_on_plan(make_node, capsys) -> None:
    root = _node(make_node, "cxl-kv-pool")
    doc = _plan(capsys, root)
    per_node = {}
    for r in doc["ranks"]:
        per_node[r["pool_node"]] = per_node.get(r["pool_node"], 0) + doc["per_rank_bytes"] // 4096
    maps = [simserving.Mapping(0x7F0000000000 + i * 2**40, {n: p}, simserving.policy_text("membind", [2, 3]))
            for i, (n, p) in enumerate(sorted(per_node.items()))]
    maps.append(simserving.Mapping(0x560000000000, {0: 50_000}, kind="heap"))
    simserving.start_engine(root, "vllm.service", 4242, maps)
    code, rep = _verify(capsys, root, "--unit", "vllm")
    assert code == 0, rep
    assert rep["source"] == "memory.numa_stat" and rep["ok"]
    tiers = {u["node"]: u["tier"] for u in rep["nodes"]}
    assert tiers[2] == "CXL" and tiers[0] == "DRAM"
    code, rep = _verify(capsys, root, "--pid", "4242")
    assert code == 0 and rep["source"] == "numa_maps" and "mmap lock" in rep["cost"]


def test_verify_serving_names_a_pool_stranded_on_dram(make_node, capsys) -> None:
    root = _node(make_node, "cxl-kv-pool")
    doc = _plan(capsys, root)
    pages = doc["total_bytes"] // 4096
    # bound to CXL, yet on DRAM: pinned before the policy was set
    simserving.start_engine(root, "sglang.service", 777,
                            [simserving.Mapping(0x7F0000000000, {0: pages}, simserving.policy_text("membind", [2]))])
    code, rep = _verify(capsys, root, "--cgroup", "system.slice/sglang.service")
    assert code == 3 and not rep["ok"]
    text = " ".join(f["text"] for f in rep["findings"])
    assert "stranded on node0" in text and "locked" in text
    code, rep = _verify(capsys, root, "--pid", "777")
    assert code == 3
    assert any("off the node its policy binds it to" in f["text"] for f in rep["findings"])


def test_verify_serving_usage_errors(make_node, capsys) -> None:
    root = _node(make_node, "cxl-kv-pool")
    assert main(["--root", str(root), "verify-serving"]) == 64
    assert main(["--root", str(root), "verify-serving", "--unit", "nope"]) == 1
    assert "no cgroup of that name" in capsys.readouterr().err
    assert main(["--root", str(root), "verify-serving", "--pid", "99999"]) == 1


def test_text_output_says_the_launch_line_and_the_model(make_node, capsys) -> None:
    root = _node(make_node, "cxl-kv-pool")
    capsys.readouterr()
    assert main(["--root", str(root), "render", "serving", "--engine", "sglang"]) == 0
    out = capsys.readouterr().out
    assert "capacity pool on ZONE_NORMAL CXL" in out
    assert "numactl --membind=2,3 python3 -m sglang.launch_server" in out and "--disable-hicache-numa-detect" in out
    assert "usable = free − OS reserve − weights' page cache − pinned overheads" in out
    assert "GB (10^9) per rank" in out
    capsys.readouterr()
    assert main(["--root", str(root), "render", "serving", "--engine", "lmcache"]) == 0
    out = capsys.readouterr().out
    assert "numa_mode: manual" in out and "gpu_to_numa_mapping:" in out and "    0: 2" in out


def test_no_profile_anywhere_is_exit_65_naming_the_place(make_node, capsys) -> None:
    root = make_node("workstation")
    assert main(["--root", str(root), "render", "serving", "--engine", "vllm"]) == 65
    assert "/etc/nodeagent/profile.yaml" in capsys.readouterr().err


def test_sglang_is_told_its_hicache_check_ignores_reserved_hugepages(make_node, capsys) -> None:
    """sgl-project/sglang#34972: HiCache's host-pool check reads MemAvailable, which leaves reserved HugePages out."""
    root = make_node("h100-cxl")
    k = SimKernel(root)
    k.tree.set("/proc/meminfo", k.tree.read("/proc/meminfo") + "\nHugePages_Total:    8192\nHugepagesize:       2048 kB"
               "\nHugetlb:        16777216 kB")
    code, doc = _render(capsys, root, "sglang", "cxl-inference")
    assert code == 0
    (w,) = [w for w in doc["warnings"] if "HugePages" in w]
    assert "16.0 GiB" in w and "sgl-project/sglang#34972" in w and "SGLANG_HUGEPAGE_SIZE" in w
    code, doc = _render(capsys, root, "vllm", "cxl-inference")
    assert not [w for w in doc["warnings"] if "HugePages" in w]
    code, doc = _render(capsys, make_node("h100-cxl"), "sglang", "cxl-inference")  # no reservation: nothing said
    assert not [w for w in doc["warnings"] if "HugePages" in w]
