"""Probes that run a command are asked once per boot: a converged apply and a check run no command."""

from __future__ import annotations

import json
from pathlib import Path

from nodeagent.engine.core import Engine
from nodeagent.host import open_host
from nodeagent.profile import load_profile
from nodeagent.state import STATE_DIR, Probes
from nodeagent.state.boot_cache import BOOT_ID

FILE = f"{STATE_DIR}/{Probes.FILE}"

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "profiles" / "cxl-inference.yaml"


def commands_of(root: Path, what: str) -> list[str]:
    """The commands one apply (or check) ran on a fresh Engine, as their executable names."""
    eng = Engine(open_host(str(root)))
    loaded = load_profile(PROFILE)
    if what == "apply":
        assert eng.apply(loaded).ok
    else:
        eng.checks(loaded, eng.facts())
    return [Path(r.argv[0]).name for r in eng.host.commands.log]


def test_a_converged_apply_and_a_check_run_no_command(make_node) -> None:
    root = make_node("h100-cxl")
    assert not (root / FILE.lstrip("/")).exists()
    assert {"systemd-detect-virt", "nvidia-smi"} <= set(commands_of(root, "check"))
    assert not (root / FILE.lstrip("/")).exists(), "a read-only check wrote to the node"
    assert {"systemd-detect-virt", "nvidia-smi", "daxctl"} <= set(commands_of(root, "apply"))
    kept = json.loads((root / FILE.lstrip("/")).read_text())
    assert kept["boot_id"] == (root / BOOT_ID.lstrip("/")).read_text().strip()
    assert commands_of(root, "apply") == []
    assert commands_of(root, "check") == []


def test_another_boot_asks_again(make_node) -> None:
    root = make_node("h100-cxl")
    commands_of(root, "apply")
    boot = root / BOOT_ID.lstrip("/")
    boot.chmod(0o644)
    boot.write_text("00000000-0000-0000-0000-000000000001\n")  # rebooted
    assert {"systemd-detect-virt", "nvidia-smi"} <= set(commands_of(root, "check"))
    assert {"systemd-detect-virt", "nvidia-smi"} <= set(commands_of(root, "apply"))
    assert commands_of(root, "check") == []
    boot.unlink()  # a root without a boot id caches nothing
    assert {"systemd-detect-virt", "nvidia-smi"} <= set(commands_of(root, "check"))
