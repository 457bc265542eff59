"""Kernel threads of a simulated node (kdamonds): ``/proc/<pid>/{stat,comm}`` with their CPU time.

``/proc/<pid>/stat`` has the kernel's 52 fields; ``utime`` and ``stime`` (fields 14 and 15) are in clock
ticks (``USER_HZ`` = 100). A kthread spends system time only: :func:`burn` adds to ``stime``. The layout is a
6.18 kdamond's (tests/data/metrics/kdamond-stat-6.18.txt): state ``I``, ppid 2 (kthreadd).
"""

from __future__ import annotations

from .kernel import SimKernel
from .tree import RO

USER_HZ = 100


def _stat(pid: int, comm: str, stime: int) -> str:
    # pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime cutime
    # cstime priority nice num_threads itrealvalue starttime vsize rss ... (52 fields, kthreadd is ppid 2)
    head = [str(pid), f"({comm})", "I", "2", "0", "0", "0", "-1", "2129984", "0", "0", "0", "0", "0",
            str(stime), "0", "0", "20", "0", "1", "0", "1543", "0", "0", "18446744073709551615"]
    tail = ["0"] * (52 - len(head))
    tail[-14] = "17"  # exit_signal
    return " ".join(head + tail)


def start(k: SimKernel, pid: int, comm: str) -> None:
    k.tree.file(f"/proc/{pid}/comm", comm, RO)
    k.tree.file(f"/proc/{pid}/stat", _stat(pid, comm, 0), RO)


def stop(k: SimKernel, pid: int) -> None:
    for name in ("stat", "comm"):
        p = k.tree.local(f"/proc/{pid}/{name}")
        if p.exists():
            p.chmod(0o644)
            p.unlink()
    d = k.tree.local(f"/proc/{pid}")
    if d.is_dir() and not any(d.iterdir()):
        d.rmdir()


def burn(k: SimKernel, pid: int, ticks: int) -> None:
    """The kthread ran ``ticks`` clock ticks of system time."""
    path = f"/proc/{pid}/stat"
    if not k.tree.exists(path):
        return
    fields = k.tree.read(path).split(" ")
    comm = k.tree.read(f"/proc/{pid}/comm").strip()
    k.tree.file(path, _stat(pid, comm, int(fields[14]) + ticks), RO)
