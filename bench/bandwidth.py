#!/usr/bin/env python3
"""Memory copy bandwidth of this machine's NUMA nodes, as the memory_bandwidth check measures it, with baselines.

For each node with memory: nodeagent's probe (buffers mbind-ed to the node, ctypes.memmove in pinned threads
that release the GIL) with one CPU and with every CPU of the node, against two baselines in the same run:
a copy through a memoryview slice assignment (the GIL is held: threads cannot add bandwidth) and numpy's copy
when numpy is installed. Figures follow STREAM's Copy convention (bytes read + bytes written per second, GB =
1e9), best of REPEATS runs. Read-only for the machine: only this process's memory policy and affinity change.

    python bench/bandwidth.py [--buffer 256] [--iterations 5] [--repeats 3]   # buffer in MiB
Writes bench/out/bandwidth.json beside the printed table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nodeagent.facts import gather  # noqa: E402
from nodeagent.host import membw, open_host  # noqa: E402


def best(fn, repeats: int) -> float:  # type: ignore[no-untyped-def]
    return min(fn() for _ in range(repeats))


def memoryview_copy(size: int, iterations: int, threads: int) -> float:
    """Seconds for ``threads`` threads to copy slices with memoryview assignment (memcpy under the GIL)."""
    src = bytearray(os.urandom(1024)) * (size // 1024)
    dst = bytearray(len(src))
    sv, dv = memoryview(src), memoryview(dst)
    parts = membw.slices(len(src), threads)

    def work(off: int, length: int) -> None:
        for _ in range(iterations):
            dv[off:off + length] = sv[off:off + length]

    ts = [threading.Thread(target=work, args=p) for p in parts]
    start = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return time.perf_counter() - start


def gil_probe(size: int, iterations: int) -> dict[str, int]:
    """Python steps the main thread completes while another thread copies: ctypes.memmove releases the GIL
    (the main thread keeps running), a memoryview copy holds it (the main thread waits)."""
    import ctypes

    out = {}
    src = bytearray(size)
    dst = bytearray(size)
    sv, dv = memoryview(src), memoryview(dst)
    csrc = (ctypes.c_char * size).from_buffer(src)
    cdst = (ctypes.c_char * size).from_buffer(dst)
    for name, fn in (("ctypes.memmove", lambda: ctypes.memmove(cdst, csrc, size)),
                     ("memoryview copy", lambda: dv.__setitem__(slice(None), sv))):
        done = threading.Event()

        def work(fn=fn, done=done) -> None:  # type: ignore[no-untyped-def]
            for _ in range(iterations):
                fn()
            done.set()

        steps = 0
        t = threading.Thread(target=work)
        t.start()
        while not done.is_set():
            steps += 1
        t.join()
        out[name] = steps
    return out


def numpy_copy(size: int, iterations: int) -> float | None:
    try:
        import numpy as np
    except ImportError:
        return None
    src = np.ones(size, dtype=np.uint8)
    dst = np.empty_like(src)
    start = time.perf_counter()
    for _ in range(iterations):
        np.copyto(dst, src)
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--buffer", type=int, default=256, help="MiB per buffer (default 256)")
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    size = args.buffer * 1024**2
    moved = 2 * size * args.iterations
    host = open_host("/")
    facts = gather(host)
    allowed = sorted(os.sched_getaffinity(0))
    max_node = max(facts.possible_nodes or [0])
    print(f"{platform.node()}: {os.cpu_count()} CPUs, nodes {[n.id for n in facts.nodes]}, "
          f"buffer {args.buffer} MiB × {args.iterations} iterations, best of {args.repeats}")
    rows = []
    for node in (n for n in facts.nodes if n.mem_total > 0):
        cpus = [c for c in (node.cpus or allowed) if c in allowed]
        one = membw.measure(node.id, cpus[:1], size=size, iterations=args.iterations, repeats=args.repeats,
                            max_node=max_node)
        every = membw.measure(node.id, cpus, size=size, iterations=args.iterations, repeats=args.repeats,
                              max_node=max_node)
        rows.append({"node": node.id, "what": "nodeagent probe, 1 CPU", "threads": 1, "gbps": moved / one / 1e9})
        rows.append({"node": node.id, "what": f"nodeagent probe, {len(cpus)} CPUs", "threads": len(cpus),
                     "gbps": moved / every / 1e9})
    for threads in (1, len(allowed)):
        t = best(lambda th=threads: memoryview_copy(size, args.iterations, th), args.repeats)
        rows.append({"node": None, "what": f"memoryview copy (GIL held), {threads} threads", "threads": threads,
                     "gbps": moved / t / 1e9})
    t_np = numpy_copy(size, args.iterations)
    if t_np is not None:
        t_np = best(lambda: numpy_copy(size, args.iterations) or 0.0, args.repeats)
        rows.append({"node": None, "what": "numpy.copyto, 1 thread", "threads": 1, "gbps": moved / t_np / 1e9})
    else:
        rows.append({"node": None, "what": "numpy.copyto: numpy not installed", "threads": 0, "gbps": None})
    base = rows[0]["gbps"]
    print(f"{'node':>4}  {'copy':<44} {'GB/s':>8}  {'vs probe 1 CPU':>14}")
    for r in rows:
        g = r["gbps"]
        print(f"{'-' if r['node'] is None else r['node']:>4}  {r['what']:<44} "
              f"{'-' if g is None else f'{g:8.2f}':>8}  {'-' if g is None else f'{g / base:13.2f}x':>14}")
    gil = gil_probe(size, args.iterations)
    print("Python steps the main thread ran during another thread's copy (GIL released → many): "
          + ", ".join(f"{k} {v:,}" for k, v in gil.items()))
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    (out / "bandwidth.json").write_text(json.dumps({"buffer_mib": args.buffer, "iterations": args.iterations,
                                                    "repeats": args.repeats, "rows": rows, "gil_steps": gil},
                                                   indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
