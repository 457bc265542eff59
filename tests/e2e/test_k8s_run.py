"""`nodeagent run` (the DaemonSet's entrypoint) on a simulated root: a ConfigMap-style profile directory updated by
symlink swap, a hot-added CXL expander, SIGTERM; the refusal when the host's own apply unit is enabled; and the
NFD feature file apply keeps current."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from nodeagent_sim import SimKernel
from nodeagent_sim.dax import DaxDef
from nodeagent_sim.hotplug import hot_add_dax

from nodeagent.cli.main import main
from nodeagent.k8s.labels import FEATURES_FILE, parse

REPO = Path(__file__).resolve().parents[2]
PROFILES = REPO / "profiles"
GiB = 1024**3


def _wait(cond, timeout: float = 40.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return False


def configmap(root: Path, version: str, profile_text: str) -> None:
    """Lay out /etc/nodeagent as kubelet lays out a ConfigMap volume: ..<version>/ files, ..data → it, and
    top-level symlinks through ..data; a new version swaps ..data atomically (rename of a new symlink)."""
    d = root / "etc/nodeagent"
    d.mkdir(parents=True, exist_ok=True)
    new = d / f"..{version}"
    new.mkdir()
    (new / "profile.yaml").write_text(profile_text)
    shutil.copy(PROFILES / "base.yaml", new / "base.yaml")
    tmp = d / "..data_tmp"
    tmp.symlink_to(new.name)
    os.replace(tmp, d / "..data")
    for name in ("profile.yaml", "base.yaml"):
        if not (d / name).is_symlink():
            (d / name).symlink_to(f"..data/{name}")


def _features(root: Path) -> dict[str, str]:
    p = root / FEATURES_FILE.lstrip("/")
    return parse(p.read_text())[0] if p.exists() else {}


def _journal(root: Path, event: str) -> list[dict]:
    p = root / "var/lib/nodeagent/journal.jsonl"
    return [e for e in map(json.loads, p.read_text().splitlines()) if e["event"] == event] if p.exists() else []


def test_run_reconciles_on_start_on_configmap_swap_and_hot_add_then_stops_on_sigterm(make_node, tmp_path) -> None:
    root = make_node("h100-cxl")
    (root / "etc/kubernetes/node-feature-discovery/features.d").mkdir(parents=True)
    v1 = (PROFILES / "cxl-inference.yaml").read_text()
    configmap(root, "2026_12_01_v1", v1)
    log = tmp_path / "run.log"
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "nodeagent", "--root", str(root), "--lock-timeout", "0.5",
                                 "run", "--apply", "--interval", "30", "--poll", "0.2", "--debounce", "0.3",
                                 "--metrics-listen", "127.0.0.1:0"], stdout=subprocess.DEVNULL, stderr=err, text=True)
    text = log.read_text
    label = "feature.node.kubernetes.io/nodeagent."
    try:
        assert _wait(lambda: "reconcile (start)" in text()), text()
        assert "reconcile (start): profile cxl-inference: converged" in text()
        assert _wait(lambda: _features(root).get(label + "profile") == "cxl-inference"), text()
        f = _features(root)
        assert f[label + "state"] == "converged" and f[label + "cxl.online"] == "true"
        assert f[label + "cxl.zone"] == "movable" and f[label + "damon.tiering"] == "true"
        # The metrics endpoint serves while the loop runs.
        url = next(w for w in text().split() if w.startswith("http://"))
        with urllib.request.urlopen(url, timeout=10) as resp:
            assert b"nodeagent_tier_memory_total_bytes" in resp.read()

        # A ConfigMap update: a new ..data, the profile file itself untouched (no subPath).
        configmap(root, "2026_12_01_v2", v1.replace("name: cxl-inference", "name: cxl-inference-v2"))
        assert _wait(lambda: "reconcile (profile changed): profile cxl-inference-v2" in text()), text()
        assert json.loads((root / "var/lib/nodeagent/last-applied.json").read_text())["profile"] == \
            "cxl-inference-v2"
        assert _wait(lambda: _features(root).get(label + "profile") == "cxl-inference-v2"), text()

        # A hot-added expander: one scoped reconcile, and the labels rewritten after it.
        features = root / FEATURES_FILE.lstrip("/")
        written = features.stat().st_mtime_ns
        hot_add_dax(SimKernel(root), DaxDef("dax2.0", 2, 3, 5 * 1024**4, 4 * GiB, kind="cxl"), system_ram=True)
        assert _wait(lambda: len(_journal(root, "hotplug")) == 1), text()
        assert _journal(root, "hotplug")[0]["result"] == "converged"
        assert _wait(lambda: features.stat().st_mtime_ns != written), text()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert proc.returncode == 0, text()
    assert text().rstrip().endswith("nodeagent run: stopped")
    assert not list((root / ".nodeagent-machine/uevents").glob("*.fifo"))
    assert text().count("reconcile (") == 2  # start and the swap: nothing spurious from polling


def test_run_is_plan_only_without_apply(make_node, tmp_path) -> None:
    root = make_node("h100-cxl")
    configmap(root, "v1", (PROFILES / "cxl-inference.yaml").read_text())
    before = (root / "sys/kernel/mm/numa/demotion_enabled").read_text()
    proc = subprocess.Popen([sys.executable, "-m", "nodeagent", "--root", str(root), "run", "--poll", "0.2",
                             "--metrics-listen", "off", "--labels", "always"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert _wait(lambda: bool(_features(root)))
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "plan-only" in err and "change(s) pending" in err
    assert (root / "sys/kernel/mm/numa/demotion_enabled").read_text() == before
    assert not (root / "var/lib/nodeagent/last-applied.json").exists()
    assert _features(root)["feature.node.kubernetes.io/nodeagent.state"] == "drifted"


def test_run_refuses_when_the_hosts_apply_unit_is_enabled(make_node, capsys) -> None:
    root = make_node("h100-cxl")
    configmap(root, "v1", (PROFILES / "cxl-inference.yaml").read_text())
    wants = root / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True)
    (wants / "nodeagent-apply.service").symlink_to("/etc/systemd/system/nodeagent-apply.service")  # dangling here
    assert main(["--root", str(root), "run", "--apply", "--metrics-listen", "off"]) == 78  # ExitCode.OWNER_CONFLICT
    err = capsys.readouterr().err
    assert "nodeagent-apply.service is enabled (/etc/systemd/system/multi-user.target.wants/" in err
    assert "one owner per node" in err and "hint: on the host: systemctl disable" in err


def test_apply_keeps_the_feature_file_only_where_features_d_exists(make_node) -> None:
    profile = str(PROFILES / "cxl-inference.yaml")
    bare = make_node("h100-cxl")
    assert main(["--root", str(bare), "apply", "--yes", profile]) == 0
    assert not (bare / "etc/kubernetes").exists()  # no NFD here: nothing left behind
    nfd = make_node("h100-cxl")
    (nfd / "etc/kubernetes/node-feature-discovery/features.d").mkdir(parents=True)
    assert main(["--root", str(nfd), "apply", "--yes", profile]) == 0
    f = _features(nfd)
    assert f["feature.node.kubernetes.io/nodeagent.state"] == "converged"
    assert f["feature.node.kubernetes.io/nodeagent.checks"] in ("passed", "warnings")
    assert [p.name for p in (nfd / "etc/kubernetes/node-feature-discovery/features.d").iterdir()] == ["nodeagent"]


def test_an_apply_stays_a_success_when_the_feature_file_cannot_be_written(make_node, tmp_path, capsys) -> None:
    root = make_node("h100-cxl")
    d = root / "etc/kubernetes/node-feature-discovery"
    d.mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (d / "features.d").symlink_to(tmp_path / "elsewhere")  # a link out of the root: the host layer refuses it
    assert main(["--root", str(root), "apply", "--yes", str(PROFILES / "cxl-inference.yaml")]) == 0
    err = capsys.readouterr().err
    assert f"labels: {FEATURES_FILE} not updated" in err
    assert not list((tmp_path / "elsewhere").iterdir())


def test_run_with_apply_reconciles_a_drifted_node_on_the_interval(make_node, tmp_path) -> None:
    root = make_node("h100-cxl")
    configmap(root, "v1", (PROFILES / "cxl-inference.yaml").read_text())
    knob = root / "sys/kernel/mm/numa/demotion_enabled"
    log = tmp_path / "run.log"
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "nodeagent", "--root", str(root), "run", "--apply",
                                 "--interval", "1", "--metrics-listen", "off"], stdout=subprocess.DEVNULL, stderr=err)
    try:
        assert _wait(lambda: "reconcile (start)" in log.read_text()), log.read_text()
        assert knob.read_text().strip() == "true"
        SimKernel(root).write("/sys/kernel/mm/numa/demotion_enabled", "false")  # someone else's write
        assert _wait(lambda: "reconcile (drift)" in log.read_text()), log.read_text()
        assert _wait(lambda: knob.read_text().strip() == "true")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert proc.returncode == 0, log.read_text()
    assert "drift: drifted (1 item(s))" in log.read_text()
    assert any(e.get("target") == "kernel.demotion_enabled" for e in _journal(root, "drift"))


def test_run_with_apply_pauses_a_dest_free_scheme_while_its_destination_is_full(make_node, tmp_path) -> None:
    """The DaemonSet's loop is where `nodeagent guard` runs on Kubernetes: the shipped profile's demotion scheme
    is paused once its CXL node is nearly full, with the kdamond's pid kept."""
    from nodeagent_sim import memory as simmem

    root = make_node("h100-cxl")
    configmap(root, "v1", (PROFILES / "cxl-inference.yaml").read_text())
    sz_min = root / "sys/kernel/mm/damon/admin/kdamonds/0/contexts/0/schemes/0/access_pattern/sz/min"
    log = tmp_path / "run.log"
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "nodeagent", "--root", str(root), "run", "--apply",
                                 "--guard-interval", "0.1", "--poll", "0.2", "--metrics-listen", "off"],
                                stdout=subprocess.DEVNULL, stderr=err, text=True)
    text = log.read_text
    try:
        assert _wait(lambda: "reconcile (start): profile cxl-inference: converged" in text()), text()
        assert sz_min.read_text().strip() == "4096"
        pid = (root / "sys/kernel/mm/damon/admin/kdamonds/0/pid").read_text()
        k = SimKernel(root)
        with k.locked():
            simmem.set_free(k, 2, 10 * GiB // 1024)  # kB, of 2 TiB: under the profile's 10 %
        assert _wait(lambda: sz_min.read_text().strip() == str(2**64 - 1)), text()
        assert (root / "sys/kernel/mm/damon/admin/kdamonds/0/pid").read_text() == pid
        assert _wait(lambda: "guard: converged in " in text()), text()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert proc.returncode == 0, text()
    assert "guard: damon.demote-cold-node0: pause migrate_cold → node2 (node2 10.0GiB free" in text()
