"""`nodeagent sim` verbs keep the CLI's output contract: with --format json, stdout is exactly one JSON document.

Every verb of the group is run (the table must name each one, so a new verb cannot skip the contract), in both
option positions, on success and on each way it can fail.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nodeagent_sim.cli import sim

from .cli_helpers import run

AUTO_ONLINE = "/sys/devices/system/memory/auto_online_blocks"


def verbs(node: Path) -> dict[str, list[list[str]]]:
    """Verb → command lines, run in order on ``node`` (a simulated small node laid out by the first)."""
    d = str(node)
    return {
        "create": [["create", d, "--preset", "small"]],
        "presets": [["presets"]],
        "hot-add": [["hot-add", d, "--dax", "dax5.0", "--size", "4GiB", "--node", "1", "--mode", "kmem",
                     "--blocks", "offline"]],
        "boot": [["boot", d, "--memhp-default-state", "offline"]],
        "kdamond": [["kdamond", d, "--foreign", "--state", "off"]],
        "write": [["write", d, AUTO_ONLINE, "offline"]],
        "fill": [["fill", d, "--node", "0", "--free", "50%"], ["fill", d, "--node", "0", "--free", "1GiB"]],
        "fault": [["fault", d, "--write", "nr_kdamonds", "--errno", "EBUSY"], ["fault", d], ["fault", d, "--clear"]],
        "reset": [["reset", "small"]],
    }


def one_document(out: str) -> dict:
    doc = json.loads(out)  # exactly one: json.loads refuses trailing data
    assert isinstance(doc, dict), out
    return doc


@pytest.mark.parametrize("position", ["before", "after"])
def test_every_sim_verb_prints_one_json_document(scratch_dir: Path, position: str, capsys) -> None:
    node = scratch_dir / "node"
    table = verbs(node)
    assert set(table) == set(sim.commands), "name every sim verb here"
    for lines in table.values():
        for line in lines:
            args = ["--format", "json", "sim", *line] if position == "before" else ["sim", *line, "--format", "json"]
            code, out, err = run(args, capsys)
            assert code == 0, err
            doc = one_document(out)
            assert "error" not in doc and doc["format_version"] == 1
    # what the documents say, for a few verbs
    code, out, _ = run(["--format", "json", "sim", "write", str(node), AUTO_ONLINE, "online"], capsys)
    assert one_document(out) == {"format_version": 1, "directory": str(node), "path": AUTO_ONLINE, "value": "online",
                                 "written": True}
    code, out, _ = run(["--format", "json", "sim", "presets"], capsys)
    assert "small" in [p["name"] for p in one_document(out)["presets"]]


def test_hot_add_document_counts_uevents_instead_of_listing_every_block(scratch_dir: Path, capsys) -> None:
    node = scratch_dir / "node"
    assert run(["sim", "create", str(node), "--preset", "small"], capsys)[0] == 0
    code, out, _ = run(["--format", "json", "sim", "hot-add", str(node), "--dax", "dax5.0", "--size", "4GiB",
                        "--node", "1", "--mode", "kmem"], capsys)
    doc = one_document(out)
    assert code == 0 and doc["dax"] == "dax5.0" and doc["size"] == 4 * 1024**3 and doc["mode"] == "kmem"
    counts = {(u["action"], u["subsystem"]): u["count"] for u in doc["uevents"]}
    assert counts[("add", "dax")] == 1 and counts[("add", "memory")] >= 1


def test_sim_failures_print_one_document_with_the_error(scratch_dir: Path, capsys) -> None:
    node = scratch_dir / "node"
    assert run(["sim", "create", str(node), "--preset", "small"], capsys)[0] == 0
    # the emulator refuses, as the kernel would: its errno, exit 1
    code, out, err = run(["sim", "write", str(node), AUTO_ONLINE, "bogus", "--format", "json"], capsys)
    doc = one_document(out)
    assert code == 1 and doc["written"] is False and doc["errno"] == "EINVAL"
    assert doc["error"]["exit_code"] == 1 and "EINVAL" in doc["error"]["message"] and "EINVAL" in err
    assert run(["sim", "kdamond", str(node), "--foreign"], capsys)[0] == 0
    code, out, _ = run(["--format", "json", "sim", "kdamond", str(node), "--foreign"], capsys)  # one is running
    doc = one_document(out)
    assert code == 1 and doc["errno"] == "EBUSY" and doc["error"]["exit_code"] == 1
    code, out, _ = run(["--format", "json", "sim", "fill", str(node), "--node", "9", "--free", "1GiB"], capsys)
    doc = one_document(out)  # no such node: the emulator's ENOENT
    assert code == 1 and doc["errno"] == "ENOENT" and doc["node"] == 9
    # not a simulated node; an existing directory for create; a bad size: usage errors (64)
    for args in (["write", str(scratch_dir), AUTO_ONLINE, "online"],
                 ["create", str(node), "--preset", "small"],
                 ["create", str(scratch_dir / "n2"), "--preset", "no-such-preset"],
                 ["hot-add", str(node), "--dax", "dax6.0", "--size", "lots", "--node", "1", "--mode", "devdax"],
                 ["fill", str(node), "--node", "0", "--free", "most"]):
        code, out, err = run(["sim", *args, "--format", "json"], capsys)
        doc = one_document(out)
        assert code == 64 and doc["error"]["exit_code"] == 64 and err.startswith("nodeagent: "), (args, out, err)


def test_text_mode_still_prints_lines(scratch_dir: Path, capsys) -> None:
    node = scratch_dir / "node"
    code, out, _ = run(["sim", "create", str(node), "--preset", "small"], capsys)
    assert code == 0 and out == f"simulated small node at {node}\n"
    code, out, _ = run(["sim", "write", str(node), AUTO_ONLINE, "offline"], capsys)
    assert code == 0 and out == f"{AUTO_ONLINE} = offline\n"
    code, out, err = run(["sim", "write", str(node), AUTO_ONLINE, "bogus"], capsys)
    assert code == 1 and out == "" and "EINVAL" in err
