"""Every bad profile a user can write ends in one clear message with file:line:column and exit 65."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.cli.main import main
from nodeagent.profile import load_profile, load_profile_text
from nodeagent.util.errors import ProfileError

HEAD = "apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: t}\n"


def write(tmp_path: Path, text: str | bytes, name: str = "p.yaml") -> Path:
    p = tmp_path / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return p


def errors_of(path: Path) -> list[str]:
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    return exc.value.errors


def test_the_documented_example_message(tmp_path: Path) -> None:
    p = write(tmp_path, HEAD + "kernel:\n  demotion_enabled: true\n  numa_balancing: 7\n")
    (err,) = errors_of(p)
    assert err.endswith("p.yaml:6:19: kernel.numa_balancing: expected one of disabled, normal, memory-tiering, "
                        "normal+memory-tiering (or 0-3), got 7")


@pytest.mark.parametrize("value,expected", [
    ("memory-tiering", 2), ("2", None), (2, 2), (0, 0), ("normal+memory-tiering", 3), ("disabled", 0)])
def test_numa_balancing_names_and_integer_aliases(tmp_path: Path, value: object, expected: int | None) -> None:
    p = write(tmp_path, HEAD + f"kernel:\n  numa_balancing: {value}\n")
    if expected is None:  # "2" is an int in YAML, so it is accepted as 2
        assert load_profile(p).profile.kernel.numa_balancing == 2
    else:
        assert load_profile(p).profile.kernel.numa_balancing == expected


@pytest.mark.parametrize("body,fragment", [
    ("kernel:\n  bogus: 1\n",
     "5:3: kernel.bogus: unknown key; allowed here: demotion_enabled, lru_gen, min_free_kbytes, min_slab_ratio, "
     "min_unmapped_ratio, numa_balancing"),
    ("kernel:\n  demotion_enabled: maybe\n", "kernel.demotion_enabled: expected true or false, got 'maybe'"),
    ("kernel:\n  zone_reclaim_mode: 9\n", "kernel.zone_reclaim_mode: expected an integer from 0 to 7, got 9"),
    ("kernel:\n  zone_reclaim_mode: -1\n", "expected an integer from 0 to 7, got -1"),
    ("kernel:\n  min_unmapped_ratio: 101\n", "kernel.min_unmapped_ratio: expected an integer from 0 to 100, got 101"),
    ("kernel:\n  min_slab_ratio: -1\n", "kernel.min_slab_ratio: expected an integer from 0 to 100, got -1"),
    ("kernel:\n  watermark_scale_factor: 0\n",
     "kernel.watermark_scale_factor: expected an integer from 1 to 3000, got 0"),
    ("kernel:\n  watermark_scale_factor: 3001\n", "expected an integer from 1 to 3000, got 3001"),
    ("damon:\n  kdamonds:\n    - {name: a, operations: vaddr, targets: [{node: fast}]}\n",
     "6:29: damon.kdamonds[0].operations: vaddr monitors a process's virtual address space (a pid); this profile's "
     "targets are NUMA nodes, which only paddr monitors"),
    ("damon:\n  kdamonds:\n    - {name: a, operations: fvaddr, targets: [{node: fast}]}\n",
     "damon.kdamonds[0].operations: fvaddr monitors"),
    ("kernel:\n  min_free_kbytes: -1\n", "kernel.min_free_kbytes: expected an integer from 0 to 2147483647, got -1"),
    ("kernel:\n  lru_gen: {enabled: 8}\n", "kernel.lru_gen.enabled: expected true, false or the feature bits 0-7"),
    ("kernel:\n  lru_gen: {min_ttl_ms: -5}\n", "kernel.lru_gen.min_ttl_ms: expected an integer from 0 to"),
    ("kernel:\n  lru_gen: {min_ttl: 5}\n", "kernel.lru_gen.min_ttl: unknown key"),
    ("kernel:\n  transparent_hugepage: {enabled: sometimes}\n",
     "kernel.transparent_hugepage.enabled: expected one of always, madvise, never, got 'sometimes'"),
    ("memory:\n  auto_online_blocks: yes\n",
     "memory.auto_online_blocks: expected one of offline, online, online_movable, online_kernel, got true"),
    ("kernel: [1, 2]\n", "kernel: expected a mapping"),
    ("kernel:\n  numa_balancing_promote_rate_limit_mbps: -5\n", "expected an integer from 0 to 2147483647"),
])
def test_field_errors_name_line_column_and_field(tmp_path: Path, body: str, fragment: str) -> None:
    p = write(tmp_path, HEAD + body)
    errs = errors_of(p)
    assert any(fragment in e for e in errs), errs
    assert all(e.startswith(str(p.name)) or "p.yaml:" in e for e in errs)


def test_missing_required_and_bad_name(tmp_path: Path) -> None:
    p = write(tmp_path, "kind: NodeProfile\nmetadata: {name: Bad_Name}\n")
    errs = errors_of(p)
    assert any("apiVersion: required key is missing" in e for e in errs)
    assert any("metadata.name: expected lowercase letters" in e and "'Bad_Name'" in e for e in errs)


def test_wrong_api_version(tmp_path: Path) -> None:
    errs = errors_of(write(tmp_path, "apiVersion: nodeagent/v2\nkind: NodeProfile\nmetadata: {name: x}\n"))
    assert any("1:13: apiVersion: expected 'nodeagent/v1', got 'nodeagent/v2'" in e for e in errs)


@pytest.mark.parametrize("content,fragment", [
    ("", "empty profile"),
    ("# only a comment\n\n", "empty profile"),
    (b"\x00\x01binary", "binary file"),
    (b"\xff\xfe bad utf8", "not UTF-8"),
    ("kernel: {numa_balancing: [\n", "invalid YAML"),
    ("- a\n- b\n", "a profile is a mapping"),
    ("a: 1\n---\nb: 2\n", "exactly one YAML document"),
    (HEAD + "kernel: {}\nkernel: {}\n", "duplicate key 'kernel' (first at line 4)"),
    (HEAD + "kernel: !!python/object:os.system {}\n", "YAML tag 'tag:yaml.org,2002:python/object:os.system' is "
                                                      "not allowed"),
    (HEAD + "kernel: !custom {}\n", "YAML tag '!custom' is not allowed"),
    (HEAD + "base: &b {x: 1}\nkernel:\n  <<: *b\n", "merge keys"),
    (HEAD + "1: x\n", "keys must be strings, got a number 1"),
    (HEAD + "kernel:\n  [a]: b\n", "5:3: keys must be strings, got a list [a]"),
    (HEAD + "kernel:\n  {a: 1}: b\n", "keys must be strings, got a mapping {a: 1}"),
    (HEAD + "kernel:\n  ? [a, [b]]\n  : c\n", "keys must be strings, got a list [a, [b]]"),
    (HEAD + "kernel:\n  null: 1\n", "keys must be strings, got null"),
    (HEAD + "kernel:\n  yes: 1\n", "keys must be strings, got a boolean true"),
])
def test_bad_files(tmp_path: Path, content: str | bytes, fragment: str) -> None:
    errs = errors_of(write(tmp_path, content))
    assert any(fragment in e for e in errs), errs
    assert not any("LNode(" in e or "Loc(" in e for e in errs), errs  # never the loader's own objects


def test_billion_laughs_is_refused_quickly(tmp_path: Path) -> None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 9):
        prev = chr(ord("a") + i - 1)
        cur = chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    errs = errors_of(write(tmp_path, "\n".join(lines) + "\n"))
    assert any("alias bomb" in e for e in errs)


def test_huge_file_missing_file_and_directory(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with open(big, "wb") as f:
        f.truncate(100 * 1024 * 1024)
    assert any("too large" in e for e in errors_of(big))
    assert any("no such file" in e for e in errors_of(tmp_path / "nope.yaml"))
    assert any("is a directory" in e for e in errors_of(tmp_path))


def test_cli_exit_codes_for_bad_profiles(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, HEAD + "kernel:\n  numa_balancing: 7\n")
    assert main(["validate", str(p)]) == 65
    err = capsys.readouterr().err
    assert "kernel.numa_balancing" in err and "Traceback" not in err
    assert main(["validate", str(tmp_path / "missing.yaml")]) == 65
    assert main(["--format", "json", "validate", str(p)]) == 65
    assert '"exit_code": 65' in capsys.readouterr().out
    assert main(["validate", "--root", str(tmp_path)]) == 65  # no PROFILE, and no /etc/nodeagent/profile.yaml
    assert main(["--no-such-option"]) == 64
    assert main(["plan", str(p), "--bogus"]) == 64
    assert main(["--simulate", "no-such-preset", "facts"]) == 64
    assert main(["--simulate", "h100-cxl", "--root", str(tmp_path), "facts"]) == 64


def test_inline_profile_and_extends_refused_without_dir(tmp_path: Path) -> None:
    assert load_profile_text(HEAD + "kernel: {numa_balancing: 2}\n").profile.kernel.numa_balancing == 2
    with pytest.raises(ProfileError) as exc:
        load_profile_text(HEAD + "extends: [base.yaml]\n")
    assert "inline profile has no directory" in exc.value.errors[0]
    write(tmp_path, HEAD.replace("name: t", "name: base") + "kernel: {zone_reclaim_mode: 1}\n", "base.yaml")
    lp = load_profile_text(HEAD + "extends: [base.yaml]\n", base_dir=tmp_path)
    assert lp.profile.kernel.zone_reclaim_mode == 1
