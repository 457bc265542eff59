"""Run inside a real-kernel guest: fill NUMA node N with this process's anonymous memory until PCT % of it is
free, hold it for SECONDS, and say whether it survived (``python guest_fill_node.py N PCT SECONDS``).

The memory is bound to the node (set_mempolicy MPOL_BIND), written page by page (so it is there, not the shared
zero page), and the process asks to be the OOM killer's first choice (oom_score_adj 1000): what it shows is
whether anything invokes the OOM killer while the node is full and the other nodes have room. Prints the node's
free memory, the other nodes' and, at the end, ``survived``."""

from __future__ import annotations

import ctypes
import sys
import time

SYS_SET_MEMPOLICY = 238  # x86_64
MPOL_BIND = 2
CHUNK = 32 << 20


def meminfo(node: int) -> dict[str, int]:
    out = {}
    with open(f"/sys/devices/system/node/node{node}/meminfo") as f:
        for line in f:
            words = line.split()  # "Node 2 MemFree:  12345 kB"
            out[words[2].rstrip(":")] = int(words[3])
    return out


def others(node: int) -> str:
    import glob

    nodes = sorted(int(p.rsplit("node", 1)[1]) for p in glob.glob("/sys/devices/system/node/node[0-9]*"))
    return ", ".join(f"node{n} {meminfo(n)['MemFree'] // 1024} MiB free" for n in nodes if n != node)


def main() -> int:
    node, pct, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")
    libc = ctypes.CDLL(None, use_errno=True)
    mask = ctypes.c_ulong(1 << node)
    if libc.syscall(SYS_SET_MEMPOLICY, MPOL_BIND, ctypes.byref(mask), 64) != 0:
        raise OSError(ctypes.get_errno(), "set_mempolicy")
    total = meminfo(node)["MemTotal"]
    keep = total * pct // 100
    held = []
    while (free := meminfo(node)["MemFree"]) > keep + 1024:
        size = min(CHUNK, (free - keep) * 1024)
        held.append(b"\x01" * size)  # written: every page faulted in, on the bound node
    print(f"filled: node{node} {meminfo(node)['MemFree'] // 1024} MiB free of {total // 1024} MiB; {others(node)}",
          flush=True)
    time.sleep(seconds)
    print(f"survived: node{node} {meminfo(node)['MemFree'] // 1024} MiB free; {others(node)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
