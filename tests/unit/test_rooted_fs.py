"""The rooted host's resolver: nothing outside ``--root`` is opened, created, truncated, renamed or listed.

Each class of hostile root is built for every place a link can be put (each ancestor of the path, the leaf), as
an absolute and as a relative symlink, and every operation (read, read_opt, exists, listdir, write, lock,
write_file_atomic, append, rename) is run against it. The property checked is the same each time: the call is
refused (``NotAllowedError``) and the tree outside the root is byte-for-byte what it was.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from nodeagent.host import fs as fsmod
from nodeagent.host.fs import EscapeError, RootedFS
from nodeagent.util.errors import LockTimeoutError, NotAllowedError, UsageError

SECRET = "root:$6$secret-hash:19000:0:99999:7:::\n"
STATE = "/var/lib/nodeagent"


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path]:
    root, outside = tmp_path / "root", tmp_path / "outside"
    for d in ("var/lib/nodeagent", "proc/sys/kernel", "sys/devices/dax0.0", "sys/bus/dax/devices"):
        (root / d).mkdir(parents=True)
    (root / "proc/sys/kernel/numa_balancing").write_text("1\n")
    (root / "sys/devices/dax0.0/size").write_text("4096\n")
    (root / "sys/bus/dax/devices/dax0.0").symlink_to("../../../devices/dax0.0")
    outside.mkdir()
    (outside / "shadow").write_text(SECRET)
    (outside / "lock").write_text("precious\n")  # what a lock that escaped would truncate
    (outside / "nodeagent").mkdir()
    (outside / "nodeagent" / "lock").write_text("precious\n")
    return root, outside


def snapshot(d: Path) -> dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(d):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            out[str(p.relative_to(d))] = p.read_text() if p.is_file() and not p.is_symlink() else "<dir/link>"
    return out


def relink(root: Path, kernel_path: str, target: str) -> None:
    """Replace whatever is at ``kernel_path`` under ``root`` by a symlink to ``target``."""
    p = root / kernel_path.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.is_symlink() or p.is_file():
        p.unlink()
    elif p.is_dir():
        import shutil

        shutil.rmtree(p)
    p.symlink_to(target)


def _targets(root: Path, outside: Path, where: str, leaf: str) -> list[str]:
    """An absolute and a relative spelling of ``leaf`` outside the root, as seen from the link at ``where``."""
    rel = os.path.relpath(outside / leaf, (root / where.lstrip("/")).parent)
    return [str(outside / leaf), rel]


WRITE_OPS: dict[str, Callable[[RootedFS], object]] = {
    "lock": lambda fs: fs.lock(f"{STATE}/lock", 0).__enter__(),
    "write_file_atomic": lambda fs: fs.write_file_atomic(f"{STATE}/last-applied.json", "{}\n"),
    "append": lambda fs: fs.append(f"{STATE}/history.jsonl", "{}\n"),
    "rename": lambda fs: fs.rename(f"{STATE}/lock", f"{STATE}/lock.1"),
}


@pytest.mark.parametrize("op", sorted(WRITE_OPS))
@pytest.mark.parametrize("where", ["/var", "/var/lib", "/var/lib/nodeagent"])
@pytest.mark.parametrize("spelling", [0, 1], ids=["absolute", "relative"])
def test_a_state_dir_symlinked_out_is_refused_before_anything_is_created(world, op, where, spelling) -> None:
    root, outside = world
    # The link points at a directory outside that mirrors what the walk expects below it.
    below = STATE[len(where):].lstrip("/")
    mirror = outside / "mirror" / where.strip("/").replace("/", "_")
    (mirror / below).mkdir(parents=True, exist_ok=True)
    (mirror / below / "lock").write_text("precious\n")
    relink(root, where, _targets(root, mirror.parent, where, mirror.name)[spelling])
    before = snapshot(outside)
    with pytest.raises(NotAllowedError, match="outside the root"):
        WRITE_OPS[op](RootedFS(root))
    assert snapshot(outside) == before


@pytest.mark.parametrize("name", ["lock", "last-applied.json", "history.jsonl"])
def test_a_state_file_symlinked_out_is_never_written_through(world, name) -> None:
    root, outside = world
    relink(root, f"{STATE}/{name}", str(outside / "lock"))
    before = snapshot(outside)
    fs = RootedFS(root)
    with pytest.raises(NotAllowedError):
        fs.read(f"{STATE}/{name}")
    if name == "lock":
        with pytest.raises(NotAllowedError):
            with fs.lock(f"{STATE}/lock", 0):
                pass
    elif name == "history.jsonl":
        with pytest.raises(NotAllowedError):
            fs.append(f"{STATE}/{name}", "x\n")
    else:  # an atomic write replaces the link itself, never what it points at
        fs.write_file_atomic(f"{STATE}/{name}", "{}\n")
        assert not (root / STATE[1:] / name).is_symlink()
    assert snapshot(outside) == before


READS: dict[str, Callable[[RootedFS, str], object]] = {
    "read": lambda fs, p: fs.read(p),
    "read_opt": lambda fs, p: fs.read_opt(p),
    "exists": lambda fs, p: fs.exists(p),
    "is_dir": lambda fs, p: fs.is_dir(p),
    "size": lambda fs, p: fs.size(p),
    "listdir": lambda fs, p: fs.listdir(os.path.dirname(p)) and fs.listdir(p),
    "read_tree": lambda fs, p: fs.read_tree(os.path.dirname(p)),
    "read_attrs": lambda fs, p: fs.read_attrs(os.path.dirname(p), [os.path.basename(p)]),
}


@pytest.mark.parametrize("op", sorted(READS))
@pytest.mark.parametrize("where", ["/proc", "/proc/sys", "/proc/sys/kernel", "/proc/sys/kernel/numa_balancing"])
@pytest.mark.parametrize("spelling", [0, 1], ids=["absolute", "relative"])
def test_reads_never_leave_the_root(world, op, where, spelling) -> None:
    root, outside = world
    below = "/proc/sys/kernel/numa_balancing"[len(where):].lstrip("/")
    if below:
        (outside / "m" / below).parent.mkdir(parents=True, exist_ok=True)
        (outside / "m" / below).write_text(SECRET)
        relink(root, where, _targets(root, outside, where, "m")[spelling])
    else:
        relink(root, where, _targets(root, outside, where, "shadow")[spelling])
    with pytest.raises(EscapeError) as exc:
        READS[op](RootedFS(root), "/proc/sys/kernel/numa_balancing")
    assert "secret" not in exc.value.render()


def test_dotdot_above_the_root_is_refused_and_not_clamped(world) -> None:
    root, outside = world
    relink(root, "/proc/sys/kernel/numa_balancing", "../../../../../../../../" + str(outside / "shadow"))
    with pytest.raises(EscapeError, match="climbs above the root"):
        RootedFS(root).read("/proc/sys/kernel/numa_balancing")
    with pytest.raises(EscapeError):
        RootedFS(root).read("/../outside/shadow")


def test_symlinks_inside_the_root_are_followed_within_it(world) -> None:
    root, _ = world
    fs = RootedFS(root)
    assert fs.read("/sys/bus/dax/devices/dax0.0/size") == "4096"
    assert fs.listdir("/sys/bus/dax/devices/dax0.0") == ["size"]
    assert fs.realpath("/sys/bus/dax/devices/dax0.0") == "/sys/devices/dax0.0"
    assert fs.readlink("/sys/bus/dax/devices/dax0.0") == "../../../devices/dax0.0"
    # An absolute link that names the root's own tree on disk is inside it too.
    relink(root, "/sys/bus/dax/devices/dax1.0", str(root / "sys/devices/dax0.0"))
    assert fs.read("/sys/bus/dax/devices/dax1.0/size") == "4096"


def test_a_tree_reads_as_file_by_file_reads_do(world) -> None:
    """read_tree (one pass from each directory's descriptor) gives what read/listdir/is_dir give, links
    inside the root followed, ``descend`` pruning, and the same refusals."""
    root, _ = world
    fs = RootedFS(root)
    (root / "sys/devices/dax0.0/snap/1").mkdir(parents=True)
    (root / "sys/devices/dax0.0/snap/1/x").write_text("skipped\n")
    (root / "sys/devices/dax0.0/link").symlink_to("size")
    dirs, files = fs.read_tree("/sys/bus", lambda rel: not rel.endswith("/1"))
    assert dirs == ["", "dax", "dax/devices", "dax/devices/dax0.0", "dax/devices/dax0.0/snap"]
    assert files == {"dax/devices/dax0.0/link": "4096", "dax/devices/dax0.0/size": "4096"}
    assert fs.read_tree("/sys/devices/dax0.0/size") == ([], {}) == fs.read_tree("/nowhere")
    os.mkfifo(root / "sys/devices/dax0.0/fifo")
    with pytest.raises(NotAllowedError, match="a FIFO, not a regular file"):
        fs.read_tree("/sys/devices")


def test_attributes_read_from_their_directory_read_as_file_by_file_reads_do(world) -> None:
    """read_attrs (one walk to the directory, one openat per attribute) gives what read_opt gives for each
    ``dir/name``: missing ones None, links inside the root followed, the same refusals."""
    root, _ = world
    fs = RootedFS(root)
    (root / "sys/devices/dax0.0/link").symlink_to("size")
    (root / "sys/devices/dax0.0/sub").mkdir()
    (root / "sys/devices/dax0.0/store_only").write_text("")
    (root / "sys/devices/dax0.0/store_only").chmod(0o200)
    names = ["size", "link", "missing"]
    for d in ("/sys/devices/dax0.0", "/sys/bus/dax/devices/dax0.0"):
        assert fs.read_attrs(d, names) == {n: fs.read_opt(f"{d}/{n}") for n in names} == \
            {"size": "4096", "link": "4096", "missing": None}
    assert fs.read_attrs("/sys/devices/dax0.0/size", ["x"]) == {"x": None} == fs.read_attrs("/nowhere", ["x"])
    for bad, err in [("sub", IsADirectoryError), ("store_only", PermissionError)]:
        with pytest.raises(Exception) as direct:
            fs.read_opt(f"/sys/devices/dax0.0/{bad}")
        with pytest.raises(type(direct.value)) as batched:
            fs.read_attrs("/sys/devices/dax0.0", ["size", bad])
        assert batched.value.render() == direct.value.render(), err
    os.mkfifo(root / "sys/devices/dax0.0/fifo")
    with pytest.raises(NotAllowedError, match="a FIFO, not a regular file"):
        fs.read_attrs("/sys/devices/dax0.0", ["fifo"])
    with pytest.raises(ValueError, match="single path components"):
        fs.read_attrs("/sys/devices", ["dax0.0/size"])


def test_a_write_is_checked_where_it_leads_not_only_as_spelled(world) -> None:
    """An allowed path that is a link to another file inside the root must not write that file."""
    root, _ = world
    (root / "etc").mkdir()
    (root / "etc/passwd").write_text("root:x:0:0\n")
    relink(root, "/proc/sys/kernel/numa_balancing", "../../../etc/passwd")
    with pytest.raises(NotAllowedError, match="leads to /etc/passwd"):
        RootedFS(root).write("/proc/sys/kernel/numa_balancing", "2")
    assert (root / "etc/passwd").read_text() == "root:x:0:0\n"


def test_special_files_are_refused_without_being_opened(world, alarm) -> None:
    root, _ = world
    knob = root / "proc/sys/kernel/numa_balancing"
    knob.unlink()
    os.mkfifo(knob)
    fs = RootedFS(root)
    for call in (lambda: fs.read("/proc/sys/kernel/numa_balancing"),
                 lambda: fs.write("/proc/sys/kernel/numa_balancing", "1")):
        with pytest.raises(NotAllowedError, match="a FIFO, not a regular file"):
            call()
    os.mkfifo(root / "var/lib/nodeagent/lock")
    with pytest.raises(NotAllowedError, match="FIFO"):
        with fs.lock(f"{STATE}/lock", 0):
            pass


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_a_device_node_in_the_root_is_refused(world, alarm) -> None:
    root, _ = world
    knob = root / "proc/sys/kernel/numa_balancing"
    knob.unlink()
    os.mknod(knob, 0o600 | 0o020000, os.makedev(1, 5))  # /dev/zero's numbers
    with pytest.raises(NotAllowedError, match="character device"):
        RootedFS(root).read("/proc/sys/kernel/numa_balancing")


def test_reads_are_bounded_by_reading_not_by_st_size(world, monkeypatch) -> None:
    root, _ = world
    (root / "proc/sys/kernel/numa_balancing").write_text("1" * 100)
    monkeypatch.setattr(fsmod, "MAX_READ", 64)
    with pytest.raises(NotAllowedError, match="longer than 64 bytes"):
        RootedFS(root).read("/proc/sys/kernel/numa_balancing")


def test_a_missing_state_dir_is_created_inside_the_root(world) -> None:
    root, _ = world
    import shutil

    shutil.rmtree(root / "var")
    fs = RootedFS(root)
    with fs.lock(f"{STATE}/lock", 0):
        fs.write_file_atomic(f"{STATE}/ownership.json", "{}\n")
    assert (root / "var/lib/nodeagent/ownership.json").read_text() == "{}\n"
    assert (root / "var/lib/nodeagent/lock").read_text().strip() == str(os.getpid())


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1, -0.5])
def test_lock_timeouts_are_finite_and_not_negative(world, bad) -> None:
    with pytest.raises(UsageError, match="finite"):
        with RootedFS(world[0]).lock(f"{STATE}/lock", bad):
            pass


def test_a_lock_holder_s_pid_is_shown_only_when_it_is_one(world) -> None:
    import fcntl

    root, _ = world
    fd = os.open(root / "var/lib/nodeagent/lock", os.O_RDWR | os.O_CREAT)
    os.write(fd, b"\x1b]0;owned\x07\n")
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        other = RootedFS(root)
        with pytest.raises(LockTimeoutError, match=r"pid unknown"):
            # flock locks are per open file description: a second open in this process contends.
            with other.lock(f"{STATE}/lock", 0):
                pass
    finally:
        os.close(fd)


def test_a_state_dir_linked_into_the_kernel_s_trees_is_refused(world) -> None:
    """Inside the root, nodeagent's own files may live behind a link — but never inside /proc or /sys."""
    root, _ = world
    relink(root, STATE, "../../proc/sys/kernel")
    with pytest.raises(NotAllowedError, match="leads to /proc/sys/kernel/last-applied.json"):
        RootedFS(root).write_file_atomic(f"{STATE}/last-applied.json", "{}\n")
    assert sorted(os.listdir(root / "proc/sys/kernel")) == ["numa_balancing"]
