"""Bounded work on any input: special files, sizes by reading, fan-out, nesting, numbers' magnitude, lock waits.

Each refusal must come quickly, as one message naming the file (and line) with a fix — never a hang, an
internal error or a traceback.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from nodeagent.cli.main import main
from nodeagent.profile import load_profile
from nodeagent.profile.load import MAX_DEPTH, MAX_FILES
from nodeagent.util.errors import ProfileError

HEAD = "apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: x}\n"


@pytest.fixture(autouse=True)
def no_hang(alarm: None) -> None:
    """Every test here fails instead of hanging when an input blocks."""


def errors(path: Path | str) -> str:
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    return exc.value.render()


def special_inputs(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.yaml"
    zero.symlink_to("/dev/zero")
    d = tmp_path / "dir.yaml"
    d.mkdir()
    return {"a FIFO": fifo, "a character device": zero, "a directory": d}


@pytest.mark.parametrize("kind", ["a FIFO", "a character device", "a directory"])
def test_only_regular_files_are_profiles(tmp_path: Path, kind: str) -> None:
    path = special_inputs(tmp_path)[kind]
    msg = errors(path)
    assert kind.split()[-1] in msg and "zero.yaml" in msg or path.name in msg
    assert "hint:" in msg


@pytest.mark.parametrize("kind", ["a FIFO", "a character device"])
def test_only_regular_files_are_extended(tmp_path: Path, kind: str) -> None:
    special = special_inputs(tmp_path)[kind]
    p = tmp_path / "p.yaml"
    p.write_text(HEAD + f"extends: {special.name}\n")
    assert special.name in errors(p)


@pytest.mark.parametrize("kind", ["a FIFO", "a character device", "a directory"])
def test_only_regular_files_are_facts(tmp_path: Path, kind: str, capsys) -> None:
    path = special_inputs(tmp_path)[kind]
    if kind == "a directory":  # a directory of facts files is allowed: one without any is a usage error
        assert main(["plan", "--facts", str(path), "profiles/base.yaml"]) == 64
        return
    assert main(["plan", "--facts", str(path), "profiles/base.yaml"]) == 65
    err = capsys.readouterr().err
    assert str(path) in err and "not a regular file" in err and "Traceback" not in err


def test_size_is_bounded_by_reading_not_by_st_size(tmp_path: Path) -> None:
    """/dev/zero reports st_size 0: a check of st_size would read it until memory runs out."""
    assert "character device" in errors("/dev/zero")
    big = tmp_path / "big.yaml"
    big.write_text(HEAD + "# " + "x" * (2 * 1024 * 1024) + "\n")
    assert "too large" in errors(big)


def test_extends_fan_out_is_bounded(tmp_path: Path) -> None:
    """Six small files, each listing the next one 20 times: 20^6 loads unbounded, refused after MAX_FILES."""
    for i in range(6):
        body = "extends: [" + ", ".join([f"f{i + 1}.yaml"] * 20) + "]\n" if i < 5 else "kernel: {numa_balancing: 1}\n"
        (tmp_path / f"f{i}.yaml").write_text((HEAD if i == 0 else "") + body)
    t = time.monotonic()
    msg = errors(tmp_path / "f0.yaml")
    assert time.monotonic() - t < 5
    assert f"more than {MAX_FILES} files" in msg and "f" in msg.split(":")[0] and "hint:" in msg


def test_a_diamond_of_bases_still_loads(tmp_path: Path) -> None:
    (tmp_path / "common.yaml").write_text("kernel: {numa_balancing: 1}\n")
    (tmp_path / "a.yaml").write_text("extends: common.yaml\n")
    (tmp_path / "b.yaml").write_text("extends: common.yaml\n")
    (tmp_path / "p.yaml").write_text(HEAD + "extends: [a.yaml, b.yaml]\n")
    assert load_profile(tmp_path / "p.yaml").profile.kernel.numa_balancing == 1


@pytest.mark.parametrize("doc", [
    "kernel: " + "[" * 50_000 + "]" * 50_000,
    "kernel: " + "{a: " * 5_000 + "1" + "}" * 5_000,
    "kernel:\n" + "".join(f"{' ' * (i + 1)}k{i}:\n" for i in range(MAX_DEPTH + 5)) + " " * (MAX_DEPTH + 6) + "x: 1\n",
    "kernel:\n" + "- " * 5_000 + "x\n",
], ids=["flow-lists", "flow-maps", "block-maps", "block-lists"])
def test_deep_nesting_is_refused_before_the_composer_recurses(tmp_path: Path, doc: str) -> None:
    p = tmp_path / "deep.yaml"
    p.write_text(HEAD + doc + "\n")
    msg = errors(p)
    assert f"nested more than {MAX_DEPTH} levels deep" in msg and "deep.yaml:" in msg and "hint:" in msg


@pytest.mark.parametrize("value", ["9" * 400, "'" + "1" * 400 + "GiB'", "1e400", ".inf", "-.inf", ".nan",
                                   "18446744073709551616", "'" + "7" * 5000 + "'"])
def test_numbers_magnitude_is_bounded_with_file_and_line(tmp_path: Path, value: str) -> None:
    p = tmp_path / "p.yaml"
    p.write_text(HEAD + f"memory:\n  online:\n    - name: x\n      match: {{min_size: {value}}}\n")
    msg = errors(p)
    assert "p.yaml:7:" in msg and ("too large" in msg or "not a number" in msg) and "hint:" in msg


def test_the_largest_u64_is_still_a_number(tmp_path: Path) -> None:
    from nodeagent.profile.load import parse

    assert parse(HEAD + "n: 18446744073709551615\n", "p.yaml").value["n"].value == 2**64 - 1


@pytest.mark.parametrize("timeout", ["nan", "inf", "-1", "-0.1"])
def test_lock_timeout_is_finite_and_not_negative(make_node, capsys, timeout: str) -> None:
    root = make_node("workstation")
    code = main(["--root", str(root), "--lock-timeout", timeout, "apply", "--yes", "profiles/base.yaml"])
    out = capsys.readouterr()
    assert code == 64, out.out + out.err
    assert "--lock-timeout" in out.err and "finite number of seconds" in out.err and "Traceback" not in out.err


@pytest.mark.parametrize("timeout", ["nan", "inf", "-inf", "-1", "soon"])
@pytest.mark.parametrize("where", ["before", "after"])
@pytest.mark.parametrize("command", [["plan", "profiles/base.yaml"], ["validate", "profiles/base.yaml"], ["facts"]])
def test_lock_timeout_is_refused_while_parsing_by_commands_that_take_no_lock(
        capsys, timeout: str, where: str, command: list[str]) -> None:
    option = ["--lock-timeout", timeout]
    args = [*option, "--simulate", "small", *command] if where == "before" else \
        ["--simulate", "small", *command, *option]
    assert main(args) == 64
    out = capsys.readouterr()
    assert out.out == "" and f"Invalid value for '--lock-timeout': '{timeout}'" in out.err, out.out + out.err
    assert main([*args, "--format", "json"]) == 64
    doc = json.loads(capsys.readouterr().out)  # one document: json.loads refuses trailing data
    assert doc["error"]["exit_code"] == 64 and "--lock-timeout" in doc["error"]["message"]


@pytest.mark.parametrize("timeout", ["0", "0.5", "60"])
def test_finite_lock_timeouts_are_taken(make_node, timeout: str, capsys) -> None:
    root = make_node("workstation")
    assert main(["--root", str(root), "apply", "--yes", "profiles/base.yaml", "--lock-timeout", timeout]) == 0


def test_facts_file_errors_are_json_documents_too(tmp_path: Path, capsys) -> None:
    fifo = tmp_path / "f.json"
    os.mkfifo(fifo)
    assert main(["--format", "json", "plan", "--facts", str(fifo), "profiles/base.yaml"]) == 65
    assert json.loads(capsys.readouterr().out)["error"]["exit_code"] == 65
