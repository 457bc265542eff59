"""Pure parts of placement: /proc/zoneinfo parsing, and the placement benchmark's figures (bench/placement)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from nodeagent.facts.reclaim import ReclaimFacts, parse_lru_gen, parse_zoneinfo

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench/placement"))
import figures  # noqa: E402

# The shape of a 6.12 /proc/zoneinfo (abridged): per-node statistics in the node's first zone, the flag after the
# first zone's pagesets, watermarks per zone, and pageset lines whose names look like watermarks ("high:").
ZONEINFO = """\
Node 0, zone      DMA
  per-node stats
      nr_inactive_anon 632416
      pgpromote_success 0
  pages free     3776
        boost    0
        min      132
        low      165
        high     198
        promo    231
        spanned  4095
        managed  3840
        protection: (0, 3018, 3018, 3018, 3018)
  pagesets
    cpu: 0
              count:    0
              high:     0
              batch:    1
  node_unreclaimable:  1
  start_pfn:           1
Node 0, zone    DMA32
  pages free     10496
        min      8770
        low      10962
        high     13154
        promo    15346
        managed  253773
Node 2, zone  Movable
  per-node stats
      nr_inactive_anon 3
  pages free     360448
        min      720
        low      901
        high     1081
        promo    1261
  node_unreclaimable:  0
