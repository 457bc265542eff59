"""Test-suite guard and shared fixtures.

The guard is a ``sys.addaudithook`` that fails any write-open of a path under the machine's real ``/sys`` or
``/proc`` and any exec of a host daxctl/ndctl/cxl/damo: the machine running the tests has its own kernel (and
its own kdamond) that must never be touched. Child processes do not inherit an audit hook, so ``make test``
also runs the suite in a private mount namespace with /sys and /proc read-only when it can.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

FORBIDDEN_BINARIES = {"daxctl", "ndctl", "cxl", "damo"}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_violations: list[str] = []


class GuardViolation(RuntimeError):
    pass


def _real_kernel_path(path: object) -> str | None:
    if isinstance(path, int):
        return None
    try:
        p = os.fsdecode(path)  # type: ignore[arg-type]
    except TypeError:
        return None
    full = os.path.realpath(p)
    return full if full == "/sys" or full.startswith(("/sys/", "/proc/")) or full == "/proc" else None


def _inside_sim_root(exe: str) -> bool:
    p = Path(os.path.realpath(exe))
    return any((parent / ".nodeagent-machine").is_dir() for parent in p.parents)


def _audit(event: str, args: tuple) -> None:
    if event == "open":
        path, mode, flags = (list(args) + [None, None, None])[:3]
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and bool(flags & _WRITE_FLAGS))
        if writes:
            real = _real_kernel_path(path)
            if real is not None:
                _violations.append(f"write-open of the real {real}")
                raise GuardViolation(f"test guard: write-open of the real {real} refused")
    elif event in ("subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn"):
        exe = args[0]
        argv = args[1] if len(args) > 1 else None
        names = [exe] + ([argv[0]] if isinstance(argv, list | tuple) and argv else [])
        for name in names:
            if name is None:
                continue
            s = os.fsdecode(name)
            if os.path.basename(s) in FORBIDDEN_BINARIES and not (os.path.isabs(s) and _inside_sim_root(s)):
                _violations.append(f"exec of host {s}")
                raise GuardViolation(f"test guard: running the host's {s} is refused")
    elif event == "os.system":
        cmd = os.fsdecode(args[0])
        if any(b in cmd.split() for b in FORBIDDEN_BINARIES):
            raise GuardViolation(f"test guard: os.system({cmd!r}) refused")


sys.addaudithook(_audit)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _violations:
        print("\nTEST GUARD VIOLATIONS:\n  " + "\n  ".join(_violations), file=sys.stderr)
        session.exitstatus = 1


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keep --simulate's cache (and everything else the CLI caches) inside the test run."""
    os.environ["NODEAGENT_CACHE"] = str(tmp_path_factory.mktemp("cache"))


def clone(src: Path, dest: Path) -> None:
    """Copy a simulated node. ``cp -a`` keeps the simulator's pooled block attributes hard-linked to each other
    inside the copy (four times faster than copying each), while the copy shares nothing with the template."""
    if shutil.which("cp"):
        subprocess.run(["cp", "-a", str(src), str(dest)], check=True)
    else:
        shutil.copytree(src, dest, symlinks=True)


@pytest.fixture(scope="session")
def sim_base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Where simulated nodes live during the run: tmpfs when there is one (hot-adding terabytes creates
    thousands of inodes; on a busy disk that is most of the suite's time), else pytest's tmp dir."""
    if os.access("/dev/shm", os.W_OK) and shutil.disk_usage("/dev/shm").free > 2 * 1024**3:
        base = Path(tempfile.mkdtemp(prefix="nodeagent-test-", dir="/dev/shm"))
        yield base
        shutil.rmtree(base, ignore_errors=True)
    else:
        yield tmp_path_factory.mktemp("sim")


@pytest.fixture
def scratch_dir(sim_base: Path) -> Iterator[Path]:
    """A fresh directory beside the simulated nodes (tmpfs where there is one), removed after the test."""
    d = Path(tempfile.mkdtemp(prefix="s-", dir=sim_base))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def _templates(sim_base: Path) -> dict[str, Path]:
    return {}


@pytest.fixture
def make_node(_templates: dict[str, Path], sim_base: Path) -> Iterator[Callable[..., Path]]:
    """``make_node(preset, kernel=None)`` → a fresh simulated root (copied from a per-session template), removed
    after the test. Identical block attributes inside a node are hard links to one pooled file: tamper with a
    node through ``SimKernel.write``/``Tree.set``, or replace a file (new inode) rather than edit it in place."""
    from nodeagent_sim import create

    made = Path(tempfile.mkdtemp(prefix="t-", dir=sim_base))

    def make(preset: str, kernel: str | None = None) -> Path:
        key = f"{preset}@{kernel or ''}"
        if key not in _templates:
            tpl = sim_base / "templates" / key
            create(tpl, preset, kernel=kernel)
            _templates[key] = tpl
        dest = made / f"node-{preset}-{len(list(made.iterdir()))}"
        clone(_templates[key], dest)
        return dest

    yield make
    shutil.rmtree(made, ignore_errors=True)
