"""nodeagent's scenarios on the real 6.12 kernel (QEMU guest) and on the simulator's ``qemu-3node`` preset.

Three boots, each running one script of steps (see worlds.py); the same steps run against a fresh simulated
node. Every test first checks what the scenario promises on the REAL kernel, then that the simulator showed
the same thing: a difference of the second kind names the step and the values, and is the simulator's to fix.

1. ``apply profiles/cxl-inference.yaml`` converges (auto-online handled, dax0.0 online as Movable on the new
   CPU-less node 2, numa_balancing and demotion set, the kdamonds running); a second apply has nothing to do;
   ``drift`` is clean. 2. Then changes from outside (numa_balancing back to 0, a kdamond stopped, a block
   offlined): ``drift`` names each one.
4. daxctl missing: the clear error, exit 1, nothing written. 3. Then, daxctl back, a kdamond started by
   someone else before nodeagent runs: everything else is applied, that kdamond keeps running untouched,
   exit 5 naming it.
5. The kernel onlines dax0.0 itself (bound to kmem while auto_online_blocks=online, as dax_cxl/kmem do at
   boot: h100-cxl-autoonline's situation): the plan is disruptive; ``--allow-disruptive`` moves it to Movable.
6. The CXL node fills (a tmpfs bound to node 2, leaving 5 % of it free): the shipped profile's ``dest_free``
   pauses both demotion schemes (their minimum region size 2^64-1, committed with the same pid), the next plan
   is empty; emptied again, the next apply resumes them.

The profile's preflight checks cannot pass in either world (the guest's CPU is QEMU TCG, which the ``cpu``
check rejects as a virtual model, and it has no /models disk for ``disk``; the qemu-3node preset mirrors
that), so every apply runs with ``--skip-checks all``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import harness
import pytest
from nodeagent_sim import SimKernel, create
from nodeagent_sim.damon_presets import foreign_writes
from worlds import (
    Agent,
    Dump,
    Outcome,
    Setup,
    Writes,
    apply_summary,
    assert_same,
    drift_summary,
    dump_summary,
    plan_summary,
    run_guest,
    run_sim,
)

pytestmark = pytest.mark.realkernel

PROFILE = harness.REPO_ROOT / "profiles" / "cxl-inference.yaml"
APPLY = f"apply --yes --skip-checks all {PROFILE}"  # --skip-checks all: see the module docstring
MEM = "/sys/devices/system/memory"
KD = "/sys/kernel/mm/damon/admin/kdamonds"
DAX = "/sys/bus/dax/drivers"
NODE1 = (4 << 30, 6 << 30)  # node1's DRAM [4G, 6G): what the foreign kdamond monitors
BLOCK = 52  # one of node2's blocks (dax0.0 covers memory49..55)

# qemu-3node starts with dax0.0 already devdax; the guest boots with the legacy pmem namespace in fsdax mode.
NAMESPACE = Setup("namespace", "ndctl create-namespace -f -e namespace0.0 -m devdax >/dev/null")


def _hide_daxctl(root: Path) -> None:
    os.rename(root / "usr/bin/daxctl", root / "usr/bin/daxctl.hidden")


def _restore_daxctl(root: Path) -> None:
    os.rename(root / "usr/bin/daxctl.hidden", root / "usr/bin/daxctl")


CONVERGE = [
    NAMESPACE,
    Dump("before"),
    Agent("apply", APPLY),
    Dump("applied"),
    Agent("apply-again", APPLY),
    Agent("drift-clean", "drift"),
    Agent("facts", "facts"),
    Writes("outside", (("/proc/sys/kernel/numa_balancing", "0"), (f"{KD}/1/state", "off"),
                       (f"{MEM}/memory{BLOCK}/state", "offline"))),
    Agent("drift", "drift"),
    Dump("drifted"),
]


def _refuse_then_coexist(foreign: tuple[tuple[str, str], ...]) -> list:
    return [
        NAMESPACE,
        # nodeagent finds daxctl on PATH (shutil.which): move every copy away (/bin is /usr/bin: dedupe)
        Setup("hide-daxctl", "for p in $(which -a daxctl | xargs -r readlink -f | sort -u); do "
              'mv "$p" "$p.hidden"; done; ! command -v daxctl', _hide_daxctl),
        Dump("before"),
        Agent("apply-no-daxctl", APPLY),
        Dump("after-refusal"),
        Setup("restore-daxctl", "for p in /usr/local/*bin/daxctl.hidden /usr/*bin/daxctl.hidden; do "
              '[ -e "$p" ] && mv "$p" "${p%.hidden}"; done; command -v daxctl', _restore_daxctl),
        Writes("foreign", (*foreign, (f"{KD}/0/state", "on"))),
        Dump("foreign-running"),
        Agent("apply-foreign", APPLY),
        Dump("after-foreign"),
    ]


AUTO_ONLINED = [
    NAMESPACE,
    # what dax_cxl + kmem do at boot, by hand: dax0.0 leaves device_dax and kmem hot-adds it while the
    # kernel's policy is auto_online_blocks=online; the bind after new_id shows the errno of an attached device
    Writes("kmem-takes-it", ((f"{DAX}/device_dax/unbind", "dax0.0"), (f"{DAX}/kmem/new_id", "dax0.0"),
                             (f"{DAX}/kmem/bind", "dax0.0"))),
    Dump("kernel-onlined"),
    Agent("plan", f"plan {PROFILE}"),
    Agent("apply-disruptive", f"apply --yes --allow-disruptive --skip-checks all {PROFILE}"),
    Dump("moved"),
]


# The CXL node filled by a tmpfs bound to it until 5 % of it is free (the shipped profile pauses demotion under
# 10 %), and emptied again; the simulator's node gets the same free memory.
_NODE2 = "/sys/devices/system/node/node2/meminfo"
FILL = ("mkdir -p /run/fill && mount -t tmpfs -o size=4g,mpol=bind:2 fill /run/fill && "
        f"free=$(awk '/MemFree/ {{print $4}}' {_NODE2}) && total=$(awk '/MemTotal/ {{print $4}}' {_NODE2}) && "
        "dd if=/dev/zero of=/run/fill/x bs=1K count=$((free - total / 20)) 2>/dev/null && "
        f"grep MemFree {_NODE2}")


def _sim_free(pct: int) -> Callable[[Path], None]:
    def fill(root: Path) -> None:
        from nodeagent_sim import memory

        k = SimKernel(root)
        with k.locked():
            total_kb = memory.set_free(k, 2, 0)[0]
            memory.set_free(k, 2, total_kb * pct // 100)

    return fill


GUARD = [
    NAMESPACE,
    Agent("apply", APPLY),
    Dump("applied"),
    Setup("fill", FILL, _sim_free(5)),
    Agent("plan-full", f"plan {PROFILE}"),
    Agent("apply-pause", APPLY),
    Dump("paused"),
    Agent("plan-paused", f"plan --detailed-exitcode {PROFILE}"),
    Setup("drain", "rm /run/fill/x && umount /run/fill", _sim_free(97)),
    Agent("apply-resume", APPLY),
    Dump("resumed"),
]


# --------------------------------------------------------------------------- fixtures: one boot each


@pytest.fixture(scope="module")
def sim_root(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A factory of fresh simulated qemu-3node nodes."""
    base = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else tmp_path_factory.mktemp("scen")
    made: list[Path] = []

    def make(name: str) -> Path:
        root = base / f"nodeagent-rkscen-{os.getpid()}-{name}"
        if root.exists():
            shutil.rmtree(root)
        made.append(create(root, "qemu-3node"))
        return root

    yield make
    for root in made:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def venv(guest: harness.Guest) -> harness.Guest:
    if not harness.venv_python().exists():
        pytest.skip(f"realkernel: no project virtualenv at {harness.venv_python()} (run make test)")
    return guest


