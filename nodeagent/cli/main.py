"""The command line: parse options, build the context, call the engine, render. Nothing else lives here.

Imports are lazy on purpose: a systemd timer and Ansible run this on every node of a fleet, so a command
imports only what it needs (``facts`` never loads pydantic; nothing loads ``sh`` unless it runs a command).
"""

from __future__ import annotations

import gc
import json
import os
import sys
from typing import TYPE_CHECKING, Any

import click

from .. import __version__
from ..util.dataclass import dataclass
from ..util.errors import ExitCode, HostError, NodeagentError, PlanError, UsageError
from ..util.escape import escape_controls

if TYPE_CHECKING:
    from ..engine.core import Engine
    from ..host import Host
    from ..profile import LoadedProfile


#: The version of every command's ``--format json`` document (its ``format_version`` key, first). It goes up when
#: a key a consumer may read is renamed, removed or changes meaning; adding a key does not change it.
FORMAT_VERSION = 1


@dataclass
class Ctx:
    root: str = "/"
    simulate: str | None = None
    fmt: str = "text"
    lock_timeout: float = 60.0
    _host: Host | None = None
    #: With --format json the command's one document, printed by main() (with the error, if one follows).
    document: Any = None
    #: What went wrong when a command ends with a failing exit code of its own (checks failed, partial apply).
    failure: tuple[str, str | None] | None = None
    #: The command line is this process's own (``main()`` without ``argv``): the process ends with the command.
    process: bool = False
    #: ... and the command is one of :data:`_ONE_SHOT`: :func:`main` ends the process itself (:func:`_end_process`).
    one_shot: bool = False

    @property
    def host(self) -> Host:
        if self._host is None:
            from ..host import open_host

            root = self.root
            if self.simulate:
                from ..host.machine import plugin

                machine = plugin()
                try:
                    if sys.stderr.isatty() and not machine.laid_out(self.simulate):
                        click.echo(f"nodeagent: laying out a simulated {self.simulate} node (first use; reused "
                                   "afterwards)...", err=True)
                    root = str(machine.lay_out(self.simulate))
                except KeyError as exc:
                    raise UsageError(f"--simulate: {exc.args[0]}") from None
            self._host = open_host(root)
            from ..state.store import cache_probes

            cache_probes(self._host)  # read-only commands read this boot's probe answers too
        return self._host

    def engine(self) -> Engine:
        from ..engine.core import Engine

        return Engine(self.host, lock_timeout=self.lock_timeout)

    def emit(self, text: str, data: Any) -> None:
        if self.fmt == "json":
            self.document = data
        else:
            click.echo(escape_controls(text))

    def flush(self, error: dict[str, Any] | None = None) -> None:
        """Print the one JSON document: the command's, with ``error`` in it when the command then failed."""
        doc = self.document
        self.document = None
        if doc is None and error is None:
            return
        if doc is None:
            doc = {}
        elif not isinstance(doc, dict):  # every command's document is an object; a list goes under "result"
            doc = {"result": doc}
        if error is not None:  # {"error": {message, hint, exit_code}}, beside the command's own keys if any
            doc = {**doc, "error": error}
        doc = {"format_version": FORMAT_VERSION, **{k: v for k, v in doc.items() if k != "format_version"}}
        click.echo(json.dumps(doc, indent=2, default=str))


def _load(path: str) -> LoadedProfile:
    """The validated profile at ``path``, or the shipped profile that ``path`` names (no such file there)."""
    from ..profile.cache import load  # validated once per content of its files; see nodeagent.profile.cache

    return load(_shipped_or(path))


def _shipped_or(path: str) -> str:
    """``path``, or the shipped profile it names when there is no such file (``cxl-inference``)."""
    if os.path.lexists(path):
        return path
    from ..profile.shipped import find

    found = find(path)
    return str(found) if found is not None else path


def _profile(ctx: Ctx, given: str | None) -> str:
    """PROFILE as given (a file, else the name of a shipped profile: ``nodeagent plan cxl-inference``), else the
    node's /etc/nodeagent/profile.yaml (nodeagent.profile.locate)."""
    if given is not None:
        return _shipped_or(given)
    from ..profile.locate import node_profile

    command = click.get_current_context().command_path.removeprefix("nodeagent ").removeprefix("cli ")
    return node_profile(ctx.host, command)


