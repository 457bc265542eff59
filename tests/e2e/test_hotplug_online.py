"""Issue 7's done-when: a hot-added CXL device is onlined without a manual step — through the udev path
(``apply --device NAME``, what ``nodeagent-apply@NAME.service`` runs) and through ``nodeagent watch``."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel
from nodeagent_sim.dax import DaxDef
from nodeagent_sim.hotplug import hot_add_dax

from nodeagent.facts import gather
from nodeagent.facts.dax import block_ids
from nodeagent.facts.dax import from_facts as dax_facts
from nodeagent.host import open_host
from tests.e2e.cli_helpers import run
from tests.e2e.test_units_hotplug import _wait

REPO = Path(__file__).resolve().parents[2]
PROFILE = str(REPO / "profiles" / "cxl-inference.yaml")
TiB = 1024**4
#: A third 2 TiB expander behind socket 0, in the CXL window the firmware reserved as node 4.
THIRD = DaxDef("dax2.0", 2, 4, 5 * TiB, 2 * TiB, kind="cxl", numa_node=0)


@pytest.fixture
def converged(make_node, capsys) -> Path:
    root = make_node("h100-cxl")
    code, out, err = run(["--root", str(root), "apply", "--yes", PROFILE], capsys)
    assert code == 0, out + err
    return root


def device(root: Path, name: str):  # type: ignore[no-untyped-def]
    facts = gather(open_host(root))
    return dax_facts(facts).device(name), facts


def owned_by_the_device(write: dict, blocks: range) -> bool:
    """A write that belongs to onlining dax2.0: its dax bus files or one of its memory blocks."""
    path = write["path"]
    if "dax2.0" in path or path.startswith("/sys/bus/dax/drivers/") and write["value"].strip() == "dax2.0":
        return True
    m = re.fullmatch(r"/sys/devices/system/memory/memory(\d+)/(state|online)", path)
    return m is not None and int(m.group(1)) in blocks


def test_apply_device_onlines_a_hot_added_expander_and_touches_nothing_else(converged: Path, capsys) -> None:
    root = converged
    k = SimKernel(root)
    k.write("/proc/sys/kernel/numa_balancing", "1")  # node-wide drift: not this device's business
    events = hot_add_dax(k, THIRD)
    assert [(e.action, e.sysname) for e in events] == [("add", "dax2.0")]
    dev, facts = device(root, "dax2.0")
    assert dev.mode == "devdax" and facts.node(4) is None
    owned = json.loads((root / "var/lib/nodeagent/ownership.json").read_text())["damon"]["kdamonds"]
    promote = next(int(i) for i, r in owned.items() if r["name"] == "promote-hot-to-node0")
    kd = f"/sys/kernel/mm/damon/admin/kdamonds/{promote}"
    pid = k.tree.read(f"{kd}/pid")
    mark = len(k.journal())
    code, out, err = run(["--root", str(root), "--format", "json", "apply", "--yes", "--device", "dax2.0",
                          PROFILE], capsys)
    assert code == 0, out + err
    result = json.loads(out)
    # Onlined, and its memory joins the kdamond that promotes from socket 0's expanders: one commit, same pid.
    assert [(o["target"], o["status"]) for o in result["outcomes"]] == [("dax2.0", "applied"),
                                                                         ("damon.promote-hot-to-node0", "applied")]
    assert k.tree.read(f"{kd}/pid") == pid and k.tree.read(f"{kd}/state") == "on"
    regions = f"{kd}/contexts/0/targets/0/regions"
    assert (k.tree.read(f"{regions}/1/start"), k.tree.read(f"{regions}/1/end")) == (
        str(THIRD.start), str(THIRD.start + THIRD.size))
    assert ("not in the scope of dax2.0, left for a full `nodeagent apply`: kernel.numa_balancing"
            in result["plan"]["warnings"])
    dev, facts = device(root, "dax2.0")
    assert dev.mode == "system-ram" and dev.fully_online and dev.zones == {"Movable": 1024}  # the profile's zone
    assert 4 in facts.tiers[max(facts.tiers)]  # a slow node, in the kmem tier with the other expanders
    blocks = block_ids(THIRD.start, THIRD.size, facts.block_size_bytes or 0)
    others = [w for w in k.journal()[mark:] if not owned_by_the_device(w, blocks) and not
              w["path"].startswith(f"{kd}/")]
    assert others == [], others
    assert k.tree.read("/proc/sys/kernel/numa_balancing") == "1"
    # The demotion kdamonds pair each DRAM node with the expander nearest to it; node 4 ties with node 2 behind
    # socket 0, so they stay as they are: a full plan has only the node-wide drift left.
    code, out, _ = run(["--root", str(root), "--format", "json", "plan", PROFILE], capsys)
    assert [c["target"] for c in json.loads(out)["changes"]] == ["kernel.numa_balancing"]
    journal = [json.loads(ln) for ln in (root / "var/lib/nodeagent/journal.jsonl").read_text().splitlines()]
    assert [(e["scope"], e["status"]) for e in journal if e.get("scope")] == [(["dax2.0"], "converged")]


def test_a_second_expander_on_an_online_node_joins_its_promotion_kdamond(converged: Path, capsys) -> None:
    """A device whose node is online already (node 3, dax1.0's) adds memory to that node: the scoped apply
    onlines it and commits its range into the kdamond promoting from node 3, and verify agrees."""
    root = converged
    k = SimKernel(root)
    extra = DaxDef("dax3.0", 3, 3, 7 * TiB, 2 * 1024**3, kind="cxl", numa_node=1)
    hot_add_dax(k, extra)
    code, out, err = run(["--root", str(root), "--format", "json", "apply", "--yes", "--device", "dax3.0",
                          PROFILE], capsys)
    assert code == 0, out + err
    result = json.loads(out)
    assert result["status"] == "converged" and [(o["target"], o["status"]) for o in result["outcomes"]] == [
        ("dax3.0", "applied"), ("damon.promote-hot-to-node1", "applied")]
    change = next(c for c in result["plan"]["changes"] if c["target"] == "damon.promote-hot-to-node1")
    assert change["data"]["command"] == "commit" and "dax3.0" in change["devices"]
    code, out, _ = run(["--root", str(root), "--format", "json", "plan", PROFILE], capsys)
    assert json.loads(out)["changes"] == []


def test_a_scoped_apply_brings_back_auto_online_blocks_the_onlining_needs(converged: Path, capsys) -> None:
    """daxctl races the kernel's auto-online policy: when it drifted to online, the device's apply sets it
    offline first (and leaves every other node-wide setting alone)."""
    root = converged
    k = SimKernel(root)
    k.write("/sys/devices/system/memory/auto_online_blocks", "online")
    k.write("/sys/kernel/mm/transparent_hugepage/defrag", "never")
    hot_add_dax(k, THIRD)
    code, out, err = run(["--root", str(root), "apply", "--yes", "--device", "dax2.0", PROFILE], capsys)
    assert code == 0, out + err
    assert "✓ memory.auto_online_blocks: applied" in out and "✓ dax2.0: applied" in out
    assert k.tree.read("/sys/devices/system/memory/auto_online_blocks") == "offline"
    assert "[never]" in k.tree.read("/sys/kernel/mm/transparent_hugepage/defrag")
    dev, _ = device(root, "dax2.0")
    assert dev.fully_online and dev.zone == "Movable"


def test_a_kdamond_that_needs_a_device_outside_the_scope_is_left_for_a_full_apply(make_node, capsys) -> None:
    """On a fresh node the kdamonds migrate to both expanders: dax0.0's apply alone cannot start them."""
    root = make_node("h100-cxl")
    code, out, _ = run(["--root", str(root), "--format", "json", "apply", "--dry-run", "--skip-checks", "all",
                        "--device", "dax0.0", PROFILE], capsys)
    plan = json.loads(out)["plan"]
    assert [c["target"] for c in plan["changes"]] == ["memory.auto_online_blocks", "dax0.0"]
    left = plan["warnings"][-1].split("left for a full `nodeagent apply`: ")[1].split(", ")
    assert {"dax1.0", "damon.kdamonds"} <= set(left)
    code, out, _ = run(["--root", str(root), "--format", "json", "apply", "--dry-run", "--skip-checks", "all",
                        "--device", "dax0.0", "--device", "dax1.0", PROFILE], capsys)
    changes = json.loads(out)["plan"]["changes"]
    damon = next(c for c in changes if c["target"] == "damon.kdamonds")
    assert damon["devices"] == ["dax0.0", "dax1.0"]  # in the scope of both


def test_hot_add_to_a_node_that_is_not_possible_is_refused_by_the_simulator(make_node) -> None:
    k = SimKernel(make_node("h100-cxl"))
    with pytest.raises(ValueError, match="node 7 is not a possible node here"):
        hot_add_dax(k, DaxDef("dax2.0", 2, 7, 5 * TiB, 2 * TiB))


def test_watch_onlines_a_hot_added_expander_then_stops_on_sigterm(converged: Path) -> None:
    root = converged
    k = SimKernel(root)
    proc = subprocess.Popen([sys.executable, "-m", "nodeagent", "--root", str(root), "watch", "--debounce", "0.3",
                             PROFILE], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    fifos = root / ".nodeagent-machine/uevents"
    try:
        assert _wait(lambda: fifos.is_dir() and any(fifos.glob("*.fifo"))), "watch never started listening"
        hot_add_dax(k, THIRD)

        def onlined() -> bool:
            dev, _ = device(root, "dax2.0")
            return dev is not None and dev.fully_online

        assert _wait(onlined), "watch did not online dax2.0"
        dev, _ = device(root, "dax2.0")
        assert dev.zones == {"Movable": 1024}
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "hot-plug: dax2.0: reconciling" in err and "hot-plug: converged (dax2.0, damon.promote-hot-to-node0)" in err
    assert err.rstrip().endswith("watch stopped")
    hotplug = [e for e in map(json.loads, (root / "var/lib/nodeagent/journal.jsonl").read_text().splitlines())
               if e["event"] == "hotplug"]
    assert [(e["device"], e["result"]) for e in hotplug] == [("dax2.0", "converged")]
