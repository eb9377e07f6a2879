"""Hardening, second round: errors that came late or escaped the hierarchy, a probe env whose
close() hangs, durations past what the clocks take, device arguments ignored in-process, a
policy acting on a device nothing can be copied from, and the memory a shut-down collector keeps.
"""

from __future__ import annotations

import math
import os
import re
import threading
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
import torch

import pycollect.testing
from pycollect import (
    Collector,
    CollectorConfig,
    ConfigError,
    ExplicitPolicy,
    PolicyError,
    PyCollectError,
    PyCollectWarning,
    SupervisionConfig,
    TransportError,
    VectorEnvClosedError,
    make_vec,
)
from pycollect.config import MAX_SECONDS
from pycollect.testing.envs import CountingEnv
from pycollect.testing.leaks import segment_mappings
from pycollect.vector import SB3VecEnv
from pycollect.weights import ReceiverContext, SenderContext, WeightReceiver, WeightSender, WeightSyncScheme

pytestmark = pytest.mark.timeout(180)


def _unbuildable() -> CountingEnv:
    raise AssertionError("the env was built before the arguments were checked")


# -- 9. a probe env whose close() never returns ---------------------------------------------------


class HangingCloseEnv(CountingEnv):
    """Its close() blocks until the test lets it go; only in the trainer (workers are bounded)."""

    release = threading.Event()

    def close(self) -> None:
        if "PYCOLLECT_WORKER" not in os.environ:
            HangingCloseEnv.release.wait()
        super().close()


def test_a_probe_env_whose_close_hangs_does_not_hang_the_constructor() -> None:
    HangingCloseEnv.release.clear()
    try:
        with pytest.warns(PyCollectWarning, match=r"HangingCloseEnv.*close\(\) did not return within 2 s"):
            collector = Collector(HangingCloseEnv, frames_per_batch=8, num_workers=1, restart="never")
        with collector:
            assert collector.next_batch().batch_size == (1, 8)
    finally:
        HangingCloseEnv.release.set()  # lets the daemon thread that still closes the probe end


# -- 11. durations past what every clock can take -------------------------------------------------


DURATIONS = ["restart_window_s", "heartbeat_timeout_s", "startup_timeout_s"]


@pytest.mark.parametrize("value", [1e300, math.inf, MAX_SECONDS * 2])
@pytest.mark.parametrize("name", [*DURATIONS, "weight_sync_timeout_s"])
def test_durations_past_the_maximum_are_refused_before_anything_is_built(name: str, value: float) -> None:
    expected = rf"{name} must be .* at most {re.escape(f'{MAX_SECONDS:g}')} s.*got {re.escape(repr(value))}"
    with pytest.raises(ConfigError, match=expected):
        Collector(_unbuildable, frames_per_batch=8, num_workers=1, **{name: value})


def _linear_policy_collector(**settings: Any) -> Collector:
    """One worker acting with a linear function policy whose module is ``weights_from``."""
    net = torch.nn.Linear(2, 3)
    return Collector(
        CountingEnv, lambda td: net(td["observation"]).argmax(-1), weights_from=net, frames_per_batch=8, num_workers=1,
        **settings,
    )  # fmt: skip


def test_the_maximum_duration_is_taken_by_every_consumer() -> None:
    timedelta(seconds=MAX_SECONDS)  # the torch_distributed scheme's TCPStore and group timeouts
    assert MAX_SECONDS <= threading.TIMEOUT_MAX  # Event.wait, Thread.join, socket and select timeouts
    with _linear_policy_collector(
        weight_sync_timeout_s=MAX_SECONDS, **{name: MAX_SECONDS for name in DURATIONS}
    ) as collector:  # the supervisor (Rust Durations, deadlines) takes them
        collector.next_batch()
        collector.update_policy_weights_()  # the shared-memory store's reserve takes it
        assert collector.policy_version == 1
    CollectorConfig(frames_per_batch=8, supervision=SupervisionConfig(shutdown_grace_s=MAX_SECONDS))


class FailingScheme(WeightSyncScheme):
    """Publishing fails: with a pycollect error, or with whatever a plugin's code raises."""

    name = "failing"

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def sender(self, context: SenderContext) -> WeightSender:
        return _FailingSender(self.error)