def _is_interactive() -> bool:
    """A person can answer: stdin is a terminal (stdout may be a pipe: ``nodeagent apply P | tee log``)."""
    return sys.stdin.isatty()


def _consent(yes: bool, question: str, command: str, show: Any = None) -> bool:
    """Consent to change the node, asked only when there is something to change: ``--yes``, else the answer of a
    person at the terminal on stdin, else a refusal (exit 64) — never a silent yes because nobody could be asked.

    systemd units, ``run --apply``, the Ansible module and scripts give their consent up front (``--yes``, or the
    engine's API). The question goes to stderr when stdout is not the terminal (a pipe, a log, a JSON document);
    ``show`` first prints there what would change when stdout does not carry it (``--format json``).
    """
    if yes:
        return True
    if not _is_interactive():
        raise UsageError(f"{command} would change this node and stdin is not a terminal to ask on: nothing was "
                         "written",
                         hint=f"pass --yes to {command} without asking (systemd units, scripts, CI); "
                              f"`nodeagent {command} --dry-run` shows what it would do")
    if show is not None:
        show()
    return click.confirm(question, default=False, err=not sys.stdout.isatty())


#: The commands that do one thing and end (the timer's ``drift --record``, a reviewer's ``plan``, ``apply``...). As
#: the process's own command, one of them runs without the cyclic garbage collector: what it allocates is freed by
#: reference counting, and what a cycle holds is freed when the process ends, moments later, so a collection
#: (dozens of them while a command imports its modules) finds nothing worth its cost. Loops (``watch``, ``guard``,
#: ``run``, ``metrics serve``) and every other command keep it.
_ONE_SHOT = frozenset({"apply", "check", "drift", "facts", "history", "plan", "status", "validate"})


profile_arg = click.argument("profile", required=False, type=click.Path(dir_okay=True, path_type=str))


def _presets(prefix: str) -> list[str]:
    from ..host.machine import presets

    return presets(prefix)


class _Seconds(click.ParamType):
    """--lock-timeout: a finite number of seconds ≥ 0, refused while parsing (exit 64) — also by commands that
    take no lock, wherever on the command line the option was written."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, cx: click.Context | None) -> float:
        from ..host.fs import check_timeout

        try:
            seconds = float(value)
            check_timeout(seconds)
        except (ValueError, UsageError):
            self.fail(f"{value!r} is not a finite number of seconds ≥ 0 (e.g. 60; 0: do not wait)", param, cx)
        return seconds


#: The command table: the commands other modules define, by name: (module, attribute). Each module is imported
#: when one of its commands is looked up (to run it, or for --help and shell completion, which list them all):
#: the timer's ``drift`` loads ``cli.ops``, never the exporter's or the DaemonSet's commands. Installed plugins
#: add theirs (the simulator's ``sim``) through :func:`nodeagent.host.machine.commands`.
_ELSEWHERE = {
    **{name: ("cli.ops", name) for name in ("drift", "guard", "history", "status", "revert", "units", "watch")},
    "metrics": ("cli.metrics", "metrics"),  # the exporter
    "render": ("cli.serving", "render"), "verify-serving": ("cli.serving", "verify_serving"),
    "labels": ("cli.k8s", "labels"), "run": ("cli.k8s", "run"),  # the NFD feature file, the DaemonSet loop
    "profiles": ("cli.profiles", "profiles"),  # list, show: the profiles installed with nodeagent
}


class _Commands(dict[str, click.Command]):
    """``cli.commands``: a command of another module (``_ELSEWHERE``) or of a plugin is imported on first
    lookup."""

    def __missing__(self, name: str) -> click.Command:
        if name in _ELSEWHERE:
            module, attr = _ELSEWHERE[name]
            command = getattr(__import__(f"nodeagent.{module}", fromlist=[attr]), attr)
            gc.freeze()  # (as in main: the modules just imported live to the end)
        else:
            from ..host.machine import commands

            plugged = commands()
            if name not in plugged:
                raise KeyError(name)
            command = plugged[name].load()
        self[name] = command
        return command

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        try:
            return self[name]
        except KeyError:
            return default


class _Cli(click.Group):
    """Global options go before or after the command (see ``cli.args``); other modules' commands are loaded
    when looked up (``_ELSEWHERE``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = _Commands(self.commands)

    def list_commands(self, ctx: click.Context) -> list[str]:
        from ..host.machine import commands

        return sorted({*self.commands, *_ELSEWHERE, *commands()})

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        from .args import hoist

        return super().parse_args(ctx, hoist(self, ctx, args))


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("--root", default="/", show_default=True, metavar="DIR",
              help="Root under which /sys, /proc, /etc and /var/lib/nodeagent are found.")
@click.option("--simulate", metavar="PRESET", shell_complete=lambda cx, param, incomplete: _presets(incomplete),
              help="Use a simulated node of this preset (created or reused under the cache directory).")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True,
              help="markdown: a review comment (plan only).")
