"""A state directory on a full filesystem, before the lock: one message naming the path and the fix.

The lock file can still be created on a full filesystem (an inode is free) while the holder's pid cannot be
written into it; that write's ENOSPC once reached the CLI as a bare "No space left on device". A real full
filesystem is needed (the simulator's faults cover nodeagent's record writes, not the lock): a 64 KiB tmpfs
mounted over the simulated node's /var/lib in a private mount namespace, filled, then ``apply`` in it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from nodeagent_sim import SimKernel

REPO = Path(__file__).resolve().parents[2]
PROFILE = str(REPO / "profiles" / "cxl-inference.yaml")

needs_unshare = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                                   reason="mounting a full tmpfs needs root and unshare(1)")


@needs_unshare
@pytest.mark.parametrize("before", ["empty", "state dir made"])
def test_a_full_state_disk_names_the_path_and_the_fix(make_node, before: str) -> None:
    root = make_node("qemu-3node")
    var_lib = root / "var/lib"
    if var_lib.exists():
        shutil.rmtree(var_lib)
    var_lib.mkdir(parents=True)
    made = "mkdir -p \"$1/var/lib/nodeagent\"\n" if before == "state dir made" else ""
    script = (
        "set -e\n"
        'mount -t tmpfs -o size=64k tmpfs "$1/var/lib"\n' + made +
        'dd if=/dev/zero of="$1/var/lib/fill" bs=4k count=100 2>/dev/null || true\n'
        '"$2" -m nodeagent --root "$1" apply --yes --skip-checks all "$3" || echo "rc=$?"\n')
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", str(root),
                        sys.executable, PROFILE], capture_output=True, text=True, timeout=300, cwd=REPO,
                       check=False)
    assert "rc=1" in r.stdout, r.stdout + r.stderr
    err = r.stderr
    assert "cannot take the state lock:" in err and "/var/lib/nodeagent" in err, err
    assert "No space left on device (errno ENOSPC); nothing was written" in err, err
    assert "hint: free space on the filesystem that holds /var/lib/nodeagent" in err, err
    assert "Traceback" not in err and not err.startswith("nodeagent: No space left on device")
    assert not [e for e in SimKernel(root).journal() if e["result"] == "ok"]
