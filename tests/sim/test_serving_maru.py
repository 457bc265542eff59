"""The Maru devdax rule: one CXL expander kept as devdax for Maru (``memory.dax`` ``use: maru``) while the rest
goes to system RAM; apply converges, the next plan is empty, and ``render serving`` gives Maru's configuration."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nodeagent.cli.main import main
from nodeagent.profile import load_profile
from nodeagent.serving.versions import PINNED
from nodeagent.util.errors import ProfileError

REPO = Path(__file__).resolve().parents[2]
MARU = REPO / "tests" / "data" / "serving" / "cxl-maru.yaml"
TiB = 1024**4
GiB = 1024**3


def _json(capsys, argv: list[str]) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(["--format", "json", *argv])
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture
def applied(make_node, capsys) -> Path:
    root = make_node("h100-cxl")  # dax0.0 (node2) and dax1.0 (node3), 2 TiB each, devdax at boot
    assert main(["--root", str(root), "apply", "-y", str(MARU)]) == 0
    capsys.readouterr()
    return root


def test_apply_keeps_the_maru_device_devdax_and_onlines_the_rest(applied: Path, capsys) -> None:
    from nodeagent.facts import gather
    from nodeagent.facts.dax import from_facts
    from nodeagent.host import open_host

    devs = {d.name: d for d in from_facts(gather(open_host(applied))).devices}
    assert devs["dax1.0"].mode == "devdax" and devs["dax1.0"].blocks_online == 0
    assert devs["dax0.0"].mode == "system-ram" and devs["dax0.0"].zones == {"Normal": devs["dax0.0"].blocks_total}
    code, plan = _json(capsys, ["--root", str(applied), "plan", str(MARU)])
    assert code == 0 and plan["changes"] == [], plan["changes"]  # converged: the next plan is empty
    assert {"dax0.0", "dax1.0"} <= set(plan["unchanged"])  # both decided by their rules, neither to change
    assert not any("dax1.0" in w for w in plan["warnings"])  # the Maru rule decides it: no "matches no rule"


def test_render_lmcache_points_maru_at_the_devdax_device(applied: Path, capsys) -> None:
    code, doc = _json(capsys, ["--root", str(applied), "render", "serving", "--engine", "lmcache"])
    assert code == 0
    assert doc["maru"] == [{"device": "dax1.0", "path": "/dev/dax1.0", "size": 2 * TiB, "node": 3}]
    s = doc["settings"]
    assert s["maru_server"] == ["maru-server", "--port", "5555", "--dax-path", "/dev/dax1.0"]
    cfg = s["config"]
    assert cfg["maru_path"] == "maru://localhost:5555" and cfg["local_cpu"] is False
    ranks = len(doc["ranks"])
    assert cfg["maru_pool_size"] * GiB * ranks <= 2 * TiB  # each worker's share of the device
    assert 2 * TiB - cfg["maru_pool_size"] * GiB * ranks < ranks * GiB // 4
    capsys.readouterr()
    assert main(["--root", str(applied), "render", "serving", "--engine", "lmcache"]) == 0
    out = capsys.readouterr().out
    assert "maru-server --port 5555 --dax-path /dev/dax1.0" in out and "maru_path: maru://localhost:5555" in out


def test_a_release_before_marus_integration_pools_on_the_system_ram_expander_only(applied: Path, capsys) -> None:
    for engine, version in (("vllm", "0.12"), ("sglang", "0.4.10")):
        code, doc = _json(capsys, ["--root", str(applied), "render", "serving", "--engine", engine,
                                   "--version", version])
        assert code == 0 and doc["pool"] == "capacity"
        assert {r["pool_node"] for r in doc["ranks"]} == {2}  # node3 is dax1.0, kept for Maru
        assert any("dax1.0 kept as devdax for Maru" in n and "predates Maru's" in n for n in doc["notes"])
        assert not any("not online" in w for w in doc["warnings"])


def test_vllm_and_sglang_use_marus_own_integration(applied: Path, capsys) -> None:
    """Maru's vLLM KV connector (maru_vllm, vLLM 0.14+) and SGLang HiCache backend (maru_sglang): no LMCache; and
    what every pinned release renders (golden files)."""
    code, doc = _json(capsys, ["--root", str(applied), "render", "serving", "--engine", "vllm"])
    assert code == 0 and doc["pool"] == "maru" and doc["bind"]["mode"] == "devdax"
    s = doc["settings"]
    cfg = json.loads(s["args"][1])
    assert cfg["kv_connector"] == "MaruKVConnector" and cfg["kv_connector_module_path"] == "maru_vllm"
    extra = cfg["kv_connector_extra_config"]
    assert extra["maru_server_url"] == "tcp://localhost:5555" and extra["maru_pool_size"].endswith(("G", "M"))
    assert s["maru_server"][-2:] == ["--dax-path", "/dev/dax1.0"] and s["wrapper"] == []
    code, doc = _json(capsys, ["--root", str(applied), "render", "serving", "--engine", "sglang"])
    assert code == 0 and doc["pool"] == "maru"
    args = doc["settings"]["args"]
    assert args[args.index("--hicache-storage-backend") + 1] == "dynamic"
    assert args[args.index("--hicache-mem-layout") + 1] == "page_first_direct"
    backend = json.loads(args[args.index("--hicache-storage-backend-extra-config") + 1])
    assert backend["module_path"] == "maru_sglang.maru_storage" and backend["interface_v1"] == 1
    # what each pinned release renders for this profile: one golden file per engine and release
    for engine, versions in PINNED.items():
        for version in versions:
            code, doc = _json(capsys, ["--root", str(applied), "render", "serving", "--engine", engine,
                                       "--version", version])
            assert code == 0
            got = {k: doc[k] for k in ("pool", "per_rank_bytes", "maru", "settings", "warnings")}
            path = MARU.parent / f"cxl-maru-{engine}-{version}.json"
            if os.environ.get("NODEAGENT_UPDATE_GOLDEN"):
                path.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
            assert got == json.loads(path.read_text()), f"{path} differs (NODEAGENT_UPDATE_GOLDEN=1 rewrites it)"


def test_an_lmcache_without_the_maru_backend_is_told(applied: Path, capsys) -> None:
    code, doc = _json(capsys, ["--root", str(applied), "render", "serving", "--engine", "lmcache",
                               "--version", "0.3.6"])
    assert code == 0 and "maru_server" not in doc["settings"]
    assert any("no Maru backend (maru_path, first in 0.4.5)" in w for w in doc["warnings"])


HEAD = "apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: t}\nmemory:\n  dax:\n"


def _errors(tmp_path: Path, rules: str) -> list[str]:
    p = tmp_path / "p.yaml"
    p.write_text(HEAD + rules)
    with pytest.raises(ProfileError) as exc:
        load_profile(p)
    return exc.value.errors


def test_a_maru_rule_must_be_devdax(tmp_path: Path) -> None:
    (err,) = _errors(tmp_path, "    - {name: m, match: {devices: [dax1.0]}, mode: system-ram, zone: normal, "
                               "use: maru}\n")
    assert "p.yaml:6:" in err and "use: maru needs mode: devdax" in err


def test_a_maru_rule_after_a_rule_for_every_device_is_refused(tmp_path: Path) -> None:
    (err,) = _errors(tmp_path, "    - {name: all, match: {all: true}, mode: system-ram, zone: normal}\n"
                               "    - {name: m, match: {devices: [dax1.0]}, mode: devdax, use: maru}\n")
    assert "p.yaml:6:" in err and "rule 'm' (use: maru) comes after rule 'all'" in err and "put the Maru rule " \
        "first" in err


def test_verify_serving_finds_the_worker_mapping_the_maru_device(applied: Path, capsys) -> None:
    """A device-dax mapping is a PFN mapping: numa_maps lists it (file=/dev/dax1.0) but counts no page of it."""
    from nodeagent_sim import serving as simserving

    maps = [simserving.Mapping(0x7F0000000000, {}, kind="file=/dev/dax1.0"),
            simserving.Mapping(0x560000000000, {0: 50_000}, kind="heap")]
    simserving.start_engine(applied, "vllm.service", 4343, maps)
    code, rep = _json(capsys, ["--root", str(applied), "verify-serving", "--engine", "lmcache", "--pid", "4343"])
    assert code == 0, rep
    assert rep["devdax"] == ["/dev/dax1.0"] and "maps /dev/dax1.0" in rep["findings"][0]["text"]
    code, rep = _json(capsys, ["--root", str(applied), "verify-serving", "--engine", "lmcache", "--unit", "vllm"])
    assert code == 0 and rep["findings"][0]["status"] == "warn" and "give --pid" in rep["findings"][0]["text"]
    simserving.start_engine(applied, "other.service", 4344, maps[1:])
    code, rep = _json(capsys, ["--root", str(applied), "verify-serving", "--engine", "lmcache", "--pid", "4344"])
    assert code == 3 and "maps none of /dev/dax1.0" in rep["findings"][0]["text"]


def test_a_maru_device_still_online_is_named_before_apply(make_node, capsys) -> None:
    root = make_node("h100-cxl-autoonline")  # both expanders booted as system-ram, online in ZONE_NORMAL
    code, doc = _json(capsys, ["--root", str(root), "render", "serving", "--engine", "lmcache", str(MARU)])
    assert code == 0 and doc["pool"] == "maru"
    assert any("dax1.0 not devdax yet" in w and "--allow-disruptive" in w for w in doc["warnings"])
    code, doc = _json(capsys, ["--root", str(root), "render", "serving", "--engine", "vllm", "--version", "0.12",
                               str(MARU)])
    assert code == 0 and {r["pool_node"] for r in doc["ranks"]} == {2}  # node3 is dax1.0's: never a pool node

