"""The placement benchmark's moving-window (KV cache) figures (bench/placement/kvfigures.py), from synthetic guest
output in the format kvwindow.c and guest.sh print; and the workload itself, built and run briefly on this
machine (it only maps and writes its own memory and reads /proc)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench/placement"
sys.path.insert(0, str(BENCH))
import kvfigures  # noqa: E402


def kv(t: float, win: tuple[int, int, int], live: tuple[int, int, int] | None = None, appended: int = 0,
       migrated: int = 0, up: int = 0, pp_up: int = 0, down: int = 0, pp_down: int = 0, promo: int = 0,
       demo: int = 0) -> str:
    """A window sample, and with ``live`` the full sample the second sampler printed right after it."""
    w = " ".join(map(str, (*win, 0, 0, 0, 0, 0, 0)))
    line = (f"PL:KV {t:.2f} q=0.010 win {w} seqs=16 appended={appended} vm pgmigrate_success={migrated} "
            f"pgpromote_success=0 numa_hint_faults=0 n0 pgpromote_success={promo} pgdemote_kswapd={demo} "
            "pgdemote_direct=0 pgdemote_khugepaged=0")
    if live is None:
        return line
    lv = " ".join(map(str, (*live, 0, 0, 0, 0, 0, 0)))
    return line + (f"\nPL:KVLIVE {t:.2f} q=0.500 live {lv} pp_up={pp_up} pp_down={pp_down} up={up} "
                   f"down={down}")


def output(lines: list[str], rc: int = 0, start: str = "before", written: float = 31.5) -> str:
    return "\n".join([
        f"PL:CONFIG nodeagent START {start} kernel=6.12.95", "PL:APPLY-RC 0", "PL:APPLIED seconds=9.0",
        "PL:KVCONF seqs=16 append=8 window=4 prompt=16 burst=32 lifetime=240 duration=60 live_mib=1216",
        "PL:TOUCHED t=20.00", "PL:T0 mono=100.00",
        "PL:DSTAT mono=119.00 kd=0 scheme=0 action=migrate_cold sz_applied=0",
        "PL:DSTAT mono=119.00 kd=1 scheme=0 action=migrate_hot sz_applied=0",
        "PL:DSTAT mono=159.00 kd=0 scheme=0 action=migrate_cold sz_applied=104857600",
        "PL:DSTAT mono=159.00 kd=1 scheme=0 action=migrate_hot sz_applied=52428800",
        "PL:PHASE begin t=30.00", f"PL:PHASE written t={written} write_s={written - 30:.2f}",
        # threads' CPU ticks around the phase change (t = 29 and 33); a second workload thread started meanwhile
        "PL:TCPU mono=129.00 230:kvwindow-x=100 54:kswapd0=10 207:kdamond.0=50",
        "PL:TCPU mono=133.00 230:kvwindow-x=660 231:kvwindow-x=20 54:kswapd0=14 207:kdamond.0=90",
        # the hot loop's thread: blocked 0.1 s, then 1.2 s in one second (in mprotect, the sampler saw)
        "PL:TSTATE mono=120.00 state=R run_ns=1 wait_ns=0 block_ms=0.000000 minflt=10 utime=1 stime=1",
        "PL:TSTATE mono=121.00 state=R run_ns=2 wait_ns=0 block_ms=100.000000 minflt=20 utime=2 stime=1",
        "PL:TSTATE mono=122.00 state=D run_ns=3 wait_ns=0 block_ms=1300.000000 minflt=20 utime=2 stime=1 "
        "stack=do_mprotect_pkey,__x64_sys_mprotect,do_syscall_64,",
        *lines, "PL:END passes=10 tlb_flushes=3 max_pass_s=0.42 slow_passes=0", f"PL:WORKLOAD-RC {rc}",
        "PL:KDCPU kdamond=0 ticks=250 hz=100"])


def test_a_run_reduces_to_the_moving_window_figures() -> None:
    lines = [kv(10, (50, 0, 50)),
             kv(20, (100, 0, 0), live=(500, 0, 500), appended=1000, migrated=100, up=10, down=20),
             kv(30, (99, 1, 0), appended=2000),
             kv(32, (70, 0, 30), appended=4000, demo=384),
             kv(35, (95, 0, 5), live=(480, 10, 510), appended=4500, up=30, pp_up=5, down=60, pp_down=2),
             kv(45, (100, 0, 0), appended=5000),
             kv(60, (98, 0, 2), live=(400, 0, 600), appended=6000, migrated=7600, up=40, pp_up=15, down=100,
                pp_down=7, promo=2560, demo=512)]
    run = kvfigures.parse(output(lines))
    assert (run.config, run.start, run.t0_mono, run.phase_written, run.write_s) == \
        ("nodeagent", "before", 100.0, 31.5, 1.5)
    assert run.conf["seqs"] == "16" and len(run.samples) == 7 and len(run.lives) == 3
    assert run.lives[0].live == (500, 0, 500, 0, 0, 0, 0, 0, 0) and run.lives[2].ctr["pp_up"] == 15
    f = kvfigures.figures(run, 60)
    assert f["ok"] and f["tail_samples"] == 6  # t >= 20: the last two thirds
    assert (f["hot_median"], f["hot_lowest"]) == (98.5, 70.0)
    assert f["hot_p10"] == pytest.approx(82.5, abs=0.05)  # half-way from 70 to 95: linear interpolation
    assert f["recover_s"] == 3.5  # first >= 90 % at t = 35, prompts written at 31.5
    assert f["churn"] == pytest.approx(7500 / 5000)  # migrated per appended page over [T/3, T]
    assert f["stranded"] == 1.0 and f["stranded_win"] == 1.0
    # page-level: (15 - 0) + (7 - 0) pages came back between the full samples at t = 20 and t = 60
    assert f["pingpong_mib"] == round(22 * 4096 / 2**20, 1) and f["pingpong_ratio"] == pytest.approx(15 / 30, abs=1e-3)
    # counters: P = 2560 pages + 50 MiB of migrate_hot, D = 512 pages + 100 MiB of migrate_cold
    assert (f["promoted_mib"], f["demoted_mib"]) == (60.0, 102.0)
    assert f["est_ratio"] == 1.0 and f["est_mib"] == 60.0
    assert (f["max_pass_s"], f["slow_passes"], f["kdamond_cpu_s"]) == (0.42, 0, {"0": 2.5})
    assert (f["blocked_s"], f["blocked_max_s"], f["blocked_in"]) == (1.3, 1.2, {"do_mprotect_pkey": 1})
    # the dip: only the sample at t = 32 (70 %) is under 95 %, and it stands until the next one at t = 35; after the
    # phase began at most 30 window pages were on the slow node, and 10 MiB + 50 MiB were promoted since
    assert (f["below95_s"], f["win_slow_peak_mib"], f["promoted_after_phase_mib"]) == \
        (3.0, round(30 * 4096 / 2**20, 1), 60.0)
    # the burst's room: 500 pages of the workload on node 0 at the full sample before the phase (t = 20); 384 pages
    # (1.5 MiB) demoted from node 0 between the samples at the phase's begin (t = 30) and its end (t = 32, the first
    # at or after 31.5), over the 1.5 s the prompts took
    assert (f["fast_at_phase_mib"], f["demoted_while_written_mibs"]) == (round(500 * 4096 / 2**20, 1), 1.0)
    # meanwhile (t = 29 to 33, 4 s): the workload 560 + 20 ticks, the kdamond 40, kswapd 4 — % of one CPU
    assert f["cpu_while_written"] == {"workload": 145.0, "kdamond": 10.0, "reclaim": 1.0, "kdamond.0": 10.0}


def test_a_run_that_never_recovers_or_died_is_the_worst() -> None:
    lines = [kv(20, (100, 0, 0)), kv(40, (50, 0, 50)), kv(60, (80, 0, 20))]
    f = kvfigures.figures(kvfigures.parse(output(lines, rc=137)), 60)
    assert not f["ok"] and f["recover_s"] is None
    good = kvfigures.figures(kvfigures.parse(output([kv(20, (100, 0, 0), live=(9, 0, 1)), kv(40, (99, 0, 1)),
                                                     kv(60, (100, 0, 0), live=(9, 0, 1))])), 60)
    assert good["ok"] and good["recover_s"] == 8.5 and good["stranded"] == 0.0
    w = kvfigures.worst([good, f])
    assert (w["runs"], w["ok"], w["recover_s"], w["hot_lowest"], w["hot_median"]) == (2, False, None, 50.0, 80.0)
    verdict = dict(kvfigures.judge(good))
    assert verdict["hot window on DRAM >= 98 % (median)"] and not verdict["churn <= 1.5"]  # churn unknown: not met
    table = kvfigures.table({("mid", "before", "nodeagent"): w}, ["mid"], ["before"], ["nodeagent"])
    assert "| mid | before | nodeagent (incomplete) | 2 | 80 | " in table and "| never |" in table


def test_percentile_is_linear_between_ranks() -> None:
    assert kvfigures.percentile([], 10) is None
    assert kvfigures.percentile([5.0], 10) == 5.0
    assert kvfigures.percentile([float(x) for x in range(11)], 10) == 1.0
    assert kvfigures.percentile([0.0, 100.0], 50) == 50.0


def test_a_saved_kv_run_is_recomputed_without_a_guest(tmp_path: Path) -> None:
    import run as placement_run

    for i, low in ((1, 90), (2, 86)):
        (tmp_path / f"kv-mid-nodeagent-after-{i}.txt").write_text(output(
            [kv(20, (100, 0, 0), live=(9, 0, 1)), kv(31, (low, 0, 100 - low)), kv(32, (99, 0, 1)),
             kv(60, (99, 0, 1), live=(9, 0, 1), appended=100, migrated=100)], start="after"))
    assert placement_run.main(["--workload", "kv", "--from-dir", str(tmp_path)]) == 0
    table = (tmp_path / "table.md").read_text()
    assert "| mid | after | nodeagent | 2 | 99 |" in table
    assert "nodeagent, mid/after: hot window on DRAM >= 98 % (median): met" in table
    assert ">= 85 % (lowest sample): met" in table and "churn <= 1.5: met" in table
    # and every run on a line of its own, in sweep order, with the hot loop's longest pass, its time blocked and the
    # kdamonds' CPU
    assert "| mid | after | nodeagent | 1 | 99 / 92.7 / 90 | " in table
    assert "| mid | after | nodeagent | 2 | 99 / 89.9 / 86 | " in table
    assert table.index("| nodeagent | 1 | 99 /") < table.index("| nodeagent | 2 | 99 /")
    assert "| 0.42 | 1.3 (1.2) | 2.5 |" in table


def test_a_saved_sweep_with_a_candidate_and_a_dashed_configuration_is_recomputed(tmp_path: Path) -> None:
    import run as placement_run

    for config, low in (("damo-mem-tier", 70), ("nodeagent", 80), ("candidate", 90)):
        (tmp_path / f"kv-burst-{config}-before-1.txt").write_text(output(
            [kv(20, (100, 0, 0), live=(9, 0, 1)), kv(31, (low, 0, 100 - low)), kv(32, (99, 0, 1)),
             kv(60, (99, 0, 1), live=(9, 0, 1), appended=100, migrated=100)]))
    assert placement_run.kv_label_parts("kv-burst-damo-mem-tier-before-1") == ("burst", "damo-mem-tier", "before",
                                                                                "1")
    assert placement_run.main(["--workload", "kv", "--from-dir", str(tmp_path)]) == 0
    table = (tmp_path / "table.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| burst | before |")]
    assert [r.split(" | ")[2] for r in rows[:3]] == ["damo-mem-tier", "nodeagent", "candidate"]
    assert "nodeagent, burst/before: hot window on DRAM >= 98 % (median): met; >= 95 % (10th percentile): NOT met" \
        in table
    assert "candidate, burst/before: " in table and ">= 85 % (lowest sample): met" in table.split("candidate, ")[1]


def test_configurations_alternate_run_by_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A candidate profile runs beside the shipped one, run 1 of each before run 2 of each, with its own profile;
    every second run goes in reverse order (A B B A), so that neither side always runs first."""
    import run as placement_run

    candidate = tmp_path / "candidate.yaml"
    candidate.write_text("kind: NodeProfile\n")
    calls: list[tuple[str | None, str, int, str, str]] = []

    def fake_run(config, start, index, args, workload, assets, out, point=None):  # type: ignore[no-untyped-def]
        env = placement_run.guest_env(config, start, args, workload, point)
        calls.append((point, config, index, env["PL_CONFIG"], Path(env["PL_PROFILE"]).name))
        return {"ok": True, "point": point, "config": config, "start": start, "run": index, "wall_seconds": 1.0}

    monkeypatch.setattr(placement_run, "one_run", fake_run)
    monkeypatch.setattr(placement_run, "build_workload", lambda cache, name="workload": tmp_path / name)
    monkeypatch.setattr(placement_run, "write_kv_results", lambda out, meta, per_run: None)
    monkeypatch.setattr(placement_run.harness, "qemu_binary", lambda: "qemu-system-x86_64")
    assets = type("A", (), {"cache_dir": tmp_path, "kernel_version": "6.12.95"})()
    monkeypatch.setattr(placement_run.harness, "ensure_assets", lambda: assets)
    rc = placement_run.main(["--workload", "kv", "--points", "burst", "--starts", "before", "--configs",
                             "nodeagent", "--candidate", str(candidate), "--out", str(tmp_path / "out")])
    assert rc == 0
    assert calls == [("burst", "nodeagent", 1, "nodeagent", "cxl-inference.yaml"),
                     ("burst", "candidate", 1, "nodeagent", "candidate.yaml"),
                     ("burst", "candidate", 2, "nodeagent", "candidate.yaml"),
                     ("burst", "nodeagent", 2, "nodeagent", "cxl-inference.yaml")]


