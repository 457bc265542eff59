"""EBUSY, ENOSPC and EROFS during an apply of the shipped profile, then the next apply (tests/e2e/fault_sweep.py).

An errno at one write: at every kind of write the apply makes on the small-block node (every write of nodeagent's
own files — for EROFS the first of each file, ENOSPC failing every one of them —, one of each other kind, a third
of the kdamond file kinds; `make fault-sweep`: every write), as the kernel or a full or read-only state
filesystem gives it — the fault hook, from that write on (``--times 0``: a full disk stays full). And the real
thing: the state directory on a tiny tmpfs in a private mount namespace (mounted inside the simulated root
only), of sizes from "nothing fits" to "the run's first records fit, its later ones do not", and read-only.

After each: the apply either refused before its first change (exit 1, nothing written, the reason said) or
printed its result and exited 5 (never 1 after a change), the record on disk names every change it made, no
kdamond is left that nodeagent does not own, and — once the disk has room again — the next apply converges.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from nodeagent_sim import faults

from tests.conftest import clone
from tests.e2e import fault_sweep as fs

SWEEP = os.environ.get("NODEAGENT_FAULT_SWEEP") == "full"  # make fault-sweep: at every write


@pytest.fixture(scope="module")
def small(sim_base: Path) -> tuple[Path, Path, list[str], list[str]]:
    """(template, work directory, the path of every write of a clean apply, the targets it changes)."""
    work = Path(os.fspath(sim_base)) / "faults-errno"
    work.mkdir(exist_ok=True)
    tpl = fs.make_template(work, fs.small_preset())
    return tpl, work, fs.write_paths(tpl, work), fs.planned_targets(tpl, work)


def judge(points: list[fs.Point], targets: list[str]) -> list[str]:
    bad = []
    for p in points:
        bad += [f"{p.where()}: {why}" for why in fs.problems(p, targets)]
        if p.code == 1 and not p.err.strip():
            bad.append(f"{p.where()}: exit 1 with nothing said")
    return bad


@pytest.mark.parametrize(("name", "where", "times"), [
    ("EBUSY", fs.ANY, 1),  # a busy attribute, or a state file another program holds
    ("ENOSPC", fs.STATE_WRITES, 0),  # the state filesystem fills up and stays full
    ("EROFS", fs.ANY, 0),  # the filesystem turns read-only (kernel trees or the state directory)
])
def test_an_errno_at_every_kind_of_write(small, name: str, where: str, times: int) -> None:
    tpl, work, paths, targets = small
    # EBUSY: every file of the first kdamond too (DAMON's retries); EROFS: one write of each kind is enough
    picks = (list(range(len(paths))) if SWEEP else fs.one_per_kind(paths, where, kdamond=name == "EBUSY"))
    picks = [i for i in picks if re.search(where, paths[i])]
    if not SWEEP:  # ENOSPC fails every state write; EROFS needs each state file once beside it
        picks = fs.trim(paths, picks, every_state_write=name != "EROFS")
    assert len(picks) >= 15
    picks = fs.sample(picks)
    rules = [(n, faults.Rule(fs.ANY, errno=name, after=n, times=times)) for n in picks]
    points = fs.sweep(tpl, work, rules)
    assert all(p.hit == paths[p.n] for p in points)
    assert not judge(points, targets)


def _namespaces_ok() -> str | None:
    if os.geteuid() != 0:
        return "needs root (tmpfs mounts in a private mount namespace)"
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "needs unshare and mount (util-linux)"
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True, check=False)
    return None if r.returncode == 0 else f"unshare -m is not allowed here: {r.stderr.decode().strip()}"


def _in_namespace(root: Path, mount_opts: str, argv: list[str], saved: Path) -> subprocess.CompletedProcess[str]:
    """``argv`` with ``root``'s state directory on a fresh tmpfs (``mount_opts``, its old content copied in),
    inside a private mount namespace — the mount exists only there, inside the simulated root — then what the
    tmpfs held copied to ``saved`` (the namespace, and the tmpfs, end with the command)."""
    state = root / fs.STATE
    state.mkdir(parents=True, exist_ok=True)
    seed = root.parent / f"{root.name}.seed"
    shutil.copytree(state, seed)
    ro = ",ro" in f",{mount_opts}"
    rw_opts = ",".join(o for o in mount_opts.split(",") if o != "ro")
    script = (f'set -e; mount -t tmpfs -o "{rw_opts}" nodeagent-state "$1"; cp -a "$2"/. "$1"/ 2>/dev/null || true; '
              + ('mount -o remount,ro "$1"; ' if ro else "")
              + 'set +e; shift 3; "$@"; rc=$?; cp -a "$0"/. "$SAVED"/; exit $rc')
    saved.mkdir()
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script, str(state), str(state),
                        str(seed), "x", *argv], capture_output=True, text=True, check=False, timeout=600,
                       env={**os.environ, "SAVED": str(saved)})
    shutil.rmtree(seed)
    return r


def _kernel_writes(root: Path) -> int:
    log = root / ".nodeagent-machine" / "writes.log"
    return sum(json.loads(line)["result"] == "ok" for line in log.read_text().splitlines()) if log.exists() else 0


@pytest.mark.skipif(_namespaces_ok() is not None, reason=str(_namespaces_ok()))
@pytest.mark.parametrize("size", ["8k", "32k", "96k", "160k", "224k"])
def test_a_state_directory_on_a_tiny_tmpfs(small, size: str) -> None:
    tpl, work, _, targets = small
    root = work / f"tmpfs-{size}"
    clone(tpl, root)
    saved = work / f"tmpfs-{size}.saved"
    before = _kernel_writes(root)
    r = _in_namespace(root, f"size={size},mode=0755", [sys.executable, "-m", "nodeagent", "--root", str(root),
                                                          "apply", "--yes", fs.PROFILE], saved)
    changed = _kernel_writes(root) - before
    if r.returncode == 1:  # refused before the first change, and said why
        assert changed == 0, r.stdout + r.stderr
        assert "No space left" in r.stderr or "space" in r.stderr, r.stderr
    else:
        assert r.returncode in (0, 5), r.stdout + r.stderr
        assert "Result:" in r.stdout
    # the disk gets room again: what the tmpfs held is the state directory now; the next apply converges
    shutil.rmtree(root / fs.STATE)
    shutil.copytree(saved, root / fs.STATE)
    last = fs._json(root / fs.STATE / "last-applied.json")
    p = fs.Point(0, faults.Rule("tmpfs", errno="ENOSPC"), root, code=r.returncode, out=r.stdout, err=r.stderr,
                 hit=f"tmpfs size={size}", last_applied=last, events=fs._journal(root), node_writes=changed)
    points = fs.sweep_recover(root, [p])
    assert not judge(points, targets)
    shutil.rmtree(saved)


@pytest.mark.skipif(_namespaces_ok() is not None, reason=str(_namespaces_ok()))
def test_a_read_only_state_directory_is_refused_before_the_first_change(small) -> None:
    tpl, work, _, _ = small
    root = work / "tmpfs-ro"
    clone(tpl, root)
    saved = work / "tmpfs-ro.saved"
    r = _in_namespace(root, "size=1m,mode=0755,ro", [sys.executable, "-m", "nodeagent", "--root", str(root),
                                                     "apply", "--yes", fs.PROFILE], saved)
    assert r.returncode == 1, r.stdout + r.stderr
    assert _kernel_writes(root) == 0
    assert "Read-only file system" in r.stderr and "nothing was written" in r.stderr, r.stderr
    shutil.rmtree(saved)
    shutil.rmtree(root)
