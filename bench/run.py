#!/usr/bin/env python3
"""Benchmark: what nodeagent's everyday commands cost, as ratios to a bare tool start (`damo version`).

A systemd timer runs ``drift --record`` on every node of a fleet, and reviewers run ``plan``: what matters is
the CPU of one command in a fresh process, next to the cheapest thing a comparable tool can do. The peer is
damo 3.4.3 (DAMON's own user-space tool, Python too), installed by this script into its own venv; ``damo
version`` only prints its version. Each target is a ratio measured in the same run, pair by pair: one damo run,
one nodeagent run (the order alternates), so a neighbour that loads the CPU slows both sides of a pair.

- nodeagent is the installed command of a wheel built from this tree and installed into a venv of its own,
  bytecode compiled (pip does), never ``python -m``; ``PYTHONDONTWRITEBYTECODE`` is removed from the
  environment so no run times compilation.
- CPU, not wall time: ``wait4`` gives user+system CPU of the command and of the children it waited for; the
  children's share (the simulator's fake daxctl, or any command nodeagent runs) is reported apart, by a
  ``sitecustomize`` in both venvs that writes ``getrusage(RUSAGE_CHILDREN)`` at exit when the bench asks.
- When run as root the timed phase runs in a private mount namespace with ``/sys`` and ``/proc`` remounted
  read-only: damo cannot change this machine's DAMON, and nodeagent works on its simulated roots only.

    python bench/run.py [--pairs 11] [--quick] [--no-huge] [--h100-only] [--json FILE]

Exit status 1 when a target is missed. Everything lives under ``<cache>/bench`` (``$NODEAGENT_CACHE`` or
``~/.cache/nodeagent``): the venvs, the wheel, and the simulated nodes (the 1,000,000-block node takes a few
minutes and ~4 GB the first time and is reused while the simulator's code is unchanged).
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DAMO = "damo==3.4.3"
PROFILE = REPO / "profiles" / "cxl-inference.yaml"
HUGE_BLOCKS = 1_000_000

SITECUSTOMIZE = '''\
# Written by nodeagent's bench/run.py: report the CPU of waited-for children at exit, when the bench asks.
import os as _os
if _os.environ.get("NODEAGENT_BENCH_RUSAGE"):
    import atexit as _atexit

    def _report(_dir=_os.environ["NODEAGENT_BENCH_RUSAGE"], _pid=_os.getpid()):
        import resource
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            with open(f"{_dir}/{_pid}", "w") as f:
                f.write(f"{ru.ru_utime + ru.ru_stime}\\n")
        except OSError:
            pass

    _atexit.register(_report)
'''


# -- setup -------------------------------------------------------------------------------------------------
def cache_dir() -> Path:
    if os.environ.get("NODEAGENT_CACHE"):
        return Path(os.environ["NODEAGENT_CACHE"]) / "bench"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "nodeagent" / "bench"


def clean_env() -> dict[str, str]:
    """The environment of every command the bench runs: no PYTHON* variables, and nodeagent's cache (the
    validated-profile cache) of the bench's own, never one another checkout of nodeagent filled."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "NODEAGENT_", "VIRTUAL_ENV"))}
    env["LANG"] = env["LC_ALL"] = "C"
    env["NODEAGENT_CACHE"] = str(cache_dir() / "cache")
    return env


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def sh(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, env=clean_env(), **kw)  # type: ignore[call-overload]
    if proc.returncode != 0:
        raise SystemExit(f"bench setup: {' '.join(map(str, argv))} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return proc


def add_sitecustomize(venv: Path) -> None:
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    sh([str(venv / "bin" / "python"), "-m", "compileall", "-q", str(site / "sitecustomize.py")])


def damo_venv(work: Path) -> Path:
    venv = work / "venv-damo"
    exe = venv / "bin" / "damo"
    if not (exe.exists() and "3.4.3" in subprocess.run([str(exe), "version"], capture_output=True, text=True,
                                                       env=clean_env()).stdout):
        say(f"  installing {DAMO} into {venv}")
        shutil.rmtree(venv, ignore_errors=True)
        sh([sys.executable, "-m", "venv", str(venv)])
        sh([str(venv / "bin" / "pip"), "install", "--quiet", DAMO])
    add_sitecustomize(venv)
    return exe


def source_digest() -> str:
    h = hashlib.sha256()
    for f in sorted([REPO / "pyproject.toml", REPO / "README.md", *(REPO / "nodeagent").rglob("*"),
                     *(REPO / "sim").rglob("*")]):
        if f.is_file() and "__pycache__" not in f.parts and not any(p.endswith(".egg-info") for p in f.parts):
            h.update(str(f.relative_to(REPO)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def nodeagent_venv(work: Path) -> Path:
    """A venv with nodeagent installed from a wheel of this tree (rebuilt when the tree changed), and the
    simulator's wheel beside it (the machine plugin the simulated nodes need)."""
    venv = work / "venv-nodeagent"
    stamp = venv / ".source-digest"
    digest = source_digest()
    if not (stamp.exists() and stamp.read_text() == digest):
        say(f"  building a wheel of {REPO} and installing it into {venv}")
        dist = work / "dist"
        shutil.rmtree(dist, ignore_errors=True)
        with tempfile.TemporaryDirectory() as tmp:  # build from a copy: never write build/ into the tree
            src = Path(tmp) / "src"
            shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.egg-info",
                                                                      "build", "dist", ".pytest_cache"))
            sh([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(src)])
            sh([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(src / "sim")])
        wheel = next(dist.glob("nodeagent-0*.whl"))
        sim_wheel = next(dist.glob("nodeagent_sim-*.whl"))
        if not (venv / "bin" / "python").exists():
            sh([sys.executable, "-m", "venv", str(venv)])
        sh([str(venv / "bin" / "pip"), "install", "--quiet", "--force-reinstall", "--no-deps", str(wheel)])
        sh([str(venv / "bin" / "pip"), "install", "--quiet", str(wheel)])  # its dependencies, once
        sh([str(venv / "bin" / "pip"), "install", "--quiet", "--force-reinstall", "--no-deps", str(sim_wheel)])
        add_sitecustomize(venv)
        stamp.write_text(digest)
    return venv


@dataclass
class Nodes:
    venv: Path
    work: Path

    def python(self, code: str) -> str:
        return sh([str(self.venv / "bin" / "python"), "-c", code]).stdout

    def remove(self, root: Path) -> None:
        """Delete a simulated node (``rm -rf``: a million-block node is millions of files)."""
        if not (root / ".nodeagent-machine" / "meta.json").is_file() and root.exists():
            raise SystemExit(f"bench: {root} is not a simulated node; not removing it")
        subprocess.run(["rm", "-rf", "--one-file-system", str(root)], check=True)

    def fresh(self, name: str, preset_expr: str, base: Path | None = None) -> Path:
        """A newly laid out node (made by the bench venv's simulator, so its fake daxctl runs that venv)."""
        root = (base or self.work / "nodes") / name
        self.remove(root)
        root.parent.mkdir(parents=True, exist_ok=True)
        self.python(f"from pathlib import Path; from nodeagent_sim import presets as p\n"
                    f"p.build({preset_expr}, Path({str(root)!r}))")
        return root

    def reused(self, name: str, preset_expr: str) -> Path:
        """A node kept between bench runs while the simulator's code and the preset are unchanged."""
        key = self.python(f"import hashlib; from nodeagent_sim import fingerprint\n"
                          f"print(fingerprint() + hashlib.sha256({preset_expr!r}.encode()).hexdigest()[:8])").strip()
        root = self.work / "nodes" / f"{name}-{key}"
        if (root / ".nodeagent-machine" / "meta.json").is_file():
            return root
        for old in (self.work / "nodes").glob(f"{name}-*"):
            self.remove(old)
        tmp = self.fresh(f".{name}.tmp", preset_expr)
        os.rename(tmp, root)
        return root


# -- measuring ---------------------------------------------------------------------------------------------
@dataclass
class Run:
    cpu: float  # the command's own CPU (user + system), seconds
    children: float  # CPU of the children it waited for
    wall: float


def run(argv: list[str], rusage_dir: str, ok: tuple[int, ...] = (0,)) -> Run:
    env = clean_env()
    env["NODEAGENT_BENCH_RUSAGE"] = rusage_dir
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in ok:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode} (expected {ok}):\n{err.decode()[-2000:]}")
    total = ru.ru_utime + ru.ru_stime
    report = Path(rusage_dir) / str(proc.pid)
    children = float(report.read_text()) if report.exists() else 0.0
    report.unlink(missing_ok=True)
    return Run(max(total - children, 0.0), children, wall)


