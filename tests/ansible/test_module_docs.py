"""The module's documentation and its pure parts, the offline equivalents of ansible-test's validate-modules.

``ansible-test sanity`` itself needs to bootstrap pip from a host this CI cannot reach; these check what
validate-modules checks that matters here: DOCUMENTATION/EXAMPLES/RETURN parse, the argument spec matches the
documented options, every value the module returns is documented, and ``ansible-doc`` renders the module.
"""

from __future__ import annotations

import importlib.util
import inspect
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from playbook_helpers import BIN, REPO, ansible_env

from nodeagent.engine.core import Engine
from nodeagent.host import open_host
from nodeagent.profile import load_profile

pytestmark = pytest.mark.ansible

MODULE_PATH = REPO / "ansible/ansible_collections/nodeagent/tiering/plugins/modules/reconcile.py"
PROFILE = REPO / "profiles/cxl-inference.yaml"


@pytest.fixture(scope="module")
def mod() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nodeagent_tiering_reconcile", MODULE_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.NODEAGENT_IMPORT_ERROR is None
    return module


def test_documentation_matches_the_argument_spec(mod: ModuleType) -> None:
    doc = yaml.safe_load(mod.DOCUMENTATION)
    assert doc["module"] == "reconcile" == MODULE_PATH.stem
    options = doc["options"]
    assert set(options) == set(mod.ARGUMENT_SPEC)
    for name, spec in mod.ARGUMENT_SPEC.items():
        documented = options[name]
        assert documented["type"] == spec["type"], name
        assert documented.get("required", False) == spec.get("required", False), name
        assert documented.get("default") == spec.get("default"), name
        assert documented.get("elements") == spec.get("elements"), name
        assert documented["description"], name
    assert doc["attributes"]["check_mode"]["support"] == "full"
    assert doc["attributes"]["diff_mode"]["support"] == "full"


def test_examples_use_documented_options(mod: ModuleType) -> None:
    examples = yaml.safe_load(mod.EXAMPLES)
    calls = [task["nodeagent.tiering.reconcile"] for task in examples if "nodeagent.tiering.reconcile" in task]
    assert len(calls) >= 3
    for args in calls:
        assert set(args) <= set(mod.ARGUMENT_SPEC)
        assert "profile" in args


def test_every_returned_value_is_documented(mod: ModuleType, make_node) -> None:
    documented = set(yaml.safe_load(mod.RETURN))
    engine = Engine(open_host(make_node("h100-cxl", kernel="5.10.0-old")))
    loaded = load_profile(PROFILE)
    for check_mode in (True, False):
        result = engine.apply(loaded, dry_run=check_mode)
        ret, failed = mod.report(result, check_mode, False, True)
        assert failed is not None and failed[1] == 1  # blocked on this kernel, in both modes
        assert set(ret) | {"exit_code"} <= documented
    ret, failed = mod.report(Engine(open_host(make_node("h100-cxl"))).apply(loaded, dry_run=True), True, False, True)
    assert failed is None and ret["changed"] is True
    assert set(ret) <= documented


def test_check_mode_report_diff_and_changed(mod: ModuleType, make_node) -> None:
    root = make_node("h100-cxl")
    engine = Engine(open_host(root))
    loaded = load_profile(PROFILE)
    ret, failed = mod.report(engine.apply(loaded, dry_run=True), True, False, True)
    assert failed is None
    assert ret["status"] == "dry-run" and ret["msg"] == "check mode: 13 change(s) would be made, 2 unchanged"
    # the plan's summary first, as Ansible prints a prepared diff, then one pair per setting
    assert ret["diff"][0]["prepared"].startswith("nodeagent plan for profile cxl-inference on h100-cxl (simulated "
                                                 "h100-cxl): 13 would "
                                                 "change, 2 unchanged\n  ~ memory.auto_online_blocks: online -> ")
    # NUMA balancing is applied last (resources/knobs.py LATE): promotion starts once the rest is in place
    assert ret["diff"][-1] == {"before_header": "/proc/sys/kernel/numa_balancing",
                               "after_header": "/proc/sys/kernel/numa_balancing",
                               "before": "kernel.numa_balancing: 0 (disabled)\n",
                               "after": "kernel.numa_balancing: 2 (memory-tiering)\n"}
    assert ret["summary"][0] == "memory.auto_online_blocks: online -> offline"
    ret, _ = mod.report(engine.apply(loaded, dry_run=True), True, False, False)
    assert "diff" not in ret  # only in diff mode
    ret, failed = mod.report(engine.apply(loaded), False, False, True)
    assert failed is None and ret["changed"] and ret["status"] == "converged" and len(ret["diff"]) == 1 + 13
    ret, failed = mod.report(engine.apply(loaded), False, False, True)
    assert failed is None and not ret["changed"] and ret["status"] == "unchanged" and "diff" not in ret


