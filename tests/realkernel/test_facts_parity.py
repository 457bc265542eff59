"""`nodeagent facts` on the real 6.12 guest and on the simulator's qemu-3node preset must agree.

One boot: the pmem namespace is turned into dax0.0 (as the preset starts), facts are taken; then the real
daxctl onlines dax0.0 as movable system-ram after auto-online is switched off, and facts are taken again. The
simulator goes through the same two states. A difference here points at the simulator.
"""

from __future__ import annotations

import json
from typing import Any

import harness
import pytest
from nodeagent_sim import SimKernel, create
from nodeagent_sim import dax as simdax

from nodeagent.facts import Facts, gather
from nodeagent.host import open_host

pytestmark = pytest.mark.realkernel

MEM = "/sys/devices/system/memory"


def facts_cmd() -> str:
    return f"{harness.venv_python()} -m nodeagent --format json facts"


@pytest.fixture(scope="module")
def guest_facts(guest: harness.Guest) -> dict[str, Facts]:
    if not harness.venv_python().exists():
        pytest.skip(f"realkernel: no project virtualenv at {harness.venv_python()} (run make test)")
    steps = [
        harness.Step("namespace", "ndctl create-namespace -f -e namespace0.0 -m devdax >/dev/null"),
        harness.Step("facts-before", facts_cmd()),
        harness.Step("auto-offline", f"echo offline > {MEM}/auto_online_blocks"),
        harness.Step("reconfigure", "daxctl reconfigure-device --mode=system-ram dax0.0 >/dev/null"),
        harness.Step("facts-after", facts_cmd()),
    ]
    res = guest.run_steps(steps, timeout=240, label="facts-parity")
    out = {}
    for name in ("facts-before", "facts-after"):
        step = res[name]
        assert step.rc == 0, f"{name}: rc {step.rc}\n{step.output}\nconsole: {res.guest.console_path}"
        out[name] = Facts.from_dict(json.loads(step.stdout))
    return out


@pytest.fixture(scope="module")
def sim_facts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Facts]:
    root = create(tmp_path_factory.mktemp("parity") / "n", "qemu-3node")
    before = gather(open_host(root))
    k = SimKernel(root)
    k.write(f"{MEM}/auto_online_blocks", "offline")
    with k.locked():
        ids = simdax.to_system_ram(k, "dax0.0", None)
    for n in ids:  # daxctl onlines each block as movable
        k.write(f"{MEM}/memory{n}/state", "online_movable")
    return {"facts-before": before, "facts-after": gather(open_host(root))}


def shape(f: Facts) -> dict[str, Any]:
    """What must agree: topology, tiers, block size, which knobs exist and their tiering values."""
    return {
        "kernel": f.kernel_version,
        "possible_nodes": f.possible_nodes,
        "nodes": {n.id: {"has_cpu": n.has_cpu, "has_memory": n.has_memory,
                         "has_normal_memory": n.has_normal_memory, "tier": n.tier} for n in f.nodes},
        "tiers": f.tiers,
        "block_size": f.block_size_bytes,
        "knobs_present": sorted(k for k, v in f.knobs.items() if v is not None),
        "numa_balancing": f.knobs["kernel.numa_balancing"],
        "demotion_enabled": f.knobs["kernel.demotion_enabled"],
    }


@pytest.mark.parametrize("state", ["facts-before", "facts-after"])
def test_guest_and_simulator_agree(guest_facts: dict[str, Facts], sim_facts: dict[str, Facts], state: str) -> None:
    assert shape(sim_facts[state]) == shape(guest_facts[state])


def test_the_onlined_node_has_the_same_size(guest_facts: dict[str, Facts], sim_facts: dict[str, Facts]) -> None:
    real = guest_facts["facts-after"].node(2)
    sim = sim_facts["facts-after"].node(2)
    assert real is not None and sim is not None
    assert real.mem_total == sim.mem_total == 7 * 128 * 1024**2
    assert guest_facts["facts-after"].knobs["memory.auto_online_blocks"] == "offline"