@dataclass
class Row:
    name: str
    limit: float | None  # the target ratio (None: reported, no target)
    unit: str = "×"
    values: list[float] = field(default_factory=list)  # ratios (or ms for absolute rows)
    peer_ms: list[float] = field(default_factory=list)
    own_ms: list[float] = field(default_factory=list)
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def met(self) -> bool | None:
        return None if self.limit is None else self.median <= self.limit


def paired(name: str, limit: float, damo: list[str], cmd: list[str], pairs: int, rusage_dir: str,
           ok: tuple[int, ...] = (0,)) -> Row:
    row = Row(name, limit)
    run(damo, rusage_dir)  # one warm-up of each, not counted (page cache)
    run(cmd, rusage_dir, ok)
    for i in range(pairs):
        if i % 2 == 0:
            peer, own = run(damo, rusage_dir), run(cmd, rusage_dir, ok)
        else:
            own, peer = run(cmd, rusage_dir, ok), run(damo, rusage_dir)
        row.values.append(own.cpu / peer.cpu)
        row.peer_ms.append(peer.cpu * 1000)
        row.own_ms.append(own.cpu * 1000)
    say(f"  {name}: median {row.median:.2f}× ({statistics.median(row.own_ms):.0f} ms vs "
        f"{statistics.median(row.peer_ms):.0f} ms)")
    return row


