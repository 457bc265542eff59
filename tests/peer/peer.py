"""Running the peer tools (Debian's daxctl/ndctl/cxl 76.1, util-linux's lsmem, damo 3.4.3) on a simulated node.

They run only through ``nsrun.sh`` inside ``unshare -m --propagation private``: the simulated ``sys`` bind-mounted
read-only over ``/sys``, a private ``/dev`` with the simulated root's device nodes, a marker file read through
``/sys`` before any tool starts. damo's statistics report, which writes to a kdamond's ``state`` first, runs last
with ``/sys`` served by ``simfs.py`` instead: the same tree, each write a store of the simulator's kernel.
Where the tools are not fetched (``scripts/peer-tools.sh``) or unshare is not allowed, :func:`unavailable` says
why (CI fetches them: there a missing tool fails instead).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
NSRUN = HERE / "nsrun.sh"
#: the mfusepy scripts/peer-tools.sh fetches (simfs.py's FUSE bindings)
MFUSEPY = "3.1.1"
TOOLS = ("daxctl", "cxl", "cxl-u", "ndctl", "lsmem", "lsmem-summary", "damo", "damo-stats")


def _cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "nodeagent" / "tools" / "peer"


def tool_env() -> dict[str, str]:
    """Where scripts/peer-tools.sh put the tools (its KEY=VALUE lines, or its default cache)."""
    c = _cache()
    env = {"NODEAGENT_PEER_BIN": str(c / "root/usr/bin"),
           "NODEAGENT_PEER_LIB": str(c / "root/usr/lib/x86_64-linux-gnu"),
           "NODEAGENT_PEER_DAMO": str(c / "damo/bin/damo"),
           "NODEAGENT_PEER_FUSE_PY": str(c / "fuse-py"),
           "NODEAGENT_PEER_FUSE_LIB": str(c / "root/lib/x86_64-linux-gnu/libfuse3.so.3")}
    return {**{k: os.environ.get(k) or v for k, v in env.items()}, "NODEAGENT_PEER_PYTHON": sys.executable}


def unavailable() -> str | None:
    """Why the peer tools cannot run here (None: they can)."""
    env = tool_env()
    for exe in (f"{env['NODEAGENT_PEER_BIN']}/daxctl", f"{env['NODEAGENT_PEER_BIN']}/cxl",
                f"{env['NODEAGENT_PEER_BIN']}/ndctl", env["NODEAGENT_PEER_DAMO"]):
        if not os.access(exe, os.X_OK):
            return f"{exe} is missing: run scripts/peer-tools.sh"
    if not os.path.isdir(os.path.join(env["NODEAGENT_PEER_FUSE_PY"], "mfusepy-" + MFUSEPY + ".dist-info")):
        return f"mfusepy {MFUSEPY} is missing from {env['NODEAGENT_PEER_FUSE_PY']}: run scripts/peer-tools.sh"
    if not os.path.exists(env["NODEAGENT_PEER_FUSE_LIB"]):
        return f"{env['NODEAGENT_PEER_FUSE_LIB']} is missing: run scripts/peer-tools.sh"
    if not shutil.which("lsmem"):
        return "lsmem (util-linux) is not installed"
    if os.geteuid() != 0:
        return "not root: the peer tools need a private mount namespace (unshare -m) to see a simulated /sys"
    if not shutil.which("unshare"):
        return "unshare (util-linux) is not installed"
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"unshare -m is not allowed here: {probe.stderr.strip()}"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing: damo's statistics report needs FUSE (tests/peer/simfs.py)"
    return None


def _damo_table() -> tuple[str, list[dict]]:
    """damo's version and its own feature table (its ``_damon_features.py``), read by damo's python: never by
    running damo itself outside the namespace."""
    py = tool_env()["NODEAGENT_PEER_DAMO"].rsplit("/bin/", 1)[0] + "/bin/python"
    code = ("import json, os, damo; import sys; sys.path.insert(0, os.path.dirname(damo.__file__)); "
            "import _damon_features as f, damo_version as v; "
            "print(json.dumps([v.get_real_version(), [x.to_kvpairs() for x in f.features_list]]))")
    version, table = json.loads(subprocess.run([py, "-c", code], capture_output=True, text=True, check=True).stdout)
    return version, table


def _damo_features(table: list[dict], kernel: str) -> list[dict]:
    """The features of damo's table upstream by kernel ``kernel``: what damo's feature check would find there.
    That check stages a kdamond (writes), which a read-only /sys cannot take, so the tests fill damo's cache
    (~/.damo.sysinfo) instead, as a user's earlier run would have."""
    level = tuple(int(x) for x in kernel.split("-")[0].split(".")[:2])
    avail = []
    for f in table:
        v = f["upstreamed_version"]
        if not v[:1].isdigit():
            continue
        since = tuple(int(x) for x in v.split(".")[:2])
        if since <= level and not f["name"].startswith(("debugfs/", "interface/damon_debugfs")):
            avail.append(f)
    return avail


def _mount_point(fstype: str) -> str | None:
    with open("/proc/mounts") as f:
        for line in f:
            fields = line.split()
            if fields[2] == fstype:
                return fields[1]
    return None


def _damo_home(dest: Path, kernel: str) -> None:
    version, table = _damo_table()
    info = {"damo_version": version, "kernel_version": os.uname().release, "sysfs_path": "/sys",
            "tracefs_path": _mount_point("tracefs"), "debugfs_path": _mount_point("debugfs"),
            "trace_cmd_version": None, "perf_path": None, "perf_version": None,
            "avail_damon_features": _damo_features(table, kernel)}
    dest.mkdir(parents=True, exist_ok=True)
    (dest / ".damo.sysinfo").write_text(json.dumps(info))


@dataclass
class Output:
    rc: int
    out: str
    err: str

    def json(self):  # noqa: ANN201
        return json.loads(self.out) if self.out.strip() else []


def run(root: Path, kernel: str, scratch: Path) -> dict[str, Output]:
    """Every peer tool's output on the simulated node at ``root``, read in a private mount namespace."""
    out = scratch / "out"
    out.mkdir(parents=True, exist_ok=True)
    home = scratch / "damo-home"
    _damo_home(home, kernel)
    token = secrets.token_hex(16)
    marker = root / "sys" / ".nodeagent-peer-marker"
    marker.write_text(token)
    env = {**os.environ, **tool_env(), "NODEAGENT_PEER_HOST_MNTNS": os.readlink("/proc/self/ns/mnt")}
    try:
        proc = subprocess.run(["unshare", "-m", "--propagation", "private", str(NSRUN), str(root), str(out), token,
                               str(home)], capture_output=True, text=True, env=env, timeout=300)
    finally:
        marker.unlink()
    if proc.returncode != 0:
        raise RuntimeError(f"nsrun.sh failed ({proc.returncode}): {proc.stderr.strip()}")
    return {t: Output(int((out / f"{t}.rc").read_text()), (out / f"{t}.out").read_text(),
                      (out / f"{t}.err").read_text()) for t in TOOLS}
