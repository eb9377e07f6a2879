"""Exporting a collection's metrics: the Prometheus endpoint and the TensorBoard/logger adapter.

The metric names come from the table of docs/metrics.md, so the page and the endpoint cannot drift:
every documented metric is served, nothing undocumented is, and each row's field is what is served.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import psutil
import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from pycollect import Collector, ConfigError, make_vec
from pycollect.metrics import (
    CollectionMetrics,
    MetricsReader,
    PrometheusEndpoint,
    TrainerMetrics,
    WorkerMetrics,
    log_metrics,
    serve_prometheus,
)
from pycollect.metrics._segment import counters_segment

pytestmark = pytest.mark.timeout(60)

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"
_TICKED = re.compile(r"`([^`]+)`")
_CLASSES = {"CollectionMetrics": CollectionMetrics, "TrainerMetrics": TrainerMetrics, "WorkerMetrics": WorkerMetrics}


class Row(NamedTuple):
    """One row of the guide's table of metrics."""

    name: str
    type: str
    labels: tuple[str, ...]  # label names, fixed ones included
    fixed: dict[str, str]  # labels with the one value this row is about (activity="env")
    fields: tuple[tuple[str, str], ...]  # (class name, field name)


def documented() -> list[Row]:
    """The rows of the table: ``| `name` | labels | type | unit | fields | meaning |``."""
    rows = []
    for line in GUIDE.read_text().splitlines():
        if not line.startswith("| `pycollect_"):
            continue
        name, labels_cell, kind, _unit, fields_cell, _meaning = (cell.strip() for cell in line.strip("|").split("|"))
        labels, fixed = [], {}
        for label in _TICKED.findall(labels_cell):
            key, _, value = label.partition("=")
            labels.append(key)
            if value:
                fixed[key] = value.strip('"')
        fields = tuple((owner, field) for owner, _, field in (f.partition(".") for f in _TICKED.findall(fields_cell)))
        rows.append(Row(name.strip("`"), kind, tuple(labels), fixed, fields))
    return rows


ROWS = documented()


def _worker(w: int, **changes: Any) -> WorkerMetrics:
    figures: dict[str, Any] = {
        "worker": w,
        "state": "running",
        "pid": 4000 + w,
        "generation": 2 + w,
        "restarts": 1 + w,
        "steps": 1000 + w,
        "frames": 8000 + w,
        "rollouts": 31 + w,
        "env_time_s": 1.5 + w,
        "policy_time_s": 0.25 + w,
        "wait_time_s": 0.125 + w,
        "policy_version": 7 + w,
        "weight_updates": 6 + w,
        "frames_per_s": 800.5 + w,
        "steps_per_s": 100.25 + w,
        "step_p50_s": 0.001 + w,
        "step_p99_s": 0.004 + w,
        "env_share": 0.5,
        "policy_share": 0.25 + w / 10,
        "wait_share": 0.25 - w / 10,
        "heartbeat_age_s": 0.02 + w,
        "ring_filled": 1 + w,
        "ring_slots": 4,
        "straggler": w == 1,
    }
    return WorkerMetrics(**{**figures, **changes})


FIXED = CollectionMetrics(
    pid=1234,
    description='gymnasium:CartPole-v1 (workers, 2 workers x 4 envs) "quoted"',
    window_s=9.5,
    trainer=TrainerMetrics(
        batches=40,
        frames=10240,
        batches_per_s=3.5,
        frames_per_s=896.0,
        wait_time_s=2.25,
        wait_share=0.375,
        publishes=39,
        publish_time_s=0.0625,
        publish_bytes=39 * 1096,
        last_publish_bytes=1096,
        policy_version=39,
        policy_time_s=0.75,
        lag_mean=0.5,
        lag_min=0,
        lag_max=2,
        frames_dropped=256,
    ),
    workers=(_worker(0), _worker(1)),  # worker 1: the straggler
)


