"""`nodeagent sim fault`: faults persisted in the simulated node, counted across processes, at kernel and state
writes alike."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys

import pytest
from nodeagent_sim import SimKernel, faults

from nodeagent.host import open_host
from nodeagent.util.errors import HostError
from tests.e2e.cli_helpers import run

KNOB = "/sys/kernel/mm/numa/demotion_enabled"


def _sim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nodeagent", "sim", *args], capture_output=True, text=True,
                          check=False)


def test_errno_after_and_times_count_every_process(make_node, capsys) -> None:
    root = make_node("qemu-3node")
    code, out, _ = run(["sim", "fault", str(root), "--write", "demotion", "--errno", "EBUSY", "--after", "1",
                        "--times", "2"], capsys)
    assert code == 0 and "EBUSY" in out
    k = SimKernel(root)
    k.write(KNOB, "1")  # the first matching write passes (--after 1)
    # the next two fail, whichever process makes them: the counter lives in the node
    for _ in range(2):
        r = _sim("write", str(root), KNOB, "0")
        assert r.returncode == 1 and "EBUSY" in r.stderr
    k.write(KNOB, "0")  # --times 2 are spent
    assert k.tree.read(KNOB) == "false"
    rule = faults.load(root).rules[0]
    assert (rule.seen, rule.fired) == (4, 2)
    failed = [e for e in k.journal() if e["path"] == KNOB and e["result"] != "ok"]
    assert [e["result"] for e in failed] == ["EBUSY", "EBUSY"]


def test_state_file_writes_are_faulted_as_real_oserrors(make_node) -> None:
    root = make_node("qemu-3node")
    faults.add(root, faults.Rule("/var/lib/nodeagent/ownership", errno="ENOSPC", times=0))
    host = open_host(root)
    with pytest.raises(HostError, match="ENOSPC"):
        host.fs.write_file_atomic("/var/lib/nodeagent/ownership.json", "{}\n")
    assert not (root / "var/lib/nodeagent/ownership.json").exists()
    host.fs.write_file_atomic("/var/lib/nodeagent/originals.json", "{}\n")  # another file: not matched
    with pytest.raises(HostError, match="ENOSPC"):
        host.fs.append("/var/lib/nodeagent/ownership.json.log", "x\n")


def test_signal_goes_to_the_writer_right_before_the_write(make_node) -> None:
    root = make_node("qemu-3node")
    faults.add(root, faults.Rule("demotion", signal="TERM"))
    code = ("import signal,sys\nfrom nodeagent_sim import SimKernel\n"
            "def h(s, f):\n    print('got', s, SimKernel(sys.argv[1]).tree.read(sys.argv[2]), flush=True)\n"
            "signal.signal(signal.SIGTERM, h)\nSimKernel(sys.argv[1]).write(sys.argv[2], '1')\n"
            "print('after', SimKernel(sys.argv[1]).tree.read(sys.argv[2]))\n")
    r = subprocess.run([sys.executable, "-c", code, str(root), KNOB], capture_output=True, text=True, check=True)
    # the handler ran before the write (the file still read false), then the write went on
    assert r.stdout.split("\n")[:2] == [f"got {int(signal.SIGTERM)} false", "after true"]
    assert faults.load(root).fired[0]["fault"] == "SIGTERM"


def test_clear_list_and_usage_errors(make_node, capsys) -> None:
    root = make_node("qemu-3node")
    assert run(["sim", "fault", str(root), "--write", "x", "--signal", "KILL"], capsys)[0] == 0
    code, out, _ = run(["--format", "json", "sim", "fault", str(root)], capsys)
    assert code == 0 and json.loads(out)["rules"][0]["signal"] == "SIGKILL"
    for bad in (["--write", "x(", "--errno", "EIO"], ["--write", "x", "--errno", "ENOPE"],
                ["--write", "x", "--signal", "NOPE"],
                ["--write", "x", "--errno", "EIO", "--signal", "TERM"], ["--errno", "EIO"],
                ["--clear", "--write", "x"]):
        assert run(["sim", "fault", str(root), *bad], capsys)[0] == 64, bad
    code, out, _ = run(["sim", "fault", str(root), "--clear"], capsys)
    assert code == 0 and "cleared 1" in out
    assert not (root / ".nodeagent-machine" / faults.FILE).exists()
    assert run(["sim", "fault", os.fspath(root.parent), "--clear"], capsys)[0] == 64  # not a simulated node


def test_errno_names() -> None:
    assert faults.errno_of("erofs") == errno.EROFS
    assert faults.signal_of("int") == signal.SIGINT and faults.signal_of("SIGKILL") == signal.SIGKILL
