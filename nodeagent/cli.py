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
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True,
              help="markdown: a review comment (plan only).")
@click.option("--lock-timeout", type=float, default=60.0, show_default=True, metavar="SECONDS",
              help="How long to wait for another nodeagent run holding the state lock.")
@click.version_option(__version__, prog_name="nodeagent")
@click.pass_context
def cli(cx: click.Context, root: str, simulate: str | None, fmt: str, lock_timeout: float) -> None:
    """Declarative, idempotent configurator for tiered-memory nodes (HBM, DRAM, CXL.mem)."""
    if simulate and root != "/":
        raise UsageError("--simulate and --root are mutually exclusive")
    if fmt == "markdown" and cx.invoked_subcommand != "plan":
        raise UsageError(f"--format markdown is not supported by {cx.invoked_subcommand or 'this command'}",
                         hint="only plan renders Markdown; use --format text or json")
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
    from .facts import snapshot
    from .render.text import facts_text

    snap = snapshot.capture(ctx.host)
    if save:
        try:
            snapshot.save(snap, save)
        except OSError as exc:
            raise UsageError(f"--save {save}: cannot write: {exc.strerror}") from None
    ctx.emit(facts_text(snap.facts), snap.facts.to_dict())


@cli.command()
@profile_arg
@click.option("--detailed-exitcode", is_flag=True, help="Exit 2 when the plan changes something.")
@click.option("--allow-disruptive", is_flag=True, help="Plan disruptive changes instead of refusing them.")
@click.option("--facts", "facts_path", metavar="FILE|DIR",
              help="Plan offline against saved facts (`facts --save`): one file, or every *.json in DIR.")
@click.option("--baseline", metavar="OLD.yaml",
              help="Also plan OLD.yaml; show how PROFILE changes each node's plan (exit 2 when it does).")
@click.pass_obj
def plan(ctx: Ctx, profile: str, detailed_exitcode: bool, allow_disruptive: bool, facts_path: str | None,
         baseline: str | None) -> None:
    """Show what apply would change, and why. Writes nothing.

    With --facts it never touches this machine: it plans against captured facts, with the same planner.
    """
    from .render.text import plan_text

    if facts_path is not None or baseline is not None or ctx.fmt == "markdown":
        _review(ctx, profile, facts_path, baseline, detailed_exitcode, allow_disruptive)
        return
    loaded = _load(profile)
    eng = ctx.engine()
    f = eng.facts()
    p = eng.plan(loaded, allow_disruptive=allow_disruptive, facts=f)
    ctx.emit(plan_text(p), p.to_dict())
    if p.blocked:
        raise click.exceptions.Exit(ExitCode.ERROR)
    if detailed_exitcode and p.changes:
        raise click.exceptions.Exit(ExitCode.CHANGES)


skip_checks_opt = click.option(
    "--skip-checks", "skip_checks", multiple=True, metavar="NAME",
    help="Do not run this preflight check (repeatable; cpu, disk, gpu_pcie, memory_bandwidth, latency, "
         "capacity, coexistence, placement, or all).")


def _checks_failed(report: Any, applying: bool) -> click.exceptions.Exit:
    names = ", ".join(r.name for r in report.failed)
    tail = "; nothing was written" if applying else ""
    click.echo(f"nodeagent: error-severity checks failed: {names}{tail}\n  hint: fix the node as each check says, "
               f"or --skip-checks {report.failed[0].name} to go ahead anyway", err=True)
    return click.exceptions.Exit(ExitCode.CHECK_FAILED)


@cli.command()
@profile_arg
@skip_checks_opt
@click.pass_obj
def check(ctx: Ctx, profile: str, skip_checks: tuple[str, ...]) -> None:
    """Run the profile's preflight checks alone (read-only). Exit 4 when an error-severity check fails."""
    from .checks import parse_skips
    from .render.checks import report_text

    loaded = _load(profile)
    skips = parse_skips(skip_checks)
    eng = ctx.engine()
    report = eng.checks(loaded, eng.facts(), skips)
    ctx.emit(report_text(report), report.to_dict())
    if not report.ok:
        raise _checks_failed(report, applying=False)


