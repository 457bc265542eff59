"""The validated-profile cache and the resolved profile: the same plans as a freshly validated profile, used only
while every file of the extends chain and every validating version is unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodeagent.engine.core import Engine, make_plan
from nodeagent.host import open_host
from nodeagent.profile import LoadedProfile, load_profile
from nodeagent.profile import cache as profile_cache
from nodeagent.profile.resolved import ResolvedProfile, from_record, to_record
from nodeagent.util.errors import ProfileError

REPO = Path(__file__).resolve().parents[2]
PROFILES = sorted((REPO / "profiles").glob("*.yaml"))


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NODEAGENT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "profiles"


def plain(value: object) -> object:
    return json.loads(json.dumps(value))


def untimed(report: dict) -> dict:
    """A check report without how long each check took."""
    return {**report, "results": [{**r, "evidence": {k: v for k, v in (r.get("evidence") or {}).items()
                                                     if k != "seconds"}} for r in report["results"]]}


def roundtrip(loaded: LoadedProfile) -> ResolvedProfile:
    return from_record(json.loads(json.dumps(to_record(loaded))))


@pytest.mark.parametrize("preset", ["h100-cxl", "workstation", "qemu-3node"])
@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.name)
def test_resolved_profile_plans_exactly_like_the_validated_one(make_node, preset: str, path: Path) -> None:
    eng = Engine(open_host(str(make_node(preset))))
    loaded = load_profile(path)
    resolved = roundtrip(loaded)
    facts = eng.facts()
    assert (resolved.name, resolved.digest, resolved.path) == (loaded.name, loaded.digest, loaded.path)
    for exclude_none in (False, True):
        assert plain(resolved.profile.model_dump(exclude_none=exclude_none)) == plain(
            loaded.profile.model_dump(by_alias=False, exclude_none=exclude_none))
    assert make_plan(resolved, facts, eng.context()) == make_plan(loaded, facts, eng.context())
    assert untimed(eng.checks(resolved, facts).to_dict()) == untimed(eng.checks(loaded, facts).to_dict())
    for key in list(loaded.locs)[:50]:
        assert resolved.where(*key) == loaded.where(*key)


def write_chain(tmp_path: Path, rate: int = 100) -> Path:
    (tmp_path / "base.yaml").write_text("apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: base}\n"
                                        f"kernel: {{numa_balancing_promote_rate_limit_mbps: {rate}}}\n")
    top = tmp_path / "node.yaml"
    top.write_text("extends: base.yaml\napiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: node}\n"
                   "kernel: {demotion_enabled: true}\n")
    return top


def test_second_load_comes_from_the_cache(tmp_path: Path, cache: Path) -> None:
    top = write_chain(tmp_path)
    first = profile_cache.load(str(top))
    assert isinstance(first, LoadedProfile)
    second = profile_cache.load(str(top))
    assert isinstance(second, ResolvedProfile)
    assert second.digest == first.digest and second.profile.kernel.numa_balancing_promote_rate_limit_mbps == 100
    assert len(list(cache.glob("*.json"))) == 1


def test_an_edit_anywhere_in_the_extends_chain_invalidates(tmp_path: Path, cache: Path) -> None:
    top = write_chain(tmp_path)
    profile_cache.load(str(top))
    write_chain(tmp_path, rate=200)  # only base.yaml changes
    again = profile_cache.load(str(top))
    assert isinstance(again, LoadedProfile)
    assert again.profile.kernel.numa_balancing_promote_rate_limit_mbps == 200
    assert profile_cache.load(str(top)).profile.kernel.numa_balancing_promote_rate_limit_mbps == 200


def test_another_pydantic_or_nodeagent_version_invalidates(tmp_path: Path, cache: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    top = write_chain(tmp_path)
    profile_cache.load(str(top))
    real = profile_cache.versions()
    for dist in ("nodeagent", "pydantic", "pydantic-core", "model"):
        monkeypatch.setattr(profile_cache, "versions", lambda d=dist: {**real, d: "0.0.0"})
        assert profile_cache.lookup(str(top)) is None
    monkeypatch.setattr(profile_cache, "versions", lambda: real)
    assert profile_cache.lookup(str(top)) is not None
    assert real["pydantic"] not in ("", "?") and real["pydantic-core"] not in ("", "?")


def test_a_changed_profile_model_is_no_match(tmp_path: Path) -> None:
    """A checkout that changes the model keeps ``__version__``: the model's files themselves are compared."""
    import shutil

    pkg = tmp_path / "nodeagent" / "profile"
    shutil.copytree(Path(profile_cache.__file__).parent, pkg, symlinks=True)
    (pkg.parent / "unrelated.py").write_text("")
    (pkg / "notes.txt").write_text("")
    before = profile_cache._model_code(pkg)
    assert "profile/model.py" in before and "profile/resolved.py" in before and "profile/load.py" in before
    assert "unrelated" not in before and "notes" not in before
    (pkg.parent / "unrelated.py").write_text("x = 1\n")
    assert profile_cache._model_code(pkg) == before
    (pkg / "model.py").write_text((pkg / "model.py").read_text() + "\n# edited\n")
    assert profile_cache._model_code(pkg) != before
    assert profile_cache._model_code() == profile_cache._model_code(Path(profile_cache.__file__).parent)
    assert "profile/model.py" in profile_cache._model_code()  # the installed package's own model