GATHER = """\
import sys, time
from nodeagent.facts import gather
from nodeagent.host import open_host
host = open_host(sys.argv[1])
start = time.process_time()
gather(host)
print(time.process_time() - start)
"""


def gather_row(venv: Path, root: Path, runs: int, rusage_dir: str) -> Row:
    """Fact gathering inside the process (imports excluded), CPU ms, each in a fresh process."""
    row = Row("stress: in-process fact gathering (ms)", 50.0, unit="ms")
    py = str(venv / "bin" / "python")
    for _ in range(runs + 1):
        out = subprocess.run([py, "-c", GATHER, str(root)], capture_output=True, text=True, env=clean_env())
        if out.returncode != 0:
            raise SystemExit(f"gathering facts on {root} failed:\n{out.stderr[-2000:]}")
        row.values.append(float(out.stdout) * 1000)
    row.values.pop(0)  # the warm-up
    say(f"  {row.name}: median {row.median:.1f} ms")
    return row


def first_apply(nodes: Nodes, na: str, rusage_dir: str) -> tuple[Row, Row]:
    """Online 131,072 blocks (8 devdax devices of 2 TiB in 128 MiB blocks): nodeagent's CPU vs the simulator's."""
    shm = Path("/dev/shm")  # tmpfs when it has room: laying out and deleting 1.4 M files on a disk takes minutes
    base = shm / f"nodeagent-bench-{os.getpid()}" if os.access(shm, os.W_OK) and \
        shutil.disk_usage(shm).free > 4 * 1024**3 else None
    root = nodes.fresh("first-apply", "p.large(online_zone=None, name='first-apply')", base)
    blocks = 8 * 2 * 1024**4 // (128 * 1024**2)
    r = run([na, "--root", str(root), "apply", "--yes", str(PROFILE)], rusage_dir)
    own = Row("first apply, 131,072 blocks: nodeagent µs/block", None, unit="µs")
    own.values = [r.cpu / blocks * 1e6]
    sim = Row("first apply, 131,072 blocks: simulator µs/block", None, unit="µs")
    sim.values = [r.children / blocks * 1e6]
    share = r.cpu / (r.cpu + r.children) if r.cpu + r.children else 0.0
    own.note = f"{share:.0%} of the CPU; wall {r.wall:.1f} s"
    sim.note = f"fake daxctl + emulated kernel, {1 - share:.0%}"
    say(f"  first apply: {r.cpu:.1f} s nodeagent, {r.children:.1f} s simulator, {r.wall:.1f} s wall")
    nodes.remove(root)
    if base is not None:
        base.rmdir()
    return own, sim


# -- the sysfs-less namespace ----------------------------------------------------------------------------
def readonly_kernel() -> str:
    """Run the rest of the bench with /sys and /proc read-only (own mount namespace); say what was done.

    damo lists /sys/module while it builds its argument parser, so /sys cannot simply be hidden; read-only,
    nothing it (or anything else) runs can change this machine's kernel state."""
    if os.geteuid() != 0:
        return "not root: damo version ran with this machine's /sys writable (it only reads /sys/module)"
    libc = ctypes.CDLL(None, use_errno=True)
    clone_newns, ms_rdonly, ms_remount, ms_bind, ms_rec, ms_private = 0x20000, 1, 32, 4096, 0x4000, 1 << 18
    if libc.unshare(clone_newns) != 0:
        return f"unshare failed (errno {ctypes.get_errno()}): /sys stayed writable"
    if libc.mount(b"none", b"/", None, ms_rec | ms_private, None) != 0:
        return f"mount failed (errno {ctypes.get_errno()}): /sys stayed writable"
    for fs in (b"/sys", b"/proc"):
        if libc.mount(fs, fs, None, ms_bind | ms_remount | ms_rdonly, None) != 0:
            return f"read-only remount of {fs.decode()} failed (errno {ctypes.get_errno()})"
    return "timed in a private mount namespace with /sys and /proc read-only"