Worlds = tuple[dict[str, Outcome], dict[str, Outcome]]


def _both(guest: harness.Guest, sim_root, name: str, actions: list) -> Worlds:  # type: ignore[no-untyped-def]
    sim = run_sim(sim_root(name), actions)
    real, res = run_guest(guest, actions, label=f"scenario-{name}")
    took = ", ".join(f"{n} {s.seconds:.1f}s" for n, s in res.steps.items() if s.seconds and s.seconds >= 1)
    print(f"\n[realkernel] scenario {name}: {res.guest.wall_seconds:.1f}s wall ({took})")
    return real, sim


@pytest.fixture(scope="module")
def converge(venv: harness.Guest, sim_root) -> Worlds:  # type: ignore[no-untyped-def]
    return _both(venv, sim_root, "converge", CONVERGE)


@pytest.fixture(scope="module")
def refuse(venv: harness.Guest, sim_root) -> Worlds:  # type: ignore[no-untyped-def]
    root = sim_root("writes")  # only to derive the foreign kdamond's writes for this kernel generation
    foreign = tuple(foreign_writes(SimKernel(root), NODE1))
    return _both(venv, sim_root, "refuse", _refuse_then_coexist(foreign))


@pytest.fixture(scope="module")
def autoonline(venv: harness.Guest, sim_root) -> Worlds:  # type: ignore[no-untyped-def]
    return _both(venv, sim_root, "autoonline", AUTO_ONLINED)


