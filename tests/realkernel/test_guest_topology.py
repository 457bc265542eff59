"""What the real 6.12 kernel shows for the 3-node layout (pmem -> devdax -> system-ram).

All topology assertions share ONE boot (the ``topology`` fixture runs every step in order).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import harness
import pytest

pytestmark = pytest.mark.realkernel


@pytest.fixture(scope="module")
def topology(guest: harness.Guest) -> harness.StepsResult:
    return guest.run_steps(harness.topology_steps(), timeout=240, label="topology")


def kv(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def tiers(text: str) -> dict[str, str]:
    """'memory_tier4 nodelist=0-1' lines -> {'memory_tier4': '0-1'}."""
    lines = [line for line in text.splitlines() if "nodelist=" in line]
    return {line.split()[0]: line.split("nodelist=", 1)[1] for line in lines}


def tier_number(name: str) -> int:
    return int(name.removeprefix("memory_tier"))


def ok(result: harness.StepsResult, name: str) -> harness.StepResult:
    step = result[name]
    assert step.rc == 0, f"{name}: rc {step.rc}\n{step.output}\nconsole: {result.guest.console_path}"
    return step


def test_kernel_is_6_12(topology: harness.StepsResult) -> None:
    assert ok(topology, "uname").stdout.strip().startswith("6.12.")


def test_boot_nodes_0_1_online_node2_only_possible(topology: harness.StepsResult) -> None:
    nodes = kv(ok(topology, "nodes-boot").stdout)
    assert nodes["online"] == "0-1"
    assert nodes["possible"] == "0-2"
    assert nodes["has_cpu"] == "0"
    assert nodes["has_memory"] == "0-1"


def test_boot_memory_state(topology: harness.StepsResult) -> None:
    assert ok(topology, "auto-online-boot").stdout.strip() == "online"
    assert int(ok(topology, "block-size").stdout.strip(), 16) == 128 << 20
    assert tiers(ok(topology, "tiers-boot").stdout) == {"memory_tier4": "0-1"}
    assert "Persistent Memory (legacy)" in ok(topology, "iomem-pmem").stdout


def test_legacy_pmem_namespace_at_boot(topology: harness.StepsResult) -> None:
    regions = json.loads(ok(topology, "ndctl-list-boot").stdout)["regions"]
    assert [(r["dev"], r["size"]) for r in regions] == [("region0", 1 << 30)]
    assert regions[0]["namespaces"][0]["mode"] == "fsdax"


def test_create_namespace_devdax_gives_dax0_0_on_node2(topology: harness.StepsResult) -> None:
    created = json.loads(ok(topology, "create-namespace").stdout)
    assert created["mode"] == "devdax"
    devices = json.loads(ok(topology, "daxctl-list-devdax").stdout)
    assert [(d["chardev"], d["mode"], d["target_node"]) for d in devices] == [("dax0.0", "devdax", 2)]
    sysfs = kv(ok(topology, "dax-sysfs").stdout)
    assert sysfs["target_node"] == "2"
    assert sysfs["numa_node"] == "0"  # the dax device itself hangs off node 0


def test_reconfigure_refused_while_kernel_auto_onlines(topology: harness.StepsResult) -> None:
    step = topology["reconfigure-refused"]
    assert step.rc == 240, step.output
    assert "kernel policy will auto-online memory" in step.stderr
    assert "reconfigured 0 devices" in step.stderr


def test_reconfigure_succeeds_with_auto_online_offline(topology: harness.StepsResult) -> None:
    assert ok(topology, "auto-online-offline").stdout.strip() == "offline"
    [dev] = json.loads(ok(topology, "reconfigure").stdout)
    assert dev["mode"] == "system-ram"
    assert dev["online_memblocks"] == dev["total_memblocks"] > 0
    assert dev["movable"] is True
    [listed] = json.loads(ok(topology, "daxctl-list-system-ram").stdout)
    assert listed["mappings"][0]["size"] == listed["size"]
    assert ok(topology, "dax-driver-after").stdout.strip() == "kmem"


def test_node2_online_cpuless_with_memory(topology: harness.StepsResult) -> None:
    nodes = kv(ok(topology, "nodes-after").stdout)
    assert nodes["online"] == "0-2"
    assert nodes["has_cpu"] == "0"
    assert nodes["has_memory"] == "0-2"
    assert nodes["has_normal_memory"] == "0-1"  # node2 is all ZONE_MOVABLE
    assert nodes["node2_cpulist"] == ""
    meminfo = ok(topology, "node2-meminfo").stdout
    assert int(meminfo.split("MemTotal:")[1].split()[0]) > 0
    blocks = ok(topology, "node2-memory-blocks").stdout.splitlines()
    states = [line for line in blocks if "/state:" in line]
    zones = [line for line in blocks if "/valid_zones:" in line]
    assert len(states) == len(zones) > 0
    assert all(line.endswith(":online") for line in states)
    assert all(line.endswith(":Movable") for line in zones)


def test_node2_joins_a_lower_memory_tier(topology: harness.StepsResult) -> None:
    after = tiers(ok(topology, "tiers-after").stdout)
    assert after == {"memory_tier4": "0-1", "memory_tier22": "2"}
    by_node = {nodes: tier_number(name) for name, nodes in after.items()}
    assert by_node["2"] > by_node["0-1"]  # higher abstract distance = slower tier
    assert "Demotion targets for Node 0: preferred: 2" in ok(topology, "demotion-dmesg").stdout


def test_numa_knob_defaults(topology: harness.StepsResult) -> None:
    assert kv(ok(topology, "numa-knobs").stdout) == {"numa_balancing": "1", "demotion_enabled": "false"}


def test_damon_sysfs_admin_present(topology: harness.StepsResult) -> None:
    assert "nr_kdamonds=0" in ok(topology, "damon-admin").stdout
    tree = kv(ok(topology, "damon-tree-staged").stdout)
    ctx = "./0/contexts/0"
    assert tree["./0/state"].strip() == "off"
    # one operation set per line (the dump joins lines with a literal backslash-n)
    assert tree[f"{ctx}/avail_operations"].split("\\n") == ["vaddr", "fvaddr", "paddr"]
    assert tree[f"{ctx}/schemes/0/access_pattern/sz/max"].strip() == "0"  # unset max matches nothing


def test_project_venv_python_runs_in_guest(topology: harness.StepsResult) -> None:
    python = harness.venv_python()
    if not python.exists():
        pytest.skip(f"{python} does not exist (create the project venv first)")
    if "venv-python" not in topology.steps:
        pytest.skip("the venv appeared after the topology boot")
    host = subprocess.run(
        [str(python), "-c", "import sys; print(sys.version)"], capture_output=True, text=True, check=True
    ).stdout
    assert ok(topology, "venv-python").stdout == host


def test_capture_writes_fixture_files(topology: harness.StepsResult, tmp_path: Path) -> None:
    written = harness.capture(topology, tmp_path)
    names = {p.name for p in written}
    assert {
        "daxctl-list-D-devdax.json",
        "daxctl-list-DM-system-ram.json",
        "memory-tiers-after.txt",
        "block_size_bytes.txt",
        "index.json",
    } <= names
    for path in written:
        if path.suffix == ".json":
            json.loads(path.read_text())
    index = json.loads((tmp_path / "index.json").read_text())
    assert index["steps"]["daxctl-reconfigure-refused.txt"]["rc"] == 240


@pytest.fixture
def artifacts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Consoles of the deliberately failing runs below go to tmp, not tests/realkernel/artifacts/."""
    path = tmp_path / "artifacts"
    monkeypatch.setattr(harness, "ARTIFACTS_DIR", path)
    return path


