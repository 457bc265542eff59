"""The serving engines' option table: release numbers, gates, and the ``--version`` a user gives."""

from __future__ import annotations

import pytest

from nodeagent.cli.main import main
from nodeagent.serving import versions as V
from nodeagent.util.errors import UsageError


@pytest.mark.parametrize(("text", "want"), [
    ("0.18", (0, 18)), ("0.18.0", (0, 18)), ("v0.5.12", (0, 5, 12)), ("0.5.12.post2", (0, 5, 12)),
    ("0.4.5rc1", (0, 4, 5)), ("1", (1,)), ("0.11.1", (0, 11, 1))])
def test_release_numbers(text: str, want: tuple[int, ...]) -> None:
    assert V.parse(text) == want


@pytest.mark.parametrize("text", ["", "latest", "0..1", "x0.18"])
def test_what_is_not_a_release_number(text: str) -> None:
    with pytest.raises(ValueError, match="not a release number"):
        V.parse(text)


def test_gates_follow_the_first_release() -> None:
    assert not V.has("vllm", V.parse("0.19.1"), "--numa-bind") and V.has("vllm", V.parse("0.20"), "--numa-bind")
    assert not V.has("vllm", V.parse("0.13"), "OffloadingConnector cpu_bytes_to_use")
    assert V.has("vllm", V.parse("0.14.1"), "OffloadingConnector cpu_bytes_to_use")
    assert not V.has("sglang", V.parse("0.4.10"), "--hicache-mem-layout")
    assert not V.has("lmcache", V.parse("99"), "--l1-numa-mode")  # an open pull request: in no release


def test_every_row_names_its_source_and_every_pinned_release_is_known() -> None:
    for o in V.OPTIONS:
        assert o.engine in V.PINNED and len(o.source) > 20, o
    for engine, pinned in V.PINNED.items():
        assert [V.parse(x) for x in pinned] == sorted(V.parse(x) for x in pinned), engine
        assert V.resolve(engine, None) == V.parse(pinned[-1])


def test_a_release_older_than_the_oldest_pinned_one_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"--version 0.9: render serving knows vllm from 0.12 on"):
        V.resolve("vllm", "0.9")
    with pytest.raises(UsageError, match="not a release number"):
        V.resolve("sglang", "newest")


def test_the_cli_says_the_defaults_and_refuses_a_bad_version(capsys) -> None:
    assert main(["render", "serving", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    for engine, label in (("vllm", "vLLM"), ("sglang", "SGLang"), ("lmcache", "LMCache")):
        assert f"{label} {V.default(engine)}" in help_text
    assert main(["render", "serving", "--engine", "vllm", "--version", "0.9"]) == 64
    assert "give 0.12 or later" in capsys.readouterr().err
