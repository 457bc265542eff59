"""Day-2 commands: drift, history, status, revert, units, watch. Registered on the main group by
:mod:`nodeagent.cli.main`; like it, they parse options, call one function and render — imports are lazy."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from ..util.errors import ExitCode, NeedsRootError, PlanError
from ..util.escape import escape_controls

if TYPE_CHECKING:
    from .main import Ctx


def register(cli: click.Group) -> None:
    cli.add_command(drift)
    cli.add_command(guard)
    cli.add_command(history)
    cli.add_command(status)
    cli.add_command(revert)
    cli.add_command(units)
    cli.add_command(watch)


metrics_opt = click.option("--metrics-textfile", metavar="PATH",
                           help="Also write Prometheus metrics to PATH (atomically), for node_exporter's "
                                "textfile collector.")


@click.command()
@click.argument("profile", required=False, type=click.Path(dir_okay=True, path_type=str))
@click.option("--record", is_flag=True, help="Keep drift in the history journal (and when it was first seen).")
@click.option("--verbose", "-v", is_flag=True,
              help="Print every advisory of the profile in full, also those already shown for this profile and "
                   "kernel.")
@metrics_opt
@click.pass_obj
def drift(ctx: Ctx, profile: str | None, record: bool, verbose: bool, metrics_textfile: str | None) -> None:
    """Compare the node with the last applied profile (or PROFILE). Exit 0: converged, 3: drift, 5: part of the
    profile cannot be done on this node.

    \b
    Examples:
      nodeagent drift
      nodeagent drift --record --metrics-textfile /var/lib/node_exporter/textfile/nodeagent.prom
    """
    from ..drift import detect, detect_and_record
    from ..render.ops_text import drift_text
    from .main import _load

    loaded = _load(profile) if profile else None
    eng = ctx.engine()

    def noted(report: Any) -> Any:
        if loaded is not None:
            return report
        from dataclasses import replace

        from ..profile.locate import changed_since_applied

        note = changed_since_applied(eng.state.last_applied().to_json())
        return replace(report, notes=(note, *report.notes)) if note else report

    # --record measures under the lock it records under: an apply cannot slip in between (stale drift)
    report = detect_and_record(eng, loaded, amend=noted) if record else noted(detect(eng, loaded))
    if metrics_textfile:
        from ..metrics.node_textfile import write_metrics

        write_metrics(eng, metrics_textfile, loaded=loaded, drift=report)
    person = ctx.fmt != "json"
    shown = eng.advisories_shown(report.profile, report.profile_digest, report.advisories) \
        if person and not verbose else frozenset()
    ctx.emit(drift_text(report, verbose=verbose, shown=shown), report.to_dict())
    if record and person:  # the timer's writing run keeps which advisories it said; plain drift only reads
        eng.remember_advisories(report.profile, report.profile_digest, report.advisories)
    if report.cannot_be_done:  # apply would be partial: 5 wins over 3
        raise click.exceptions.Exit(ExitCode.PARTIAL)
    if not report.converged:
        raise click.exceptions.Exit(ExitCode.DRIFT)


@click.command()
@click.option("--resource", metavar="KIND", help="Only events about this resource kind (knob, dax, damon...).")
@click.option("--target", metavar="NAME", help="Only events about this setting or device.")
@click.option("--event", type=click.Choice(["apply", "drift", "cannot-be-done", "resolved", "revert", "hotplug"]),
              help="Only this kind of event.")
@click.option("--since", metavar="WHEN", help="Only events since WHEN: 30m, 2h, 7d, or an ISO time.")
@click.option("--limit", type=click.IntRange(min=1), metavar="N", help="Only the newest N events.")
@click.pass_obj
def history(ctx: Ctx, resource: str | None, target: str | None, event: str | None, since: str | None,
            limit: int | None) -> None:
    """Show what nodeagent applied and what drift it saw, oldest first. Read-only.

    \b
    Examples:
      nodeagent history --limit 10
      nodeagent history --event drift --since 2h
      nodeagent history --target kernel.numa_balancing
    """
    from ..render.ops_text import history_text
    from ..state.journal import Journal, parse_since

    journal = Journal(ctx.host)
    events = journal.query(resource=resource, target=target, event=event,
                           since=parse_since(since) if since else None, limit=limit)
    ctx.emit(history_text(events, journal.skipped), {"events": events, "skipped": journal.skipped})


@click.command()
@click.option("--events", type=click.IntRange(min=0), default=5, show_default=True, metavar="N",
              help="How many recent journal events to show.")
@click.pass_obj
def status(ctx: Ctx, events: int) -> None:
    """The node at a glance: last apply, drift, owned kdamonds, tiers and how full each node is. Read-only.

    \b
    Examples:
      nodeagent status
      nodeagent --format json status
    """
    from ..ops.status import gather_status
    from ..profile.locate import changed_since_applied
    from ..render.ops_text import status_text

    eng = ctx.engine()
    s = gather_status(eng, events=events)
    note = changed_since_applied(eng.state.last_applied().to_json())
    if note and s.get("last_apply"):
        s["last_apply"]["profile_changed"] = note
    ctx.emit(status_text(s), s)


@click.command()
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--dry-run", is_flag=True, help="Print what would be restored; write nothing.")
@click.option("--allow-disruptive", is_flag=True, help="Also carry out disruptive restores (e.g. offlining memory).")
@click.option("--only", "targets", multiple=True, metavar="TARGET", help="Revert only this setting (repeatable).")
@click.pass_obj
def revert(ctx: Ctx, yes: bool, dry_run: bool, allow_disruptive: bool, targets: tuple[str, ...]) -> None:
    """Restore the values the node had before nodeagent changed them, then forget them.

    \b
    Examples:
      nodeagent revert --dry-run
      sudo nodeagent revert --only kernel.numa_balancing
      sudo nodeagent revert --yes --allow-disruptive   # everything, devices included
    """
    from ..plan import Result
    from ..render.ops_text import revert_text
    from .main import _consent, _TerminalProgress

    def confirm(p: Any) -> bool:
        def show() -> None:
            click.echo(escape_controls(revert_text(Result(p, dry_run=True))), err=ctx.fmt != "text")

        return _consent(yes, "Revert these settings?", "revert", show=show)

    progress = _TerminalProgress() if ctx.fmt == "text" and sys.stderr.isatty() else None
    try:
        result = ctx.engine().revert(targets=list(targets) if targets else None, dry_run=dry_run,
                                     allow_disruptive=allow_disruptive, confirm=confirm, progress=progress)
    finally:
        if progress is not None:
            progress.close()
    ctx.emit(revert_text(result), result.to_dict())
    if result.plan.blocked and not result.outcomes:
        raise PlanError("nothing was reverted (see above)", hint="check the names given to --only")
    if result.interrupted:  # stopped at a safe point (nodeagent.engine.signals): 143, 130
        from ..engine.signals import exit_code

        raise click.exceptions.Exit(exit_code(result.interrupted))
    if not result.dry_run and not result.ok:
        raise click.exceptions.Exit(ExitCode.PARTIAL)


@click.group()
def units() -> None:
    """systemd units and the udev rule that keep the node converged (boot, timer, hot-plug)."""


def _unit_options(f: Any) -> Any:
    f = click.option("--interval", default="5min", show_default=True, help="How often the drift timer runs.")(f)
    f = metrics_opt(f)
    f = click.option("--before", metavar="SERVICE", help="Apply before this service starts (the inference "
                     "service, e.g. vllm.service); it also pulls the apply in.")(f)
    f = click.option("--prefix", metavar="DIR", help="Installation prefix: the units run DIR/bin/nodeagent.")(f)
    f = click.option("--exe", metavar="PATH", help="The nodeagent the units run (default: the installed console "
                     "script running now, else the one on PATH).")(f)
    f = click.option("--profile", "node_profile", metavar="PATH",
                     help="The profile path the units read on the node (default: PROFILE's absolute path, "
                          "else /etc/nodeagent/profile.yaml).")(f)
    return click.argument("profile", required=False, type=click.Path(dir_okay=False, path_type=str))(f)


def _console_script() -> str:
    """The installed ``nodeagent`` console script: the one running, else the one on PATH, else the prefix's."""
    import os
    import shutil

    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) == "nodeagent" and os.path.isfile(argv0):
        return os.path.abspath(argv0)
    return shutil.which("nodeagent") or os.path.join(sys.prefix, "bin", "nodeagent")