def scrape(endpoint: PrometheusEndpoint) -> dict[str, Any]:
    """The endpoint's families, by name, parsed with prometheus_client's own parser."""
    with urllib.request.urlopen(endpoint.url, timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def samples(families: dict[str, Any]) -> list[Sample]:
    return [sample for family in families.values() for sample in family.samples]


def the_sample(found: list[Sample], name: str, labels: dict[str, str]) -> Sample:
    (sample,) = [s for s in found if s.name == name and labels.items() <= s.labels.items()]
    return sample


def _family_name(row: Row) -> str:
    return row.name.removesuffix("_total") if row.type == "counter" else row.name


@pytest.fixture
def fixed_endpoint() -> Iterator[PrometheusEndpoint]:
    with serve_prometheus(lambda: FIXED, 0) as endpoint:
        yield endpoint


# -- the guide's table --------------------------------------------------------------------


def test_the_guide_documents_every_figure_once() -> None:
    assert len(ROWS) >= 30, "the table of docs/metrics.md was not found"
    named = [field for row in ROWS for field in row.fields]
    assert len(named) == len(set(named)), "a field in two rows"
    for cls_name, cls in _CLASSES.items():
        expected = {f.name for f in dataclasses.fields(cls)} - {"worker", "trainer", "workers"}
        assert {field for owner, field in named if owner == cls_name} == expected, cls_name
    for row in ROWS:
        assert row.type in ("counter", "gauge"), row
        assert row.name.endswith("_total") == (row.type == "counter"), row
        assert ("worker" in row.labels) == row.name.startswith("pycollect_worker_"), row


# -- Prometheus -----------------------------------------------------------------------------


def test_a_scrape_parses_and_serves_exactly_the_documented_metrics(fixed_endpoint: PrometheusEndpoint) -> None:
    families = scrape(fixed_endpoint)
    assert {_family_name(row) for row in ROWS} == set(families)
    for row in ROWS:
        assert families[_family_name(row)].type == row.type, row.name
    assert {s.name for s in samples(families)} == {row.name for row in ROWS}


def test_each_metric_is_the_field_the_guide_says(fixed_endpoint: PrometheusEndpoint) -> None:
    found = samples(scrape(fixed_endpoint))
    for row in ROWS:
        (owner, field), *_ = row.fields
        if row.name == "pycollect_collection_info":
            sample = the_sample(found, row.name, {})
            assert sample.value == 1 and sample.labels == {"pid": "1234", "description": FIXED.description}
            continue
        if owner != "WorkerMetrics":
            value = getattr(FIXED if owner == "CollectionMetrics" else FIXED.trainer, field)
            assert the_sample(found, row.name, row.fixed).value == value, row.name
            continue
        for worker in FIXED.workers:
            labels = {**row.fixed, "worker": str(worker.worker)}
            if field == "state":  # one series per state: 1 for the worker's own
                series = {
                    s.labels["state"]: s.value
                    for s in found
                    if s.name == row.name and s.labels["worker"] == labels["worker"]
                }
                assert series == {state: float(state == worker.state) for state in series}
                assert {"empty", "starting", "running", "exiting", "failed"} <= set(series)
                continue
            assert the_sample(found, row.name, labels).value == float(getattr(worker, field)), (row.name, labels)


def test_figures_a_worker_does_not_have_are_left_out_not_zero() -> None:
    idle = dataclasses.replace(
        FIXED, workers=(_worker(0, pid=None, step_p50_s=None, step_p99_s=None, heartbeat_age_s=None),)
    )
    with serve_prometheus(lambda: idle, 0) as endpoint:
        found = samples(scrape(endpoint))
    names = {s.name for s in found}
    assert "pycollect_worker_pid" not in names and "pycollect_worker_heartbeat_age_seconds" not in names
    assert "pycollect_worker_step_latency_seconds" not in names
    assert the_sample(found, "pycollect_worker_frames_total", {"worker": "0"}).value == 8000


def test_a_collection_without_figures_yet_serves_no_samples() -> None:
    with serve_prometheus(lambda: None, 0) as endpoint:
        assert samples(scrape(endpoint)) == []


def _fabricated_segment() -> Any:
    """A two-worker segment in this process, its counters written by hand."""
    from pycollect._native import _core

    segment = _core.Segment.create(
        [("unused", "uint8", ())],
        n_workers=2,
        envs_per_worker=4,
        steps=1,
        slots_per_worker=2,
        weights_capacity=0,
        weights_buffers=3,
        backing="auto",
    )
    segment.describe("fabricated (2 workers x 4 envs)")
    return segment


def _count(segment: Any) -> None:
    """Two workers' steps, a batch and a publish, as an engine would count them."""
    for w, steps in ((0, 5), (1, 3)):
        control = segment.worker_control(w)
        control.begin_generation()
        control.state = "running"
        control.pid = os.getpid()
        control.start_metering(4)
        for _ in range(steps):
            control.begin_step()
            control.policy_done()
            control.end_step()
        control.rollout_done()
    segment.count_batch(32, 1_000_000, 16, 0, 1, 8)
    segment.count_publish(1, 4096, 500_000)


def test_a_scrape_reads_the_counters_at_scrape_time() -> None:
    segment = _fabricated_segment()
    reader = MetricsReader(segment.watch(), window_s=10.0)  # its first reading: the window starts here
    _count(segment)
    with serve_prometheus(reader, 0) as endpoint:
        found = samples(scrape(endpoint))
        assert the_sample(found, "pycollect_trainer_frames_total", {}).value == 32
        assert the_sample(found, "pycollect_trainer_batches_total", {}).value == 1
        assert the_sample(found, "pycollect_trainer_frames_dropped_total", {}).value == 8
        assert the_sample(found, "pycollect_trainer_policy_lag_max", {}).value == 1
        assert the_sample(found, "pycollect_trainer_policy_lag_mean", {}).value == 0.5  # 16 versions over 32 frames
        assert the_sample(found, "pycollect_trainer_frames_per_second", {}).value > 0
        assert the_sample(found, "pycollect_trainer_weight_publishes_total", {}).value == 1
        assert the_sample(found, "pycollect_trainer_weight_publish_bytes_total", {}).value == 4096
        assert the_sample(found, "pycollect_trainer_weight_publish_seconds_total", {}).value == pytest.approx(5e-4)
        assert the_sample(found, "pycollect_trainer_policy_version", {}).value == 1
        for w, steps in ((0, 5), (1, 3)):
            labels = {"worker": str(w)}
            assert the_sample(found, "pycollect_worker_steps_total", labels).value == steps
            assert the_sample(found, "pycollect_worker_frames_total", labels).value == 4 * steps
            assert the_sample(found, "pycollect_worker_rollouts_total", labels).value == 1
            assert the_sample(found, "pycollect_worker_state", {**labels, "state": "running"}).value == 1
            assert the_sample(found, "pycollect_worker_pid", labels).value == os.getpid()
            assert the_sample(found, "pycollect_worker_step_latency_seconds", {**labels, "quantile": "0.99"}).value > 0
        info = the_sample(found, "pycollect_collection_info", {})
        assert info.labels == {"pid": str(os.getpid()), "description": "fabricated (2 workers x 4 envs)"}

        segment.count_batch(64, 0, 0, 0, 0, 0)  # counted after the first scrape: the next one sees it
        segment.worker_control(1).state = "failed"
        found = samples(scrape(endpoint))
        assert the_sample(found, "pycollect_trainer_frames_total", {}).value == 96
        assert the_sample(found, "pycollect_worker_state", {"worker": "1", "state": "failed"}).value == 1
        assert the_sample(found, "pycollect_worker_state", {"worker": "1", "state": "running"}).value == 0
    del reader
    segment.shutdown()


def test_it_binds_to_loopback_by_default_and_reports_the_port_it_got() -> None:
    with serve_prometheus(lambda: FIXED, 0) as endpoint:
        assert endpoint.port > 0 and endpoint.host == "127.0.0.1"
        assert endpoint.url == f"http://127.0.0.1:{endpoint.port}/metrics"
        listening = [
            c.laddr
            for c in psutil.Process().net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == endpoint.port
        ]
        assert [address.ip for address in listening] == ["127.0.0.1"]
        assert "pycollect_trainer_frames" in scrape(endpoint)


def test_a_host_is_used_when_named() -> None:
    with serve_prometheus(lambda: FIXED, 0, host="localhost") as endpoint:
        assert endpoint.host in ("127.0.0.1", "::1")
        assert "pycollect_trainer_frames" in scrape(endpoint)


def _listening_socket(port: int = 0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


def test_a_port_in_use_is_a_config_error_naming_port_and_host() -> None:
    with _listening_socket() as taken:
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"127\.0\.0\.1:{port}.*in use"):
            serve_prometheus(lambda: FIXED, port)


def test_close_frees_the_port_for_another_endpoint_and_for_any_socket() -> None:
    endpoint = serve_prometheus(lambda: FIXED, 0)
    port = endpoint.port
    scrape(endpoint)  # a connection was served: the server side of it may linger in TIME_WAIT
    endpoint.close()
    endpoint.close()  # idempotent
    with pytest.raises(OSError):
        urllib.request.urlopen(endpoint.url, timeout=2)
    with serve_prometheus(lambda: FIXED, port) as again:
        assert again.port == port and "pycollect_trainer_frames" in scrape(again)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as every server binds
        sock.bind(("127.0.0.1", port))
        sock.listen()


@pytest.mark.parametrize("port", [-1, 65536, "9464", True, 1.5])
def test_a_port_must_be_a_port_number(port: Any) -> None:
    with pytest.raises(ConfigError, match="port"):
        serve_prometheus(lambda: FIXED, port)


def test_an_unknown_host_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no-such-host.invalid"):
        serve_prometheus(lambda: FIXED, 0, host="no-such-host.invalid")


def test_a_source_that_is_none_of_the_kinds_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="int"):
        serve_prometheus(42, 0)


