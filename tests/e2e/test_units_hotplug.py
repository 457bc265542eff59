"""systemd units and the udev rule (render, verify, install), the udev-triggered hot-plug path, and watch."""

from __future__ import annotations

import fcntl
import fnmatch
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel
from nodeagent_sim.dax import DaxDef
from nodeagent_sim.hotplug import emit, hot_add_dax

from nodeagent.cli.main import main
from nodeagent.host.udev import UEvent
from nodeagent.render.systemd import render_units

REPO = Path(__file__).resolve().parents[2]
PROFILE = str(REPO / "profiles" / "cxl-inference.yaml")
GiB = 1024**3
NEW_CXL = DaxDef("dax2.0", 2, 3, 5 * 1024**4, 4 * GiB, kind="cxl")


def rendered(tmp_path: Path, **kw: str) -> dict[str, Path]:
    out = tmp_path / "units"
    out.mkdir(exist_ok=True)
    files = render_units(PROFILE, prefix=sys.prefix, **kw)
    paths = {}
    for name, text in files.items():
        (out / name).write_text(text)
        paths[name] = out / name
    return paths


# -- a small reading of udev's rule syntax, enough to lint our rule and evaluate it on an event --------------
_TOKEN = re.compile(r'\s*([A-Z_]+)(\{[^}]*\})?\s*(==|!=|\+=|-=|:=|=)\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_MATCH_KEYS = {"ACTION", "SUBSYSTEM", "KERNEL", "DRIVER", "ATTR", "ENV", "TAG"}
_ASSIGN_KEYS = {"TAG", "ENV", "RUN", "ATTR", "PROGRAM"}


def parse_rules(text: str) -> list[list[tuple[str, str, str, str]]]:
    rules = []
    for line in text.replace("\\\n", " ").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        tokens, pos = [], 0
        while pos < len(line):
            m = _TOKEN.match(line, pos)
            assert m, f"udev rule does not parse at column {pos}: {line!r}"
            key, attr, op, value = m.group(1), (m.group(2) or "")[1:-1], m.group(3), m.group(4)
            assert key in (_MATCH_KEYS if op in ("==", "!=") else _ASSIGN_KEYS), f"{key}{op} in {line!r}"
            tokens.append((key, attr, op, value))
            pos = m.end()
        rules.append(tokens)
    return rules


def wanted_units(rules: list[list[tuple[str, str, str, str]]], ev: UEvent) -> list[str]:
    fields = {"ACTION": ev.action, "SUBSYSTEM": ev.subsystem, "KERNEL": ev.sysname}
    wants: list[str] = []
    for rule in rules:
        ok = all(any(fnmatch.fnmatchcase(fields[k], alt) for alt in v.split("|")) == (op == "==")
                 for k, _, op, v in rule if op in ("==", "!="))
        if ok:
            wants += [v.replace("$kernel", ev.sysname) for k, a, op, v in rule
                      if k == "ENV" and a == "SYSTEMD_WANTS" and op in ("=", "+=")]
    return wants


def exec_start(unit: Path, instance: str | None = None) -> list[str]:
    line = next(ln for ln in unit.read_text().splitlines() if ln.startswith("ExecStart="))
    argv = shlex.split(line.removeprefix("ExecStart="))
    return [a.replace("%i", instance) if instance else a for a in argv]


# -- render, verify, install --------------------------------------------------------------------------------
def test_units_render_and_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    paths = rendered(tmp_path, before="vllm", metrics="/var/lib/prometheus/node-exporter/nodeagent.prom")
    apply = paths["nodeagent-apply.service"].read_text()
    assert "Before=vllm.service" in apply and "WantedBy=multi-user.target vllm.service" in apply
    assert f"ExecStart={sys.prefix}/bin/nodeagent apply --yes --wait-memdevs 2min --metrics-textfile " in apply
    assert "udev-settle" not in "".join(p.read_text() for p in paths.values())
    assert "SuccessExitStatus=3" in paths["nodeagent-drift.service"].read_text()
    argv = exec_start(paths["nodeagent-apply@.service"], "dax1.0")
    assert argv[argv.index("--device") + 1] == "dax1.0" and argv[-1] == PROFILE
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze not installed (Debian package `systemd`)")
    units = [str(p) for n, p in paths.items() if not n.endswith(".rules")]
    proc = subprocess.run([tool, "verify", "--man=no", *units], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0 and not proc.stderr.strip(), proc.stdout + proc.stderr


def test_udev_rule_is_well_formed_and_passes_udevadm_verify(tmp_path: Path) -> None:
    rule = rendered(tmp_path)["90-nodeagent.rules"]
    rules = parse_rules(rule.read_text())
    assert len(rules) == 3
    udevadm = shutil.which("udevadm")
    has_verify = udevadm is not None and subprocess.run([udevadm, "verify", "--help"], capture_output=True,
                                                        timeout=30).returncode == 0
    if not has_verify:
        print("SKIPPED udevadm verify: the installed udev has no `udevadm verify` (it arrived in systemd 254)")
        return
    proc = subprocess.run([udevadm, "verify", "--resolve-names=never", str(rule)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_units_install_writes_under_the_root_only(make_node, capsys) -> None:
    root = make_node("workstation")
    code = main(["--root", str(root), "units", "install", PROFILE, "--before", "vllm.service",
                 "--prefix", sys.prefix])
    out = capsys.readouterr().out
    assert code == 0 and "systemctl daemon-reload" in out
    assert (root / "etc/systemd/system/nodeagent-apply@.service").is_file()
    assert (root / "etc/systemd/system/nodeagent-drift.timer").is_file()
    assert (root / "etc/udev/rules.d/90-nodeagent.rules").is_file()


@pytest.mark.parametrize(("args", "message"), [
    (["--before", "not a unit"], "--before 'not a unit.service': not a systemd unit name"),
    (["--metrics-textfile", "relative.prom"], "must be an absolute path"),
    (["--interval", "often"], "--interval 'often'"),
    (["--prefix", "/opt/node agent"], "contains a space"),
])
def test_units_render_refuses_bad_parameters(args: list[str], message: str, capsys) -> None:
    assert main(["units", "render", PROFILE, *args]) == 64
    assert message in capsys.readouterr().err


# -- the udev-triggered path --------------------------------------------------------------------------------
def test_udev_rule_starts_a_scoped_apply_for_a_hot_added_device(make_node, tmp_path: Path, capsys) -> None:
    root = make_node("h100-cxl")
    assert main(["--root", str(root), "apply", "--yes", PROFILE]) == 0
    k = SimKernel(root)
    k.write("/proc/sys/kernel/numa_balancing", "1")  # drift that a device's reconcile must leave alone
    paths = rendered(tmp_path)
    rules = parse_rules(paths["90-nodeagent.rules"].read_text())
    events = hot_add_dax(k, NEW_CXL, system_ram=True)
    # auto_online_blocks is offline after the apply: the new blocks arrive offline (no "online" events).
    assert [(e.action, e.sysname) for e in events] == [("add", "dax2.0"), ("add", "memory2560"),
                                                       ("add", "memory2561")]
    units: list[str] = []
    for ev in events:
        units += [u for u in wanted_units(rules, ev) if u not in units]
    assert units == ["nodeagent-apply@dax2.0.service", "nodeagent-apply@memory.service"]
    for ignored in (UEvent("add", "block", "sda"), UEvent("remove", "dax", "dax2.0"),
                    UEvent("add", "cxl", "port1"), UEvent("change", "memory", "memory2560")):
        assert wanted_units(rules, ignored) == []
    capsys.readouterr()
    for unit in units:
        instance = unit.removeprefix("nodeagent-apply@").removesuffix(".service")
        argv = exec_start(paths["nodeagent-apply@.service"], instance)
        assert argv[0] == f"{sys.prefix}/bin/nodeagent"
        assert main(["--root", str(root), *argv[1:]]) == 0, capsys.readouterr()
    journal = [json.loads(ln) for ln in (root / "var/lib/nodeagent/journal.jsonl").read_text().splitlines()]
    scoped = [(e["scope"], e["status"]) for e in journal if e["event"] == "apply" and "scope" in e]
    assert scoped == [(["dax2.0"], "converged"), (["memory"], "converged")]
    assert k.tree.read("/proc/sys/kernel/numa_balancing") == "1"  # not in a device's scope


# -- watch --------------------------------------------------------------------------------------------------
def _wait(cond, timeout: float = 30.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return False


def _hotplug_events(root: Path) -> list[dict]:
    p = root / "var/lib/nodeagent/journal.jsonl"
    if not p.exists():
        return []
    return [e for e in map(json.loads, p.read_text().splitlines()) if e["event"] == "hotplug"]


def test_watch_reacts_to_hot_add_ignores_the_rest_survives_errors_and_stops_on_sigterm(make_node) -> None:
    root = make_node("h100-cxl")
    assert main(["--root", str(root), "apply", "--yes", PROFILE]) == 0
    k = SimKernel(root)
    proc = subprocess.Popen([sys.executable, "-m", "nodeagent", "--root", str(root), "--lock-timeout", "0.3",
                             "watch", "--debounce", "0.3", PROFILE], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    fifos = root / ".nodeagent-machine/uevents"
    try:
        assert _wait(lambda: fifos.is_dir() and any(fifos.glob("*.fifo"))), "watch never started listening"
        emit(k, "add", "block", "sda")
        emit(k, "remove", "dax", "dax0.0")
        emit(k, "online", "memory", "memory3")
        time.sleep(1.5)
        assert _hotplug_events(root) == []  # nothing it should react to
        hot_add_dax(k, NEW_CXL, system_ram=True)
        assert _wait(lambda: len(_hotplug_events(root)) == 1)
        ev = _hotplug_events(root)[0]
        assert ev["device"] == "dax2.0,memory2560,memory2561" and ev["result"] == "converged"
        # An apply that cannot get the lock is reported, and the watch goes on.
        lock = os.open(root / "var/lib/nodeagent/lock", os.O_RDWR)
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            hot_add_dax(k, DaxDef("dax3.0", 3, 3, 7 * 1024**4, 2 * GiB))
            time.sleep(2.0)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            os.close(lock)
        # Retried once the lock is free.
        assert _wait(lambda: len(_hotplug_events(root)) == 2)
        assert _hotplug_events(root)[1]["device"] == "dax3.0"
        assert _hotplug_events(root)[1]["result"] == "converged"
        hot_add_dax(k, DaxDef("dax4.0", 4, 3, 9 * 1024**4, 2 * GiB))
        assert _wait(lambda: len(_hotplug_events(root)) == 3)
        assert _hotplug_events(root)[2]["result"] == "converged"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "hot-plug: dax2.0, memory2560, memory2561: reconciling" in err
    assert "hot-plug: apply failed: another nodeagent run" in err and "will retry" in err
    assert err.rstrip().endswith("watch stopped")
    assert not list(fifos.glob("*.fifo"))  # the listener removed its FIFO


def test_event_sources_by_root(tmp_path: Path) -> None:
    from nodeagent.host import open_host
    from nodeagent.host.udev import PyudevSource, open_events
    from nodeagent.util.errors import UsageError

    with pytest.raises(UsageError, match="no device events can be watched under another root"):
        open_events(open_host(tmp_path), ("dax",))
    # The machine's own udev through pyudev: a netlink socket that only reads, opened and closed.
    try:
        source = open_events(open_host("/"), ("dax", "memory", "cxl"))
    except Exception as exc:  # no netlink in this sandbox: nothing to check here
        pytest.skip(f"cannot open a udev netlink monitor here: {exc}")
    try:
        assert isinstance(source, PyudevSource) and source.fileno() >= 0
        assert all(e.subsystem in ("dax", "memory", "cxl") for e in source.receive())
    finally:
        source.close()
