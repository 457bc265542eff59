"""A read-only /sys: `plan` works, `apply` stops before its first write with one EROFS message.

Needs a private mount namespace (root and `unshare`), where the simulated root's /sys is bind-mounted read-only;
skipped elsewhere. Nothing outside the namespace changes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROFILE = str(REPO / "profiles" / "cxl-inference.yaml")

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                                reason="a read-only bind mount needs root and unshare")


def _in_ro_namespace(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    sysdir = root / "sys"
    script = (f"mount --bind {sysdir} {sysdir} && mount -o remount,bind,ro {sysdir} && "
              f"exec {sys.executable} -m nodeagent --root {root} " + " ".join(args))
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    if "mount:" in proc.stderr and "nodeagent" not in proc.stderr:
        pytest.skip(f"cannot bind-mount read-only here: {proc.stderr.strip()}")
    return proc


def test_plan_works_and_apply_fails_before_the_first_write(make_node) -> None:
    root = make_node("h100-cxl")
    plan = _in_ro_namespace(root, "--format", "json", "plan", PROFILE)
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["changes"]
    journal = root / ".nodeagent-machine" / "writes.log"
    before = journal.read_text() if journal.exists() else ""
    apply = _in_ro_namespace(root, "apply", "--yes", "--skip-checks", "all", PROFILE)
    assert apply.returncode == 1, apply.stdout + apply.stderr
    assert apply.stderr.count("EROFS") == 1 and "read-only filesystem" in apply.stderr, apply.stderr
    assert "nothing was written" in apply.stderr
    assert (journal.read_text() if journal.exists() else "") == before
