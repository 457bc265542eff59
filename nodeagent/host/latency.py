"""Load-to-use memory latency per memory node, from a CPU of each CPU node (the real-root probe and its limits).

Python cannot time a cache miss, so the chase is a small C helper (``latprobe.c``, shipped with the package)
built with the host's ``cc`` at first use into ``$NODEAGENT_CACHE/latprobe`` (else ``$XDG_CACHE_HOME``, else
``~/.cache``/nodeagent/latprobe), named by a digest of its source so an upgrade rebuilds it. One run, per
(initiator CPU node, memory node) pair: the helper pins itself to one CPU of the initiator, maps a buffer of
at least 4× the initiator's last-level cache (``cpuN/cache/index3/size``, every distinct L3 of the node's
CPUs), asks for transparent huge pages (``MADV_HUGEPAGE``) and binds it to the memory node
(``mbind(MPOL_BIND)``) before touching it, links every cache line into one random cycle, and times several
chains of dependent loads; the figure is the median chain's ns per load.

Limits, per pair: the buffer is at most ``max_buffer`` (refused above it: a smaller one would time the
cache), refused when the memory node has less ``MemFree`` than the buffer, and the run ends within
``budget`` seconds (the helper stops its chains there; the process is killed one second after). The firmware's
declared figures (HMAT: ``nodeN/access0/initiators/read_latency``, ns) are read beside the measured ones.

On a simulated root the machine plugin answers (:mod:`nodeagent.host.machine`); on any other root the probe is
refused: it would measure this machine. Nothing is written but the helper's own binary in the cache.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from ..util import jsonin
from ..util.errors import HostError
from ..util.kfmt import MAX_CPUS, parse_list, parse_meminfo

if TYPE_CHECKING:
    from . import Host

NODE = "/sys/devices/system/node"
CPU = "/sys/devices/system/cpu"
MiB = 1024**2
#: The stated memory cap per node: the largest buffer the probe maps unless the profile raises it.
MAX_BUFFER = 2048 * MiB
#: When no L3 size can be read (some virtual CPUs, some Arm parts): a buffer well past any such cache.
NO_LLC_BUFFER = 256 * MiB
MIN_BUFFER = 64 * MiB
BUDGET = 2.0  # seconds per pair
CHAINS = 7
LOADS = 200_000
COMPILERS = ("cc", "gcc", "clang")


@dataclass(frozen=True)
class Limits:
    max_buffer: int = MAX_BUFFER
    budget: float = BUDGET
    chains: int = CHAINS
    loads: int = LOADS


@dataclass(frozen=True)
class Declared:
    """What the firmware declares for a memory node (HMAT / CDAT through ``accessN/initiators``)."""

    access: str  # access0: any initiator; access1: CPU initiators only
    initiators: tuple[int, ...]
    read_latency_ns: int | None
    write_latency_ns: int | None
    read_bandwidth_mbps: int | None


@dataclass(frozen=True)
class Pair:
    """One measured (or refused) pair."""

    initiator: int
    node: int
    cpu: int | None
    buffer: int
    ns: float | None = None  # median chain, ns per load
    chains: tuple[float, ...] = ()
    seconds: float = 0.0
    thp_bytes: int | None = None
    placed_on: tuple[int, ...] = ()
    error: str | None = None
    hint: str | None = None


@dataclass
class Survey:
    """Every pair, with the inputs that sized them; ``ratio`` is against the initiator's local DRAM."""

    pairs: list[Pair] = field(default_factory=list)
    llc: dict[int, int | None] = field(default_factory=dict)  # initiator node → L3 bytes (None: unknown)
    declared: dict[int, list[Declared]] = field(default_factory=dict)
    cpuless: dict[int, bool] = field(default_factory=dict)
    source: str = "measured"

    def local(self, initiator: int) -> float | None:
        """The initiator's own DRAM, else the fastest node with CPUs it measured."""
        mine = [p.ns for p in self.pairs if p.initiator == initiator and p.node == initiator and p.ns]
        if mine:
            return mine[0]
        dram = [p.ns for p in self.pairs if p.initiator == initiator and p.ns and not self.cpuless.get(p.node)]
        return min(dram) if dram else None

    def ratio(self, p: Pair) -> float | None:
        base = self.local(p.initiator)
        return p.ns / base if p.ns and base else None


# -- what the node says --------------------------------------------------------------------------------------

def _nodes(host: Host, name: str) -> list[int]:
    return parse_list(host.read_opt(f"{NODE}/{name}") or "", f"{NODE}/{name}")


def node_cpus(host: Host, node: int) -> list[int]:
    return parse_list(host.read_opt(f"{NODE}/node{node}/cpulist") or "", f"{NODE}/node{node}/cpulist",
                      limit=MAX_CPUS)


def free_bytes(host: Host, node: int) -> int:
    return parse_meminfo(host.read_opt(f"{NODE}/node{node}/meminfo") or "").get("MemFree", 0) * 1024


