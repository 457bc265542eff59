"""The latency probe on the real 6.12 guest: `nodeagent check` with the latency check, every pair measured.

Under TCG every node is the same host memory, so the figures say nothing about hardware: the test checks
that the probe runs on the real kernel (mbind honoured: the buffer lands on the node asked, THP-backed as the
guest's kernel allows), that it bounds its cost (every pair within its budget, the whole check within
pairs × budget), and that it orders nothing wrong (no node reads as 3x slower than another, the CXL
threshold, so the check passes). One boot: the pmem namespace is onlined as a CPU-less node first, so the probe
measures node0 (CPUs), node1 (CPU-less DRAM) and node2 (kmem, a slower tier).

The helper is built on the host before the boot (the guest sees the host's root read-only through 9p and
would spend a minute compiling under TCG); NODEAGENT_CACHE points the guest at it.
"""

from __future__ import annotations

import json
from pathlib import Path

import harness
import pytest

from nodeagent.host import latency as probe

pytestmark = pytest.mark.realkernel

MEM = "/sys/devices/system/memory"
BUDGET = 2.0


def test_latency_check_runs_bounded_and_orders_nothing_wrong(guest: harness.Guest, tmp_path: Path) -> None:
    if not harness.venv_python().exists():
        pytest.skip(f"realkernel: no project virtualenv at {harness.venv_python()} (run make test)")
    try:
        probe.build(tmp_path / "cache" / "latprobe")
    except Exception as exc:  # noqa: BLE001 — no compiler here is a skip of this tier, said clearly
        pytest.skip(f"realkernel: cannot build the latency probe on the host: {exc}")
    profile = tmp_path / "latency.yaml"
    profile.write_text("apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: latency}\n"
                       f"checks:\n  latency: {{max_ratio: 3.0, max_seconds: {BUDGET}}}\n")
    steps = [
        harness.Step("namespace", "ndctl create-namespace -f -e namespace0.0 -m devdax >/dev/null"),
        harness.Step("auto-offline", f"echo offline > {MEM}/auto_online_blocks"),
        harness.Step("reconfigure", "daxctl reconfigure-device --mode=system-ram dax0.0 >/dev/null"),
        harness.Step("llc", "cat /sys/devices/system/cpu/cpu0/cache/index3/size 2>&1; "
                     "cat /sys/kernel/mm/transparent_hugepage/enabled"),
        harness.Step("check", f"NODEAGENT_CACHE={tmp_path / 'cache'} {harness.venv_python()} -m nodeagent "
                     f"--format json check {profile}"),
    ]
    res = guest.run_steps(steps, timeout=300, label="latency")
    step = res["check"]
    assert step.rc in (0, 4), f"rc {step.rc}\n{step.output}\nconsole: {res.guest.console_path}"
    (result,) = json.loads(step.stdout)["results"]
    ev = result["evidence"]
    pairs = ev["pairs"]
    print(f"\nguest L3 / THP: {res['llc'].stdout.strip()!r}")
    for p in pairs:
        print(f"  node{p['node']} from node{p['initiator']} (CPU {p['cpu']}): {p['ns']} ns, ratio {p['ratio']}, "
              f"{p['buffer'] >> 20} MiB, THP {p['thp_bytes']}, {p['seconds']} s, chains {p['chains_ns']}"
              + (f", error {p['error']}" if p["error"] else ""))
    assert ev["source"] == "measured"
    assert {(p["initiator"], p["node"]) for p in pairs} == {(0, 0), (0, 1), (0, 2)}
    # it runs: every pair measured on the real kernel, none refused
    assert all(p["error"] is None and p["ns"] is not None for p in pairs), result["findings"]
    assert all(len(p["chains_ns"]) >= 1 for p in pairs)
    # it bounds its cost: the buffer (4x the L3, within the cap), the time per pair and of the whole check
    for p in pairs:
        assert probe.MIN_BUFFER <= p["buffer"] <= probe.MAX_BUFFER
        assert p["seconds"] <= BUDGET + 0.5
    assert ev["seconds"] <= len(pairs) * (BUDGET + 1.0) + 5.0
    # it orders nothing wrong: under TCG no node is a slower tier, so none reads as one — no node at the check's
    # own threshold (max_ratio 3.0) against another. Not "all equal": how the host backs each guest node differs,
    # and one CI rehearsal read node0 itself at 425 ns, steadily over its 7 chains, and nodes 1 and 2 at 154 and
    # 166 ns (2.76x).
    ns = [p["ns"] for p in pairs]
    assert max(ns) / min(ns) < 3.0, ns
    assert result["status"] == "pass", result["findings"]
