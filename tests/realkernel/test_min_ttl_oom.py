"""MGLRU's OOM guard on a node without swap, on the real 6.12 kernel (QEMU guest; ``make realkernel-extra``).

What the placement advisory ``oom-guard-kills-on-a-full-node`` says, shown by the kernel: with the shipped profile
applied (demotion on, the CXL stand-in node 2 the lowest tier) and ``lru_gen/min_ttl_ms`` 1000, a process that
fills node 2 with its own anonymous memory (bound there, oom_score_adj 1000, 5 % of the node left free) is killed
by the OOM killer that node 2's kswapd invokes, while nodes 0 and 1 have room; at the kernel's 0 the same process
holds the same memory and lives. nodeagent's plan of that profile on the same guest says so beforehand.

Why (mm/vmscan.c, ``lru_gen_age_node``): anonymous memory counts as reclaimable only where it can leave the node,
to swap or to a demotion target; node 2 has neither, so kswapd finds nothing big enough to keep and calls the OOM
killer whatever the pages' age. The same fill with a tmpfs in place of the process (scenario 6 of
test_scenarios.py) kills every task down to init: nothing a kill frees.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import harness
import pytest
from worlds import Agent, Outcome, Setup, run_guest

pytestmark = pytest.mark.realkernel

HERE = Path(__file__).parent
PROFILE = HERE / "profiles" / "min-ttl-1000.yaml"
TTL = "/sys/kernel/mm/lru_gen/min_ttl_ms"
FILL = f"{harness.venv_python()} {HERE / 'guest_fill_node.py'} 2 5 15"
OOM = ("dmesg | grep -E 'invoked oom-killer|oom-kill:|Out of memory' | sed 's/^\\[[ 0-9.]*\\] //'; "
       f"echo min_ttl_ms=$(cat {TTL})")
STEPS = [
    Setup("namespace", "ndctl create-namespace -f -e namespace0.0 -m devdax >/dev/null"),
    Agent("plan", f"plan {PROFILE}"),
    Agent("apply", f"apply --yes --skip-checks all {PROFILE}"),
    Setup("fill-1000", FILL),
    Setup("oom-1000", OOM),
    Setup("ttl-0", f"dmesg -c >/dev/null; echo 0 > {TTL}; cat {TTL}"),
    Setup("fill-0", FILL),
    Setup("oom-0", OOM),
]


@pytest.fixture(scope="module")
def runs(guest: harness.Guest) -> dict[str, Outcome]:
    if os.environ.get("NODEAGENT_RK_EXTRA") != "1":
        pytest.skip("realkernel: the min_ttl_ms boot runs in `make realkernel-extra` (NODEAGENT_RK_EXTRA=1)")
    if not harness.venv_python().exists():
        pytest.skip(f"realkernel: no project virtualenv at {harness.venv_python()} (run make test)")
    real, res = run_guest(guest, STEPS, label="min-ttl-oom", timeout=600)
    print(f"\n[realkernel] min_ttl_ms on a full CXL node: {res.guest.wall_seconds:.1f}s wall")
    for name, o in real.items():
        print(f"---- {name} rc={o.rc}\n{o.stdout[-2500:]}\n{o.stderr[-1000:]}", file=sys.stderr)
    return real


def test_the_plan_on_the_guest_warns_before_anything_is_applied(runs: dict[str, Outcome]) -> None:
    plan = runs["plan"].doc()
    said = [w for w in plan["warnings"] if w.startswith("advisory oom-guard-kills-on-a-full-node")]
    assert len(said) == 1 and "node2 has nothing to demote to" in said[0], plan["warnings"]
    assert runs["apply"].rc == 0


def test_at_1000_kswapd_of_the_full_node_kills_the_process_while_dram_has_room(runs: dict[str, Outcome]) -> None:
    fill, oom = runs["fill-1000"], runs["oom-1000"]
    assert "filled: node2" in fill.stdout and "survived" not in fill.stdout, fill.stdout + fill.stderr
    assert fill.rc == 128 + 9 or "Killed" in fill.stdout + fill.stderr, (fill.rc, fill.stdout, fill.stderr)
    assert "min_ttl_ms=1000" in oom.stdout
    assert re.search(r"kswapd2 invoked oom-killer", oom.stdout), oom.stdout
    assert re.search(r"oom-kill:constraint=CONSTRAINT_NONE.*global_oom.*task=python", oom.stdout), oom.stdout
    # the other nodes had room: each more than a quarter of its memory free when node 2 was full
    free = [int(m) for m in re.findall(r"node[01] (\d+) MiB free", fill.stdout.split("filled:", 1)[1])]
    assert len(free) == 2 and min(free) > 400, fill.stdout


def test_at_0_the_same_fill_lives(runs: dict[str, Outcome]) -> None:
    fill, oom = runs["fill-0"], runs["oom-0"]
    assert runs["ttl-0"].stdout.strip().endswith("0")
    assert fill.rc == 0 and "survived: node2" in fill.stdout, (fill.rc, fill.stdout, fill.stderr)
    assert "min_ttl_ms=0" in oom.stdout and "invoked oom-killer" not in oom.stdout, oom.stdout
