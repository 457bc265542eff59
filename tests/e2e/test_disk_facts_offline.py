"""Disk facts per checked path: `facts --save` records, for each path the profile's disk check lists, whether it
exists and the filesystem it is on, so `check --facts` judges the disk check exactly as on the node (must_exist
included). Saved without a profile, the facts hold every mount point and the check says which paths it could not
resolve."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodeagent.facts import FORMAT
from tests.e2e.cli_helpers import run

#: Every shape a disk-check path can take: a mount point, a directory on one, a missing path (judged by its
#: parent's filesystem, or refused with must_exist), a missing path under a missing directory, the root.
PATHS = [
    {"path": "/models", "min_free": "1GiB"},
    {"path": "/models/llama", "must_exist": True, "max_used_percent": 99},
    {"path": "/models/llama/absent", "must_exist": True},
    {"path": "/var/cache/nodeagent-test/deep", "min_free_inodes": 1000},
    {"path": "/srv/data", "min_free": "1TiB"},
    {"path": "/", "max_used_percent": 95},
]


def profile(tmp_path: Path, paths: list[dict] = PATHS, name: str = "disk-paths") -> str:
    p = tmp_path / f"{name}.yaml"
    doc = {"apiVersion": "nodeagent/v1", "kind": "NodeProfile", "metadata": {"name": name},
           "checks": {"disk": {"paths": paths}}}
    p.write_text(json.dumps(doc))  # JSON is YAML
    return str(p)


def disk_result(out: str) -> dict:
    doc = json.loads(out)
    results = doc["nodes"][0]["results"] if "nodes" in doc else doc["results"]
    return next(r for r in results if r["name"] == "disk")


def live_and_offline(root: Path, prof: str, facts: Path, capsys) -> tuple[dict, dict]:
    _, out, _ = run(["--root", str(root), "--format", "json", "check", prof], capsys)
    live = disk_result(out)
    _, out, err = run(["--format", "json", "check", prof, "--facts", str(facts)], capsys)
    return live, disk_result(out)


@pytest.mark.parametrize("preset", ["l40-kvm64", "hgx-h100", "qemu-3node", "workstation"])
def test_saved_with_the_profile_offline_judges_every_path_as_live(make_node, tmp_path: Path, capsys,
                                                                  preset: str) -> None:
    root = make_node(preset)
    (root / "models/llama").mkdir(parents=True, exist_ok=True)
    prof = profile(tmp_path)
    facts = tmp_path / f"{preset}.json"
    code, _, err = run(["--root", str(root), "facts", "--save", str(facts), "--profile", prof], capsys)
    assert code == 0, err
    doc = json.loads(facts.read_text())
    assert doc["format"] == FORMAT  # additive fields: the same format version
    hw = doc["sections"]["hardware"]
    recorded = {p["path"]: p for p in hw["checked_paths"]["paths"]}
    assert hw["checked_paths"]["profile"] == "disk-paths" and list(recorded) == [p["path"] for p in PATHS]
    assert recorded["/models/llama"]["exists"] and not recorded["/models/llama/absent"]["exists"]
    assert recorded["/models/llama/absent"]["measured"] == "/models/llama"
    assert recorded["/var/cache/nodeagent-test/deep"]["measured"] in ("/var/cache", "/var", "/")
    assert all(p["mount"] and p["usage"] for p in recorded.values())
    assert any(m["fstype"] in ("proc", "sysfs") for m in hw["mounts"])  # every mount point, pseudo ones too
    live, offline = live_and_offline(root, prof, facts, capsys)
    assert offline["findings"] == live["findings"] and offline["status"] == live["status"] == "fail"
    assert offline["summary"] == live["summary"]
    assert offline["evidence"]["paths"] == live["evidence"]["paths"]
    assert "unresolved" not in offline["evidence"]
    assert any(f["message"] == "/models/llama/absent does not exist" for f in offline["findings"])


def test_without_a_profile_facts_fall_back_to_the_last_applied_one(make_node, tmp_path: Path, capsys) -> None:
    root = make_node("l40-kvm64")
    prof = profile(tmp_path, [{"path": "/models/weights", "must_exist": True}], name="applied")
    assert run(["--root", str(root), "apply", "--yes", "--skip-checks", "disk", prof], capsys)[0] == 0
    facts = tmp_path / "n.json"
    assert run(["--root", str(root), "facts", "--save", str(facts)], capsys)[0] == 0
    checked = json.loads(facts.read_text())["sections"]["hardware"]["checked_paths"]
    assert checked["profile"] == "applied" and [p["path"] for p in checked["paths"]] == ["/models/weights"]
    live, offline = live_and_offline(root, prof, facts, capsys)
    assert offline["findings"] == live["findings"] and live["findings"][0]["message"] == \
        "/models/weights does not exist"
    # a different profile's paths were not recorded: said so, judged by mount point
    other = profile(tmp_path, [{"path": "/models/other", "must_exist": True}], name="other")
    _, out, _ = run(["--format", "json", "check", other, "--facts", str(facts)], capsys)
    r = disk_result(out)
    assert r["evidence"]["unresolved"] == ["/models/other"]
    assert "profile 'applied', not this one" in r["evidence"]["unresolved_why"]


def test_saved_without_any_profile_says_which_paths_it_could_not_resolve(make_node, tmp_path: Path,
                                                                         capsys) -> None:
    root = make_node("l40-kvm64")
    facts = tmp_path / "n.json"
    assert run(["--root", str(root), "facts", "--save", str(facts)], capsys)[0] == 0
    hw = json.loads(facts.read_text())["sections"]["hardware"]
    assert "checked_paths" not in hw and {m["path"] for m in hw["mounts"]} >= {"/", "/models"}
    prof = profile(tmp_path)
    _, out, _ = run(["--format", "json", "check", prof, "--facts", str(facts)], capsys)
    r = disk_result(out)
    assert r["evidence"]["unresolved"] == [p["path"] for p in PATHS if p["path"] not in ("/models", "/")]
    assert r["evidence"]["unresolved_why"] == "the facts were saved without a profile"
    warned = [f["message"] for f in r["findings"] if f["status"] == "warn"]
    assert warned == [f"{p}: must_exist cannot be judged offline: the facts do not record whether the path exists "
                      "(the facts were saved without a profile)" for p in ("/models/llama", "/models/llama/absent")]
    shown = next(f["message"] for f in r["findings"] if f["message"].startswith("/srv/data"))
    assert "not resolved: the facts were saved without a profile; placed on / by the mount table" in shown
    code, out, _ = run(["check", prof, "--facts", str(facts)], capsys)
    assert "--profile PROFILE" in out  # the fix: capture with the profile


def test_a_v2_file_from_before_the_mount_table_still_reads(make_node, tmp_path: Path, capsys) -> None:
    root = make_node("l40-kvm64")
    facts = tmp_path / "n.json"
    assert run(["--root", str(root), "facts", "--save", str(facts)], capsys)[0] == 0
    doc = json.loads(facts.read_text())
    del doc["sections"]["hardware"]["mounts"]
    facts.write_text(json.dumps(doc))
    prof = profile(tmp_path, [{"path": "/models/x", "min_free": "1GiB"}])
    code, out, _ = run(["--format", "json", "check", prof, "--facts", str(facts)], capsys)
    r = disk_result(out)
    assert r["status"] == "pass" and r["evidence"]["paths"][0]["mount"] == "/models"
