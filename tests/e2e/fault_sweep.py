"""The fault sweep: an apply of the shipped profile with a fault before one of its writes, then the apply after it.

Each point of a sweep is a simulated node cloned from a template, one fault rule (``nodeagent sim fault``: a
signal or an errno at the Nth write the apply makes, counting every write — kernel attributes, the fake daxctl's,
state files — in the one order the node sees them), a **faulted** apply in a process of its own (SIGKILL must be
able to kill it), and a **recovery** apply in another once the fault is cleared. Both processes are forked from
the test process (which has imported everything already: a point costs what the two applies do, not two
interpreter starts) and run the CLI's own ``main``; two points run at a time, one per core.

What a point records is what the tests judge: how the faulted apply ended (exit code or signal, what it printed),
which write the fault hit, the state and journal it left, whether the recovery apply converged, and whether any
kdamond is configured that nodeagent does not own afterwards.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodeagent_sim import faults

from tests.conftest import clone

REPO = Path(__file__).resolve().parents[2]
PROFILE = str(REPO / "profiles" / "cxl-inference.yaml")
STATE = "var/lib/nodeagent"
KDAMONDS = "sys/kernel/mm/damon/admin/kdamonds"
GiB = 1024**3
#: Every write, whatever its path.
ANY = "."
#: nodeagent's own files.
STATE_WRITES = "^/var/lib/nodeagent/"
KERNEL_WRITES = "^/(sys|proc)/"


def sample(indices: list[int], seed: int = 20) -> list[int]:
    """``indices``, or (``NODEAGENT_FAULT_SAMPLE=N``, for a quick look while working) N of them, seeded."""
    n = int(os.environ.get("NODEAGENT_FAULT_SAMPLE") or 0)
    if not n or n >= len(indices):
        return indices
    import random

    return sorted(random.Random(seed).sample(indices, n))


def small_preset() -> Any:
    """h100-cxl with 32 GiB of DRAM per socket and two 8 GiB expanders in 2 GiB blocks: 40 memory blocks, and
    every kind of write the shipped profile makes (knobs, daxctl's driver binds and block onlining, four kdamond
    builds, state files) — ``nodeagent sim create DIR --preset h100-cxl --devices 2 --device-size 8GiB
    --dram-size 32GiB``."""
    from nodeagent_sim import get
    from nodeagent_sim.hotplug import generated

    return generated(get("h100-cxl"), 2, 8 * GiB, 2 * GiB, 32 * GiB)


def make_template(base: Path, preset: Any) -> Path:
    """A node of ``preset`` that has seen nodeagent once: the probes only a reboot changes are cached
    (``probes.json``), as on any node where nodeagent ran before; nothing else is."""
    from nodeagent_sim import build

    tpl = build(preset, base / "template")
    warm = base / "warm"
    clone(tpl, warm)
    code, _, err = run_forked(lambda: _main(["--root", str(warm), "apply", PROFILE, "--yes"]), base / "warm.out")
    assert code in (0, 5), err
    probes = warm / STATE / "probes.json"
    if probes.exists():
        (tpl / STATE).mkdir(parents=True, exist_ok=True)
        shutil.copy2(probes, tpl / STATE / "probes.json")
    shutil.rmtree(warm)
    return tpl


def _main(args: list[str]) -> int:
    from nodeagent.cli.main import main

    return main(args)


def _child(fn: Callable[[], int], out: Path) -> None:
    """In a forked child: stdout and stderr to files, run ``fn``, leave with its code (never return)."""
    code = 70
    try:
        fd = os.open(f"{out}.stdout", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        fd2 = os.open(f"{out}.stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd2, 2)
        sys.stdout = os.fdopen(1, "w", closefd=False)
        sys.stderr = os.fdopen(2, "w", closefd=False)
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, signal.SIG_DFL)
        code = fn()
    except BaseException:  # noqa: BLE001 (a child never returns into the test)
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _fork(fn: Callable[[], int], out: Path) -> int:
    pid = os.fork()
    if pid == 0:
        _child(fn, out)
    return pid


def _code(status: int) -> int:
    """An exit code, or the negative signal that killed the process."""
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _read(out: Path, remove: bool = False) -> tuple[str, str]:
    texts = []
    for ext in (".stdout", ".stderr"):
        p = Path(f"{out}{ext}")
        texts.append(p.read_text())
        if remove:
            p.unlink()
    return texts[0], texts[1]


def run_forked(fn: Callable[[], int], out: Path) -> tuple[int, str, str]:
    """``fn`` in a forked child: (exit code or -signal, stdout, stderr)."""
    pid = _fork(fn, out)
    _, status = os.waitpid(pid, 0)
    return (_code(status), *_read(out))


def write_paths(template: Path, work: Path) -> list[str]:
    """The path of every write a clean apply of the profile makes on a clone of ``template``, in the order the
    fault rules count them (index N: the write ``--after N`` hits)."""
    root = work / "count"
    clone(template, root)
    faults.trace(root)
    code, _, err = run_forked(lambda: _main(["--root", str(root), "apply", PROFILE, "--yes"]), work / "count")
    assert code == 0, err
    paths = faults.traced(root)
    shutil.rmtree(root)
    return paths


def count_writes(template: Path, work: Path) -> int:
    return len(write_paths(template, work))


def one_per_kind(paths: list[str], pattern: str = ANY, *, kdamond: bool = True) -> list[int]:
    """Indices of the writes matching ``pattern``, one for each kind of write (its path with numbers as N:
    every kdamond's files are one kind, every memory block's ``state`` another) plus every write of nodeagent's
    own files and (``kdamond``) of the first kdamond built — where an errno can land differently."""
    seen: set[str] = set()
    out = []
    detail = ("/var/lib/nodeagent/", f"/{KDAMONDS}/0/") if kdamond else ("/var/lib/nodeagent/",)
    for i, path in enumerate(paths):
        if not re.search(pattern, path):
            continue
        kind = re.sub(r"[0-9]+", "N", path)
        if kind not in seen or path.startswith(detail):
            seen.add(kind)
            out.append(i)
    return out


def trim(paths: list[str], picks: list[int], *, every_state_write: bool = True, kdamond_step: int = 3) -> list[int]:
    """``make test``'s share of ``picks`` (the exhaustive sweep takes them all): every ``kdamond_step``-th kdamond
    file kind (a kdamond's files all take the same write path; ``nr_kdamonds`` and ``state`` always), and — with
    ``every_state_write`` off, where another test fails every state write — the first write of each of
    nodeagent's own files. Every other kind of write stays."""
    out, files, kd = [], set(), 0
    for i in picks:
        path = paths[i]
        if path.startswith("/" + KDAMONDS + "/") and not path.endswith(("/nr_kdamonds", "/state")):
            kd += 1
            if (kd - 1) % kdamond_step:
                continue
        elif path.startswith("/var/lib/nodeagent/") and not every_state_write:
            if path in files:
                continue
            files.add(path)
        out.append(i)
    return out


@dataclass
class Point:
    """One run of a sweep (see the module)."""

    n: int
    rule: faults.Rule
    root: Path
    code: int = 0  # the faulted apply: exit code, or -signal
    out: str = ""
    err: str = ""
    hit: str | None = None  # the path of the write the fault hit
    last_applied: dict[str, Any] = field(default_factory=dict)  # as the faulted apply left it
    progress: dict[str, Any] = field(default_factory=dict)  # the record of its progress it left, if any
    events: list[dict[str, Any]] = field(default_factory=list)  # journal events the faulted apply wrote
    node_writes: int = 0  # kernel writes the faulted apply made that took effect
    rcode: int = 0  # the recovery apply
    rdoc: dict[str, Any] = field(default_factory=dict)
    rerr: str = ""
    revents: list[dict[str, Any]] = field(default_factory=list)  # journal events of the recovery apply
    foreign: list[str] = field(default_factory=list)  # configured kdamonds afterwards that nodeagent does not own

    def where(self) -> str:
        what = self.rule.signal or self.rule.errno
        return f"{what} before write #{self.n + 1} ({self.hit}): exit {self.code}"


def _journal(root: Path) -> list[dict[str, Any]]:
    p = root / STATE / "journal.jsonl"
    if not p.exists():
        return []
    out = []
    for line in p.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            out.append({"torn": line})
    return out


def _json(p: Path) -> dict[str, Any]:
    try:
        data = json.loads(p.read_text())
        return data if isinstance(data, dict) else {"not-an-object": data}
    except FileNotFoundError:
        return {}
    except ValueError as exc:
        return {"corrupt": str(exc)}


def _ok_kernel_writes(root: Path, since: int) -> int:
    log = root / ".nodeagent-machine" / "writes.log"
    lines = log.read_text().splitlines()[since:] if log.exists() else []
    return sum(json.loads(line)["result"] == "ok" for line in lines)


def _foreign(root: Path) -> list[str]:
    """Kdamonds with a context configured that the ownership record does not list as nodeagent's."""
    base = root / KDAMONDS
    owned = ((_json(root / STATE / "ownership.json").get("damon") or {}).get("kdamonds") or {})
    out = []
    for d in sorted(base.iterdir()) if base.is_dir() else ():
        if d.name.isdigit() and (d / "contexts" / "nr_contexts").read_text().strip() not in ("", "0"):
            rec = owned.get(d.name)
            if not isinstance(rec, dict) or not rec.get("name"):
                state = (d / "state").read_text().strip()
                out.append(f"kdamond {d.name} ({state})")
    return out


def sweep(template: Path, work: Path, rules: Iterable[tuple[int, faults.Rule]], *, workers: int = 2,
          extra: list[str] | None = None) -> list[Point]:
    """Run every ``(n, rule)`` point (see the module), ``workers`` at a time. ``extra``: more CLI arguments of
    the faulted apply."""
    todo = list(rules)
    running: dict[int, tuple[Point, str]] = {}
    done: list[Point] = []
    log = template / ".nodeagent-machine" / "writes.log"
    base_log = len(log.read_text().splitlines()) if log.exists() else 0

    def start(p: Point) -> None:
        clone(template, p.root)
        faults.add(p.root, p.rule)
        args = ["--root", str(p.root), "apply", PROFILE, "--yes", *(extra or [])]
        running[_fork(lambda: _main(args), Path(f"{p.root}.a"))] = (p, "a")

    def recover(p: Point) -> None:
        args = ["--root", str(p.root), "--format", "json", "apply", PROFILE, "--yes"]
        running[_fork(lambda: _main(args), Path(f"{p.root}.b"))] = (p, "b")

    while todo or running:
        while todo and len(running) < workers:
            n, rule = todo.pop(0)
            start(Point(n, faults.Rule(**{**rule.__dict__}), work / f"p{n}-{rule.signal or rule.errno}"))
        pid, status = os.waitpid(-1, 0)
        if pid not in running:
            continue
        p, stage = running.pop(pid)
        if stage == "a":
            p.code = _code(status)
            p.out, p.err = _read(Path(f"{p.root}.a"), remove=True)
            fired = faults.load(p.root).fired
            p.hit = fired[0]["path"] if fired else None
            faults.clear(p.root)
            p.last_applied = _json(p.root / STATE / "last-applied.json")
            p.progress = _json(p.root / STATE / "progress.json")
            p.events = _journal(p.root)
            p.node_writes = _ok_kernel_writes(p.root, base_log)
            recover(p)
        else:
            p.rcode = _code(status)
            out, p.rerr = _read(Path(f"{p.root}.b"), remove=True)
            try:
                p.rdoc = json.loads(out) if out.strip() else {}
            except ValueError:
                p.rdoc = {"unparsed": out[-2000:]}
            p.revents = _journal(p.root)[len(p.events):]
            p.foreign = _foreign(p.root)
            shutil.rmtree(p.root)
            done.append(p)
    return sorted(done, key=lambda p: (p.n, p.rule.signal or p.rule.errno or ""))


def planned_targets(template: Path, work: Path) -> list[str]:
    """The targets a clean apply of the profile changes on ``template`` (its plan, in order)."""
    code, out, err = run_forked(lambda: _main(["--root", str(template), "--format", "json", "plan", PROFILE]),
                                work / "plan")
    assert code == 0, err
    return [c["target"] for c in json.loads(out)["changes"]]


def recorded_targets(p: Point) -> set[str]:
    """What the records an apply left say it did: the changes applied (its last-applied record, and the record
    of its progress when it did not finish), and the one it was making (its intent)."""
    done: set[str] = set()
    for outcomes in (p.last_applied.get("outcomes"), p.progress.get("done")):
        done |= {o.get("target") for o in outcomes or [] if isinstance(o, dict) and o.get("status") == "applied"}
    for rec in (p.last_applied, p.progress):
        intent = rec.get("in_flight")
        if isinstance(intent, dict) and intent.get("target"):
            done.add(intent["target"])
    return done


def _signum(name: str | None) -> int | None:
    return int(signal.Signals[name]) if name else None


def problems(p: Point, targets: list[str]) -> list[str]:
    """What is wrong with one point (empty: nothing) — the properties the module's tests hold every point to."""
    out: list[str] = []
    if p.hit is None:
        out.append("the fault never fired")
    killed = p.code < 0
    changed = p.node_writes > 0
    if not killed:
        if p.code == 1 and changed:
            out.append(f"exit 1 ('nothing was written') after {p.node_writes} kernel write(s)")
        if p.code not in (0, 1) and "Result:" not in p.out and '"status"' not in p.out:
            out.append(f"exit {p.code} with no result printed (stderr: {p.err.strip()[-300:]!r})")
        if p.code not in (0, 1, 5, 130, 143):
            out.append(f"exit {p.code}: {p.err.strip()[-300:]}")
        signum = _signum(p.rule.signal)
        if signum is not None and p.code != 128 + signum:
            out.append(f"exit {p.code}, not {128 + signum}")
        if signum is not None and "not done: stopped by" in p.out:
            if p.last_applied.get("status") != "interrupted":
                out.append(f"recorded as {p.last_applied.get('status')!r}, not 'interrupted'")
            applies = [e for e in p.events if e.get("event") == "apply"]
            if not applies or applies[-1].get("status") != "interrupted":
                out.append("the journal does not say the apply was interrupted")
    planned_after = {c.get("target") for c in (p.rdoc.get("plan") or {}).get("changes", [])}
    done = [t for t in targets if t not in planned_after]  # what the faulted apply had finished
    unrecorded = [t for t in done if t not in recorded_targets(p)]
    if p.rdoc and unrecorded:
        out.append(f"changed but not in the record it left ({p.last_applied.get('status')!r}): "
                   f"{', '.join(unrecorded)}")
    status = p.rdoc.get("status")
    if p.rcode != 0 or status not in ("converged", "unchanged"):
        why = "; ".join(p.rdoc.get("verify_errors") or []) or p.rerr.strip()[-400:]
        out.append(f"the next apply exited {p.rcode} ({status}): {why}")
    if p.foreign:
        out.append(f"left configured, and not nodeagent's: {', '.join(p.foreign)}")
    unfinished = p.progress or p.last_applied.get("status") == "in-progress"
    if unfinished and not any(e.get("event") == "apply" and e.get("status") == "incomplete" for e in p.revents):
        out.append("it left the record of an unfinished apply, and the next apply did not journal it")
    return out


def sweep_recover(root: Path, points: list[Point]) -> list[Point]:
    """The recovery stage alone, for points whose faulted apply ran elsewhere (in a mount namespace): the next
    apply on ``root`` as it is now."""
    for p in points:
        args = ["--root", str(root), "--format", "json", "apply", PROFILE, "--yes"]
        p.rcode, out, p.rerr = run_forked(lambda a=args: _main(a), Path(f"{root}.b"))
        try:
            p.rdoc = json.loads(out) if out.strip() else {}
        except ValueError:
            p.rdoc = {"unparsed": out[-2000:]}
        p.revents = _journal(root)[len(p.events):]
        p.foreign = _foreign(root)
    shutil.rmtree(root)
    return points
