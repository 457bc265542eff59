"""Drift after outside changes (made through the simulator, as another writer), causes, history across runs,
status and revert — through the CLI on simulated nodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel
from nodeagent_sim.dax import to_system_ram

from nodeagent.drift import DriftItem
from nodeagent.drift.causes import find_causes
from nodeagent.host import open_host
from tests.e2e.cli_helpers import run

REPO = Path(__file__).resolve().parents[2]
PROFILE = str(REPO / "profiles" / "cxl-inference.yaml")


def put(root: Path, path: str, text: str) -> None:
    p = root / path.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


@pytest.fixture
def applied(make_node, capsys) -> Path:
    root = make_node("workstation")
    code, out, err = run(["--root", str(root), "apply", "--yes", PROFILE], capsys)
    assert code == 0, out + err
    return root


def test_converged_node_has_no_drift(applied: Path, capsys) -> None:
    code, out, _ = run(["--root", str(applied), "drift"], capsys)
    assert code == 0
    assert "No drift: the node matches profile cxl-inference." in out


def test_outside_changes_are_named_with_their_causes(applied: Path, capsys) -> None:
    k = SimKernel(applied)
    k.write("/proc/sys/kernel/numa_balancing", "1")  # another writer: a sysctl reload
    k.write("/sys/kernel/mm/transparent_hugepage/defrag", "never")  # another writer: TuneD
    k.write("/proc/sys/vm/zone_reclaim_mode", "1")  # someone by hand
    put(applied, "/etc/sysctl.d/99-numa.conf", "# from the base image\nkernel.numa_balancing = 1\n")
    put(applied, "/usr/lib/tuned/latency/tuned.conf", "[vm]\ntransparent_hugepage.defrag=never\n")
    put(applied, "/etc/tuned/active_profile", "latency\n")
    code, out, _ = run(["--root", str(applied), "drift"], capsys)
    assert code == 3
    assert "~ kernel.numa_balancing  expected 2 (memory-tiering), actual 1 (normal)  [knob]" in out
    assert ("likely cause: /etc/sysctl.d/99-numa.conf:2 sets kernel.numa_balancing = 1 (applied at boot by "
            "systemd-sysctl and by `sysctl --system`) — the value now on the node") in out
    assert ("likely cause: /usr/lib/tuned/latency/tuned.conf:2 sets transparent_hugepage.defrag = never (TuneD "
            "profile latency (not running now; applied when it starts), [vm]) — the value now on the node") in out
    assert "~ kernel.zone_reclaim_mode  expected 7, actual 1" in out
    assert "likely cause: none found" in out
    assert "3 drifted (knob: 3)" in out
    code, out, _ = run(["--root", str(applied), "--format", "json", "drift"], capsys)
    report = json.loads(out)
    assert code == 3 and report["converged"] is False and report["by_resource"] == {"knob": 3}
    nb = next(i for i in report["items"] if i["target"] == "kernel.numa_balancing")
    assert nb["causes"][0]["file"] == "/etc/sysctl.d/99-numa.conf" and nb["causes"][0]["line"] == 2


def test_drift_against_a_given_profile_and_without_any_apply(make_node, tmp_path: Path, capsys) -> None:
    root = make_node("workstation")
    code, _, err = run(["--root", str(root), "drift"], capsys)
    assert code == 1 and "no profile has been applied on this node yet" in err
    code, out, _ = run(["--root", str(root), "drift", PROFILE], capsys)
    assert code == 3 and "expected 2 (memory-tiering), actual 0 (disabled)" in out


def test_record_keeps_first_seen_and_history_across_runs(applied: Path, capsys) -> None:
    root = str(applied)
    k = SimKernel(applied)
    k.write("/proc/sys/kernel/numa_balancing", "1")
    code, out, _ = run(["--root", root, "drift", "--record"], capsys)
    assert code == 3 and "first seen" in out and "not recorded" not in out
    first = json.loads((applied / "var/lib/nodeagent/drift.json").read_text())
    seen = first["items"]["knob:kernel.numa_balancing"]["first_seen"]
    # A second run (a new process in real life) keeps the first sighting and journals nothing new.
    code, _, _ = run(["--root", root, "drift", "--record"], capsys)
    again = json.loads((applied / "var/lib/nodeagent/drift.json").read_text())
    assert again["items"]["knob:kernel.numa_balancing"]["first_seen"] == seen
    # The value moves again: a new drift event; someone puts THP back by hand... then apply fixes the rest.
    k.write("/proc/sys/kernel/numa_balancing", "0")
    k.write("/sys/kernel/mm/numa/demotion_enabled", "0")
    run(["--root", root, "drift", "--record"], capsys)
    k.write("/sys/kernel/mm/numa/demotion_enabled", "1")
    run(["--root", root, "drift", "--record"], capsys)
    code, _, _ = run(["--root", root, "apply", "--yes", PROFILE], capsys)
    assert code == 0
    code, out, _ = run(["--root", root, "--format", "json", "history"], capsys)
    events = [(e["event"], e.get("target"), e.get("actual"), e.get("by")) for e in json.loads(out)["events"]]
    assert events == [
        ("apply", None, None, None),
        ("drift", "kernel.numa_balancing", "1 (normal)", None),
        ("drift", "kernel.demotion_enabled", "false", None),
        ("drift", "kernel.numa_balancing", "0 (disabled)", None),
        ("resolved", "kernel.demotion_enabled", None, "outside nodeagent"),
        ("apply", None, None, None),
        ("resolved", "kernel.numa_balancing", None, "apply"),
    ]
    assert json.loads((applied / "var/lib/nodeagent/drift.json").read_text())["items"] == {}
    code, out, _ = run(["--root", root, "history", "--resource", "knob", "--event", "drift"], capsys)
    assert code == 0 and out.count("drift kernel.") == 3
    code, out, _ = run(["--root", root, "history", "--since", "1h", "--limit", "1"], capsys)
    assert "resolved kernel.numa_balancing [knob] by apply" in out and out.count("\n") == 1
    code, _, err = run(["--root", root, "history", "--since", "last tuesday"], capsys)
    assert code == 64 and "--since 'last tuesday'" in err


def test_status_is_the_first_screen(applied: Path, capsys) -> None:
    SimKernel(applied).write("/proc/sys/kernel/numa_balancing", "1")
    run(["--root", str(applied), "drift", "--record"], capsys)
    code, out, _ = run(["--root", str(applied), "status"], capsys)
    assert code == 0
    assert "last apply: profile cxl-inference at" in out and "converged (10 applied, 0 failed, 0 blocked)" in out
    assert "drift: 1 (knob: 1)" in out and "~ kernel.numa_balancing: expected 2 (memory-tiering), actual 1" in out
    assert "since " in out
    assert "managed by nodeagent (revert restores what they were): kernel.demotion_enabled" in out
    assert "owned kdamonds: none" in out
    assert "memory tiers (faster first): memory_tier4=[0]" in out
    assert "node0  tier   4" in out and "of    256GiB used" in out
    code, out, _ = run(["--root", str(applied), "--format", "json", "status"], capsys)
    s = json.loads(out)
    assert s["nodes"][0]["total_bytes"] == 256 * 1024**3 and s["drift"]["by_resource"] == {"knob": 1}


def test_status_lists_owned_kdamonds_without_inventing_statistics(applied: Path, capsys) -> None:
    state = applied / "var/lib/nodeagent/ownership.json"
    config = {"contexts/nr_contexts": "1", "contexts/0/operations": "paddr"}
    state.write_text(json.dumps({"damon": {"kdamonds": {"0": {"name": "cxl-cold", "pid": 321, "config": config}}}}))
    code, out, _ = run(["--root", str(applied), "status"], capsys)
    assert code == 0
    # The record names a kdamond this node does not have (any more): said so, and no statistics shown.
    assert "owned kdamonds: none" in out
    assert "cxl-cold: kdamond 0, recorded by nodeagent, no longer exists" in out
    assert "scheme " not in out


def test_revert_restores_originals_and_forgets_them(applied: Path, capsys) -> None:
    root = str(applied)
    k = SimKernel(applied)
    code, out, _ = run(["--root", root, "revert", "--dry-run"], capsys)
    assert code == 0 and "~ kernel.numa_balancing  2 (memory-tiering) → 0 (disabled)" in out
    assert "10 to revert (dry run: nothing was written)." in out
    assert k.tree.read("/proc/sys/kernel/numa_balancing") == "2"
    code, out, _ = run(["--root", root, "revert", "--yes", "--only", "kernel.numa_balancing"], capsys)
    assert code == 0 and "✓ kernel.numa_balancing: 2 (memory-tiering) → 0 (disabled)" in out
    assert k.tree.read("/proc/sys/kernel/numa_balancing") == "0"
    originals = json.loads((applied / "var/lib/nodeagent/originals.json").read_text())["originals"]
    assert "kernel.numa_balancing" not in originals and "kernel.demotion_enabled" in originals
    code, out, _ = run(["--root", root, "revert", "--yes"], capsys)
    assert code == 0
    assert k.tree.read("/sys/kernel/mm/numa/demotion_enabled") == "false"
    assert k.tree.read("/sys/kernel/mm/transparent_hugepage/defrag") == "always defer defer+madvise [madvise] never"
    assert k.tree.read("/sys/devices/system/memory/auto_online_blocks") == "online"
    assert json.loads((applied / "var/lib/nodeagent/originals.json").read_text())["originals"] == {}
    code, out, _ = run(["--root", root, "drift"], capsys)
    assert code == 0 and "by nodeagent revert; nothing managed" in out  # a normal state, not an error
    code, out, _ = run(["--root", root, "revert", "--yes"], capsys)
    assert code == 0 and "nodeagent recorded no original values" in out
    code, _, err = run(["--root", root, "revert", "--yes", "--only", "kernel.nope"], capsys)
    assert code == 1 and "kernel.nope: nodeagent has no original value recorded" in (err + _)
    code, out, _ = run(["--root", root, "history", "--event", "revert"], capsys)
    assert out.count("revert: converged") == 3 and "revert: converged — nothing to revert" in out


def test_revert_refuses_disruptive_changes_without_the_flag(make_node, capsys) -> None:
    """A kind whose revert is disruptive (a stand-in kind owning zone_reclaim_mode), through the one executor."""
    from nodeagent.kinds.base import Kind, check_kind
    from nodeagent.kinds.registry import BY_KIND
    from nodeagent.plan import Change

    path = "/proc/sys/vm/zone_reclaim_mode"

    class Zone(Kind):  # a kind owns its revert: plan it from the recorded original, apply it with its own apply
        kind = "zone"
        writes = (path,)
        revertible = True

        def plan(self, loaded, facts, ctx):  # type: ignore[no-untyped-def]
            raise AssertionError("only reverted here")

        def revert(self, target, rec, facts, state):  # type: ignore[no-untyped-def]
            now = (root / path.lstrip("/")).read_text().strip()
            return [] if now == rec.value else [Change("zone", target, "revert", now, rec.value, disruptive=True,
                                                       path=path)]

        def apply(self, host, change, actx):  # type: ignore[no-untyped-def]
            host.write(change.path, change.after)
            return "done"

    root = make_node("qemu-3node")
    k = SimKernel(root)
    k.write(path, "1")
    put(root, "/var/lib/nodeagent/originals.json", json.dumps({"reclaim": {"kind": "zone", "value": "0"}}))
    assert check_kind(Zone()) == []
    BY_KIND["zone"] = Zone()
    try:
        code, out, _ = run(["--root", str(root), "revert", "--yes"], capsys)
        assert code == 5 and "reclaim: 1 → 0 — blocked: disruptive" in out
        assert k.tree.read(path) == "1"
        code, out, _ = run(["--root", str(root), "revert", "--yes", "--allow-disruptive"], capsys)
        assert code == 0 and k.tree.read(path) == "0"
    finally:
        del BY_KIND["zone"]


def test_cause_of_dax_drift_is_an_offlined_block(make_node) -> None:
    root = make_node("qemu-3node")
    k = SimKernel(root)
    with k.locked():
        blocks = to_system_ram(k, "dax0.0", "Movable")
    k.write(f"/sys/devices/system/memory/memory{blocks[2]}/state", "offline")  # someone: daxctl offline-memory
    item = DriftItem("dax", "memory.dax[pmem].dax0.0", "online_movable", "partially offline",
                     "online_movable", "partially offline")
    causes = find_causes(open_host(root), item)
    assert [c.message for c in causes] == [
        f"memory block {blocks[2]} of dax0.0 offline (taken offline after the apply: `daxctl offline-memory`, or a "
        "write to memoryN/state)"]


def test_cause_of_damon_drift_is_an_enabled_damon_module(make_node) -> None:
    root = make_node("workstation")
    put(root, "/sys/module/damon_lru_sort/parameters/enabled", "Y\n")
    put(root, "/sys/module/damon_lru_sort/parameters/kdamond_pid", "77\n")
    item = DriftItem("damon", "damon.kdamonds[cxl-cold]", "on", "off", "on", "off")
    assert [c.source for c in find_causes(open_host(root), item)] == ["damon-module"]
    assert "DAMON_LRU_SORT is enabled" in find_causes(open_host(root), item)[0].message


def test_reboot_after_the_last_apply_is_a_cause(applied: Path) -> None:
    last = json.loads((applied / "var/lib/nodeagent/last-applied.json").read_text())
    from datetime import datetime

    from nodeagent.state import LastApplied

    applied_at = datetime.strptime(last["time"], "%Y-%m-%dT%H:%M:%S%z").timestamp()
    put(applied, "/proc/stat", f"cpu 1 2 3\nbtime {int(applied_at) + 60}\n")
    put(applied, "/proc/cmdline", "ro memhp_default_state=online")
    item = DriftItem("knob", "memory.auto_online_blocks", "offline", "online", "offline", "online")
    causes = find_causes(open_host(applied), item, LastApplied.from_json(last))
    assert causes[0].source == "reboot"
    assert "is nodeagent-apply.service enabled?" in causes[0].message
    assert "memhp_default_state=online" in causes[0].message
