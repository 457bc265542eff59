"""This machine's own kernel as a read-only oracle: the read-only commands run on the real root (``--root /``).

Code paths that run only on a real root (``host.is_real``: the udev cross-check of the GPU check, commands
resolved on the host's PATH) are never reached on a simulated one, so a defect there shows nowhere else. Nothing
here writes: ``facts``, ``plan`` and ``check`` never do, the suite's audit hook refuses any write-open of the real
/sys and /proc, and ``make test`` runs inside a namespace where both are read-only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodeagent.cli.main import main

PROFILE = """\
apiVersion: nodeagent/v1
kind: NodeProfile
metadata: {name: real-root-oracle}
checks:
  cpu: {reject_virtual_models: true}
  disk:
    paths: [{path: /, max_used_percent: 100}]
  gpu_pcie: {min_count: 0}
  coexistence: {severity: warning}
  placement: {}
"""


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    p = tmp_path / "oracle.yaml"
    p.write_text(PROFILE)
    return p


def _json(capsys: pytest.CaptureFixture[str]) -> dict:
    out = capsys.readouterr()
    assert "internal error" not in out.err and "Traceback" not in out.err, out.err
    return json.loads(out.out)


def test_check_runs_every_check_on_the_real_root(profile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--root", "/", "--format", "json", "check", str(profile)])
    doc = _json(capsys)
    assert code in (0, 4), doc
    statuses = {r["name"]: r["status"] for r in doc["results"]}
    assert set(statuses) == {"cpu", "disk", "gpu_pcie", "coexistence", "placement"}
    assert set(statuses.values()) <= {"pass", "warn", "fail", "skipped"}
    assert statuses["disk"] == "pass"  # / at most 100 % used: always true


def test_facts_and_plan_read_the_real_root(profile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--root", "/", "--format", "json", "facts"]) == 0
    assert _json(capsys)
    assert main(["--root", "/", "--format", "json", "plan", str(profile)]) == 0
    assert _json(capsys)
