"""Words and numbers an operator reads: one timestamp format, folded lists, short history lines, "did you mean"
for unknown keys, docs/simulator.md's preset table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nodeagent.profile import load_profile
from nodeagent.render.ops_text import LINE, _event_line, fold_names
from nodeagent.state.journal import iso
from nodeagent.util.errors import ProfileError
from nodeagent.util.timestamps import rfc3339

REPO = Path(__file__).resolve().parents[2]
RFC3339_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def test_one_timestamp_format() -> None:
    assert RFC3339_Z.match(rfc3339()) and iso(0) == "1970-01-01T00:00:00Z" == rfc3339(0)


def test_a_long_list_of_blocks_is_folded() -> None:
    names = ["dax1.0", *(f"memory{i}" for i in range(32, 545))]
    assert fold_names(names) == "dax1.0, 513 memory blocks: memory32–memory544"
    assert fold_names(["memory1", "memory2", "memory5"]) == "memory1, memory2, memory5"
    gaps = [f"memory{i}" for i in (*range(1, 4), *range(10, 12), 20, 30, 40)]
    assert fold_names(gaps) == "8 memory blocks: memory1–memory3, memory10–memory11, memory20 and 2 more runs"


def test_history_lines_stay_short_and_hotplug_lines_fold() -> None:
    changes = [{"target": f"damon.kdamond{i}", "before": "0 kdamond(s) " + "x" * 200, "after": "y" * 200,
                "status": "applied"} for i in range(12)]
    line = _event_line({"event": "apply", "profile": "p", "status": "converged", "time": rfc3339(0),
                        "changes": changes})
    assert len(line) <= LINE + len("1970-01-01T00:00:00Z  ") and "12 changed:" in line and "more" in line
    hot = _event_line({"event": "hotplug", "action": "add", "subsystem": "memory", "time": rfc3339(0),
                       "device": ",".join(f"memory{i}" for i in range(32, 545)), "result": "converged"})
    assert hot.endswith("hotplug add memory: 513 memory blocks: memory32–memory544: converged")


@pytest.mark.parametrize("key,where,suggestion", [
    ("numa_balancig", "kernel", "numa_balancing"), ("auto-online-blocks", "memory", "auto_online_blocks"),
    ("kernal", None, "kernel"), ("extend", None, "extends")])
def test_unknown_keys_get_a_did_you_mean(tmp_path: Path, key: str, where: str | None, suggestion: str) -> None:
    body = f"{where}:\n  {key}: 1\n" if where else f"{key}: x\n"
    p = tmp_path / "p.yaml"
    p.write_text("apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: t}\n" + body)
    with pytest.raises(ProfileError) as exc:
        load_profile(p)
    assert f"unknown key (did you mean {suggestion!r}?)" in exc.value.errors[0]


def test_the_readme_lists_every_preset() -> None:
    from nodeagent_sim import PRESETS

    readme = (REPO / "docs" / "simulator.md").read_text()
    table = readme[readme.index("| preset | node |"):]
    rows = {m.group(1) for m in re.finditer(r"^\| `([a-z0-9-]+)`", table, re.M)}
    missing = [name for name in PRESETS if name not in rows]
    assert missing == [], f"docs/simulator.md's preset table lacks {missing}"


def test_the_readme_exit_code_table_is_the_exit_code_enum() -> None:
    """One code per meaning (an IntEnum turns a repeated value into a silent alias), and docs/cli.md's table says what
    each one is: a caller scripting around nodeagent reads that table, not the source."""
    import signal

    from nodeagent.engine.signals import exit_code
    from nodeagent.util.errors import ExitCode

    assert len(ExitCode.__members__) == len(ExitCode), "two ExitCode names share one value"
    readme = (REPO / "docs" / "cli.md").read_text()
    section = readme[readme.index("## Exit codes"):]
    section = section[:section.index("\n# ")] if "\n# " in section else section
    codes = {int(c) for m in re.finditer(r"^\| ([0-9, ]+) \|", section, re.M) for c in m.group(1).split(",")}
    signalled = {exit_code(signal.SIGINT), exit_code(signal.SIGTERM)}
    assert codes == {int(c) for c in ExitCode} | signalled
