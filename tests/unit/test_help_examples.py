"""Each main command's --help ends its description with examples, and every example names a command that exists
(a hint or an example naming `nodeagent units PROFILE` would send a new user to "No such command")."""

from __future__ import annotations

import shlex

import click
import pytest
from click.testing import CliRunner

from nodeagent.cli.main import cli

MAIN = [["validate"], ["facts"], ["plan"], ["check"], ["apply"], ["drift"], ["status"], ["revert"], ["history"],
        ["units", "render"], ["profiles"]]


def _resolve(words: list[str]) -> click.Command | None:
    """The command ``nodeagent WORDS...`` runs (global options skipped), or None if it names none."""
    group: click.Command = cli
    it = iter(words)
    for w in it:
        if w in ("sudo", "nodeagent"):
            continue
        if w in ("--simulate", "--root", "--format", "--lock-timeout"):
            next(it, None)
            continue
        if not isinstance(group, click.Group):
            return group
        sub = group.get_command(click.Context(group), w)
        if sub is None:
            return None
        group = sub
    return group


@pytest.mark.parametrize("command", MAIN, ids=" ".join)
def test_help_has_examples_of_commands_that_exist(command: list[str]) -> None:
    res = CliRunner().invoke(cli, [*command, "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "Examples:" in res.output
    examples = res.output.split("Examples:")[1].split("\n\n")[0].strip().splitlines()
    assert examples
    for line in examples:
        words = shlex.split(line.split("#")[0].replace(">", " "))
        target = _resolve(words)
        assert target is not None and not isinstance(target, click.Group), line
