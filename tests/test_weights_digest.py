"""Verified weights: a worker that acts with other bytes than those published is caught at the next batch."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from pycollect import Collector, SharedMemoryScheme, WeightsMismatchError
from pycollect.testing.envs import CountingEnv
from pycollect.testing.policies import argmax_mlp
from pycollect.weights import ReceiverContext, SenderContext, WeightReceiver, WeightSender
from pycollect.weights.digest import weights_digest
from pycollect.weights.layout import module_weights

pytestmark = pytest.mark.timeout(120)


class _LosingReceiver(WeightReceiver):
    """The shared-memory receiver, but the bytes of ``version`` arrive with one weight changed."""

    def __init__(self, inner: WeightReceiver, version: int) -> None:
        self.inner, self.version = inner, version

    def attach(self, context: ReceiverContext) -> None:
        self.inner.attach(context)

    def receive(self, module: torch.nn.Module) -> int | None:
        received = self.inner.receive(module)
        if received == self.version:
            with torch.no_grad():
                next(module.parameters()).view(-1)[0] += 1.0  # a byte the worker did not get
        return received

    def close(self) -> None:
        self.inner.close()


class _LosingSender(WeightSender):
    def __init__(self, inner: WeightSender, version: int) -> None:
        self.inner, self.version = inner, version

    def receiver(self) -> WeightReceiver:
        return _LosingReceiver(self.inner.receiver(), self.version)

    def send(self, state: Any, version: int, *, timeout_s: float) -> None:
        self.inner.send(state, version, timeout_s=timeout_s)


class LosingScheme(SharedMemoryScheme):
    """Shared memory, with one version's bytes corrupted in every worker."""

    def __init__(self, version: int) -> None:
        super().__init__()
        self.version = version

    def sender(self, context: SenderContext) -> WeightSender:
        return _LosingSender(super().sender(context), self.version)


def test_a_digest_changes_with_any_byte_and_not_otherwise() -> None:
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8))
    digest = weights_digest(module_weights(net))
    assert weights_digest(module_weights(net)) == digest
    with torch.no_grad():
        net[1].running_mean[3] += 1e-7  # a buffer counts too
    assert weights_digest(module_weights(net)) != digest


def test_every_publish_is_checked_against_what_the_workers_applied() -> None:
    act, net = argmax_mlp(2, 3)
    with Collector(CountingEnv, act, weights_from=net, num_workers=2, frames_per_batch=20, total_frames=200) as c:
        for _ in c:
            with torch.no_grad():
                net.weight.add_(0.01)
            c.update_policy_weights_()  # every version verified at the next batch: no error


def test_a_publish_a_worker_did_not_get_is_caught_in_the_next_batch() -> None:
    act, net = argmax_mlp(2, 3)
    with Collector(
        CountingEnv, act, weights_from=net, num_workers=1, frames_per_batch=10, weight_sync=LosingScheme(version=2)
    ) as c:
        c.next_batch()
        c.update_policy_weights_()  # version 1 arrives intact
        c.next_batch()
        c.update_policy_weights_()  # version 2 does not
        with pytest.raises(WeightsMismatchError, match=r"worker 0 applied weights of version 2") as caught:
            for _ in range(3):  # the worker applies it before its next rollout, at most a ring ahead
                c.next_batch()
    assert caught.value.worker == 0 and caught.value.version == 2
