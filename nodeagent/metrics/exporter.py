"""``nodeagent metrics serve``: the collector's families over HTTP, through prometheus_client.

A scrape collects the cheap kernel files there and then; a sampler thread does the rest on intervals
(GPUs every ``gpu_interval``, the DAMON statistics refresh at most every ``refresh_interval`` and only where
``refresh_ms`` is not set, the ping-pong history every ``moves_interval``, the memory latency probe every
``latency_interval`` — 15 minutes — whose last figures every scrape serves with their timestamp). Scrapes never
write; the sampler writes ``update_schemes_stats`` to nodeagent's own kdamonds only, and nothing on kernels with
``refresh_ms``.
``process_*`` series (CPU seconds, resident memory) show what the exporter itself costs.

HTTP is served by waitress, which holds under load the way a node's exporter must: one thread reads every
connection without blocking and hands only complete requests to :data:`WORKERS` threads (idle or half-sent
connections cost a descriptor, never a thread); a connection quiet for :data:`READ_TIMEOUT` seconds is closed
(an HTTP/0.9 request, a half-open one); at most :data:`MAX_CONNECTIONS` are open. Concurrent scrapes share one
collection, kept :data:`CACHE_SECONDS`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from . import gpu as gpu_mod
from .collector import GPU_INTERVAL, MOVES_INTERVAL, Collector
from .families import Family
from .latency import LATENCY_INTERVAL
from .latency import measure as measure_latency

#: Above the 9100-9999 range of Prometheus' default port allocations, which is full (9400 is dcgm-exporter's).
DEFAULT_PORT = 10075
DEFAULT_LISTEN = f":{DEFAULT_PORT}"
#: Threads that answer complete requests (a scrape collects in milliseconds; more would only contend for the lock).
WORKERS = 4
#: Open connections at most; beyond it new ones wait in the listen backlog until quiet ones are closed.
MAX_CONNECTIONS = 2000
#: A connection that sends nothing (or not a whole request) for this long is closed.
READ_TIMEOUT = 5.0
#: Scrapes within this many seconds of a collection are answered with it (one collection for a burst of them).
CACHE_SECONDS = 1.0


def parse_listen(text: str) -> tuple[str, int]:
    """``ADDR:PORT``, ``:PORT`` (every address), ``[v6]:PORT`` → (address, port). ValueError when malformed."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected ADDR:PORT such as 127.0.0.1:{DEFAULT_PORT} or :{DEFAULT_PORT}, got {text!r}")
    host = host.strip("[]")
    return host or "0.0.0.0", int(port)


def _to_client(f: Family) -> Any:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    cls = CounterMetricFamily if f.kind == "counter" else GaugeMetricFamily
    fam = cls(f.name, f.help, labels=list(f.labels))
    for values, v in f.samples:
        fam.add_metric(list(values), v)
    return fam


class _Adapter:
    """A prometheus_client collector over :meth:`Collector.collect` (its lock keeps a scrape and the sampler
    from reading half of each other's state). A collection younger than ``cache`` seconds is served again:
    scrapes that arrive together (several Prometheus servers, a burst) wait for one collection and share it."""

    def __init__(self, collector: Collector, lock: threading.Lock, cache: float = CACHE_SECONDS) -> None:
        self.collector, self.lock, self.cache = collector, lock, cache
        self._last: tuple[float, list[Family]] | None = None
        self.collections = 0  # how many collections the scrapes made (the cache's effect, for tests and logs)

    def collect(self) -> Iterator[Any]:
        with self.lock:
            now = time.monotonic()
            if self._last is not None and now - self._last[0] < self.cache:
                fams = self._last[1]
            else:
                from ..kinds.registry import BY_KIND

                # every resource kind, as the textfile has them: a kind with no drift reads 0, not absent
                fams = self.collector.collect(resource_kinds=tuple(BY_KIND))
                self.collections += 1
                self._last = (time.monotonic(), fams)
        for f in fams:
            if f.samples:
                yield _to_client(f)


@dataclass
class Intervals:
    gpu: float = GPU_INTERVAL
    moves: float = MOVES_INTERVAL
    latency: float = LATENCY_INTERVAL  # 0: never probe memory latency


