"""``nodeagent sim``: simulated nodes from the command line — lay one out, then rehearse node shapes on it.

Every verb but ``create``, ``reset`` and ``presets`` acts on a directory that must carry the simulator's marker
(``.nodeagent-machine/meta.json``): on any other root it is refused with exit 64, so a typo never reaches a real
``/sys``. The verbs change the simulated node the way the kernel (or another agent) would, through the same
emulator the tests use (:mod:`nodeagent_sim`):

- ``create DIR --preset NAME [--devices N --device-size SIZE --block-size SIZE --dram-size SIZE]``: a preset,
  optionally with N generated CXL expanders of SIZE, another memory block size and less DRAM per node (the
  expanders hang off the sockets in turn; NUMA distances are left to the emulator's defaults, so the CXL nodes
  are equidistant from every DRAM node);
- ``hot-add DIR --dax NAME --size SIZE --node N [--host-node N] --mode devdax|kmem [--blocks online|offline]``:
  an expander appears (uevents go to ``nodeagent watch``); ``kmem`` binds it to kmem at once, its blocks as
  ``--blocks`` says or, without it, as ``auto_online_blocks`` says;
- ``hot-add DIR --memdev --size SIZE [--slot ROOT_PORT]``: a bare CXL memdev plugged into an empty root port of the
  node's CXL bus (its endpoint and decoders too, no region);
- ``boot DIR --memhp-default-state offline|online|online_movable``: re-lays the boot-time onlining of the CXL
  devices (bound to kmem, blocks offline or online in that zone);
- ``kdamond DIR --foreign [--operations paddr] [--action stat] [--state on|off]``: another agent's kdamond;
  ``kdamond DIR --module damon_reclaim|damon_lru_sort|damon_stat [--state on|off]``: a DAMON module enabled
  (or disabled), its kdamond running outside DAMON sysfs;
- ``write DIR PATH VALUE``: one write through the emulator; a refusal prints the kernel's errno (exit 1);
- ``fault DIR --write REGEX (--errno NAME | --signal NAME) [--after N] [--times N]``: from now on, writes whose
  path matches REGEX fail with that errno, or get that signal sent to the nodeagent process right before them
  (:mod:`nodeagent_sim.faults`); ``fault DIR --clear`` removes every fault, ``fault DIR`` lists them.

Output follows the CLI's contract (:meth:`nodeagent.cli.main.Ctx.emit`): a line of text, or with ``--format json``
exactly one JSON document on stdout — the verb's own keys, and ``error`` beside them when it then failed.
"""

from __future__ import annotations

import errno as _errno
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from nodeagent.util.errors import ExitCode, UsageError
from nodeagent.util.quantities import parse_size

if TYPE_CHECKING:
    from nodeagent.cli.main import Ctx


@click.group()
def sim() -> None:
    """Simulated nodes: an emulated kernel in a directory, for rehearsals, tests and benchmarks."""