@click.option("--lock-timeout", type=_Seconds(), default=60.0, show_default=True, metavar="SECONDS",
              help="How long to wait for another nodeagent run holding the state lock (then exit 75, nothing done).")
@click.version_option(__version__, prog_name="nodeagent")
@click.pass_context
def cli(cx: click.Context, root: str, simulate: str | None, fmt: str, lock_timeout: float) -> None:
    """Declarative, idempotent configurator for tiered-memory nodes (HBM, DRAM, CXL.mem)."""
    if simulate and root != "/":
        raise UsageError("--simulate and --root are mutually exclusive")
    if fmt == "markdown" and cx.invoked_subcommand != "plan":
        raise UsageError(f"--format markdown is not supported by {cx.invoked_subcommand or 'this command'}",
                         hint="only plan renders Markdown; use --format text or json")
    if not isinstance(cx.obj, Ctx):  # invoked without main() (click's test runner): print when done
        cx.obj = Ctx()
        cx.call_on_close(cx.obj.flush)
    cx.obj.root, cx.obj.simulate, cx.obj.fmt, cx.obj.lock_timeout = root, simulate, fmt, lock_timeout
    if cx.obj.process:  # main() paused the collector: a command that does not end soon gets it back
        cx.obj.one_shot = cx.invoked_subcommand in _ONE_SHOT
        if not cx.obj.one_shot:
            gc.enable()


@cli.command()
@profile_arg
@click.pass_obj
def validate(ctx: Ctx, profile: str | None) -> None:
    """Check a profile against the schema (after merging what it extends).

    \b
    Examples:
      nodeagent validate profiles/cxl-inference.yaml
      nodeagent validate            # /etc/nodeagent/profile.yaml
    """
    profile = _profile(ctx, profile)
    loaded = _load(profile)
    ctx.emit(f"{profile}: valid profile {loaded.name!r}", {"valid": True, "profile": loaded.name,
                                                           "digest": loaded.digest})


@cli.command()
@click.option("--save", "save", type=click.Path(dir_okay=False, writable=True), metavar="FILE",
              help="Also write the facts as JSON to FILE (for offline planning).")
@click.option("--measure-bandwidth", is_flag=True,
              help="Also measure each NUMA node's memory bandwidth into the facts (takes seconds).")
@click.option("--profile", "profile", metavar="PROFILE", type=click.Path(dir_okay=True, path_type=str),
              help="Record the paths this profile's disk check lists (default: the last applied profile's).")
@click.pass_obj
def facts(ctx: Ctx, save: str | None, measure_bandwidth: bool, profile: str | None) -> None:
    """Show what the node looks like now. Read-only: never writes to the node.

    \b
    Examples:
      nodeagent facts
      nodeagent facts --save node.json        # for `plan --facts` elsewhere
      nodeagent --simulate h100-cxl facts
    """
    from ..facts import snapshot
    from ..ops.capture import capture
    from ..render.text import facts_text

    checked = None
    if profile is not None:
        from ..facts.hardware import disk_check_paths

        loaded = _load(profile)
        checked = (loaded.name, disk_check_paths(loaded.data))
    snap = capture(ctx.host, hardware=True, bandwidth=measure_bandwidth, checked=checked)
    if save:
        try:
            snapshot.save(snap, save)
        except OSError as exc:
            raise UsageError(f"--save {save}: cannot write: {exc.strerror}") from None
        click.echo(f"nodeagent: saved the facts to {os.path.abspath(save)} (for `plan --facts`)", err=True)
    from ..render.hardware import hardware_text

    ctx.emit(facts_text(snap.facts) + hardware_text(snap.facts.sections.get(snapshot.HARDWARE)), snap.facts.to_dict())