# -- report --------------------------------------------------------------------------------------------------
def fmt(v: float, unit: str) -> str:
    return f"{v:.2f}×" if unit == "×" else f"{v:.1f} {unit}" if v < 1000 else f"{v:.0f} {unit}"


def table(rows: list[Row]) -> str:
    head = f"| {'target':<52} | {'limit':>7} | {'min':>8} | {'median':>8} | {'max':>8} | {'n':>3} | {'met':<7} |"
    out = [head, "|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|"]
    for r in rows:
        limit = "-" if r.limit is None else fmt(r.limit, r.unit)
        met = "-" if r.met is None else ("met" if r.met else "NOT MET")
        out.append(f"| {r.name:<52} | {limit:>7} | {fmt(min(r.values), r.unit):>8} | {fmt(r.median, r.unit):>8} "
                   f"| {fmt(max(r.values), r.unit):>8} | {len(r.values):>3} | {met:<7} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=11, help="pairs per target (default 11)")
    ap.add_argument("--quick", action="store_true", help="5 pairs, no first apply, no 1,000,000-block node")
    ap.add_argument("--no-huge", action="store_true", help="skip the 1,000,000-block node")
    ap.add_argument("--no-first-apply", action="store_true", help="skip the 131,072-block first apply")
    ap.add_argument("--h100-only", action="store_true",
                    help="only the three converged h100-cxl targets (no stress node, no 1,000,000-block node)")
    ap.add_argument("--json", metavar="FILE", help="also write every figure as JSON to FILE")
    args = ap.parse_args()
    pairs = 5 if args.quick else args.pairs
    began = time.monotonic()
    work = cache_dir()
    work.mkdir(parents=True, exist_ok=True)
    say("setting up (venvs and simulated nodes are reused between runs)")
    damo = [str(damo_venv(work)), "version"]
    venv = nodeagent_venv(work)
    na = str(venv / "bin" / "nodeagent")
    nodes = Nodes(venv, work)
    profile = str(PROFILE)

    h100 = nodes.fresh("h100-cxl", "p.get('h100-cxl')")
    stress = None if args.h100_only else nodes.reused("stress", "p.large()")
    huge = None
    if not (args.quick or args.no_huge or args.h100_only):
        per_dev = HUGE_BLOCKS // 8 * 128 * 1024**2
        huge = nodes.reused("huge", f"p.large(8, {per_dev}, name='huge')")
    for root in (h100, stress, huge):
        if root is not None:
            sh([na, "--root", str(root), "apply", "--yes", "--allow-disruptive", profile])
    where = readonly_kernel()
    rusage_dir = tempfile.mkdtemp(prefix="nodeagent-bench-")
    say(f"timing ({where})")
    on = ["--root"]
    rows = [
        paired("h100-cxl converged: drift --record PROFILE", 1.5, damo,
               [na, *on, str(h100), "drift", "--record", profile], pairs, rusage_dir),
        paired("h100-cxl converged: plan PROFILE", 1.8, damo, [na, *on, str(h100), "plan", profile], pairs,
               rusage_dir),
        paired("h100-cxl converged: apply --yes PROFILE", 2.2, damo,
               [na, *on, str(h100), "apply", "--yes", profile], pairs, rusage_dir),
    ]
    if stress is not None:
        rows += [paired("stress (139,264 blocks): plan PROFILE", 2.5, damo, [na, *on, str(stress), "plan", profile],
                        pairs, rusage_dir),
                 gather_row(venv, stress, pairs, rusage_dir)]
    if huge is not None:
        rows.append(paired(f"{HUGE_BLOCKS:,} blocks: plan PROFILE", 3.0, damo,
                           [na, *on, str(huge), "plan", profile], max(3, pairs // 2), rusage_dir))
    if not (args.quick or args.no_first_apply or args.h100_only):
        rows += first_apply(nodes, na, rusage_dir)
    shutil.rmtree(rusage_dir, ignore_errors=True)

    peer = statistics.median(v for r in rows for v in r.peer_ms) if any(r.peer_ms for r in rows) else 0.0
    print(f"nodeagent (installed wheel, compiled) vs `damo version` 3.4.3 ({peer:.0f} ms CPU median), CPU of the "
          f"command itself, paired and interleaved; {where}; {time.monotonic() - began:.0f} s")
    print(table(rows))
    for r in rows:
        if r.note:
            print(f"  {r.name}: {r.note}")
    if args.json:
        Path(args.json).write_text(json.dumps([{"target": r.name, "limit": r.limit, "unit": r.unit,
                                                "values": r.values, "peer_ms": r.peer_ms, "own_ms": r.own_ms,
                                                "met": r.met} for r in rows], indent=1) + "\n")
    missed = [r.name for r in rows if r.met is False]
    if missed:
        print(f"missed: {'; '.join(missed)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
