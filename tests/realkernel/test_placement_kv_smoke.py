"""The moving-window placement benchmark's CI smoke run: nodeagent's profile applied at boot, the middle envelope
point (16 sequences, 8 MiB/s appended, 4 MiB windows, 8 x 32 MiB prompts at the phase change), one 20 s run.

It must complete — setup, appending, sequence ends and starts, the phase change and its prompts, page-level
samples — and print every figure; whether they meet the targets is the benchmark's verdict
(``python bench/placement/run.py --workload kv``), not this test's: 20 s under TCG say little about placement.
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
def test_moving_window_benchmark_smoke(guest: harness.Guest, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    if shutil.which("gcc") is None and shutil.which("cc") is None:
        pytest.skip("realkernel: no C compiler to build the placement workload (apt-get install gcc)")
    sys.path.insert(0, str(BENCH))
    import run as placement_run

    rc = placement_run.main(["--workload", "kv", "--smoke", "--out", str(tmp_path)])
    captured = capsys.readouterr()
    printed = captured.out + captured.err  # the harness says on stderr when it ran a guest again, and why
    assert rc == 0, f"the smoke run did not complete; raw guest output in {tmp_path}\n{printed}"
    results = json.loads((tmp_path / "results.json").read_text())
    (run,) = results["runs"]
    assert (run["point"], run["config"], run["start"], run["ok"]) == ("mid", "nodeagent", "before", True)
    assert run["kvconf"]["seqs"] == "16" and run["phase_written"] is not None and run["write_s"] is not None
    for key in ("hot_median", "hot_p10", "hot_lowest", "churn", "stranded", "pingpong_mib", "est_mib"):
        assert run[key] is not None, key
    assert 0 <= run["hot_lowest"] <= run["hot_p10"] <= run["hot_median"] <= 100
    raw = (tmp_path / "kv-mid-nodeagent-before-1.txt").read_text()
    assert "PL:SEQ end" in raw and "PL:DSTAT" in raw  # sequences ended, DAMON's counters were read
    assert "| mid | before | nodeagent | 1 |" in (tmp_path / "table.md").read_text()
    with capsys.disabled():
        print("\n" + printed)
