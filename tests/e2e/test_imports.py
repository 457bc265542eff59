"""Which third-party modules each read-only command imports: a regression in start-up cost shows here, in CI,
without timing anything (the timings are in bench/run.py). Each command runs in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROFILE = str(REPO / "profiles" / "cxl-inference.yaml")

PROBE = """\
import json, sys
from nodeagent.cli.main import main
rc = main(sys.argv[1:])
std = sys.stdlib_module_names
sim = ("nodeagent_sim", "nodeagent_sim_machine")  # the simulator's distribution: its package and its plugin module
third = sorted({m.split(".")[0] for m in sys.modules} - std - {"nodeagent", *sim, "__main__",
                                                              "sitecustomize", "_distutils_hack", "usercustomize"})
ours = sorted(m for m in sys.modules if m in ("nodeagent", *sim) or m.startswith(("nodeagent.", "nodeagent_sim.")))
openssl = sorted(m for m in ("_hashlib", "_ssl") if m in sys.modules)  # libcrypto, loaded by hashlib
print("\\nMODULES " + json.dumps({"rc": rc, "third_party": third, "ours": ours, "openssl": openssl}))
"""


def imports(args: list[str], cache: Path) -> list[str]:
    return probe(args, cache)["third_party"]


def probe(args: list[str], cache: Path) -> dict[str, list[str]]:
    """The third-party top-level modules (``_``-private ones left out) and nodeagent's own modules that
    ``nodeagent ARGS`` imported."""
    env = {**os.environ, "NODEAGENT_CACHE": str(cache)}
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=300)
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("MODULES "))
    out = json.loads(line.removeprefix("MODULES "))
    assert out["rc"] in (0, 3), proc.stdout + proc.stderr
    return {"third_party": [m for m in out["third_party"] if not m.startswith("_")], "ours": out["ours"],
            "openssl": out["openssl"]}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A simulated node with the profile applied, and a profile cache that has seen the profile once."""
    from nodeagent_sim import create

    root = tmp_path_factory.mktemp("imports") / "node"
    create(root, "h100-cxl")
    cache = tmp_path_factory.mktemp("imports-cache")
    imports(["--root", str(root), "apply", "--yes", PROFILE], cache)  # validates once and fills the cache
    return root, cache


@pytest.mark.parametrize("args", [
    ["drift"], ["drift", "--record", PROFILE], ["status"], ["plan", PROFILE], ["facts"],
], ids=" ".join)
def test_read_only_commands_import_click_and_nothing_else(node: tuple[Path, Path], args: list[str]) -> None:
    root, cache = node
    assert imports(["--root", str(root), *args], cache) == ["click"]


#: nodeagent's own heavy parts that no read-only command of the timer or the reviewer needs: the profile model and
#: its YAML loader (the cache and last-applied.json keep it validated; the package's light modules -- the cache,
#: the plain-form record, the shipped profiles' index -- are what they use), the checks, the hardware and CXL bus
#: facts (for the facts document and reviews), the simulator (its in-process answers are for writes and probes), and
#: the modules of other commands (loaded when one of their commands is looked up).
NOT_ON_READ_PATHS = ("nodeagent.profile.loaded", "nodeagent.profile.model", "nodeagent.profile.load",
                     "nodeagent.profile.checks", "nodeagent.profile.damon", "nodeagent.profile.json_schema",
                     "nodeagent.checks",
                     "nodeagent.facts.hardware", "nodeagent.facts.cxl", "nodeagent_sim", "nodeagent_sim_machine",
                     "nodeagent_sim.cli",
                     "nodeagent.cli.metrics", "nodeagent.cli.serving", "nodeagent.cli.k8s")


