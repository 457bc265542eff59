"""The command line: parse options, build the context, call the engine, render. Nothing else lives here.

Imports are lazy on purpose: a systemd timer and Ansible run this on every node of a fleet, so a command
imports only what it needs (``facts`` never loads pydantic; nothing loads ``sh`` unless it runs a command).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from . import __version__
from .errors import ExitCode, NodeagentError, PlanError, UsageError

if TYPE_CHECKING:
    from .engine import Engine
    from .host import Host
    from .profile import LoadedProfile


@dataclass
class Ctx:
    root: str
    simulate: str | None
    fmt: str
    lock_timeout: float
    _host: Host | None = None

    @property
    def host(self) -> Host:
        if self._host is None:
            from .host import open_host

            root = self.root
            if self.simulate:
                from .sim import cached

                try:
                    root = str(cached(self.simulate))
                except KeyError as exc:
                    raise UsageError(f"--simulate: {exc.args[0]}") from None
            self._host = open_host(root)
        return self._host

    def engine(self) -> Engine:
        from .engine import Engine

        return Engine(self.host, lock_timeout=self.lock_timeout)

    def emit(self, text: str, data: Any) -> None:
        if self.fmt == "json":
            click.echo(json.dumps(data, indent=2, default=str))
        else:
            click.echo(text)


def _load(path: str) -> LoadedProfile:
    from .profile import load_profile

    return load_profile(path)


def _is_interactive() -> bool:
    """Ask for confirmation only on a terminal: never under systemd, Ansible or a pipe."""
    return sys.stdin.isatty() and sys.stdout.isatty()


profile_arg = click.argument("profile", type=click.Path(dir_okay=True, path_type=str))


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("--root", default="/", show_default=True, metavar="DIR",
              help="Root under which /sys, /proc, /etc and /var/lib/nodeagent are found.")
@click.option("--simulate", metavar="PRESET",
              help="Use a simulated node of this preset (created or reused under the cache directory).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--lock-timeout", type=float, default=60.0, show_default=True, metavar="SECONDS",
              help="How long to wait for another nodeagent run holding the state lock.")
@click.version_option(__version__, prog_name="nodeagent")
@click.pass_context
def cli(cx: click.Context, root: str, simulate: str | None, fmt: str, lock_timeout: float) -> None:
    """Declarative, idempotent configurator for tiered-memory nodes (HBM, DRAM, CXL.mem)."""
    if simulate and root != "/":
        raise UsageError("--simulate and --root are mutually exclusive")
    cx.obj = Ctx(root, simulate, fmt, lock_timeout)


@cli.command()
@profile_arg
@click.pass_obj
def validate(ctx: Ctx, profile: str) -> None:
    """Check a profile against the schema (after merging what it extends)."""
    loaded = _load(profile)
    ctx.emit(f"{profile}: valid profile {loaded.name!r}", {"valid": True, "profile": loaded.name,
                                                           "digest": loaded.digest})


@cli.command()
@click.option("--save", "save", type=click.Path(dir_okay=False, writable=True), metavar="FILE",
              help="Also write the facts as JSON to FILE (for offline planning).")
@click.pass_obj
def facts(ctx: Ctx, save: str | None) -> None:
    """Show what the node looks like now. Read-only: never writes to the node."""
    from .facts import gather
    from .render.text import facts_text

    f = gather(ctx.host)
    if save:
        Path(save).write_text(f.to_json() + "\n")
    ctx.emit(facts_text(f), f.to_dict())


@cli.command()
@profile_arg
@click.option("--detailed-exitcode", is_flag=True, help="Exit 2 when the plan changes something.")
@click.option("--allow-disruptive", is_flag=True, help="Plan disruptive changes instead of refusing them.")
@click.pass_obj
def plan(ctx: Ctx, profile: str, detailed_exitcode: bool, allow_disruptive: bool) -> None:
    """Show what apply would change, and why. Writes nothing."""
    from .render.text import plan_text

    loaded = _load(profile)
    eng = ctx.engine()
    f = eng.facts()
    p = eng.plan(loaded, allow_disruptive=allow_disruptive, facts=f)
    ctx.emit(plan_text(p), p.to_dict())
    if p.blocked:
        raise click.exceptions.Exit(ExitCode.ERROR)
    if detailed_exitcode and p.changes:
        raise click.exceptions.Exit(ExitCode.CHANGES)


@cli.command()
@profile_arg
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--dry-run", is_flag=True, help="Print the plan only; write nothing.")
@click.option("--allow-disruptive", is_flag=True, help="Carry out disruptive changes (e.g. offlining memory).")
@click.option("--device", "devices", multiple=True, metavar="NAME",
              help="Reconcile only what this hot-plugged device affects (dax1.0, memory42, region0; repeatable).")
@click.option("--metrics-textfile", metavar="PATH",
              help="Also write Prometheus metrics to PATH (atomically), for node_exporter's textfile collector.")
@click.pass_obj
def apply(ctx: Ctx, profile: str, yes: bool, dry_run: bool, allow_disruptive: bool, devices: tuple[str, ...],
          metrics_textfile: str | None) -> None:
    """Make the node match the profile, then re-read and verify it."""
    from .render.text import plan_text, result_text

    loaded = _load(profile)
    eng = ctx.engine()
    interactive = _is_interactive() and ctx.fmt == "text"

    def confirm(p: Any) -> bool:
        if yes or not interactive:
            return True
        click.echo(plan_text(p))
        return click.confirm("Apply these changes?", default=False)

    result = eng.apply(loaded, dry_run=dry_run, allow_disruptive=allow_disruptive, confirm=confirm,
                       scope=list(devices) if devices else None)
    ctx.emit(result_text(result), result.to_dict())
    if metrics_textfile and not result.dry_run:
        from .cli_ops import write_metrics

        write_metrics(eng, metrics_textfile, loaded=loaded,
                      checks=getattr(getattr(result, "checks", None), "results", None))
    if result.plan.blocked and not result.outcomes:
        raise PlanError("nothing was applied: the plan has problems this node cannot carry out (listed above)",
                        hint="fix the profile or the node, then apply again")
    if not result.dry_run and not result.ok:
        raise click.exceptions.Exit(ExitCode.PARTIAL)


@cli.command()
def schema() -> None:
    """Print the profile's JSON Schema."""
    from .profile import schema as profile_schema

    click.echo(json.dumps(profile_schema(), indent=2))