verbose_opt = click.option("--verbose", "-v", is_flag=True,
                           help="Print every advisory of the profile in full, also those already shown for this "
                                "profile and kernel.")


@cli.command()
@profile_arg
@verbose_opt
@click.option("--detailed-exitcode", is_flag=True,
              help="Exit 2 when the plan changes something, 5 when part of it cannot be done.")
@click.option("--allow-disruptive", is_flag=True, help="Plan disruptive changes instead of refusing them.")
@click.option("--facts", "facts_path", metavar="FILE|DIR",
              help="Plan offline against saved facts (`facts --save`): one file, or every *.json in DIR.")
@click.option("--baseline", metavar="OLD.yaml",
              help="Also plan OLD.yaml; show how PROFILE changes each node's plan (exit 2 when it does).")
@click.option("--out", "out", metavar="FILE", type=click.Path(dir_okay=False, path_type=str),
              help="Also save the plan to FILE: `apply --plan FILE` carries out exactly it, or refuses if the node "
                   "or the profile changed.")
@click.option("--advice", is_flag=True,
              help="Print only the profile's advisories on this node, all in full (those already shown are only "
                   "counted by plan, apply and drift).")
@click.pass_obj
def plan(ctx: Ctx, profile: str | None, verbose: bool, detailed_exitcode: bool, allow_disruptive: bool,
         facts_path: str | None, baseline: str | None, out: str | None, advice: bool) -> None:
    """Show what apply would change, and why. Writes nothing. PROFILE: default /etc/nodeagent/profile.yaml.

    With --facts it never touches this machine: it plans against captured facts, with the same planner.

    \b
    Examples:
      nodeagent plan cxl-inference                  # a shipped profile, by name
      nodeagent plan my.yaml --detailed-exitcode    # exit 2 when it would change something
      nodeagent plan new.yaml --baseline old.yaml   # what a profile edit changes on this node
      nodeagent plan my.yaml --facts fleet/         # offline, against `facts --save` files
      nodeagent plan my.yaml --out reviewed.plan    # then: sudo nodeagent apply --plan reviewed.plan
      nodeagent plan --advice                       # the advisories a converged plan only counts
    """
    from ..render.text import advice_text, plan_text

    if profile is None and facts_path is not None:
        raise UsageError("plan --facts needs PROFILE", hint="nodeagent plan PROFILE --facts DIR")
    profile = _profile(ctx, profile)
    if advice and (facts_path or baseline or out or detailed_exitcode or ctx.fmt == "markdown"):
        raise UsageError("--advice prints the advisories alone: not with --facts, --baseline, --out, "
                         "--detailed-exitcode or --format markdown")
    if facts_path is not None or baseline is not None or ctx.fmt == "markdown":
        if out is not None:
            raise UsageError("--out saves a plan of this node: not with --facts, --baseline or --format markdown")
        _review(ctx, profile, facts_path, baseline, detailed_exitcode, allow_disruptive)
        return
    loaded = _load(profile)
    eng = ctx.engine()
    f = eng.facts(loaded)
    p = eng.plan(loaded, allow_disruptive=allow_disruptive, facts=f)
    if advice:
        ctx.emit(advice_text(p), {"profile": p.profile, "node": p.node, "advisories": list(p.warnings)})
        return
    shown = frozenset() if verbose or ctx.fmt == "json" else eng.advisories_shown(p.profile, p.profile_digest,
                                                                                    p.warnings)
    ctx.emit(plan_text(p, verbose=verbose, shown=shown), p.to_dict())  # plan only reads what was shown (never writes)
    if out is not None:
        from .saved_plan import write

        write(out, loaded, p, allow_disruptive)
        click.echo(f"nodeagent: saved the plan to {os.path.abspath(out)} (`nodeagent apply --plan {out}` carries "
                   "it out)", err=True)
    if p.blocked:
        raise click.exceptions.Exit(ExitCode.ERROR)
    if detailed_exitcode and (p.changes or p.problems):  # 5: apply would be partial (wins over 2)
        partial = p.problems or (p.disruptive and not allow_disruptive)
        raise click.exceptions.Exit(ExitCode.PARTIAL if partial else ExitCode.CHANGES)


