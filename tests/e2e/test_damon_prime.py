"""A kdamond whose schemes act on young pages is primed at its start (nodeagent/kinds/damon/prime.py).

The shipped profile's promotion kdamond skips pages not accessed since the last check, and DAMON's young test
passes a page DAMON never checked: it starts with one more scheme that walks its memory with a young filter,
its own scheme applying nowhere, and is committed to the profile's schemes once the walk covered the memory.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.test_damon import K, damon_writes, kd, online, run

REPO = Path(__file__).resolve().parents[2]
U64_MAX = str(2**64 - 1)


def _shipped(tmp_path: Path, extra: str = "") -> str:
    text = (REPO / "profiles" / "cxl-inference.yaml").read_text()
    if extra:
        text = text.replace("    - name: promote-hot\n", f"    - name: promote-hot\n      {extra}\n")
    (tmp_path / "base.yaml").write_text((REPO / "profiles" / "base.yaml").read_text())
    p = tmp_path / "cxl-inference.yaml"
    p.write_text(text)
    return str(p)


def _promote_index(k) -> int:
    return next(i for i in range(int(k.tree.read(f"{K}/nr_kdamonds")))
                if kd(k, i, "contexts/0/schemes/0/action") == "migrate_hot")


def test_the_promotion_kdamond_walks_its_memory_before_migrate_hot_applies(make_node, tmp_path, capsys) -> None:
    root = make_node("h100-cxl")
    k = online(root, "dax0.0", "dax1.0")
    code, out, err = run(capsys, root, "plan", _shipped(tmp_path))
    assert "migrate_hot → node0; primed (one young-filter walk" in out
    assert "migrate_cold → node2 [" in out  # a scheme that acts on pages *not* young needs no walk
    code, out, err = run(capsys, root, "--format", "json", "apply", "--yes", _shipped(tmp_path))
    assert code == 0, out + err
    said = {o["target"]: o["message"] for o in json.loads(out)["outcomes"]}["damon.kdamonds"]
    assert "promote-hot-to-node0 (kdamond 2, pid 202; young-filter priming walk over its 2TiB in 0." in said
    i = _promote_index(k)
    mine = [(p.removeprefix(f"{i}/"), v) for p, v, r in damon_writes(k) if p.startswith(f"{i}/")]
    assert all(r == "ok" for _, _, r in damon_writes(k))
    on = mine.index(("state", "on"))
    staged = dict(mine[:on])
    assert staged["contexts/0/schemes/nr_schemes"] == "2"
    assert staged["contexts/0/schemes/0/action"] == "migrate_hot"
    assert staged["contexts/0/schemes/0/access_pattern/sz/min"] == U64_MAX  # applies nowhere during the walk
    walk = {p.removeprefix("contexts/0/schemes/1/"): v for p, v in staged.items()
            if p.startswith("contexts/0/schemes/1/")}
    assert walk["action"] == "lru_deprio" and walk["apply_interval_us"] == "200000"  # every aggregation
    assert walk["access_pattern/nr_accesses/min"] == "0" and walk["access_pattern/age/min"] == "0"  # every region
    assert walk["quotas/bytes"] == str(1 << 30) and walk["quotas/reset_interval_ms"] == "200"
    assert (walk["filters/nr_filters"], walk["filters/0/type"], walk["filters/0/matching"]) == ("1", "young", "Y")
    after = mine[on + 1:]
    commit = after.index(("state", "commit"))
    assert ("state", "update_schemes_stats") in after[:commit]  # waited for the walk's statistics
    restaged = dict(after[:commit])
    assert restaged["contexts/0/schemes/nr_schemes"] == "1"
    assert restaged["contexts/0/schemes/0/access_pattern/sz/min"] == "4096"
    assert kd(k, i, "state") == "on" and kd(k, i, "contexts/0/schemes/nr_schemes") == "1"
    assert kd(k, i, "contexts/0/schemes/0/access_pattern/sz/min") == "4096"
    own = json.loads((root / "var/lib/nodeagent/ownership.json").read_text())["damon"]["kdamonds"][str(i)]
    assert own["pid"] == int(kd(k, i, "pid")) and not own.get("building")
    demote = [p for p, _, _ in damon_writes(k) if p.startswith("0/")]
    assert ("0/state" in demote) and not any(v == "lru_deprio" for p, v, _ in damon_writes(k) if p.startswith("0/"))
    code, out, err = run(capsys, root, "--format", "json", "plan", "--detailed-exitcode", _shipped(tmp_path))
    assert code == 0 and json.loads(out)["changes"] == [], out + err


def test_prime_false_starts_the_kdamond_with_the_profiles_schemes_alone(make_node, tmp_path, capsys) -> None:
    root = make_node("h100-cxl")
    k = online(root, "dax0.0", "dax1.0")
    code, out, err = run(capsys, root, "apply", "--yes", _shipped(tmp_path, "prime: false"))
    assert code == 0, out + err
    assert "primed" not in out
    assert not any(v == "lru_deprio" for _, v, _ in damon_writes(k))
    i = _promote_index(k)
    assert [v for p, v, _ in damon_writes(k) if p == f"{i}/state"] == ["on"]


def test_6_18_walks_with_an_ops_filter(make_node, tmp_path, capsys) -> None:
    root = make_node("h100-cxl", kernel="6.18.0")
    k = online(root, "dax0.0", "dax1.0")
    code, out, err = run(capsys, root, "apply", "--yes", _shipped(tmp_path))
    assert code == 0, out + err
    i = _promote_index(k)
    walk = dict((p, v) for p, v, _ in damon_writes(k) if p.startswith(f"{i}/contexts/0/schemes/1/"))
    assert walk[f"{i}/contexts/0/schemes/1/ops_filters/0/type"] == "young"
    assert walk[f"{i}/contexts/0/schemes/1/ops_filters/0/allow"] == "N"
    assert not any("/schemes/1/filters/" in p for p in walk)
    assert kd(k, i, "contexts/0/schemes/nr_schemes") == "1"
