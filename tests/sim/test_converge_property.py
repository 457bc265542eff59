"""The convergence property, over generated node shapes and event sequences (hypothesis).

After every apply — a full one, or ``apply --device NAME`` per hot-plug event as the udev units run it — the next
full ``plan --detailed-exitcode`` is empty (exit 0), or the apply's exit code and result say exactly why: it exited
5, and every change still planned is named in its verify errors, or is something the plan said cannot be done.

Shapes: small-block variants of the CXL presets (at most 256 memory blocks) × starting shape (devdax; kmem-bound
online; kmem-bound offline, as ``memhp_default_state`` boots them) × ``auto_online_blocks`` × kernel (5.15, 6.1,
6.12, 6.18) × shipped profile; events: hot-add devdax, hot-add kmem-bound with its blocks offline, profile A → B
→ A, re-apply, an onlining that fails half-way then a rerun.

CXL bus shapes (:class:`BusShape`, kernels 6.12 and 6.18): 1-2 sockets, 1-4 bare memdevs behind each socket's host
bridge, some with regions the firmware committed, one socket's range soft-reserved under dax_hmem instead; one
apply exits 0, every region lands on the node its plan named, the next plan is empty, and a revert puts the bus
back as it booted.

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
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from nodeagent_sim import SimKernel, build, get, hotplug
from nodeagent_sim.memory import KMEM_TIER
from nodeagent_sim.presets import NumaDef

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


# -- CXL bus shapes: bare memdevs, committed regions, soft-reserved (hmem) ranges --------------------------------

@dataclass(frozen=True)
class BusShape:
    """A 1-2 socket node whose CXL memory is on a CXL bus: per socket, one host bridge with 1-4 memdevs behind
    it and one window, or (``hmem``) a soft-reserved range dax_hmem has; the memdevs bare, or with regions the
    firmware committed (``committed``: how many of each socket's, the first ones); ``slots`` empty root ports
    behind each host bridge, where ``hot_add`` plugs a bare memdev after the first apply (``scoped``: its event's
    ``apply --device memN``, as the udev unit runs it; ``full``: a plain apply)."""

    sockets: int
    memdevs: tuple[int, ...]  # per socket
    sizes: tuple[int, ...]  # per memdev (256 MiB units), in socket order
    committed: int
    hmem: bool  # the last socket's range soft-reserved instead of a manageable bus
    block_size: int
    profile: str
    kernel: str = "6.12.0-sim"
    slots: int = 0
    hot_add: str | None = None  # None, "scoped" or "full"
    hot_size: int = 1  # 256 MiB units
    snc: int = 1  # DRAM nodes a socket (2: sub-NUMA clustering, SNC-2; the host bridge hangs off the first)

    def build(self, root: Path) -> Path:
        from nodeagent_sim import cxl as simcxl
        from nodeagent_sim import cxl_presets

        bridges = [s for s in range(self.sockets) if not (self.hmem and s == self.sockets - 1)]
        # Node ids as Linux gives them: the sockets' DRAM nodes (SNC: ``snc`` a socket), then an SRAT node for the
        # soft-reserved range, then one per CFMWS window (acpi_parse_cfmws: past every SRAT node).
        dram_nodes = self.sockets * self.snc
        hmem_node = dram_nodes if self.hmem else None
        first_window = dram_nodes + (1 if self.hmem else 0)
        possible = first_window + len(bridges)
        hbs, windows, mems = [], [], []
        sizes = iter(self.sizes)
        for w, s in enumerate(bridges):
            name, bus = f"pci0000:{0x30 + 0x80 * s:02x}", 0x30 + 0x80 * s
            ports = tuple(f"0000:{bus:02x}:{p + 1:02x}.0" for p in range(self.memdevs[s] + self.slots))
            hbs.append(simcxl.HostBridgeDef(name, bus, ports, numa_node=s * self.snc))
            for p, rp in enumerate(ports[:self.memdevs[s]]):
                mems.append(simcxl.MemdevDef(0x1D7E0000A000 + 16 * s + p, rp, f"0000:{bus + 1 + p:02x}:00.0",
                                             next(sizes) * 256 * MiB))
            windows.append(simcxl.WindowDef((1 << 40) + w * (64 << 30), 64 << 30, (name,), node=first_window + w))
        spec = simcxl.CxlDef(tuple(windows), tuple(hbs), tuple(mems))
        per_socket = [self.memdevs[s] for s in bridges]

        def boot(k: SimKernel) -> None:
            ep = len(hbs) + 1  # endpoints are numbered after the host bridges' ports, in memdev order
            for w, count in enumerate(per_socket):
                for i in range(count):
                    if i < self.committed:
                        m = spec.memdevs[ep - len(hbs) - 1]
                        simcxl.create_region(k, f"decoder0.{w}", [f"decoder{ep}.0"], m.ram_size // MiB256 * MiB256)
                    ep += 1
            if hmem_node is not None:
                cxl_presets.hmem(k, 9, (1 << 40) + 8 * (64 << 30), 2 * GiB, node=hmem_node,
                                 host=(self.sockets - 1) * self.snc)

        name = f"bus-{abs(hash(self)) % 10**8}"
        cxl_presets.BUSES[name] = (spec, boot)
        base = get("h100-cxl-memdevs")
        dram = []
        for sock in base.nodes[:self.sockets]:  # each socket's cores (both threads) split between its SNC nodes
            cores = len(sock.cpus) // 2
            share = cores // self.snc
            for h in range(self.snc):
                cpus = sock.cpus[h * share:(h + 1) * share] + sock.cpus[cores + h * share:cores + (h + 1) * share]
                dram.append(NumaDef(sock.id * self.snc + h, cpus, sock.start + h * (sock.size // self.snc),
                                    sock.size // self.snc))

        def _socket(n: int) -> int:
            if n < dram_nodes:
                return n // self.snc
            if n == hmem_node:
                return self.sockets - 1
            return bridges[n - first_window]

        def _distance(n: int, m: int) -> int:
            if n == m:
                return 10
            if max(n, m) < dram_nodes:
                return 12 if _socket(n) == _socket(m) else 21
            return 14 if _socket(n) == _socket(m) else 24

        dist = {n: tuple(_distance(n, m) for m in range(possible)) for n in range(possible)}
        p = replace(base, name=name, nodes=tuple(dram), sockets=self.sockets, possible_nodes=possible,
                    distances=dist)
        p = hotplug.generated(p, block_size=self.block_size, dram_size=2 * GiB)
        p = replace(p, distances=dist, node_tier={n: KMEM_TIER for n in range(dram_nodes, possible)})
        try:
            build(p, root, kernel=self.kernel)
        finally:
            del cxl_presets.BUSES[name]
        return root


MiB256 = 256 * MiB


@st.composite
def bus_shapes(draw: st.DrawFn) -> BusShape:
    sockets = draw(st.integers(1, 2))
    memdevs = tuple(draw(st.integers(1, 4)) for _ in range(sockets))
    sizes = tuple(draw(st.integers(1, 4)) for _ in range(sum(memdevs)))
    hmem = sockets == 2 and draw(st.booleans())
    slots = draw(st.integers(0, 1))
    hot_add = draw(st.sampled_from([None, "scoped", "full"])) if slots else None
    return BusShape(sockets, memdevs, sizes, draw(st.integers(0, 2)), hmem,
                    draw(st.sampled_from([128 * MiB, 256 * MiB])), draw(st.sampled_from(sorted(PROFILES))),
                    slots=slots, hot_add=hot_add, hot_size=draw(st.integers(1, 4)), snc=draw(st.sampled_from([1, 2])))


@pytest.mark.filterwarnings("ignore::hypothesis.errors.NonInteractiveExampleWarning")
# ci: 3 shapes per kernel (about 30 s each on 2 idle cores); sweep: the profile's 60
@settings(settings.get_profile(PROFILE), **({"max_examples": 3} if PROFILE == "ci" else {}))
@pytest.mark.parametrize("kernel", KERNELS[2:])  # the CXL region ABI: 6.x
@given(shape=bus_shapes())
# always one hot-plug: a bare memdev into socket 0's free slot of a 2-socket SNC-2 node with a committed region,
# taken in by its event's scoped apply
@example(shape=BusShape(2, (2, 1), (1, 2, 1), 1, False, 128 * MiB, "cxl-inference", slots=1, hot_add="scoped",
                        hot_size=2, snc=2))
# and the refusal: a fifth memdev behind a host bridge whose 4 HDM decoders each route a region already
@example(shape=BusShape(1, (4,), (1, 1, 3, 1), 0, False, 128 * MiB, "cxl-inference", slots=1, hot_add="full"))
# and the same refusal when the event's scoped apply (`apply --device mem4`) takes the memdev in: it fails with the
# plan's reason rather than reporting a converged node
@example(shape=BusShape(1, (4,), (1, 1, 1, 1), 0, False, 128 * MiB, "cxl-inference", slots=1, hot_add="scoped"))
def test_one_apply_converges_on_every_bus_shape(kernel: str, shape: BusShape) -> None:
    """One apply (disruptive changes allowed: committed regions boot online in ZONE_NORMAL) exits 0, each region
    lands on the node its plan named, the next plan is empty, and a revert returns the bus to its boot state."""
    shape = replace(shape, kernel=kernel)
    base = Path(tempfile.mkdtemp(prefix="bus-", dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None))
    try:
        root = shape.build(base / "n")
        k = SimKernel(root)
        booted = _bus_state(k)
        code, result = na(root, "apply", "--yes", "--allow-disruptive", "--skip-checks", "all",
                          PROFILES[shape.profile])
        pcode, plan = na(root, "plan", "--detailed-exitcode", PROFILES[shape.profile])
        assert (code, result.get("status")) == (0, "converged"), (shape, result.get("verify_errors"),
                                                                  result.get("outcomes"), result.get("plan", {}).get(
                                                                      "problems"))
        assert (pcode, plan.get("changes")) == (0, []), (shape, plan.get("changes"))
        _landed_as_planned(k, result)
        if shape.hot_add:  # a bare memdev plugged into a free slot: one more apply takes it in
            events = hotplug.hot_add_memdev(k, shape.hot_size * 256 * MiB)
            memdev = events[0].sysname
            scope = ["--device", memdev] if shape.hot_add == "scoped" else []
            code, result = na(root, "apply", "--yes", "--allow-disruptive", "--skip-checks", "all", *scope,
                              PROFILES[shape.profile])
            pcode, plan = na(root, "plan", "--detailed-exitcode", PROFILES[shape.profile])
            # the one shape the hardware cannot take: a memdev behind a host bridge whose HDM decoders each
            # route a region already (4 a port here); the plan says so, and nothing is written for it
            routed = [p for p in plan.get("problems", []) if "no region can be routed" in p["message"]]
            if routed and shape.memdevs[0] + 1 > 4:
                assert code == 5 and not [o for o in result["outcomes"] if o["status"] == "applied"], (
                    shape, result.get("outcomes"))
                assert plan.get("changes") == [], (shape, plan.get("changes"))
            else:
                assert (code, result.get("status")) == (0, "converged"), (shape, result.get("verify_errors"),
                                                                          result.get("outcomes"))
                assert (pcode, plan.get("changes")) == (0, []), (shape, plan.get("changes"))
            _landed_as_planned(k, result)
        code, reverted = na(root, "revert", "--yes", "--allow-disruptive")
        assert code == 0 and _bus_state(k) == booted, (shape, reverted.get("verify_errors"), _bus_state(k), booted)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _landed_as_planned(k: SimKernel, result: dict) -> None:
    """Each region's memory joined the node its plan named."""
    for c in result["plan"]["changes"]:
        if c["kind"] == "cxl_region" and c["op"] == "create":
            assert [int(k.tree.read(f"/sys/bus/dax/devices/{c['devices'][-1]}/target_node"))] == c["nodes"], c


def _bus_state(k: SimKernel) -> dict[str, object]:
    """What a revert puts back: the regions, each DAX device's driver and its online blocks, the nodes online,
    the kdamonds."""
    import glob

    from nodeagent.util.kfmt import parse_list

    sysroot = k.tree.local("/sys")
    out: dict[str, object] = {"online": parse_list(k.tree.read("/sys/devices/system/node/online"))}
    out["regions"] = sorted(os.path.basename(p) for p in glob.glob(f"{sysroot}/bus/cxl/devices/region*"))
    for dev in sorted(glob.glob(f"{sysroot}/bus/dax/devices/dax*")):
        drv = os.path.realpath(f"{dev}/driver") if os.path.exists(f"{dev}/driver") else ""
        out[os.path.basename(dev)] = os.path.basename(drv)
    blocks = glob.glob(f"{sysroot}/devices/system/memory/memory*/state")
    out["online_blocks"] = sum(1 for b in blocks if Path(b).read_text().strip() == "online")
    nr = f"{sysroot}/kernel/mm/damon/admin/kdamonds/nr_kdamonds"
    out["nr_kdamonds"] = Path(nr).read_text().strip() if os.path.exists(nr) else None
    return out
