"""DAMON through the CLI on simulated nodes: build, update by commit, remove, grow, coexist, old kernels.

Most cases use qemu-3node (small and quick: DRAM nodes 0 and 1, a pmem DAX device that becomes CPU-less node 2
in a lower tier once onlined), with the kernel release overridden for the 6.8 and 6.18 generations; the
"done when" case runs on h100-cxl with both CXL expanders online.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel
from nodeagent_sim import dax as simdax
from nodeagent_sim.damon import contend
from nodeagent_sim.damon_presets import start_foreign

from nodeagent.cli.main import main
from nodeagent.facts.damon import retry_busy
from nodeagent.kinds.damon.model import COUNTS
from nodeagent.util.errors import BusyError

K = "/sys/kernel/mm/damon/admin/kdamonds"

SCHEME = """\
        - action: migrate_cold
          target_node: slow
          access: {size: {min: 4KiB}, nr_accesses: {max: 0}, age: {min: 3s}}
          quota: {time: 10ms, size: QUOTA, reset_interval: 1s}
          watermarks: {metric: free_mem_rate, interval: 1s, high: 500, mid: 400, low: 50}
          filters: [FILTER]
          apply_interval: 1s
"""
STAT = """\
        - action: stat
          access: {age: {min: 10s}}
"""


def profile(tmp_path: Path, *, quota: str = "256MiB", filt: str = "{type: young, matching: true}",
            schemes: str | None = None, extra_kdamond: bool = False, coexist: str = "refuse",
            pairing: str = "nearest", kdamonds: bool = True, name: str = "p.yaml") -> str:
    body = schemes if schemes is not None else SCHEME.replace("QUOTA", quota).replace("FILTER", filt)
    text = textwrap.dedent(f"""\
        apiVersion: nodeagent/v1
        kind: NodeProfile
        metadata: {{name: damon-test}}
        damon:
          coexist: {coexist}
          kdamonds:
        """)
    if kdamonds:
        text += textwrap.indent(textwrap.dedent(f"""\
            - name: demote-cold
              monitoring: {{sample: 5ms, aggregate: 100ms, update: 1s}}
              targets: [{{node: fast}}]
              pairing: {pairing}
              schemes:
            """), "    ") + body
    else:
        text = text.replace("kdamonds:\n", "kdamonds: []\n")
    if extra_kdamond:
        text += textwrap.indent(textwrap.dedent("""\
            - name: watch-cxl
              targets: [{node: slow}]
              schemes:
            """), "    ") + STAT
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def run(capsys: pytest.CaptureFixture[str], root: Path, *args: str) -> tuple[int, str, str]:
    code = main(["--root", str(root), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def online(root: Path, *devices: str) -> SimKernel:
    k = SimKernel(root)
    with k.locked():
        for d in devices or ("dax0.0",):
            simdax.to_system_ram(k, d, "Movable")
    return k


@pytest.fixture
def node(make_node):
    """qemu-3node (or another release of it) with its DAX device online as node 2."""

    def make(kernel: str | None = None, foreign: bool = False) -> tuple[Path, SimKernel]:
        root = make_node("qemu-3node", kernel=kernel)
        k = online(root)
        if foreign:
            start_foreign(k)
        return root, k

    return make


def kd(k: SimKernel, i: int, rel: str) -> str:
    return k.tree.read(f"{K}/{i}/{rel}")


def damon_writes(k: SimKernel, since: int = 0) -> list[tuple[str, str, str]]:
    return [(w["path"].removeprefix(K + "/"), w["value"], w["result"]) for w in k.journal()[since:]
            if w["path"].startswith(K)]


def test_done_when_h100_cxl_builds_and_a_second_apply_is_empty(make_node, tmp_path, capsys) -> None:
    root = make_node("h100-cxl")
    k = online(root, "dax0.0", "dax1.0")
    repo_profile = str(Path(__file__).resolve().parents[2] / "profiles" / "cxl-inference.yaml")
    code, out, err = run(capsys, root, "apply", "--yes", repo_profile)
    assert code == 0, out + err
    assert [kd(k, i, "state") for i in (0, 1)] == ["on", "on"]
    assert [kd(k, i, "contexts/0/schemes/0/target_nid") for i in (0, 1)] == ["2", "3"]  # nearest CXL node
    assert kd(k, 1, "contexts/0/targets/0/regions/0/start") == str(512 * 2**30)
    code, out, err = run(capsys, root, "--format", "json", "plan", "--detailed-exitcode", repo_profile)
    assert code == 0, out + err
    assert json.loads(out)["changes"] == []


def test_build_from_empty_writes_in_the_kernels_order(node, tmp_path, capsys) -> None:
    root, k = node()
    code, out, err = run(capsys, root, "apply", "--yes", profile(tmp_path))
    assert code == 0, out + err
    writes = damon_writes(k)
    assert all(r == "ok" for _, _, r in writes)
    paths = [p for p, _, _ in writes]
    assert paths[0] == "nr_kdamonds" and writes[0][1] == "2"
    for i, p in enumerate(paths):  # every count before the numbered directories it creates
        if p.rsplit("/", 1)[-1] in COUNTS and "/" in p:
            parent = p.rsplit("/", 1)[0] + "/"
            assert all(j > i for j, q in enumerate(paths) if q.startswith(parent) and q != p), p
    for idx in (0, 1):
        mine = [p for p in paths if p.startswith(f"{idx}/")]
        assert mine[-1] == f"{idx}/state" and mine.index(f"{idx}/contexts/nr_contexts") == 0
        assert not any(re.search(r"/filters/\d+/allow$", p) for p in mine)  # 6.12 has no allow file
    assert kd(k, 0, "contexts/0/schemes/0/access_pattern/age/min") == "30"  # 3s / 100ms
    assert kd(k, 0, "contexts/0/schemes/0/access_pattern/sz/max") == str(2**64 - 1)  # omitted max
    assert kd(k, 0, "contexts/0/schemes/0/quotas/ms") == "10"
    state = json.loads((root / "var/lib/nodeagent/ownership.json").read_text())["damon"]["kdamonds"]
    assert {v["name"]: v["pid"] for v in state.values()} == {"demote-cold-node0": int(kd(k, 0, "pid")),
                                                             "demote-cold-node1": int(kd(k, 1, "pid"))}
    before = len(k.journal())
    code, out, _ = run(capsys, root, "apply", "--yes", profile(tmp_path))
    assert code == 0 and len(k.journal()) == before and "No changes" in out


def test_update_in_place_commits_and_keeps_the_pid(node, tmp_path, capsys) -> None:
    root, k = node()
    run(capsys, root, "apply", "--yes", profile(tmp_path))
    pids = [kd(k, i, "pid") for i in (0, 1)]
    mark = len(k.journal())
    code, out, err = run(capsys, root, "plan", profile(tmp_path, quota="512MiB"))
    assert "~ damon.demote-cold-node0" in out and "then commit" in out
    code, out, err = run(capsys, root, "apply", "--yes", profile(tmp_path, quota="512MiB"))
    assert code == 0, out + err
    assert damon_writes(k, mark) == [("0/contexts/0/schemes/0/quotas/bytes", "536870912", "ok"),
                                     ("0/state", "commit", "ok"),
                                     ("1/contexts/0/schemes/0/quotas/bytes", "536870912", "ok"),
                                     ("1/state", "commit", "ok")]
    assert [kd(k, i, "pid") for i in (0, 1)] == pids


def test_a_bad_commit_is_detected(node, tmp_path, capsys) -> None:
    root, k = node()
    run(capsys, root, "apply", "--yes", profile(tmp_path))
    bad = profile(tmp_path, filt="{type: memcg, memcg: /no-such-group, matching: true}")
    code, out, err = run(capsys, root, "apply", "--yes", bad)
    assert code == 5
    assert "the kernel accepted the commit to kdamond 0 but the kdamond stopped" in out
    assert kd(k, 0, "state") == "off"
    code, out, _ = run(capsys, root, "plan", bad)  # still nodeagent's: the next apply would start it again
    assert "+ damon.demote-cold-node0" in out and "kdamond 0 stopped" in out


def test_remove_a_scheme(node, tmp_path, capsys) -> None:
    root, k = node()
    two = SCHEME.replace("QUOTA", "256MiB").replace("FILTER", "{type: young, matching: true}") + STAT
    run(capsys, root, "apply", "--yes", profile(tmp_path, schemes=two))
    assert kd(k, 0, "contexts/0/schemes/nr_schemes") == "2"
    pid, mark = kd(k, 0, "pid"), len(k.journal())
    code, out, err = run(capsys, root, "apply", "--yes", profile(tmp_path))
    assert code == 0, out + err
    writes = [p for p, _, _ in damon_writes(k, mark) if p.startswith("0/")]
    assert writes[0] == "0/contexts/0/schemes/nr_schemes" and writes[-1] == "0/state"
    assert "0/contexts/0/schemes/0/action" in writes  # rewritten after the count reset it
    assert kd(k, 0, "contexts/0/schemes/nr_schemes") == "1" and kd(k, 0, "pid") == pid
    assert kd(k, 0, "contexts/0/schemes/0/action") == "migrate_cold"


def test_remove_and_add_a_kdamond_when_all_are_nodeagents(node, tmp_path, capsys) -> None:
    root, k = node()
    run(capsys, root, "apply", "--yes", profile(tmp_path, pairing="split"))
    assert kd(k, 0, "state") == "on" and SimKernel(root).tree.read(f"{K}/nr_kdamonds") == "1"
    pid = kd(k, 0, "pid")
    grown = profile(tmp_path, pairing="split", extra_kdamond=True, name="grown.yaml")
    code, out, _ = run(capsys, root, "plan", grown)
    assert "[disruptive]" in out and "nr_kdamonds 1 → 2" in out and "stop kdamond 0" in out
    mark = len(k.journal())
    code, out, _ = run(capsys, root, "apply", "--yes", grown)
    assert code == 5 and "blocked" in out
    assert damon_writes(k, mark) == [] and kd(k, 0, "pid") == pid
    code, out, err = run(capsys, root, "apply", "--yes", "--allow-disruptive", grown)
    assert code == 0, out + err
    assert [kd(k, i, "state") for i in (0, 1)] == ["on", "on"]
    assert kd(k, 1, "contexts/0/targets/0/regions/0/start") == str(0x181200000 // 2**27 * 2**27 + 2**27)
    # Removing one stops it and empties its slot; the other keeps running untouched.
    pid, pid1 = kd(k, 0, "pid"), kd(k, 1, "pid")
    code, out, err = run(capsys, root, "apply", "--yes", profile(tmp_path, pairing="split"))
    assert code == 0, out + err
    assert kd(k, 0, "state") == "on" and kd(k, 0, "pid") == pid and kd(k, 1, "state") == "off"
    assert kd(k, 1, "contexts/nr_contexts") == "0" and k.tree.read(f"{K}/nr_kdamonds") == "2"
    # Adding it back reuses the empty slot: no count change, nothing disruptive.
    code, out, _ = run(capsys, root, "plan", grown)
    assert "[disruptive]" not in out and "free slot kdamond 1" in out
    code, out, err = run(capsys, root, "apply", "--yes", grown)
    assert code == 0, out + err
    assert k.tree.read(f"{K}/nr_kdamonds") == "2" and kd(k, 0, "pid") == pid
    assert kd(k, 1, "state") == "on" and kd(k, 1, "pid") != pid1
    # An empty profile stops everything and drops the count to 0.
    code, out, err = run(capsys, root, "apply", "--yes", profile(tmp_path, kdamonds=False))
    assert code == 0, out + err
    assert k.tree.read(f"{K}/nr_kdamonds") == "0"
    assert json.loads((root / "var/lib/nodeagent/ownership.json").read_text())["damon"]["kdamonds"] == {}


def test_a_foreign_running_kdamond_blocks_growth_and_is_never_touched(node, tmp_path, capsys) -> None:
    root, k = node(foreign=True)
    mark = len(k.journal())
    foreign_before = {p.name: p.read_text() for p in (root / K[1:] / "0").rglob("*") if p.is_file()}
    code, out, err = run(capsys, root, "apply", "--yes", profile(tmp_path))
    assert code == 5, out + err
    assert "kdamond 0 (running, pid 77; paddr; pageout) is running and not managed by nodeagent" in out
    assert damon_writes(k, mark) == []
    assert {p.name: p.read_text() for p in (root / K[1:] / "0").rglob("*") if p.is_file()} == foreign_before
    # take-over is explicit and disruptive: blocked without --allow-disruptive, done with it.
    take = profile(tmp_path, coexist="take-over", name="take.yaml")
    code, out, _ = run(capsys, root, "plan", take)
    assert "NOT nodeagent's: taken over" in out and "[disruptive]" in out
    code, out, _ = run(capsys, root, "apply", "--yes", take)
    assert code == 5 and damon_writes(k, mark) == []
    code, out, err = run(capsys, root, "apply", "--yes", "--allow-disruptive", take)
    assert code == 0, out + err
    assert kd(k, 0, "contexts/0/schemes/0/action") == "migrate_cold" and kd(k, 0, "pid") != "77"


def test_an_enabled_damon_module_is_predicted_to_block_starting(node, tmp_path, capsys) -> None:
    root, k = node()
    k.write("/sys/module/damon_reclaim/parameters/enabled", "Y")
    mark = len(k.journal())
    code, out, _ = run(capsys, root, "plan", profile(tmp_path))
    assert "damon_reclaim is enabled, and DAMON refuses to start sysfs kdamonds" in out
    code, out, _ = run(capsys, root, "apply", "--yes", profile(tmp_path))
    assert code == 5 and damon_writes(k, mark) == []


@pytest.mark.parametrize("kernel, expected", [
    ("6.8.0", ["DAMOS action migrate_cold needs kernel 6.11", "filter type young needs kernel 6.10"]),
    ("5.10.0", ["has no DAMON sysfs interface"]),
])
def test_old_kernels_fail_in_the_plan_with_zero_writes(node, tmp_path, capsys, kernel, expected) -> None:
    root, k = node(kernel=kernel)
    mark = len(k.journal())
    code, out, err = run(capsys, root, "apply", "--yes", profile(tmp_path))
    assert code == 1
    for text in expected:
        assert text in out
    assert "nothing was applied" in err and k.journal()[mark:] == []


def test_allow_filters_are_unsupported_on_6_12_not_ignored(node, tmp_path, capsys) -> None:
    root, k = node()
    code, out, _ = run(capsys, root, "plan", profile(tmp_path, filt="{type: young, matching: false, allow: true}"))
    assert code == 1 and "allow: true (filters that restrict the action to pages) needs kernel 6.14" in out


def test_6_18_writes_ops_filters_refresh_ms_and_never_the_deprecated_filters(node, tmp_path, capsys) -> None:
    root, k = node(kernel="6.18.0")
    text = Path(profile(tmp_path, filt="{type: young, matching: true}")).read_text()
    text = text.replace("pairing: nearest", "pairing: nearest\n      stats_refresh: 2s")
    p = tmp_path / "618.yaml"
    p.write_text(text)
    code, out, err = run(capsys, root, "apply", "--yes", str(p))
    assert code == 0, out + err
    paths = [w for w, _, _ in damon_writes(k)]
    assert not any("/filters/" in w and "ops_filters" not in w and "core_filters" not in w for w in paths)
    assert kd(k, 0, "contexts/0/schemes/0/ops_filters/0/type") == "young"
    assert kd(k, 0, "contexts/0/schemes/0/ops_filters/0/allow") == "N"
    assert kd(k, 0, "refresh_ms") == "2000" and kd(k, 0, "contexts/0/schemes/0/dests/nr_dests") == "0"
    code, out, _ = run(capsys, root, "plan", "--detailed-exitcode", str(p))
    assert code == 0, out


def test_facts_and_plan_never_write(node, tmp_path, capsys) -> None:
    root, k = node(foreign=True)
    before = k.journal()
    assert run(capsys, root, "facts")[0] == 0
    assert run(capsys, root, "plan", profile(tmp_path))[0] == 0
    assert k.journal() == before


@pytest.mark.skipif(not shutil.which("unshare"), reason="needs unshare(1)")
def test_facts_and_plan_run_on_a_read_only_node(node, tmp_path) -> None:
    """The whole simulated node mounted read-only: any write, even a lock file, would fail the commands."""
    root, _ = node(foreign=True)
    prof = profile(tmp_path)
    ro = f"mount --bind {root} {root} && mount -o remount,bind,ro {root}"
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", ro], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("private read-only bind mounts are not allowed here")
    script = (f"{ro} && {sys.executable} -m nodeagent --root {root} facts >/dev/null && "
              f"{sys.executable} -m nodeagent --root {root} plan {prof}")
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cannot add demote-cold-node0" in proc.stdout


def test_a_transiently_busy_interface_is_retried(node, tmp_path, capsys) -> None:
    """Another tool's pending command keeps every DAMON command busy until its kdamond's next aggregation: a
    dozen EBUSYs over most of a second (more than the five tries over 0.2 s that failed under a stats poller)."""
    root, k = node()
    contend(k, 12)
    code, out, err = run(capsys, root, "apply", "--yes", profile(tmp_path))
    assert code == 0, out + err
    results = [r for _, _, r in damon_writes(k)]
    assert results[:13] == ["EBUSY"] * 12 + ["ok"] and kd(k, 0, "state") == "on"


def test_busy_that_persists_is_raised_once_its_time_is_up() -> None:
    calls: list[float] = []

    def busy() -> None:
        calls.append(time.monotonic())
        raise BusyError("write /sys/kernel/mm/damon/admin/kdamonds/0/state: Device or resource busy")

    with pytest.raises(BusyError):
        retry_busy(busy, busy_for=0.3)
    assert calls[-1] - calls[0] >= 0.3 and len(calls) >= 4
    answers = iter([BusyError("busy"), BusyError("busy"), "on"])

    def twice_busy() -> str:
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a

    assert retry_busy(twice_busy, busy_for=0.3) == "on"


def test_without_online_commit_an_update_restarts_the_kdamond(node, tmp_path, capsys) -> None:
    root, k = node(kernel="5.18.0")
    pageout = "        - action: pageout\n          access: {age: {min: 5s}}\n          quota: {size: QUOTA}\n"
    code, out, err = run(capsys, root, "apply", "--yes", profile(tmp_path, schemes=pageout.replace("QUOTA", "1GiB")))
    assert code == 0, out + err
    pid, mark = kd(k, 0, "pid"), len(k.journal())
    changed = profile(tmp_path, schemes=pageout.replace("QUOTA", "2GiB"), name="q.yaml")
    code, out, err = run(capsys, root, "apply", "--yes", changed)
    assert code == 0, out + err
    assert [(p, v) for p, v, _ in damon_writes(k, mark) if p.startswith("0/")] == [
        ("0/state", "off"), ("0/contexts/0/schemes/0/quotas/bytes", str(2 * 2**30)), ("0/state", "on")]
    assert kd(k, 0, "state") == "on" and kd(k, 0, "pid") != pid
