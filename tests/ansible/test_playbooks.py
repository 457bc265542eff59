"""The collection under the real ansible-playbook: several local hosts, each its own simulated node.

First run changes, second does not; --check --diff shows a diff per host and writes nothing; a failing host
fails alone while the others converge; serial batches and forks; the example inventory and playbook as shipped.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel
from playbook_helpers import REPO, ansible_env, playbook, write_inventory

pytestmark = pytest.mark.ansible

PROFILES = str(REPO / "profiles")


def journal_lengths(roots: dict[str, Path]) -> dict[str, int]:
    return {name: len(SimKernel(root).journal()) for name, root in roots.items()}


def test_converge_in_serial_batches_then_second_run_is_unchanged(make_node, tmp_path: Path) -> None:
    roots = {"cxl-a": make_node("h100-cxl"), "cxl-b": make_node("h100-cxl-autoonline"),
             "ws": make_node("workstation")}
    inv = write_inventory(tmp_path / "inventory.yml", roots)
    env = ansible_env(tmp_path)
    run = playbook(inv, "converge.yml", "-e", f"profiles={PROFILES}", "-e", "batch=2", "--forks", "2", env=env)
    assert run.rc == 0, run.out
    assert run.out.count("PLAY [Converge simulated nodes]") == 2  # two serial batches: 2 hosts, then 1
    assert {h: r["changed"] for h, r in run.recap().items()} == {"cxl-a": 1, "cxl-b": 1, "ws": 1}
    assert all(r["failed"] == 0 for r in run.recap().values())
    for root in roots.values():
        tree = SimKernel(root).tree
        assert tree.read("/proc/sys/kernel/numa_balancing") == "2"
        assert tree.read("/sys/devices/system/memory/auto_online_blocks") == "offline"
        last = json.loads((root / "var/lib/nodeagent/last-applied.json").read_text())
        assert (last["profile"], last["status"]) == ("cxl-inference", "unchanged")  # the second reconcile's record
        originals = json.loads((root / "var/lib/nodeagent/originals.json").read_text())
        assert originals["originals"]["kernel.numa_balancing"]["value"] == 0
    # A second ansible-playbook run: nothing to do anywhere.
    again = playbook(inv, "converge.yml", "-e", f"profiles={PROFILES}", "-e", "expect_change=false", env=env)
    assert again.rc == 0, again.out
    assert {h: r["changed"] for h, r in again.recap().items()} == {"cxl-a": 0, "cxl-b": 0, "ws": 0}


def test_check_diff_shows_each_hosts_diff_and_writes_nothing(make_node, tmp_path: Path) -> None:
    roots = {"cxl": make_node("h100-cxl"), "ws": make_node("workstation")}
    inv = write_inventory(tmp_path / "inventory.yml", roots)
    before = journal_lengths(roots)
    run = playbook(inv, "converge.yml", "-e", f"profiles={PROFILES}", "--check", "--diff", env=ansible_env(tmp_path))
    assert run.rc == 0, run.out
    assert journal_lengths(roots) == before
    for root in roots.values():
        assert not (root / "var/lib/nodeagent").exists()  # not even the state records
    assert {h: r["changed"] for h, r in run.recap().items()} == {"cxl": 2, "ws": 2}
    # One before/after pair per setting, twice per host (the playbook reconciles twice).
    assert run.out.count("--- before: /proc/sys/kernel/numa_balancing\n"
                         "+++ after: /proc/sys/kernel/numa_balancing\n"
                         "@@ -1 +1 @@\n"
                         "-kernel.numa_balancing: 0 (disabled)\n"
                         "+kernel.numa_balancing: 2 (memory-tiering)\n") == 4
    assert run.out.count("+++ after: /sys/devices/system/memory/auto_online_blocks") == 4
    assert "+kernel.demotion_enabled: true" in run.out


def test_a_failing_host_fails_alone_and_the_others_converge(make_node, tmp_path: Path) -> None:
    roots = {"new": make_node("h100-cxl"), "old": make_node("h100-cxl", kernel="5.10.0-old"),
             "ws": make_node("workstation")}
    inv = write_inventory(tmp_path / "inventory.yml", roots)
    env = ansible_env(tmp_path)
    check = playbook(inv, "converge.yml", "-e", f"profiles={PROFILES}", "--check", "--forks", "3", env=env)
    assert check.rc == 2, check.out  # check mode predicts the failure
    assert check.recap()["old"]["failed"] == 1
    assert journal_lengths(roots) == {"new": 0, "old": 0, "ws": 0}

    run = playbook(inv, "converge.yml", "-e", f"profiles={PROFILES}", "--forks", "3", env=env)
    assert run.rc == 2, run.out
    recap = run.recap()
    assert recap["old"]["failed"] == 1 and recap["old"]["changed"] == 0
    assert recap["new"] == {**recap["new"], "failed": 0, "changed": 1}
    assert recap["ws"] == {**recap["ws"], "failed": 0, "changed": 1}
    # The CLI's message, with what the node cannot do, and the plan in the result.
    assert "nothing was applied: the plan has problems this node cannot carry out" in run.out
    assert "needs kernel 5.18; this node runs 5.10.0-old" in run.out
    assert '"exit_code": 1' in run.out and '"plan": {' in run.out
    assert journal_lengths(roots)["old"] == 0
    assert SimKernel(roots["new"]).tree.read("/proc/sys/kernel/numa_balancing") == "2"


def test_inline_profiles_and_clear_failures(make_node, tmp_path: Path) -> None:
    inv = write_inventory(tmp_path / "inventory.yml", {"node": make_node("h100-cxl")}, profiles=PROFILES)
    run = playbook(inv, "inline.yml", env=ansible_env(tmp_path))
    assert run.rc == 0, run.out
    assert "...ignoring" in run.out  # the three expected failures, asserted on inside the playbook
    assert run.recap()["node"]["failed"] == 0


def test_a_target_python_without_nodeagent_gets_told_how_to_install_it(make_node, tmp_path: Path) -> None:
    system = shutil.which("python3", path="/usr/bin:/bin")
    if system is None or Path(system).resolve() == Path(sys.executable).resolve():
        pytest.skip("no system python3 apart from the test's")
    inv = write_inventory(tmp_path / "inventory.yml", {"node": {"nodeagent_root": str(make_node("workstation")),
                                                                "ansible_python_interpreter": system}})
    run = playbook(inv, "converge.yml", "-e", f"profiles={PROFILES}", env=ansible_env(tmp_path))
    if "changed: [node]" in run.out:
        pytest.skip(f"{system} can import nodeagent")
    assert run.rc == 2
    assert "Failed to import the required Python library (nodeagent)" in run.out
    assert "install it into a virtualenv there and set ansible_python_interpreter" in run.out


def test_example_inventory_and_playbook_as_shipped(make_node, tmp_path: Path) -> None:
    """The README's commands: --check --diff shows each host's diff and writes nothing; then converge; then 0."""
    # Boot three hosts from the session's templates (a fresh l40-kvm64 takes seconds to lay out); the playbook
    # boots the fourth itself with `nodeagent sim create`. The fleet sits beside them, on their filesystem: a
    # move is a rename (a simulated node holds device nodes, which a copy across filesystems cannot read).
    nodes = {host: make_node(preset) for host, preset in {"gpu-cxl-01": "h100-cxl", "gpu-cxl-02": "h100-cxl-autoonline",
                                                          "gpu-l40-01": "l40-kvm64"}.items()}
    fleet = next(iter(nodes.values())).parent / "fleet"
    fleet.mkdir()
    for host, node in nodes.items():
        shutil.move(node, fleet / host)
    env = ansible_env(tmp_path, NODEAGENT_FLEET_DIR=str(fleet))
    env.pop("ANSIBLE_COLLECTIONS_PATH")  # found through ansible/examples/collections, as a user would
    inv, site = REPO / "ansible/examples/inventory.yml", REPO / "ansible/examples/site.yml"
    hosts = ("gpu-cxl-01", "gpu-cxl-02", "gpu-l40-01", "workstation-01")

    check = playbook(inv, site, "--check", "--diff", env=env)
    assert check.rc == 0, check.out
    roots = {h: fleet / h for h in hosts}
    assert journal_lengths(roots) == dict.fromkeys(hosts, 0)
    assert not any((r / "var/lib/nodeagent").exists() for r in roots.values())
    assert {h: r["changed"] for h, r in check.recap().items()} == dict.fromkeys(hosts, 1)
    assert check.out.count("+kernel.numa_balancing: 2 (memory-tiering)") == 3  # workstation-01 runs base.yaml
    assert check.out.count("+kernel.transparent_hugepage.defrag: defer+madvise") == 4
    # the plan's summary above each host's pairs, and the node's warnings as the play's warnings
    assert check.out.count("nodeagent plan for profile cxl-inference on ") == 3
    assert "would change, " in check.out
    assert "  ~ kernel.numa_balancing: 0 (disabled) -> 2 (memory-tiering)" in check.out
    assert re.search(r"\[WARNING\]: [^:\n]+: check coexistence warned: ", check.out), check.out  # names its host

    run = playbook(inv, site, env=env)
    assert run.rc == 0, run.out
    assert "change(s) and verified them, " in run.out
    assert '"kernel.numa_balancing: 0 (disabled) -> 2 (memory-tiering)"' in run.out  # the summary in the debug
    assert {h: r["changed"] for h, r in run.recap().items()} == dict.fromkeys(hosts, 1)
    again = playbook(inv, site, env=env)
    assert again.rc == 0, again.out
    assert {h: r["changed"] for h, r in again.recap().items()} == dict.fromkeys(hosts, 0)
    # the third run changes nothing: the warnings the first two showed are not repeated (they are in node_warnings)
    assert "check coexistence warned" not in again.out and "dest_free schemes" not in again.out, again.out
    assert "[WARNING]" not in again.out, again.out


def test_failed_checks_fail_the_task_with_what_they_found_and_the_exit_code(make_node, tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text("apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: t}\n"
                       "kernel: {transparent_hugepage: {enabled: madvise}}\n"
                       "checks: {cpu: {require_flags: [no_such_flag]}, coexistence: {severity: warning}}\n")
    book = tmp_path / "book.yml"
    book.write_text(f"""
