"""The profiles ship with the package: an installed nodeagent lists and shows them, plans one by name, and a node's
own profile can extend one by name."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel

from nodeagent.profile import shipped

from .cli_helpers import run

REPO = Path(__file__).resolve().parents[2]
NAMES = ["base", "cxl-inference", "cxl-kv-pool"]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from this checkout, unpacked as pip installs it (a pure-Python wheel: its files as they are)."""
    out = tmp_path_factory.mktemp("wheel")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(out),
                            str(REPO)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr  # pip builds it as `pip install .` and the Containerfile do
    (wheel,) = out.glob("nodeagent-*.whl")
    site = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    return site


def _installed(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``nodeagent ARGS`` from the unpacked wheel, run away from the checkout."""
    code = ("import sys, nodeagent; assert nodeagent.__file__.startswith(sys.argv[1]), nodeagent.__file__; "
            "from nodeagent.cli.main import main; sys.exit(main(sys.argv[2:]))")
    return subprocess.run([sys.executable, "-c", code, str(site), *args], capture_output=True, text=True, cwd=cwd,
                          env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "NODEAGENT_CACHE": str(cwd / "c")},
                          timeout=120)


def test_the_wheel_carries_the_profiles_and_lists_them(installed: Path, tmp_path: Path) -> None:
    assert sorted(p.stem for p in (installed / "nodeagent/profile/shipped").glob("*.yaml")) == NAMES
    r = _installed(installed, tmp_path, "profiles", "list")
    assert r.returncode == 0, r.stderr
    for name in NAMES:
        assert f"\n  {name} " in r.stdout
    assert "(extends base)" in r.stdout and str(installed) in r.stdout
    r = _installed(installed, tmp_path, "--format", "json", "profiles", "show", "cxl-inference")
    doc = json.loads(r.stdout)
    assert doc["extends"] == ["base"] and doc["text"] == (REPO / "profiles/cxl-inference.yaml").read_text()
    # planned by name, from the installed files, on a simulated node
    r = _installed(installed, tmp_path, "--simulate", "small", "plan", "cxl-inference")
    assert r.returncode == 0 and "Plan for profile cxl-inference" in r.stdout, r.stderr


def test_list_says_which_profile_the_node_has(make_node, capsys) -> None:
    root = make_node("small")
    code, out, _ = run(["--root", str(root), "profiles", "list"], capsys)
    assert code == 0 and "Applied to this node: none yet" in out
    assert run(["--root", str(root), "apply", "--yes", "cxl-inference"], capsys)[0] == 0
    code, out, _ = run(["--root", str(root), "--format", "json", "profiles", "list"], capsys)
    doc = json.loads(out)
    assert [p["name"] for p in doc["profiles"]] == NAMES
    assert doc["applied"]["name"] == "cxl-inference"
    assert doc["applied"]["path"] == str(shipped.directory() / "cxl-inference.yaml")


def test_show_prints_a_profile_that_validates_where_it_is_written(tmp_path: Path, capsys) -> None:
    """`profiles show NAME > profile.yaml` starts a profile of one's own: its extends find the shipped base."""
    code, out, _ = run(["profiles", "show", "cxl-kv-pool"], capsys)
    assert code == 0 and out == (REPO / "profiles/cxl-kv-pool.yaml").read_text()
    mine = tmp_path / "profile.yaml"
    mine.write_text(out)
    code, out, err = run(["validate", str(mine)], capsys)
    assert code == 0, err
    code, merged, _ = run(["profiles", "show", "--merged", "cxl-kv-pool"], capsys)
    assert code == 0 and "transparent_hugepage:" in merged  # base's settings merged in


def test_a_node_profile_extends_a_shipped_one_by_name(tmp_path: Path, capsys) -> None:
    mine = tmp_path / "profile.yaml"
    mine.write_text("apiVersion: nodeagent/v1\nkind: NodeProfile\nextends: [cxl-inference]\n"
                    "metadata:\n  name: rack7\nkernel:\n  watermark_scale_factor: 200\n")
    code, out, err = run(["--format", "json", "validate", str(mine)], capsys)
    assert code == 0 and json.loads(out)["profile"] == "rack7", err
    from nodeagent.cli.main import _load

    data = _load(str(mine)).data
    assert data["kernel"]["watermark_scale_factor"] == 200  # its own value wins
    assert data["kernel"]["numa_balancing"] == "memory-tiering" and "damon" in data  # the shipped profile's
    # a file beside it wins over the shipped profile of the same name
    (tmp_path / "cxl-inference").write_text("apiVersion: nodeagent/v1\nkind: NodeProfile\n"
                                            "metadata:\n  name: local\nkernel:\n  numa_balancing: disabled\n")
    assert _load(str(mine)).data["kernel"]["numa_balancing"] == "disabled"


def test_an_unknown_name_is_a_usage_error_that_lists_the_names(capsys) -> None:
    code, _, err = run(["profiles", "show", "cxl-inferenc"], capsys)
    assert code == 64
    assert "no shipped profile named 'cxl-inferenc' (did you mean 'cxl-inference'?)" in err
    assert "base, cxl-inference, cxl-kv-pool" in err
    # a PROFILE that is neither a file nor a shipped name is still the missing file it names
    code, _, err = run(["validate", "no-such-profile"], capsys)
    assert code == 65 and "no-such-profile" in err


def test_a_bare_name_that_is_neither_a_file_nor_shipped_is_a_missing_file(tmp_path: Path, capsys) -> None:
    mine = tmp_path / "p.yaml"
    mine.write_text("apiVersion: nodeagent/v1\nkind: NodeProfile\nextends: [nonexistent]\n"
                    "metadata:\n  name: p\n")
    code, _, err = run(["validate", str(mine)], capsys)
    assert code == 65 and "extends: 'nonexistent': no such file" in err


def test_the_simulated_node_is_untouched_by_listing(make_node, capsys) -> None:
    root = make_node("small")
    before = SimKernel(root).journal()
    assert run(["--root", str(root), "profiles", "list"], capsys)[0] == 0
    assert SimKernel(root).journal() == before


def test_a_shipped_name_works_for_units_and_drift(make_node, capsys) -> None:
    root = str(make_node("small"))
    code, out, err = run(["--root", root, "units", "render", "cxl-inference"], capsys)
    assert code == 0, err
    assert f"apply --yes --wait-memdevs 2min {shipped.directory() / 'cxl-inference.yaml'}" in out
    assert run(["--root", root, "apply", "--yes", "cxl-inference"], capsys)[0] == 0
    code, out, _ = run(["--root", root, "drift", "cxl-inference"], capsys)
    assert code == 0 and "No drift" in out
    code, _, err = run(["--root", root, "units", "render", "no-such-profile"], capsys)
    assert code == 65 and "no-such-profile" in err


def test_the_wheel_installs_the_man_pages(installed: Path) -> None:
    """pip puts a wheel's data files under the environment's prefix: share/man/man1, where `man` finds them."""
    (data,) = installed.glob("nodeagent-*.data")
    pages = {p.name: p.read_text() for p in (data / "data/share/man/man1").glob("*.1")}
    assert pages == {p.name: p.read_text() for p in (REPO / "man").glob("*.1")}
    assert "nodeagent.1" in pages and "nodeagent-plan.1" in pages
