"""This machine's own DAMON users, read-only: ``status`` and ``plan`` on the real root (``--root /``) list every
configured kdamond and every enabled DAMON module exactly as /sys shows them (nodeagent owns none here: this
machine's kdamond belongs to the hosting environment). Only reads: the audit hook of tests/conftest.py refuses
any write to the real /sys and /proc; ``status`` writes only to kdamonds nodeagent owns, and here it owns none.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nodeagent.cli.main import main

ADMIN = Path("/sys/kernel/mm/damon/admin/kdamonds")
REPO = Path(__file__).resolve().parents[2]


def _read(p: Path) -> str:
    try:
        return p.read_text().strip()
    except OSError:
        return ""


def _configured() -> dict[int, tuple[bool, int | None, str, list[str]]]:
    """index → (running, pid, operations, actions) of every kdamond holding a context, read straight from /sys."""
    out = {}
    for d in sorted(ADMIN.iterdir() if ADMIN.is_dir() else []):
        if not d.name.isdigit():
            continue
        running = _read(d / "state") == "on"
        if not running and _read(d / "contexts" / "nr_contexts") in ("", "0"):
            continue
        ctx = d / "contexts" / "0"
        n = int(_read(ctx / "schemes" / "nr_schemes") or 0)
        out[int(d.name)] = (running, int(_read(d / "pid")) if running else None, _read(ctx / "operations"),
                            [_read(ctx / "schemes" / str(i) / "action") for i in range(n)])
    return out


def _enabled_modules() -> list[str]:
    return sorted(m for m in ("damon_reclaim", "damon_lru_sort", "damon_stat")
                  if _read(Path(f"/sys/module/{m}/parameters/enabled")) == "Y")


@pytest.fixture(scope="module")
def no_state() -> None:
    if Path("/var/lib/nodeagent/ownership.json").exists():
        pytest.skip("nodeagent has state on this machine: some kdamonds may be its own")
    if not ADMIN.is_dir() and not _enabled_modules():
        pytest.skip("no DAMON on this kernel")


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    code = main(["--root", "/", "--format", "json", *args])
    out = capsys.readouterr()
    assert "Traceback" not in out.err and "internal error" not in out.err, out.err
    assert code in (0, 3), out.err
    return json.loads(out.out)


def test_status_lists_every_damon_user_of_this_machine(no_state, capsys) -> None:
    users = _json(capsys, "status")["damon_users"]
    kdamonds = {u["index"]: (u["running"], u["pid"], u["operations"], u["actions"])
                for u in users if u["kind"] == "kdamond"}
    assert kdamonds == _configured()
    assert sorted(u["module"] for u in users if u["kind"] == "module") == _enabled_modules()
    for u in users:
        assert u["effect"] and u["description"].startswith(u["name"])
    main(["--root", "/", "status"])
    text = capsys.readouterr().out
    assert re.search(rf"^DAMON users nodeagent does not own: {len(users) or 'none'}$", text, re.M), text


def test_plan_says_what_this_machine_s_kdamonds_mean_for_the_profile(no_state, capsys) -> None:
    if not _configured():
        pytest.skip("no configured kdamond on this machine")
    plan = _json(capsys, "plan", str(REPO / "profiles" / "cxl-inference.yaml"))
    for index, (running, pid, ops, _) in _configured().items():
        head = f"damon: kdamond {index} ({f'running, pid {pid}' if running else 'stopped'}; {ops};"
        assert any(w.startswith(head) and "is not nodeagent's" in w for w in plan["warnings"]), plan["warnings"]
