"""The checks: section of a profile: defaults, units, and impossible values rejected at validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.profile import load_profile
from nodeagent.util.errors import ProfileError
from tests.checks_helpers import profile

REPO = Path(__file__).resolve().parents[2]


def test_shipped_profile_configures_the_checks() -> None:
    loaded = load_profile(REPO / "profiles" / "cxl-inference.yaml")
    c = loaded.profile.checks
    assert c.configured() == ["cpu", "disk", "gpu_pcie", "capacity", "coexistence", "placement"]
    assert c.placement.severity == "warning"
    assert c.cpu.require_flags == ("avx2", "fma") and c.cpu.severity == "error"
    assert c.disk.severity == "error" and c.disk.paths[0].min_free == 200 * 1024**3
    assert c.disk.paths[0].max_used_percent == 90.0
    assert c.capacity.severity == "warning" and c.capacity.model.params == 70 * 10**9
    assert c.capacity.dram_offload == 80 * 1024**3 and c.capacity.model.kv_dtype is None


def test_units_and_defaults() -> None:
    c = profile({"capacity": {"model": {"params": "7.6B", "layers": 28, "kv_heads": 4, "head_dim": 128,
                                        "dtype": "FP8"}, "max_batch": 8, "context_length": 4096},
                 "memory_bandwidth": {"min_gbps": 20, "buffer": "64MiB"},
                 "disk": {"paths": [{"path": "/data", "max_used_percent": "85%"}]}}).profile.checks
    assert c.capacity.model.params == 7_600_000_000 and c.capacity.model.dtype == "fp8"
    assert c.capacity.severity == "error" and c.capacity.weights_overhead == 1.2
    assert c.memory_bandwidth.buffer == 64 * 1024**2 and c.memory_bandwidth.iterations == 5
    assert c.disk.paths[0].max_used_percent == 85.0 and c.disk.paths[0].must_exist is False
    assert c.cpu is None


@pytest.mark.parametrize(("checks", "expected"), [
    ({"disk": {"paths": [{"path": "/m", "min_free": -5}]}},
     "checks.disk.paths[0].min_free: expected a size of 0 or more, got -5"),
    ({"disk": {"paths": [{"path": "/m", "min_free": "-5GiB"}]}},
     "checks.disk.paths[0].min_free: expected a size such as 512MiB"),
    ({"disk": {"paths": [{"path": "/m", "max_used_percent": 120}]}},
     "checks.disk.paths[0].max_used_percent: expected a percentage from 0 to 100, got 120"),
    ({"disk": {"paths": [{"path": "/m", "max_used_percent": "101%"}]}}, "expected a percentage from 0 to 100, got 101"),
    ({"disk": {"paths": [{"path": "/m", "min_free_inodes": -1}]}},
     "min_free_inodes: expected an integer of 0 or more, got -1"),
    ({"disk": {"paths": [{"path": "models"}]}},
     "checks.disk.paths[0].path: expected an absolute path such as /models, got 'models'"),
    ({"disk": {"paths": []}}, "checks.disk.paths"),
    ({"gpu_pcie": {"min_gen": 7}}, "checks.gpu_pcie.min_gen: expected an integer from 1 to 6, got 7"),
    ({"gpu_pcie": {"min_width": 12}}, "checks.gpu_pcie.min_width: expected 1, 2, 4, 8, 16 or 32, got 12"),
    ({"cpu": {"require_flags": ["AVX2"]}},
     "checks.cpu.require_flags[0]: expected a /proc/cpuinfo flag such as avx2, got 'AVX2'"),
    ({"cpu": {"reject_virtual_models": "yes"}}, "checks.cpu.reject_virtual_models: expected true or false, got 'yes'"),
    ({"cpu": {"severity": "fatal"}}, "checks.cpu.severity: expected 'error' or 'warning', got 'fatal'"),
    ({"memory_bandwidth": {"min_gbps": -1}}, "checks.memory_bandwidth.min_gbps: expected a number above 0, got -1"),
    ({"memory_bandwidth": {"min_gbps": 10, "buffer": "4KiB"}}, "expected at least 1MiB"),
    ({"capacity": {"model": {"params": "lots", "layers": 80, "kv_heads": 8, "head_dim": 128}, "max_batch": 1,
                   "context_length": 1}}, "checks.capacity.model.params: expected a positive parameter count"),
    ({"capacity": {"model": {"params": "70B", "layers": 0, "kv_heads": 8, "head_dim": 128}, "max_batch": 1,
                   "context_length": 1}}, "checks.capacity.model.layers: expected a positive integer, got 0"),
    ({"capacity": {"model": {"params": "70B", "layers": 8, "kv_heads": 8, "head_dim": 128, "dtype": "fp12"},
                   "max_batch": 1, "context_length": 1}}, "checks.capacity.model.dtype: expected one of fp32"),
    ({"capacity": {"model": {"params": "70B", "layers": 8, "kv_heads": 8, "head_dim": 128}, "max_batch": -96,
                   "context_length": 1}}, "checks.capacity.max_batch: expected a positive integer, got -96"),
    ({"capacity": {"model": {"params": "70B", "layers": 8, "kv_heads": 8, "head_dim": 128}, "max_batch": 1,
                   "context_length": 1, "dram_offload": "-1GiB"}}, "checks.capacity.dram_offload"),
    ({"cpu": {"require": ["avx2"]}}, "checks.cpu.require: unknown key (did you mean 'require_flags'?); allowed here: "
                                     "reject_virtual_models, require_flags, severity"),
    ({"bogus": {}}, "checks.bogus: unknown key; allowed here: capacity, coexistence, cpu, disk, gpu_pcie, "
                    "latency, memory_bandwidth"),
])
def test_impossible_values_are_rejected_with_the_field_named(checks: dict, expected: str) -> None:
    with pytest.raises(ProfileError) as err:
        profile(checks)
    assert err.value.exit_code == 65
    assert expected in str(err.value), str(err.value)
    assert str(err.value).startswith("t.yaml:")
