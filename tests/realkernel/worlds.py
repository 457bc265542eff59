"""One scenario, two worlds: the real 6.12 kernel in the QEMU guest, and a simulated ``qemu-3node`` node.

A scenario is a list of actions. The guest runs them as ONE shell script in ONE boot (``harness.run_steps``);
the simulator runs the same actions, in the same order, against a fresh simulated node. Each action gives an
:class:`Outcome` (rc, stdout, stderr) under its name, so a test can compare the two worlds step by step.

- :class:`Agent`: ``nodeagent [--format json] ARGS`` — in the guest the project's venv python on the real root,
  in the simulator ``python -m nodeagent --root <node>``.
- :class:`Writes`: kernel attribute writes, each reported as ``<path> ok`` or ``<path> <strerror>`` — in the
  guest through coreutils' echo (which prints ``write error: <strerror>``), in the simulator through
  :meth:`nodeagent_sim.SimKernel.write` (which raises ``OSError`` with the kernel's errno).
- :class:`Dump`: the same read-only shell script over the kernel files the scenarios care about (knobs, node
  lists and distances, memory tiers, node2's memory blocks, the dax0.0 driver, the whole DAMON admin tree,
  nodeagent's state directory), run with ``R=`` (guest) or ``R=<node>`` (simulator): ``path=value`` lines.
- :class:`Setup`: what differs on purpose (making dax0.0 in the guest, hiding daxctl): a guest command and a
  simulator function.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import harness
from nodeagent_sim import SimKernel


@dataclass(frozen=True)
class Agent:
    name: str
    args: str  # after ``nodeagent [--format json]``; shell words
    json: bool = True


@dataclass(frozen=True)
class Writes:
    name: str
    writes: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Dump:
    name: str


@dataclass(frozen=True)
class Setup:
    name: str
    guest: str  # shell command in the guest ("" = nothing)
    sim: Callable[[Path], None] | None = None


Action = Agent | Writes | Dump | Setup


@dataclass(frozen=True)
class Outcome:
    rc: int
    stdout: str
    stderr: str

    def docs(self) -> list[Any]:
        """Every JSON document on stdout (nodeagent prints a second one, ``{"error": ...}``, when it fails)."""
        dec, text, out, i = json.JSONDecoder(), self.stdout, [], 0
        while True:
            while i < len(text) and text[i].isspace():
                i += 1
            if i >= len(text):
                return out
            doc, i = dec.raw_decode(text, i)
            out.append(doc)

    def doc(self) -> Any:
        docs = self.docs()
        assert docs, f"no JSON on stdout (rc {self.rc}): {self.stdout[-2000:]}{self.stderr[-2000:]}"
        return docs[0]

    def kv(self) -> dict[str, str]:
        """A state dump as ``{path: value}``; DAMON files as ``damon/<path under kdamonds>``."""
        head, _, tree = self.stdout.partition(DAMON_MARK + "\n")
        out = dict(line.split("=", 1) for line in head.splitlines() if "=" in line)
        for line in tree.splitlines():
            path, sep, value = line.partition(":")
            if sep:
                key = "damon/" + path.removeprefix("./")
                out[key] = f"{out[key]}\\n{value}" if key in out else value
        return out


# --------------------------------------------------------------------------- the state dump

KDAMONDS = "/sys/kernel/mm/damon/admin/kdamonds"
DAMON_MARK = "@@damon-tree"
# bash builtins only, but for one grep: under TCG every fork+exec costs 0.1-0.2 s. Not dash: its `read` gets
# nothing from sysfs binary attributes such as nodeN/cpulist (rc 1, seen in the guest). A multi-line value is
# joined with spaces; the DAMON tree comes as grep's path:line lines after a marker (joined in Python).
DUMP_SCRIPT = r"""
kv() { for f in "$@"; do [ -f "$f" ] || continue; v=; s=
  while IFS= read -r l || [ -n "$l" ]; do v="$v$s$l"; s=' '; done < "$f"; printf '%s=%s\n' "${f#"$R"}" "$v"; done; }
N=$R/sys/devices/system/node
kv $R/proc/sys/kernel/numa_balancing $R/sys/kernel/mm/numa/demotion_enabled \
   $R/sys/devices/system/memory/auto_online_blocks \
   $R/sys/kernel/mm/transparent_hugepage/enabled $R/sys/kernel/mm/transparent_hugepage/defrag
