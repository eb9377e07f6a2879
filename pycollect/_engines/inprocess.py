"""Collecting in the calling process: the engine of ``Collector(num_workers=0)``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorDict

from pycollect._batch.recycle import RecycledMemory
from pycollect._batch.tensordict import BatchField, allocate, to_tensordict
from pycollect._rollout.runner import EnvRunner

__all__ = ["InProcessEngine"]


class InProcessEngine:
    """Steps the environments here, one rollout per batch, into fresh (caller-owned) arrays.

    Args:
        runner: The environments, policy and stepping loop.
        fields: The batch fields.
        steps: Steps per batch (T).
        storing_device: Where batches are delivered.
        reset_at_each_iter: Reset every environment before every batch but the first.
    """

    def __init__(
        self,
        runner: EnvRunner,
        fields: tuple[BatchField, ...],
        steps: int,
        storing_device: torch.device,
        reset_at_each_iter: bool,
    ) -> None:
        self.runner = runner
        self.fields = fields
        self.steps = steps
        self.storing_device = storing_device
        self.reset_at_each_iter = reset_at_each_iter
        self._batches = 0
        self._memory = RecycledMemory()

    def next_batch(self, random_actions: bool, policy_version: int) -> TensorDict:
        """Collect one ``[K, T]`` batch with the policy as it is now (``policy_version``)."""
        arrays = allocate(self.fields, self.runner.num_envs, self.steps, self._memory)
        if self.reset_at_each_iter and self._batches > 0:
            self.runner.reset()
        self.runner.rollout(arrays, random_actions=random_actions, policy_version=policy_version)
        self._batches += 1
        return to_tensordict(arrays, self.storing_device)

    def state(self) -> dict[str, Any]:
        """What :meth:`load_state` needs to continue trajectory numbering."""
        return self.runner.state()

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state`."""
        self.runner.load_state(state)

    def close(self) -> None:
        """Close the environments."""
        self.runner.close()