@pytest.mark.parametrize("args", [
    ["drift"], ["drift", "--record", PROFILE], ["plan", PROFILE], ["status"],
], ids=" ".join)
def test_read_only_commands_load_none_of_nodeagent_s_heavy_parts(node: tuple[Path, Path], args: list[str]) -> None:
    root, cache = node
    # status refreshes DAMON's scheme statistics (a write to the kdamond's state file): on a simulated root
    # that write goes through the simulator's kernel, on a real one it is a sysfs write
    heavy = tuple(p for p in NOT_ON_READ_PATHS
                  if not (args == ["status"] and p in ("nodeagent_sim", "nodeagent_sim_machine")))
    if args == ["status"]:  # ... which loads the simulator's kernel rules, never its command line
        ours = probe(["--root", str(root), *args], cache)["ours"]
        assert "nodeagent_sim.kernel" in ours and "nodeagent_sim.cli" not in ours
    # the shipped profile manages CXL regions (memory.cxl): planning it (and drift, which status shows) reads the bus
    heavy = tuple(p for p in heavy if p != "nodeagent.facts.cxl")
    ours = probe(["--root", str(root), *args], cache)["ours"]
    assert [m for m in ours if any(m == p or m.startswith(p + ".") for p in heavy)] == []


@pytest.mark.parametrize("args", [
    ["drift"], ["drift", "--record", PROFILE], ["plan", PROFILE], ["status"],
], ids=" ".join)
def test_read_only_commands_do_not_load_openssl(node: tuple[Path, Path], args: list[str]) -> None:
    """hashlib loads OpenSSL's libcrypto, which costs more than a converged drift's plan: the digests of the
    profile cache and of the advisories are CPython's own sha256 (nodeagent.profile.resolved.sha256)."""
    root, cache = node
    assert probe(["--root", str(root), *args], cache)["openssl"] == []


def test_a_profile_without_cxl_regions_plans_without_the_cxl_bus(node: tuple[Path, Path], tmp_path: Path) -> None:
    root, cache = node
    for f in (REPO / "profiles").glob("*.yaml"):
        (tmp_path / f.name).write_text(f.read_text())
    text = (tmp_path / "cxl-kv-pool.yaml").read_text()
    start = text.index("  cxl:\n")
    end = text.index("  dax:\n", start)
    (tmp_path / "no-regions.yaml").write_text(text[:start] + text[end:])
    probe(["--root", str(root), "plan", str(tmp_path / "no-regions.yaml")], cache)  # validates, fills the cache
    ours = probe(["--root", str(root), "plan", str(tmp_path / "no-regions.yaml")], cache)["ours"]
    assert [m for m in ours if m.startswith("nodeagent.facts.cxl")] == []


def test_a_changed_profile_is_validated_again(node: tuple[Path, Path], tmp_path: Path) -> None:
    root, cache = node
    for f in (REPO / "profiles").glob("*.yaml"):
        (tmp_path / f.name).write_text(f.read_text())
    edited = tmp_path / "base.yaml"  # the file the profile extends
    edited.write_text(edited.read_text() + "\n# edited\n")
    edited = tmp_path / Path(PROFILE).name
    assert {"pydantic", "yaml"} <= set(imports(["--root", str(root), "plan", str(edited)], cache))
    assert imports(["--root", str(root), "plan", str(edited)], cache) == ["click"]


def test_every_command_of_another_module_is_listed_where_the_cli_finds_it() -> None:
    """A command a module registers but ``cli._ELSEWHERE`` does not name would be missing from the CLI."""
    import click

    from nodeagent.cli import main as cli

    for module in sorted({m for m, _ in cli._ELSEWHERE.values()}):
        mod = __import__(f"nodeagent.{module}", fromlist=["register"])
        group = click.Group()
        if hasattr(mod, "register"):
            mod.register(group)
        else:  # cli_sim: one group, `sim`
            group.add_command(mod.sim)
        assert sorted(group.commands) == sorted(n for n, (m, _) in cli._ELSEWHERE.items() if m == module), module
        for name, command in group.commands.items():
            assert cli.cli.commands[name] is command
    assert set(cli.cli.list_commands(click.Context(cli.cli))) >= set(cli._ELSEWHERE)
