"""The metrics textfile: parses, carries the right values, passes promtool, is written atomically."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel
from prometheus_client.parser import text_string_to_metric_families

from nodeagent.cli.main import main
from tests.series_helpers import promtool

REPO = Path(__file__).resolve().parents[2]
PROFILE = str(REPO / "profiles" / "cxl-inference.yaml")
GiB = 1024**3


def samples(path: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(path.read_text()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def promtool_check(*paths: Path) -> None:
    """``promtool check metrics`` on each file: fails in CI without promtool, skips with the reason elsewhere."""
    texts = [p.read_text() for p in paths]  # read before a skip can end the test
    exe = promtool()
    for text in texts:
        proc = subprocess.run([exe, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60,
                              check=False)
        assert proc.returncode == 0 and not proc.stdout.strip() and not proc.stderr.strip(), \
            proc.stdout + proc.stderr


def test_drift_metrics_carry_the_right_values(make_node, tmp_path: Path, capsys) -> None:
    root = make_node("h100-cxl-autoonline")
    k = SimKernel(root)
    assert main(["--root", str(root), "apply", "--yes", "--allow-disruptive", PROFILE]) == 0
    k.write("/proc/sys/kernel/numa_balancing", "1")
    vmstat = k.tree.read("/proc/vmstat").replace("pgpromote_success 0", "pgpromote_success 12345").replace(
        "pgdemote_kswapd 0", "pgdemote_kswapd 678").replace("numa_hint_faults 0", "numa_hint_faults 9")
    k.tree.set("/proc/vmstat", vmstat)
    (tmp_path / "textfiles").mkdir()
    prom = tmp_path / "textfiles" / "nodeagent.prom"
    capsys.readouterr()
    assert main(["--root", str(root), "drift", "--record", "--metrics-textfile", str(prom)]) == 3
    m = samples(prom)
    assert m[("nodeagent_drift_items", (("resource", "knob"),))] == 1
    assert m[("nodeagent_last_apply_success", (("profile", "cxl-inference"),))] == 1
    assert m[("nodeagent_last_apply_status", (("profile", "cxl-inference"), ("status", "converged")))] == 1
    assert m[("nodeagent_last_apply_status", (("profile", "cxl-inference"), ("status", "partial")))] == 0
    assert m[("nodeagent_last_apply_changes", (("outcome", "applied"),))] == 13
    assert m[("nodeagent_vmstat_pgpromote_success_total", ())] == 12345
    assert m[("nodeagent_vmstat_pgdemote_kswapd_total", ())] == 678
    assert m[("nodeagent_vmstat_numa_hint_faults_total", ())] == 9
    # The CXL expanders are CPU-less nodes in memory_tier22, each 2 TiB.
    cxl = (("cpuless", "true"), ("cxl_region", "region0"), ("dax_device", "dax0.0"), ("node", "2"), ("tier", "22"))
    assert m[("nodeagent_node_memory_total_bytes", cxl)] == 2048 * GiB
    # drift's statistics refresh let one quota interval pass: the CXL node holds what demote-cold moved there
    moved = m[("nodeagent_damon_scheme_applied_bytes_total", (("action", "migrate_cold"), ("context", "0"),
                                                               ("kdamond", "0"), ("name", "demote-cold-node0"),
                                                               ("scheme", "0")))]
    assert moved > 0 and m[("nodeagent_node_memory_used_bytes", cxl)] == moved
    dram = (("cpuless", "false"), ("cxl_region", ""), ("dax_device", ""), ("node", "0"), ("tier", "4"))
    # its workload, plus the struct pages of the 2 TiB of CXL memory it hosts (1.56 %), less what moved to CXL
    assert m[("nodeagent_node_memory_used_bytes", dram)] == (24 + 32) * GiB - moved
    assert not any(name.endswith("_created") for name, _ in m)
    promtool_check(prom)
    assert [p.name for p in prom.parent.iterdir()] == ["nodeagent.prom"]  # no temporary file left behind


def test_apply_writes_metrics_and_keeps_check_results(make_node, tmp_path: Path, capsys) -> None:
    root = make_node("workstation")
    prom = tmp_path / "nodeagent.prom"
    prom.write_text("stale\n")
    assert main(["--root", str(root), "apply", "--yes", "--metrics-textfile", str(prom), PROFILE]) == 0
    m = samples(prom)
    assert m[("nodeagent_last_apply_changes", (("outcome", "applied"),))] == 10
    assert m[("nodeagent_drift_items", (("resource", "knob"),))] == 0
    after_apply = tmp_path / "after-apply.prom"
    after_apply.write_text(prom.read_text())
    # Check results recorded by an earlier apply are exported by later runs too (no flapping series).
    (root / "var/lib/nodeagent/last-checks.json").write_text(json.dumps(
        {"results": [{"name": "cpu", "severity": "error", "status": "fail"}]}))
    assert main(["--root", str(root), "drift", "--metrics-textfile", str(prom)]) == 0
    m = samples(prom)
    assert m[("nodeagent_check_status", (("check", "cpu"), ("severity", "error"), ("status", "fail")))] == 1
    assert m[("nodeagent_check_status", (("check", "cpu"), ("severity", "error"), ("status", "pass")))] == 0
    promtool_check(after_apply, prom)


def test_metrics_textfile_errors_are_clear(make_node, tmp_path: Path, capsys) -> None:
    root = make_node("workstation")
    main(["--root", str(root), "apply", "--yes", PROFILE])
    capsys.readouterr()
    code = main(["--root", str(root), "drift", "--metrics-textfile", str(tmp_path / "nope" / "x.prom")])
    err = capsys.readouterr().err
    assert code == 64 and f"directory {tmp_path / 'nope'} does not exist" in err
    code = main(["--root", str(root), "drift", "--metrics-textfile", str(tmp_path)])
    assert code == 64 and "is a directory" in capsys.readouterr().err


@pytest.mark.parametrize("preset", ["qemu-3node", "l40-kvm64"])
def test_metrics_pass_promtool_on_other_nodes(preset: str, make_node, tmp_path: Path) -> None:
    root = make_node(preset)
    prom = tmp_path / "n.prom"
    assert main(["--root", str(root), "drift", "--metrics-textfile", str(prom), PROFILE]) in (0, 3)
    assert ("nodeagent_info", (("version", "0.1.0"),)) in samples(prom)
    promtool_check(prom)


def test_owned_kdamond_scheme_statistics_reach_status_and_metrics(make_node, tmp_path: Path, capsys) -> None:
    """apply starts the profile's kdamonds on h100-cxl; time passes; status refreshes and shows their scheme
    statistics, and drift --metrics-textfile exports them — while facts and plan never write."""
    from nodeagent_sim.damon import tick

    root = make_node("h100-cxl")
    k = SimKernel(root)
    assert main(["--root", str(root), "apply", "--yes", PROFILE]) == 0
    owned = json.loads((root / "var/lib/nodeagent/ownership.json").read_text())["damon"]["kdamonds"]
    names = {"0": "demote-cold-node0", "1": "demote-cold-node1", "2": "promote-hot-to-node0",
             "3": "promote-hot-to-node1"}
    assert {i: r["name"] for i, r in owned.items()} == names
    stats = "/sys/kernel/mm/damon/admin/kdamonds/{}/contexts/0/schemes/0/stats/{}"
    tick(k)  # time passes; these kdamonds have no refresh_ms, so their files wait for a refresh request
    assert k.tree.read(stats.format(0, "nr_tried")) == "0"
    mark = len(k.journal())
    assert main(["--root", str(root), "facts"]) == 0
    assert main(["--root", str(root), "plan", PROFILE]) == 0
    assert k.journal()[mark:] == []  # facts and plan never ask for a refresh
    capsys.readouterr()
    assert main(["--root", str(root), "status"]) == 0
    out = capsys.readouterr().out
    refreshes = [w["path"] for w in k.journal()[mark:] if w["value"] == "update_schemes_stats"]
    assert sorted(refreshes) == [f"/sys/kernel/mm/damon/admin/kdamonds/{i}/state" for i in range(4)]
    for i in range(4):
        assert f"kdamond {i}: name={names[str(i)]}, pid={owned[str(i)]['pid']}, state=on" in out
        # demote-cold tries DRAM's cold pages and free memory; promote-hot finds nothing on the empty CXL nodes
        assert (int(k.tree.read(stats.format(i, "nr_tried"))) > 0) == (i < 2)
    # One quota interval passed (cxl-inference: 1 GiB per second, charged by the bytes tried, free memory
    # included): one region of 1 GiB tried, in it the share of node 0's 56 GiB used of 512 GiB moved to CXL.
    assert "scheme 0/0/0 migrate_cold: tried 1 regions (1GiB), applied 1 (112MiB), quota exceeded 1" in out
    prom = tmp_path / "textfiles" / "n.prom"
    prom.parent.mkdir()
    assert main(["--root", str(root), "drift", "--metrics-textfile", str(prom)]) == 0
    m = samples(prom)
    for i in (0, 1):
        labels = (("action", "migrate_cold"), ("context", "0"), ("kdamond", str(i)),
                  ("name", f"demote-cold-node{i}"), ("scheme", "0"))
        # drift --metrics refreshed again: the counters moved on since status, and so did the memory: the CXL
        # node paired with DRAM node i holds exactly what its demote-cold applied.
        assert m[("nodeagent_damon_scheme_tried_regions_total", labels)] == 2
        assert m[("nodeagent_damon_scheme_tried_bytes_total", labels)] == 2 * 1024**3
        applied = m[("nodeagent_damon_scheme_applied_bytes_total", labels)]
        assert 0 < applied < 2 * 112 * 1024**2
        used = re.search(r"MemUsed:\s+(\d+) kB", k.tree.read(f"/sys/devices/system/node/node{i + 2}/meminfo"))
        assert used and int(used.group(1)) * 1024 == applied
        assert m[("nodeagent_damon_scheme_quota_exceeds_total", labels)] == 2
    # 6.12 has no stats/sz_ops_filter_passed (6.14): no sample rather than a made-up 0.
    assert not any(n == "nodeagent_damon_scheme_ops_filter_passed_bytes_total" for n, _ in m)
    promtool_check(prom)


def test_the_apply_keeps_its_checks_once_inside_its_own_lock(make_node, tmp_path: Path, monkeypatch) -> None:
    """An apply keeps its checks' results (``last-checks.json``, what later runs export) itself, once, while it holds
    the state lock — not the metrics textfile and NFD's feature file after it, each taking the lock again (one
    more write, and a run that took the lock in between made them fail)."""
    from nodeagent.k8s.labels import FEATURES_FILE
    from nodeagent.state import StateStore

    root = make_node("workstation")
    (root / FEATURES_FILE.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)  # the labels are written too
    writes: list[tuple[str, bool]] = []
    real = StateStore.write_record

    def spy(self: StateStore, record) -> None:
        writes.append((type(record).__name__, self.writable))
        real(self, record)

    monkeypatch.setattr(StateStore, "write_record", spy)
    prom = tmp_path / "nodeagent.prom"
    assert main(["--root", str(root), "apply", "--yes", "--metrics-textfile", str(prom), PROFILE]) == 0
    assert [w for w in writes if w[0] == "LastChecks"] == [("LastChecks", True)]
    kept = json.loads((root / "var/lib/nodeagent/last-checks.json").read_text())["results"]
    exported = {(dict(labels)["check"], dict(labels)["status"]) for (n, labels), v in samples(prom).items()
                if n == "nodeagent_check_status" and v == 1}
    assert kept and exported == {(r["name"], r["status"]) for r in kept}
    assert (root / FEATURES_FILE.lstrip("/")).exists()


@pytest.mark.parametrize("swap", ["symlink", "hard link"])
def test_a_textfile_swapped_mid_apply_fails_the_textfile_not_the_apply(make_node, tmp_path: Path, capsys,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      swap: str) -> None:
    """The path passes the check before the apply and is swapped (for a symlink, for a hard link to another
    file) before the textfile is written: the apply's result stands — converged, recorded, NFD labels kept —
    and the run fails naming the textfile (exit 1), not as a usage error (64)."""
    import nodeagent.host.files as files

    root = make_node("workstation")
    prom = tmp_path / "nodeagent.prom"
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    real_check = files.check_operator_target

    def check_then_swap(path, option="--metrics-textfile"):  # the real check, then the swap a racer makes
        real_check(path, option)
        if swap == "symlink":
            prom.symlink_to(victim)
        else:
            prom.hardlink_to(victim)

    monkeypatch.setattr(files, "check_operator_target", check_then_swap)
    code = main(["--root", str(root), "--format", "json", "apply", "--yes", "--metrics-textfile", str(prom),
                 PROFILE])
    out, err = capsys.readouterr()
    assert code == 1, out + err
    assert json.loads(out)["status"] == "converged"
    assert f"apply converged and recorded, but the metrics textfile {prom} could not be written" in err, err
    assert victim.read_text() == "precious\n"
    assert json.loads((root / "var/lib/nodeagent/last-applied.json").read_text())["status"] == "converged"