@pytest.fixture(scope="module")
def guarded(venv: harness.Guest, sim_root) -> Worlds:  # type: ignore[no-untyped-def]
    return _both(venv, sim_root, "guard", GUARD)


def ok(worlds: Worlds, step: str, rc: int = 0) -> tuple[Outcome, Outcome]:
    """Both worlds' outcomes of ``step``; the real one must exit ``rc``, the simulator the same."""
    real, sim = worlds[0][step], worlds[1][step]
    assert real.rc == rc, f"real kernel, {step}: rc {real.rc}, expected {rc}\n{real.stdout[-3000:]}{real.stderr}"
    assert_same(f"the exit code of {step}", real.rc, sim.rc)
    return real, sim


def same_dump(worlds: Worlds, step: str) -> dict[str, str]:
    real = dump_summary(worlds[0][step])
    assert_same(f"the kernel state after {step}", real, dump_summary(worlds[1][step]))
    return real


def running(dump: dict[str, str]) -> dict[str, str]:
    return {k.split("/")[1]: v for k, v in dump.items() if k.startswith("damon/") and k.endswith("/state")}


def blocks(dump: dict[str, str], attr: str) -> set[str]:
    return {v for k, v in dump.items() if "/node2/memory" in k and k.endswith(attr)}


# --------------------------------------------------------------------------- 1 + 2


def test_1_boot_state_matches(converge: Worlds) -> None:
    before = same_dump(converge, "before")
    assert before["/sys/devices/system/node/online"] == "0-1"


def test_1_apply_converges(converge: Worlds) -> None:
    real, sim = ok(converge, "apply")
    result = real.doc()
    assert result["status"] == "converged", result["outcomes"]
    targets = {c["target"]: c["op"] for c in result["plan"]["changes"]}
    assert targets["memory.auto_online_blocks"] == "set"  # auto-online handled before dax0.0 is reconfigured
    assert targets["dax0.0"] == "reconfigure"
    assert_same("apply's plan and outcomes", apply_summary(result), apply_summary(sim.doc()))


def test_1_node_after_apply(converge: Worlds) -> None:
    after = same_dump(converge, "applied")
    assert after["/sys/devices/system/memory/auto_online_blocks"] == "offline"
    assert after["/proc/sys/kernel/numa_balancing"] == "2"
    assert after["/sys/kernel/mm/numa/demotion_enabled"] == "true"
    assert after["/sys/devices/system/node/online"] == "0-2"
    assert after["/sys/devices/system/node/has_cpu"] == "0"
    assert after["/sys/devices/system/node/has_normal_memory"] == "0-1"
    assert after["/sys/devices/virtual/memory_tiering/memory_tier22/nodelist"] == "2"
    assert after["dax0.0.driver"] == "kmem"
    assert blocks(after, "/state") == {"online"} and blocks(after, "/valid_zones") == {"Movable"}
    assert running(after) == {"0": "on", "1": "on", "2": "on"}  # demote-cold-node0, -node1, promote-hot
    assert after["damon/0/contexts/0/schemes/0/target_nid"] == "2"


def test_1_second_apply_and_drift_are_clean(converge: Worlds) -> None:
    real, sim = ok(converge, "apply-again")
    assert real.doc()["plan"]["changes"] == [] and real.doc()["status"] == "converged"
    assert_same("the second apply", apply_summary(real.doc()), apply_summary(sim.doc()))
    real, sim = ok(converge, "drift-clean")
    assert real.doc()["converged"] is True, real.doc()["items"]
    assert_same("drift after apply", drift_summary(real.doc()), drift_summary(sim.doc()))


