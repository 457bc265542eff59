"""`nodeagent metrics rules|dashboard` print the files shipped in the package, which equal monitoring/'s,
and a wheel built from the tree carries them (and the latency probe's C source)."""

from __future__ import annotations

import json

import yaml

from nodeagent.cli.main import main
from tests.series_helpers import MONITORING, REPO


def test_package_copies_equal_the_documented_files() -> None:
    for name in ("alerts.yaml", "dashboard.json"):
        shipped = REPO / "nodeagent/monitoring" / name
        assert shipped.read_bytes() == (MONITORING / name).read_bytes(), \
            f"nodeagent/monitoring/{name} differs from monitoring/{name}: run `make monitoring`"


def test_metrics_rules_and_dashboard_print_them(capsys) -> None:
    assert main(["metrics", "rules"]) == 0
    out = capsys.readouterr().out
    assert out == (MONITORING / "alerts.yaml").read_text()
    assert yaml.safe_load(out)["groups"]
    assert main(["metrics", "dashboard"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["uid"] == "nodeagent-tiered-memory"


def test_pyproject_ships_them() -> None:
    text = (REPO / "pyproject.toml").read_text()
    for pattern in ('"monitoring/*.yaml"', '"monitoring/*.json"', '"host/latprobe.c"'):
        assert pattern in text, pattern
