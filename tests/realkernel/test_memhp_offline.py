"""Real kernel: a guest booted with ``memhp_default_state=offline`` (what the README recommends), its DAX memory
bound to kmem with every block offline — the boot shape of CXL memory on 6.3+ kernels — converges in one apply.

On main this apply said converged and the next ``plan --detailed-exitcode`` exited 2: DAMON did not count a
kmem-bound device with offline blocks as a future slow node, so the kdamonds came only with a second apply.
The same steps run against a simulated qemu-3node whose auto-online policy is offline; exit codes must agree.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from dataclasses import replace
from pathlib import Path

import harness
import pytest
from nodeagent_sim import SimKernel, create
from worlds import Agent, Dump, Setup, Writes, run_sim

pytestmark = pytest.mark.realkernel

LAYOUT = "3node-memhp-offline"
harness.LAYOUTS.setdefault(LAYOUT, replace(harness.LAYOUTS["3node"], name=LAYOUT,
                                           kernel_args=(*harness.LAYOUTS["3node"].kernel_args,
                                                        "memhp_default_state=offline")))

PROFILE = harness.REPO_ROOT / "profiles" / "cxl-inference.yaml"
DAX = "/sys/bus/dax/drivers"
ACTIONS = [
    Setup("namespace", "ndctl create-namespace -f -e namespace0.0 -m devdax >/dev/null"),
    Setup("policy", "cat /sys/devices/system/memory/auto_online_blocks",
          lambda root: SimKernel(root).write("/sys/devices/system/memory/auto_online_blocks", "offline")),
    # what dax_cxl + kmem do at boot: kmem takes the device; memhp_default_state=offline leaves its blocks offline
    Writes("kmem-takes-it", ((f"{DAX}/device_dax/unbind", "dax0.0"), (f"{DAX}/kmem/new_id", "dax0.0"),
                             (f"{DAX}/kmem/bind", "dax0.0"))),
    Dump("kmem-offline"),
    Agent("apply", f"apply --yes --skip-checks all {PROFILE}"),
    Agent("plan", f"plan --detailed-exitcode {PROFILE}"),
]


def _guest_steps(actions: list) -> list[harness.Step]:
    from worlds import agent_words, dump_script, writes_command

    python = harness.venv_python()
    steps = []
    for a in actions:
        if isinstance(a, Agent):
            steps.append(harness.Step(a.name, f"{python} -m nodeagent {agent_words(a)}"))
        elif isinstance(a, Writes):
            steps.append(harness.Step(a.name, writes_command(a.writes)))
        elif isinstance(a, Dump):
            steps.append(harness.Step(a.name, f"bash -c {shlex.quote(dump_script(''))}"))
        else:
            steps.append(harness.Step(a.name, a.guest or "true"))
    return steps


def test_kmem_bound_offline_at_boot_converges_in_one_apply(guest: harness.Guest, tmp_path: Path) -> None:
    if not harness.venv_python().exists():
        pytest.skip(f"realkernel: no project virtualenv at {harness.venv_python()} (run make test)")
    res = guest.run_steps(_guest_steps(ACTIONS), timeout=420, layout=LAYOUT, label="memhp-offline")
    assert res["policy"].stdout.strip() == "offline", res["policy"].stdout  # memhp_default_state took effect
    apply = res["apply"]
    assert apply.rc == 0, apply.stdout[-3000:] + apply.stderr
    result = json.loads(apply.stdout)
    assert result["status"] == "converged" and result["verify_errors"] == []
    assert "dax0.0" in {o["target"] for o in result["outcomes"]}
    plan = res["plan"]
    assert plan.rc == 0, plan.stdout[-3000:]
    assert json.loads(plan.stdout)["changes"] == []
    base = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else tmp_path
    root = base / f"nodeagent-rk-memhp-{os.getpid()}"
    try:
        create(root, "qemu-3node")
        sim = run_sim(root, ACTIONS)
        assert (sim["apply"].rc, sim["plan"].rc) == (apply.rc, plan.rc)
    finally:
        shutil.rmtree(root, ignore_errors=True)
