"""Capabilities from markers in real kernel trees (tests/data/damon: copies of the reference captures of a 6.18
kernel's and a 6.12 guest's DAMON sysfs), then from the release — never from probe writes."""

from __future__ import annotations

from pathlib import Path

from nodeagent.facts.damon_caps import derive, normalize, since_of

DATA = Path(__file__).resolve().parents[1] / "data" / "damon"


def tree(name: str) -> tuple[set[str], set[str]]:
    seen, dirs = set(), set()
    for line in (DATA / name).read_text().splitlines():
        path, kind = line.split()[:2]
        if not path.startswith("admin/kdamonds/0"):
            continue
        rel = path.removeprefix("admin/kdamonds/0").lstrip("/")
        (dirs if kind == "d" else seen).add(normalize(rel))
    return seen, dirs


def test_normalize() -> None:
    assert normalize("contexts/0/schemes/12/ops_filters/3/allow") == "contexts/*/schemes/*/ops_filters/*/allow"


def test_a_618_tree_proves_its_features() -> None:
    seen, dirs = tree("tree-6.18.txt")
    caps = derive((6, 18), seen, dirs, ["paddr"])
    f = caps["features"]
    for name in ("migrate", "dests", "core_ops_filters", "filter_allow", "intervals_goal", "refresh_ms",
                 "addr_unit", "apply_interval", "quota_goals", "filter_size"):
        assert f[name] == {"present": True, "since": since_of(name), "source": "tree"}, name
    assert f["goal_nid"]["source"] == "version" and f["goal_nid"]["present"]  # no goal dir to look into
    assert not f["goal_path"]["present"]  # 6.19
    assert caps["operations"] == ["paddr"] and caps["operations_source"] == "tree"
    assert "migrate_cold" in caps["actions"] and "unmapped" in caps["filter_types"]
    assert "node_mem_free_bp" in caps["goal_metrics"] and "update_tuned_intervals" in caps["commands"]


def test_a_612_tree_shows_exclusion_only_filters() -> None:
    seen, dirs = tree("tree-6.12.txt")
    caps = derive((6, 12), seen, dirs, None)
    f = caps["features"]
    assert f["migrate"]["present"] and f["migrate"]["source"] == "tree"
    assert f["filter_allow"] == {"present": False, "since": "6.14", "source": "tree"}
    assert not f["core_ops_filters"]["present"] and not f["dests"]["present"]
    assert "young" in caps["filter_types"] and "unmapped" not in caps["filter_types"]
    assert caps["operations"] == ["vaddr", "paddr", "fvaddr"] and caps["operations_source"] == "version"


def test_markers_beat_the_release_both_ways() -> None:
    # A distribution kernel that says 5.14 but carries target_nid (a backport) gets the migrate actions...
    seen = {"contexts/*/schemes/*/target_nid", "contexts/*/schemes/*/filters/nr_filters"}
    dirs = {"", "contexts/*", "contexts/*/schemes/*"}
    caps = derive((5, 14), seen, dirs, None)
    assert caps["features"]["migrate"]["present"] and "migrate_hot" in caps["actions"]
    # ...and one that says 6.18 but whose tree lacks dests/ (6.17) has nothing from 6.17 on.
    seen, dirs = tree("tree-6.18.txt")
    seen = {s for s in seen if "dests" not in s and s not in ("refresh_ms", "contexts/*/addr_unit")}
    caps = derive((6, 18), seen, dirs, None)
    f = caps["features"]
    assert not f["dests"]["present"] and not f["addr_unit"]["present"] and not f["refresh_ms"]["present"]
    assert f["goal_nid"] == {"present": True, "since": "6.16", "source": "version"}  # 6.16 < 6.17
    assert "unmapped" in caps["filter_types"]


def test_without_any_kdamond_everything_comes_from_the_release() -> None:
    caps = derive((6, 8), set(), set(), None)
    assert all(v["source"] == "version" for v in caps["features"].values())
    assert "migrate_cold" not in caps["actions"] and "young" not in caps["filter_types"]
    assert caps["features"]["quota_goals"]["present"] and caps["goal_metrics"] == ["user_input"]
