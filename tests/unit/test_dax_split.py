"""The pure part of a Maru split (nodeagent.kinds.dax.split): what a size rule finds in its region, and the
devices the projection shows before the split is made."""

from __future__ import annotations

from types import SimpleNamespace

from nodeagent.facts.dax import DaxDevice, DaxFacts, DaxRegion
from nodeagent.kinds.dax.split import effective, find, steps_to_unbind, view

GiB = 1024**3
TiB = 1024**4
BS = 2 * GiB


def _dev(name: str, size: int, start: int, mode: str = "devdax", online: int = 0) -> DaxDevice:
    blocks = size // BS
    return DaxDevice(name=name, region=int(name[3]), size=size, align=2 * 1024**2, resource=start, target_node=3,
                     numa_node=1, mode=mode, memmap_on_memory=True, blocks_total=blocks, blocks_present=online,
                     blocks_online=online, zones={"Normal": online} if online else {}, backing="cxl")


def _facts(devices: list[DaxDevice], regions: list[DaxRegion]) -> DaxFacts:
    return DaxFacts(devices=devices, block_size=BS, daxctl="/usr/bin/daxctl", udev_rule=None, daxctl_conf=[],
                    cmdline={}, hotplug_params={}, swap_total=0, regions=regions)


RULE = SimpleNamespace(name="maru", size=512 * GiB, use="maru", mode="devdax", zone=None,
                       match=SimpleNamespace(dax_regions=(1,), devices=None),
                       rest=SimpleNamespace(mode="system-ram", zone="normal"))
REGION = DaxRegion(1, 2 * TiB, 2 * 1024**2, True, 0, None)


def test_unsplit_split_and_split_otherwise() -> None:
    whole = _facts([_dev("dax1.0", 2 * TiB, 3 * TiB)], [REGION])
    (sp,) = find((RULE,), whole)
    assert sp.state == "unsplit" and sp.rest_size == 1536 * GiB
    done = _facts([_dev("dax1.0", 1536 * GiB, 3 * TiB, "system-ram", 768),
                   _dev("dax1.1", 512 * GiB, 3 * TiB + 1536 * GiB)], [REGION])
    (sp,) = find((RULE,), done)
    assert sp.state == "split" and sp.maru is not None and sp.maru.name == "dax1.1"
    halves = _facts([_dev("dax1.0", TiB, 3 * TiB), _dev("dax1.1", TiB, 4 * TiB)], [REGION])
    (sp,) = find((RULE,), halves)
    assert sp.state == "other" and "split as dax1.0 1TiB, dax1.1 1TiB" in sp.why


def test_facts_without_the_region_plan_nothing() -> None:
    (sp,) = find((RULE,), _facts([_dev("dax1.0", 2 * TiB, 3 * TiB)], []))
    assert sp.state == "invalid" and "say nothing of region 1" in sp.why


def test_the_projection_sees_the_devices_the_split_makes() -> None:
    whole = _facts([_dev("dax1.0", 2 * TiB, 3 * TiB, "system-ram", 1024)], [REGION])
    devs = {d.name: d for d in view(find((RULE,), whole), whole.devices, BS)}
    assert devs["dax1.0"].size == 1536 * GiB and devs["dax1.0"].blocks_total == 768
    assert devs["dax1.1"].size == 512 * GiB and devs["dax1.1"].resource == 3 * TiB + 1536 * GiB
    assert effective(RULE, devs["dax1.0"]).mode == "system-ram" and effective(RULE, devs["dax1.1"]) is RULE
    assert steps_to_unbind(whole.devices[0]) == ("offline", "to-devdax", "disable")