"""


def test_zoneinfo_flag_per_node_and_watermarks_summed_over_zones() -> None:
    got = parse_zoneinfo(ZONEINFO)
    assert got[0] == {"unreclaimable": True, "min": 8902, "low": 11127, "high": 13352, "promo": 15577}
    assert got[2]["unreclaimable"] is False and got[2]["high"] == 1081
    assert parse_zoneinfo("") == {}


def sample(t: float, hot: tuple[int, int, int], cold: tuple[int, int, int], migrated: int = 0,
           promoted: int = 0, demoted: int = 0) -> str:
    h = " ".join(map(str, (*hot, 0, 0, 0, 0, 0, 0)))
    c = " ".join(map(str, (*cold, 0, 0, 0, 0, 0, 0)))
    return (f"PL:SAMPLE {t:.2f} hot {h} cold {c} vm pgmigrate_success={migrated} pgpromote_success={promoted} "
            f"pgdemote_kswapd={demoted} pgdemote_direct=0 numa_hint_faults=7")


def run_output(samples: list[str], rc: int = 0) -> str:
    return "\n".join(["PL:CONFIG nodeagent START before kernel=6.12.95", "  apply| Result: converged.",
                      "PL:APPLY-RC 0", "PL:APPLIED seconds=8.5",
                      "PL:STATE full node0_free_kb=41952 node0_unreclaimable=1", "PL:TOUCHED t=5.80",
                      "PL:TLB reach=1536", *samples, "PL:END passes=10 tlb_flushes=213", f"PL:WORKLOAD-RC {rc}",
                      "PL:DAMON kdamond=0 scheme=0 action=migrate_cold state=on sz_applied=4096"])


def test_lru_gen_is_the_kernels_hex_feature_bits() -> None:
    assert parse_lru_gen("0x0007\n") == 7 and parse_lru_gen("0x0000") == 0
    assert parse_lru_gen(None) is None and parse_lru_gen("y") is None
    assert ReclaimFacts({}, False, (), 0, lru_gen=7).mglru
    assert not ReclaimFacts({}, False, (), 0, lru_gen=6).mglru  # main switch (bit 0) off
    assert not ReclaimFacts({}, False, (), 0).mglru


def test_a_run_reduces_to_the_mean_of_its_last_third() -> None:
    out = run_output([sample(10, (50, 0, 50), (90, 0, 10)),
                      sample(20, (95, 0, 5), (40, 0, 60)),
                      sample(40, (100, 0, 0), (0, 0, 100)),
                      sample(50, (96, 4, 0), (0, 0, 100)),
                      sample(60, (98, 0, 2), (10, 0, 90), migrated=262144, promoted=25600, demoted=512)])
    run = figures.parse(out)
    assert (run.config, run.start, run.apply_seconds, run.touched_at) == ("nodeagent", "before", 8.5, 5.8)
    assert run.states["full"]["node0_unreclaimable"] == "1" and run.damon[0]["sz_applied"] == "4096"
    assert run.apply_output == ["Result: converged."]
    f = figures.figures(run, 60)
    assert f["ok"] and f["tail_samples"] == 3
    assert f["hot_on_fast"] == pytest.approx((100 + 96 + 98) / 3, abs=0.05)
    assert f["cold_on_cxl"] == pytest.approx((100 + 100 + 90) / 3, abs=0.05)
    assert f["other"] == pytest.approx(4 / 3, abs=0.05) and f["hot_other"] == f["other"]
    assert (f["t_hot90"], f["t_cold90"]) == (20, 40)
    assert (f["migrated_mib"], f["promoted_mib"], f["demoted_mib"]) == (1024.0, 100.0, 2.0)
    assert (f["tlb_reach"], f["hot_passes"], run.tlb_flushes) == (1536, 10, 213)


def test_a_run_that_died_is_not_ok_and_never_reaches_90() -> None:
    f = figures.figures(figures.parse(run_output([sample(10, (0, 0, 100), (100, 0, 0))], rc=137)), 60)
    assert not f["ok"] and f["tail_samples"] == 0 and f["hot_on_fast"] is None and f["t_hot90"] is None


def test_worst_of_runs_figure_by_figure_and_the_targets() -> None:
    a = {"ok": True, "hot_on_fast": 99.0, "cold_on_cxl": 91.0, "other": 0.5, "t_hot90": 5.0, "migrated_mib": 900.0}
    b = {"ok": True, "hot_on_fast": 96.0, "cold_on_cxl": 97.0, "other": 0.0, "t_hot90": 12.5, "migrated_mib": 1200.0}
    w = figures.worst([a, b])
    assert (w["hot_on_fast"], w["cold_on_cxl"], w["other"], w["t_hot90"], w["migrated_mib"]) == \
        (96.0, 91.0, 0.5, 12.5, 1200.0)
    assert all(met for _, met in figures.judge("before", w, 1024))
    assert figures.worst([a, {**b, "t_hot90": None}])["t_hot90"] is None  # never is the worst time
    verdict = dict(figures.judge("after", {**w, "hot_on_fast": 89.9}, 1024))
    assert verdict == {"hot on fast >= 90 %": False, "cold on CXL >= 80 %": True}
    table = figures.table({("before", "nodeagent"): w}, ["before"], ["nodeagent"])
    assert "| before | nodeagent | 2 | 96 | 91 | 0.5 | 12.5 | never | 1200 |" in table


def test_pages_being_migrated_are_on_no_node() -> None:
    line = sample(40, (99, 0, 0), (0, 0, 98)).replace(" 0 0 0 0 0 0 cold", " 0 0 0 0 0 1 cold").replace(
        " 0 0 0 0 0 0 vm", " 0 0 0 0 0 2 vm")
    f = figures.figures(figures.parse(run_output([line])), 60)
    assert f["other"] == 0.0 and f["in_flight"] == 2.0 and f["hot_on_fast"] == 99.0


def test_a_saved_run_is_recomputed_without_a_guest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import run as placement_run

    for i, hot in ((1, 97), (2, 92)):
        (tmp_path / f"placement-nodeagent-after-{i}.txt").write_text(
            run_output([sample(45, (hot, 0, 100 - hot), (10, 0, 90)), sample(60, (hot, 0, 100 - hot), (10, 0, 90))])
            .replace("START before", "START after"))
    assert placement_run.main(["--from-dir", str(tmp_path)]) == 0
    table = (tmp_path / "table.md").read_text()
    assert "| after | nodeagent | 2 | 92 | 90 |" in table
    assert "nodeagent, after: hot on fast >= 90 %: met; cold on CXL >= 80 %: met" in table
    assert "| after | nodeagent | 2 |" in capsys.readouterr().out


def test_an_incomplete_run_says_what_it_left_to_go_on(tmp_path: Path) -> None:
    import run as placement_run

    stdout = "PL:CONFIG nodeagent START before kernel=6.12\nPL:ERROR ndctl create-namespace failed: busy\n"
    console = tmp_path / "console.log"
    console.write_text("".join(f"[ {i}.0] line {i}\n" for i in range(40)) + "Kernel panic - not syncing\n")
    why = placement_run.why_incomplete(figures.parse(stdout), stdout, "sh: 1: cannot create: Busy\n", console,
                                       "guest.sh exit 1")
    lines = why.splitlines()
    assert lines[:3] == ["guest error: guest.sh exit 1", "guest.sh: ERROR ndctl create-namespace failed: busy",
                         "apply rc None, workload rc None, 0 sample(s)"]
    assert "  | PL:ERROR ndctl create-namespace failed: busy" in lines
    assert "  | sh: 1: cannot create: Busy" in lines
    assert lines[-1] == "  | Kernel panic - not syncing" and "  | [ 16.0] line 16" in lines
    assert "  | [ 15.0] line 15" not in lines  # the console's last 25 lines, not all of it
    # a run that produced nothing at all still says so
    assert "  | (none)" in placement_run.why_incomplete(figures.parse(""), "", "", None, "guest reported no exit code")