def test_1_facts_after_apply(converge: Worlds) -> None:
    real, sim = ok(converge, "facts")

    def shape(f: dict) -> dict:
        dax = f["sections"]["dax"]
        damon = f["sections"]["damon"]
        return {
            "nodes": {n["id"]: {k: n[k] for k in ("cpulist", "has_memory", "has_normal_memory", "tier",
                                                  "distances")} for n in f["nodes"]},
            "node2_total": [n["mem_total"] for n in f["nodes"] if n["id"] == 2],
            "tiers": f["tiers"], "knobs": f["knobs"], "block_size": f["block_size_bytes"],
            "dax": [{k: d[k] for k in ("name", "mode", "target_node", "size", "resource", "blocks_total",
                                       "blocks_online", "zones", "backing", "memmap_bytes")} for d in dax["devices"]],
            "hotplug_params": dax["hotplug_params"],
            "kdamonds": [{"state": k["state"], "config": k["config"]} for k in damon["kdamonds"]],
        }

    assert_same("`nodeagent facts` after apply", shape(real.doc()), shape(sim.doc()))


def test_2_drift_names_each_outside_change(converge: Worlds) -> None:
    real, sim = converge[0]["outside"], converge[1]["outside"]
    assert all(line.endswith(" ok") for line in real.stdout.splitlines()), real.stdout
    assert_same("the outside writes", real.stdout, sim.stdout)
    real, sim = ok(converge, "drift", rc=3)
    report = real.doc()
    assert {(i["resource"], i["target"]) for i in report["items"]} == {
        ("knob", "kernel.numa_balancing"), ("dax", "dax0.0"), ("damon", "damon.demote-cold-node1")}
    assert_same("drift after the outside changes", drift_summary(report), drift_summary(sim.doc()))
    drifted = same_dump(converge, "drifted")
    assert drifted[f"/sys/devices/system/node/node2/memory{BLOCK}/state"] == "offline"


# --------------------------------------------------------------------------- 4 + 3


def test_4_missing_daxctl_refuses_and_writes_nothing(refuse: Worlds) -> None:
    real, sim = ok(refuse, "apply-no-daxctl", rc=1)
    [result] = real.docs()  # --format json: one document, the error in it
    error = result["error"]
    assert result["status"] == "failed" and result["outcomes"] == []
    [problem] = result["plan"]["problems"]
    assert problem["target"] == "daxctl" and problem["blocking"] and "apt install daxctl" in problem["hint"]
    assert error["exit_code"] == 1 and "nothing was applied" in error["message"]
    [sim_result] = sim.docs()
    assert_same("apply without daxctl", (apply_summary(result), error),
                (apply_summary(sim_result), sim_result["error"]))
    before, after = same_dump(refuse, "before"), same_dump(refuse, "after-refusal")
    assert {k: v for k, v in after.items() if k != "nodeagent.state"} == \
        {k: v for k, v in before.items() if k != "nodeagent.state"}
    assert "last-applied.json" not in after["nodeagent.state"].split()


def test_3_foreign_kdamond_left_running_exit_5(refuse: Worlds) -> None:
    real_w, sim_w = refuse[0]["foreign"], refuse[1]["foreign"]
    assert all(line.endswith(" ok") for line in real_w.stdout.splitlines()), real_w.stdout
    assert_same("the foreign kdamond's writes", real_w.stdout, sim_w.stdout)
    started = same_dump(refuse, "foreign-running")
    pid = refuse[0]["foreign-running"].kv()["damon/0/pid"]
    real, sim = ok(refuse, "apply-foreign", rc=5)
    result = real.doc()
    assert result["status"] == "partial"
    applied = {o["target"] for o in result["outcomes"] if o["status"] == "applied"}
    assert {"memory.auto_online_blocks", "kernel.numa_balancing", "kernel.demotion_enabled", "dax0.0"} <= applied
    named = [p["message"] for p in result["plan"]["problems"] if p["kind"] == "damon"]
    assert named and f"kdamond 0 (running, pid {pid};" in named[0], named
    assert_same("apply next to a foreign kdamond", apply_summary(result), apply_summary(sim.doc()))
    after = same_dump(refuse, "after-foreign")
    assert refuse[0]["after-foreign"].kv()["damon/0/pid"] == pid  # never restarted
    assert {k: v for k, v in after.items() if k.startswith("damon/")} == \
        {k: v for k, v in started.items() if k.startswith("damon/")}


