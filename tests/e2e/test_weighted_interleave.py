"""kernel.weighted_interleave: the system weights of MPOL_WEIGHTED_INTERLEAVE and the auto switch, one target that
round-trips plan → apply → nothing left → drift → revert on the simulated kernel, on each layout the kernel has
had: every possible node with a file (6.9-6.15), only nodes with memory and an ``auto`` switch (6.16, 6.17),
the switch named ``__auto_type`` (6.18)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel

from .cli_helpers import run

HEAD = "apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: wi}\n"
DIR = "/sys/kernel/mm/mempolicy/weighted_interleave"
DAX_ONLINE = ("memory:\n  auto_online_blocks: offline\n  dax:\n"
              "    - {name: pmem, match: {all: true}, mode: system-ram, zone: movable}\n")


def plan_json(root: Path, prof: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    code, out, err = run(["--root", str(root), "--format", "json", "plan", "--detailed-exitcode", str(prof)], capsys)
    return code, json.loads(out)


def apply(root: Path, prof: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["--root", str(root), "apply", "--yes", "--skip-checks", "all", str(prof)], capsys)
    assert code == 0, out + err


def table(k: SimKernel) -> dict[str, str]:
    d = k.tree.local(DIR)
    return {p.name: p.read_text().strip() for p in sorted(d.iterdir())}


def test_weights_on_612_every_possible_node_has_a_file(make_node, tmp_path: Path, capsys) -> None:
    root = make_node("qemu-3node")
    k = SimKernel(root)
    assert table(k) == {"node0": "1", "node1": "1", "node2": "1"}
    prof = tmp_path / "p.yaml"
    prof.write_text(HEAD + "kernel:\n  weighted_interleave: {weights: {node0: 3, node2: 1}}\n")
    code, plan = plan_json(root, prof, capsys)
    assert code == 2
    (c,) = plan["changes"]
    assert (c["target"], c["before_label"], c["after_label"]) == ("kernel.weighted_interleave", "node0=1", "node0=3")
    apply(root, prof, capsys)
    assert table(k) == {"node0": "3", "node1": "1", "node2": "1"}
    code, plan = plan_json(root, prof, capsys)
    assert (code, plan["changes"], plan["problems"]) == (0, [], [])
    k.write(f"{DIR}/node0", "0")  # 6.9-6.15: 0 puts the default back
    assert table(k)["node0"] == "1"
    code, out, err = run(["--root", str(root), "drift", str(prof)], capsys)
    assert code == 3 and "kernel.weighted_interleave" in out, out + err
    apply(root, prof, capsys)
    code, out, err = run(["--root", str(root), "revert", "--yes"], capsys)
    assert code == 0, out + err
    assert table(k) == {"node0": "1", "node1": "1", "node2": "1"}


def test_616_a_node_the_plan_brings_online_gets_its_weight_after_the_dax_change(make_node, tmp_path: Path,
                                                                                capsys) -> None:
    """6.16: node2 (pmem dax0.0) has no weight file until its memory is online; the plan weighs it anyway and
    applies the weights after DAX. Weights by hand turn auto off."""
    root = make_node("qemu-3node", kernel="6.16.0-nodeagent-sim")
    k = SimKernel(root)
    assert table(k) == {"auto": "true", "node0": "1", "node1": "1"}
    prof = tmp_path / "p.yaml"
    prof.write_text(HEAD + "kernel:\n  weighted_interleave: {weights: {node0: 3, node2: 1}}\n" + DAX_ONLINE)
    code, plan = plan_json(root, prof, capsys)
    assert plan["problems"] == [], plan["problems"]
    kinds = [c["kind"] for c in plan["changes"]]
    assert kinds.index("interleave") > kinds.index("dax")
    (c,) = [c for c in plan["changes"] if c["kind"] == "interleave"]
    assert c["after_label"] == "auto off, node0=3, node2=1"
    assert "node2=(not online yet)" in c["before_label"] and "dax0.0" in c["reason"]
    apply(root, prof, capsys)
    assert table(k) == {"auto": "false", "node0": "3", "node1": "1", "node2": "1"}
    code, plan = plan_json(root, prof, capsys)
    assert (code, plan["changes"], plan["problems"]) == (0, [], [])
    code, out, err = run(["--root", str(root), "revert", "--yes", "--only", "kernel.weighted_interleave"], capsys)
    assert code == 0, out + err
    # auto again, every weight from the bandwidth: node0 and node1 declare the same, 16/32 each; node2 declares
    # none, which reduce_interleave_weights rounds up to 1 (and the GCD of 16, 16, 1 reduces nothing)
    assert table(k) == {"auto": "true", "node0": "16", "node1": "16", "node2": "1"}


def test_616_a_node_that_never_comes_online_is_a_problem(make_node, tmp_path: Path, capsys) -> None:
    root = make_node("qemu-3node", kernel="6.16.0-nodeagent-sim")
    prof = tmp_path / "p.yaml"
    prof.write_text(HEAD + "kernel:\n  weighted_interleave: {weights: {node2: 1}}\n")
    code, plan = plan_json(root, prof, capsys)
    (p,) = plan["problems"]
    assert "weights.node2" in p["message"] and "only a node with memory" in p["message"]


def test_auto_needs_616_and_bandwidth_figures(make_node, tmp_path: Path, capsys) -> None:
    prof = tmp_path / "p.yaml"
    prof.write_text(HEAD + "kernel:\n  weighted_interleave: {auto: true}\n")
    code, plan = plan_json(make_node("qemu-3node"), prof, capsys)
    (p,) = plan["problems"]
    assert "no auto switch on kernel 6.12" in p["message"] and "6.16" in p["message"]
    root = make_node("qemu-3node", kernel="6.16.0-nodeagent-sim")
    for n in range(3):  # a firmware without HMAT: no access1 figures
        if SimKernel(root).tree.exists(f"/sys/devices/system/node/node{n}/access1"):
            SimKernel(root).tree.remove_tree(f"/sys/devices/system/node/node{n}/access1")
    SimKernel(root).write(f"{DIR}/node0", "2")  # auto is off now
    code, plan = plan_json(root, prof, capsys)
    (p,) = plan["problems"]
    assert "ENODEV" in p["message"]


def test_618_names_the_switch___auto_type_and_auto_round_trips(make_node, tmp_path: Path, capsys) -> None:
    root = make_node("workstation")  # 6.18
    k = SimKernel(root)
    assert table(k) == {"__auto_type": "true", "node0": "1"}
    k.write(f"{DIR}/node0", "4")
    assert table(k) == {"__auto_type": "false", "node0": "4"}
    prof = tmp_path / "p.yaml"
    prof.write_text(HEAD + "kernel:\n  weighted_interleave: {auto: true}\n")
    code, plan = plan_json(root, prof, capsys)
    assert code == 2 and plan["problems"] == []
    apply(root, prof, capsys)
    assert table(k) == {"__auto_type": "true", "node0": "1"}
    code, plan = plan_json(root, prof, capsys)
    assert (code, plan["changes"]) == (0, [])
    code, out, err = run(["--root", str(root), "revert", "--yes"], capsys)
    assert code == 0, out + err
    assert table(k) == {"__auto_type": "false", "node0": "4"}


def test_auto_with_weights_is_refused_at_load_with_the_line(tmp_path: Path, capsys) -> None:
    prof = tmp_path / "p.yaml"
    prof.write_text(HEAD + "kernel:\n  weighted_interleave: {auto: true, weights: {node0: 2}}\n")
    code, out, err = run(["validate", str(prof)], capsys)
    assert code != 0 and "p.yaml:5" in err and "writing a weight turns auto off" in err, err
    assert "Traceback" not in out + err


def test_facts_from_before_the_section_say_so(make_node, tmp_path: Path, capsys) -> None:
    root = make_node("qemu-3node")
    facts = tmp_path / "facts.json"
    code, out, err = run(["--root", str(root), "facts", "--save", str(facts)], capsys)
    assert code == 0, err
    doc = json.loads(facts.read_text())
    del doc["sections"]["interleave"]
    facts.write_text(json.dumps(doc))
    prof = tmp_path / "p.yaml"
    prof.write_text(HEAD + "kernel:\n  weighted_interleave: {weights: {node0: 2}}\n")
    code, out, err = run(["--format", "json", "plan", str(prof), "--facts", str(facts)], capsys)
    (p,) = json.loads(out)["nodes"][0]["plan"]["problems"]
    assert "did not read weighted interleave's weights" in p["message"] and p["hint"] == "gather the facts again"