class _FailingSender(WeightSender):
    def __init__(self, error: BaseException) -> None:
        self.error = error

    def receiver(self) -> WeightReceiver:
        return _NothingReceiver()

    def send(self, state: Mapping[str, torch.Tensor], version: int, *, timeout_s: float) -> None:
        raise self.error


class _NothingReceiver(WeightReceiver):
    def attach(self, context: ReceiverContext) -> None:
        pass

    def receive(self, module: torch.nn.Module) -> int | None:
        return None


@pytest.mark.parametrize(
    "error", [TransportError("every buffer is held"), OverflowError("date value out of range")], ids=type
)
def test_a_failed_publish_leaves_the_version_alone_and_raises_from_the_hierarchy(error: BaseException) -> None:
    with _linear_policy_collector(weight_sync=FailingScheme(error)) as collector:
        with pytest.raises(TransportError, match="date value out of range|every buffer is held") as info:
            collector.update_policy_weights_()
        assert collector.policy_version == 0
        assert isinstance(info.value, PyCollectError)
        if not isinstance(error, PyCollectError):
            assert "'failing'" in str(info.value) and "OverflowError" in str(info.value)


# -- 14. a policy whose actions cannot be copied to the CPU --------------------------------------


class _MetaActions(torch.nn.Module):
    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return torch.zeros(observation.shape[0], dtype=torch.long, device="meta")


class _MetaExtras(torch.nn.Module):
    def forward(self, observation: torch.Tensor) -> dict[str, torch.Tensor]:
        n = observation.shape[0]
        return {"action": torch.zeros(n, dtype=torch.long), "logits": torch.zeros(n, 3, device="meta")}


@pytest.mark.parametrize("policy", [_MetaActions, _MetaExtras])
@pytest.mark.parametrize("num_workers", [0, 1])
def test_a_policy_whose_outputs_cannot_reach_the_cpu_is_refused_at_the_check(
    policy: type[torch.nn.Module], num_workers: int
) -> None:
    with pytest.raises(PolicyError, match=r"on device meta.*cannot be copied to the CPU"):
        Collector(CountingEnv, policy(), frames_per_batch=8, num_workers=num_workers)


# -- 16. sizes that cannot fit are refused before any env is built --------------------------------


@pytest.mark.parametrize("num_workers", [0, 1])
def test_a_batch_size_that_cannot_fit_is_refused_before_any_env_is_built(num_workers: int) -> None:
    with pytest.raises(ConfigError, match=r"frames_per_batch=10000000000000.*check_resources=False"):
        Collector(_unbuildable, frames_per_batch=10**13, num_workers=num_workers)


def test_the_env_independent_bytes_per_frame_are_those_of_every_rollout() -> None:
    from pycollect._engines.resources import FIXED_FRAME_BYTES

    with Collector(CountingEnv, frames_per_batch=8) as collector:
        env_keys = {spec.key for spec in collector.specs.observation} | {("action",)}
        env_keys |= {("next", *key) for key in env_keys}
        fixed = [field for field in collector.fields if field.key not in env_keys]
        assert sum(math.prod(field.shape) * field.dtype.itemsize for field in fixed) == FIXED_FRAME_BYTES


# -- 18. device_policy in-process ----------------------------------------------------------------


@pytest.mark.parametrize("device_policy", [ExplicitPolicy(["cuda:7"]), "round_robin"])
def test_a_device_policy_in_process_warns_that_it_has_no_effect(device_policy: Any) -> None:
    with (
        pytest.warns(PyCollectWarning, match=r"device_policy=.* has no effect in-process.*policy_device="),
        Collector(CountingEnv, frames_per_batch=8, device_policy=device_policy) as collector,
    ):
        collector.next_batch()


def test_the_default_device_policy_in_process_says_nothing(recwarn: pytest.WarningsRecorder) -> None:
    with Collector(CountingEnv, frames_per_batch=8, device_policy="cpu") as collector:
        collector.next_batch()
    assert not [w for w in recwarn if issubclass(w.category, PyCollectWarning)]


# -- 19. a shut-down collector releases its segment ----------------------------------------------


