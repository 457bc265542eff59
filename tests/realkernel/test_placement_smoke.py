"""The placement benchmark's CI smoke run: nodeagent's profile, applied at boot, one 20 s run in a real guest.

It must complete and print its figures; whether they meet the targets is the benchmark's verdict
(``python bench/placement/run.py``), not this test's: a 20 s run under TCG says little about placement.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import harness
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench/placement"


@pytest.mark.realkernel
def test_placement_benchmark_smoke(guest: harness.Guest, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if shutil.which("gcc") is None and shutil.which("cc") is None:
        pytest.skip("realkernel: no C compiler to build the placement workload (apt-get install gcc)")
    sys.path.insert(0, str(BENCH))
    import run as placement_run

    rc = placement_run.main(["--smoke", "--out", str(tmp_path)])
    captured = capsys.readouterr()
    printed = captured.out + captured.err  # the harness says on stderr when it ran a guest again, and why
    assert rc == 0, f"the smoke run did not complete; raw guest output in {tmp_path}\n{printed}"
    results = json.loads((tmp_path / "results.json").read_text())
    (run,) = results["runs"]
    assert run["config"] == "nodeagent" and run["start"] == "before" and run["ok"]
    for key in ("hot_on_fast", "cold_on_cxl", "other", "migrated_mib", "promoted_mib", "demoted_mib"):
        assert run[key] is not None, key
    assert "| before | nodeagent | 1 |" in (tmp_path / "table.md").read_text()
    with capsys.disabled():
        print("\n" + printed)
