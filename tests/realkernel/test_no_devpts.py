"""No command needs a terminal, on the real 6.12 kernel: with no devpts to allocate a pseudo-terminal from (an
empty tmpfs over /dev/pts, as in a minimal container or a unit with PrivateDevices=yes), `apply` still runs the
real daxctl, reads its JSON, and onlines dax0.0 as system RAM.

One boot. Before the fix every daxctl run failed with ``cannot run …/daxctl: None`` here. The same boot then
reads the facts: cgroup v2 found from the real /proc/self/mountinfo, hardware facts from the real sysfs.
"""

from __future__ import annotations

import json

import harness
import pytest

pytestmark = pytest.mark.realkernel

PROFILE = harness.REPO_ROOT / "profiles/cxl-inference.yaml"


def test_apply_converges_without_devpts(guest: harness.Guest) -> None:
    py = harness.venv_python()
    if not py.exists():
        pytest.skip(f"realkernel: no project virtualenv at {py} (run make test)")
    steps = [
        harness.Step("namespace", "ndctl create-namespace -f -e namespace0.0 -m devdax >/dev/null"),
        # no pty can be opened from here on: os.openpty() must fail, or the test proves nothing
        harness.Step("hide-devpts", f"mount -t tmpfs none /dev/pts && ! {py} -c 'import os; os.openpty()'"),
        harness.Step("apply", f"{py} -m nodeagent apply --yes --skip-checks all {PROFILE}"),
        harness.Step("daxctl", "daxctl list -d dax0.0"),
        # the same boot, read-only: the real mount table gives the cgroup v2 mount, sysfs the hardware facts
        harness.Step("facts", f"{py} -m nodeagent --format json facts"),
    ]
    res = guest.run_steps(steps, timeout=300, label="no-devpts")
    for name in ("namespace", "hide-devpts"):
        assert res[name].rc == 0, f"{name}: {res[name].output}\nconsole: {res.guest.console_path}"
    apply = res["apply"]
    assert apply.rc == 0, f"{apply.output}\nconsole: {res.guest.console_path}"
    assert "None" not in apply.output and "cannot start" not in apply.output
    (dev,) = json.loads(res["daxctl"].stdout)
    assert dev["chardev"] == "dax0.0" and dev["mode"] == "system-ram"
    facts = json.loads(res["facts"].stdout)
    reclaim = facts["sections"]["reclaim"]
    assert (reclaim["cgroup2_mount"], reclaim["memcg_reclaim_path"]) == ("/sys/fs/cgroup",
                                                                         "/sys/fs/cgroup/memory.reclaim")
    hw = facts["sections"]["hardware"]
    assert hw["cpu"]["model"] and "hypervisor" in hw["cpu"]["flags"] and hw["virtualization"]["kind"]
    assert not [d for d in hw["pci"] if d["kind"] == "gpu"]  # a guest with no GPU: nothing judged as one
