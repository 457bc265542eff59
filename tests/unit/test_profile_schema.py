"""`nodeagent schema` round trip: what the loader accepts the JSON Schema accepts, with a real validator.

An editor or CI linter using the schema must not report errors on valid profiles; and what the schema rejects
must be rejected by the loader too. Cross-field rules are the loader's alone (docs/profile-reference.md: "Rules
only the loader checks")."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import ValidationError

from nodeagent.cli.main import main
from nodeagent.profile import checks as checks_mod
from nodeagent.profile import damon as damon_mod
from nodeagent.profile import load_profile, schema
from nodeagent.profile import model as model_mod
from nodeagent.profile.model import NodeProfile
from nodeagent.util.errors import ProfileError

REPO = Path(__file__).resolve().parents[2]
HEAD = {"apiVersion": "nodeagent/v1", "kind": "NodeProfile", "metadata": {"name": "t"}}


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    s = schema()
    jsonschema.Draft202012Validator.check_schema(s)
    return jsonschema.Draft202012Validator(s)


def _docstring_example(module: Any) -> str:
    """The ``Example::`` block of a profile module's docstring, dedented."""
    text = module.__doc__.split("::\n", 1)[1]
    lines = []
    for line in text.splitlines()[1:]:
        if line and not line.startswith("    "):
            break
        lines.append(line[4:])
    return "\n".join(lines)


def _kitchen_sink() -> dict[str, Any]:
    """The model's, the checks' and DAMON's documented examples in one profile: nearly every field, set."""
    doc = yaml.safe_load(_docstring_example(model_mod))
    doc.update(yaml.safe_load(_docstring_example(checks_mod)))
    doc.update(yaml.safe_load(_docstring_example(damon_mod)))
    return doc


#: The fields the documented examples leave out, in a second profile.
SUPPLEMENT: dict[str, Any] = {**HEAD, "metadata": {"name": "t", "description": "d"},
    "memory": {"dax": [
        {"name": "a", "match": {"devices": ["dax0.0"], "target_nodes": [2], "dax_regions": [0], "min_size": "1TiB"},
         "mode": "system-ram", "zone": "normal", "use": "pinned-pool"},
        {"name": "b", "match": {"min_size": 1024}, "mode": "devdax"}]},
    "checks": {
        "disk": {"severity": "warning", "paths": [{"path": "/", "must_exist": True, "min_free_inodes": 5}]},
        "gpu_pcie": {"min_gen": 5, "min_width": 8, "min_count": 2},
        "memory_bandwidth": {"min_gbps": 10, "min_single_gbps": 2.5, "nodes": [0, 1], "buffer": "512MiB",
                             "iterations": 3},
        "capacity": {"model": {"params": 8000000000, "dtype": "fp8", "kv_dtype": "bf16", "layers": 32,
                               "kv_heads": 8, "head_dim": 128},
                     "max_batch": 8, "context_length": 4096, "gpu_memory": "80GiB", "weights_overhead": 1.1},
        "placement": {"severity": "error"}},
    "damon": {"coexist": "take-over", "kdamonds": [{
        "name": "k", "operations": "paddr", "pairing": "split", "stats_refresh": "5s",
        "monitoring": {"intervals_goal": {"access": "4%", "aggregations": 3, "min_sample": "1ms",
                                          "max_sample": "10s"}},
        "targets": [{"node": 0}],
        "schemes": [
            {"action": "migrate_hot", "dests": [{"node": 1, "weight": 3}],
             "access": {"nr_accesses": {"min": "5%", "max": 10}, "size": {"max": "1GiB"}, "age": {"max": "1h"}},
             "quota": {"weights": {"size": 1, "nr_accesses": 2, "age": 3}, "goals": [
                 {"metric": "node_mem_used_bp", "target": "30%", "node": 0, "optional": True},
                 {"metric": "some_mem_psi_us", "target": "10ms"},
                 {"metric": "user_input", "target": 5, "current": 3},
                 {"metric": "node_memcg_free_bp", "target": 200, "node": "slow", "memcg": "/a"}]},
             "filters": [{"type": "memcg", "memcg": "/a", "allow": True},
                         {"type": "addr", "range": {"start": 0, "end": 4096}},
                         {"type": "target", "target": 0}, {"type": "hugepage_size", "size": {"min": "2MiB"}}]},
            {"action": "pageout", "apply_interval": 0}]}]},
}


