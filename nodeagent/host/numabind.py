"""Can a NUMA memory policy be set here? The bind probe behind ``render serving``'s launch wrapper.

``numactl --membind=N`` (``set_mempolicy(MPOL_BIND)``) fails with EINVAL for a node that is not online or has no
memory, and under some seccomp profiles (containers) or cpusets (``cpuset.mems`` without the node) it fails
with EPERM or EINVAL even for a good node. The probe asks, in a short-lived child process that exits at once
(this process's own policy and the machine's state are never changed):

- with ``numactl --membind=N true`` (then ``--preferred=N``) where numactl is installed — what the wrapper runs;
- else a ``set_mempolicy`` syscall through ctypes in a child Python;
- on a simulated root the simulator answers (its machine plugin's ``set_mempolicy``, :mod:`nodeagent.host.machine`);
- on any other root nothing is run: a policy this host accepts says nothing about the node under the root.

The fallback is the engines' own: MPOL_BIND, else MPOL_PREFERRED (on the first node: ``--preferred`` takes one),
else no policy (the kernel's default: the allocating CPU's node).
"""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass, field

from ..util.errors import CommandError
from . import Host

#: set_mempolicy(2) numbers, by machine (asm/unistd.h).
SYS_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237, "ppc64le": 261, "s390x": 270}
MPOL = {"membind": 2, "preferred": 1}

#: The child: set the policy, exit 0, or print the errno and exit 1. Nothing else is touched.
_CHILD = r"""
import ctypes, os, sys
mode, nodes, nr = int(sys.argv[1]), [int(n) for n in sys.argv[2].split(",")], int(sys.argv[3])
words = max(nodes) // 64 + 1
mask = (ctypes.c_ulong * words)()
for n in nodes:
    mask[n // 64] |= 1 << (n % 64)
libc = ctypes.CDLL(None, use_errno=True)
if libc.syscall(nr, mode, mask, ctypes.c_ulong(words * 64 + 1)) != 0:
    print(ctypes.get_errno()); sys.exit(1)
"""


@dataclass(frozen=True)
class BindProbe:
    mode: str  # membind | preferred | none | unprobed | devdax (a pool on a DAX device: no policy applies)
    nodes: tuple[int, ...]  # the nodes the chosen mode uses (preferred: one)
    how: str  # what was run (or why nothing was)
    refused: tuple[tuple[str, str], ...] = field(default_factory=tuple)  # (mode, why) tried and refused

    @property
    def summary(self) -> str:
        tried = "; ".join(f"{m} refused ({why})" for m, why in self.refused)
        if self.mode == "unprobed":
            return f"not probed ({self.how}): membind recommended, untested here"
        if self.mode == "devdax":
            return f"no memory policy applies ({self.how}): its memory belongs to no NUMA node"
        head = {"membind": "membind works", "preferred": "membind refused, falling back to preferred",
                "none": "no memory policy can be set: the pool goes where the allocating CPU is"}[self.mode]
        return f"{head} ({self.how}{'; ' + tried if tried else ''})"

    def to_dict(self) -> dict[str, object]:
        return {"mode": self.mode, "nodes": list(self.nodes), "how": self.how,
                "refused": [{"mode": m, "why": w} for m, w in self.refused]}


def _numactl(host: Host, mode: str, nodes: tuple[int, ...]) -> str | None:
    """None when numactl accepts the policy, else its first line of complaint."""
    arg = f"--membind={','.join(map(str, nodes))}" if mode == "membind" else f"--preferred={nodes[0]}"
    res = host.run(["numactl", arg, "true"], timeout=10)
    if res.returncode == 0:
        return None
    lines = (res.stderr.strip() or res.stdout.strip()).splitlines()
    return lines[0] if lines else f"exit {res.returncode}"


def _syscall(host: Host, mode: str, nodes: tuple[int, ...]) -> str | None:
    nr = SYS_SET_MEMPOLICY.get(platform.machine())
    if nr is None:
        raise LookupError(f"no set_mempolicy number known for {platform.machine()}")
    chosen = nodes if mode == "membind" else nodes[:1]
    res = host.run([sys.executable, "-c", _CHILD, str(MPOL[mode]), ",".join(map(str, chosen)), str(nr)],
                   timeout=20)
    if res.returncode == 0:
        return None
    import errno
    import os

    text = res.stdout.strip()
    if text.isdigit():
        err = int(text)
        return f"{errno.errorcode.get(err, err)}: {os.strerror(err)}"
    return (res.stderr.strip().splitlines() or [f"exit {res.returncode}"])[-1]


def probe(host: Host, nodes: tuple[int, ...]) -> BindProbe:
    """Which policy binding ``nodes`` can be set here: membind, else preferred, else none."""
    nodes = tuple(sorted(set(nodes)))
    if not nodes:
        return BindProbe("none", (), "no node to bind to")
    if host.simulated:
        from .machine import plugin

        sim = plugin()

        def attempt(mode: str, ns: tuple[int, ...]) -> str | None:
            try:
                sim.set_mempolicy(host.root, mode, ns)
            except OSError as exc:
                return exc.strerror or str(exc)
            return None
        how = "the simulator's set_mempolicy"
    elif not host.is_real:
        return BindProbe("unprobed", nodes, "a copied root: a policy this host accepts says nothing about it")
    elif host.commands.which("numactl"):
        def attempt(mode: str, ns: tuple[int, ...]) -> str | None:
            return _numactl(host, mode, ns)
        how = "numactl ... true in a child"
    else:
        def attempt(mode: str, ns: tuple[int, ...]) -> str | None:
            return _syscall(host, mode, ns)
        how = "set_mempolicy in a child process"
    refused: list[tuple[str, str]] = []
    for mode in ("membind", "preferred"):
        try:
            why = attempt(mode, nodes)
        except (CommandError, LookupError) as exc:
            return BindProbe("unprobed", nodes, f"the probe could not run: {exc}")
        if why is None:
            return BindProbe(mode, nodes if mode == "membind" else nodes[:1], how, tuple(refused))
        refused.append((mode, why))
    return BindProbe("none", (), how, tuple(refused))


__all__ = ["BindProbe", "probe"]
