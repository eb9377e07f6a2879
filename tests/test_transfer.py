"""The CUDA path of a policy call (pinned staging, ``non_blocking`` copies, a stream per runner), with CUDA mocked.

This machine has no GPU, so :class:`~pycollect._rollout.transfer.CudaTransfer` runs here on the
CPU with CUDA's streams, events and pinned allocation replaced by fakes that log what is done
to them. The tests check the order of things the real device depends on (the stream waits for
the trainer's before a call, the call runs on the transfer's stream, outputs are read only
after the event that follows their copies) and that batches collected through the pinned
buffers, reused from call to call, equal those of the plain path. ``benches/gpu_check.py`` runs
the same path on a real GPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from policies import lstm_actor
from tensordict import TensorDictBase
from torch import nn

import pycollect._rollout.policy as policy_module
import pycollect._rollout.transfer as transfer_module
from pycollect import Collector
from pycollect._rollout.transfer import CudaTransfer, HostTransfer, transfer_for


class _Stream:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    def wait_stream(self, other: _Stream) -> None:
        self.log.append(f"{self.name} waits for {other.name}")


class _Event:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def record(self, stream: _Stream) -> None:
        self.log.append(f"event on {stream.name}")

    def synchronize(self) -> None:
        self.log.append("event synchronized")


class _FakeCuda:
    """Stands in for ``torch.cuda``'s streams, events and pinned memory; logs every use."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.log: list[str] = []
        self.pinned: list[torch.Tensor] = []
        self.default = _Stream("default", self.log)
        self.current = self.default
        self.non_blocking: list[bool] = []
        streams = iter(range(100))
        monkeypatch.setattr(torch.cuda, "Stream", lambda device=None: _Stream(f"side{next(streams)}", self.log))
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: self.current)
        monkeypatch.setattr(torch.cuda, "stream", self._stream)
        monkeypatch.setattr(torch.cuda, "Event", lambda: _Event(self.log))
        monkeypatch.setattr(transfer_module, "_pinned_empty", self._pinned_empty)
        original_to = torch.Tensor.to

        def to(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            if any(tensor is p for p in self.pinned):
                self.non_blocking.append(bool(kwargs.get("non_blocking")))
            return original_to(tensor, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, "to", to)

    @contextlib.contextmanager
    def _stream(self, stream: _Stream) -> Iterator[None]:
        before, self.current = self.current, stream
        self.log.append(f"on {stream.name}")
        try:
            yield
        finally:
            self.current = before
            self.log.append(f"off {stream.name}")

    def _pinned_empty(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        tensor = torch.empty(shape, dtype=dtype)
        self.pinned.append(tensor)
        self.log.append(f"pinned {tuple(shape)} {dtype}")
        return tensor


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch) -> _FakeCuda:
    return _FakeCuda(monkeypatch)


def test_transfer_for_picks_the_cuda_path_only_for_cuda_and_touches_no_cuda_when_made() -> None:
    assert type(transfer_for(torch.device("cpu"))) is HostTransfer
    assert type(transfer_for(torch.device("meta"))) is HostTransfer
    made = transfer_for(torch.device("cuda", 1))  # no GPU here: nothing CUDA may run yet
    assert isinstance(made, CudaTransfer) and made.device == torch.device("cuda", 1)


def test_inputs_are_staged_in_pinned_buffers_made_once_and_copied_without_blocking(cuda: _FakeCuda) -> None:
    transfer = CudaTransfer(torch.device("cpu"))
    for step in range(3):
        observation = np.full((4, 2), step, np.float32)
        with transfer.running():
            tensors = transfer.to_device({("observation",): observation, ("is_init",): np.ones((4, 1), bool)})
        assert torch.equal(tensors["observation",], torch.full((4, 2), float(step)))
        assert tensors["is_init",].dtype == torch.bool
    assert [entry for entry in cuda.log if entry.startswith("pinned")] == [
        "pinned (4, 2) torch.float32",
        "pinned (4, 1) torch.bool",
    ]  # made at the first call, reused by the next ones
    assert cuda.non_blocking == [True] * 6


def test_a_new_shape_gets_a_new_buffer(cuda: _FakeCuda) -> None:
    transfer = CudaTransfer(torch.device("cpu"))
    with transfer.running():
        transfer.to_device({("x",): np.zeros((2, 3), np.float32)})
        out = transfer.to_device({("x",): np.ones((5, 3), np.float32)})
    assert torch.equal(out["x",], torch.ones(5, 3))
    assert len(cuda.pinned) == 2


def test_a_call_runs_on_the_transfers_stream_after_waiting_for_the_trainers(cuda: _FakeCuda) -> None:
    transfer = CudaTransfer(torch.device("cpu"))
    seen = []
    for _ in range(2):
        with transfer.running():
            seen.append(torch.cuda.current_stream().name)  # type: ignore[attr-defined]
    assert seen == ["side0", "side0"]  # one stream, made once
    assert cuda.log == ["side0 waits for default", "on side0", "off side0"] * 2
    assert cuda.current is cuda.default


def test_outputs_on_the_device_come_back_through_pinned_buffers_after_one_event(cuda: _FakeCuda) -> None:
    transfer = CudaTransfer(torch.device("cpu"))
    with transfer.running():
        host = transfer.to_host(
            {("action",): torch.tensor([1, 0, 1]), ("logp",): torch.full((3,), -0.5), ("np",): np.zeros(3)}
        )
    assert torch.equal(host["action",], torch.tensor([1, 0, 1])) and torch.equal(host["logp",], torch.full((3,), -0.5))
    assert any(host["action",] is p for p in cuda.pinned) and any(host["logp",] is p for p in cuda.pinned)
    assert isinstance(host["np",], np.ndarray)  # not a tensor on the device: as it was
    assert cuda.log[-3:] == ["event on side0", "event synchronized", "off side0"]  # read only after the event


def test_no_output_on_the_device_needs_no_event(cuda: _FakeCuda) -> None:
    transfer = CudaTransfer(torch.device("meta"))
    with transfer.running():
        host = transfer.to_host({("action",): np.zeros(3, np.int64)})
    assert "event synchronized" not in cuda.log and isinstance(host["action",], np.ndarray)


class _Sampler(nn.Module):
    """Argmax over a linear layer, and a log-probability output kept in the batch."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(4, 2)

    def forward(self, observation: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.linear(observation)
        return {"action": logits.argmax(-1), "logp": logits.log_softmax(-1).max(-1).values}


def _batches(policy: Any, **kwargs: Any) -> list[TensorDictBase]:
    settings = {"frames_per_batch": 64, "seed": 3, "max_frames_per_traj": 11, **kwargs}
    with Collector("CartPole-v1", policy, **settings) as collector:
        return [collector.next_batch() for _ in range(3)]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "engine",
    [
        pytest.param({"num_workers": 0}, id="inprocess"),
        pytest.param({"num_workers": 2, "envs_per_worker": 2, "engine": "central"}, id="central-2-groups"),
    ],
)
@pytest.mark.parametrize("make_policy", [_Sampler, lstm_actor], ids=["module-extras", "lstm"])
def test_batches_through_the_cuda_path_equal_the_plain_paths(
    monkeypatch: pytest.MonkeyPatch, engine: dict[str, Any], make_policy: Any
) -> None:
    extra = {"exploration_type": "deterministic"}
    plain = _batches(make_policy(), **engine, **extra)
    cuda = _FakeCuda(monkeypatch)
    monkeypatch.setattr(policy_module, "transfer_for", CudaTransfer)  # the CUDA path, on the CPU
    staged = _batches(make_policy(), **engine, **extra)
    assert cuda.pinned and "event synchronized" in cuda.log  # the path was taken
    for n, (a, b) in enumerate(zip(staged, plain, strict=True)):
        assert set(a.keys(True, True)) == set(b.keys(True, True))
        for key in b.keys(True, True):
            assert torch.equal(a.get(key), b.get(key)), f"batch {n}: {key}"
