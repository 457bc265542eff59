"""``nodeagent labels`` and ``nodeagent run``: Kubernetes without API access (NFD feature file, DaemonSet loop).

Registered on the main group by :mod:`nodeagent.cli.main` with one line; imports are lazy like the rest of the CLI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ..util.escape import escape_controls

if TYPE_CHECKING:
    from .main import Ctx


def _prefix(_c: click.Context, _p: click.Parameter, value: str) -> str:
    from ..k8s.labels import check_prefix

    try:
        return check_prefix(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


prefix_opt = click.option(
    "--label-prefix", "prefix", default="feature.node.kubernetes.io", show_default=True, metavar="NAMESPACE",
    callback=_prefix, help="The labels' namespace; another one is published only when nfd-master runs with "
    "-extra-label-ns=NAMESPACE.")


def _labels_profile(ctx: Ctx, given: str | None) -> tuple[object | None, str]:
    """PROFILE, else the last applied profile (its record), else the node's standard profile, else exit 65."""
    from ..profile.locate import PROFILE_PATH, node_profile
    from .main import _load

    if given is not None:
        return _load(given), given
    last = ctx.engine().state.last_applied()
    if last.profile:
        return None, f"last applied ({last.profile_path or last.profile})"
    path = node_profile(ctx.host, "labels")  # exit 65 with the hint when there is none
    return _load(path), PROFILE_PATH if ctx.host.is_real else path


@click.command()
@click.argument("profile", required=False, type=click.Path(dir_okay=False, path_type=str))
@click.option("--write", "write_file", is_flag=True,
              help="Write the NFD feature file (/etc/kubernetes/node-feature-discovery/features.d/nodeagent under "
                   "--root, creating the directory) instead of printing it.")
@click.option("--expires-in", type=click.FloatRange(min=60), metavar="SECONDS",
              help="Add NFD's # +expiry-time= directive: the labels are dropped this long after they were written.")
@prefix_opt
@click.pass_obj
def labels(ctx: Ctx, profile: str | None, write_file: bool, expires_in: float | None, prefix: str) -> None:
    """Node labels of the memory tiers in NFD's local feature-file format (name=value lines). Read-only unless
    --write. PROFILE: default the last applied profile, else /etc/nodeagent/profile.yaml."""
    from ..k8s import labels as lab

    loaded, source = _labels_profile(ctx, profile)
    eng = ctx.engine()
    names = lab.gather(eng, loaded)  # type: ignore[arg-type]
    expires = lab.now_plus(expires_in) if expires_in else None
    text = lab.render(names, prefix=prefix, expires=expires, source=source)
    if write_file:
        with eng.state.locked(eng.lock_timeout):
            lab.write(ctx.host, text)
        where = ctx.host.fs.local(lab.FEATURES_FILE)
        click.echo(f"nodeagent: wrote {len(names)} labels to {where}", err=True)
    ctx.emit(text.rstrip("\n"), {"prefix": prefix, "labels": {f"{prefix}/{k}": v for k, v in sorted(names.items())},
                                 "file": lab.FEATURES_FILE, "written": write_file, "source": source})


@click.command()
@click.argument("profile", required=False, type=click.Path(dir_okay=False, path_type=str))
@click.option("--apply", "do_apply", is_flag=True,
              help="Change the node (without it: plan-only — checks, plans, drift and labels, no kernel writes).")
@click.option("--allow-disruptive", is_flag=True, help="With --apply: also carry out disruptive changes.")
@click.option("--interval", type=click.FloatRange(min=1), default=300.0, show_default=True, metavar="SECONDS",
              help="How often drift is measured and the labels rewritten (with --apply a drifted node is "
                   "reconciled again).")
@click.option("--poll", type=click.FloatRange(min=0.1), default=2.0, show_default=True, metavar="SECONDS",
              help="How often the profile's directory is looked at for a new version (ConfigMap symlink swap).")
@click.option("--debounce", type=click.FloatRange(min=0), default=2.0, show_default=True, metavar="SECONDS",
              help="Quiet time after hot-plug events before the scoped reconcile.")
@click.option("--guard-interval", type=click.FloatRange(min=0), default=1.0, show_default=True, metavar="SECONDS",
              help="With --apply: how often the profile's dest_free schemes are looked at (as `nodeagent guard`); "
                   "0: never.")
@click.option("--metrics-listen", default=":10075", show_default=True, metavar="ADDR:PORT",
              help="Serve /metrics here (as `metrics serve`); 'off': no endpoint.")
@click.option("--labels", "labels_mode", type=click.Choice(["auto", "always", "never"]), default="auto",
              show_default=True, help="Keep the NFD feature file: auto: when the features.d directory exists.")
@prefix_opt
@click.pass_obj
def run(ctx: Ctx, profile: str | None, do_apply: bool, allow_disruptive: bool, interval: float, poll: float,
        debounce: float, guard_interval: float, metrics_listen: str, labels_mode: str, prefix: str) -> None:
    """Long-running entrypoint (the DaemonSet's): reconcile at start and on profile change, hot-plug, drift,
    labels and metrics, until SIGTERM (exit 0). PROFILE: default /etc/nodeagent/profile.yaml."""
    from ..k8s.run import Options, Runner, require_sole_owner
    from .main import _profile

    path = _profile(ctx, profile)
    eng = ctx.engine()
    require_sole_owner(eng)
    if do_apply:
        eng.require_root()
    exporter = None
    if metrics_listen != "off":
        from ..metrics.collector import Collector
        from ..metrics.exporter import Exporter, Intervals
        from .metrics import start_exporter

        # Plan-only writes nothing to the kernel: not even the exporter's DAMON statistics refresh.
        refresh = 30.0 if do_apply else float("inf")
        exporter = Exporter(Collector(ctx.host, refresh_interval=refresh), Intervals(latency=0))
        url = start_exporter(exporter, metrics_listen, "--metrics-listen", "choose another port, or 'off'")
        click.echo(f"nodeagent run: metrics on {url}", err=True)

    def log(message: str) -> None:
        click.echo(escape_controls(f"nodeagent run: {message}"), err=True)

    opts = Options(apply=do_apply, interval=interval, poll=poll, debounce=debounce, labels=labels_mode,
                   prefix=prefix, allow_disruptive=allow_disruptive, guard=guard_interval)
    try:
        code = Runner(eng, path, opts, log=log).run()
    finally:
        if exporter is not None:
            exporter.shutdown()
    raise click.exceptions.Exit(code)


def register(cli: click.Group) -> None:
    cli.add_command(labels)
    cli.add_command(run)