def _readme_profiles() -> list[str]:
    text = "".join(p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))])
    blocks = re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
    return [b for b in blocks if "apiVersion: nodeagent/v1" in b]


def _loader_accepts(doc: Any) -> bool:
    try:
        NodeProfile.model_validate(doc)
    except (ValidationError, ValueError, TypeError):
        return False
    return True


SHIPPED = sorted(p.name for p in (REPO / "profiles").glob("*.yaml"))


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_profile_validates_as_written_and_merged(validator: Any, name: str) -> None:
    path = REPO / "profiles" / name
    as_written = yaml.safe_load(path.read_text())
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(as_written)]
    assert errors == []
    merged = load_profile(path).data
    assert list(validator.iter_errors(merged)) == []


def test_the_documented_examples_validate(validator: Any) -> None:
    for sink in (_kitchen_sink(), SUPPLEMENT):
        NodeProfile.model_validate(sink)
        assert list(validator.iter_errors(sink)) == []
    readme = _readme_profiles()
    assert readme, "README.md and docs/ show no full profile"
    for text in readme:
        doc = yaml.safe_load(text)
        assert list(validator.iter_errors(doc)) == [], text


def _leaves(node: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _leaves(v, (*path, k))] + [path]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in _leaves(v, (*path, i))] + [path]
    return [path]


def _replace(doc: Any, path: tuple, value: Any) -> Any:
    out = copy.deepcopy(doc)
    if not path:
        return value
    at = out
    for p in path[:-1]:
        at = at[p]
    at[path[-1]] = value
    return out


#: Values of every JSON type and of the spellings the units and names take, right and wrong.
CANDIDATES: list[Any] = [
    None, True, False, -1, 0, 1, 2, 3, 7, 8, 16, 100, 101, 1023, 1024, 10000, 10001, 2**32 - 1, 2**32, 2**63,
    2**64, 0.5, 1.0, 1.5, 90.0, 100.5, "", "x", "0", "25", "25%", "100%", "100.5%", " 5 % ", "-5%", "+5", "1_0",
    "1e1", "30s", "10ms", "1min", "2h", "5us", "30 seconds", "200GiB", "1.5GiB", "1.5.0GiB", "4kib", "10GB", "1PB",
    "70B", "7.6B", "8e9", "memory-tiering", "normal", "disabled", "madvise", "defer+madvise", "offline", "movable",
    "system-ram", "devdax", "tiered", "fast", "slow", "dax0.0", "dax0", "avx2", "AVX2", "/models", "models",
    "bf16", "BF16", "paddr", "refuse", "take-over", "warning", "migrate_cold", "young", "free_mem_rate", [], [1],
    ["dax0.0"], ["avx2"], [{"node": "fast"}], {}, {"x": 1},
]


@pytest.mark.slow  # thousands of profiles through pydantic and jsonschema: minutes on 2 cores
def test_what_the_loader_accepts_the_schema_accepts(validator: Any) -> None:
    """Every leaf of a profile that sets (nearly) every field, replaced by each candidate value."""
    tried = accepted = sampled = schema_only = 0
    disagreements = []
    for sink, path in [(s, p) for s in (_kitchen_sink(), SUPPLEMENT) for p in _leaves(s) if p]:
        for value in CANDIDATES:
            doc = _replace(sink, path, value)
            tried += 1
            if _loader_accepts(doc):
                accepted += 1
                if not validator.is_valid(doc):
                    disagreements.append((".".join(map(str, path)), value))
            elif tried % 4 == 0:  # how loose the schema is, on a sample of what the loader refuses
                sampled += 1
                schema_only += validator.is_valid(doc)
    assert disagreements == []
    assert accepted > 200 and tried > 5000
    # What only the loader rejects are its cross-field rules and a few spellings a pattern does not exclude
    # (a fraction of a byte); the schema is not allowed to be a rubber stamp.
    assert schema_only < 0.1 * sampled, (schema_only, sampled)