skip_checks_opt = click.option(
    "--skip-checks", "skip_checks", multiple=True, metavar="NAME",
    help="Do not run this preflight check (repeatable; cpu, disk, gpu_pcie, memory_bandwidth, latency, "
         "capacity, coexistence, placement, or all).")


def _checks_failed(report: Any, applying: bool) -> click.exceptions.Exit:
    names = ", ".join(r.name for r in report.failed)
    tail = "; nothing was written" if applying else ""
    message = f"error-severity checks failed: {names}{tail}"
    hint = f"fix the node as each check says, or {report.skip_hint} to go ahead anyway"
    click.echo(escape_controls(f"nodeagent: {message}\n  hint: {hint}"), err=True)
    ctx = click.get_current_context().find_object(Ctx)
    if ctx is not None:
        ctx.failure = (message, hint)
    return click.exceptions.Exit(ExitCode.CHECK_FAILED)


@cli.command()
@profile_arg
@skip_checks_opt
@click.option("--facts", "facts_path", metavar="FILE|DIR",
              help="Judge saved facts (`facts --save`) instead of this node: one file, or every *.json in DIR.")
@click.pass_obj
def check(ctx: Ctx, profile: str | None, skip_checks: tuple[str, ...], facts_path: str | None) -> None:
    """Run the profile's preflight checks alone (read-only). Exit 4 when an error-severity check fails.

    \b
    Examples:
      nodeagent check cxl-inference
      nodeagent check my.yaml --skip-checks latency
      nodeagent check my.yaml --facts node.json
    """
    from ..checks import parse_skips
    from ..render.checks import report_text

    if facts_path is not None:
        from .check_offline import check_offline

        check_offline(ctx, _load(_profile(ctx, profile)), facts_path, parse_skips(skip_checks))
        return
    loaded = _load(_profile(ctx, profile))
    skips = parse_skips(skip_checks)
    eng = ctx.engine()
    report = eng.checks(loaded, eng.facts(), skips)
    ctx.emit(report_text(report), report.to_dict())
    if not report.ok:
        raise _checks_failed(report, applying=False)


def _review(ctx: Ctx, profile: str, facts_path: str | None, baseline: str | None, detailed: bool,
            allow_disruptive: bool) -> None:
    """plan --facts / --baseline / --format markdown: plan against snapshots (saved, or this node's)."""
    from ..engine.review import exit_code, review, to_dict
    from ..facts import snapshot
    from ..ops.capture import capture
    from ..render.review import review_markdown, review_text

    if facts_path is not None and (ctx.simulate or ctx.root != "/"):
        raise UsageError("--facts plans offline against saved facts: --root and --simulate do not apply",
                         hint="drop --root/--simulate, or drop --facts to plan against that node")
    loaded = _load(profile)
    old = _load(baseline) if baseline is not None else None
    snaps = snapshot.read_all(facts_path) if facts_path is not None else [capture(ctx.host, hardware=True)]
    reviews = review(loaded, snaps, baseline=old, allow_disruptive=allow_disruptive)
    if ctx.fmt == "markdown":
        click.echo(escape_controls(review_markdown(reviews, loaded, old, offline=facts_path is not None)), nl=False)
    else:
        ctx.emit(review_text(reviews), to_dict(reviews, loaded, old))
    code = exit_code(reviews, detailed=detailed, allow_disruptive=allow_disruptive)
    if code:
        raise click.exceptions.Exit(code)


@cli.command()
@profile_arg
@click.option("--yes", "-y", is_flag=True,
              help="Do not ask for confirmation (needed to change the node where stdin is not a terminal).")
@click.option("--dry-run", is_flag=True, help="Print the plan only; write nothing.")
@click.option("--allow-disruptive", is_flag=True, help="Carry out disruptive changes (e.g. offlining memory).")
@verbose_opt
@skip_checks_opt
@click.option("--device", "devices", multiple=True, metavar="NAME",
              help="Reconcile only what this hot-plugged device affects (dax1.0, memory42, region0; repeatable).")
