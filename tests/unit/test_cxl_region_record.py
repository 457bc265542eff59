"""The region ownership record's ``building`` (what a creation stopped half-way left, :mod:`nodeagent.kinds.
cxl_region.apply`): absent in a file written before it, written only while a creation is under way, checked
for its shape like every record."""

from __future__ import annotations

import pytest

from nodeagent.state import OwnedRegion, Ownership, ShapeError

OLD = {"members": ["0x4c454f0001"], "serials": [0x4C454F0001], "ways": 1, "granularity": 256, "rule": "each",
       "region": "region0", "root": "decoder0.0", "time": "2026-01-02T03:04:05Z", "dax": ["dax0.0"]}


def test_a_record_written_before_building_existed_reads_and_writes_back_the_same() -> None:
    rec = OwnedRegion.from_json(OLD, "cxl_region.x")
    assert rec.building is None and rec.to_json() == OLD


def test_a_building_record_round_trips() -> None:
    building = {"decoders": ["decoder3.0", "decoder2.0"], "dpa_size": 256 * 1024**2, "pid": 4242}
    rec = OwnedRegion.from_json({**OLD, "dax": [], "building": building}, "cxl_region.x")
    assert rec.building == building
    own = Ownership(regions={"x": rec})
    assert Ownership.from_json(own.to_json()).regions["x"] == rec


@pytest.mark.parametrize(("building", "said"), [
    ("yes", "cxl_region.x.building: expected an object"),
    ({"decoders": "decoder3.0"}, "cxl_region.x.building.decoders: expected a list"),
    ({"decoders": [3]}, "cxl_region.x.building.decoders[0]: expected a string"),
    ({"decoders": [], "pid": "1"}, "cxl_region.x.building.pid: expected an integer"),
])
def test_a_building_of_the_wrong_shape_is_named(building: object, said: str) -> None:
    with pytest.raises(ShapeError, match=said.replace("[", r"\[").replace("]", r"\]")):
        OwnedRegion.from_json({**OLD, "building": building}, "cxl_region.x")
