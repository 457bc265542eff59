"""The standard node layout: /etc/nodeagent/profile.yaml under --root, and the units that use it."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from .cli_helpers import run

PROFILES = Path(__file__).resolve().parents[2] / "profiles"


def _install_profile(root: Path) -> Path:
    etc = root / "etc" / "nodeagent"
    etc.mkdir(parents=True, exist_ok=True)
    shutil.copy(PROFILES / "base.yaml", etc / "base.yaml")  # extends resolve against /etc/nodeagent
    shutil.copy(PROFILES / "cxl-inference.yaml", etc / "profile.yaml")
    return etc / "profile.yaml"


@pytest.mark.parametrize("command", [["plan"], ["check"], ["validate"], ["apply", "--yes"], ["units", "render"]])
def test_without_a_profile_commands_say_where_they_looked(command: list[str], make_node, capsys) -> None:
    root = make_node("small")
    code, out, err = run([*command, "--root", str(root)], capsys)
    assert code == 65 and out == ""
    assert "no PROFILE given, and the node has no profile at /etc/nodeagent/profile.yaml" in err
    assert "hint: give the profile" in err
    # the hint is a command that exists
    assert f"nodeagent {' '.join(c for c in command if not c.startswith('-'))} PROFILE" in err


def test_the_node_profile_is_used_and_extends_resolve_beside_it(make_node, capsys) -> None:
    root = make_node("small")
    _install_profile(root)
    code, out, _ = run(["plan", "--root", str(root)], capsys)
    assert code == 0 and out.startswith("Plan for profile cxl-inference")
    assert "kernel.transparent_hugepage" in out  # from base.yaml, beside it
    code, out, _ = run(["apply", "--yes", "--root", str(root), "--format", "json"], capsys)
    assert code == 0 and json.loads(out)["status"] == "converged"


def test_drift_and_status_use_the_last_applied_profile_and_say_when_the_file_changed(make_node, capsys) -> None:
    root = make_node("small")
    path = _install_profile(root)
    assert run(["apply", "--yes", "--root", str(root)], capsys)[0] == 0
    code, out, _ = run(["drift", "--root", str(root)], capsys)
    assert code == 0 and "changed at" not in out
    later = time.time() + 5
    os.utime(path, (later, later))
    code, out, _ = run(["drift", "--root", str(root)], capsys)
    assert code == 0 and f"{path} changed at" in out and "drift is measured against what was applied" in out
    code, out, _ = run(["status", "--root", str(root)], capsys)
    assert f"note: {path} changed at" in out


def test_units_run_the_installed_script_on_the_node_profile(make_node, capsys) -> None:
    root = make_node("small")
    _install_profile(root)
    code, out, _ = run(["units", "render", "--root", str(root), "--format", "json"], capsys)
    assert code == 0
    apply = json.loads(out)["files"]["/etc/systemd/system/nodeagent-apply.service"]
    exec_start = next(line for line in apply.splitlines() if line.startswith("ExecStart="))
    assert exec_start.endswith(" apply --yes --wait-memdevs 2min /etc/nodeagent/profile.yaml")
    assert exec_start.removeprefix("ExecStart=").split()[0].endswith("/nodeagent")
    code, out, _ = run(["units", "render", "--root", str(root), "--exe", "/usr/local/bin/nodeagent",
                        "--profile", "/srv/profiles/gpu.yaml"], capsys)
    assert code == 0
    assert "ExecStart=/usr/local/bin/nodeagent apply --yes --wait-memdevs 2min /srv/profiles/gpu.yaml" in out


def test_units_follow_the_last_applied_profile_like_drift_and_status(make_node, capsys) -> None:
    root = make_node("small")
    assert run(["apply", "--yes", "--root", str(root), str(PROFILES / "cxl-inference.yaml")], capsys)[0] == 0
    code, out, err = run(["units", "render", "--root", str(root)], capsys)
    assert code == 0 and "Description=nodeagent: apply node profile cxl-inference" in out
    assert f"apply --yes --wait-memdevs 2min {PROFILES / 'cxl-inference.yaml'}" in out
    assert "the profile last applied to this node" in err
    # the node's own profile, applied: the units name it as the node sees it, inside the root
    _install_profile(root)
    assert run(["apply", "--yes", "--root", str(root)], capsys)[0] == 0
    code, out, err = run(["units", "render", "--root", str(root)], capsys)
    assert code == 0 and "--wait-memdevs 2min /etc/nodeagent/profile.yaml" in out and err == ""


def test_units_install_on_a_simulated_root_says_so(make_node, capsys) -> None:
    root = make_node("small")
    _install_profile(root)
    code, out, _ = run(["units", "install", "--root", str(root)], capsys)
    assert code == 0
    assert out.startswith(f"simulated node at {root}: wrote the units there, not into this machine's systemd")
    assert f"wrote {root}/etc/systemd/system/nodeagent-apply.service" in out
    assert "on a real node, next: systemctl daemon-reload" in out
    assert (root / "etc/systemd/system/nodeagent-drift.timer").is_file()