- hosts: nodes
  gather_facts: false
  tasks:
    - nodeagent.tiering.reconcile: {{profile: {profile}, root: "{{{{ nodeagent_root }}}}"}}
""")
    root = make_node("h100-cxl")
    inv = write_inventory(tmp_path / "inventory.yml", {"node": root})
    before = journal_lengths({"node": root})
    run = playbook(inv, book, env=ansible_env(tmp_path))
    assert run.rc == 2, run.out
    assert "preflight checks failed (exit 4): cpu: " in run.out and "no_such_flag" in run.out
    assert '"exit_code": 4' in run.out
    assert ": check coexistence warned: " in run.out  # warnings reach the play even when it fails
    assert journal_lengths({"node": root}) == before


def test_a_review_run_of_the_example_installs_nothing() -> None:
    """site.yml's install tasks honour check mode (no ``check_mode: false``): ``--check`` must not install packages
    or copy files onto a node. Only the simulated boot (the stand-in for hardware) and the controller-side wheel
    build run in check mode; the reconcile waits for an installed nodeagent in check mode instead of failing."""
    import yaml

    plays = yaml.safe_load((REPO / "ansible/examples/site.yml").read_text())
    tasks = [t for play in plays for t in play["tasks"]]
    forced = {t["name"] for t in tasks if t.get("check_mode") is False}
    assert forced == {"Boot the simulated node", "Build the nodeagent wheel on the controller"}
    installs = [t for t in tasks if {"ansible.builtin.apt", "ansible.builtin.pip", "ansible.builtin.copy"} & t.keys()]
    assert len(installs) == 4 and all("check_mode" not in t for t in installs)
    (build,) = [t for t in tasks if t["name"] == "Build the nodeagent wheel on the controller"]
    assert build["delegate_to"] == "localhost"
    (reconcile,) = [t for t in tasks if "nodeagent.tiering.reconcile" in t]
    assert "installed.stat" in reconcile["when"]


def test_warnings_once_per_profile_and_kernel_even_when_nothing_changes(make_node, tmp_path: Path) -> None:
    """A node another run converged (``--format json``: nobody read its advisories): the first task says them
    although it changes nothing, the next keeps them in node_warnings only, and after a kernel upgrade the next
    says them again. Check mode reads the record and writes nothing."""
    root = make_node("h100-cxl")
    converge = subprocess.run([sys.executable, "-m", "nodeagent", "--root", str(root), "--format", "json", "apply",
                               "--yes", f"{PROFILES}/cxl-inference.yaml"], capture_output=True, text=True)
    assert converge.returncode == 0, converge.stderr
    book = tmp_path / "book.yml"
    book.write_text(f"""