def llc_bytes(host: Host, cpus: list[int]) -> int | None:
    """The last-level cache the CPUs share among them: the sum of each distinct L3 (by ``shared_cpu_list``),
    else of the highest cache level the CPUs have. None when no cache is described."""
    seen: dict[str, int] = {}
    best_level = 0
    for c in cpus:
        base = f"{CPU}/cpu{c}/cache"
        for idx in ("index3", *(f"index{i}" for i in (4, 2))):
            size = host.read_opt(f"{base}/{idx}/size")
            if not size:
                continue
            level = int((host.read_opt(f"{base}/{idx}/level") or idx[-1]).strip() or 0)
            if level < best_level:
                break
            if level > best_level:
                best_level, seen = level, {}
            key = (host.read_opt(f"{base}/{idx}/shared_cpu_list") or str(c)).strip()
            seen[key] = _cache_size(size)
            break
    return sum(seen.values()) or None


def _cache_size(text: str) -> int:
    """``491520K`` (how sysfs prints a cache size) → bytes; 0 when unreadable."""
    t = text.strip()
    mult = {"K": 1024, "M": MiB, "G": 1024 * MiB}.get(t[-1:], 1)
    digits = t[:-1] if mult != 1 else t
    return int(digits) * mult if digits.isdigit() else 0


def declared(host: Host, node: int) -> list[Declared]:
    out = []
    for access in ("access0", "access1"):
        d = f"{NODE}/node{node}/{access}/initiators"
        lat = host.read_opt(f"{d}/read_latency")
        if lat is None:
            continue
        names = host.fs.listdir(d)
        inits = tuple(sorted(int(n[4:]) for n in names if n.startswith("node") and n[4:].isdigit()))
        out.append(Declared(access, inits, _int(lat), _int(host.read_opt(f"{d}/write_latency")),
                            _int(host.read_opt(f"{d}/read_bandwidth"))))
    return out


def _int(text: str | None) -> int | None:
    t = (text or "").strip()
    return int(t) if t.isdigit() else None


