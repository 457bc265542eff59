"""A facts gather lists no node directory where /proc/zoneinfo describes the node (and each one at most once,
shared by the sections that need its memory blocks); outside a gather every call lists afresh (an apply must see
blocks that came and went)."""

from __future__ import annotations

from nodeagent_sim import SimKernel
from nodeagent_sim import dax as simdax

from nodeagent.facts import gather
from nodeagent.facts.dax import from_facts as dax_facts
from nodeagent.facts.numa import node_blocks
from nodeagent.host import open_host


def test_node_directories_are_listed_once_per_gather(make_node, monkeypatch) -> None:
    root = make_node("h100-cxl")
    simdax.to_system_ram(SimKernel(root), "dax0.0", "Movable")
    host = open_host(root)
    listed: list[str] = []
    real = host.fs.listdir

    def listdir(path: str) -> list[str]:
        listed.append(path)
        return real(path)

    monkeypatch.setattr(host.fs, "listdir", listdir)
    facts = gather(host)
    node_dirs = [p for p in listed if p.startswith("/sys/devices/system/node/node")]
    assert node_dirs == []  # zoneinfo describes every node: DAMON's ranges and DAX's summary list no block
    dev = dax_facts(facts).device("dax0.0")
    assert dev.fully_online and dev.zones == {"Movable": 1024}
    assert facts.sections["damon"]["node_ranges"]["2"] == [[dev.resource, dev.resource + dev.size]]
    # Outside a gather nothing is cached: a block taken away shows at once.
    first = node_blocks(host, 2)
    SimKernel(root).tree.local(f"/sys/devices/system/node/node2/memory{first[0]}").unlink()
    assert node_blocks(host, 2) == first[1:]