def test_without_prometheus_client_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import prometheus_client fails
    with pytest.raises(ConfigError, match=re.escape('pip install "pycollect-rl[prometheus]"')):
        serve_prometheus(lambda: FIXED, 0)


# -- loggers --------------------------------------------------------------------------------


def expected_scalars(metrics: CollectionMetrics, prefix: str = "pycollect") -> dict[str, float]:
    scalars = {}
    for name, value in vars(metrics.trainer).items():
        scalars[f"{prefix}/trainer/{name}"] = float(value)
    for worker in metrics.workers:
        for name, value in vars(worker).items():
            if name not in ("worker", "pid", "state") and value is not None:
                scalars[f"{prefix}/worker_{worker.worker}/{name}"] = float(value)
    return scalars


class FakeWriter:
    def __init__(self) -> None:
        self.calls: list[tuple[str, float, int]] = []

    def add_scalar(self, tag: str, scalar_value: float, global_step: int | None = None) -> None:
        self.calls.append((tag, scalar_value, global_step))  # type: ignore[arg-type]


class FakeTorchRLLogger:
    def __init__(self) -> None:
        self.calls: list[tuple[str, float, int]] = []

    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        self.calls.append((name, value, step))  # type: ignore[arg-type]


class FakeRun:
    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, float], int]] = []

    def log(self, data: dict[str, float], step: int | None = None) -> None:
        self.calls.append((data, step))  # type: ignore[arg-type]


