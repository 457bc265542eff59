"""Issue 51's bad input and edges of a region creation, on qemu-cxl (two 256 MiB memdevs, one 4 GiB window) with
one region interleaving both: the kernel refusing a step (the window too small for the size: ENOSPC; a commit:
EBUSY/ENXIO), a refusal whose undo the kernel refuses too, a memdev gone between the plan and its creation. Each
apply stops with the kernel's reason and what was done, exit 5, a journal line, never a traceback; what is left
is on record as nodeagent's, and the next apply finishes the job (exit 0, the plan after it empty)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from nodeagent_sim import faults

from nodeagent.state import JOURNAL

from .test_converge_property import na

PAIR = ("apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: pair}\nmemory:\n"
        "  auto_online_blocks: offline\n  cxl:\n    regions:\n"
        "      - {name: pair, memdevs: {serials: [0x4c454f0002, 0x4c454f0001]}, ways: 2}\n"
        "  dax:\n    - {name: all, match: {all: true}, mode: system-ram, zone: movable}\n")
REGION = "region@0x4c454f0002+0x4c454f0001"
CXL = "sys/bus/cxl/devices"


@pytest.fixture
def pair(make_node) -> tuple[Path, str]:  # type: ignore[no-untyped-def]
    root = make_node("qemu-cxl")
    profile = root.with_suffix(".yaml")
    profile.write_text(PAIR)
    return root, str(profile)


def _apply(root: Path, profile: str) -> tuple[int, dict]:
    return na(root, "apply", "--yes", "--skip-checks", "all", profile)


def _last_event(root: Path) -> dict:
    return json.loads((root / JOURNAL.lstrip("/")).read_text().splitlines()[-1])


def _region_failure(root: Path, code: int, result: dict, said: str) -> str:
    """The apply stopped at the region: exit 5, partial, the kernel's reason in the outcome and in the journal."""
    assert (code, result.get("status")) == (5, "partial"), result
    failed = [o for o in result["outcomes"] if o["status"] == "failed"]
    assert [o["target"] for o in failed] == [REGION], failed
    assert said in failed[0]["message"] and "Traceback" not in json.dumps(result), failed
    event = _last_event(root)
    assert event["status"] == "partial"
    assert any(c["target"] == REGION and c["status"] == "failed" and said in c["message"] for c in event["changes"])
    return failed[0]["message"]


def _converges(root: Path, profile: str) -> dict:
    code, result = _apply(root, profile)
    assert (code, result.get("status")) == (0, "converged"), result
    pcode, after = na(root, "plan", "--detailed-exitcode", profile)
    assert (pcode, after["changes"]) == (0, []), after["changes"]
    return result


def _left(root: Path) -> tuple[list[str], dict[str, int]]:
    """The regions and the endpoint decoders' DPA the kernel has."""
    base = root / CXL
    regions = sorted(p.name for p in base.iterdir() if p.name.startswith("region"))
    return regions, {d: int((base / d / "dpa_size").read_text(), 16) for d in ("decoder2.0", "decoder3.0")}


def _owned(root: Path) -> dict | None:
    p = root / "var/lib/nodeagent/ownership.json"
    return json.loads(p.read_text()).get("cxl_region", {}).get("0x4c454f0002+0x4c454f0001") if p.exists() else None


@pytest.mark.parametrize(("write", "errno", "said"), [
    # the window has less room than the plan saw (another region took it meanwhile): the kernel's ENOSPC. (A commit
    # refused with EBUSY or ENXIO, and ENODEV from a memdev gone at its dpa_size: tests/sim/test_converge_presets.py)
    (r"region\d+/size$", "ENOSPC", "No space left on device (errno ENOSPC)"),
])
def test_a_step_the_kernel_refuses_is_undone_and_the_next_apply_makes_the_region(
        write: str, errno: str, said: str, pair: tuple[Path, str]) -> None:
    root, profile = pair
    faults.add(root, faults.Rule(write=write, errno=errno))
    code, result = _apply(root, profile)
    msg = _region_failure(root, code, result, said)
    assert "torn down again" in msg, msg
    assert _left(root) == ([], {"decoder2.0": 0, "decoder3.0": 0})
    assert _owned(root) is None  # undone in full: nothing of nodeagent's is left to record
    _converges(root, profile)


def test_an_undo_the_kernel_refuses_leaves_a_record_and_the_next_apply_tears_it_down(pair: tuple[Path, str]) -> None:
    """The commit fails (ENXIO), and so does the undo's first dpa_size=0 (EBUSY): decoder3.0 keeps its DPA outside
    any region. The failure says what is left; the record says nodeagent was building it; the next apply frees it,
    then makes the region."""
    root, profile = pair
    faults.add(root, faults.Rule(write=r"region\d+/commit$", errno="ENXIO"))
    faults.add(root, faults.Rule(write=r"decoder\d+\.0/dpa_size$", errno="EBUSY", after=2))
    code, result = _apply(root, profile)
    msg = _region_failure(root, code, result, "No such device or address (errno ENXIO)")
    assert "undoing it failed at" in msg and "dpa_size" in msg and "the next apply tears it down" in msg, msg
    regions, dpa = _left(root)
    assert regions == [] and dpa["decoder3.0"] == 256 * 1024**2, (regions, dpa)
    rec = _owned(root)
    assert rec is not None and rec["building"]["decoders"] == ["decoder2.0", "decoder3.0"], rec
    faults.clear(root)
    code, plan = na(root, "plan", profile)
    assert [(c["target"], c["op"]) for c in plan["changes"]][:2] == [(REGION, "delete"), (REGION, "create")]
    result = _converges(root, profile)
    assert [o["op"] for o in result["outcomes"] if o["target"] == REGION] == ["delete", "create"]
    assert _owned(root) is not None and "building" not in _owned(root)


def test_a_memdev_gone_between_the_plan_and_the_creation(pair: tuple[Path, str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """mem1 goes away (hot-unplugged, or cxl_pci re-probing it) after the plan, before its region is made: nothing
    is written to the kernel, the apply says which memdev and stops (exit 5); once it is back, the next apply makes
    the region."""
    from nodeagent.kinds.cxl_region import apply as region_apply

    root, profile = pair
    link = root / CXL / "mem1"
    where = os.readlink(link)
    read = region_apply.read_cxl

    def unplugged(host):  # type: ignore[no-untyped-def]
        if link.is_symlink():
            link.unlink()
        return read(host)

    monkeypatch.setattr(region_apply, "read_cxl", unplugged)
    code, result = _apply(root, profile)
    monkeypatch.undo()
    msg = _region_failure(root, code, result, "memdev 0x4c454f0001 is gone since the plan was made")
    assert _left(root) == ([], {"decoder2.0": 0, "decoder3.0": 0}) and _owned(root) is None, msg
    os.symlink(where, link)
    _converges(root, profile)
