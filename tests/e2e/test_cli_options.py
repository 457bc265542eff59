"""Global options before or after the command; with --format json, stdout is one JSON document on every path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel

from nodeagent.cli.main import cli

from .cli_helpers import run

PROFILE = str(Path(__file__).resolve().parents[2] / "profiles" / "cxl-inference.yaml")


@pytest.mark.parametrize("args", [
    ["plan", PROFILE, "--root", "{root}"],
    ["plan", "--root", "{root}", PROFILE],
    ["--root", "{root}", "plan", PROFILE],
    ["plan", PROFILE, "--root={root}", "--lock-timeout", "5"],
])
def test_root_before_or_after_the_command(args: list[str], make_node, capsys) -> None:
    root = make_node("small")
    code, out, err = run([a.format(root=root) for a in args], capsys)
    assert (code, err) == (0, "")
    assert out.startswith("Plan for profile cxl-inference")


def test_simulate_and_format_after_the_command(capsys) -> None:
    code, out, _ = run(["facts", "--format", "json", "--simulate", "small"], capsys)
    assert code == 0 and json.loads(out)["hostname"]
    code, out, _ = run(["validate", PROFILE, "--format=json"], capsys)
    assert code == 0 and json.loads(out)["profile"] == "cxl-inference"


def test_a_value_spelled_like_an_option_is_the_options_value(make_node, capsys) -> None:
    """`--format` is parsed, not searched for: a profile named `json` is a profile, and `--` ends options."""
    code, out, err = run(["validate", "json"], capsys)
    assert code == 65 and out == "" and "json: no such file" in err
    code, out, err = run(["validate", "--", "--format"], capsys)
    assert code == 65 and out == "" and "--format: no such file" in err


def test_the_last_global_option_wins_and_conflicts_are_still_refused(make_node, capsys) -> None:
    root = make_node("small")
    code, out, _ = run(["--format", "text", "facts", "--root", str(root), "--format", "json"], capsys)
    assert code == 0 and json.loads(out)
    code, out, err = run(["plan", PROFILE, "--simulate", "small", "--root", str(root)], capsys)
    assert code == 64 and "mutually exclusive" in err


def _one_document(out: str) -> dict:
    doc = json.loads(out)  # exactly one: json.loads refuses trailing data
    assert isinstance(doc, dict)
    return doc


@pytest.mark.parametrize("args,code", [
    (["plan", "--bogus", PROFILE], 64),
    (["nosuch"], 64),
    (["history", "--limit", "0"], 64),
    (["facts", "--lock-timeout", "soon"], 64),
    (["history", "--event", "lunch"], 64),
    (["validate", "/nonexistent/p.yaml"], 65),
    (["facts", "--root", "/nonexistent"], 64),
    (["--format", "json", "facts", "--simulate", "no-such-preset"], 64),
])
def test_usage_and_input_errors_print_one_json_document(args: list[str], code: int, capsys) -> None:
    got, out, err = run([*args, "--format", "json"], capsys)
    assert got == code
    doc = _one_document(out)
    assert doc["error"]["exit_code"] == code and doc["error"]["message"]
    assert err.startswith("nodeagent: ")


def test_a_blocked_apply_prints_one_document_with_the_error(make_node, capsys) -> None:
    root = make_node("h100-cxl", kernel="5.10.0-old")
    before = SimKernel(root).journal()
    code, out, err = run(["apply", "--yes", PROFILE, "--root", str(root), "--format", "json"], capsys)
    assert code == 1
    doc = _one_document(out)
    assert doc["status"] == "failed" and doc["plan"]["problems"]
    assert doc["error"]["exit_code"] == 1 and "nothing was applied" in doc["error"]["message"]
    assert "nothing was applied" in err
    assert SimKernel(root).journal() == before


def test_failed_checks_print_one_document(make_node, scratch_dir: Path, capsys) -> None:
    root = make_node("small")
    p = scratch_dir / "p.yaml"
    p.write_text("apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: t}\n"
                 "checks: {cpu: {require_flags: [no_such_flag]}}\n")
    for command in (["check"], ["apply", "--yes"]):
        code, out, _ = run([*command, str(p), "--root", str(root), "--format", "json"], capsys)
        assert code == 4
        doc = _one_document(out)
        assert doc["error"]["exit_code"] == 4 and "checks failed: cpu" in doc["error"]["message"]


def test_answers_are_not_errors(make_node, capsys) -> None:
    """Exit 2 (changes pending) and 3 (drift) are what was asked: the document carries no error."""
    root = make_node("small")
    code, out, _ = run(["plan", PROFILE, "--detailed-exitcode", "--root", str(root), "--format", "json"], capsys)
    assert code == 2 and "error" not in _one_document(out)


@pytest.mark.parametrize("shell,marker", [("bash", "complete -o"), ("zsh", "compdef"), ("fish", "complete ")])
def test_completion_prints_clicks_script(shell: str, marker: str, capsys) -> None:
    code, out, _ = run(["completion", shell], capsys)
    assert code == 0 and marker in out and "_NODEAGENT_COMPLETE" in out


def test_completion_completes_commands_and_presets() -> None:
    env = {**os.environ, "_NODEAGENT_COMPLETE": "bash_complete", "COMP_WORDS": "nodeagent pl", "COMP_CWORD": "1"}
    exe = [sys.executable, "-c", "import sys; from nodeagent.cli.main import main; sys.exit(main())"]
    out = subprocess.run(exe, env=env, capture_output=True, text=True, check=True).stdout
    assert "plain,plan" in out.splitlines()
    env.update(COMP_WORDS="nodeagent apply --simulate sm", COMP_CWORD="3")
    out = subprocess.run(exe, env=env, capture_output=True, text=True, check=True).stdout
    assert "plain,small" in out.splitlines()
    assert cli.name == "cli"  # the group the completion script drives


def test_facts_save_says_where_and_keeps_stdout_one_document(make_node, scratch_dir: Path, capsys) -> None:
    root = make_node("small")
    target = scratch_dir / "node.json"
    code, out, err = run(["facts", "--save", str(target), "--root", str(root), "--format", "json"], capsys)
    assert code == 0 and json.loads(out)["hostname"] and target.is_file()
    assert f"saved the facts to {target}" in err
