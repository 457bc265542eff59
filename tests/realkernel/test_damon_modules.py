"""DAMON's special-purpose modules on the real 6.12 kernel (QEMU guest) and on the simulator's ``qemu-3node``.

Debian's 6.12 kernel has DAMON_RECLAIM and DAMON_LRU_SORT built in (no DAMON_STAT: 6.17). One boot runs the
steps below; the same steps run against a fresh simulated node, and each must look the same in both:

1. the modules' parameters at boot (names, modes, values);
2. ``damon_reclaim.enabled=Y``: its kdamond runs as a ``kdamond.0`` thread whose pid ``kdamond_pid`` shows,
   nothing appears under ``/sys/kernel/mm/damon/admin``, and the region it picked is written back;
3. the kernel's exclusive start: enabling DAMON_LRU_SORT beside it, or ``state=on`` of a sysfs kdamond, is
   EBUSY (``nr_kdamonds`` itself is accepted: only sysfs kdamonds count there);
4. ``status`` and ``plan`` name DAMON_RECLAIM (and the configured, stopped sysfs kdamond) as DAMON users
   nodeagent does not own, with what they mean;
5. disabled again: ``kdamond_pid`` -1, the thread gone; then a sysfs kdamond runs and enabling the module is
   EBUSY.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import harness
import pytest
from nodeagent_sim import SimKernel, create
from nodeagent_sim.damon_presets import foreign_writes
from worlds import Agent, Outcome, Setup, Writes, assert_same, norm, run_guest, run_sim

pytestmark = pytest.mark.realkernel

PROFILE = harness.REPO_ROOT / "profiles" / "cxl-inference.yaml"
KD = "/sys/kernel/mm/damon/admin/kdamonds"
RECLAIM = "/sys/module/damon_reclaim/parameters"
LRU_SORT = "/sys/module/damon_lru_sort/parameters"
NODE1 = (4 << 30, 6 << 30)
# every parameter of both modules as "<module>/<name> <value>" and "mode <module>/parameters/<name> <mode>",
# then DAMON_RECLAIM's kdamond thread and the admin tree's entries; bash builtins but one find (a fork+exec
# costs 0.1-0.2 s under TCG)
DUMP = r"""
M=$R/sys/module
for d in damon_reclaim damon_lru_sort; do for f in $M/$d/parameters/*; do
  v=; read -r v < "$f"; echo "$d/${f##*/} $v"; done; done
(cd $M && find damon_reclaim/parameters damon_lru_sort/parameters -type f -printf 'mode %p %m\n' | sort)
read -r p < $M/damon_reclaim/parameters/kdamond_pid
c=none; [ "$p" != -1 ] && [ -f $R/proc/$p/comm ] && read -r c < $R/proc/$p/comm; echo "thread $c"
n=; for e in $R/sys/kernel/mm/damon/admin/kdamonds/*; do n="$n ${e##*/}"; done; echo "admin$n"
"""
NAMESPACE = Setup("namespace", "ndctl create-namespace -f -e namespace0.0 -m devdax >/dev/null")


def _dump(name: str, captured: dict[str, str]) -> Setup:
    """The dump as a step: the guest runs the script; the simulator runs it over its root and keeps the output."""

    def sim(root: Path) -> None:
        p = subprocess.run(["bash", "-c", f"R={shlex.quote(str(root))}\n{DUMP}"], capture_output=True, text=True,
                           timeout=60)
        captured[name] = p.stdout

    return Setup(name, f"R=\n{DUMP}", sim)


def _steps(captured: dict[str, str], foreign: tuple[tuple[str, str], ...]) -> list:
    return [
        NAMESPACE,
        _dump("boot", captured),
        Writes("enable", ((f"{RECLAIM}/enabled", "Y"),)),
        _dump("enabled", captured),
        Writes("exclusive", ((f"{LRU_SORT}/enabled", "Y"), *foreign, (f"{KD}/0/state", "on"))),
        Agent("status", "status"),
        Agent("plan", f"plan {PROFILE}"),
        Writes("disable", ((f"{RECLAIM}/enabled", "N"),)),
        _dump("disabled", captured),
        Writes("sysfs-first", ((f"{KD}/0/state", "on"), (f"{RECLAIM}/enabled", "Y"))),
        Agent("status-sysfs", "status"),
    ]


Worlds = tuple[dict[str, Outcome], dict[str, Outcome], dict[str, str]]


@pytest.fixture(scope="module")
def worlds(guest: harness.Guest) -> Worlds:
    if not harness.venv_python().exists():
        pytest.skip(f"realkernel: no project virtualenv at {harness.venv_python()} (run make test)")
    base = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else Path("/tmp")
    root = base / f"nodeagent-rkmod-{os.getpid()}"
    shutil.rmtree(root, ignore_errors=True)
    create(root, "qemu-3node")
    try:
        foreign = tuple(foreign_writes(SimKernel(root), NODE1))
        captured: dict[str, str] = {}
        sim = run_sim(root, _steps(captured, foreign))
        real, res = run_guest(guest, _steps({}, foreign), label="damon-modules")
        print(f"\n[realkernel] damon modules: {res.guest.wall_seconds:.1f}s wall")
        return real, sim, captured
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _dumped(text: str) -> dict[str, str]:
    """``name value`` lines, the kdamond's pid made ``<pid>`` (the value differs between the worlds)."""
    out = dict(line.rsplit(" ", 1) if line.startswith("mode ") else line.split(" ", 1) if " " in line
               else (line, "") for line in text.splitlines() if line)
    if out.get("damon_reclaim/kdamond_pid", "-1") != "-1":
        out["damon_reclaim/kdamond_pid"] = "<pid>"
    return out