def _size(option: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return parse_size(value)
    except ValueError as exc:
        raise UsageError(f"{option}: {exc}") from None


def _emit(text: str, data: dict[str, Any]) -> None:
    """The verb's one line (text) or its one document (``--format json``, printed by ``main``)."""
    _ctx().emit(text, data)


def _ctx() -> Ctx:
    from nodeagent.cli.main import Ctx

    cx = click.get_current_context()
    obj = cx.find_object(Ctx)
    if obj is None:  # the sim group invoked on its own (click's test runner): print when done
        obj = cx.find_root().obj = Ctx()
        cx.find_root().call_on_close(obj.flush)
    return obj


def _refused(verb: str, exc: OSError, data: dict[str, Any]) -> NoReturn:
    """The emulator refused, as the kernel would: its errno on stderr (and in the document), exit 1."""
    message = f"{verb}: {_errno_text(exc)}"
    click.echo(f"nodeagent: {message}", err=True)
    ctx = _ctx()
    if ctx.fmt == "json":
        ctx.emit("", {**data, "errno": _errno.errorcode.get(exc.errno or 0)})
    ctx.failure = (message, None)
    raise click.exceptions.Exit(ExitCode.ERROR)


def _simulated(directory: str):  # type: ignore[no-untyped-def]
    """The emulated kernel of ``directory``; exit 64 when it is not a simulated node."""
    from . import MARKER, SimKernel

    if not (Path(directory) / MARKER / "meta.json").is_file():
        raise UsageError(f"{directory} is not a simulated node (no {MARKER}/meta.json): refused",
                         hint="make one with `nodeagent sim create DIR --preset NAME`")
    return SimKernel(directory)


@sim.command("create")
@click.argument("directory", type=click.Path(file_okay=False, path_type=str))
@click.option("--preset", required=True, help="Which node to simulate (see `nodeagent sim presets`).")
@click.option("--kernel", metavar="RELEASE", help="Pretend to run this kernel release (e.g. 5.10.0).")
@click.option("--devices", type=click.IntRange(0, 64), help="Replace the preset's DAX devices by N CXL expanders.")
@click.option("--device-size", metavar="SIZE", help="Size of each generated expander (default 64GiB).")
@click.option("--block-size", metavar="SIZE", help="Memory block size (a power of two, ≥ 128MiB).")
@click.option("--dram-size", metavar="SIZE", help="DRAM per node (whole blocks; what the node uses shrinks to fit).")
def sim_create(directory: str, preset: str, kernel: str | None, devices: int | None, device_size: str | None,
               block_size: str | None, dram_size: str | None) -> None:
    """Lay out a simulated node of PRESET in DIRECTORY (empty or absent)."""
    from . import build, get
    from .hotplug import generated

    try:
        p = get(preset)
    except KeyError as exc:
        raise UsageError(f"--preset: {exc.args[0]}") from None
    size, bs, dram = _size("--device-size", device_size), _size("--block-size", block_size), _size("--dram-size",
                                                                                                  dram_size)
    if devices is not None or size is not None or bs is not None or dram is not None:
        try:
            p = generated(p, devices, size, bs, dram)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    try:
        build(p, Path(directory), kernel=kernel)
    except FileExistsError as exc:
        raise UsageError(f"{exc}", hint="give an empty or new directory") from None
    _emit(f"simulated {preset} node at {directory}",
          {"directory": directory, "preset": preset, "kernel": kernel, "devices": devices, "device_size": size,
           "block_size": bs, "dram_size": dram})


@sim.command("reset")
@click.argument("preset")
def sim_reset(preset: str) -> None:
    """Forget the cached simulated node of PRESET (the next --simulate starts from a freshly booted one)."""
    from . import cached_path, remove

    root = cached_path(preset)
    existed = root.exists()
    if existed:
        remove(root)
    _emit(f"removed the cached {preset} node" if existed else f"no cached {preset} node",
          {"preset": preset, "path": str(root), "removed": existed})


@sim.command("presets")
def sim_presets() -> None:
    """List the simulated node presets."""
    from . import PRESETS, get

    rows = [(name, get(name).description) for name in PRESETS]
    _emit("\n".join(f"{name:<22} {description}" for name, description in rows),
          {"presets": [{"name": name, "description": description} for name, description in rows]})


@sim.command("hot-add")
@click.argument("directory", type=click.Path(file_okay=False, path_type=str))
@click.option("--dax", "name", metavar="NAME", help="The new DAX device (daxR.0).")
@click.option("--memdev", is_flag=True,
              help="A bare CXL memdev in an empty root port instead of a DAX device (no region: apply makes it).")
@click.option("--slot", metavar="ROOT_PORT", help="--memdev: the empty root port (default: the first one).")
@click.option("--size", required=True, metavar="SIZE", help="Its capacity (e.g. 64GiB).")
@click.option("--node", type=int, help="--dax: its target node (a possible node).")
@click.option("--host-node", type=int, default=0, show_default=True,
              help="--dax: the node the device hangs off (its host bridge's: numa_node).")
@click.option("--mode", type=click.Choice(["devdax", "kmem"]), help="--dax: how it comes up.")
@click.option("--blocks", type=click.Choice(["online", "offline"]),
              help="kmem only: its blocks online or offline (default: as auto_online_blocks says).")
def sim_hot_add(directory: str, name: str | None, memdev: bool, slot: str | None, size: str, node: int | None,
                host_node: int, mode: str | None, blocks: str | None) -> None:
    """Hot-add a CXL expander to the simulated node in DIRECTORY: a DAX device (--dax) or a bare memdev
    (--memdev)."""
    from . import hotplug

    k = _simulated(directory)
    if memdev:
        if name is not None or node is not None or mode is not None or blocks is not None:
            raise UsageError("--memdev takes --size and --slot only (the region, its node and its mode come "
                             "from the apply)")
        try:
            where = None
            if slot is not None:
                from .cxl import free_slots

                where = next((s for s in free_slots(k) if s[1] == slot), (None, slot))
            events = hotplug.hot_add_memdev(k, _size("--size", size) or 0, slot=where)  # type: ignore[arg-type]
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        _emit(f"hot-added memdev {events[0].sysname} ({size}, endpoint {events[1].sysname}): "
              f"{len(events)} uevent(s)",
              {"directory": directory, "memdev": events[0].sysname, "endpoint": events[1].sysname,
               "size": _size("--size", size), "uevents": _uevent_counts(events)})
        return
    if name is None or node is None or mode is None:
        raise UsageError("hot-add needs --dax NAME --node N --mode devdax|kmem, or --memdev")
    if blocks is not None and mode != "kmem":
        raise UsageError("--blocks goes with --mode kmem (a devdax device has no memory blocks)")
    try:
        d = hotplug.next_dax(k, name, _size("--size", size) or 0, node, host_node)
        events = hotplug.hot_add_dax(k, d, system_ram=mode == "kmem", blocks=blocks)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    _emit(f"hot-added {name} ({size} at {d.start:#x}, node {node}, off node {host_node}) as "
          f"{'system-ram' if mode == 'kmem' else 'devdax'}: {len(events)} uevent(s)",
          {"directory": directory, "dax": name, "size": d.size, "start": d.start, "node": node,
           "host_node": host_node, "mode": mode, "blocks": blocks,
           "uevents": _uevent_counts(events)})


@sim.command("boot")
@click.argument("directory", type=click.Path(file_okay=False, path_type=str))
@click.option("--memhp-default-state", "state", required=True,
              type=click.Choice(["offline", "online", "online_movable"]))
def sim_boot(directory: str, state: str) -> None:
    """Re-lay the boot-time onlining of the CXL memory, as with memhp_default_state=STATE on the command line."""
    from . import hotplug

    data: dict[str, Any] = {"directory": directory, "memhp_default_state": state}
    try:
        bound = hotplug.boot(_simulated(directory), state)
    except OSError as exc:
        _refused("boot", exc, data)
    _emit(f"booted with memhp_default_state={state}: {', '.join(bound) or 'no CXL device'} bound to kmem",
          {**data, "bound": bound})


@sim.command("kdamond")
@click.argument("directory", type=click.Path(file_okay=False, path_type=str))
@click.option("--foreign", is_flag=True, help="Another agent's kdamond, through DAMON sysfs.")
@click.option("--module", type=click.Choice(["damon_reclaim", "damon_lru_sort", "damon_stat"]),
              help="Instead: the kdamond of a DAMON module (--state on enables it, off disables it).")
@click.option("--operations", default="paddr", show_default=True, type=click.Choice(["paddr", "vaddr", "fvaddr"]))
@click.option("--action", default="stat", show_default=True, help="Its one scheme's action.")
@click.option("--state", "run_state", default="on", show_default=True, type=click.Choice(["on", "off"]))
def sim_kdamond(directory: str, foreign: bool, module: str | None, operations: str, action: str,
                run_state: str) -> None:
    """Add a kdamond another agent owns, through the kernel's files (the kernel's rules apply: adding a
    kdamond rewrites nr_kdamonds, which fails while any runs), or enable a DAMON module's (EBUSY while any
    kdamond runs; it shows no directory under /sys/kernel/mm/damon/admin)."""
    from .damon_presets import add_foreign

    if foreign == (module is not None):
        raise UsageError("give --foreign (a sysfs kdamond) or --module NAME (a DAMON module's kdamond)")
    k = _simulated(directory)
    if module is not None:
        _module_kdamond(k, directory, module, run_state == "on")
        return
    data: dict[str, Any] = {"directory": directory, "foreign": True, "operations": operations, "action": action,
                            "state": run_state}
    try:
        index = add_foreign(k, operations=operations, action=action, start=run_state == "on")
    except OSError as exc:
        _refused("kdamond", exc, data)
    _emit(f"kdamond {index}: foreign, {operations}, {action}, {'running' if run_state == 'on' else 'stopped'}",
          {**data, "kdamond": index})


def _module_kdamond(k: Any, directory: str, module: str, on: bool) -> None:
    from .damon_modules import enable

    data: dict[str, Any] = {"directory": directory, "module": module, "state": "on" if on else "off"}
    try:
        pid = enable(k, module, on)
    except OSError as exc:
        _refused(f"kdamond --module {module}", exc, data)
    _emit(f"{module}: " + (f"enabled, kdamond pid {pid} (not under /sys/kernel/mm/damon/admin)" if on else "disabled"),
          {**data, "kdamond_pid": pid})


@sim.command("fill")
@click.argument("directory", type=click.Path(file_okay=False, path_type=str))
@click.option("--node", type=int, required=True, help="The NUMA node.")
@click.option("--free", "free", required=True, metavar="SIZE|PCT",
              help="What is left free: a size (512MiB) or a percentage of the node's memory (3%).")
def sim_fill(directory: str, node: int, free: str) -> None:
    """Use a node's memory until only FREE of it is left (as a workload's pages would fill a CXL node): its
    meminfo, /proc/meminfo and zoneinfo follow."""
    from nodeagent.util.kfmt import parse_meminfo
    from nodeagent.util.quantities import parse_percent, parse_size

    from . import memory

    k = _simulated(directory)
    data: dict[str, Any] = {"directory": directory, "node": node}
    try:
        meminfo = f"/sys/devices/system/node/node{node}/meminfo"
        total = parse_meminfo(k.tree.read(meminfo)).get("MemTotal", 0) * 1024 if k.tree.exists(meminfo) else 0
        want = int(total * parse_percent(free) / 100) if free.strip().endswith("%") else parse_size(free)
    except ValueError as exc:
        raise UsageError(f"--free: {exc}") from None
    try:
        with k.locked():
            total_kb, free_kb = memory.set_free(k, node, want // 1024)
    except OSError as exc:
        _refused("fill", exc, data)
    _emit(f"node{node}: {free_kb * 1024 / 2**30:.1f}GiB of {total_kb * 1024 / 2**30:.1f}GiB free",
          {**data, "mem_total_kb": total_kb, "mem_free_kb": free_kb})


@sim.command("write")
@click.argument("directory", type=click.Path(file_okay=False, path_type=str))
@click.argument("path")
@click.argument("value")
def sim_write(directory: str, path: str, value: str) -> None:
    """Write VALUE to PATH (/sys/..., /proc/...) of the simulated node, as a process on it would."""
    k = _simulated(directory)
    if not path.startswith("/") or ".." in path.split("/"):
        raise UsageError(f"{path}: give an absolute path inside the node (/sys/..., /proc/...)")
    data: dict[str, Any] = {"directory": directory, "path": path, "value": value}
    try:
        k.write(path, value)
    except OSError as exc:
        _refused(f"write {path}", exc, {**data, "written": False})
    _emit(f"{path} = {value}", {**data, "written": True})


@sim.command("fault")
@click.argument("directory", type=click.Path(file_okay=False, path_type=str))
@click.option("--write", "pattern", metavar="REGEX",
              help="Writes whose path (/sys/..., /var/lib/nodeagent/...) this regular expression is found in.")
@click.option("--errno", "errno_name", metavar="NAME", help="Fail those writes with this errno (EBUSY, ENOSPC...).")
@click.option("--signal", "signal_name", metavar="NAME",
              help="Send this signal (TERM, INT, KILL...) to the nodeagent process right before those writes.")
@click.option("--after", type=click.IntRange(0), default=0, show_default=True,
              help="Let this many matching writes through first.")
@click.option("--times", type=click.IntRange(0), default=1, show_default=True,
              help="Fire this many times (0: at every matching write from then on).")
@click.option("--clear", is_flag=True, help="Remove every fault of this node.")
def sim_fault(directory: str, pattern: str | None, errno_name: str | None, signal_name: str | None, after: int,
              times: int, clear: bool) -> None:
    """Inject a fault into the simulated node in DIRECTORY, seen by every process on it (counters included)."""
    from . import faults

    _simulated(directory)
    data: dict[str, Any] = {"directory": directory}
    if clear:
        if pattern or errno_name or signal_name:
            raise UsageError("--clear goes alone: it removes every fault")
        n = faults.clear(directory)
        _emit(f"cleared {n} fault(s)", {**data, "cleared": n, "rules": []})
        return
    if pattern is None:
        if errno_name or signal_name:
            raise UsageError("--errno/--signal need --write REGEX: which writes to fault")
        current = faults.load(directory)
        _emit("\n".join(r.describe() for r in current.rules) or "no faults", {**data, **current.to_dict()})
        return
    if (errno_name is None) == (signal_name is None):
        raise UsageError("give one of --errno NAME and --signal NAME")
    try:
        now = faults.add(directory, faults.Rule(pattern, errno_name, signal_name, after, times))
    except ValueError as exc:
        raise UsageError(f"{exc}") from None
    rule = now.rules[-1]
    _emit(f"fault {len(now.rules)}: {rule.describe()}", {**data, **now.to_dict()})


def _uevent_counts(events: list[Any]) -> list[dict[str, Any]]:
    """The uevents a hot-add emitted, as {action, subsystem, count} in order (one per memory block is too many)."""
    counts: dict[tuple[str, str], int] = {}
    for e in events:
        counts[(e.action, e.subsystem)] = counts.get((e.action, e.subsystem), 0) + 1
    return [{"action": action, "subsystem": subsystem, "count": n} for (action, subsystem), n in counts.items()]


def _errno_text(exc: OSError) -> str:
    name = _errno.errorcode.get(exc.errno or 0, "")
    return f"{name} ({exc.strerror or os.strerror(exc.errno or 0)})" if name else str(exc)
