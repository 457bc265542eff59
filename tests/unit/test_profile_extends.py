"""extends: deep merge of maps, lists of named items by name, cycles and escapes refused, positions kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.profile import load_profile
from nodeagent.profile.load import LNode, Loc, merge, to_plain
from nodeagent.util.errors import ProfileError

REPO = Path(__file__).resolve().parents[2]


def w(p: Path, text: str) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def test_shipped_profiles_load() -> None:
    lp = load_profile(REPO / "profiles" / "cxl-inference.yaml")
    assert lp.name == "cxl-inference"
    assert lp.profile.kernel.numa_balancing == 2
    assert lp.profile.kernel.transparent_hugepage.defrag == "defer+madvise"  # from base.yaml
    assert load_profile(REPO / "profiles" / "base.yaml").name == "base"


def test_maps_deep_merge_and_scalars_replace(tmp_path: Path) -> None:
    w(tmp_path / "base.yaml", "apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: base}\n"
      "kernel:\n  numa_balancing: 1\n  transparent_hugepage: {enabled: always, defrag: never}\n")
    p = w(tmp_path / "p.yaml", "extends: base.yaml\nmetadata: {name: child}\n"
          "kernel:\n  numa_balancing: 2\n  transparent_hugepage: {defrag: madvise}\n")
    prof = load_profile(p).profile
    assert prof.metadata.name == "child"
    assert prof.kernel.numa_balancing == 2
    assert prof.kernel.transparent_hugepage.enabled == "always"
    assert prof.kernel.transparent_hugepage.defrag == "madvise"


def test_error_in_base_points_at_the_base_file(tmp_path: Path) -> None:
    w(tmp_path / "sub" / "base.yaml", "kernel:\n  zone_reclaim_mode: 99\n")
    p = w(tmp_path / "p.yaml", "apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: x}\n"
          "extends: [sub/base.yaml]\n")
    with pytest.raises(ProfileError) as exc:
        load_profile(p)
    assert "base.yaml:2:22: kernel.zone_reclaim_mode" in exc.value.errors[0]


def test_named_lists_merge_by_name_other_lists_replace() -> None:
    loc = Loc("f", 1, 1)

    def n(v):  # build an LNode tree from plain data
        if isinstance(v, dict):
            return LNode({k: n(x) for k, x in v.items()}, loc)
        if isinstance(v, list):
            return LNode([n(x) for x in v], loc)
        return LNode(v, loc)

    base = n({"rules": [{"name": "a", "x": 1, "y": 1}, {"name": "b", "x": 1}], "plain": [1, 2]})
    over = n({"rules": [{"name": "b", "x": 2}, {"name": "c", "x": 3}], "plain": [3]})
    merged, _ = to_plain(merge(base, over))
    assert merged == {"rules": [{"name": "a", "x": 1, "y": 1}, {"name": "b", "x": 2}, {"name": "c", "x": 3}],
                      "plain": [3]}


def test_cycles_and_escapes(tmp_path: Path) -> None:
    w(tmp_path / "a.yaml", "extends: b.yaml\n")
    w(tmp_path / "b.yaml", "extends: a.yaml\n")
    with pytest.raises(ProfileError) as exc:
        load_profile(tmp_path / "a.yaml")
    assert "cycle" in exc.value.errors[0]
    w(tmp_path / "self.yaml", "extends: self.yaml\n")
    with pytest.raises(ProfileError):
        load_profile(tmp_path / "self.yaml")
    inner = tmp_path / "profiles"
    w(tmp_path / "outside.yaml", "kernel: {}\n")
    w(inner / "p.yaml", "extends: ../outside.yaml\n")
    with pytest.raises(ProfileError) as exc:
        load_profile(inner / "p.yaml")
    assert "outside the profile's directory tree" in exc.value.errors[0]
    w(inner / "q.yaml", "extends: [missing.yaml]\n")
    with pytest.raises(ProfileError) as exc:
        load_profile(inner / "q.yaml")
    assert "no such file" in exc.value.errors[0]
    w(inner / "r.yaml", "extends: [7]\n")
    with pytest.raises(ProfileError) as exc:
        load_profile(inner / "r.yaml")
    assert "expected a file path" in exc.value.errors[0]


def test_digest_is_stable_and_sensitive(tmp_path: Path) -> None:
    head = "apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: x}\n"
    a = load_profile(w(tmp_path / "a.yaml", head + "kernel: {numa_balancing: 2}\n"))
    b = load_profile(w(tmp_path / "b.yaml", head + "kernel:\n  numa_balancing: 2\n"))
    c = load_profile(w(tmp_path / "c.yaml", head + "kernel: {numa_balancing: 1}\n"))
    assert a.digest == b.digest != c.digest
