"""Live metrics of a collection: what each worker and the trainer are doing, and how fast.

Workers and the trainer count as they work, into their control blocks in the collection's
shared memory (no message per step, a few nanoseconds per count). Reading turns two readings
into rates, time splits and step-latency percentiles over a window:

- ``collector.stats().metrics`` (and a vector env's ``stats()``) in the collection's process;
- :func:`attach` from any other process of the same user (``pycollect top`` does), read-only;
- exported, on request, to Prometheus and to TensorBoard-style loggers.

See ``docs/metrics.md`` for what every figure means.
"""

from __future__ import annotations

from pycollect.metrics._attach import CollectionInfo, attach, find_collections
from pycollect.metrics._loggers import log_metrics
from pycollect.metrics._prometheus import PrometheusEndpoint, serve_prometheus
from pycollect.metrics._reading import (
    STRAGGLER_FRACTION,
    CollectionMetrics,
    MetricsReader,
    TrainerMetrics,
    WorkerMetrics,
)
from pycollect.metrics._segment import StepCounter

__all__ = [
    "STRAGGLER_FRACTION",
    "CollectionInfo",
    "CollectionMetrics",
    "MetricsReader",
    "PrometheusEndpoint",
    "StepCounter",
    "TrainerMetrics",
    "WorkerMetrics",
    "attach",
    "find_collections",
    "log_metrics",
    "serve_prometheus",
]
