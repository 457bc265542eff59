"""The machine seam finds plugins by reading the distributions' entry_points.txt itself (importing
importlib.metadata would cost every command on a simulated root more than the command's own work): it finds what
importlib.metadata finds, in this environment and in a made-up one."""

from __future__ import annotations

import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from nodeagent.host import machine


@pytest.mark.parametrize("group", [machine.GROUP, machine.COMMANDS, "console_scripts", "pytest11", "no.such.group"])
def test_the_installed_entry_points_are_importlib_metadata_s(group: str) -> None:
    expected = {ep.name: ep.value for ep in entry_points(group=group)}
    assert {name: ep.value for name, ep in machine._entry_points(group).items()} == expected


def test_a_made_up_path_reads_as_importlib_metadata_reads_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    for d, dist, text in [
        (first, "alpha-1.0.dist-info", "# a comment\n[demo.group]\none = json:dumps\n"
                                       "two = os.path : join [extra]\n\n[other]\nthree = os:sep\n"),
        (first, "gamma_pkg-2.dist-info", None),  # no entry points: still the first distribution of its name
        (second, "alpha-2.0.dist-info", "[demo.group]\none = json:loads\n"),  # shadowed by the first alpha
        (second, "Gamma.Pkg-3.dist-info", "[demo.group]\nfour = os\n"),  # the same name, normalized
        (second, "beta.egg-info", "[demo.group]\nfive = json.decoder:JSONDecoder\n"),
    ]:
        (d / dist).mkdir(parents=True)
        (d / dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist.split('-')[0]}\nVersion: 1\n")
        if text is not None:
            (d / dist / "entry_points.txt").write_text(text)
    monkeypatch.setattr(sys, "path", [str(first), str(tmp_path / "missing"), str(second)])
    expected = {ep.name: ep for ep in entry_points(group="demo.group")}
    found = machine._entry_points("demo.group")
    assert {n: ep.value for n, ep in found.items()} == {n: ep.value for n, ep in expected.items()}
    assert sorted(found) == ["five", "one", "two"]
    for name, ep in found.items():
        assert ep.load() is expected[name].load()
