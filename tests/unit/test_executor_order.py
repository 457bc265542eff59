"""The executor's ordering: a kdamond stop marked ``before_dax`` runs ahead of the first change that takes DAX
memory away or rezones it — a DAX change, and also a CXL region's teardown (a rebuild, a revert) or the onlining
of a new region's DAX device — never after it."""

from __future__ import annotations

from nodeagent.engine.core import _before_dax, rezones
from nodeagent.plan import Change


def ch(kind: str, target: str, op: str = "set", **kw: object) -> Change:
    return Change(kind, target, op, None, None, **kw)  # type: ignore[arg-type]


STOP = ch("damon", "damon.kdamond.0", "delete", before_dax=True)


def test_a_region_teardown_waits_for_the_kdamond_stops() -> None:
    knob = ch("knob", "memory.auto_online_blocks")
    teardown = ch("cxl_region", "region@0x1", "delete")
    create = ch("cxl_region", "region@0x1", "create")
    online = ch("cxl_region", "dax0.0", "online")
    later = ch("damon", "damon.kdamond.1", "create")
    out = _before_dax([knob, teardown, create, online, STOP, later])
    assert out == [knob, STOP, teardown, create, online, later]


def test_a_new_regions_onlining_and_a_dax_change_are_rezoning_a_regions_creation_is_not() -> None:
    create = ch("cxl_region", "region@0x1", "create")
    online = ch("cxl_region", "dax0.0", "online")
    dax = ch("dax", "dax1.0", "reconfigure")
    assert [rezones(c) for c in (create, online, dax, ch("cxl_region", "region@0x2", "revert"),
                                 ch("knob", "kernel.numa_balancing"), STOP)] == [False, True, True, True, False,
                                                                                 False]
    assert _before_dax([create, online, dax, STOP]) == [create, STOP, online, dax]


def test_without_a_rezoning_change_the_order_is_the_kinds() -> None:
    changes = [ch("knob", "a"), ch("cxl_region", "region@0x1", "create"), STOP, ch("damon", "damon.kdamond.1")]
    assert _before_dax(changes) == changes
