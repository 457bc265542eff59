"""Every DAMON user nodeagent does not own, in ``status`` and ``plan`` (text and JSON): another agent's kdamond
(running or stopped, with or without free slots beside it) and DAMON modules (DAMON_STAT enabled at boot,
DAMON_RECLAIM enabled by hand) whose kdamond runs outside DAMON sysfs."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel
from nodeagent_sim import dax as simdax
from nodeagent_sim.damon_presets import foreign_writes, start_foreign

from nodeagent.cli.main import main
from nodeagent.facts import gather
from nodeagent.facts.damon import from_facts
from nodeagent.host import open_host

K = "/sys/kernel/mm/damon/admin/kdamonds"
REPO = Path(__file__).resolve().parents[2]


def profile(tmp_path: Path, coexist: str = "refuse") -> str:
    p = tmp_path / f"users-{coexist}.yaml"
    p.write_text(textwrap.dedent(f"""\
        apiVersion: nodeagent/v1
        kind: NodeProfile
        metadata: {{name: damon-users}}
        damon:
          coexist: {coexist}
          kdamonds:
            - name: demote-cold
              targets: [{{node: fast}}]
              pairing: gather
              schemes:
                - action: migrate_cold
                  target_node: slow
                  access: {{size: {{min: 4KiB}}, nr_accesses: {{max: 0}}, age: {{min: 3s}}}}
        """))
    return str(p)


def run(capsys: pytest.CaptureFixture[str], root: Path, *args: str) -> tuple[int, str]:
    code = main(["--root", str(root), *args])
    out = capsys.readouterr()
    assert "Traceback" not in out.err, out.err
    return code, out.out


def doc(capsys: pytest.CaptureFixture[str], root: Path, *args: str) -> dict:
    return json.loads(run(capsys, root, "--format", "json", *args)[1])


def node0_range(root: Path) -> tuple[int, int]:
    """The first physical range of node 0, as the facts show it (a foreign kdamond monitoring it)."""
    return from_facts(gather(open_host(root))).node_ranges[0][0]


@pytest.fixture
def qemu(make_node):
    """qemu-3node with dax0.0 online as the slow node 2."""
    root = make_node("qemu-3node")
    k = SimKernel(root)
    with k.locked():
        simdax.to_system_ram(k, "dax0.0", "Movable")
    return root, k


def test_a_foreign_kdamond_without_a_free_slot(qemu, tmp_path, capsys) -> None:
    root, k = qemu
    lo, hi = node0_range(root)
    start_foreign(k, region=(lo, hi))
    users = doc(capsys, root, "status")["damon_users"]
    assert [(u["kind"], u["index"], u["running"], u["pid"], u["operations"], u["actions"], u["nodes"])
            for u in users] == [("kdamond", 0, True, 77, "paddr", ["pageout"], [0])]
    assert users[0]["monitors"] == f"{lo:#x}-{hi:#x}"
    assert "EBUSY" in users[0]["effect"] and "refused without damon.coexist: take-over" in users[0]["effect"]
    _, text = run(capsys, root, "status")
    assert "owned kdamonds: none" in text
    block = text[text.index("DAMON users nodeagent does not own: 1"):]
    assert block.splitlines()[1] == f"  kdamond 0 (running, pid 77; paddr; pageout; monitors {lo:#x}-{hi:#x} (node0))"

    code, text = run(capsys, root, "plan", profile(tmp_path))
    warning = next(ln for ln in text.splitlines() if ln.startswith("  warning: damon: kdamond 0"))
    assert "is not nodeagent's — the profile needs a new kdamond slot, which would stop it" in warning
    assert "refuses nr_kdamonds while any kdamond runs (EBUSY)" in warning
    assert warning.endswith("refused without damon.coexist: take-over")
    plan = doc(capsys, root, "plan", profile(tmp_path))
    assert warning.removeprefix("  warning: ") in plan["warnings"]
    assert any("no free kdamond slot" in p["message"] for p in plan["problems"])

    bare = tmp_path / "no-damon.yaml"  # a profile that manages no kdamond still hears about them
    bare.write_text("apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: bare}\n"
                    "kernel: {numa_balancing: memory-tiering}\n")
    assert any(w.startswith("damon: kdamond 0 (running, pid 77;") and w.endswith(
        "the profile builds no kdamond on this node: it is left untouched")
        for w in doc(capsys, root, "plan", str(bare))["warnings"])

    take = doc(capsys, root, "plan", profile(tmp_path, "take-over"))["warnings"]
    assert any(w.startswith("damon: kdamond 0 (running, pid 77;") and "take-over: this plan stops it and "
               "discards its configuration" in w for w in take)


@pytest.mark.parametrize("running", [True, False], ids=["running", "stopped"])
def test_a_foreign_kdamond_beside_free_slots_stays_listed_after_apply(qemu, tmp_path, capsys, running) -> None:
    root, k = qemu
    k.write(f"{K}/nr_kdamonds", "3")
    for path, value in foreign_writes(k, node0_range(root))[1:]:
        k.write(path, value)
    if running:
        k.write(f"{K}/0/state", "on")
    code, text = run(capsys, root, "plan", profile(tmp_path))
    warning = next(ln for ln in text.splitlines() if ln.startswith("  warning: damon: kdamond 0"))
    assert "have slots of their own (no nr_kdamonds rewrite)" in warning
    if running:
        assert "it keeps running beside them, untouched; it monitors node0, where damon.demote-cold (migrate_cold)" \
               " works too" in warning
    else:
        assert warning.startswith("  warning: damon: kdamond 0 (stopped; paddr; pageout;")
        assert warning.endswith("it is left untouched")
    code, _ = run(capsys, root, "apply", "--yes", profile(tmp_path))
    assert code == 0
    status = doc(capsys, root, "status")
    assert sorted(status["kdamonds"]["owned"]) == ["1"]  # nodeagent's, in a free slot
    assert [(u["index"], u["running"]) for u in status["damon_users"]] == [(0, running)]
    if not running:
        assert status["damon_users"][0]["effect"].startswith("stopped but configured: nodeagent leaves it")
    _, text = run(capsys, root, "status")
    assert "DAMON users nodeagent does not own: 1\n  kdamond 0 (" + ("running, pid" if running else "stopped;") in text


def test_damon_stat_enabled_at_boot(make_node, tmp_path, capsys) -> None:
    root = make_node("h100-cxl-damon-stat")
    k = SimKernel(root)
    assert k.tree.read("/sys/module/damon_stat/parameters/enabled") == "Y"
    assert not [p for p in (root / K[1:]).iterdir() if p.name.isdigit()]  # nothing under admin/
    threads = [int(p.parent.name) for p in (root / "proc").glob("*/comm") if p.read_text().strip() == "kdamond.0"]
    assert len(threads) == 1
    users = doc(capsys, root, "status")["damon_users"]
    assert [(u["kind"], u["name"], u["module"], u["pid"], u["operations"], u["actions"]) for u in users] == [
        ("module", "DAMON_STAT", "damon_stat", threads[0], "paddr", [])]
    assert users[0]["description"] == (f"DAMON_STAT (enabled, kdamond pid {threads[0]}; not under "
                                       "/sys/kernel/mm/damon/admin; paddr; monitoring only; monitors System RAM "
                                       "(its default region))")
    assert "(state=on → EBUSY), nodeagent's included" in users[0]["effect"]
    _, text = run(capsys, root, "status")
    assert f"DAMON users nodeagent does not own: 1\n  {users[0]['description']}\n      {users[0]['effect']}" in text

    # The shipped profile disables DAMON_STAT first on this 6.18 kernel (before its kdamonds); revert enables it.
    repo_profile = str(REPO / "profiles" / "cxl-inference.yaml")
    plan = doc(capsys, root, "plan", repo_profile)
    assert [c["target"] for c in plan["changes"] if c["kind"] == "damon"] == ["damon.module.damon_stat",
                                                                               "damon.kdamonds"]
    assert not plan["problems"] and not any("DAMON_STAT" in w for w in plan["warnings"])
    # A profile that keeps the module: its kdamonds cannot start while the module's runs.
    keep = tmp_path / "keep.yaml"
    keep.write_text(f"extends: [{repo_profile}]\ndamon: {{disable_modules: []}}\n")
    _, text = run(capsys, root, "plan", str(keep))
    warning = next(ln for ln in text.splitlines() if ln.startswith("  warning: damon: DAMON_STAT"))
    assert "the kernel runs a module's kdamond exclusively" in warning
    assert warning.endswith("cannot start while it runs")
    plan = doc(capsys, root, "plan", str(keep))
    assert warning.removeprefix("  warning: ") in plan["warnings"]
    assert any("damon_stat is enabled" in p["message"] for p in plan["problems"])


def test_damon_reclaim_enabled_and_disabled_by_hand(make_node, tmp_path, capsys) -> None:
    root = make_node("qemu-3node")
    code, out = run(capsys, root, "sim", "kdamond", str(root), "--module", "damon_reclaim")
    assert code == 0
    pid = int(SimKernel(root).tree.read("/sys/module/damon_reclaim/parameters/kdamond_pid"))
    assert re.fullmatch(rf"damon_reclaim: enabled, kdamond pid {pid} \(not under /sys/kernel/mm/damon/admin\)\n",
                        out)
    users = doc(capsys, root, "status")["damon_users"]
    assert [(u["name"], u["pid"], u["actions"]) for u in users] == [("DAMON_RECLAIM", pid, ["pageout"])]
    # it wrote the region it picked back: the largest System RAM range, node 1's (node 0's starts at 1 MiB)
    lo, hi = from_facts(gather(open_host(root))).node_ranges[1][0]
    assert (users[0]["monitors"], users[0]["nodes"]) == (f"{lo:#x}-{hi - 1:#x}", [1])
    # another module, or a foreign sysfs kdamond, cannot start beside it (the kernel's exclusive start)
    assert run(capsys, root, "sim", "kdamond", str(root), "--module", "damon_lru_sort")[0] == 1
    assert run(capsys, root, "sim", "kdamond", str(root), "--foreign")[0] == 1
    assert run(capsys, root, "sim", "kdamond", str(root), "--module", "damon_reclaim", "--state", "off")[0] == 0
    users = doc(capsys, root, "status")["damon_users"]
    assert [u["name"] for u in users] == ["kdamond 0"]  # the foreign one configured above, never started
    facts = doc(capsys, root, "facts")["sections"]["damon"]
    assert {m["module"]: (m["enabled"], m["pid"]) for m in facts["module_kdamonds"]} == {
        "damon_reclaim": (False, None), "damon_lru_sort": (False, None)}
