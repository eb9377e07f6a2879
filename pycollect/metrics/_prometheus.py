"""A collection's metrics on a Prometheus endpoint, read when Prometheus scrapes.

Nothing polls: each scrape reads the counters once and turns them into the families below, on a
registry of the endpoint's own (never ``prometheus_client``'s global one, so two endpoints, or an
application's own metrics, never mix). ``prometheus_client`` is an optional dependency
(``pip install "pycollect-rl[prometheus]"``), imported when an endpoint is started. The names, and
the field each one is, are the table of ``docs/metrics.md``.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from pycollect.exceptions import ConfigError
from pycollect.metrics._reading import CollectionMetrics, MetricsReader

__all__ = ["PrometheusEndpoint", "serve_prometheus"]

WORKER_STATES = ("empty", "starting", "running", "exiting", "failed")
"""The states of a worker: ``pycollect_worker_state`` has a series for each (1: the worker's)."""


@dataclass(frozen=True)
class _Metric:
    """One figure: its family's name (no ``_total``), type, field, help and fixed labels."""

    name: str
    kind: str  # "counter" or "gauge"
    figure: str  # the field of TrainerMetrics or WorkerMetrics
    help: str
    labels: dict[str, str] = field(default_factory=dict)


_TRAINER = (
    _Metric("pycollect_trainer_batches", "counter", "batches", "Batches delivered to the trainer."),
    _Metric("pycollect_trainer_frames", "counter", "frames", "Frames delivered to the trainer."),
    _Metric("pycollect_trainer_batches_per_second", "gauge", "batches_per_s", "Batches delivered per second."),
    _Metric("pycollect_trainer_frames_per_second", "gauge", "frames_per_s", "Frames delivered per second."),
    _Metric("pycollect_trainer_wait_seconds", "counter", "wait_time_s", "Seconds the trainer waited for data."),
    _Metric("pycollect_trainer_wait_ratio", "gauge", "wait_share", "Share of the trainer's time spent waiting."),
    _Metric("pycollect_trainer_policy_seconds", "counter", "policy_time_s", "Seconds in the trainer's policy."),
    _Metric("pycollect_trainer_policy_version", "gauge", "policy_version", "Version of the weights last published."),
    _Metric("pycollect_trainer_weight_publishes", "counter", "publishes", "Weight publishes."),
    _Metric("pycollect_trainer_weight_publish_seconds", "counter", "publish_time_s", "Seconds spent publishing."),
    _Metric("pycollect_trainer_weight_publish_bytes", "counter", "publish_bytes", "Bytes of weights published."),
    _Metric("pycollect_trainer_weights_bytes", "gauge", "last_publish_bytes", "Bytes of the last publish."),
    _Metric("pycollect_trainer_policy_lag_mean", "gauge", "lag_mean", "Mean policy lag of the frames delivered."),
    _Metric("pycollect_trainer_policy_lag_min", "gauge", "lag_min", "Smallest policy lag of the last batch."),
    _Metric("pycollect_trainer_policy_lag_max", "gauge", "lag_max", "Largest policy lag of the last batch."),
    _Metric("pycollect_trainer_frames_dropped", "counter", "frames_dropped", "Frames dropped for their policy lag."),
)

_TIME = "Seconds the worker spent, by activity (env, policy, wait)."
_SHARE = "Share of the worker's time, by activity (env, policy, wait)."
_LATENCY = "Step latency (policy and envs) at a quantile."
_WORKER = (
    _Metric("pycollect_worker_straggler", "gauge", "straggler", "1: running far below the median worker's rate."),
    _Metric("pycollect_worker_pid", "gauge", "pid", "Process id of the worker."),
    _Metric("pycollect_worker_generation", "gauge", "generation", "Generation running (1 until a restart)."),
    _Metric("pycollect_worker_restarts", "counter", "restarts", "Restarts of the worker."),
    _Metric(
        "pycollect_worker_restarts_replayed",
        "counter",
        "restarts_replayed",
        "Restarts after which the lost rollout was replayed from the snapshot: nothing lost.",
    ),
    _Metric(
        "pycollect_worker_restarts_cut",
        "counter",
        "restarts_cut",
        "Restarts after which the worker started afresh, its trajectories cut.",
    ),
    _Metric("pycollect_worker_steps", "counter", "steps", "Steps taken (each moves every env of the worker)."),
    _Metric("pycollect_worker_frames", "counter", "frames", "Frames made (env steps of all its envs)."),
    _Metric("pycollect_worker_rollouts", "counter", "rollouts", "Rollouts handed over."),
    _Metric("pycollect_worker_time_seconds", "counter", "env_time_s", _TIME, {"activity": "env"}),
    _Metric("pycollect_worker_time_seconds", "counter", "policy_time_s", _TIME, {"activity": "policy"}),
    _Metric("pycollect_worker_time_seconds", "counter", "wait_time_s", _TIME, {"activity": "wait"}),
    _Metric("pycollect_worker_policy_version", "gauge", "policy_version", "Version of the weights applied last."),
    _Metric("pycollect_worker_weight_updates", "counter", "weight_updates", "Times new weights were applied."),
    _Metric("pycollect_worker_frames_per_second", "gauge", "frames_per_s", "Frames made per second."),
    _Metric("pycollect_worker_steps_per_second", "gauge", "steps_per_s", "Steps taken per second."),
    _Metric("pycollect_worker_step_latency_seconds", "gauge", "step_p50_s", _LATENCY, {"quantile": "0.5"}),
    _Metric("pycollect_worker_step_latency_seconds", "gauge", "step_p99_s", _LATENCY, {"quantile": "0.99"}),
    _Metric("pycollect_worker_time_ratio", "gauge", "env_share", _SHARE, {"activity": "env"}),
    _Metric("pycollect_worker_time_ratio", "gauge", "policy_share", _SHARE, {"activity": "policy"}),
    _Metric("pycollect_worker_time_ratio", "gauge", "wait_share", _SHARE, {"activity": "wait"}),
    _Metric("pycollect_worker_heartbeat_age_seconds", "gauge", "heartbeat_age_s", "Seconds since the last heartbeat."),
    _Metric("pycollect_worker_ring_filled", "gauge", "ring_filled", "Rollouts handed over, not yet taken."),
    _Metric("pycollect_worker_ring_slots", "gauge", "ring_slots", "Slots of the worker's ring."),
)


def _read_function(source: Any) -> Callable[[], CollectionMetrics | None]:
    """How to read ``source``'s metrics now."""
    if isinstance(source, MetricsReader):
        return source.read
    stats = getattr(source, "stats", None)
    if callable(stats):
        return lambda: stats().metrics
    if callable(source):
        return source  # type: ignore[no-any-return]
    raise ConfigError(
        f"serve_prometheus: cannot read metrics from a {type(source).__name__}: give a Collector, a vector env "
        "(anything with .stats().metrics), a MetricsReader, or a function returning CollectionMetrics"
    )


def _families(metrics: CollectionMetrics) -> Iterator[Any]:
    """The Prometheus families of ``metrics`` (``prometheus_client`` imported)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

    info = InfoMetricFamily("pycollect_collection", "The collection: its trainer's pid and what it is.")
    info.add_metric([], {"pid": str(metrics.pid), "description": metrics.description})
    yield info
    yield GaugeMetricFamily("pycollect_window_seconds", "Seconds the rates are over.", value=metrics.window_s)

    states = GaugeMetricFamily(
        "pycollect_worker_state", "1 for the worker's state, 0 for the others.", labels=["worker", "state"]
    )
    families: dict[str, Any] = {}
    for metric in (*_TRAINER, *_WORKER):
        if metric.name not in families:  # the rows of one family (activity="env", "policy", ...) share it
            kind = CounterMetricFamily if metric.kind == "counter" else GaugeMetricFamily
            per_worker = ["worker"] if metric in _WORKER else []
            families[metric.name] = kind(metric.name, metric.help, labels=[*per_worker, *metric.labels])
    for metric in _TRAINER:
        value = float(getattr(metrics.trainer, metric.figure))
        families[metric.name].add_metric(list(metric.labels.values()), value)
    for worker in metrics.workers:
        index = str(worker.worker)
        for state in (*WORKER_STATES, *(() if worker.state in WORKER_STATES else (worker.state,))):
            states.add_metric([index, state], float(state == worker.state))
        for metric in _WORKER:
            value = getattr(worker, metric.figure)
            if value is not None:  # a figure the worker does not have (yet) is left out, not 0
                families[metric.name].add_metric([index, *metric.labels.values()], float(value))
    yield states
    yield from families.values()


class _Collector:
    """The ``prometheus_client`` collector of one endpoint: reads its source at each scrape."""

    def __init__(self, read: Callable[[], CollectionMetrics | None]) -> None:
        self._read: Callable[[], CollectionMetrics | None] | None = read
        self._lock = threading.Lock()  # two scrapes at once read one at a time

    def collect(self) -> Iterator[Any]:
        with self._lock:
            metrics = self._read() if self._read is not None else None
        if metrics is not None:
            yield from _families(metrics)

    def forget(self) -> None:
        """Let go of the source (the endpoint closed)."""
        with self._lock:
            self._read = None


class PrometheusEndpoint:
    """A running Prometheus endpoint (from :func:`serve_prometheus`); a context manager.

    Attributes:
        host: The address it listens on, as bound (``"127.0.0.1"`` unless another was named).
        port: The port it listens on (the one the system chose, when asked for port 0).
        url: Where Prometheus scrapes it: ``http://HOST:PORT/metrics``.
    """

    def __init__(self, server: Any, thread: threading.Thread, collector: _Collector) -> None:
        self._server: Any = server
        self._thread = thread
        self._collector = collector
        address = server.socket.getsockname()
        self.host: str = address[0]
        self.port: int = address[1]
        self.url = f"http://{f'[{self.host}]' if ':' in self.host else self.host}:{self.port}/metrics"

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._server is None

    def close(self) -> None:
        """Stop serving and free the port (idempotent)."""
        if self._server is None:
            return
        server, self._server = self._server, None
        server.shutdown()  # serve_forever returns
        server.server_close()  # the listening socket is closed: the port is free
        self._thread.join(timeout=10)
        self._collector.forget()

    def __enter__(self) -> PrometheusEndpoint:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PrometheusEndpoint({self.url!r}{', closed' if self.closed else ''})"


def serve_prometheus(source: Any, port: int, *, host: str = "127.0.0.1") -> PrometheusEndpoint:
    """Serve a collection's metrics to Prometheus at ``http://HOST:PORT/metrics``, until closed.

    Each scrape reads the metrics then (nothing polls in between); rates are over the time since
    the previous reading, at most ``window_s`` of the source's reader. The metric names are those
    of ``docs/metrics.md``. The server runs in a daemon thread of this process.

    Args:
        source: What to read: a ``Collector``, a vector env (anything whose ``stats()`` has
            ``.metrics``), a :class:`MetricsReader` (e.g. from :func:`attach`), or a function
            with no arguments returning :class:`CollectionMetrics` (or ``None``: nothing yet).
        port: The TCP port to listen on; 0: one the system chooses (:attr:`PrometheusEndpoint.port`).
        host: The address to listen on. Loopback by default, so only this machine can scrape;
            name another (``"0.0.0.0"``: every interface) to be scraped from elsewhere. The
            endpoint has no authentication.

    Returns:
        The running endpoint: ``close()`` it (or use it as a context manager) to stop.

    Raises:
        ConfigError: ``prometheus_client`` is not installed (``pip install
            "pycollect-rl[prometheus]"``), ``port`` is not a port number, the port is in use,
            the host cannot be listened on, or ``source`` is none of the above.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError(f"serve_prometheus: port must be an integer from 0 to 65535, got {port!r}")
    read = _read_function(source)
    try:
        from prometheus_client import CollectorRegistry, start_http_server
    except ImportError as exc:
        raise ConfigError('serve_prometheus needs prometheus_client: pip install "pycollect-rl[prometheus]"') from exc
    collector = _Collector(read)
    registry = CollectorRegistry(auto_describe=False)  # the endpoint's own: never the global registry
    registry.register(collector)
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(f"serve_prometheus: {host}:{port} is in use (choose another port)") from exc
        raise ConfigError(f"serve_prometheus: cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    return PrometheusEndpoint(server, thread, collector)
