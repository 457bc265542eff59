"""Measuring the copy bandwidth of one NUMA node's memory on this machine (the real-root probe).

Pure Python cannot reach memory bandwidth, so the copy is ``memmove`` called through ctypes, which releases the
GIL: one thread per CPU copies its own slice of a source buffer to a destination buffer. Both buffers are
anonymous mappings bound to the measured node with ``mbind(MPOL_BIND, MPOL_MF_STRICT|MPOL_MF_MOVE)`` and faulted
in before timing, so a CPU-less (CXL) node is measured from the CPUs that use it. Each thread pins itself to
its CPU with ``sched_setaffinity``. The figure follows STREAM's Copy convention (bytes read + bytes written per
second), best of a few repetitions.

Only the process's own memory policy and affinity change; nothing on the node is written.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import platform
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from ..util.errors import HostError

#: mbind/get_mempolicy syscall numbers per architecture (asm/unistd.h).
SYSCALLS = {"x86_64": {"mbind": 237, "get_mempolicy": 239}, "aarch64": {"mbind": 235, "get_mempolicy": 236},
            "ppc64le": {"mbind": 259, "get_mempolicy": 260}, "s390x": {"mbind": 268, "get_mempolicy": 269},
            "riscv64": {"mbind": 235, "get_mempolicy": 236}}
MPOL_BIND = 2
MPOL_MF_STRICT = 1 << 0
MPOL_MF_MOVE = 1 << 1
MPOL_F_NODE = 1 << 0
MPOL_F_ADDR = 1 << 1
PAGE = mmap.PAGESIZE

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _nr(name: str) -> int:
    arch = platform.machine()
    try:
        return SYSCALLS[arch][name]
    except KeyError:
        raise HostError(f"memory binding is not supported on {arch} by nodeagent's bandwidth probe") from None


def nodemask(node: int, max_node: int) -> tuple[ctypes.Array[ctypes.c_ulong], int]:
    """The ``(mask, maxnode)`` pair mbind takes for a single node: bit ``node`` set, one spare bit at the end.

    The kernel reads ``maxnode - 1`` bits, so ``maxnode`` is one more than the highest node that may be named.
    """
    if node < 0 or node > max_node:
        raise HostError(f"node {node} is not a possible NUMA node (0-{max_node})")
    bits = ctypes.sizeof(ctypes.c_ulong) * 8
    words = max_node // bits + 1
    mask = (ctypes.c_ulong * words)()
    mask[node // bits] = 1 << (node % bits)
    return mask, words * bits + 1


def mbind(addr: int, length: int, node: int, max_node: int) -> None:
    """Bind ``[addr, addr+length)`` to ``node`` strictly, moving pages already there."""
    mask, maxnode = nodemask(node, max_node)
    rc = _libc.syscall(ctypes.c_long(_nr("mbind")), ctypes.c_void_p(addr), ctypes.c_ulong(length),
                       ctypes.c_int(MPOL_BIND), mask, ctypes.c_ulong(maxnode),
                       ctypes.c_uint(MPOL_MF_STRICT | MPOL_MF_MOVE))
    if rc != 0:
        err = ctypes.get_errno()
        raise HostError(f"mbind to node {node} failed: {os.strerror(err)} (errno {errno.errorcode.get(err, err)})",
                        hint="the node may have no memory online, or not exist")


def page_node(addr: int) -> int:
    """The NUMA node holding the (faulted-in) page at ``addr`` (get_mempolicy with MPOL_F_NODE|MPOL_F_ADDR)."""
    out = ctypes.c_int(-1)
    rc = _libc.syscall(ctypes.c_long(_nr("get_mempolicy")), ctypes.byref(out), None, ctypes.c_ulong(0),
                       ctypes.c_void_p(addr), ctypes.c_ulong(MPOL_F_NODE | MPOL_F_ADDR))
    if rc != 0:
        err = ctypes.get_errno()
        raise HostError(f"get_mempolicy failed: {os.strerror(err)}")
    return out.value


class NodeBuffer:
    """An anonymous mapping bound to one NUMA node and faulted in (``close()`` unmaps it)."""

    def __init__(self, size: int, node: int, max_node: int) -> None:
        self.size = -(-size // PAGE) * PAGE
        self._map = mmap.mmap(-1, self.size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._view = (ctypes.c_char * self.size).from_buffer(self._map)
        self.addr = ctypes.addressof(self._view)
        try:
            mbind(self.addr, self.size, node, max_node)
            ctypes.memset(self.addr, 0x5A, self.size)  # fault every page in, on the bound node
        except BaseException:
            self.close()
            raise

    def nodes(self, samples: int = 16) -> set[int]:
        """Where a spread of this buffer's pages live (to verify the binding)."""
        step = max(self.size // samples // PAGE, 1) * PAGE
        return {page_node(self.addr + off) for off in range(0, self.size, step)}

    def close(self) -> None:
        if self._map.closed:
            return
        del self._view
        self._map.close()


@contextmanager
def node_buffers(size: int, node: int, max_node: int) -> Iterator[tuple[NodeBuffer, NodeBuffer]]:
    src = NodeBuffer(size, node, max_node)
    try:
        dst = NodeBuffer(size, node, max_node)
    except BaseException:
        src.close()
        raise
    try:
        yield src, dst
    finally:
        src.close()
        dst.close()


def slices(size: int, parts: int) -> list[tuple[int, int]]:
    """``(offset, length)`` of ``parts`` page-aligned slices covering ``size`` bytes (the last takes the rest)."""
    parts = max(parts, 1)
    step = max(size // parts // PAGE * PAGE, PAGE)
    out: list[tuple[int, int]] = []
    off = 0
    for i in range(parts):
        if off >= size:
            break
        length = size - off if i == parts - 1 else min(step, size - off)
        out.append((off, length))
        off += length
    return out


def timed_copy(src: NodeBuffer, dst: NodeBuffer, cpus: list[int], iterations: int) -> float:
    """Seconds for ``len(cpus)`` pinned threads to copy their slices of ``src`` to ``dst`` ``iterations`` times."""
    parts = slices(min(src.size, dst.size), len(cpus))
    barrier = threading.Barrier(len(parts) + 1)
    errors: list[BaseException] = []

    def work(cpu: int, off: int, length: int) -> None:
        try:
            os.sched_setaffinity(0, {cpu})  # 0 = the calling thread on Linux
            barrier.wait()
            for _ in range(iterations):
                ctypes.memmove(dst.addr + off, src.addr + off, length)
        except BaseException as exc:  # reported to the caller below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=work, args=(cpu, off, length), daemon=True)
               for cpu, (off, length) in zip(cpus, parts, strict=False)]
    for t in threads:
        t.start()
    try:
        barrier.wait()
    except threading.BrokenBarrierError:
        pass
    start = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise HostError(f"bandwidth probe thread failed: {errors[0]}")
    return elapsed


def measure(node: int, cpus: list[int], *, size: int, iterations: int, repeats: int = 3,
            max_node: int = 0) -> float:
    """Best of ``repeats`` timed copies of ``size`` bytes × ``iterations`` on ``node`` from ``cpus``."""
    if not cpus:
        raise HostError(f"no CPU to measure node {node} from")
    allowed = os.sched_getaffinity(0)
    usable = [c for c in cpus if c in allowed]
    if not usable:
        raise HostError(f"none of CPUs {cpus} is in this process's affinity mask")
    with node_buffers(size, node, max_node) as (src, dst):
        timed_copy(src, dst, usable, 1)  # warm up: TLBs, thread start
        return min(timed_copy(src, dst, usable, iterations) for _ in range(max(repeats, 1)))