def _is_segment(path: str) -> bool:
    return "memfd:pycollect" in path or ("/dev/shm/" in path and "pycollect" in path)


def _pycollect_fds() -> list[str]:
    """This process's descriptors of pycollect segments, as ``"fd -> target"`` (every memfd has one name)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed while listing
        if _is_segment(target):
            found.append(f"{fd} -> {target}")
    return found


def _new_segments(before: tuple[list[str], list[str]]) -> tuple[list[str], list[str]]:
    """The segment mappings and descriptors this process holds now that it did not hold at ``before``.

    Compared by identity, not by count: an owner an earlier test left for the garbage collector
    may let go of its own mapping at any moment while this test runs.
    """
    maps, fds = before
    return [m for m in sorted(segment_mappings()) if m not in maps], [f for f in _pycollect_fds() if f not in fds]


@pytest.mark.parametrize("zero_copy", [False, True])
def test_shutdown_releases_the_segment_while_the_collector_is_referenced(zero_copy: bool) -> None:
    before = sorted(segment_mappings()), _pycollect_fds()
    net = torch.nn.Linear(2, 3)
    collector = Collector(
        CountingEnv,
        lambda td: net(td["observation"]).argmax(-1),
        weights_from=net,
        frames_per_batch=8,
        num_workers=2,
        zero_copy=zero_copy,
    )
    batch = collector.next_batch()
    collector.update_policy_weights_()
    assert _new_segments(before)[0]
    del batch  # a zero-copy batch is a view of the segment, which keeps it mapped (safely)
    collector.shutdown()
    assert _new_segments(before) == ([], [])
    assert collector.stats().frames == 8 and len(collector.stats().workers) == 2  # what was, still told
    assert "closed" in repr(collector)


def test_a_central_collector_releases_its_segment_at_shutdown_while_referenced() -> None:
    before = sorted(segment_mappings()), _pycollect_fds()
    net = torch.nn.Linear(2, 3)
    collector = Collector(
        CountingEnv, lambda td: net(td["observation"]).argmax(-1), engine="central", frames_per_batch=8, num_workers=2
    )
    collector.next_batch()
    assert _new_segments(before)[0]
    collector.shutdown()
    assert _new_segments(before) == ([], [])
    assert collector.stats().frames == 8


@pytest.mark.parametrize("kind", ["sync", "pool", "sb3"])
def test_a_closed_vector_env_releases_its_segment_while_referenced(kind: str) -> None:
    before = sorted(segment_mappings()), _pycollect_fds()
    if kind == "sb3":
        envs: Any = SB3VecEnv(CountingEnv, 4, num_workers=2)
        envs.reset()
        observations, *_ = envs.step(np.array([envs.action_space.sample() for _ in range(4)]))
    elif kind == "sync":
        envs = make_vec(CountingEnv, 4, num_workers=2)
        envs.reset(seed=0)
        observations, *_ = envs.step(envs.action_space.sample())
    else:
        envs = make_vec(CountingEnv, 4, num_workers=2, batch_size=2)
        envs.async_reset(seed=0)
        observations = envs.recv()[0]
    assert _new_segments(before)[0]
    envs.close()
    assert _new_segments(before) == ([], [])
    assert observations.shape[0] in (2, 4)  # a result copied out stays readable after close
    if kind != "sb3":
        with pytest.raises(VectorEnvClosedError):
            envs.step(envs.action_space.sample())


def test_the_leftover_check_finds_a_mapping_kept_by_a_view_and_none_once_it_is_garbage() -> None:
    before = pycollect.testing.snapshot()
    envs = make_vec(CountingEnv, 2, num_workers=1, copy=False)
    observations, _ = envs.reset(seed=0)  # copy=False: a view of the segment, which keeps it mapped (safely)
    envs.close()
    found = pycollect.testing.leftovers(before, timeout_s=0)
    assert not found.processes and len(found.mappings) == 1
    assert "still maps" in found.describe()
    cycle: list[Any] = [observations]
    cycle.append(cycle)  # only the garbage collector frees it, which the check runs
    del observations, cycle
    assert not pycollect.testing.leftovers(before, timeout_s=0)