@click.option("--metrics-textfile", metavar="PATH",
              help="Also write Prometheus metrics to PATH (atomically), for node_exporter's textfile collector.")
@click.option("--plan", "saved", metavar="FILE", type=click.Path(dir_okay=False, path_type=str),
              help="Carry out the plan `plan --out FILE` saved, exactly; refuse (exit 5, nothing written) if the node "
                   "or the profile changed since. The saved plan is the consent: no question.")
@click.option("--wait-memdevs", metavar="DURATION", default=None,
              help="First wait up to DURATION (60s, 2min) for the CXL memdevs the profile's regions need (the boot "
                   "unit: memdevs probe asynchronously).")
@click.pass_obj
def apply(ctx: Ctx, profile: str | None, yes: bool, dry_run: bool, allow_disruptive: bool, verbose: bool,
          skip_checks: tuple[str, ...], devices: tuple[str, ...], metrics_textfile: str | None, saved: str | None,
          wait_memdevs: str | None) -> None:
    """Run the profile's preflight checks, then make the node match the profile, re-read and verify it.

    PROFILE: default /etc/nodeagent/profile.yaml (under --root).

    \b
    Examples:
      sudo nodeagent apply cxl-inference           # shows the plan, asks on the terminal
      sudo nodeagent apply --yes my.yaml           # no question (systemd, scripts: required without a terminal)
      nodeagent apply --dry-run my.yaml            # the checks and the plan; writes nothing
      sudo nodeagent apply --plan reviewed.plan    # exactly what `plan --out` saved, or nothing
      nodeagent --simulate h100-cxl apply --yes cxl-inference
    """
    from ..checks import parse_skips
    from ..render.checks import report_text
    from ..render.text import plan_text

    saved_doc = None
    if saved is not None:
        from .saved_plan import read

        saved_doc = read(saved)
        if devices:
            raise UsageError("--plan carries out a whole saved plan: not with --device")
        if profile is not None and os.path.abspath(_profile(ctx, profile)) != saved_doc["profile_path"]:
            raise UsageError(f"--plan {saved} was saved for {saved_doc['profile_path']}, not {profile}",
                             hint="leave PROFILE out: the saved plan names its profile")
        profile, yes = saved_doc["profile_path"], True
        allow_disruptive = bool(saved_doc.get("allow_disruptive"))
    loaded = _load(_profile(ctx, profile))
    skips = parse_skips(skip_checks)
    eng = ctx.engine()
    if devices:  # a device the node does not have is a usage error, not an empty scope that "succeeds"
        from ..engine.scope import require_devices

        require_devices(ctx.host, devices)
    if metrics_textfile:  # refuse a device node, FIFO or directory there before applying, not after
        from ..host.files import check_operator_target

        check_operator_target(metrics_textfile)
    if wait_memdevs is not None:
        from ..kinds.cxl_region.cli import wait_memdevs_option

        wait_memdevs_option(eng, loaded, wait_memdevs)
    text = ctx.fmt == "text"

    def show(report: Any, p: Any) -> None:
        """One shape wherever it runs: the checks, then the plan (before → after), then the prompt, then outcomes."""
        if saved_doc is not None:  # under the lock, before the first write: exactly the saved plan, or nothing
            from .saved_plan import check

            check(saved_doc, saved, loaded, p)
        if text:
            if report.results:
                click.echo(escape_controls(report_text(report, applying=not dry_run)))
            shown = frozenset() if verbose else eng.advisories_shown(p.profile, p.profile_digest, p.warnings)
            click.echo(escape_controls(plan_text(p, verbose=verbose, shown=shown)))

    def confirm(p: Any) -> bool:
        def on_stderr() -> None:  # --format json: stdout carries the document, the person reads the plan here
            click.echo(escape_controls(plan_text(p)), err=True)

        return _consent(yes, "Apply these changes?", "apply", show=None if text else on_stderr)

    progress = _TerminalProgress() if text and sys.stderr.isatty() else None
    try:
        result = eng.apply(loaded, dry_run=dry_run, allow_disruptive=allow_disruptive, confirm=confirm,
                           progress=progress, skip_checks=skips, scope=list(devices) if devices else None,
                           on_plan=show)
    finally:
        if progress is not None:
            progress.close()
    from ..engine import signals

    with signals.deferred():  # the result is printed and the records after it written, whatever signal comes now
        textfile_error = _after_apply(ctx, eng, loaded, result, text, dry_run, metrics_textfile)
        if text and result.went_ahead:  # the advisories above were read: said once per profile and kernel
            eng.remember_advisories(result.plan.profile, result.plan.profile_digest, result.plan.warnings)
    if not result.interrupted and signals.pending() and not result.dry_run:
        from dataclasses import replace

        result = replace(result, interrupted=signals.pending())
    if result.checks_failed:
        raise _checks_failed(result.checks, applying=not dry_run)
    if result.plan.blocked and not result.outcomes:
        raise PlanError("nothing was applied: the plan has problems this node cannot carry out (listed above)",
                        hint="fix the profile or the node, then apply again")
    if result.interrupted:  # stopped at a safe point: 128 + the signal, as a shell reports it (143, 130)
        from ..engine.signals import exit_code, name

        ctx.failure = (f"apply interrupted by {name(result.interrupted)} at a safe point", "apply again to finish")
        raise click.exceptions.Exit(exit_code(result.interrupted))
    if not result.dry_run and not result.ok:
        ctx.failure = (f"apply {result.status}: some changes were not made" if not result.record_errors else
                       f"apply {result.status}: the changes made could not all be recorded", "see the outcomes")
        raise click.exceptions.Exit(ExitCode.PARTIAL)
    if textfile_error is not None:  # the apply's result stands (printed, recorded): the textfile is what failed
        raise HostError(f"apply {result.status} and recorded, but the metrics textfile {metrics_textfile} could not "
                        f"be written: {textfile_error.message}", path=metrics_textfile,
                        hint=textfile_error.hint or "fix the path, then apply again (nothing more will change)")


