"""Issue 51's literal real-kernel shape: ONE bare 256 MiB memdev, the guest's SRAT nodes 0-2 below the window's node.

Layout ``cxl-1md`` (``harness.LAYOUTS``): node 0 with the CPUs, node 1 CPU-less DRAM, node 2 an SRAT node whose memory
is all legacy pmem (offline, possible), and one CXL window over the memdev's host bridge, which ``acpi_parse_cfmws``
gives the node past SRAT's: 3. Node 2 is the lowest id with no memory online, so a plan that guessed "the next free
node" paired DAMON with node 2 while the kernel put the region on node 3 (the apply ended "partial", exit 5).

The boot (one, ~2.5 min) is not in ``make test``: ``make realkernel-extra`` runs it (``NODEAGENT_RK_EXTRA=1``). It
applies the shipped profile once (demotion capped for TCG, as ``test_cxl_regions.tcg_profile`` says why): exit 0,
the region on node 3 as the plan named it, DAMON's demotion toward node 3, the next plan empty. With
``NODEAGENT_RK_CAPTURE=1`` it rewrites ``captured/cxl-1md-*``; the captures are replayed on the simulator's
``qemu-cxl-1md`` preset without QEMU (in ``make test``): the same bus, nodes and applied state.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import harness
import pytest
from test_cxl_regions import APPLY, _capture, _damon_pairing, _merged, _ok, _state_of, tcg_profile
from worlds import (
    CXL_LAYOUT,
    CXL_MODULES_2HB,
    Agent,
    Dump,
    Outcome,
    assert_same,
    cxl_shape,
    cxl_sim_root,
    dump_summary,
    run_guest,
    run_sim,
)

from nodeagent.facts.cxl import from_dict

PREFIX = "cxl-1md"
PRESET = "qemu-cxl-1md"
#: the window over the memdev's host bridge and the node acpi_parse_cfmws gave it (past SRAT's 0-2)
WINDOW, NODE = "decoder0.0", 3


def steps(profile: Path) -> list[Any]:
    return [
        CXL_MODULES_2HB,  # waits for the endpoint's decoders (any one is enough here)
        CXL_LAYOUT,
        Agent("facts-bare", "facts"),
        Agent("plan-bare", f"plan {profile}"),
        Agent("apply", APPLY.format(profile=profile)),
        Agent("plan-again", f"plan {profile}"),
        Agent("facts-applied", "facts"),
        Dump("dump-applied"),
    ]


@pytest.fixture(scope="module")
def one_memdev(cxl_guest: harness.Guest, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    if os.environ.get("NODEAGENT_RK_EXTRA") != "1":
        pytest.skip("realkernel: the one-memdev boot runs in `make realkernel-extra` (NODEAGENT_RK_EXTRA=1)")
    guest = cxl_guest
    tmp = tmp_path_factory.mktemp("cxl1md")
    where = Path(tempfile.mkdtemp(prefix="cxl1md-profile.", dir=guest.assets.cache_dir))
    try:
        profile = tcg_profile(where)
        real, res = run_guest(guest, steps(profile), label=PREFIX, layout=PREFIX, timeout=600)
        assert real["cxl-layout"].rc == 0, real["cxl-layout"].stderr
        _capture(real, PREFIX)
        root = cxl_sim_root(tmp, "1md", PRESET)
        try:
            sim = run_sim(root, steps(profile))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    finally:
        shutil.rmtree(where, ignore_errors=True)
    took = ", ".join(f"{k} {s.seconds:.1f}s" for k, s in res.steps.items() if s.seconds and s.seconds >= 1)
    print(f"\n[realkernel] cxl one memdev: {res.guest.wall_seconds:.1f}s wall ({took})")
    return real, sim


@pytest.mark.realkernel
def test_one_bare_memdev_converges_in_one_apply_on_its_windows_node(one_memdev) -> None:  # type: ignore[no-untyped-def]
    real = one_memdev[0]
    bare = real["facts-bare"].doc()
    cxl = from_dict(bare["sections"]["cxl"])
    assert not cxl.regions and [m.serial for m in cxl.memdevs] == [harness.CXL_1MD_SERIAL]
    assert bare["possible_nodes"] == [0, 1, 2, 3]  # SRAT's 0-2, then the window's
    online = sorted(n["id"] for n in bare["nodes"] if n["mem_total"] > 0)
    assert online == [0, 1]  # node 2 (SRAT, all legacy pmem) is the lowest id without memory
    (planned,) = (c for c in _ok(real["plan-bare"], "plan")["changes"] if c["target"].startswith("region@"))
    assert planned["nodes"] == [NODE] and f"in {WINDOW} (node {NODE})" in planned["after_label"], planned
    applied = _ok(real["apply"], "apply")
    assert (real["apply"].rc, applied["status"]) == (0, "converged"), json.dumps(applied, indent=1)[-4000:]
    assert _ok(real["plan-again"], "second plan")["changes"] == []
    facts = real["facts-applied"].doc()
    state = _state_of(facts)
    assert state == {(harness.CXL_1MD_SERIAL,): {"ways": 1, "committed": True, "size": 256 << 20,
                                                 "dax": [("system-ram", {"Movable": 2}, NODE, True)]}}
    (region,) = from_dict(facts["sections"]["cxl"]).regions
    assert region.root_decoder == WINDOW
    dax = [(d["resource"], d["resource"] + d["size"]) for d in facts["sections"]["dax"]["devices"]]
    pairs = _damon_pairing(facts)
    assert sorted(nid for action, _, nid in pairs if action == "migrate_cold") == [NODE, NODE], pairs
    assert [(r, nid) for action, r, nid in pairs if action == "migrate_hot"] == [(_merged(dax), 0)], pairs


@pytest.mark.realkernel
@pytest.mark.parametrize("step", ["plan", "apply", "plan-again", "facts", "dump"])
def test_one_bare_memdev_the_simulator_does_the_same(one_memdev, step: str) -> None:  # type: ignore[no-untyped-def]
    real, sim = one_memdev

    def shape(o: Outcome) -> list[tuple[str, ...]]:
        doc = o.doc()
        if "outcomes" in doc:
            return [(x["kind"], x["target"], x["status"]) for x in doc["outcomes"]]
        return [(c["kind"], c["target"], c["op"], str(c.get("after_label") or c["after"])) for c in doc["changes"]]

    if step in ("plan", "plan-again", "apply"):
        name = "plan-bare" if step == "plan" else step
        assert_same(f"the {step} (one memdev)", shape(real[name]), shape(sim[name]))
    elif step == "facts":
        assert_same("the facts after apply (one memdev)", cxl_shape(real["facts-applied"].doc()),
                    cxl_shape(sim["facts-applied"].doc()))
    else:
        assert_same("the state dump after apply (one memdev)", dump_summary(real["dump-applied"]),
                    dump_summary(sim["dump-applied"]))


def test_the_captured_one_memdev_guest_is_the_simulators(tmp_path: Path) -> None:
    """The captured guest (bare, and after the shipped profile's one apply) against ``qemu-cxl-1md``: the bus, the
    possible nodes, and after the apply the region, its DAX device on node 3 and DAMON's pairing toward it. Runs
    without QEMU; ``NODEAGENT_RK_CAPTURE=1 make realkernel-extra`` rewrites the captures."""
    captured = {s: harness.CAPTURED_DIR / f"{PREFIX}-{s}.json" for s in ("facts-bare", "facts-applied")}
    missing = [str(p) for p in captured.values() if not p.exists()]
    if missing:
        pytest.skip(f"no capture {missing} (NODEAGENT_RK_CAPTURE=1 make realkernel-extra)")
    docs = {s: json.loads(p.read_text()) for s, p in captured.items()}
    profile = tcg_profile(Path(tempfile.mkdtemp(prefix="cxl-profile.", dir=tmp_path)))
    root = cxl_sim_root(tmp_path, f"{PREFIX}-replay", PRESET)
    try:
        sim = run_sim(root, [Agent("facts-bare", "facts"), Agent("apply", APPLY.format(profile=profile)),
                             Agent("plan-again", f"plan {profile}"), Agent("facts-applied", "facts")])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert (sim["apply"].rc, sim["apply"].doc()["status"]) == (0, "converged")
    assert sim["plan-again"].doc()["changes"] == []
    for step, doc in docs.items():
        assert_same(f"the captured facts of {PREFIX} ({step})", cxl_shape(doc), cxl_shape(sim[step].doc()))
    assert_same("DAMON's pairing after the apply", _damon_pairing(docs["facts-applied"]),
                _damon_pairing(sim["facts-applied"].doc()))
