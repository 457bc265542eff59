"""Reading daxctl's output as daxctl prints it: the real v76 transcripts in shared/reference/realkernel."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nodeagent.kinds.dax.daxctl import DaxctlDevice, classify, parse_device_json

REAL = Path(__file__).resolve().parents[3] / "shared" / "reference" / "realkernel"


def transcript(name: str) -> list[tuple[str, str, int]]:
    """``(command, output, rc)`` for every ``$ daxctl ...`` step of a capture."""
    path = REAL / name
    if not path.is_file():
        pytest.skip(f"{path} is not here (shared/reference is beside the repository in CI and dev trees)")
    steps = []
    for m in re.finditer(r"^\$ (?:time )?(daxctl[^\n]*)\n(.*?)^\[rc=(\d+)\]", path.read_text(), re.S | re.M):
        steps.append((m.group(1), m.group(2), int(m.group(3))))
    return steps


def json_block(output: str) -> str:
    m = re.search(r"^\[\n.*?^\]\n", output, re.S | re.M)
    return m.group(0) if m else ""


def test_every_device_list_in_the_pmem_capture_parses() -> None:
    steps = transcript("out-dax-3node.txt")
    parsed = [parse_device_json(json_block(out)) for cmd, out, _ in steps if json_block(out)]
    devdax = [DaxctlDevice("dax0.0", 1054867456, 2, 2097152, "devdax")]  # no online_memblocks, no movable
    ram = [DaxctlDevice("dax0.0", 1054867456, 2, 2097152, "system-ram", 7, 7, True)]
    # list, list after the abort, reconfigure-device's own JSON, list -D, list -DM, list -DM at the end
    assert parsed == [devdax, devdax, ram, ram, ram, ram]


def test_the_cxl_capture_with_memory_onlined_at_boot_parses() -> None:
    steps = transcript("out-cxl-qemu10-sysfs-nohv.txt")
    lists = [parse_device_json(json_block(out)) for cmd, out, _ in steps if json_block(out)]
    assert lists[0] == [DaxctlDevice("dax1.0", 268435456, 3, 2097152, "system-ram", 2, 2, False)]


def test_stderr_of_the_real_runs_is_classified() -> None:
    steps = transcript("out-dax-3node.txt")
    abort = next(out for cmd, out, rc in steps if rc == 240)
    s = classify(abort)
    assert s.auto_online_abort and not s.race and s.summary == "reconfigured 0 devices"
    assert s.first_error == "dax0.0: error: kernel policy will auto-online memory, aborting"
    race = next(out for cmd, out, rc in steps if cmd.startswith("daxctl online-memory"))
    s = classify(race)
    assert s.race and s.summary == "onlined memory for 0 devices" and s.errors == () and s.other == ()
    cxl = next(out for cmd, out, rc in transcript("out-cxl-qemu10-sysfs-nohv.txt")
               if cmd.startswith("daxctl reconfigure-device"))
    s = classify(cxl.split("[\n")[0] + "reconfigured 1 device\n")
    assert s.race and s.summary == "reconfigured 1 device" and s.errors == () and s.other == ()


def test_absent_fields_are_none_and_human_sizes_are_not_numbers() -> None:
    devs = parse_device_json('[{"chardev":"dax3.0","size":"2.00 TiB (2.20 TB)","mode":"devdax","state":"disabled"}]')
    assert devs == [DaxctlDevice("dax3.0", None, None, None, "devdax", state="disabled")]
    assert parse_device_json("") == []
    with pytest.raises(ValueError, match="not JSON"):
        parse_device_json("reconfigured 1 device")


def test_offline_failure_names_the_busy_block() -> None:
    s = classify("libdaxctl: offline_one_memblock: dax0.0: Failed to offline "
                 "/sys/devices/system/node/node2/memory52/state: Device or resource busy\n"
                 "dax0.0: failed to offline memory: Device or resource busy\n"
                 "error offlining memory: Device or resource busy\nofflined memory for 0 devices\n")
    assert s.busy_blocks == ("memory52",) and len(s.errors) == 3 and s.summary == "offlined memory for 0 devices"
