"""``nodeagent render serving`` and ``nodeagent verify-serving``: the serving engine's host KV pool.

Registered on the main group by :mod:`nodeagent.cli.main` with one line; imports are lazy like the rest of the CLI.
Which profile (first match wins): PROFILE as given; the profile last applied to the node; the node's standard
profile (:mod:`nodeagent.profile.locate`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ..util.errors import ExitCode, UsageError

if TYPE_CHECKING:
    from ..serving.plan import ServingPlan
    from .main import Ctx


def _loaded(ctx: Ctx, given: str | None, command: str) -> Any:
    from .main import _load

    if given is not None:
        return _load(given)
    last = ctx.engine().state.last_applied()
    if last.desired and not last.fully_reverted:
        from ..drift import desired_profile

        return desired_profile(last)
    from ..profile.locate import node_profile

    return _load(node_profile(ctx.host, command))


def build_plan(ctx: Ctx, engine: str, profile: str | None, ranks: int | None, command: str,
               credit: dict[int, int] | None = None, version: str | None = None) -> ServingPlan:
    """The plan from the node's facts; ``credit``: bytes per node counted as free (verify-serving: the engine's
    own memory, so that the plan is the one rendered before the engine took it)."""
    from ..checks.capacity import workload
    from ..facts import gather
    from ..facts.hardware import LiveHardware
    from ..host.numabind import probe
    from ..kinds.projection import project
    from ..serving.plan import plan
    from ..serving.versions import resolve
    from ..util.vocab import DTYPE_BYTES

    release = resolve(engine, version)  # a usage error before anything is read
    host = ctx.host
    loaded = _loaded(ctx, profile, command)
    facts = gather(host)
    if credit:
        from dataclasses import replace

        facts = replace(facts, nodes=[replace(n, mem_free=min(n.mem_free + credit.get(n.id, 0), n.mem_total))
                                      for n in facts.nodes])
    proj = project(loaded, facts)
    hw = LiveHardware(host)
    gpus = [(d.address, d.numa_node) for d in sorted(hw.pci(), key=lambda d: d.address) if d.kind == "gpu"]
    checks = getattr(loaded.profile, "checks", None)
    spec = getattr(checks, "capacity", None) if checks is not None else None
    wl = hbm = weights = None
    offload = 0
    if spec is not None:
        wl = workload(spec)
        weights = int(spec.model.params * DTYPE_BYTES[spec.model.dtype])
        offload = int(spec.dram_offload or 0)
        if spec.gpu_memory is not None:
            hbm = int(spec.gpu_memory)
        else:
            try:
                mem = hw.gpu_memory()
            except Exception:  # noqa: BLE001 (no figure: the pool is sized by the nodes alone)
                mem = None
            hbm = mem.total_bytes if mem is not None else None
    name = str(getattr(loaded, "path", "") or getattr(loaded, "name", ""))
    return plan(engine, facts, proj, gpus, wl, hbm, lambda nodes: probe(host, nodes), ranks=ranks,
                weights_file=weights, dram_offload=offload, profile=name, hugetlb=_hugetlb(host), version=release)


def _hugetlb(host: Any) -> int:
    """Bytes reserved as HugePages: /proc/meminfo's ``Hugetlb`` (every page size, 4.16+), else the default size's
    ``HugePages_Total`` x ``Hugepagesize``."""
    from ..util.kfmt import parse_meminfo

    info = parse_meminfo(host.read_opt("/proc/meminfo") or "")
    if "Hugetlb" in info:
        return info["Hugetlb"] * 1024
    return info.get("HugePages_Total", 0) * info.get("Hugepagesize", 0) * 1024


@click.group("render")
def render() -> None:
    """Render settings for the software that runs on the node (read-only)."""


@render.command("serving")
@click.option("--engine", type=click.Choice(["vllm", "sglang", "lmcache"]), required=True,
              help="The serving engine whose host KV pool to render.")
@click.option("--ranks", type=click.IntRange(min=1), metavar="N",
              help="Tensor × pipeline parallel ranks (default: one per GPU).")
@click.option("--version", "version", metavar="X",
              help="The engine release to render the options for (default: the newest pinned one: vLLM 0.27, "
                   "SGLang 0.5.12, LMCache 0.4.5).")
@click.argument("profile", required=False, type=click.Path(dir_okay=True, path_type=str))
@click.pass_obj
def serving(ctx: Ctx, engine: str, ranks: int | None, version: str | None, profile: str | None) -> None:
    """The engine's host KV-pool settings: size per rank, the NUMA node(s) it binds to, the launch wrapper."""
    from ..serving.plan import text

    p = build_plan(ctx, engine, profile, ranks, "render serving", version=version)
    ctx.emit(text(p), p.to_dict())


@click.command("verify-serving")
@click.option("--unit", metavar="NAME", help="A systemd unit (its cgroup's memory.numa_stat).")
@click.option("--cgroup", "cgroup", metavar="PATH", help="A cgroup, relative to the cgroup v2 mount.")
@click.option("--pid", type=int, metavar="PID", help="One process (/proc/PID/numa_maps, read once: see its cost).")
@click.option("--engine", type=click.Choice(["vllm", "sglang", "lmcache"]), default="vllm", show_default=True,
              help="The engine the plan was rendered for (its pool size).")
@click.option("--ranks", type=click.IntRange(min=1), metavar="N", help="As given to render serving.")
@click.option("--version", "version", metavar="X", help="As given to render serving.")
@click.argument("profile", required=False, type=click.Path(dir_okay=True, path_type=str))
@click.pass_obj
def verify_serving(ctx: Ctx, unit: str | None, cgroup: str | None, pid: int | None, engine: str,
                   ranks: int | None, version: str | None, profile: str | None) -> None:
    """Where the engine's memory is, per node and tier, against the pool plan. Exit 0: on plan; 3: not."""
    from ..serving.verify import cgroup_path, from_cgroup, from_pid, text, unit_cgroup

    given = [x for x in (unit, cgroup, pid) if x is not None]
    if len(given) != 1:
        raise UsageError("verify-serving: give exactly one of --unit NAME, --cgroup PATH, --pid PID")
    from ..facts import gather

    facts = gather(ctx.host)

    def planner(credit: dict[int, int]) -> tuple[tuple[int, ...], int, tuple[str, ...]]:
        p = build_plan(ctx, engine, profile, ranks, "verify-serving", credit, version)
        return p.pool_nodes, p.total, tuple(m.path for m in p.maru) if p.pool == "maru" else ()

    if pid is not None:
        rep = from_pid(ctx.host, facts, pid, planner)
    else:
        where = unit_cgroup(ctx.host, unit) if unit is not None else cgroup_path(ctx.host, cgroup or "")
        rep = from_cgroup(ctx.host, facts, where, planner)
    ctx.emit(text(rep), rep.to_dict())
    if not rep.ok:
        ctx.failure = ("the engine's memory is not where the plan puts it", None)
        raise click.exceptions.Exit(ExitCode.DRIFT)


def register(cli: click.Group) -> None:
    cli.add_command(render)
    cli.add_command(verify_serving)