def test_a_candidate_configuration_needs_its_profile(capsys: pytest.CaptureFixture[str]) -> None:
    import run as placement_run

    with pytest.raises(SystemExit) as exc:
        placement_run.main(["--workload", "kv", "--configs", "candidate"])
    assert exc.value.code == 2 and "needs --candidate PROFILE" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        placement_run.main(["--workload", "kv", "--candidate", "/nonexistent/x.yaml"])
    assert "no such file" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no C compiler")
def test_the_workload_appends_moves_its_window_and_changes_phase(tmp_path: Path) -> None:
    exe = tmp_path / "kvwindow"
    subprocess.run(["gcc", "-O2", "-Wall", "-Werror", "-pthread", "-o", str(exe), str(BENCH / "kvwindow.c")],
                   check=True)
    proc = subprocess.run([str(exe), "seqs=4", "append=4", "window=1", "prompt=2", "burst=3", "lifetime=2",
                           "duration=3", "interval=0.5", "full=2"], capture_output=True, text=True, timeout=60,
                          env={"PL_TLB_REACH": "0"})
    assert proc.returncode == 0, proc.stderr
    run = kvfigures.parse(proc.stdout + "\nPL:WORKLOAD-RC 0\n")
    assert run.conf["live_mib"] == "12" and len(run.samples) == 6 and run.phase_written is not None
    # the windows hold 1 MiB (256 pages) of each of the 4 sequences (less while a new one's prompt is being written)
    assert run.samples[0].win[0] == 4 * 256 and all(0 < sum(s.win) <= 4 * 256 for s in run.samples)
    assert 2 <= len(run.lives) <= 3 and all(sum(x.live) >= 4 * 256 for x in run.lives)
    assert run.samples[-1].ctr["appended"] > 2 * 3 * 256  # the burst's 2 x 3 MiB prompts, and decode
    assert "PL:SEQ end" in proc.stdout and run.passes and run.passes > 0
    assert run.max_pass_s is not None and 0 <= run.max_pass_s < 3 and run.slow_passes is not None
    # the phase change comes at DURATION/2 by the clock, not at the end of a pass of the hot loop
    assert run.phase_begin is not None and 1.5 <= run.phase_begin < 1.5 + 0.5
    assert kvfigures.parse("PL:KV garbage").samples == []
    with pytest.raises(subprocess.CalledProcessError):
        subprocess.run([str(exe), "seqs=0"], check=True, capture_output=True)


