"""`nodeagent labels`: NFD's local feature-file format (as nfd-worker documents it: `<namespace>/<name>[=<value>]`
lines, `#` comments, the `# +expiry-time=<RFC 3339>` directive, < 64 kB), label values as Kubernetes allows them,
every label documented, and which profile is used without PROFILE."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pytest
from nodeagent_sim import PRESETS

from nodeagent.cli.main import main
from nodeagent.k8s import labels as lab

REPO = Path(__file__).resolve().parents[2]
PROFILE = str(REPO / "profiles" / "cxl-inference.yaml")
#: Kubernetes' label syntax: a DNS-subdomain prefix, a name of ≤ 63, a value of ≤ 63 (may be empty).
NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/"
                  r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
DOCUMENTED = [re.compile(re.escape(d.name).replace(re.escape("<kind>"), "(" + "|".join(lab.KINDS) + ")"))
              for d in lab.LABELS]


def assert_nfd_format(text: str, prefix: str = lab.DEFAULT_PREFIX) -> dict[str, str]:
    assert len(text.encode()) < 64 * 1024 and text.endswith("\n")
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            m = re.fullmatch(r"# \+expiry-time=(.+)", line)
            if m:
                assert datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).tzinfo is not None
            continue
        name, sep, value = line.partition("=")
        assert sep and NAME.fullmatch(name) and VALUE.fullmatch(value), line
        assert name.startswith(prefix + "/")
        short = name.removeprefix(prefix + "/")
        assert any(d.fullmatch(short) for d in DOCUMENTED), f"{short} is not documented in LABELS"
        out[name] = value
    return out


#: "stress" (tens of thousands of blocks) takes ~17 s to lay out and nothing else here: labels on it take 0.4 s.
@pytest.mark.parametrize("preset", sorted(set(PRESETS) - {"stress"}))
def test_every_preset_renders_valid_documented_labels(make_node, preset: str, capsys) -> None:
    root = make_node(preset)
    assert main(["--root", str(root), "labels", PROFILE]) == 0
    labels = assert_nfd_format(capsys.readouterr().out)
    p = lab.DEFAULT_PREFIX + "/nodeagent."
    assert labels[p + "profile"] == "cxl-inference" and re.fullmatch(r"[0-9a-f]{12}", labels[p + "profile.digest"])
    assert int(labels[p + "memory.tiers"]) >= 1 and labels[p + "memory.dram"] == "true"
    for name, value in labels.items():
        if name.endswith(".size-gib"):
            assert int(value) & (int(value) - 1) == 0  # a power of two (or 0)
    assert labels[p + "cxl.present"] in ("true", "false")


def test_write_is_atomic_with_expiry_and_the_other_prefix(make_node, capsys) -> None:
    root = make_node("h100-cxl")
    assert main(["--root", str(root), "apply", "--yes", PROFILE]) == 0
    capsys.readouterr()
    assert main(["--root", str(root), "labels", "--write", "--expires-in", "900", "--label-prefix",
                 "memory.example.com"]) == 0
    d = root / lab.FEATURES_DIR.lstrip("/")
    assert [p.name for p in d.iterdir()] == ["nodeagent"]  # no temp file left (NFD ignores dot files anyway)
    text = (d / "nodeagent").read_text()
    labels = assert_nfd_format(text, "memory.example.com")
    parsed, expiry = lab.parse(text)
    assert parsed == labels and expiry is not None
    left = datetime.fromisoformat(expiry.replace("Z", "+00:00")) - datetime.now().astimezone()
    assert 800 < left.total_seconds() <= 900
    assert labels["memory.example.com/nodeagent.state"] == "converged"
    assert "profile source: last applied" in text
    assert main(["--root", str(root), "labels", "--label-prefix", "Not_A/Domain"]) == 64


def test_without_profile_last_applied_then_the_standard_path_then_65(make_node, capsys) -> None:
    root = make_node("h100-cxl")
    assert main(["--root", str(root), "--format", "json", "labels"]) == 65
    doc = json.loads(capsys.readouterr().out)
    assert "/etc/nodeagent/profile.yaml" in doc["error"]["message"] and "nodeagent labels PROFILE" in \
        doc["error"]["hint"]
    etc = root / "etc/nodeagent"
    etc.mkdir(parents=True)
    (etc / "base.yaml").write_text((REPO / "profiles/base.yaml").read_text())
    (etc / "profile.yaml").write_text(Path(PROFILE).read_text().replace("name: cxl-inference", "name: standard"))
    assert main(["--root", str(root), "--format", "json", "labels"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["labels"]["feature.node.kubernetes.io/nodeagent.profile"] == "standard"
    assert doc["labels"]["feature.node.kubernetes.io/nodeagent.state"] == "drifted"
    assert main(["--root", str(root), "apply", "--yes", PROFILE]) == 0
    capsys.readouterr()
    assert main(["--root", str(root), "--format", "json", "labels"]) == 0  # the last applied wins
    doc = json.loads(capsys.readouterr().out)
    assert doc["labels"]["feature.node.kubernetes.io/nodeagent.profile"] == "cxl-inference"
    assert doc["source"].startswith("last applied")


@pytest.mark.parametrize("text, value", [
    ("cxl-inference", "cxl-inference"), ("my profile/v2", "my-profile-v2"), ("-_.x.-", "x"),
    ("a" * 80, "a" * 63), ("ünïcode", "n-code"), ("---", ""),
])
def test_label_values_are_sanitized(text: str, value: str) -> None:
    assert lab.label_value(text) == value and VALUE.fullmatch(value)


def test_size_buckets_and_states() -> None:
    assert [lab.size_bucket(g * lab.GiB) for g in (0, 1, 3, 4, 767, 768, 1024, 6000)] == \
        [0, 1, 2, 4, 512, 512, 1024, 4096]
    assert lab.checks_state(None) == "unknown"
    assert lab.checks_state([{"status": "pass"}, {"status": "warn"}]) == "warnings"
    assert lab.checks_state([{"status": "fail"}, {"status": "warn"}]) == "failed"
    assert lab.checks_state([{"status": "pass"}, {"status": "skipped"}]) == "passed"


def test_parse_reads_what_nfd_reads() -> None:
    labels, expiry = lab.parse("# c\n# +expiry-time=2030-01-02T03:04:05Z\nvendor.io/a\nvendor.io/b=2\n\n")
    assert labels == {"vendor.io/a": "true", "vendor.io/b": "2"} and expiry == "2030-01-02T03:04:05Z"