def buffer_for(llc: int | None, limits: Limits) -> int:
    """At least 4× the last-level cache, whole 2 MiB pages; :data:`NO_LLC_BUFFER` when the LLC is unknown."""
    want = max(4 * llc, MIN_BUFFER) if llc else NO_LLC_BUFFER
    return -(-want // (2 * MiB)) * 2 * MiB


# -- the survey ------------------------------------------------------------------------------------------------

def survey(host: Host, limits: Limits | None = None, *, initiators: list[int] | None = None,
           targets: list[int] | None = None) -> Survey:
    """Measure every memory node (or ``targets``) from every CPU node (or ``initiators``), within ``limits``."""
    limits = limits or Limits()
    online = _nodes(host, "online")
    with_cpu = [n for n in online if node_cpus(host, n)]
    with_mem = [n for n in online if parse_meminfo(host.read_opt(f"{NODE}/node{n}/meminfo") or "").get("MemTotal")]
    s = Survey(source="simulated" if host.simulated else "measured")
    for n in with_mem:
        s.cpuless[n] = n not in with_cpu
        s.declared[n] = declared(host, n)
    runner = _runner(host)
    allowed = os.sched_getaffinity(0)
    for i in initiators if initiators is not None else with_cpu:
        cpus = node_cpus(host, i)
        s.llc[i] = llc_bytes(host, cpus)
        size = buffer_for(s.llc[i], limits)
        usable = cpus if host.simulated else [c for c in cpus if c in allowed]
        for t in targets if targets is not None else with_mem:
            s.pairs.append(_one(host, runner, i, t, usable, size, limits, s.llc[i]))
    return s


Runner = Callable[[int, int, int, int, "Limits"], "Pair"]


def _one(host: Host, runner: Runner, i: int, t: int, cpus: list[int], size: int, limits: Limits,
         llc: int | None) -> Pair:
    cpu = cpus[0] if cpus else None
    if cpu is None:
        return Pair(i, t, None, size, error=f"no CPU of node{i} is in this process's affinity mask",
                    hint="run it without a CPU restriction (taskset, systemd CPUAffinity=)")
    if size > limits.max_buffer:
        return Pair(i, t, cpu, size, error=f"the buffer would be {size // MiB} MiB (4× node{i}'s "
                    f"{(llc or 0) // MiB} MiB last-level cache), above max_buffer {limits.max_buffer // MiB} MiB",
                    hint=f"raise checks.latency.max_buffer to {size // MiB}MiB (a smaller buffer times the cache)")
    free = free_bytes(host, t)
    if free < size:
        return Pair(i, t, cpu, size, error=f"node{t} has {free // MiB} MiB free, the probe needs {size // MiB} MiB",
                    hint="run it when the node has that much free, or lower max_buffer")
    try:
        return runner(i, t, cpu, size, limits)
    except HostError as exc:
        return Pair(i, t, cpu, size, error=exc.message, hint=exc.hint)


def _runner(host: Host) -> Runner:
    if host.simulated:
        from .machine import plugin

        sim = plugin()

        def simulated(i: int, t: int, cpu: int, size: int, limits: Limits) -> Pair:
            try:
                ns = sim.chase_ns(host.root, i, t)
            except OSError as exc:
                raise HostError(f"mbind to node {t} failed: {exc.strerror}",
                                hint="the node may have no memory online, or not exist") from None
            seconds = min(size / 8e9 + limits.chains * limits.loads * ns * 1e-9, limits.budget)
            thp = host.read_opt("/sys/kernel/mm/transparent_hugepage/enabled") or ""
            return Pair(i, t, cpu, size, ns, (ns,) * limits.chains, seconds, 0 if "[never]" in thp else size, (t,))

        return simulated
    if not host.is_real:
        raise HostError(f"cannot measure memory latency for --root {host.root}: it would measure this machine",
                        hint="run nodeagent on the node itself (--root /)")
    binary = build()
    max_node = max(_nodes(host, "possible") or [0])

    def real(i: int, t: int, cpu: int, size: int, limits: Limits) -> Pair:
        return run(binary, i, t, cpu, size, limits, max_node)

    return real


# -- the helper --------------------------------------------------------------------------------------------------

def cache_dir() -> Path:
    if os.environ.get("NODEAGENT_CACHE"):
        return Path(os.environ["NODEAGENT_CACHE"]) / "latprobe"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "nodeagent" / "latprobe"


def source() -> bytes:
    return resources.files("nodeagent.host").joinpath("latprobe.c").read_bytes()


def compiler() -> str:
    for name in COMPILERS:
        path = shutil.which(name)
        if path:
            return path
    raise HostError(f"the latency probe needs a C compiler: none of {', '.join(COMPILERS)} is on PATH",
                    hint="install one (Debian/Ubuntu: apt-get install gcc libc6-dev; RHEL: dnf install gcc)")


def build(directory: Path | None = None) -> Path:
    """The helper's binary, compiled now if this source has not been built yet. HostError names what is missing."""
    src = source()
    directory = directory or cache_dir()
    binary = directory / f"latprobe-{hashlib.sha256(src).hexdigest()[:12]}"
    if os.access(binary, os.X_OK):
        _trusted(binary)
        return binary
    cc = compiler()
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        _trusted(directory)
        with tempfile.TemporaryDirectory(dir=directory) as tmp:
            c = Path(tmp) / "latprobe.c"
            c.write_bytes(src)
            proc = subprocess.run([cc, "-O2", "-std=gnu11", "-o", str(Path(tmp) / "latprobe"), str(c)],
                                  capture_output=True, text=True, env={**os.environ, "LANG": "C", "LC_ALL": "C"},
                                  timeout=120, check=False)
            if proc.returncode != 0:
                tail = " ".join(proc.stderr.strip().splitlines()[-3:])
                raise HostError(f"{cc} could not build the latency probe: {tail}",
                                hint="install the C library headers (Debian/Ubuntu: apt-get install libc6-dev)")
            os.replace(Path(tmp) / "latprobe", binary)
    except OSError as exc:
        raise HostError(f"cannot build the latency probe in {directory}: {exc.strerror}",
                        hint="set NODEAGENT_CACHE to a writable directory") from None
    return binary


def _trusted(path: Path) -> None:
    """Refuse a helper (or its directory) that someone else could have replaced: nodeagent runs it, often as root."""
    st = path.stat()
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise HostError(f"refusing to use the latency probe at {path}: it is not owned by this user, or others may "
                        "write it", hint="remove it, or set NODEAGENT_CACHE to a directory only you can write")


def run(binary: Path, initiator: int, node: int, cpu: int, size: int, limits: Limits, max_node: int) -> Pair:
    budget_ms = max(int(limits.budget * 1000), 1)
    argv = [str(binary), "--cpu", str(cpu), "--node", str(node), "--bytes", str(size), "--chains",
            str(limits.chains), "--loads", str(limits.loads), "--budget-ms", str(budget_ms), "--max-node",
            str(max_node)]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=limits.budget + 1.0, check=False)
    except subprocess.TimeoutExpired:
        raise HostError(f"the latency probe of node{node} from node{initiator} ran past its {limits.budget:g} s "
                        "budget and was stopped", hint="lower max_buffer (setting the buffer up took the time)") \
            from None
    if proc.returncode != 0:
        msg = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
        hint = ("the node may have no memory online" if "mbind" in msg else
                "faulting the buffer in is slower than the budget here (a busy or virtualised node): raise "
                "checks.latency.max_seconds (up to 10)" if proc.returncode == 4 else None)
        raise HostError(f"the latency probe of node{node} from CPU {cpu} failed: {msg}", hint=hint)
    try:
        out = jsonin.loads(proc.stdout)
    except ValueError:
        raise HostError(f"the latency probe printed no result: {proc.stdout[:200]!r}") from None
    placed = tuple(out.get("nodes", ()))
    if placed and set(placed) != {node}:
        raise HostError(f"the latency probe's buffer for node{node} landed on node(s) "
                        f"{','.join(map(str, placed))}", hint="the kernel did not honour MPOL_BIND")
    thp = out.get("thp_bytes")
    return Pair(initiator, node, cpu, int(out["bytes"]), float(out["median_ns"]), tuple(out["ns"]),
                out["total_ms"] / 1000, thp if isinstance(thp, int) and thp >= 0 else None, placed)
