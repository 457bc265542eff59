"""Kernel lists and numbers read as the kernel prints them, bounded by what the kernel allows.

``0-99999999`` in ``node/online`` once made ``facts`` grow to 6.4 GB over ten minutes; ``garbage,-,5-a``, ``-5``,
``block_size_bytes=zz`` and a ``distance`` of ``10 x`` ended in an internal ``ValueError``. Every kernel list is
bounded (node ids below ``MAX_NUMNODES``, CPU ids below the largest ``NR_CPUS``) and checked at its bound and
one past it; anything the kernel could not have printed is one message naming the file — through the parser, and
through the CLI on a simulated node for every file that holds a list or such a number.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from nodeagent.util.errors import KernelFormatError
from nodeagent.util.kfmt import MAX_CPUS, MAX_NUMNODES, format_list, parse_distances, parse_hex, parse_list
from tests.e2e.cli_helpers import run

ONLINE = "/sys/devices/system/node/online"


@pytest.mark.parametrize(("limit", "what"), [(MAX_NUMNODES, "a node list"), (MAX_CPUS, "a CPU list")])
def test_a_list_at_its_bound_parses_and_one_past_it_is_refused(limit: int, what: str) -> None:
    assert MAX_NUMNODES == 1024 and MAX_CPUS == 8192
    assert parse_list(f"0-{limit - 1}", ONLINE, limit=limit) == list(range(limit))
    assert parse_list(f"{limit - 1}", ONLINE, limit=limit) == [limit - 1]
    for text in (f"0-{limit}", f"{limit}", f"0,{limit}", "0-99999999", "0-" + "9" * 20):
        with pytest.raises(KernelFormatError) as exc:
            parse_list(text, ONLINE, limit=limit)
        assert exc.value.path == ONLINE and what in exc.value.message, text
        assert f"below {limit}" in (exc.value.hint or "")


@pytest.mark.parametrize("text", ["garbage,-,5-a", "-5", "5-a", "a", "7-3", "1-2-3", "0x3", " 1 2", "1;2", "0-"])
def test_a_malformed_list_is_one_message_naming_the_file(text: str) -> None:
    with pytest.raises(KernelFormatError, match=rf"^{ONLINE} reads .*: not a node list as the kernel prints it"):
        parse_list(text, ONLINE)


def test_the_work_is_bounded_whatever_the_text() -> None:
    start = time.monotonic()
    with pytest.raises(KernelFormatError, match="more than 8192 ids"):
        parse_list("0-8191," * 1_000_000, "/sys/devices/system/node/node0/cpulist", limit=MAX_CPUS)
    assert parse_list(",".join(["0-8191"] * 8192), limit=MAX_CPUS) == list(range(8192))  # overlaps: once each
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("ids", [[], [0], [0, 1, 2, 3, 8], [1, 3, 5], list(range(1024))])
def test_what_the_kernel_prints_round_trips(ids: list[int]) -> None:
    assert parse_list(format_list(ids) + "\n") == ids


def test_hex_numbers_and_distance_rows() -> None:
    assert parse_hex("8000000\n") == 0x8000000 and parse_hex("0x10") == 16
    for bad in ("zz", "", "-1", "1" * 17, "8000000 x"):
        with pytest.raises(KernelFormatError, match="block_size_bytes reads .*not a hexadecimal number"):
            parse_hex(bad, "/sys/devices/system/memory/block_size_bytes")
    assert parse_distances("10 21 21\n") == [10, 21, 21] and parse_distances("") == []
    for bad in ("10 x", "10 -1", "10 256", "1.5", " ".join(["10"] * 1025)):
        with pytest.raises(KernelFormatError, match="node0/distance reads .*not a NUMA distance row"):
            parse_distances(bad, "/sys/devices/system/node/node0/distance")


# -- through the CLI, on a simulated node -------------------------------------------------------------------
def replace(root: Path, path: str, text: str) -> None:
    """A new file at ``path`` (the simulator's identical attributes are hard links to one pooled file)."""
    p = root / path.lstrip("/")
    p.unlink()
    p.write_text(text)


NODE = "/sys/devices/system/node"
CASES = [
    (f"{NODE}/online", "0-99999999"), (f"{NODE}/online", "garbage,-,5-a"), (f"{NODE}/online", "-5"),
    (f"{NODE}/online", "0-1024"), (f"{NODE}/possible", "0-99999999"), (f"{NODE}/has_memory", "0-99999999"),
    (f"{NODE}/has_normal_memory", "0,2-x"), (f"{NODE}/node0/cpulist", "0-8192"), (f"{NODE}/node0/cpulist", "3-1"),
    (f"{NODE}/node0/distance", "10 x"), ("/sys/devices/system/memory/block_size_bytes", "zz"),
]


@pytest.mark.parametrize(("path", "text"), CASES, ids=[f"{p.rsplit('/', 1)[1]}={t}" for p, t in CASES])
def test_facts_names_the_file_the_kernel_could_not_have_printed(make_node, capsys, path: str, text: str) -> None:
    root = make_node("qemu-3node")
    replace(root, path, text)
    start = time.monotonic()
    code, out, err = run(["--root", str(root), "facts"], capsys)
    assert time.monotonic() - start < 30
    assert code == 1, out + err
    assert f"{path} reads " in err and "as the kernel prints it" in err and "hint:" in err, err
    assert "Traceback" not in err and "internal error" not in err


def test_a_tier_list_beyond_the_bound_is_named(make_node, capsys) -> None:
    root = make_node("qemu-3node")
    tiers = sorted((root / "sys/devices/virtual/memory_tiering").glob("memory_tier*/nodelist"))
    assert tiers, "the preset has memory tiers"
    path = "/" + str(tiers[0].relative_to(root))
    replace(root, path, "0-1024")
    code, _, err = run(["--root", str(root), "facts"], capsys)
    assert code == 1 and f"{path} reads '0-1024'" in err and "1024 is beyond the kernel's bound" in err, err


def test_every_reader_of_the_block_size_names_the_file(make_node) -> None:
    """One reader of block_size_bytes (facts.numa.read_block_size) behind facts, the device scope, drift's causes
    and the DAX and CXL region applies: a value that is not hex is the same named error everywhere, never a bare
    ValueError."""
    from nodeagent.drift.causes import offline_blocks
    from nodeagent.engine.scope import device_of_block
    from nodeagent.facts.numa import read_block_size
    from nodeagent.host import open_host

    root = make_node("qemu-3node")
    host = open_host(root)
    assert read_block_size(host) == 0x8000000
    replace(root, "/sys/devices/system/memory/block_size_bytes", "zz")
    host = open_host(root)
    for read in (read_block_size, lambda h: device_of_block(h, 49), lambda h: offline_blocks(h, "dax0.0")):
        with pytest.raises(KernelFormatError, match="block_size_bytes reads 'zz'"):
            read(host)