def _after_apply(ctx: Ctx, eng: Engine, loaded: LoadedProfile, result: Any, text: bool, dry_run: bool,
                 metrics_textfile: str | None) -> NodeagentError | None:
    """apply's result on stdout, then the metrics textfile and NFD's feature file. A textfile that cannot be
    written (swapped for a symlink since the check before the apply) does not stop the rest: it is returned."""
    from ..render.text import outcomes_text

    if text:
        outcome = outcomes_text(result, dry_run=dry_run)
        if outcome:
            click.echo(escape_controls(outcome))
    else:
        ctx.emit("", result.to_dict())
    from ..engine.hooks import AfterApply, after_apply

    done = after_apply(eng, loaded, result, AfterApply(metrics_textfile=metrics_textfile))
    for note in done.notes:
        click.echo(escape_controls(f"nodeagent: {note}"), err=True)
    return done.failed


class _TerminalProgress:
    """One self-overwriting line on the terminal for long operations (onlining terabytes takes minutes)."""

    def __init__(self) -> None:
        self.open = False

    def __call__(self, what: str, done: int, total: int) -> None:
        pct = 100 * done / total if total else 100
        self.open = done < total
        click.echo(f"\r  {escape_controls(what)}: {done}/{total} ({pct:.0f}%)\033[K", err=True, nl=not self.open)

    def close(self) -> None:
        if self.open:
            click.echo("", err=True)
            self.open = False


@cli.command()
def schema() -> None:
    """Print the profile's JSON Schema."""
    from ..profile import schema as profile_schema

    click.echo(json.dumps(profile_schema(), indent=2))


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script for SHELL (docs/cli.md, "Shell completion", says where it goes)."""
    from click.shell_completion import get_completion_class

    complete = get_completion_class(shell)
    assert complete is not None  # click ships all three
    click.echo(complete(cli, {}, "nodeagent", "_NODEAGENT_COMPLETE").source())


def _fail(ctx: Ctx, code: int, message: str, hint: str | None = None) -> int:
    """Say what failed on stderr; with --format json, also in stdout's one document."""
    click.echo(escape_controls(f"nodeagent: {message}" + (f"\n  hint: {hint}" if hint else "")), err=True)
    if ctx.fmt == "json":
        ctx.flush({"message": message, "hint": hint, "exit_code": code})
    return code


