"""The write allow-list (host/fs.py) is one table: every path a resource kind declares it writes is on it, and
nothing else is — besides nodeagent's own files. Paths are drawn from each regular expression (hypothesis), so a
pattern that grows past what its kind writes, or a kind that writes past the table, shows here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.host import open_host
from nodeagent.host.fs import _WRITE_ALLOW_RX, WRITE_ALLOW, WRITE_ALLOW_MOUNTED, literal_prefix, write_allowed
from nodeagent.k8s.labels import FEATURES_FILE
from nodeagent.kinds.registry import RESOURCES
from nodeagent.render.systemd import RULES_DIR, UNIT_DIR
from nodeagent.state import STATE_DIR

#: What nodeagent writes that is not a resource kind's: its state directory, its own units and udev rule
#: (`units install`), the NFD feature file (`labels --write`).
OWN_FILES = (rf"{re.escape(STATE_DIR)}/.*", rf"{re.escape(UNIT_DIR)}/nodeagent-[a-z-]+@?\.(service|timer)",
             rf"{re.escape(RULES_DIR)}/[0-9]{{2}}-nodeagent\.rules", re.escape(FEATURES_FILE))

KIND_WRITES = sorted({p for r in RESOURCES for p in getattr(r, "writes", ())})
DECLARED = [re.compile(p) for p in (*KIND_WRITES, *OWN_FILES)]
#: Paths only (no control characters, no "//" games: the rooted fs refuses those before the allow-list); ":" is in
#: ACPI device names (the CXL root, ACPI0017:00).
PATH_CHARS = st.characters(codec="ascii", categories=("L", "N"), include_characters="/._-@:")  # ACPI0017:00


def sample(pattern: str) -> st.SearchStrategy[str]:
    return st.from_regex(pattern, fullmatch=True, alphabet=PATH_CHARS)


def allowed(path: str) -> bool:
    """The compiled table's answer, which the rooted fs's own check (it compiles only the patterns that start as
    the path does) gives too."""
    answer = any(p.fullmatch(path) for p in WRITE_ALLOW)
    assert write_allowed(path) == answer, path
    return answer


def test_each_pattern_s_literal_start_is_what_the_regex_parser_reads() -> None:
    """The write check skips a pattern whose literal start the path lacks: that start must be text every match
    begins with, as Python's own regex parser reads the pattern (its leading literal characters)."""
    from re import _parser  # type: ignore[attr-defined]

    for rx in _WRITE_ALLOW_RX:
        lead = ""
        for op, arg in _parser.parse(rx):
            if op is not _parser.LITERAL:
                break
            lead += chr(arg)
        assert lead.startswith(literal_prefix(rx)), rx
        assert literal_prefix(rx), f"{rx}: no literal start, every write would compile it"
    for rx, start in [("a|b", ""), ("(a|b)c", ""), ("x(a|b)", "x"), ("ab?c", "a"), ("ab*", "a"), ("a{2}", ""),
                      (r"a\.b", "a"), ("[(]a|b", ""), ("/x/y", "/x/y")]:
        assert literal_prefix(rx) == start, rx


@pytest.mark.parametrize("pattern", KIND_WRITES)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_every_path_a_kind_writes_is_on_the_list(pattern: str, data: st.DataObject) -> None:
    path = data.draw(sample(pattern))
    assert allowed(path), f"{path} (declared by a kind as {pattern}) is not in host/fs.py's WRITE_ALLOW"


@pytest.mark.parametrize("pattern", [p.pattern for p in WRITE_ALLOW])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_nothing_else_is_on_the_list(pattern: str, data: st.DataObject) -> None:
    path = data.draw(sample(pattern))
    assert any(d.fullmatch(path) for d in DECLARED), (
        f"WRITE_ALLOW's {pattern} allows {path}, which no resource kind declares it writes (Resource.writes) "
        "and which is none of nodeagent's own files")


def test_every_kind_declares_and_the_mounted_entries_are_the_kinds_too() -> None:
    undeclared = [r.kind for r in RESOURCES if not isinstance(getattr(r, "writes", None), tuple)]
    assert not undeclared, f"resource kinds without Resource.writes (the paths their apply writes): {undeclared}"
    declared = {(p, fs) for r in RESOURCES for p, fs in getattr(r, "writes_mounted", ())}
    assert {(p.pattern, fs) for p, fs in WRITE_ALLOW_MOUNTED} == declared


@pytest.mark.parametrize("preset", ["h100-cxl", "qemu-3node", "workstation", "qemu-cxl"])  # qemu-cxl: bare memdevs
def test_what_apply_and_revert_write_is_what_the_kinds_declare(make_node, capsys, preset: str) -> None:
    """Every write of a real apply, a drift repair and a full revert is declared by a kind (or is state)."""
    from nodeagent_sim import SimKernel

    from nodeagent.checks import parse_skips
    from nodeagent.engine.core import Engine
    from nodeagent.profile import load_profile

    root: Path = make_node(preset)
    host = open_host(root)
    eng = Engine(host)
    loaded = load_profile(str(Path(__file__).resolve().parents[2] / "profiles" / "cxl-inference.yaml"))
    skip = parse_skips(("all",))
    assert eng.apply(loaded, allow_disruptive=True, skip_checks=skip).changed
    SimKernel(root).write("/proc/sys/kernel/numa_balancing", "0")
    assert eng.apply(loaded, allow_disruptive=True, skip_checks=skip).ok
    assert eng.revert(allow_disruptive=True).ok
    written = {w.path for w in host.fs.write_log}
    assert any(p.startswith("/proc/sys/") for p in written)
    if preset == "qemu-cxl":  # its regions were made and torn down again
        assert {p.rsplit("/", 1)[1] for p in written} >= {"create_ram_region", "commit", "delete_region", "bind"}
    kinds = [re.compile(p) for p in KIND_WRITES]
    for path in written:
        assert any(d.fullmatch(path) for d in kinds) or path.startswith(f"{STATE_DIR}/"), path


@pytest.mark.parametrize("name", ["lock", "journal.jsonl", ".reserve", "last-applied.json", "0/lock",
                                  "0/contexts/0/schemes/0/x", "0/contexts/0/schemes/0/quotas/goals/0/../../ms"])
def test_the_kdamonds_directory_takes_only_damon_s_own_attribute_names(name: str) -> None:
    """The allow-list once held ``kdamonds/.*``: a state directory linked into kdamonds/ had its lock, journal
    and state written there. Only the attribute files DAMON lays out are on it now."""
    assert not allowed(f"/sys/kernel/mm/damon/admin/kdamonds/{name}")


@pytest.mark.parametrize("name", ["nr_kdamonds", "3/state", "0/contexts/nr_contexts", "0/contexts/0/operations",
                                  "0/contexts/0/monitoring_attrs/intervals/intervals_goal/access_bp",
                                  "1/contexts/0/targets/0/regions/12/start", "0/contexts/0/schemes/2/target_nid",
                                  "0/contexts/0/schemes/0/quotas/goals/1/target_metric",
                                  "0/contexts/0/schemes/0/core_filters/0/type",
                                  "0/contexts/0/schemes/0/dests/nr_dests"])
def test_damon_s_attribute_files_are_on_the_list(name: str) -> None:
    assert allowed(f"/sys/kernel/mm/damon/admin/kdamonds/{name}")