def test_a_line_another_thread_landed_in_is_split_and_the_cut_sample_dropped() -> None:
    # before kvwindow.c locked stdout around its multi-part lines, the prefill thread's PL:SEQ could land inside
    # the sampler's PL:KV line, after "n0": that sample lost its node-0 counters
    cut = kv(40, (99, 0, 1)).split(" n0 ")[0] + " n0PL:SEQ start t=40.00 slot=3 pages=4096"
    run = kvfigures.parse(output([kv(20, (100, 0, 0)), cut, kv(60, (98, 0, 2))]))
    assert [s.t for s in run.samples] == [20.0, 60.0]
    assert kvfigures.figures(run, 60)["hot_lowest"] == 98.0


def test_the_burst_room_is_tabled_and_correlated_over_saved_runs(tmp_path: Path) -> None:
    """kvroom.py: every complete saved run of the point, with what its burst found on DRAM and what the dip was, and
    Pearson's r over the runs (two runs: +-1); runs without the figures it needs are left out."""
    import kvroom

    def save(sub: str, demo: int, on_cxl: int, gauge_ticks: int) -> None:
        lines = [kv(10, (50, 0, 50)), kv(20, (100, 0, 0), live=(500, 0, 500), appended=1000),
                 kv(30, (99, 1, 0), appended=2000), kv(32, (100 - on_cxl, 0, on_cxl), appended=4000, demo=demo),
                 kv(35, (95, 0, 5), live=(480, 0, 520), appended=4500), kv(60, (98, 0, 2), live=(400, 0, 600),
                                                                          appended=6000, migrated=7600),
                 # the idle node's kdamond before the burst: t = 4 to 26 (T/12 = 5, T/2 - 5 = 25)
                 "PL:TCPU mono=104.00 208:kdamond.1=0", f"PL:TCPU mono=126.00 208:kdamond.1={gauge_ticks}"]
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "kv-burst-nodeagent-before-1.txt").write_text(output(lines))

    save("a", demo=384, on_cxl=10, gauge_ticks=88)  # 1 MiB/s demoted, 4 % of a CPU
    save("b", demo=128, on_cxl=30, gauge_ticks=176)  # a third of it, on a host half as fast
    (tmp_path / "b" / "kv-burst-nodeagent-before-2.txt").write_text(output([kv(20, (100, 0, 0))], rc=137))
    table = kvroom.rows([tmp_path], "burst")
    assert [(r["run"], r["demoted_while_written_mibs"], r["gauge_cpu_pct"], r["win_slow_peak_mib"]) for r in table] \
        == [("a/kv-burst-nodeagent-before-1.txt", 1.0, 4.0, round(10 * 4096 / 2**20, 1)),
            ("b/kv-burst-nodeagent-before-1.txt", 0.3, 8.0, round(30 * 4096 / 2**20, 1))]
    r = {(c, e): v for c, e, v in kvroom.correlations(table)}
    assert r[("gauge_cpu_pct", "demoted_while_written_mibs")] == -1.0
    assert r[("demoted_while_written_mibs", "win_slow_peak_mib")] == -1.0
    assert r[("fast_at_phase_mib", "hot_lowest")] is None  # the same in both runs: no correlation to speak of
    assert "Pearson's r over 2 runs" in kvroom.report(table)
    (fast, a), (slow, b) = kvroom.halves(table)  # split at the gauge's median, 6 %: the lowest samples 90 and 70 %
    assert (fast, slow) == ("gauge <= 6 %", "gauge > 6 %")
    assert a.startswith("1 runs; demoted 1 MiB/s") and a.endswith("lowest 90 % (medians); lowest >= 85 % in 1")
    assert b.endswith("lowest 70 % (medians); lowest >= 85 % in 0")
    assert kvroom.main([str(tmp_path / "nothing-here")]) == 1