def test_a_damaged_entry_is_a_miss_and_is_replaced(tmp_path: Path, cache: Path) -> None:
    top = write_chain(tmp_path)
    profile_cache.load(str(top))
    (entry,) = cache.glob("*.json")
    for junk in ("{", "[]", json.dumps({"versions": profile_cache.versions(), "shown": str(top),
                                        "profile": {"format": "nodeagent-resolved-profile", "version": 1}})):
        entry.write_text(junk)
        assert isinstance(profile_cache.load(str(top)), LoadedProfile)
        assert isinstance(profile_cache.load(str(top)), ResolvedProfile)


def test_an_invalid_profile_is_never_cached(tmp_path: Path, cache: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: bad}\n"
                   "kernel: {zone_reclaim_mode: 9}\n")
    for _ in range(2):
        with pytest.raises(ProfileError, match="zone_reclaim_mode"):
            profile_cache.load(str(bad))
    assert not list(cache.glob("*.json"))


def test_a_record_of_another_version_is_refused() -> None:
    rec = to_record(load_profile(PROFILES[0]))
    with pytest.raises(ValueError, match="version"):
        from_record({**rec, "version": 99})
    with pytest.raises(ValueError):
        from_record({"desired": {}})


def test_drift_reads_the_resolved_record_and_still_reads_an_old_one(make_node, capsys) -> None:
    from nodeagent.drift import desired_profile
    from nodeagent.state import LastApplied
    from tests.e2e.cli_helpers import run

    root = make_node("workstation")
    assert run(["--root", str(root), "apply", "--yes", str(PROFILES[1])], capsys)[0] == 0
    record = root / "var/lib/nodeagent/last-applied.json"
    last = json.loads(record.read_text())
    assert isinstance(desired_profile(LastApplied.from_json(last)), ResolvedProfile)
    assert last["resolved"]["digest"] == last["profile_digest"]
    old = {k: v for k, v in last.items() if k not in ("resolved", "format")}  # as nodeagent wrote it before
    assert isinstance(desired_profile(LastApplied.from_json(old)), LoadedProfile)
    record.write_text(json.dumps(old))
    code, out, err = run(["--root", str(root), "drift"], capsys)
    assert code == 0, out + err


def test_an_entry_others_could_write_is_not_trusted(tmp_path: Path, cache: Path) -> None:
    top = write_chain(tmp_path)
    profile_cache.load(str(top))
    (entry,) = cache.glob("*.json")
    assert entry.stat().st_mode & 0o077 == 0
    entry.chmod(0o666)
    assert profile_cache.lookup(str(top)) is None