- hosts: nodes
  gather_facts: false
  tasks:
    - nodeagent.tiering.reconcile: {{profile: {PROFILES}/cxl-inference.yaml, root: "{{{{ nodeagent_root }}}}"}}
      register: r
    - ansible.builtin.debug: {{msg: "said: {{{{ r.msg }}}}; kept: {{{{ r.node_warnings | length }}}}"}}
""")
    inv = write_inventory(tmp_path / "inventory.yml", {"node": root})
    env = ansible_env(tmp_path)
    record = root / "var/lib/nodeagent/advisories.json"

    def reconcile(*args: str) -> str:
        run = playbook(inv, book, *args, env=env)
        assert run.rc == 0 and run.recap()["node"]["changed"] == 0, run.out
        return run.out

    out = reconcile("--check")  # check mode: said (first time), recorded nothing
    assert "dest_free schemes" in out and "[WARNING]: h100-cxl" in out and not record.exists()
    out = reconcile()
    assert "dest_free schemes" in out and "oom-guard" not in out  # no swap, min_ttl_ms 0: no OOM-guard advisory
    assert "said: the node matches the profile;" in out and record.exists()
    out = reconcile()
    assert "[WARNING]" not in out, out
    assert re.search(r"said: the node matches the profile \(\d+ warnings? already shown for this profile and "
                     r"kernel: in node_warnings\); kept: \d+", out), out
    release = root / "proc/sys/kernel/osrelease"  # rebooted into another kernel: said again, once
    release.unlink()
    release.write_text("6.12.9-upgraded\n")
    assert "dest_free schemes" in reconcile()
    assert "[WARNING]" not in reconcile()