kv $N/online $N/possible $N/has_cpu $N/has_memory $N/has_normal_memory $N/node*/distance $N/node*/cpulist
kv $R/sys/devices/virtual/memory_tiering/memory_tier*/nodelist
kv $N/node2/memory[0-9]*/state $N/node2/memory[0-9]*/online $N/node2/memory[0-9]*/valid_zones \
   $N/node2/memory[0-9]*/phys_index
[ -f $N/node2/meminfo ] && while read -r _ _ k v u; do
  [ "$k" = MemTotal: ] && echo "node2.MemTotal=$v $u"; done < $N/node2/meminfo
for d in device_dax kmem; do [ -L $R/sys/bus/dax/drivers/$d/dax0.0 ] && echo "dax0.0.driver=$d"; done
st=; for f in $R/var/lib/nodeagent/*; do [ -e "$f" ] && st="$st ${f##*/}"; done; echo "nodeagent.state=${st# }"
echo @@damon-tree
cd $R/sys/kernel/mm/damon/admin/kdamonds && grep -r '' . 2>/dev/null
"""


def dump_script(root: str = "") -> str:
    return f"R={shlex.quote(root)}\n{DUMP_SCRIPT}"


# --------------------------------------------------------------------------- writes

# bash, not dash: bash's echo builtin reports the errno ("echo: write error: Device or resource busy"), dash's
# only says "I/O error"; a builtin because a fork+exec per write is slow under TCG.
WRITE_FN = ('w() { if { echo "$2" > "$1"; } 2>/tmp/.rk-w.err; then echo "$1 ok"; '
            'else read -r e < /tmp/.rk-w.err; echo "$1 ${e##*: }"; fi; }')


def writes_command(writes: Sequence[tuple[str, str]]) -> str:
    script = "\n".join([WRITE_FN] + [f"w {shlex.quote(p)} {shlex.quote(v)}" for p, v in writes])
    return f"bash -c {shlex.quote(script)}"


def sim_writes(root: Path, writes: Sequence[tuple[str, str]]) -> str:
    k = SimKernel(root)
    lines = []
    for path, value in writes:
        try:
            k.write(path, value or "\n")  # as the guest's `echo "$2" > "$1"`: an empty value is a newline
            lines.append(f"{path} ok")
        except OSError as exc:
            lines.append(f"{path} {os.strerror(exc.errno) if exc.errno else exc}")
    return "".join(line + "\n" for line in lines)


# --------------------------------------------------------------------------- the two runners


def agent_words(action: Agent) -> str:
    return ("--format json " if action.json else "") + action.args


def run_guest(guest: harness.Guest, actions: Sequence[Action], *, label: str, timeout: float = 420,
              layout: str = "3node") -> tuple[dict[str, Outcome], harness.StepsResult]:
    python = harness.venv_python()
    steps = []
    for a in actions:
        if isinstance(a, Agent):
            cmd = f"{python} -m nodeagent {agent_words(a)}"
        elif isinstance(a, Writes):
            cmd = writes_command(a.writes)
        elif isinstance(a, Dump):
            cmd = f"bash -c {shlex.quote(dump_script(''))}"
        else:
            cmd = a.guest or "true"
        steps.append(harness.Step(a.name, cmd))
    res = guest.run_steps(steps, timeout=timeout, label=label, layout=layout)
    out = {a.name: Outcome(res[a.name].rc, res[a.name].stdout, res[a.name].stderr) for a in actions}
    return out, res


def run_sim(root: Path, actions: Sequence[Action]) -> dict[str, Outcome]:
    out: dict[str, Outcome] = {}
    for a in actions:
        if isinstance(a, Agent):
            argv = [sys.executable, "-m", "nodeagent", "--root", str(root), *shlex.split(agent_words(a))]
            p = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
            out[a.name] = Outcome(p.returncode, p.stdout, p.stderr)
        elif isinstance(a, Writes):
            out[a.name] = Outcome(0, sim_writes(root, a.writes), "")
        elif isinstance(a, Dump):
            p = subprocess.run(["bash", "-c", dump_script(str(root))], capture_output=True, text=True, timeout=60)
            out[a.name] = Outcome(p.returncode, p.stdout, p.stderr)
        else:
            if a.sim is not None:
                a.sim(root)
            out[a.name] = Outcome(0, "", "")
    return out


# --------------------------------------------------------------------------- comparing

_VOLATILE = [
    (re.compile(r"\bpid \d+"), "pid N"),
    (re.compile(r"\bin \d+(\.\d+)?s\b"), "in Ts"),
    # a profile's path as the agent prints it, relative to its working directory: / in the guest, the
    # repository for the simulator
    (re.compile(r"[^\s'\"]*\bprofiles/([\w.-]+\.yaml)"), r"profiles/\1"),
]


def norm(text: str) -> str:
    for pattern, repl in _VOLATILE:
        text = pattern.sub(repl, text)
    return text


def changes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    keep = ("kind", "target", "op", "disruptive", "before_label", "after_label", "reason")
    return [{k: norm(str(c[k])) if isinstance(c[k], str) else c[k] for k in keep} for c in plan["changes"]]


def plan_summary(plan: dict[str, Any]) -> dict[str, Any]:
    return {
        "changes": changes(plan),
        "problems": [{**p, "message": norm(p["message"])} for p in plan["problems"]],
        "warnings": [norm(w) for w in plan["warnings"]],
        "unchanged": plan["unchanged"],
    }


def apply_summary(result: dict[str, Any]) -> dict[str, Any]:
    return {
        "status": result["status"],
        "changed": result["changed"],
        "plan": plan_summary(result["plan"]),
        "outcomes": [{**o, "message": norm(o["message"])} for o in result["outcomes"]],
        "verify_errors": result["verify_errors"],
    }


def drift_summary(report: dict[str, Any]) -> dict[str, Any]:
    return {
        "converged": report["converged"],
        "items": [{k: norm(v) if isinstance(v, str) else v for k, v in item.items() if k != "first_seen"}
                  for item in report["items"]],
        "problems": [{**p, "message": norm(p["message"])} if isinstance(p, dict) else norm(p)
                     for p in report["problems"]],
        "by_resource": report["by_resource"],
    }


#: DAMON files whose values the kernel produces as it runs (pids, statistics, tried regions).
DAMON_VOLATILE = re.compile(r"/pid$|/stats/|/tried_regions/|/effective_bytes$|/current_value$")


def dump_summary(outcome: Outcome) -> dict[str, str]:
    """The dump as a dict; a running kdamond's pid becomes ``running``, run-time statistics are left out."""
    assert outcome.rc == 0, f"state dump failed: {outcome.stderr}"
    out = {}
    for key, value in outcome.kv().items():
        if key.startswith("damon/") and DAMON_VOLATILE.search(key):
            if key.endswith("/pid"):
                out[key] = "running" if value.strip() not in ("-1", "") else value
            continue
        out[key] = value
    return out


def diff(guest: Any, sim: Any) -> str:
    """Where the simulator's value differs from the real kernel's (dicts: key by key)."""
    if isinstance(guest, dict) and isinstance(sim, dict):
        lines = []
        for key in sorted(set(guest) | set(sim), key=str):
            g, s = guest.get(key, "<absent>"), sim.get(key, "<absent>")
            if g != s:
                lines.append(f"  {key}:\n    real kernel: {g!r}\n    simulator:   {s!r}")
        return "\n".join(lines)
    return (f"  real kernel: {json.dumps(guest, indent=1, ensure_ascii=False)}\n"
            f"  simulator:   {json.dumps(sim, indent=1, ensure_ascii=False)}")


def assert_same(what: str, guest: Any, sim: Any) -> None:
    assert guest == sim, (
        f"the simulator (sim/nodeagent_sim, preset qemu-3node) differs from the real 6.12 kernel in {what}:\n"
        f"{diff(guest, sim)}"
    )


# --------------------------------------------------------------------------- the CXL scenario (layout ``cxl``)

CXL = "/sys/bus/cxl/devices"
REGION = f"{CXL}/region0"
#: In the guest's probe order mem0 is serial ...02 (root port 0c:01.0, endpoint2) and mem1 serial ...01
#: (0c:00.0, endpoint3): the simulator's qemu-cxl preset lays them out the same (the tests check the serials).
DEC_MEM0, DEC_MEM1 = "decoder2.0", "decoder3.0"
CXL_MODULES = Setup(
    "cxl-modules",
    "modprobe -a cxl_acpi cxl_pci cxl_port cxl_mem dax_cxl && for i in $(seq 50); do "
    f"[ -e {CXL}/endpoint3/decoder3.0 ] && [ -e {CXL}/endpoint2/decoder2.0 ] && break; sleep 0.2; done",
)
#: Every refusal the captures showed, then a 2-way RAM region over both memdevs (mem1 at position 0), committed
#: and bound to cxl_region: (path, value) in order; each step's result is compared between the worlds.
CXL_CREATE = (
    (f"{CXL}/decoder0.0/create_ram_region", "region7"),  # not the next name: EBUSY
    (f"{CXL}/decoder0.0/create_ram_region", "garbage"),  # EINVAL
    (f"{CXL}/decoder0.0/create_ram_region", "region0"),
    (f"{REGION}/size", "536870912"),  # before ways/granularity: ENXIO
    (f"{REGION}/interleave_ways", "3"),  # not a power-of-two multiple of the x1 window: EINVAL
    (f"{REGION}/interleave_ways", "5"),
    (f"{REGION}/interleave_ways", "0"),
    (f"{REGION}/interleave_granularity", "128"),  # below 256: EINVAL
    (f"{REGION}/interleave_granularity", "300"),
    (f"{REGION}/interleave_granularity", "32768"),
    (f"{REGION}/interleave_granularity", "512"),
    (f"{REGION}/interleave_granularity", "256"),
    (f"{REGION}/interleave_ways", "2"),
    (f"{REGION}/size", "268435456"),  # not a multiple of 256 MiB x 2: EINVAL
    (f"{REGION}/size", "536870912"),
    (f"{REGION}/interleave_ways", "1"),  # size set: EBUSY
    (f"{REGION}/interleave_granularity", "512"),
    (f"{CXL}/{DEC_MEM0}/dpa_size", "268435456"),  # before mode: EINVAL
    (f"{CXL}/decoder2.1/mode", "ram"),
    (f"{CXL}/decoder2.1/dpa_size", "268435456"),  # out of id order: EBUSY
    (f"{CXL}/decoder2.1/mode", "bogus"),
    (f"{CXL}/{DEC_MEM0}/mode", "pmem"),  # no pmem partition: ENXIO
    (f"{CXL}/{DEC_MEM0}/mode", "ram"),
    (f"{CXL}/{DEC_MEM0}/dpa_size", "100000000"),  # not 256 MiB units: EINVAL
    (f"{CXL}/{DEC_MEM0}/dpa_size", "536870912"),  # more than the device: ENOSPC
    (f"{CXL}/{DEC_MEM0}/dpa_size", "268435456"),
    (f"{CXL}/{DEC_MEM0}/mode", "pmem"),
    (f"{CXL}/{DEC_MEM1}/mode", "ram"),
    (f"{CXL}/{DEC_MEM1}/dpa_size", "268435456"),
    (f"{REGION}/target0", "decoder2.1"),  # no DPA: ENXIO
    (f"{REGION}/commit", "1"),  # targets missing: ENXIO
    (f"{REGION}/target0", DEC_MEM1),
    (f"{REGION}/target1", DEC_MEM1),  # already in the region: EBUSY
    (f"{REGION}/target1", DEC_MEM0),
    (f"{CXL}/{DEC_MEM0}/dpa_size", "0"),  # in a region: EBUSY
    (f"{REGION}/size", "0"),  # every target attached: EBUSY
    ("/sys/bus/cxl/drivers/cxl_region/bind", "region0"),  # not committed: ENXIO
    (f"{REGION}/commit", "1"),
    (f"{REGION}/interleave_ways", "1"),
    ("/sys/bus/cxl/drivers/cxl_region/bind", "region0"),  # dax_region0 -> dax0.0, kmem takes it
)
#: dax0.0 covers memory50..53 (0x190000000, 512 MiB, 128 MiB blocks): teardown in the kernel's order.
CXL_TEARDOWN = (
    *((f"/sys/devices/system/memory/memory{b}/state", "offline") for b in range(50, 54)),
    ("/sys/bus/dax/drivers/kmem/unbind", "dax0.0"),
    (f"{REGION}/commit", "0"),  # releases cxl_region: dax0.0 goes
    (f"{CXL}/{DEC_MEM1}/dpa_size", "0"),  # still a target: EBUSY
    (f"{REGION}/target0", ""),
    (f"{REGION}/target1", ""),
    (f"{REGION}/size", "0"),
    (f"{CXL}/{DEC_MEM1}/dpa_size", "0"),
    (f"{CXL}/{DEC_MEM0}/dpa_size", "0"),
    (f"{CXL}/decoder0.0/delete_region", "garbage"),  # ENODEV
    (f"{CXL}/decoder0.0/delete_region", "region0"),
)
CXL_SCENARIO = [
    CXL_MODULES,
    Agent("facts-bare", "facts"),
    Writes("create", CXL_CREATE),
    Setup("dax-settle", "for i in $(seq 50); do [ -e /sys/bus/dax/devices/dax0.0 ] && break; sleep 0.1; done"),
    Agent("facts-region", "facts"),
    Setup("cxl-list", "cxl list -M -D -R -i"),
    Dump("region-dump"),
    Writes("teardown", CXL_TEARDOWN),
    Agent("facts-after", "facts"),
]


def cxl_preset(facts_doc: dict[str, Any]) -> str:
    """The qemu-cxl preset in the probe orders this boot of the guest had: cxl_pci numbers the memdevs and cxl_mem
    the endpoints, each in a probe of its own, so mem0 may be either memdev and endpoint2 either one's."""
    cxl = facts_doc["sections"]["cxl"]
    serial = {m["name"]: m["serial"] for m in cxl["memdevs"]}
    first_mem = serial["mem0"] == 0x4C454F0002
    ep2 = cxl["ports"]["endpoint2"]["host"]
    base = "qemu-cxl" if first_mem else "qemu-cxl-rp0first"
    return base if ep2 == "mem0" else f"{base}-ep-swapped"


#: The two-bridge layout (``cxl-2hb``): its endpoints' numbers follow the ports', so wait for any two.
CXL_MODULES_2HB = Setup(
    "cxl-modules",
    "modprobe -a cxl_acpi cxl_pci cxl_port cxl_mem dax_cxl && for i in $(seq 50); do "
    f"[ $(ls -d {CXL}/endpoint*/decoder*.0 2>/dev/null | wc -l) -ge 2 ] && break; sleep 0.2; done",
)
#: The bus as the kernel laid it out (the capture kept in ``captured/cxl-*-layout.txt``): each bus device and where it
#: is, the windows' attributes, the memdevs' serials, the possible nodes and what SRAT gave the kernel.
CXL_LAYOUT = Setup(
    "cxl-layout",
    f"cd {CXL} && for d in *; do echo \"$d -> $(readlink $d)\"; done; for d in decoder0.*; do "
    "for a in start size interleave_ways interleave_granularity target_list cap_ram cap_pmem qos_class; do "
    "echo \"$d/$a=$(cat $d/$a)\"; done; done; for m in mem*; do echo \"$m/serial=$(cat $m/serial)\"; done; "
    "echo \"node/possible=$(cat /sys/devices/system/node/possible)\"; "
    "dmesg | grep -E 'SRAT: Node|Initmem setup' | sed 's/^\\[[ 0-9.]*\\] //'",
)


def cxl_2hb_preset(facts_doc: dict[str, Any]) -> str:
    """The qemu-cxl-2hb preset in the probe orders this boot of the two-bridge guest had (see :func:`cxl_preset`):
    endpoint3 is the first endpoint (the ports are 1 and 2)."""
    cxl = facts_doc["sections"]["cxl"]
    serial = {m["name"]: m["serial"] for m in cxl["memdevs"]}
    base = "qemu-cxl-2hb" if serial["mem0"] == 0x4C454F0002 else "qemu-cxl-2hb-rp0first"
    return base if cxl["ports"]["endpoint3"]["host"] == "mem0" else f"{base}-ep-swapped"


def cxl_sim_root(tmp: Path, name: str, preset: str) -> Path:
    """A fresh simulated CXL node (in /dev/shm where it can be: its many small files are faster there)."""
    import shutil

    from nodeagent_sim import create

    base = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else tmp
    root = base / f"nodeagent-rkcxl-{os.getpid()}-{name}"
    if root.exists():
        shutil.rmtree(root)
    return create(root, preset)


def cxl_shape(doc: dict[str, Any]) -> dict[str, Any]:
    """What must agree between the worlds in a ``nodeagent --format json facts`` document: the whole ``cxl``
    section but where cxl-cli is installed (the guest has it, the simulator not), the CXL-backed DAX devices,
    and the NUMA layout."""
    cxl = {k: v for k, v in doc["sections"]["cxl"].items() if k not in ("cxl_cli", "cli_differences")}
    dax = [{k: v for k, v in d.items() if k != "memmap_bytes"} for d in doc["sections"]["dax"]["devices"]]
    # DRAM nodes' MemTotal is the guest firmware's business; the CXL node's is the region's
    nodes = {n["id"]: {k: n[k] for k in ("cpulist", "has_memory", "has_normal_memory", "tier")}
             | ({"mem_total": n["mem_total"]} if n["id"] >= 2 else {}) for n in doc["nodes"]}
    return {"cxl": cxl, "dax": dax, "nodes": nodes, "possible": doc["possible_nodes"]}
