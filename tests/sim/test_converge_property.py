"""The convergence property, over generated node shapes and event sequences (hypothesis).

After every apply — a full one, or ``apply --device NAME`` per hot-plug event as the udev units run it — the next
full ``plan --detailed-exitcode`` is empty (exit 0), or the apply's exit code and result say exactly why: it exited
5, and every change still planned is named in its verify errors, or is something the plan said cannot be done.

Shapes: small-block variants of the CXL presets (at most 256 memory blocks) × starting shape (devdax; kmem-bound
online; kmem-bound offline, as ``memhp_default_state`` boots them) × ``auto_online_blocks`` × kernel (5.15, 6.1,
6.12, 6.18) × shipped profile; events: hot-add devdax, hot-add kmem-bound with its blocks offline, profile A → B
→ A, re-apply, an onlining that fails half-way then a rerun.

Settings profiles (``NODEAGENT_HYPOTHESIS``): ``ci`` (the default, in ``make test``: a few dozen sequences, fixed
seed) and ``sweep`` (``make converge-sweep``: the whole matrix, 240 sequences). Both are derandomized, so a failure
reproduces; hypothesis shrinks it to the shortest sequence and prints it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nodeagent_sim import SimKernel, build, get, hotplug

from nodeagent.cli.main import main

REPO = Path(__file__).resolve().parents[2]
PROFILES = {name: str(REPO / "profiles" / f"{name}.yaml") for name in ("cxl-inference", "cxl-kv-pool")}
KERNELS = ("5.15.0-sim", "6.1.0-sim", "6.12.0-sim", "6.18.0-sim")
MiB, GiB = 1024**2, 1024**3

# Per kernel (the test is parametrized by kernel): ci 4 x 5 sequences, sweep 4 x 60.
settings.register_profile("ci", max_examples=5, derandomize=True, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("sweep", max_examples=60, derandomize=True, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
PROFILE = os.environ.get("NODEAGENT_HYPOTHESIS", "ci")


@dataclass(frozen=True)
class Shape:
    preset: str
    devices: int
    device_blocks: int
    block_size: int
    start: str  # devdax | online_movable | online | offline (memhp_default_state at boot)
    policy: str  # auto_online_blocks
    profile: str
    kernel: str = "6.12.0-sim"

    def build(self, root: Path) -> Path:
        p = get(self.preset)
        if self.preset == "qemu-3node":
            p = hotplug.generated(p, block_size=self.block_size)
        else:  # two sockets of 2 GiB DRAM each; the CXL devices generated
            p = hotplug.generated(p, self.devices, self.device_blocks * self.block_size, self.block_size,
                                  dram_size=2 * GiB)
        build(p, root, kernel=self.kernel)
        k = SimKernel(root)
        if self.start != "devdax":
            hotplug.boot(k, self.start)
        k.write("/sys/devices/system/memory/auto_online_blocks", self.policy)
        return root


shapes = st.builds(
    Shape,
    preset=st.sampled_from(["h100-cxl", "qemu-3node"]),
    devices=st.integers(1, 3),
    device_blocks=st.integers(4, 24),
    block_size=st.sampled_from([128 * MiB, 256 * MiB]),
    start=st.sampled_from(["devdax", "online_movable", "online", "offline"]),
    policy=st.sampled_from(["offline", "online", "online_movable"]),
    profile=st.sampled_from(["cxl-inference", "cxl-kv-pool"]),
)
events = st.lists(st.sampled_from(["hot-add-devdax", "hot-add-kmem-offline", "hot-add-beside", "switch", "reapply",
                                   "fail-online"]), min_size=1, max_size=4)


def na(root: Path, *args: str) -> tuple[int, dict]:
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--root", str(root), "--format", "json", *args])
    text = out.getvalue().strip()
    try:  # the first JSON document (a refused apply prints its result, then the error)
        return code, json.JSONDecoder().raw_decode(text)[0] if text else {}
    except json.JSONDecodeError:
        return code, {"raw": text, "stderr": err.getvalue()}


class Run:
    """One sequence on one node: applies, and the property after each."""

    def __init__(self, root: Path, profile: str) -> None:
        self.root, self.profile, self.converged = root, profile, False
        self.log: list[str] = []

    def apply(self, profile: str, *extra: str, scoped: bool = False) -> None:
        code, result = na(self.root, "apply", "--yes", "--skip-checks", "all", *extra, PROFILES[profile])
        pcode, plan = na(self.root, "plan", "--detailed-exitcode", PROFILES[profile])
        self.log.append(f"apply {' '.join(extra)} {profile}: exit {code} {result.get('status')}; plan exit {pcode}")
        assert "status" in result, (self.log, result)
        left = [c["target"] for c in plan.get("changes", [])]
        if code == 0:
            assert result["status"] in ("converged", "unchanged"), (self.log, result)
            if not scoped or self.converged:  # a scoped apply after a converged node: nothing else drifted
                assert left == [], (self.log, plan.get("changes"), result)
            self.converged = not left
            return
        if code == 1 and result["plan"]["problems"] and not result["outcomes"]:  # refused: a blocking problem
            assert any(p["blocking"] for p in result["plan"]["problems"]) and pcode == 1, (self.log, result)
            self.converged = False
            return
        assert code == 5 and result["status"] in ("partial", "failed"), (self.log, result)
        said = " ".join(result["verify_errors"]) + " " + " ".join(p["target"] + " " + p["message"]
                                                                  for p in result["plan"]["problems"])
        held = {o["target"] for o in result["outcomes"] if o["status"] != "applied"}
        if not scoped:
            unexplained = [t for t in left if t not in said and t not in held]
            assert not unexplained, (self.log, unexplained, result["verify_errors"], result["plan"]["problems"])
        self.converged = False


def _next_device(k: SimKernel, beside: bool = False) -> tuple[str, int] | None:
    """A new device name and its target node: a possible node nothing uses yet, or (``beside``) the node of a
    device there is already (a second region in the same CXL window)."""
    from nodeagent.util.kfmt import parse_list

    possible = parse_list(k.tree.read("/sys/devices/system/node/possible"))
    used = sorted({int(d["node"]) for d in k.state().get("dax", {}).values()})
    online = set(parse_list(k.tree.read("/sys/devices/system/node/online")))
    free = used if beside else [n for n in possible if n not in used and n not in online]
    if not free:
        return None
    ids = [int(n.split(".")[0][3:]) for n in k.state().get("dax", {})]
    return f"dax{max(ids + [-1]) + 1}.0", free[-1] if beside else free[0]


def _host_of(k: SimKernel, node: int) -> int:
    """The node an expander of ``node`` hangs off: that of a device already there, else the sockets in turn."""
    for name, info in sorted(k.state().get("dax", {}).items()):
        if int(info["node"]) == node:
            return int(k.tree.read(f"/sys/bus/dax/devices/{name}/numa_node"))
    return node % 2


def _fail_one_block(k: SimKernel) -> bool:
    """Make the onlining of one offline block of a DAX device fail (ENOMEM); False when there is none."""
    bs = int(k.tree.read("/sys/devices/system/memory/block_size_bytes"), 16)
    for info in k.state().get("dax", {}).values():
        first = -(-info["start"] // bs)
        last = (info["start"] + info["size"]) // bs
        if last - first >= 2:
            block = first + (last - first) // 2
            path = f"/sys/devices/system/memory/memory{block}/state"
            if not k.tree.exists(path) or k.tree.read(path) == "offline":
                with k.locked():
                    state = k.state()
                    state["online_fail_blocks"] = [block]
                    k.save_state(state)
                return True
    return False


def _clear_failure(k: SimKernel) -> None:
    with k.locked():
        state = k.state()
        state["online_fail_blocks"] = []
        k.save_state(state)


@pytest.mark.filterwarnings("ignore::hypothesis.errors.NonInteractiveExampleWarning")
@settings(settings.get_profile(PROFILE))
@pytest.mark.parametrize("kernel", KERNELS)
@given(shape=shapes, sequence=events)
def test_every_apply_converges_or_says_why(kernel: str, shape: Shape, sequence: list[str]) -> None:
    shape = replace(shape, kernel=kernel)
    base = Path(tempfile.mkdtemp(prefix="prop-", dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None))
    try:
        root = shape.build(base / "n")
        run = Run(root, shape.profile)
        run.apply(shape.profile, "--allow-disruptive")
        other = "cxl-kv-pool" if shape.profile == "cxl-inference" else "cxl-inference"
        k = SimKernel(root)
        for event in sequence:
            if event.startswith("hot-add"):
                nxt = _next_device(k, beside=event == "hot-add-beside")
                if nxt is None:
                    run.apply(shape.profile)
                    continue
                name, node = nxt
                host = _host_of(k, node)
                d = hotplug.next_dax(k, name, 8 * shape.block_size, node, host_node=host)
                kmem = event != "hot-add-devdax"
                hotplug.hot_add_dax(k, d, system_ram=kmem, blocks="offline" if kmem else None)
                run.apply(shape.profile, "--device", name, scoped=True)
            elif event == "switch":
                run.apply(other, "--allow-disruptive")
                run.apply(shape.profile, "--allow-disruptive")
            elif event == "fail-online":
                if _fail_one_block(k):
                    run.apply(shape.profile)
                    _clear_failure(k)
                run.apply(shape.profile)
            else:
                run.apply(shape.profile)
    finally:
        shutil.rmtree(base, ignore_errors=True)