def test_log_metrics_writes_every_figure_to_a_summary_writer() -> None:
    writer = FakeWriter()
    log_metrics(writer, FIXED, 7)
    assert {tag: value for tag, value, _ in writer.calls} == expected_scalars(FIXED)
    assert len(writer.calls) == len(expected_scalars(FIXED)) and {step for *_, step in writer.calls} == {7}
    assert ("pycollect/worker_1/straggler", 1.0, 7) in writer.calls
    assert ("pycollect/trainer/frames_per_s", 896.0, 7) in writer.calls


def test_log_metrics_writes_to_a_log_scalar_logger_with_a_prefix() -> None:
    logger = FakeTorchRLLogger()
    log_metrics(logger, FIXED, 3, prefix="collect")
    assert {name: value for name, value, _ in logger.calls} == expected_scalars(FIXED, "collect")
    assert {step for *_, step in logger.calls} == {3}


def test_log_metrics_writes_one_dict_to_a_wandb_style_run() -> None:
    run = FakeRun()
    log_metrics(run, FIXED, 11)
    ((data, step),) = run.calls
    assert data == expected_scalars(FIXED) and step == 11


def test_log_metrics_leaves_out_what_a_worker_does_not_have() -> None:
    idle = dataclasses.replace(FIXED, workers=(_worker(0, step_p50_s=None, heartbeat_age_s=None),))
    run = FakeRun()
    log_metrics(run, idle, 0)
    ((data, _),) = run.calls
    assert "pycollect/worker_0/step_p50_s" not in data and "pycollect/worker_0/heartbeat_age_s" not in data
    assert data["pycollect/worker_0/step_p99_s"] == 0.004


