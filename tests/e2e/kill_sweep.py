"""The kill sweep: ``kill -9`` an apply (or a revert) of the shipped profile at a random moment, then converge.

Where :mod:`tests.e2e.fault_sweep` stops an apply right *before* one of its writes, this sweep kills it wherever it
happens to be — in the middle of a write the simulated kernel is making to several files, while the fake daxctl
onlines blocks, between two writes of a kdamond's build — as an operator's ``kill -9``, the OOM killer or a
``KillMode=control-group`` stop would. Each run:

- clones a node of the preset (``apply``: as booted; ``revert``: after a clean apply), starts ``nodeagent apply``
  (or ``revert --allow-disruptive``) in a forked process of its own process group, and SIGKILLs it (every other
  run: its whole process group, daxctl included) after a random delay within the time a clean run takes;
- a revert run then reverts again: it must complete (exit 0) and give back the node as booted;
- then applies: it must converge (exit 0), and a plan after it must be empty.

The delays come from one seeded generator (the seed is printed); ``python -m tests.e2e.kill_sweep`` runs a sweep
and prints the counts (``make kill-sweep``), the tests run a sample of it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.conftest import clone
from tests.e2e.fault_sweep import PROFILE, _code, _fork, _main, run_forked

PRESETS = ("h100-cxl-memdevs", "h100-cxl", "qemu-3node")


@dataclass
class Run:
    """One kill and what followed it."""

    preset: str
    verb: str  # apply | revert
    delay: float
    group: bool  # the whole process group was killed
    killed: bool = False  # the SIGKILL landed (the process was still running)
    code: int = 0  # how the killed run ended: exit code, or -signal
    problems: list[str] = field(default_factory=list)

    def where(self) -> str:
        return (f"{self.preset} {self.verb} killed{' (group)' if self.group else ''} at {self.delay:.3f}s "
                f"({'landed' if self.killed else f'exit {self.code} first'})")


def _args(root: Path, verb: str) -> list[str]:
    if verb == "apply":
        return ["--root", str(root), "apply", PROFILE, "--yes", "--skip-checks", "all"]
    return ["--root", str(root), "revert", "--yes", "--allow-disruptive"]


def _in_group(fn: Any) -> Any:
    def child() -> int:
        os.setpgid(0, 0)
        return fn()

    return child


def boot_state(root: Path) -> dict[str, Any]:
    """What a revert must give back: every managed knob, each DAX device's mode and zones, the kdamond slots."""
    from nodeagent.facts import gather
    from nodeagent.facts.damon import from_facts as damon_facts
    from nodeagent.host import open_host

    facts = gather(open_host(root))
    damon = damon_facts(facts)
    dax = facts.sections.get("dax") or {}
    return {"knobs": facts.knobs, "nr_kdamonds": damon.nr_kdamonds,
            "running": [kd.index for kd in damon.kdamonds if kd.running],
            "dax": json.dumps(dax.get("devices", dax), sort_keys=True, default=str)}


@dataclass
class Node:
    """A preset laid out once: the node as booted, as applied, and how long a clean apply and revert take."""

    preset: str
    booted: Path
    applied: Path
    boot: dict[str, Any]
    apply_s: float
    revert_s: float


def prepare(preset: str, work: Path) -> Node:
    from nodeagent_sim import build, get

    booted = build(get(preset), work / f"{preset}-booted")
    applied = work / f"{preset}-applied"
    clone(booted, applied)
    t0 = time.monotonic()
    code, _, err = run_forked(lambda: _main(_args(applied, "apply")), work / "prep")
    apply_s = time.monotonic() - t0
    if code != 0:
        raise RuntimeError(f"{preset}: a clean apply exited {code}: {err[-600:]}")
    scratch = work / f"{preset}-revert"
    clone(applied, scratch)
    t0 = time.monotonic()
    code, _, err = run_forked(lambda: _main(_args(scratch, "revert")), work / "prep")
    revert_s = time.monotonic() - t0
    if code != 0:
        raise RuntimeError(f"{preset}: a clean revert exited {code}: {err[-600:]}")
    shutil.rmtree(scratch)
    # the probes a reboot alone changes, cached by the first apply, belong to the booted node too
    probes = applied / "var/lib/nodeagent/probes.json"
    if probes.exists():
        (booted / "var/lib/nodeagent").mkdir(parents=True, exist_ok=True)
        shutil.copy2(probes, booted / "var/lib/nodeagent/probes.json")
    return Node(preset, booted, applied, boot_state(booted), apply_s, revert_s)


def _killed(root: Path, verb: str, delay: float, group: bool, out: Path) -> tuple[bool, int]:
    """Start ``verb`` on ``root``, SIGKILL it after ``delay`` seconds: (whether it was still running, its end)."""
    pid = _fork(_in_group(lambda: _main(_args(root, verb))), out)
    try:
        os.setpgid(pid, pid)  # (both sides, so the group exists before the kill whoever runs first)
    except OSError:
        pass
    deadline = time.monotonic() + delay
    done, status = 0, 0
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(min(0.005, max(deadline - time.monotonic(), 0)))
    if not done:
        try:
            os.killpg(pid, signal.SIGKILL) if group else os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, status = os.waitpid(pid, 0)
    if group:  # nothing of the group may outlive the run (a daxctl the kill reached late)
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for ext in (".stdout", ".stderr"):  # (a kill that lands before the child opened them leaves none)
        Path(f"{out}{ext}").unlink(missing_ok=True)
    code = _code(status)
    return code == -signal.SIGKILL, code


