"""Real kernel: a pinned KV pool placed as `render serving` says, on a CXL-like node onlined in ZONE_NORMAL, and
`verify-serving` finding it there — from numa_maps (--pid) and from the cgroup's memory.numa_stat (--cgroup).

One boot of the 3-node guest: the pmem namespace (node2, a slower memory tier) is bound to kmem with its blocks
offline (`--no-online`: daxctl would online it movable), then onlined with `daxctl online-memory --no-movable`
(ZONE_NORMAL, as a `zone: normal, use: pinned-pool` rule does). `render serving --engine vllm` must choose a
capacity pool on node2 and a membind binding the bind probe accepted; a process started the way the rendered
launch line says (numactl --membind where the guest has numactl, else the same MPOL_BIND set through
set_mempolicy) maps, touches and mlocks the pool.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import harness
import pytest

from nodeagent.serving.verify import parse_numa_maps, parse_numa_stat

pytestmark = pytest.mark.realkernel

MEM = "/sys/devices/system/memory"
CG = "/sys/fs/cgroup"
PROFILE = """apiVersion: nodeagent/v1
kind: NodeProfile
metadata: {name: guest-kv-pool}
memory:
  auto_online_blocks: offline
  dax:
    - name: kv-pool
      match: {all: true}
      mode: system-ram
      zone: normal
      use: pinned-pool
"""
#: The engine stand-in: bind (when no numactl wrapper did), map, touch, mlock the pool, say so, and wait.
POOL = r"""
import ctypes, sys, time
size, node, bind = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "bind"
libc = ctypes.CDLL(None, use_errno=True)
if bind:  # set_mempolicy(MPOL_BIND, {node}): what numactl --membind does
    mask = ctypes.c_ulong(1 << node)
    assert libc.syscall(238, 2, ctypes.byref(mask), ctypes.c_ulong(64)) == 0, ctypes.get_errno()
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
addr = libc.mmap(None, size, 3, 0x22, -1, 0)
libc.madvise(ctypes.c_void_p(addr), ctypes.c_size_t(size), 15)  # MADV_NOHUGEPAGE: 4 KiB pages
ctypes.memset(addr, 1, size)
assert libc.mlock(ctypes.c_void_p(addr), ctypes.c_size_t(size)) == 0, ctypes.get_errno()
open("/tmp/pool.ready", "w").write(f"{addr:x}\n")
time.sleep(300)
"""


def test_pinned_pool_lands_where_rendered_and_verify_serving_finds_it(guest: harness.Guest, tmp_path: Path) -> None:
    if not harness.venv_python().exists():
        pytest.skip(f"realkernel: no project virtualenv at {harness.venv_python()} (run make test)")
    profile = tmp_path / "kv-pool.yaml"
    profile.write_text(PROFILE)
    pool = tmp_path / "pool.py"
    pool.write_text(POOL)
    py = harness.venv_python()
    na = f"{py} -m nodeagent --format json"
    render = f"{na} render serving --engine vllm --ranks 1 {profile}"
    # Start the pool as rendered: the cgroup first (pages are charged where they are allocated), then the wrapper.
    start = (
        f"doc=$({render}); "
        f"size=$(echo \"$doc\" | {py} -c 'import json,sys; print(json.load(sys.stdin)[\"per_rank_bytes\"])'); "
        f"wrap=$(echo \"$doc\" | {py} -c 'import json,sys; print(\" \".join(json.load(sys.stdin)"
        f"[\"settings\"][\"wrapper\"]))'); "
        "if command -v numactl >/dev/null && [ -n \"$wrap\" ]; then how=nobind; else wrap=; how=bind; fi; "
        f"mkdir -p {CG}/kvpool; echo +memory > {CG}/cgroup.subtree_control; "
        f"nohup sh -c \"echo \\$\\$ > {CG}/kvpool/cgroup.procs; exec $wrap {py} {pool} $size 2 $how\" "
        ">/tmp/pool.log 2>&1 & echo $! > /tmp/pool.pid; "
        "for i in $(seq 1 600); do [ -s /tmp/pool.ready ] && break; sleep 0.1; done; "
        "echo \"size=$size wrap=$wrap how=$how pid=$(cat /tmp/pool.pid)\"; cat /tmp/pool.log"
    )
    steps = [
        harness.Step("namespace", "ndctl create-namespace -f -e namespace0.0 -m devdax >/dev/null"),
        harness.Step("auto-offline", f"echo offline > {MEM}/auto_online_blocks"),
        # daxctl onlines into ZONE_MOVABLE unless told otherwise: bind to kmem without onlining, then online normal
        harness.Step("kmem", "daxctl reconfigure-device --mode=system-ram --no-online dax0.0 >/dev/null"),
        harness.Step("online-normal", "daxctl online-memory --no-movable dax0.0 2>&1; "
                     "cat /sys/devices/system/node/has_normal_memory"),
        harness.Step("render", render),
        harness.Step("start", start),
        harness.Step("numa_maps", "cat /proc/$(cat /tmp/pool.pid)/numa_maps"),
        harness.Step("numa_stat", f"cat {CG}/kvpool/memory.numa_stat"),
        harness.Step("verify-pid", f"{na} verify-serving --pid $(cat /tmp/pool.pid) --ranks 1 {profile}"),
        harness.Step("verify-cgroup", f"{na} verify-serving --cgroup kvpool --ranks 1 {profile}"),
        harness.Step("stop", "kill $(cat /tmp/pool.pid)"),
    ]
    res = guest.run_steps(steps, timeout=300, label="serving")
    print("\n" + "\n".join(f"[{n}] rc={s.rc}\n{s.output.strip() if n.startswith('numa') else s.output.strip()[:1500]}"
                           for n, s in res.steps.items()))
    assert res["online-normal"].rc == 0, res["online-normal"].output
    assert "2" in res["online-normal"].stdout.split()[-1], "node2 is not in has_normal_memory"
    doc = json.loads(res["render"].stdout)
    assert doc["pool"] == "capacity" and doc["ranks"][0]["pool_node"] == 2, doc
    assert doc["bind"]["mode"] == "membind", doc["bind"]  # the bind probe ran on the real kernel
    assert doc["settings"]["wrapper"] == ["numactl", "--membind=2"]
    size = doc["per_rank_bytes"]
    assert size >= 256 * 1024**2
    assert res["start"].rc == 0 and "pid=" in res["start"].stdout, res["start"].output
    # numa_maps: the pool's mapping, every page on node2
    vmas = parse_numa_maps(res["numa_maps"].stdout)
    big = [v for v in vmas if sum(v.pages.values()) * v.page_size >= size * 0.99]
    assert len(big) == 1, res["numa_maps"].stdout
    assert set(big[0].pages) == {2}, big[0]
    # memory.numa_stat: the cgroup's anon and unevictable (mlocked) bytes on node2
    stat = parse_numa_stat(res["numa_stat"].stdout)
    assert stat["anon"].get(2, 0) >= size * 0.99 and stat["unevictable"].get(2, 0) >= size * 0.99, stat
    for name in ("verify-pid", "verify-cgroup"):
        step = res[name]
        assert step.rc == 0, f"{name}: {step.output}"
        rep = json.loads(step.stdout)
        assert rep["ok"] and rep["planned_nodes"] == [2]
        on2 = next(u for u in rep["nodes"] if u["node"] == 2)
        assert on2["tier"] == "CXL" and on2["anon"] >= size * 0.99
    print(f"pool {size >> 20} MiB on node2; launch {shlex.join(doc['settings']['command'])}")