def _render(ctx: Ctx, profile: str | None, node_profile: str | None, exe: str | None, prefix: str | None,
            before: str | None, metrics: str | None, interval: str) -> dict[str, str]:
    import os

    from ..profile.locate import PROFILE_PATH, under_root
    from ..profile.locate import node_profile as standard_profile
    from ..render.systemd import render_units
    from .main import _load

    if profile is not None:  # a profile that does not validate is not worth a unit
        from .main import _shipped_or

        profile = _shipped_or(profile)  # a shipped profile's name: its installed file
        name = _load(profile).name
        baked = node_profile or os.path.abspath(profile)
    elif node_profile is not None:
        local = under_root(ctx.host, node_profile)
        name = _load(local).name if os.path.exists(local) else None
        baked = node_profile
    else:  # the profile last applied to the node (as drift and status use it), else the node's standard one
        command = click.get_current_context().command_path.partition(" ")[2] or "units render"
        last = ctx.engine().state.last_applied()
        applied = last.profile_path if last and last.status != "reverted" else None
        seen = applied  # as the node sees it: under --root, the path inside the root
        if applied and not ctx.host.is_real:
            root = os.path.realpath(ctx.host.root)
            if os.path.commonpath([os.path.realpath(applied), root]) == root:
                seen = "/" + os.path.relpath(os.path.realpath(applied), root)
        if applied and seen != PROFILE_PATH and os.path.isfile(applied):
            name, baked = _load(applied).name, seen
            click.echo(escape_controls(f"nodeagent: {command}: for {seen}, the profile last applied to this node "
                                       "(give PROFILE or --profile for another)"), err=True)
        else:
            name, baked = _load(standard_profile(ctx.host, command)).name, PROFILE_PATH
    if exe is None:
        exe = os.path.join(prefix, "bin", "nodeagent") if prefix else _console_script()
    return render_units(baked, exe=exe, before=before, metrics=metrics, interval=interval, profile_name=name)