def one(node: Node, verb: str, delay: float, group: bool, work: Path) -> Run:
    r = Run(node.preset, verb, delay, group)
    root = work / f"k-{node.preset}-{verb}"
    if root.exists():
        shutil.rmtree(root)
    clone(node.booted if verb == "apply" else node.applied, root)
    r.killed, r.code = _killed(root, verb, delay, group, work / "killed")
    if verb == "revert":
        code, out, err = run_forked(lambda: _main(_args(root, "revert")), work / "again")
        if code != 0:
            r.problems.append(f"the next revert exited {code}: {(err or out).strip()[-600:]}")
        else:
            now = boot_state(root)
            diff = sorted(k for k in now if now[k] != node.boot[k])
            if diff:
                r.problems.append("the next revert left the node unlike its boot: " + "; ".join(
                    f"{k}: {now[k]} (boot: {node.boot[k]})" for k in diff)[:1200])
    code, out, err = run_forked(lambda: _main(_args(root, "apply")), work / "converge")
    if code != 0:
        r.problems.append(f"the next apply exited {code}: {(err or out).strip()[-800:]}")
    code, out, err = run_forked(lambda: _main(["--root", str(root), "--format", "json", "plan", PROFILE]),
                                work / "plan")
    try:
        changes = json.loads(out).get("changes") if out.strip() else None
    except ValueError:
        changes = None
    if code != 0 or changes:
        what = ", ".join(c.get("target", "?") for c in changes or []) or (err or out).strip()[-400:]
        r.problems.append(f"the plan after it is not empty (exit {code}): {what}")
    if r.problems:  # kept for a look
        os.replace(root, work / f"failed-{node.preset}-{verb}-{delay:.3f}")
    else:
        shutil.rmtree(root)
    return r


@dataclass
class Counts:
    runs: int = 0
    landed: int = 0
    converged: int = 0
    failures: list[str] = field(default_factory=list)

    def line(self, verb: str) -> str:
        return (f"{verb}: {self.runs} runs, {self.landed} SIGKILLs landed, {self.converged} converged, "
                f"{len(self.failures)} failures")


def _one_apart(node: Node, verb: str, delay: float, group: bool, work: Path) -> Run:
    """:func:`one` in a work directory of its own (a sweep with ``jobs``), removed unless a failure was kept."""
    work.mkdir(parents=True, exist_ok=True)
    r = one(node, verb, delay, group, work)
    if not r.problems:
        shutil.rmtree(work, ignore_errors=True)
    return r


def _runs(work: Path, nodes: dict[str, Node], plan: list[tuple[str, float, bool, str]], jobs: int) -> Any:
    """The runs of ``plan`` ((verb, delay, group, preset) each), one at a time or ``jobs`` at once, as they end."""
    if jobs <= 1:
        for verb, delay, group, preset in plan:
            yield one(nodes[preset], verb, delay, group, work)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as ex:
        futures = [ex.submit(_one_apart, nodes[preset], verb, delay, group, work / f"run-{n}")
                   for n, (verb, delay, group, preset) in enumerate(plan)]
        for f in as_completed(futures):
            yield f.result()


def sweep(work: Path, applies: int, reverts: int, seed: int, presets: tuple[str, ...] = PRESETS,
          log: Any = None, jobs: int = 1) -> dict[str, Counts]:
    """``applies`` apply kills and ``reverts`` revert kills, spread over ``presets`` in turn; ``jobs`` at a time
    (the same runs, the same delays for a seed, whatever ``jobs`` is)."""
    rng = random.Random(seed)
    nodes = {p: prepare(p, work) for p in presets}
    counts = {"apply": Counts(), "revert": Counts()}
    # interleaved (apply, apply, revert, ...): a sweep stopped early has counted both
    order = sorted([("apply", i) for i in range(applies)] + [("revert", i) for i in range(reverts)],
                   key=lambda p: p[1] / max(applies if p[0] == "apply" else reverts, 1))
    plan = []
    for verb, i in order:
        node = nodes[presets[i % len(presets)]]
        span = node.apply_s if verb == "apply" else node.revert_s
        plan.append((verb, rng.uniform(0.0, span * 1.05), bool(i % 2), node.preset))
    for r in _runs(work, nodes, plan, jobs):
        verb = r.verb
        c = counts[verb]
        c.runs += 1
        c.landed += r.killed
        c.converged += not r.problems
        c.failures += [f"{r.where()}: {p}" for p in r.problems]
        if log is not None:
            print(f"{r.where()}: {'ok' if not r.problems else 'FAILED: ' + ' | '.join(r.problems)}", file=log,
                  flush=True)
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--applies", type=int, default=108)
    ap.add_argument("--reverts", type=int, default=56)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--preset", action="append", help=f"(repeatable; default: {', '.join(PRESETS)})")
    ap.add_argument("--work", type=Path, default=None, help="where the nodes go (default: a temporary directory)")
    ap.add_argument("--jobs", type=int, default=1, help="runs at once (default 1; the runs and delays are the "
                    "seed's whatever it is)")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    print(f"kill sweep: seed {seed}", flush=True)
    import tempfile

    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    work = args.work or Path(tempfile.mkdtemp(prefix="kill-sweep-", dir=base))
    work.mkdir(parents=True, exist_ok=True)
    try:
        counts = sweep(work, args.applies, args.reverts, seed, tuple(args.preset or PRESETS), log=sys.stdout,
                       jobs=args.jobs)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    for verb, c in counts.items():
        print(c.line(verb))
        for f in c.failures:
            print(f"  {f}")
    print(f"kill sweep: seed {seed}")
    return 1 if any(c.failures for c in counts.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