def test_inline_or_path(mod: ModuleType) -> None:
    assert mod.is_inline("apiVersion: nodeagent/v1\nkind: NodeProfile\n")
    assert mod.is_inline("{apiVersion: nodeagent/v1}")
    assert not mod.is_inline("/etc/nodeagent/profiles/cxl-inference.yaml")


class _EngineWithChecks:
    """An engine whose apply takes ``skip_checks`` (what nodeagent with preflight checks offers)."""

    def apply(self, loaded: object, *, dry_run: bool = False, allow_disruptive: bool = False,
              skip_checks: frozenset[str] = frozenset()) -> None:
        raise NotImplementedError


def test_skip_checks_is_passed_only_to_an_engine_that_takes_it(mod: ModuleType, make_node) -> None:
    engine = Engine(open_host(make_node("h100-cxl")))
    if "skip_checks" in inspect.signature(engine.apply).parameters:
        pytest.skip("this nodeagent has preflight checks: covered by the checks tests")
    assert mod.apply_kwargs(engine, []) == ({}, [])
    kwargs, warnings = mod.apply_kwargs(engine, ["cpu"])
    assert kwargs == {} and warnings == ["skip_checks is ignored: this nodeagent has no preflight checks"]
    kwargs, warnings = mod.apply_kwargs(_EngineWithChecks(), ["cpu"])
    assert kwargs == {"skip_checks": frozenset({"cpu"})} and warnings == []


def test_ansible_doc_renders_the_module(tmp_path: Path) -> None:
    proc = subprocess.run([str(BIN / "ansible-doc"), "-t", "module", "nodeagent.tiering.reconcile"],
                          env=ansible_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "nodeagent.tiering.reconcile" in out
    for name in ("profile_dir", "allow_disruptive", "skip_checks", "root", "RETURN VALUES", "EXAMPLES"):
        assert name in out
    assert "[WARNING]" not in proc.stderr and "[ERROR]" not in proc.stderr


def test_a_disruptive_change_is_marked_in_the_diff_as_the_cli_marks_it(mod: ModuleType, make_node) -> None:
    """h100-cxl-autoonline's expanders are online in ZONE_NORMAL: the profile rezones them to movable, a disruptive
    change; the review (--check --diff) says so on the setting's pair and in the summary, as `nodeagent plan` does."""
    engine = Engine(open_host(make_node("h100-cxl-autoonline")))
    result = engine.apply(load_profile(PROFILE), dry_run=True, allow_disruptive=True)
    disruptive = [c for c in result.plan.changes if c.disruptive]
    assert disruptive, "the preset's rezone is disruptive"
    ret, _ = mod.report(result, True, True, True)
    pairs = {d["before_header"]: d for d in ret["diff"][1:]}
    for c in disruptive:
        pair = pairs[c.path or c.target]
        assert pair["after"].endswith("  [disruptive]\n") and pair["after_header"].endswith("  [disruptive]")
        assert f"~ {c.target}: " in ret["diff"][0]["prepared"]
    assert any(line.endswith("[disruptive]") for line in ret["summary"])
    assert not any(p["after"].endswith("[disruptive]\n") for h, p in pairs.items()
                   if h not in {c.path or c.target for c in disruptive})
