"""revert covers every kind nodeagent changes: knobs, DAX devices (their mode and zone) and its own kdamonds."""

from __future__ import annotations

import json
from pathlib import Path

from nodeagent_sim import SimKernel

from nodeagent.facts import gather
from nodeagent.facts.damon import from_facts as damon_facts
from nodeagent.facts.dax import from_facts as dax_facts
from nodeagent.host import open_host
from tests.e2e.cli_helpers import run

REPO = Path(__file__).resolve().parents[2]
PROFILE = str(REPO / "profiles" / "cxl-inference.yaml")
STATE = "var/lib/nodeagent"


def snapshot(root: Path) -> dict:
    """What revert must restore: knobs, each DAX device's mode and zones, the kdamonds."""
    facts = gather(open_host(root))
    damon = damon_facts(facts)
    return {"knobs": facts.knobs,
            "dax": {d.name: (d.mode, d.zones, d.blocks_online) for d in dax_facts(facts).devices},
            "kdamonds": damon.nr_kdamonds, "running": [k.index for k in damon.kdamonds if k.running]}


def state(root: Path, name: str) -> dict:
    p = root / STATE / name
    return json.loads(p.read_text()) if p.exists() else {}


def test_apply_then_revert_puts_the_node_back(make_node, capsys) -> None:
    root = make_node("h100-cxl")
    before = snapshot(root)
    assert before["dax"] == {"dax0.0": ("devdax", {}, 0), "dax1.0": ("devdax", {}, 0)}
    code, out, err = run(["--root", str(root), "apply", "--yes", "--skip-checks", "all", PROFILE], capsys)
    assert code == 0, out + err
    applied = snapshot(root)
    assert applied["running"] == [0, 1, 2, 3] and applied["dax"]["dax0.0"][0] == "system-ram"
    originals = state(root, "originals.json")["originals"]
    assert originals["dax0.0"]["value"]["mode"] == "devdax"
    assert originals["damon.kdamonds"]["value"] == {"nr_kdamonds": 0}
    code, out, _ = run(["--root", str(root), "revert", "--dry-run"], capsys)
    assert code == 0 and "dax0.0  system-ram, movable (1024 blocks online) → devdax  [disruptive]" in out
    # Kdamonds stop before the memory they migrate to goes offline; auto_online_blocks goes back last.
    order = [line.split()[1] for line in out.splitlines() if line.startswith(("  - ", "  ~ "))]
    assert order.index("damon.demote-cold-node0") < order.index("dax0.0") < order.index("memory.auto_online_blocks")
    code, out, _ = run(["--root", str(root), "revert", "--yes", "--allow-disruptive"], capsys)
    assert code == 0, out
    assert snapshot(root) == before
    assert state(root, "originals.json")["originals"] == {} and not state(root, "ownership.json")["damon"]["kdamonds"]
    assert not state(root, "ownership.json").get("dax")
    assert state(root, "last-applied.json")["status"] == "reverted"
    code, out, _ = run(["--root", str(root), "revert", "--yes", "--allow-disruptive"], capsys)
    assert code == 0 and "Nothing to revert" in out


def test_without_allow_disruptive_the_dax_part_is_refused_and_the_rest_reverted(make_node, capsys) -> None:
    root = make_node("h100-cxl")
    before = snapshot(root)
    assert run(["--root", str(root), "apply", "--yes", "--skip-checks", "all", PROFILE], capsys)[0] == 0
    code, out, _ = run(["--root", str(root), "revert", "--yes"], capsys)
    assert code == 5, out
    assert "dax0.0: system-ram, movable (1024 blocks online) → devdax — blocked: disruptive" in out
    now = snapshot(root)
    assert now["knobs"] == before["knobs"] and now["kdamonds"] == 0 and now["running"] == []
    assert now["dax"]["dax0.0"] == ("system-ram", {"Movable": 1024}, 1024)  # still online: refused
    assert sorted(state(root, "originals.json")["originals"]) == ["dax0.0", "dax1.0"]  # what is left to revert
    code, out, _ = run(["--root", str(root), "revert", "--yes", "--allow-disruptive"], capsys)
    assert code == 0, out
    assert snapshot(root) == before


def test_revert_restores_the_zone_a_device_was_online_in(make_node, capsys) -> None:
    """h100-cxl-autoonline: the expanders came up online in ZONE_NORMAL; the profile moved them to movable."""
    root = make_node("h100-cxl-autoonline")
    before = snapshot(root)
    assert before["dax"]["dax0.0"] == ("system-ram", {"Normal": 1024}, 1024)
    assert run(["--root", str(root), "apply", "--yes", "--skip-checks", "all", "--allow-disruptive", PROFILE],
               capsys)[0] == 0
    assert snapshot(root)["dax"]["dax0.0"] == ("system-ram", {"Movable": 1024}, 1024)
    code, out, _ = run(["--root", str(root), "revert", "--yes", "--allow-disruptive"], capsys)
    assert code == 0, out
    assert snapshot(root) == before


def test_revert_never_touches_a_foreign_kdamond(make_node, capsys) -> None:
    """Someone restarted nodeagent's kdamond 1 after the apply (a new pid): it is theirs now and keeps running;
    nodeagent's others (0, 2, 3) are stopped, and nr_kdamonds stays (not every slot is nodeagent's)."""
    root = make_node("h100-cxl")
    k = SimKernel(root)
    assert run(["--root", str(root), "apply", "--yes", "--skip-checks", "all", PROFILE], capsys)[0] == 0
    kd1 = "/sys/kernel/mm/damon/admin/kdamonds/1"
    k.write(f"{kd1}/state", "off")
    k.write(f"{kd1}/state", "on")
    pid = k.tree.read(f"{kd1}/pid")
    mark = len(k.journal())
    code, out, _ = run(["--root", str(root), "revert", "--yes"], capsys)
    assert code == 5, out  # the DAX part needs --allow-disruptive
    assert "✓ damon.demote-cold-node0" in out and "demote-cold-node1" not in out
    assert "✓ damon.promote-hot-to-node0" in out and "✓ damon.promote-hot-to-node1" in out
    assert not [w for w in k.journal()[mark:] if w["path"].startswith(kd1) or w["path"].endswith("nr_kdamonds")]
    now = snapshot(root)
    assert now["running"] == [1] and now["kdamonds"] == 4 and k.tree.read(f"{kd1}/pid") == pid
    assert not state(root, "ownership.json")["damon"]["kdamonds"]