def _same_dump(w: Worlds, step: str) -> dict[str, str]:
    real = _dumped(w[0][step].stdout)
    assert real, f"real kernel, {step}: empty dump ({w[0][step].stderr})"
    assert_same(f"the DAMON modules after {step}", real, _dumped(w[2][step]))
    return real


def _writes(w: Worlds, step: str) -> list[str]:
    real = w[0][step].stdout.splitlines()
    assert_same(f"the writes of {step}", real, w[1][step].stdout.splitlines())
    return real


def _users(out: Outcome) -> list[dict]:
    return [{k: norm(v) if isinstance(v, str) else v for k, v in u.items() if k != "pid"}
            for u in out.doc()["damon_users"]]


def test_parameters_at_boot_match(worlds: Worlds) -> None:
    boot = _same_dump(worlds, "boot")
    assert boot["damon_reclaim/enabled"] == "N" and boot["damon_reclaim/kdamond_pid"] == "-1"
    assert boot["mode damon_reclaim/parameters/kdamond_pid"] == "400" and boot["thread"] == "none"


def test_an_enabled_module_runs_a_kdamond_outside_sysfs(worlds: Worlds) -> None:
    assert _writes(worlds, "enable") == [f"{RECLAIM}/enabled ok"]
    on = _same_dump(worlds, "enabled")
    assert on["damon_reclaim/enabled"] == "Y" and on["damon_reclaim/kdamond_pid"] == "<pid>"
    assert on["thread"] == "kdamond.0" and on["admin"] == "nr_kdamonds"
    assert on["damon_reclaim/monitor_region_end"] != "0"  # the region it picked, written back


def test_the_kernel_starts_a_module_exclusively(worlds: Worlds) -> None:
    lines = _writes(worlds, "exclusive")
    assert lines[0] == f"{LRU_SORT}/enabled Device or resource busy"
    assert lines[1] == f"{KD}/nr_kdamonds ok"
    assert lines[-1] == f"{KD}/0/state Device or resource busy"
    assert _writes(worlds, "sysfs-first") == [f"{KD}/0/state ok", f"{RECLAIM}/enabled Device or resource busy"]


def test_status_and_plan_name_the_module_and_the_stopped_kdamond(worlds: Worlds) -> None:
    real, sim = worlds[0]["status"], worlds[1]["status"]
    users = _users(real)
    assert [(u["kind"], u["name"], u["running"]) for u in users] == [
        ("kdamond", "kdamond 0", False), ("module", "DAMON_RECLAIM", True)]
    assert real.doc()["damon_users"][1]["pid"] is not None
    assert_same("status's DAMON users", users, _users(sim))
    plan_real, plan_sim = worlds[0]["plan"].doc(), worlds[1]["plan"].doc()
    warned = [norm(w) for w in plan_real["warnings"] if w.startswith("damon: ")]
    assert any(w.startswith("damon: DAMON_RECLAIM (enabled, kdamond pid N;") for w in warned), warned
    assert_same("plan's DAMON users", warned, [norm(w) for w in plan_sim["warnings"] if w.startswith("damon: ")])
    after = _same_dump(worlds, "disabled")
    assert after["damon_reclaim/kdamond_pid"] == "-1" and after["thread"] == "none"
    assert [(u["name"], u["running"]) for u in _users(worlds[0]["status-sysfs"])] == [("kdamond 0", True)]
    assert_same("status beside a running sysfs kdamond", _users(worlds[0]["status-sysfs"]),
                _users(worlds[1]["status-sysfs"]))