class Exporter:
    def __init__(self, collector: Collector, intervals: Intervals | None = None, latency_limits: Any = None) -> None:
        self.collector = collector
        self.latency_limits = latency_limits  # host.latency.Limits, or the probe's defaults
        self.intervals = intervals or Intervals()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.server: Any = None
        self.adapter = _Adapter(collector, self.lock)
        self._http: threading.Thread | None = None

    def registry(self) -> Any:
        from prometheus_client import CollectorRegistry
        from prometheus_client.process_collector import ProcessCollector

        reg = CollectorRegistry(auto_describe=False)
        reg.register(self.adapter)  # type: ignore[arg-type]
        ProcessCollector(registry=reg)
        return reg

    def _sampler(self) -> None:
        next_gpu = next_moves = 0.0
        next_latency = 0.0 if self.intervals.latency > 0 else float("inf")
        while not self.stop.is_set():
            now = time.monotonic()
            gpus, moves = now >= next_gpu, now >= next_moves
            if now >= next_latency:
                self._probe_latency()
                next_latency = time.monotonic() + self.intervals.latency
            try:
                # GPUs are read outside the lock: nvidia-smi dmon takes a second, scrapes must not wait for it.
                sample_gpus = gpus and self.collector.gpus_enabled
                reading = gpu_mod.read(self.collector.host) if sample_gpus else None
                with self.lock:
                    if sample_gpus:
                        self.collector.gpu = reading
                    self.collector.sample(gpus=False, refresh=True, moves=moves)
            except Exception as exc:  # a sampler that dies would freeze every series: say it, keep going
                self.collector.refresh_error = f"sampling failed: {type(exc).__name__}: {exc}"
            if gpus:
                next_gpu = now + self.intervals.gpu
            if moves:
                next_moves = now + self.intervals.moves
            self.stop.wait(max(min(next_gpu, next_moves, next_latency) - time.monotonic(), 0.05))

    def _probe_latency(self) -> None:
        """The slow schedule: seconds of pointer chasing outside the lock; scrapes serve the last reading."""
        try:
            reading = measure_latency(self.collector.host, self.latency_limits)
        except Exception as exc:  # like the sampler: say it, keep serving
            self.collector.refresh_error = f"latency probe failed: {type(exc).__name__}: {exc}"
            return
        with self.lock:
            self.collector.latency = reading

    def start(self, addr: str, port: int) -> tuple[str, int]:
        """Listen on ``addr:port`` (port 0: an ephemeral one) and start sampling. Returns where it listens."""
        import waitress
        from prometheus_client import make_wsgi_app

        _raise_open_files(MAX_CONNECTIONS + 256)
        with self.lock:
            self.collector.sample()  # the first scrape has everything
        self.server = waitress.create_server(
            make_wsgi_app(self.registry()), host=addr, port=port, threads=WORKERS, connection_limit=MAX_CONNECTIONS,
            channel_timeout=READ_TIMEOUT, cleanup_interval=1, asyncore_use_poll=True,  # poll: no FD_SETSIZE limit
            max_request_header_size=16 * 1024, max_request_body_size=0, ident="nodeagent", expose_tracebacks=False)
        threading.Thread(target=self._sampler, name="nodeagent-sampler", daemon=True).start()
        self._http = threading.Thread(target=self._serve, name="nodeagent-http", daemon=True)
        self._http.start()
        return str(self.server.effective_host), int(self.server.effective_port)

    def _serve(self) -> None:
        """waitress's loop, a quarter second at a time so that :meth:`shutdown` ends it from this thread."""
        server = self.server
        while not self.stop.is_set():
            server.asyncore.loop(timeout=0.25, map=server._map, use_poll=True, count=1)
        for channel in list(server._map.values()):
            channel.close()
        server.task_dispatcher.shutdown(cancel_pending=True, timeout=5)

    def shutdown(self) -> None:
        self.stop.set()
        if self._http is not None:
            self._http.join(timeout=10)


def _raise_open_files(want: int) -> None:
    """Lift the soft limit on open files to ``want`` (within the hard limit): each connection is a descriptor, and
    the default soft limit (1024) is below :data:`MAX_CONNECTIONS`."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