# --------------------------------------------------------------------------- 5


def test_5_kernel_onlines_dax_in_normal(autoonline: Worlds) -> None:
    real, sim = autoonline[0]["kmem-takes-it"], autoonline[1]["kmem-takes-it"]
    assert_same("binding dax0.0 to kmem by hand (per-write result)", real.stdout, sim.stdout)
    state = same_dump(autoonline, "kernel-onlined")
    assert state["dax0.0.driver"] == "kmem"
    assert blocks(state, "/valid_zones") == {"Normal"}
    assert state["/sys/devices/system/node/has_normal_memory"] == "0-2"


def test_5_plan_is_disruptive(autoonline: Worlds) -> None:
    real, sim = ok(autoonline, "plan")
    plan = real.doc()
    [dax] = [c for c in plan["changes"] if c["target"] == "dax0.0"]
    assert dax["op"] == "rezone" and dax["disruptive"] is True
    assert any("onlined before nodeagent ran" in w for w in plan["warnings"])
    assert_same("the plan for a kernel-onlined dax0.0", plan_summary(plan), plan_summary(sim.doc()))


def test_5_allow_disruptive_moves_to_movable(autoonline: Worlds) -> None:
    real, sim = ok(autoonline, "apply-disruptive")
    assert real.doc()["status"] == "converged"
    assert_same("apply --allow-disruptive", apply_summary(real.doc()), apply_summary(sim.doc()))
    moved = same_dump(autoonline, "moved")
    assert blocks(moved, "/valid_zones") == {"Movable"} and blocks(moved, "/state") == {"online"}
    assert moved["/sys/devices/system/node/has_normal_memory"] == "0-1"
    assert running(moved) == {"0": "on", "1": "on", "2": "on"}


# --------------------------------------------------------------------------- 6


SZ_MIN = "contexts/0/schemes/0/access_pattern/sz/min"
PAUSED = str(2**64 - 1)


def _demoters(dump: dict[str, str]) -> dict[str, str]:
    """kdamond index → its first scheme's minimum region size, for the migrate_cold kdamonds."""
    return {k.split("/")[1]: dump[k.replace("/action", "/access_pattern/sz/min")] for k, v in dump.items()
            if k.startswith("damon/") and k.endswith("/contexts/0/schemes/0/action") and v == "migrate_cold"}


def test_6_a_full_cxl_node_pauses_demotion_with_the_same_pids(guarded: Worlds) -> None:
    applied = same_dump(guarded, "applied")
    assert set(_demoters(applied).values()) == {"4096"} and len(_demoters(applied)) == 2
    real, sim = ok(guarded, "plan-full")
    plan = real.doc()
    demote = [c for c in plan["changes"] if c["target"].startswith("damon.demote-cold")]
    assert len(demote) == 2 and all("dest_free: pause migrate_cold → node2" in c["reason"] for c in demote), plan
    # the free memory each world has left differs by a few pages: the changes are compared, not their wording
    assert_same("the changes for a full CXL node", [(c["target"], c["op"]) for c in plan["changes"]],
                [(c["target"], c["op"]) for c in sim.doc()["changes"]])
    real, sim = ok(guarded, "apply-pause")
    assert real.doc()["status"] == "converged", real.stdout
    paused = same_dump(guarded, "paused")
    assert set(_demoters(paused).values()) == {PAUSED}
    for i in _demoters(paused):
        assert guarded[0]["paused"].kv()[f"damon/{i}/pid"] == guarded[0]["applied"].kv()[f"damon/{i}/pid"]
        assert paused[f"damon/{i}/state"] == "on"
    ok(guarded, "plan-paused")  # --detailed-exitcode: 0, nothing to change while it is full


def test_6_emptied_again_the_next_apply_resumes_demotion(guarded: Worlds) -> None:
    real, sim = ok(guarded, "apply-resume")
    assert real.doc()["status"] == "converged", real.stdout
    assert set(_demoters(same_dump(guarded, "resumed")).values()) == {"4096"}
