"""`nodeagent metrics show` on the real 6.12 guest and on the simulator's qemu-3node preset must agree.

One boot: the pmem namespace becomes dax0.0 and is onlined as movable system-ram (a CPU-less node backed by a
DAX device), then the collector runs in the guest. What must agree is the shape: which families exist, which
nodes the per-node series cover with which tier / CPU-less / DAX labels, and which tiering counters each
node's ``vmstat`` has (6.12 counts demotions per node). A difference here points at the simulator.
"""

from __future__ import annotations

import json
from typing import Any

import harness
import pytest
from nodeagent_sim import SimKernel, create
from nodeagent_sim import dax as simdax

from nodeagent.host import open_host
from nodeagent.metrics.collector import Collector

pytestmark = pytest.mark.realkernel

MEM = "/sys/devices/system/memory"
#: What differs between any two machines, not between the kernel and the simulator.
NOT_SHAPE = ("process_", "nodeagent_collector_cpu_seconds")


def shape(fams: list[dict[str, Any]]) -> dict[str, Any]:
    by = {f["name"]: f for f in fams if not f["name"].startswith(NOT_SHAPE)}
    mem = by["nodeagent_node_memory_total_bytes"]["samples"]
    return {
        "families": sorted(by),
        "nodes": sorted((s["labels"]["node"], s["labels"]["tier"], s["labels"]["cpuless"], s["labels"]["dax_device"])
                        for s in mem),
        "node_vmstat": sorted((name, s["labels"]["node"]) for name, f in by.items()
                              if name.startswith("nodeagent_node_vmstat_") for s in f["samples"]),
        "moves": sorted((name, s["labels"]["node"], s["labels"]["cause"]) for name, f in by.items()
                        if name.startswith("nodeagent_tiering_") for s in f["samples"]),
    }


def test_guest_and_simulator_metrics_agree(guest: harness.Guest, tmp_path) -> None:
    if not harness.venv_python().exists():
        pytest.skip(f"realkernel: no project virtualenv at {harness.venv_python()} (run make test)")
    steps = [
        harness.Step("namespace", "ndctl create-namespace -f -e namespace0.0 -m devdax >/dev/null"),
        harness.Step("auto-offline", f"echo offline > {MEM}/auto_online_blocks"),
        harness.Step("reconfigure", "daxctl reconfigure-device --mode=system-ram dax0.0 >/dev/null"),
        harness.Step("metrics", f"{harness.venv_python()} -m nodeagent --format json metrics show"),
    ]
    res = guest.run_steps(steps, timeout=240, label="metrics-parity")
    step = res["metrics"]
    assert step.rc == 0, f"rc {step.rc}\n{step.output}\nconsole: {res.guest.console_path}"
    real = json.loads(step.stdout)["families"]

    root = create(tmp_path / "n", "qemu-3node")
    k = SimKernel(root)
    k.write(f"{MEM}/auto_online_blocks", "offline")
    with k.locked():
        ids = simdax.to_system_ram(k, "dax0.0", None)
    for n in ids:
        k.write(f"{MEM}/memory{n}/state", "online_movable")
    c = Collector(open_host(root))
    c.sample(refresh=False, moves=False)
    sim = [{"name": f.sample_name, "samples": [{"labels": dict(zip(f.labels, v, strict=True)), "value": x}
                                               for v, x in f.samples]} for f in c.collect() if f.samples]
    a, b = shape(sim), shape(real)
    only_sim, only_real = set(a["families"]) - set(b["families"]), set(b["families"]) - set(a["families"])
    assert not only_sim and not only_real, f"only simulated: {only_sim}, only real: {only_real}"
    assert a == b