def test_log_metrics_refuses_an_object_that_logs_nothing() -> None:
    with pytest.raises(ConfigError, match=r"list.*add_scalar.*log_scalar.*log"):
        log_metrics([], FIXED, 0)


def test_log_metrics_into_a_real_tensorboard_event_file(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(log_dir=str(tmp_path)) as writer:
        log_metrics(writer, FIXED, 1)
        log_metrics(writer, FIXED, 2)
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert tags == set(expected_scalars(FIXED))
    frames = events.Scalars("pycollect/trainer/frames_per_s")
    assert [(e.step, e.value) for e in frames] == [(1, 896.0), (2, 896.0)]


# -- real collections ------------------------------------------------------------------------


def _argmax(net: torch.nn.Module) -> Callable[[Any], torch.Tensor]:
    def act(td: Any) -> torch.Tensor:
        actions: torch.Tensor = net(td["observation"]).argmax(-1)
        return actions

    return act


@pytest.mark.timeout(120)
def test_a_real_collector_is_served_while_it_collects() -> None:
    policy = torch.nn.Linear(4, 2)
    with (
        Collector(
            env="CartPole-v1",
            policy=_argmax(policy),
            weights_from=policy,
            num_workers=2,
            envs_per_worker=2,
            frames_per_batch=64,
            total_frames=640,
        ) as collector,
        serve_prometheus(collector, 0) as endpoint,
    ):
        for i, _ in enumerate(collector, start=1):
            collector.update_policy_weights_()
            if i == 5:
                found = samples(scrape(endpoint))
                assert the_sample(found, "pycollect_trainer_frames_total", {}).value == 5 * 64
                assert the_sample(found, "pycollect_trainer_policy_version", {}).value == 5
                for w in ("0", "1"):
                    assert the_sample(found, "pycollect_worker_frames_total", {"worker": w}).value >= 2 * 64
                    assert the_sample(found, "pycollect_worker_state", {"worker": w, "state": "running"}).value == 1
                info = the_sample(found, "pycollect_collection_info", {})
                assert info.labels["pid"] == str(os.getpid()) and "CartPole-v1" in info.labels["description"]
        metrics = collector.stats().metrics
        assert metrics is not None
        writer = FakeWriter()
        log_metrics(writer, metrics, 10)
        tags = {tag for tag, *_ in writer.calls}
        assert {"pycollect/trainer/frames", "pycollect/worker_0/frames_per_s", "pycollect/worker_1/env_share"} <= tags


@pytest.mark.timeout(120)
def test_a_vector_env_is_served_through_its_stats() -> None:
    env = make_vec("CartPole-v1", num_envs=4, num_workers=2)
    try:
        with serve_prometheus(env, 0) as endpoint:
            env.reset(seed=0)
            for _ in range(50):
                env.step(np.zeros(4, dtype=np.int64))
            found = samples(scrape(endpoint))
        assert the_sample(found, "pycollect_trainer_batches_total", {}).value == 50
        assert [the_sample(found, "pycollect_worker_frames_total", {"worker": w}).value for w in "01"] == [100, 100]
    finally:
        env.close()


def test_the_trainer_only_segment_of_an_in_process_collection_reads() -> None:
    segment = counters_segment(envs=2)
    segment.count_batch(10, 0, 0, 0, 0, 0)
    with serve_prometheus(MetricsReader(segment.watch(), workers=0), 0) as endpoint:
        found = samples(scrape(endpoint))
    assert the_sample(found, "pycollect_trainer_frames_total", {}).value == 10
    assert not [s for s in found if s.name.startswith("pycollect_worker_")]
    segment.shutdown()
