"""One bounded, regular-file-only reader for every file nodeagent does not own, and a cap on every command's output.

Every reader is fed a FIFO (which would block ``open`` forever), ``/dev/zero`` (which never ends) and a 1 GB file
(sparse: it costs no disk), and must answer at once with one message naming the file — the profile and the files
it extends, the profile cache (its digests, its chain, its entries), the ConfigMap profile ``nodeagent run``
watches, an inline (Ansible) profile, and a command's stdout. A scan of the source then holds every plain read of a
file to the reviewed list below: nothing else opens a file but the rooted resolver and the bounded reader.
"""

from __future__ import annotations

import ast
import os
import time
from pathlib import Path

import pytest

import nodeagent
from nodeagent.host import open_host
from nodeagent.host.commands import MAX_OUTPUT
from nodeagent.host.files import MAX_PROFILE_BYTES, InputFileError, read_regular, read_regular_stat
from nodeagent.k8s.run import _fingerprint
from nodeagent.profile import cache, load_profile_text
from nodeagent.util.errors import CommandError, ProfileError

HEAD = "apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: x}\n"
KINDS = ["fifo", "dev-zero", "1GB"]


@pytest.fixture(autouse=True)
def no_hang(alarm: None) -> None:
    """A reader that blocks fails the test (SIGALRM) instead of hanging the suite."""


def hostile(path: Path, kind: str) -> Path:
    """Make ``path`` a FIFO, a link to /dev/zero, or a 1 GB sparse file."""
    if path.exists() or path.is_symlink():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    else:
        with open(path, "wb") as f:
            f.truncate(1 << 30)
    return path


@pytest.mark.parametrize("kind", KINDS)
def test_the_bounded_reader_refuses_at_once(tmp_path: Path, kind: str) -> None:
    p = hostile(tmp_path / "input", kind)
    start = time.monotonic()
    with pytest.raises(InputFileError) as exc:
        read_regular_stat(p, MAX_PROFILE_BYTES)
    assert time.monotonic() - start < 2
    assert {"fifo": "is a FIFO", "dev-zero": "is a character device", "1GB": "longer than 1048576 bytes"}[kind] \
        in str(exc.value)


def test_the_bounded_reader_reads_a_regular_file_and_its_stat(tmp_path: Path) -> None:
    p = tmp_path / "p.yaml"
    p.write_text(HEAD)
    data, st = read_regular_stat(p, MAX_PROFILE_BYTES)
    assert data == HEAD.encode() and st.st_ino == p.stat().st_ino and st.st_size == len(HEAD)
    assert read_regular(p, len(HEAD)) == HEAD.encode()
    with pytest.raises(InputFileError, match="longer than"):
        read_regular(p, len(HEAD) - 1)


# -- the profile cache ------------------------------------------------------------------------------------
@pytest.fixture
def cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A profile that extends base.yaml, loaded once so that its cache entry exists."""
    monkeypatch.setenv("NODEAGENT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("NODEAGENT_PROFILE_CACHE", raising=False)
    base = tmp_path / "base.yaml"
    base.write_text(HEAD + "kernel: {numa_balancing: 2}\n")
    top = tmp_path / "top.yaml"
    top.write_text(HEAD + "extends: base.yaml\n")
    assert cache.load(str(top)).profile.kernel.numa_balancing == 2
    assert cache.lookup(str(top)) is not None  # the entry is there and good
    return top, base


@pytest.mark.parametrize("kind", KINDS)
def test_a_cached_profile_whose_base_became_hostile_is_reported_not_read(cached: tuple[Path, Path],
                                                                        kind: str) -> None:
    """The reported case: a FIFO ``base.yaml`` hung the cache's digest, ``/dev/zero`` killed it."""
    top, base = cached
    hostile(base, kind)
    start = time.monotonic()
    assert cache._sha(str(base)) is None
    with pytest.raises(ProfileError) as exc:
        cache.load(str(top))
    assert "base.yaml" in exc.value.render() and time.monotonic() - start < 5


@pytest.mark.parametrize("kind", KINDS)
def test_the_chain_is_read_through_the_bounded_reader(cached: tuple[Path, Path], kind: str) -> None:
    top, base = cached
    hostile(base, kind)
    with pytest.raises(InputFileError):
        cache.chain_files(top)
    cache.store(str(top), load_profile_text(HEAD))  # never fails the command


@pytest.mark.parametrize("kind", [*KINDS, "nested"])
def test_a_hostile_cache_entry_is_a_miss(cached: tuple[Path, Path], kind: str) -> None:
    top, _ = cached
    entry = Path(cache._entry_path(top.resolve()))
    if kind == "nested":
        entry.write_text("[" * 100_000)
    else:
        hostile(entry, kind)
    assert cache.lookup(str(top)) is None
    assert cache.load(str(top)).profile.kernel.numa_balancing == 2  # loaded and validated again


# -- the ConfigMap profile `nodeagent run` watches ------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_the_run_loop_fingerprint_never_blocks_or_reads_without_end(tmp_path: Path, kind: str) -> None:
    """The reported case: ``nodeagent run P --apply`` with P swapped for a FIFO blocked in ``open`` forever."""
    p = tmp_path / "profile.yaml"
    p.write_text(HEAD)
    good = _fingerprint(str(p))
    assert good is not None and good[0] == str(p)
    hostile(p, kind)
    start = time.monotonic()
    fp = _fingerprint(str(p))
    assert time.monotonic() - start < 2
    assert fp is not None and fp != good and fp[1] == "unreadable"  # a change, which the load then reports
    p.unlink()
    assert _fingerprint(str(p)) is None