def test_run_in_guest_plumbing_and_host_stays_untouched(
    guest: harness.Guest, tmp_path: Path, artifacts: Path
) -> None:
    marker = tmp_path / "written-by-guest"
    script = (
        f"pwd; echo \"$RK_VALUE\"; printf 'no-newline'; echo oops >&2; "
        f"echo x > {marker} && cat {marker} >&2; exit 7"
    )
    res = guest.run(script, cwd=str(tmp_path), env={"RK_VALUE": "a b'c"}, layout="1node", timeout=90)
    assert res.rc == 7
    assert res.stdout == f"{tmp_path}\na b'c\nno-newline"
    assert res.stderr == "oops\nx\n"
    assert res.console_path is not None and res.console_path.parent == artifacts  # saved: rc != 0
    assert "@@NODEAGENT-RK:DMESG-BEGIN" in res.console_path.read_text()
    assert not marker.exists()  # the guest wrote into its overlay, not into the host


def test_timeout_kills_qemu(guest: harness.Guest, artifacts: Path) -> None:
    started = time.monotonic()
    with pytest.raises(harness.GuestTimeout) as info:
        guest.run("sleep 600", timeout=3, layout="1node", hostroot=False)
    assert time.monotonic() - started < 20
    assert info.value.console_path is not None and info.value.console_path.parent == artifacts
    assert "sleep 600" in info.value.console_path.read_text()