@units.command("render")
@_unit_options
@click.pass_obj
def units_render(ctx: Ctx, profile: str | None, node_profile: str | None, exe: str | None, prefix: str | None,
                 before: str | None, metrics_textfile: str | None, interval: str) -> None:
    """Print the units and the udev rule (nothing is written). They run the installed nodeagent on PROFILE, else
    the profile last applied to this node, else /etc/nodeagent/profile.yaml (--profile: the path the node reads).

    \b
    Examples:
      nodeagent units render                       # for the profile last applied here
      nodeagent units render /etc/nodeagent/profile.yaml --before vllm.service
      sudo nodeagent units install --metrics-textfile /var/lib/node_exporter/textfile/nodeagent.prom
    """
    from ..render.systemd import destination

    files = _render(ctx, profile, node_profile, exe, prefix, before, metrics_textfile, interval)
    ctx.emit("\n".join(f"# ==> {destination(n)} <==\n{t}" for n, t in files.items()),
             {"files": {destination(n): t for n, t in files.items()}})


@units.command("install")
@_unit_options
@click.pass_obj
def units_install(ctx: Ctx, profile: str | None, node_profile: str | None, exe: str | None, prefix: str | None,
                  before: str | None, metrics_textfile: str | None, interval: str) -> None:
    """Write the units to /etc/systemd/system and the rule to /etc/udev/rules.d (under --root)."""
    import os

    from ..profile.locate import under_root
    from ..render.systemd import destination

    files = _render(ctx, profile, node_profile, exe, prefix, before, metrics_textfile, interval)
    host = ctx.host
    if host.is_real and os.geteuid() != 0:
        raise NeedsRootError("units install writes under /etc and needs root", hint="run it with sudo")
    written = []
    for name, text in files.items():
        host.fs.write_file_atomic(destination(name), text)
        written.append(destination(name))
    if host.is_real:
        lines = [f"wrote {p}" for p in written]
        lines += ["next: systemctl daemon-reload && udevadm control --reload && "
                  "systemctl enable --now nodeagent-apply.service nodeagent-drift.timer nodeagent-guard.service"]
    else:  # nothing on this machine changed: say where the files are, and that no systemd here runs them
        what = "simulated node" if host.simulated else "root"
        lines = [f"{what} at {host.root}: wrote the units there, not into this machine's systemd"]
        lines += [f"wrote {under_root(host, p)}" for p in written]
        lines += ["on a real node, next: systemctl daemon-reload && udevadm control --reload && "
                  "systemctl enable --now nodeagent-apply.service nodeagent-drift.timer nodeagent-guard.service"]
    ctx.emit("\n".join(lines), {"written": written, "root": str(host.root), "simulated": host.simulated})


@click.command()
@click.argument("profile", type=click.Path(dir_okay=True, path_type=str))
@click.option("--debounce", type=click.FloatRange(min=0), default=2.0, show_default=True, metavar="SECONDS",
              help="Wait this long after the last event before reconciling.")
@click.pass_obj
def watch(ctx: Ctx, profile: str, debounce: float) -> None:
    """React to hot-plugged DAX/CXL/memory devices like the udev rule does, without systemd (until SIGTERM)."""
    from ..loops.watch import Watcher
    from .main import _load

    loaded = _load(profile)
    eng = ctx.engine()
    eng.require_root()
    w = Watcher(eng, loaded, debounce=debounce,
                log=lambda m: click.echo(escape_controls(f"nodeagent watch: {m}"), err=True))
    raise click.exceptions.Exit(w.run())


@click.command()
@click.argument("profile", type=click.Path(dir_okay=True, path_type=str))
@click.option("--interval", type=click.FloatRange(min=0.1), default=1.0, show_default=True, metavar="SECONDS",
              help="How often the destinations' free memory is read.")
@click.option("--refresh", type=click.FloatRange(min=1), default=30.0, show_default=True, metavar="SECONDS",
              help="How often the guarded schemes are planned afresh (and after each apply).")
@click.pass_obj
def guard(ctx: Ctx, profile: str, interval: float, refresh: float) -> None:
    """Pause each dest_free scheme while its destination node is nearly full, resume it once it has room
    (until SIGTERM)."""
    from ..loops.guard import Guardian
    from .main import _load

    loaded = _load(profile)
    eng = ctx.engine()
    eng.require_root()
    g = Guardian(eng, loaded, interval=interval, refresh=refresh,
                 log=lambda m: click.echo(escape_controls(f"nodeagent guard: {m}"), err=True))
    raise click.exceptions.Exit(g.run())
