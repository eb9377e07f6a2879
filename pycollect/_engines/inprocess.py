"""Collecting in the calling process: the engine of ``Collector(num_workers=0)``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorDict

from pycollect._batch.recycle import RecycledMemory
from pycollect._batch.tensordict import allocate, to_tensordict
from pycollect._engines.base import Engine, RolloutPlan, plan_rollout
from pycollect._engines.resources import BATCHES_HELD, batch_bytes, check_fits
from pycollect._rollout.runner import EnvRunner
from pycollect._rollout.seeding import env_seeds
from pycollect.config import CollectorConfig
from pycollect.envs.source import EnvSource

__all__ = ["InProcessEngine"]


class InProcessEngine(Engine):
    """Steps the environments here, one rollout per batch, into fresh (caller-owned) arrays.

    The policy is called as the very object the user passed, so weights trained in place are
    live at once; :meth:`publish_weights` has nothing to move.

    Args:
        plan: What every rollout holds.
        runner: The environments, action source and stepping loop.
        config: The collector's settings.
    """

    def __init__(self, plan: RolloutPlan, runner: EnvRunner, config: CollectorConfig) -> None:
        self.plan = plan
        self.runner = runner
        self.steps = config.steps_per_batch
        self.storing_device = torch.device(config.storing_device or "cpu")
        self.reset_at_each_iter = config.reset_at_each_iter
        self._batches = 0
        self._memory = RecycledMemory()
        self._closed = False

    @classmethod
    def start(cls, config: CollectorConfig, env_source: EnvSource, policy: Any) -> InProcessEngine:
        """Build ``envs_per_worker`` environments and check the policy on the first one's specs."""
        envs = [env_source.make()]
        try:
            plan = plan_rollout(config, env_source, envs[0], policy)
            needed = BATCHES_HELD * batch_bytes(plan.fields, config.envs_per_worker, config.steps_per_batch)
            check_fits("the in-process batches", needed, config)  # before the other envs are built
            for _ in range(config.envs_per_worker - 1):
                envs.append(env_source.make())
        except BaseException:
            for env in envs:
                env.close()
            raise
        runner = EnvRunner(
            envs,
            plan.specs,
            plan.actions,
            env_seeds(config.seed, config.envs_per_worker),
            max_frames_per_traj=config.max_frames_per_traj,
            env_name=env_source.describe(),
            info=plan.info,
        )
        return cls(plan, runner, config)

    def next_batch(self, *, random_actions: bool, policy_version: int) -> TensorDict:
        """Collect one ``[K, T]`` batch with the policy as it is now (``policy_version``)."""
        arrays = allocate(self.plan.fields, self.runner.num_envs, self.steps, self._memory)
        if self.reset_at_each_iter and self._batches > 0:
            self.runner.reset()
        self.runner.rollout(arrays, random_actions=random_actions, policy_version=policy_version)
        self._batches += 1
        return to_tensordict(arrays, self.storing_device)

    def publish_weights(self, weights: Any, version: int) -> None:
        """Nothing to do: the environments step with the very policy object in use."""

    def state(self) -> dict[str, Any]:
        """Trajectory numbering, to continue it after :meth:`load_state`."""
        return {"runner": self.runner.state()}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state`."""
        if "runner" in state:
            self.runner.load_state(state["runner"])

    def close(self) -> None:
        """Close the environments (once)."""
        if not self._closed:
            self._closed = True
            self.runner.close()