def _review(ctx: Ctx, profile: str, facts_path: str | None, baseline: str | None, detailed: bool,
            allow_disruptive: bool) -> None:
    """plan --facts / --baseline / --format markdown: plan against snapshots (saved, or this node's)."""
    from .facts import snapshot
    from .render.review import review_markdown, review_text
    from .review import exit_code, review, to_dict

    if facts_path is not None and (ctx.simulate or ctx.root != "/"):
        raise UsageError("--facts plans offline against saved facts: --root and --simulate do not apply",
                         hint="drop --root/--simulate, or drop --facts to plan against that node")
    loaded = _load(profile)
    old = _load(baseline) if baseline is not None else None
    snaps = snapshot.read_all(facts_path) if facts_path is not None else [snapshot.capture(ctx.host)]
    reviews = review(loaded, snaps, baseline=old, allow_disruptive=allow_disruptive)
    if ctx.fmt == "markdown":
        click.echo(review_markdown(reviews, loaded, old, offline=facts_path is not None), nl=False)
    else:
        ctx.emit(review_text(reviews), to_dict(reviews, loaded, old))
    code = exit_code(reviews, detailed=detailed)
    if code:
        raise click.exceptions.Exit(code)


@cli.command()
@profile_arg
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--dry-run", is_flag=True, help="Print the plan only; write nothing.")
@click.option("--allow-disruptive", is_flag=True, help="Carry out disruptive changes (e.g. offlining memory).")
@skip_checks_opt
@click.option("--device", "devices", multiple=True, metavar="NAME",
              help="Reconcile only what this hot-plugged device affects (dax1.0, memory42, region0; repeatable).")
@click.option("--metrics-textfile", metavar="PATH",
              help="Also write Prometheus metrics to PATH (atomically), for node_exporter's textfile collector.")
@click.pass_obj
def apply(ctx: Ctx, profile: str, yes: bool, dry_run: bool, allow_disruptive: bool,
          skip_checks: tuple[str, ...], devices: tuple[str, ...], metrics_textfile: str | None) -> None:
    """Run the profile's preflight checks, then make the node match the profile, re-read and verify it."""
    from .checks import parse_skips
    from .render.checks import report_text
    from .render.text import plan_text, result_text

    loaded = _load(profile)
    skips = parse_skips(skip_checks)
    eng = ctx.engine()
    interactive = _is_interactive() and ctx.fmt == "text"

    def confirm(p: Any) -> bool:
        if yes or not interactive:
            return True
        click.echo(plan_text(p))
        return click.confirm("Apply these changes?", default=False)

    progress = _TerminalProgress() if ctx.fmt == "text" and sys.stderr.isatty() else None
    try:
        result = eng.apply(loaded, dry_run=dry_run, allow_disruptive=allow_disruptive, confirm=confirm,
                           progress=progress, skip_checks=skips, scope=list(devices) if devices else None)
    finally:
        if progress is not None:
            progress.close()
    text = result_text(result)
    if result.checks is not None and result.checks.results:
        text = report_text(result.checks, applying=not dry_run) + "\n" + text
    ctx.emit(text, result.to_dict())
    if metrics_textfile and not result.dry_run:
        from .cli_ops import write_metrics

        write_metrics(eng, metrics_textfile, loaded=loaded,
                      checks=result.checks.results if result.checks is not None else None)
    if result.checks_failed:
        raise _checks_failed(result.checks, applying=not dry_run)
    if result.plan.blocked and not result.outcomes:
        raise PlanError("nothing was applied: the plan has problems this node cannot carry out (listed above)",
                        hint="fix the profile or the node, then apply again")
    if not result.dry_run and not result.ok:
        raise click.exceptions.Exit(ExitCode.PARTIAL)


class _TerminalProgress:
    """One self-overwriting line on the terminal for long operations (onlining terabytes takes minutes)."""

    def __init__(self) -> None:
        self.open = False

    def __call__(self, what: str, done: int, total: int) -> None:
        pct = 100 * done / total if total else 100
        self.open = done < total
        click.echo(f"\r  {what}: {done}/{total} ({pct:.0f}%)\033[K", err=True, nl=not self.open)

    def close(self) -> None:
        if self.open:
            click.echo("", err=True)
            self.open = False


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
    from .sim import cached_path, remove

    root = cached_path(preset)
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
__import__("nodeagent.cli_metrics").cli_metrics.register(cli)  # the `metrics` group (exporter)


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
    except OSError as exc:  # a file the user named or the node could not be read: say which, no traceback
        if os.environ.get("NODEAGENT_DEBUG"):
            raise
        where = f" {exc.filename}" if exc.filename else ""
        click.echo(f"nodeagent:{where}: {exc.strerror or exc}", err=True)
        return int(ExitCode.ERROR)
    except Exception as exc:  # a bug: one line, and the way to the traceback
        if os.environ.get("NODEAGENT_DEBUG"):
            raise
        click.echo(f"nodeagent: internal error: {type(exc).__name__}: {exc}\n"
                   "  hint: this is a bug in nodeagent; rerun with NODEAGENT_DEBUG=1 for the traceback and report it",
                   err=True)
        return int(ExitCode.ERROR)
