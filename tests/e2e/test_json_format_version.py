"""Every command's ``--format json`` document is an object whose first key is ``format_version``.

The table names every command of the CLI (a new command cannot skip it): each runs with ``--format json`` on a
simulated node and its one document must carry ``format_version``. The long-running loops print a document only
when they end with an error, so they run into one; the four commands that print a file in its own format
(JSON Schema, a shell script, Prometheus rules, a Grafana dashboard) are listed in ``OWN_FORMAT`` and checked to
be that format. docs/cli.md, "JSON output", states the contract.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from nodeagent.cli.main import FORMAT_VERSION, cli

from .cli_helpers import run
from .test_cli_sim_output import verbs

REPO = Path(__file__).resolve().parents[2]
PROFILE = str(REPO / "profiles" / "cxl-inference.yaml")

#: Command path → argv after ``--root ROOT --format json``, in the order they run on one simulated node
#: (``{tmp}``: a scratch directory). The loops run until SIGTERM and print a document only when they stop on an
#: error, so they are given one.
COMMANDS: dict[str, list[str]] = {
    "validate": ["validate", PROFILE],
    "facts": ["facts"],
    "plan": ["plan", PROFILE],
    "check": ["check", PROFILE],
    "apply": ["apply", "--yes", PROFILE],
    "drift": ["drift"],
    "history": ["history"],
    "status": ["status"],
    "labels": ["labels"],
    "profiles list": ["profiles", "list"],
    "profiles show": ["profiles", "show", "cxl-inference"],
    "units render": ["units", "render"],
    "units install": ["units", "install"],
    "metrics show": ["metrics", "show"],
    "render serving": ["render", "serving", "--engine", "vllm"],
    "verify-serving": ["verify-serving", "--engine", "vllm", "--pid", "99999"],  # tests/sim/test_serving: found
    "revert": ["revert", "--yes"],
    "run": ["run", "--interval", "0"],
    "watch": ["watch", "{tmp}/missing.yaml"],
    "guard": ["guard", "{tmp}/missing.yaml"],
    "metrics serve": ["metrics", "serve", "--listen", "localhost"],
}

#: Commands whose output is a file in another format, whatever --format says.
OWN_FORMAT = {"schema": "JSON Schema", "completion": "shell script", "metrics rules": "Prometheus rules (YAML)",
              "metrics dashboard": "Grafana dashboard (JSON)"}


def leaves(group: click.Group, ctx: click.Context, prefix: str = "") -> list[str]:
    out = []
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if isinstance(cmd, click.Group):
            out += leaves(cmd, ctx, f"{prefix}{name} ")
        else:
            out.append(prefix + name)
    return out


def test_the_table_names_every_command() -> None:
    every = set(leaves(cli, click.Context(cli)))
    sim = {f"sim {v}" for v in verbs(Path("/x"))}  # test_cli_sim_output runs each with format_version
    assert every == set(COMMANDS) | set(OWN_FORMAT) | sim


def _document(out: str) -> dict:
    doc = json.loads(out)  # exactly one document
    assert isinstance(doc, dict), out
    assert next(iter(doc)) == "format_version" and doc["format_version"] == FORMAT_VERSION, out[:200]
    return doc


def test_every_json_document_carries_format_version(make_node, tmp_path: Path, capsys) -> None:
    root = make_node("small")
    wrong = {}
    for name, argv in COMMANDS.items():
        args = ["--root", str(root), "--format", "json", *(a.format(tmp=tmp_path) for a in argv)]
        code, out, err = run(args, capsys)
        try:
            doc = _document(out)
        except (AssertionError, ValueError) as exc:
            wrong[name] = f"exit {code}: {exc}; stderr: {err[-300:]}"
            continue
        if ("error" in doc) != (code not in (0, 2, 3)):
            wrong[name] = f"exit {code} but the document's error is {doc.get('error')}"
        elif name in ("apply", "plan", "facts", "status", "history", "revert") and code != 0:
            wrong[name] = f"exit {code}: {doc.get('error')}"
    assert not wrong, wrong


def test_errors_before_a_command_runs_carry_it_too(capsys) -> None:
    got, out, _ = run(["--format", "json", "nosuch"], capsys)
    assert got == 64 and _document(out)["error"]["exit_code"] == 64


def test_lists_and_maps_are_wrapped_in_an_object(make_node, capsys) -> None:
    """history (a list), units render (path → text) and metrics show (a list) are under a key of their own."""
    root = make_node("h100-cxl")
    base = ["--root", str(root), "--format", "json"]
    assert run([*base, "apply", "--yes", PROFILE], capsys)[0] == 0
    events = _document(run([*base, "history"], capsys)[1])["events"]
    assert events and events[-1]["event"] == "apply"
    files = _document(run([*base, "units", "render", PROFILE], capsys)[1])["files"]
    assert "/etc/systemd/system/nodeagent-apply.service" in files
    families = _document(run([*base, "metrics", "show"], capsys)[1])["families"]
    assert families and all({"name", "type", "samples"} <= f.keys() for f in families)


def test_own_format_commands_print_their_format(capsys) -> None:
    got, out, _ = run(["--format", "json", "schema"], capsys)
    assert got == 0 and json.loads(out)["$schema"]
    got, out, _ = run(["--format", "json", "metrics", "dashboard"], capsys)
    assert got == 0 and json.loads(out)["panels"]
    got, out, _ = run(["metrics", "rules"], capsys)
    assert got == 0 and "groups:" in out
    got, out, _ = run(["completion", "bash"], capsys)
    assert got == 0 and "_NODEAGENT_COMPLETE" in out
