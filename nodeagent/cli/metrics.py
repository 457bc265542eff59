"""``nodeagent metrics``: the Prometheus exporter and a one-shot view of the same series.

Registered on the main group by :mod:`nodeagent.cli.main`; imports are lazy like the rest of the CLI.
"""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING, Any

import click

from ..util.errors import UsageError

if TYPE_CHECKING:
    from .main import Ctx


def start_exporter(exporter: Any, listen: str, option: str, hint: str) -> str:
    """Start ``exporter`` on ``listen`` (``ADDR:PORT``, given as ``option``); its URL. A listen address that does
    not parse or cannot be bound is a usage error naming the option."""
    from ..metrics.exporter import parse_listen

    try:
        addr, port = parse_listen(listen)
    except ValueError as exc:
        raise UsageError(f"{option}: {exc}") from None
    try:
        host, bound = exporter.start(addr, port)
    except OSError as exc:
        raise UsageError(f"{option} {listen}: cannot listen: {exc.strerror}", hint=hint) from None
    return f"http://{'[' + host + ']' if ':' in host else host}:{bound}/metrics"


@click.group()
def metrics() -> None:
    """Prometheus metrics: GPUs' HBM and PCIe, CXL use per tier and node, promotion/demotion by cause, DAMON."""


@metrics.command("serve")
@click.option("--listen", default=":10075", show_default=True, metavar="ADDR:PORT",
              help="Where to serve /metrics (:PORT: every address; 127.0.0.1:PORT: this machine only).")
@click.option("--gpu-interval", type=click.FloatRange(min=1), default=15.0, show_default=True, metavar="SECONDS",
              help="How often GPUs are sampled (NVML, else nvidia-smi).")
@click.option("--refresh-interval", type=click.FloatRange(min=1), default=30.0, show_default=True,
              metavar="SECONDS", help="At most this often, ask nodeagent's own kdamonds without refresh_ms to "
              "refresh their statistics (the exporter's only write).")
@click.option("--pingpong-window", type=click.FloatRange(min=30), default=300.0, show_default=True,
              metavar="SECONDS", help="The window of the ping-pong estimator.")
@click.option("--latency-interval", type=float, default=900.0, show_default=True, metavar="SECONDS",
              callback=lambda _c, _p, v: _latency_interval(v),
              help="How often the memory latency probe runs (up to 2 s per CPU node x memory node; at least "
              "900; 0: never).")
@click.option("--latency-max-buffer", default="2GiB", show_default=True, metavar="SIZE",
              help="The latency probe's memory cap per node (its buffer is 4x the last-level cache).")
@click.pass_obj
def serve(ctx: Ctx, listen: str, gpu_interval: float, refresh_interval: float, pingpong_window: float,
          latency_interval: float, latency_max_buffer: str) -> None:
    """Serve the metrics over HTTP until SIGTERM or SIGINT. Read-only but for the stated statistics refresh."""
    from ..host.latency import Limits
    from ..metrics.collector import Collector
    from ..metrics.exporter import Exporter, Intervals
    from ..util.quantities import parse_size

    try:
        cap = parse_size(latency_max_buffer)
    except ValueError as exc:
        raise UsageError(f"--latency-max-buffer: {exc}") from None
    exp = Exporter(Collector(ctx.host, refresh_interval=refresh_interval, pingpong_window=pingpong_window),
                   Intervals(gpu=gpu_interval, latency=latency_interval), Limits(max_buffer=cap))
    url = start_exporter(exp, listen, "--listen", "choose another port, or stop what listens there")
    click.echo(f"nodeagent metrics: serving {url}", err=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        stop.wait()
    finally:
        exp.shutdown()


@metrics.command("show")
@click.pass_obj
def show(ctx: Ctx) -> None:
    """Print the series once in the text format (what a scrape returns; no ping-pong without history)."""
    from ..metrics.collector import Collector
    from ..metrics.textfile import render

    c = Collector(ctx.host)
    c.sample(refresh=False, moves=False)
    fams = [f for f in c.collect() if f.samples]
    if ctx.fmt == "json":
        ctx.emit("", {"families": [{"name": f.sample_name, "type": f.kind, "help": f.help,
                                    "samples": [{"labels": dict(zip(f.labels, v, strict=True)), "value": x}
                                                for v, x in f.samples]} for f in fams]})
    else:
        click.echo(render(fams), nl=False)


#: The files ``metrics rules`` and ``metrics dashboard`` print: package data, copies of the repository's monitoring/.
SHIPPED = {"rules": "alerts.yaml", "dashboard": "dashboard.json"}


def shipped(name: str) -> str:
    from importlib import resources

    return resources.files("nodeagent.monitoring").joinpath(SHIPPED[name]).read_text(encoding="utf-8")


@metrics.command("rules")
def rules() -> None:
    """Print the Prometheus alerting rules (for rule_files: in prometheus.yml, e.g. /etc/prometheus/rules/)."""
    click.echo(shipped("rules"), nl=False)


@metrics.command("dashboard")
def dashboard() -> None:
    """Print the Grafana dashboard JSON (import it, or drop it in a provisioned dashboards folder)."""
    click.echo(shipped("dashboard"), nl=False)


def _latency_interval(value: float) -> float:
    if value != 0 and value < 900:
        raise click.BadParameter(f"expected 0 (never) or at least 900 seconds, got {value:g}: the probe chases "
                                 "pointers for up to 2 s per node pair", param_hint="--latency-interval")
    return value


def register(cli: click.Group) -> None:
    cli.add_command(metrics)