INVALID = [
    ("an unknown key", {"kernel": {"numa_balancig": 2}}),
    ("an unknown top-level key", {"kernal": {}}),
    ("a name the knob does not take", {"kernel": {"numa_balancing": "tiering"}}),
    ("a number out of range", {"kernel": {"numa_balancing": 4}}),
    ("a boolean as a number", {"kernel": {"zone_reclaim_mode": True}}),
    ("a number as a boolean", {"kernel": {"demotion_enabled": 1}}),
    ("a THP mode", {"kernel": {"transparent_hugepage": {"enabled": "sometimes"}}}),
    ("a percentage above 100", {"memory": {"demotion_pass": {"until_free": "101%"}}}),
    ("a duration without a unit", {"memory": {"demotion_pass": {"timeout": "30"}}}),
    ("a duration in words", {"memory": {"demotion_pass": {"timeout": "30 seconds"}}}),
    ("a size with two dots", {"checks": {"disk": {"paths": [{"path": "/", "min_free": "1.5.0GiB"}]}}}),
    ("a relative path", {"checks": {"disk": {"paths": [{"path": "models"}]}}}),
    ("a DAX device name", {"memory": {"dax": [{"name": "a", "match": {"devices": ["dax0"]}, "mode": "devdax"}]}}),
    ("an empty device list", {"memory": {"dax": [{"name": "a", "match": {"devices": []}, "mode": "devdax"}]}}),
    ("a rule without a mode", {"memory": {"dax": [{"name": "a", "match": {"all": True}}]}}),
    ("a rule name with capitals", {"memory": {"dax": [{"name": "A", "match": {"all": True}, "mode": "devdax"}]}}),
    ("a parameter count", {"checks": {"capacity": {"model": {"params": "70 billion", "layers": 1, "kv_heads": 1,
                                                              "head_dim": 1}, "max_batch": 1, "context_length": 1}}}),
    ("a dtype", {"checks": {"capacity": {"model": {"params": "70B", "dtype": "bf17", "layers": 1, "kv_heads": 1,
                                                    "head_dim": 1}, "max_batch": 1, "context_length": 1}}}),
    ("a PCIe width", {"checks": {"gpu_pcie": {"min_width": 3}}}),
    ("a DAMON action", {"damon": {"kdamonds": [{"name": "k", "targets": [{"node": "fast"}],
                                                "schemes": [{"action": "migrate_warm"}]}]}}),
    ("a node selector", {"damon": {"kdamonds": [{"name": "k", "targets": [{"node": "fastest"}]}]}}),
    ("no targets", {"damon": {"kdamonds": [{"name": "k", "targets": []}]}}),
    ("a watermark above 1000", {"damon": {"kdamonds": [{"name": "k", "targets": [{"node": 0}], "schemes": [
        {"action": "stat", "watermarks": {"metric": "free_mem_rate", "interval": "1s", "high": 1001}}]}]}}),
    ("a goal target for a _bp metric", {"damon": {"kdamonds": [{"name": "k", "targets": [{"node": 0}], "schemes": [
        {"action": "stat", "quota": {"goals": [{"metric": "node_mem_used_bp", "target": "10ms", "node": 0}]}}]}]}}),
    ("extends not a path", {"extends": [3]}),
    ("a wrong apiVersion", {"apiVersion": "nodeagent/v2"}),
]


@pytest.mark.parametrize("doc", [d for _, d in INVALID], ids=[n for n, _ in INVALID])
def test_invalid_profiles_fail_both_ways(validator: Any, doc: dict[str, Any], tmp_path: Path) -> None:
    full = {**HEAD, **doc}
    assert not validator.is_valid(full)
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(full))
    with pytest.raises(ProfileError):
        load_profile(p)


def test_missing_keys_are_required_unless_the_file_extends_another(validator: Any, tmp_path: Path) -> None:
    assert not validator.is_valid({"apiVersion": "nodeagent/v1", "kind": "NodeProfile"})
    child = {"extends": "base.yaml", "metadata": {"name": "child"}, "checks": {"capacity": {"max_batch": 8}}}
    assert validator.is_valid(child)  # the rest comes from base.yaml
    assert not validator.is_valid({**child, "kernel": {"numa_balancing": "sometimes"}})  # types still hold


def test_descriptions_and_defaults_come_from_the_model() -> None:
    s = schema()
    dp = s["$defs"]["DemotionPass"]
    assert dp["description"].startswith("A one-off demotion pass")
    assert dp["properties"]["until_free"]["default"] == "20%"
    assert dp["properties"]["timeout"]["default"] == "30s"
    mon = s["$defs"]["Monitoring"]["properties"]
    assert (mon["sample"]["default"], mon["update"]["default"]) == ("5ms", "1min")
    assert s["$defs"]["MemoryBandwidthCheck"]["properties"]["buffer"]["default"] == "256MiB"
    assert "description" in s["$defs"]["Kernel"]["properties"]["numa_balancing"]


def test_schema_command_prints_the_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == schema()
