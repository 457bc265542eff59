"""The one DAMON model (nodeagent/kinds/damon/model.py) in both directions: the tree the plan builds from a
profile is the tree its own files read back into, and the tree the facts read back from the (simulated) kernel
after apply, on every kernel generation the simulator emulates."""

from __future__ import annotations

from pathlib import Path

import pytest
from nodeagent_sim import SimKernel
from nodeagent_sim import dax as simdax

from nodeagent.cli.main import main
from nodeagent.facts import gather
from nodeagent.facts.damon import from_facts
from nodeagent.host import open_host
from nodeagent.kinds.damon import model
from nodeagent.kinds.damon.kind import build_specs
from nodeagent.profile import load_profile

PROFILE = Path(__file__).resolve().parents[2] / "profiles" / "cxl-inference.yaml"
RICH = """\
apiVersion: nodeagent/v1
kind: NodeProfile
metadata: {name: model}
memory:
  auto_online_blocks: offline
  dax:
    - {name: all, match: {all: true}, mode: system-ram, zone: movable}
damon:
  kdamonds:
    - name: rich
      monitoring: {sample: 5ms, aggregate: 100ms, update: 1s}
      targets: [{node: fast}]
      schemes:
        - action: migrate_cold
          target_node: slow
          access: {size: {min: 4KiB}, nr_accesses: {max: 10%}, age: {min: 1s}}
          quota: {time: 10ms, size: 256MiB, reset_interval: 1s, weights: {size: 1, nr_accesses: 2, age: 3},
                  goals: [{metric: user_input, target: 5, current: 2}]}
          watermarks: {metric: free_mem_rate, interval: 1s, high: 500, mid: 400, low: 50}
          filters: [{type: young, matching: true}, {type: addr, range: {start: 0, end: 4096}}, {type: anon}]
          apply_interval: 1s
        - action: stat
"""


@pytest.mark.parametrize("kernel", ["6.12.0", "6.18.0", "7.0.0", "7.1.0"])
def test_a_built_tree_is_what_its_files_read_back(make_node, tmp_path, kernel) -> None:
    p = tmp_path / "p.yaml"
    p.write_text(RICH)
    root = make_node("qemu-3node", kernel=kernel)
    specs, chk, _ = build_specs(load_profile(p), gather(open_host(root)))
    assert specs and not chk.problems, chk.problems
    for spec in specs:
        assert model.parse(spec.config) == spec.tree
        assert list(spec.writes) == spec.tree.files()


@pytest.mark.parametrize("preset, kernel, rich", [("qemu-3node", "6.12.0", True), ("qemu-3node", "6.18.0", True),
                                                  ("qemu-3node", "7.1.0", True), ("h100-cxl", None, False)])
def test_the_kernel_shows_the_tree_that_was_written(make_node, tmp_path, capsys, preset, kernel, rich) -> None:
    root = make_node(preset, kernel=kernel)
    path = PROFILE
    if rich:
        path = tmp_path / "p.yaml"
        path.write_text(RICH)
    else:
        k = SimKernel(root)
        with k.locked():
            for d in ("dax0.0", "dax1.0"):
                simdax.to_system_ram(k, d, "Movable")
    assert main(["--root", str(root), "apply", "--yes", str(path)]) == 0, capsys.readouterr()
    facts = gather(open_host(root))
    specs, _, _ = build_specs(load_profile(path), facts)
    running = [kd for kd in from_facts(facts).kdamonds if kd.running]
    assert len(running) == len(specs) >= 1
    for spec, kd in zip(specs, running, strict=True):
        # the files the desired tree sets, as the kernel shows them now, read into the model: the same tree
        assert model.parse({f: kd.config[f] for f, _ in spec.writes}) == spec.tree
        assert kd.tree.actions == spec.tree.actions and kd.tree.regions() == spec.tree.regions()
        assert kd.tree.context is not None and kd.tree.context.schemes[0].stats is not None  # read back too


NEWEST = RICH.replace("goals: [{metric: user_input, target: 5, current: 2}]}",
                      "goals: [{metric: active_mem_bp, target: 50%}], goal_tuner: temporal}\n"
                      "          max_snapshots: 1000")


@pytest.mark.parametrize("kernel, missing", [
    ("6.19.0", ["quota goal metric active_mem_bp needs kernel 7.0", "quota.goal_tuner needs kernel 7.1",
                "max_snapshots needs kernel 7.0"]),
    ("7.0.0", ["quota.goal_tuner needs kernel 7.1"]),
    ("7.1.0", [])])
def test_the_newest_goal_features_are_judged_by_what_the_kernel_has(make_node, tmp_path, kernel, missing) -> None:
    p = tmp_path / "p.yaml"
    p.write_text(NEWEST)
    root = make_node("qemu-3node", kernel=kernel)
    specs, chk, _ = build_specs(load_profile(p), gather(open_host(root)))
    found = [m for _, m, _ in chk.problems]
    assert len(found) == len(missing) and all(any(w in m for m in found) for w in missing), found
    if not missing:
        scheme = specs[0].config
        assert scheme["contexts/0/schemes/0/quotas/goal_tuner"] == "temporal"
        assert scheme["contexts/0/schemes/0/stats/max_nr_snapshots"] == "1000"
        assert scheme["contexts/0/schemes/1/quotas/goal_tuner"] == "consist"  # every writable file: the default
        assert scheme["contexts/0/schemes/0/quotas/goals/0/target_metric"] == "active_mem_bp"


@pytest.mark.parametrize("kernels, message", [
    ("{since: 6.16}", 'expected a kernel release in quotes such as "6.16", got 6.16'),
    ('{since: "6.16", before: "6.10"}', "expected since < before, got since 6.16, before 6.10"),
    ("{}", "give `since`, `before` or both"),
])
def test_a_kdamonds_kernels_are_quoted_releases_in_order(tmp_path, kernels, message) -> None:
    from nodeagent.util.errors import NodeagentError

    p = tmp_path / "p.yaml"
    p.write_text(RICH.replace("    - name: rich\n", f"    - name: rich\n      kernels: {kernels}\n"))
    with pytest.raises(NodeagentError) as exc:
        load_profile(p)
    text = exc.value.render()
    assert message in text and f"{p}:" in text and "kernels" in text, text