@cli.group()
def sim() -> None:
    """Simulated nodes: an emulated kernel in a directory, for rehearsals, tests and benchmarks."""


@sim.command("create")
@click.argument("directory", type=click.Path(file_okay=False, path_type=str))
@click.option("--preset", required=True, help="Which node to simulate (see `nodeagent sim presets`).")
@click.option("--kernel", metavar="RELEASE", help="Pretend to run this kernel release (e.g. 5.10.0).")
def sim_create(directory: str, preset: str, kernel: str | None) -> None:
    """Lay out a simulated node of PRESET in DIRECTORY (empty or absent)."""
    from .sim import create

    try:
        create(Path(directory), preset, kernel=kernel)
    except KeyError as exc:
        raise UsageError(f"--preset: {exc.args[0]}") from None
    except FileExistsError as exc:
        raise UsageError(f"{exc}", hint="give an empty or new directory") from None
    click.echo(f"simulated {preset} node at {directory}")


@sim.command("reset")
@click.argument("preset")
def sim_reset(preset: str) -> None:
    """Forget the cached simulated node of PRESET (the next --simulate starts from a freshly booted one)."""
    from .sim import cache_dir, remove

    root = cache_dir() / "sim" / preset
    if root.exists():
        remove(root)
        click.echo(f"removed the cached {preset} node")
    else:
        click.echo(f"no cached {preset} node")


@sim.command("presets")
def sim_presets() -> None:
    """List the simulated node presets."""
    from .sim import PRESETS, get

    for name in PRESETS:
        click.echo(f"{name:<22} {get(name).description}")


from . import cli_ops as _cli_ops  # noqa: E402  (drift, history, status, revert, units, watch)

_cli_ops.register(cli)


def _error_exit(exc: NodeagentError, fmt: str) -> int:
    if fmt == "json":
        click.echo(json.dumps({"error": exc.message, "hint": exc.hint, "exit_code": int(exc.exit_code)}))
    click.echo(f"nodeagent: {exc.render()}", err=True)
    return int(exc.exit_code)


def main(argv: list[str] | None = None) -> int:
    """Entry point. Exceptions map to exit codes here and nowhere else."""
    args = sys.argv[1:] if argv is None else argv
    fmt = "json" if "--format=json" in args or ("--format" in args and "json" in args) else "text"
    try:
        rv = cli.main(args=args, prog_name="nodeagent", standalone_mode=False)
        return rv if isinstance(rv, int) else 0  # click returns ctx.exit()'s code when not standalone
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("nodeagent: aborted", err=True)
        return int(ExitCode.ERROR)
    except click.exceptions.ClickException as exc:  # usage errors: remap click's 2 to 64
        exc.show()
        return int(ExitCode.USAGE)
    except NodeagentError as exc:
        return _error_exit(exc, fmt)
    except KeyboardInterrupt:
        click.echo("nodeagent: interrupted", err=True)
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return int(ExitCode.ERROR)
