"""Sample output in README.md and docs/ is the real command's output, so it cannot go stale.

A sample is a fenced block right after a line ``<!-- output of: nodeagent ARGS -->``; ``<!-- run: nodeagent ARGS
-->`` lines run a command first without showing it (an apply before a converged plan). The commands of one file
run in order, from the repository root, against their own simulated nodes. After a deliberate change of the
output, ``NODEAGENT_UPDATE_SAMPLES=1 pytest tests/e2e/test_doc_samples.py`` writes each command's output into its
block (then read the diff: it is what a reader will see).
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

from .cli_helpers import run

REPO = Path(__file__).resolve().parents[2]
MARK = re.compile(r"^<!-- (run|output of): nodeagent (.*?) -->\n", re.M)
FILES = [p for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))] if MARK.search(p.read_text())]


def _steps(text: str) -> list[tuple[str, list[str], str | None]]:
    out = []
    for m in MARK.finditer(text):
        shown = None
        if m.group(1) == "output of":
            block = re.match(r"```[a-z]*\n(.*?)```\n", text[m.end():], re.S)
            assert block, f"no fenced block after {m.group(0)!r}"
            shown = block.group(1)
        out.append((m.group(1), shlex.split(m.group(2)), shown))
    return out


def test_the_readme_and_cli_docs_have_samples() -> None:
    assert {p.name for p in FILES} >= {"README.md", "cli.md"}


def _on_nodes(args: list[str], nodes: dict[str, str], make_node) -> list[str]:
    """``--simulate PRESET`` as the reader runs it, on the test session's copy of that preset (laid out once per
    session instead of once per sample: the same node, the same output)."""
    out = list(args)
    if "--simulate" in out:
        i = out.index("--simulate")
        preset = out[i + 1]
        if preset not in nodes:
            nodes[preset] = str(make_node(preset))
        out[i:i + 2] = ["--root", nodes[preset]]
    return out


@pytest.mark.parametrize("doc", FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_sample_is_the_command_s_output(doc: Path, make_node, monkeypatch, capsys) -> None:
    monkeypatch.chdir(REPO)
    nodes: dict[str, str] = {}
    text = doc.read_text()
    updated = text
    for _what, args, shown in _steps(text):
        code, out, err = run(_on_nodes(args, nodes, make_node), capsys)
        assert code in (0, 2, 3), f"nodeagent {shlex.join(args)}: exit {code}\n{err}"
        if shown is not None and out != shown and os.environ.get("NODEAGENT_UPDATE_SAMPLES"):
            mark = f"<!-- output of: nodeagent {shlex.join(args)} -->\n"
            at = updated.find(mark)
            if at < 0:  # written with other quoting: find the block by its old text
                at = updated.find(shown) - len(mark) - 4
            start = updated.index(shown, at)
            updated = updated[:start] + out + updated[start + len(shown):]
        elif shown is not None:
            assert out == shown, f"{doc.name}: the sample of `nodeagent {shlex.join(args)}` is stale"
    if updated != text:
        doc.write_text(updated)