# -- an inline (Ansible) profile ----------------------------------------------------------------------------
def test_an_inline_profile_is_bounded_like_a_file() -> None:
    text = HEAD + "# " + "x" * (MAX_PROFILE_BYTES) + "\n"
    with pytest.raises(ProfileError, match=r"<inline>: too large for a profile \(\d+ bytes, the limit is 1048576"):
        load_profile_text(text)
    assert load_profile_text(HEAD + "# " + "x" * 1000 + "\n").profile.metadata.name == "x"


# -- command output -----------------------------------------------------------------------------------------
def fake_command(tmp_path: Path, name: str, script: str) -> Path:
    root = tmp_path / "root"
    (root / ".nodeagent-machine").mkdir(parents=True)
    (root / ".nodeagent-machine" / "meta.json").write_text("{}")
    exe = root / "usr/bin" / name
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(0o755)
    return root


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_a_command_that_prints_without_end_is_stopped_at_the_cap(tmp_path: Path, stream: str) -> None:
    """The reported case: a daxctl printing 400 MB took 867 MB of memory. It is stopped past the cap, and the run
    is an error naming it; memory stays near the cap."""
    import resource

    redirect = " >&2" if stream == "stderr" else ""
    root = fake_command(tmp_path, "daxctl", f"head -c 400000000 /dev/zero{redirect}\necho done\n")
    host = open_host(root)
    start = time.monotonic()
    with pytest.raises(CommandError, match=f"daxctl printed more than {MAX_OUTPUT} bytes on {stream}"):
        host.run(["daxctl", "list"])
    assert time.monotonic() - start < 10
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < 600 * 1024  # KiB: far below 400 MB read whole


def test_a_command_within_the_cap_is_read_whole(tmp_path: Path) -> None:
    root = fake_command(tmp_path, "daxctl", "head -c 5000000 /dev/zero | tr '\\0' x\necho oops >&2\n")
    r = open_host(root).run(["daxctl", "list"])
    assert r.stdout == "x" * 5_000_000 and r.stderr == "oops\n" and r.returncode == 0


# -- every reader of a file is one of these ------------------------------------------------------------------
#: Plain reads of a file in the product, each reviewed: the package's own resources, the kernel's /proc of a child
#: nodeagent started, and the two readers themselves. Anything else reads through the rooted resolver
#: (``RootedFS``, for files under --root) or the bounded reader (``host.files.read_regular*``, for the rest).
ALLOWED = {
    ("host/fs.py", "os.read"),  # read_bounded: the bounded read itself
    ("host/udev.py", "os.read"),  # the uevent FIFO nodeagent created itself, O_NONBLOCK
    ("k8s/run.py", "os.read"),  # its own self-pipe (wakeups)
    ("loops/watch.py", "os.read"),  # its own self-pipe (wakeups)
    ("host/commands.py", "open"),  # /proc/<pid>/stat of a child nodeagent started (procfs, one line)
    ("render/systemd.py", "read_text"),  # the package's own unit templates
    ("cli/metrics.py", "read_text"),  # the package's own dashboards and rules
    ("host/latency.py", "read_bytes"),  # the package's own probe source
}


def _writes(node: ast.Call) -> bool:
    """``open(p, "w")``, ``os.fdopen(fd, "w")``: a write, not a read."""
    mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
    return isinstance(mode, ast.Constant) and isinstance(mode.value, str) and any(c in mode.value for c in "wax")


def _reads(tree: ast.AST) -> list[tuple[str, int]]:
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or _writes(node):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id == "open":
            out.append(("open", node.lineno))
        elif isinstance(f, ast.Attribute):
            owner = f.value.id if isinstance(f.value, ast.Name) else None
            if f.attr in ("read_text", "read_bytes"):
                out.append((f.attr, node.lineno))
            elif owner == "os" and f.attr in ("read", "fdopen"):
                out.append((f"os.{f.attr}", node.lineno))
            elif owner in ("io", "codecs") and f.attr == "open":
                out.append(("open", node.lineno))
            elif owner in ("json", "yaml", "pickle", "tomllib") and f.attr == "load":
                out.append(("load", node.lineno))  # a load from a file object
    return out


def test_every_plain_read_of_a_file_is_a_reviewed_one() -> None:
    pkg = Path(nodeagent.__file__).parent
    found = set()
    stray = []
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(pkg).as_posix()
        for what, line in _reads(ast.parse(path.read_text(), rel)):
            found.add((rel, what))
            if (rel, what) not in ALLOWED:
                stray.append(f"nodeagent/{rel}:{line}: {what}(...)")
    assert not stray, "reads outside the rooted resolver and the bounded reader:\n" + "\n".join(stray)
    assert found == ALLOWED, f"reviewed reads that are gone (drop them from ALLOWED): {ALLOWED - found}"


def test_the_scan_sees_every_kind_of_read() -> None:
    src = ("open('x')\nPath('x').read_text()\nPath('x').read_bytes()\nos.read(0, 1)\nos.fdopen(3)\n"
           "io.open('x')\njson.load(f)\nopen('x', 'w')\nos.fdopen(3, mode='a')\n")
    assert [w for w, _ in _reads(ast.parse(src))] == ["open", "read_text", "read_bytes", "os.read", "os.fdopen",
                                                      "open", "load"]
