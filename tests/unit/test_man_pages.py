"""The man pages in man/ are what scripts/gen-man.py (click-man) makes of the click commands now, and name every
command; the wheel installs them (tests/e2e/test_profiles_shipped.py)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import click

REPO = Path(__file__).resolve().parents[2]
MAN = REPO / "man"


def _gen():
    spec = importlib.util.spec_from_file_location("gen_man", REPO / "scripts" / "gen-man.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_man_pages_are_current(tmp_path: Path) -> None:
    pages = _gen().generate(tmp_path)
    have = {p.name: p.read_text() for p in MAN.glob("*.1")}
    stale = sorted(n for n in pages.keys() | have.keys() if pages.get(n) != have.get(n))
    assert not stale, f"man/ is stale: {stale}; run .venv/bin/python scripts/gen-man.py"


def test_nodeagent_1_names_every_command_and_each_has_its_page() -> None:
    group = _gen().own_cli()
    top = (MAN / "nodeagent.1").read_text()
    assert top.startswith('.TH "NODEAGENT" "1" "" ')
    listed = re.findall(r"^\\fB([a-z-]+)\\fP$", top, flags=re.M)
    assert listed == sorted(group.commands) and "plan" in listed and "sim" not in listed

    def pages(g: click.Group, prefix: str) -> set[str]:
        out = set()
        for name, cmd in g.commands.items():
            out.add(f"{prefix}-{name}.1")
            if isinstance(cmd, click.Group):
                out |= pages(cmd, f"{prefix}-{name}")
        return out

    assert {p.name for p in MAN.glob("*.1")} == pages(group, "nodeagent") | {"nodeagent.1"}
    plan = (MAN / "nodeagent-plan.1").read_text()
    assert "\\-\\-advice" in plan and "Examples:" in plan


def test_the_check_mode_of_the_generator_agrees() -> None:
    run = subprocess.run([sys.executable, str(REPO / "scripts" / "gen-man.py"), "--check"], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
