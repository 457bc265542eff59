"""Node ranges from /proc/zoneinfo: the same ranges a walk of every block gives, without the walk."""

from __future__ import annotations

from pathlib import Path

import pytest
from nodeagent_sim import SimKernel

from nodeagent.facts import numa
from nodeagent.facts.numa import _merge, node_blocks, node_ranges, parse_zones
from nodeagent.host import open_host
from nodeagent.util.kfmt import parse_list

DATA = Path(__file__).resolve().parents[1] / "data" / "zoneinfo"
PROFILE = str(Path(__file__).resolve().parents[2] / "profiles" / "cxl-inference.yaml")


def test_parse_a_real_kernels_zoneinfo() -> None:
    """A 6.18 VM: DMA and DMA32 have holes, Normal none; Movable and Device are unpopulated (no start_pfn)."""
    zones = parse_zones((DATA / "zoneinfo-6.18.44-vm.txt").read_text())
    assert [(z.name, z.start_pfn, z.spanned, z.present) for z in zones[0]] == [
        ("DMA", 1, 4095, 3998), ("DMA32", 4096, 1044480, 782336), ("Normal", 1048576, 5505024, 5505024)]
    assert [z.holes for z in zones[0]] == [True, True, False]
    assert all(z.managed <= z.present for z in zones[0])


def walked(host, nid: int, bs: int) -> list[list[int]]:
    return _merge([[b * bs, (b + 1) * bs] for b in node_blocks(host, nid)])


def ranges_agree(root: Path) -> None:
    host = open_host(str(root))
    bs = int(host.read_opt("/sys/devices/system/memory/block_size_bytes"), 16)
    for nid in parse_list(host.read_opt("/sys/devices/system/node/online")):
        online = [b for b in node_blocks(host, nid)
                  if host.read_opt(f"/sys/devices/system/memory/memory{b}/state").strip() == "online"]
        assert node_ranges(host, nid, bs) == _merge([[b * bs, (b + 1) * bs] for b in online]), nid


@pytest.mark.parametrize("preset", ["h100-cxl", "workstation", "qemu-3node", "h100-cxl-autoonline"])
def test_zone_ranges_are_the_online_blocks(make_node, preset: str, capsys) -> None:
    from tests.e2e.cli_helpers import run

    root = make_node(preset)
    ranges_agree(root)
    run(["--root", str(root), "apply", "--yes", PROFILE], capsys)
    ranges_agree(root)


def test_a_hole_or_a_shrunk_end_is_walked_only_in_its_zone(make_node, monkeypatch) -> None:
    root = make_node("h100-cxl-autoonline")
    host = open_host(str(root))
    k = SimKernel(root)
    cxl = [n for n in parse_list(host.read_opt("/sys/devices/system/node/online")) if node_blocks(host, n)][-1]
    blocks = node_blocks(host, cxl)
    for b in (blocks[len(blocks) // 2], blocks[-1]):  # a hole in the middle, then the end: the span shrinks
        k.write(f"/sys/devices/system/memory/memory{b}/state", "offline")
    bs = int(host.read_opt("/sys/devices/system/memory/block_size_bytes"), 16)
    (zone,) = parse_zones(host.read_opt("/proc/zoneinfo"))[cxl]
    assert zone.holes and zone.present == (len(blocks) - 2) * bs // 4096
    assert (zone.start_pfn + zone.spanned) * 4096 == (blocks[-2] + 1) * bs, "offlining the end shrinks the span"
    ranges_agree(root)
    listed: list[int] = []
    monkeypatch.setattr(numa, "node_blocks", lambda h, n: listed.append(n) or [])
    node_ranges(host, 0, bs)
    node_ranges(host, cxl, bs)
    assert listed == [], "a node that zoneinfo describes is never listed"