def main(argv: list[str] | None = None) -> int:
    """Entry point. Exceptions map to exit codes here and nowhere else.

    Without ``argv`` the command line is the process's own: what start-up made (modules, classes) lives to its end,
    so no collection walks it again (``gc.freeze``); the collector is paused until the command is known (it stays
    paused for a one-shot command, :data:`_ONE_SHOT`), and a one-shot command ends the process when it is done
    (:func:`_end_process`). A caller passing ``argv`` keeps its collections and its process as they were."""
    if argv is None:
        gc.freeze()
        gc.disable()
    ctx = Ctx(process=argv is None)
    code = _main(ctx, sys.argv[1:] if argv is None else argv)
    if ctx.one_shot:
        _end_process(code)
    return code


def _end_process(code: int) -> None:
    """End this process with ``code`` as the interpreter would, less its teardown: the exit handlers run
    (``atexit``), stdout and stderr are flushed, then ``os._exit``. The teardown would free every object and module
    one by one (about a tenth of a ``drift --record``), and nothing of nodeagent's waits for it: every state and
    journal file is written, fsynced and closed before the command returns, the state lock is a descriptor the
    kernel releases. Returns (the interpreter ends the process) while another thread runs, which the interpreter
    would wait for, or when a stream cannot be flushed, which it reports its own way."""
    import atexit
    import threading

    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)  # CPython's: what its own teardown calls
    if run_exit_handlers is None or threading.active_count() > 1:
        return
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        run_exit_handlers()
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        return
    os._exit(code)


def _main(ctx: Ctx, args: list[str]) -> int:
    from .args import global_value

    try:  # the --format asked for, for errors click raises before it has processed any option
        ctx.fmt = global_value(cli, args, "--format", "text")
    except Exception:  # noqa: BLE001 (a malformed command line: click reports it below)
        pass
    from ..engine.signals import handled

    try:
        with handled():  # SIGTERM/SIGINT: stop at the next safe point (nodeagent.engine.signals)
            rv = cli.main(args=args, prog_name="nodeagent", standalone_mode=False, obj=ctx)
        code = rv if isinstance(rv, int) else 0  # click returns ctx.exit()'s code when not standalone
    except click.exceptions.Exit as exc:
        code = int(exc.exit_code)
    except click.exceptions.Abort:
        return _fail(ctx, int(ExitCode.ERROR), "aborted")
    except click.exceptions.ClickException as exc:  # usage errors: remap click's 2 to 64
        if ctx.fmt != "json":
            exc.show()
            return int(ExitCode.USAGE)
        usage = exc.ctx.get_usage() if isinstance(exc, click.UsageError) and exc.ctx is not None else None
        return _fail(ctx, int(ExitCode.USAGE), exc.format_message(), usage)
    except NodeagentError as exc:
        click.echo(escape_controls(f"nodeagent: {exc.render()}"), err=True)
        if ctx.fmt == "json":
            ctx.flush({"message": exc.message, "hint": exc.hint, "exit_code": int(exc.exit_code)})
        return int(exc.exit_code)
    except KeyboardInterrupt:
        return _fail(ctx, 130, "interrupted")
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return int(ExitCode.ERROR)
    except OSError as exc:  # a file the user named or the node could not be read: say which, no traceback
        if os.environ.get("NODEAGENT_DEBUG"):
            raise
        where = f" {exc.filename}:" if exc.filename else ""
        return _fail(ctx, int(ExitCode.ERROR), f"{where.lstrip()}{' ' if where else ''}{exc.strerror or exc}")
    except Exception as exc:  # a bug: one line, and the way to the traceback
        if os.environ.get("NODEAGENT_DEBUG"):
            raise
        return _fail(ctx, int(ExitCode.ERROR), f"internal error: {type(exc).__name__}: {exc}",
                     "this is a bug in nodeagent; rerun with NODEAGENT_DEBUG=1 for the traceback and report it")
    if ctx.fmt == "json":  # 2 (changes pending) and 3 (drift found) are answers, not failures
        message, hint = ctx.failure or (f"exit {code}", None)
        ctx.flush({"message": message, "hint": hint, "exit_code": code} if code not in (0, 2, 3) else None)
    return code
