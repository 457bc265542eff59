"""Every preset read by tools no one here wrote — Debian 12's daxctl/cxl/ndctl 76.1, util-linux's lsmem and damo
3.4.3 — before and after an apply, against ``nodeagent facts``: any tool error, parse error or disagreement fails.

The tools run only in a private mount namespace over the simulated tree (``peer.py``, ``nsrun.sh``); where they are
not fetched (``scripts/peer-tools.sh``) or unshare is not allowed, the tests skip and say why — except under CI,
which fetches them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from nodeagent_sim import PRESETS, SimKernel

from nodeagent.cli.main import main

from . import compare, peer

PROFILE = str(peer.REPO / "profiles" / "cxl-inference.yaml")
#: stress: 8 × 2 TiB in 128 MiB blocks (130,000 blocks): the benchmarks' node, the same code as ``small``.
SKIP = {"stress"}


@pytest.fixture(scope="module")
def tools() -> None:
    why = peer.unavailable()
    if why:
        # what CI fetches must be there; what the machine's kernel allows (a private mount namespace, FUSE) may not
        if os.environ.get("CI") and not any(w in why for w in ("unshare", "not root", "/dev/fuse")):
            pytest.fail(f"CI fetches the peer tools (scripts/peer-tools.sh): {why}")
        pytest.skip(why)


def facts(root: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    capsys.readouterr()
    code = main(["--root", str(root), "--format", "json", "facts"])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)


def _stats_refreshers(f: dict) -> list[int]:
    """The kdamonds damo asks for fresh statistics: running ones with schemes and no ``refresh_ms`` (6.17+) set."""
    return [int(kd["index"]) for kd in f["sections"]["damon"]["kdamonds"]
            if kd["state"] == "on" and int(kd["config"].get("contexts/0/schemes/nr_schemes", 0))
            and not int(kd["config"].get("refresh_ms", 0))]


def disagreements(root: Path, scratch: Path, capsys: pytest.CaptureFixture[str], worked: bool = False) -> list[str]:
    """What the peer tools and nodeagent disagree on; ``worked``: the running kdamonds have worked a while, so
    damo must show statistics that moved."""
    f = facts(root, capsys)
    k = SimKernel(root)
    journal = len(k.journal())
    res = peer.run(root, k.meta["kernel"], scratch)
    problems = []
    for name, o in res.items():
        problems += compare.tool_errors(name, o.rc, o.out, o.err)
    if problems:
        return problems
    problems += compare.daxctl(res["daxctl"].json(), f)
    problems += compare.cxl(res["cxl"].json(), f)
    cxl_u = list(compare.walk(res["cxl-u"].json()))
    cxl_n = list(compare.walk(res["cxl"].json()))
    if len(cxl_u) != len(cxl_n):
        problems.append(f"cxl list -u lists {len(cxl_u)} objects, without -u {len(cxl_n)}")
    problems += compare.ndctl(res["ndctl"].json(), f)
    problems += compare.lsmem(res["lsmem"].json(), res["lsmem-summary"].out, f)
    problems += compare.damo(res["damo"].json(), f)
    # damo's statistics report wrote update_schemes_stats (through simfs, to the simulator's kernel) before it
    # read them: the facts read now hold what the refresh left, which damo must have shown.
    written = {e["path"] for e in k.journal()[journal:]
               if e["value"].strip() == "update_schemes_stats" and e["result"] == "ok"}
    for i in _stats_refreshers(f):
        if f"/sys/kernel/mm/damon/admin/kdamonds/{i}/state" not in written:
            problems.append(f"damo did not refresh kdamond {i}'s statistics through the simulator")
    stats = res["damo-stats"].json()
    problems += compare.damo_stats(stats, facts(root, capsys))
    if worked and _stats_refreshers(f) and not sum(compare._num(st["sz_tried"]) for _, st in stats):
        problems.append("damo shows no scheme that tried anything after the kdamonds worked")
    return problems


def advance(root: Path, refreshes: int = 3) -> None:
    """Simulated time passes: each running kdamond's schemes work ``refreshes`` quota intervals (each refresh
    is one, see nodeagent_sim.damos)."""
    k = SimKernel(root)
    base = "/sys/kernel/mm/damon/admin/kdamonds"
    for i in range(int(k.tree.local(f"{base}/nr_kdamonds").read_text())):
        if k.tree.local(f"{base}/{i}/state").read_text().strip() == "on":
            for _ in range(refreshes):
                k.write(f"{base}/{i}/state", "update_schemes_stats")


@pytest.mark.parametrize("preset", sorted(set(PRESETS) - SKIP))
def test_peer_tools_read_the_node_as_nodeagent_does(preset: str, tools: None, make_node, scratch_dir: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    root = make_node(preset)
    before = disagreements(root, scratch_dir / "before", capsys)
    assert before == [], f"{preset} as laid out:\n  " + "\n  ".join(before)
    main(["--root", str(root), "apply", "--yes", "--skip-checks", "all", "--allow-disruptive", PROFILE])
    advance(root)
    after = disagreements(root, scratch_dir / "after", capsys, worked=True)
    assert after == [], f"{preset} after apply:\n  " + "\n  ".join(after)


def test_the_namespace_refuses_to_run_tools_without_the_simulated_sys(tools: None, make_node,
                                                                     scratch_dir: Path) -> None:
    """The marker is read through /sys before any tool runs: a root whose sys lacks it runs nothing."""
    import subprocess

    root = make_node("qemu-3node")
    out = scratch_dir / "out"
    out.mkdir()
    env = {**os.environ, **peer.tool_env(), "NODEAGENT_PEER_HOST_MNTNS": os.readlink("/proc/self/ns/mnt")}
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", str(peer.NSRUN), str(root), str(out),
                           "no-such-token", str(scratch_dir)], capture_output=True, text=True, env=env)
    assert proc.returncode == 98, proc.stderr
    assert "marker missing" in proc.stderr
    assert list(out.iterdir()) == []
