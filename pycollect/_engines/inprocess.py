"""Collecting in the calling process: the engine of ``Collector(num_workers=0)``."""

from __future__ import annotations

import copy
import os
import pickle
from collections.abc import Mapping
from typing import Any

import cloudpickle
import torch
from gymnasium.vector import AutoresetMode
from tensordict import TensorDict

from pycollect._batch.device import DeviceCopier, staging_memory
from pycollect._batch.tensordict import allocate, to_tensordict
from pycollect._engines.resources import BATCHES_HELD, batch_bytes, check_fits, check_fits_before_env
from pycollect._keys import NEXT_DONE
from pycollect._rollout.observations import fill_observations, observation_pairs
from pycollect._rollout.runner import EnvRunner
from pycollect._rollout.seeding import env_seeds
from pycollect.config import CollectorConfig
from pycollect.engines import Engine, EnvCalls, RolloutPlan, close_within, plan_rollout
from pycollect.envs.batched import check_probe, is_view
from pycollect.envs.source import EnvSource
from pycollect.metrics._segment import counters_segment

__all__ = ["InProcessEngine", "on_policy_device"]


class InProcessEngine(Engine):
    """Steps the environments here, one rollout per batch, into fresh (caller-owned) arrays.

    The policy is called as the very object the user passed, so weights trained in place are
    live at once; :meth:`publish_weights` has nothing to move. Except, as in TorchRL, when
    ``policy_device`` (or ``device``) is not where the policy's parameters are: then a copy of
    the policy on ``policy_device`` is called, and :meth:`publish_weights` (from
    ``update_policy_weights_()``) loads the trained weights into it.

    Args:
        plan: What every rollout holds.
        runner: The environments, action source and stepping loop.
        config: The collector's settings.
        device_copy: The weights module of the policy's copy on ``policy_device`` (``None``:
            the user's policy is called as it is).
        env_source: What built the envs (its backend saves and restores their states).
    """

    def __init__(
        self,
        plan: RolloutPlan,
        runner: EnvRunner,
        config: CollectorConfig,
        device_copy: torch.nn.Module | None,
        env_source: EnvSource,
    ) -> None:
        self.plan = plan
        self.env_source = env_source
        self.runner = runner
        self.steps = config.steps_per_batch
        self.storing_device = config.resolved_storing_device or torch.device("cpu")
        self.reset_at_each_iter = config.reset_at_each_iter
        self.device_copy = device_copy
        self._batches = 0
        self._memory = staging_memory(self.storing_device)
        self._copier = DeviceCopier()
        self._closed = False
        self._observations = observation_pairs(spec.key for spec in plan.specs.observation)
        # The envs step here: this process's counters are worker 0's of a small segment.
        self._counters = counters_segment(runner.num_envs)
        self._meter = self._counters.worker_control(0)
        self._meter.begin_generation()
        self._meter.pid = os.getpid()
        self._meter.state = "running"
        self._meter.start_metering(runner.num_envs)
        self._metered = config.metrics

    @classmethod
    def start(
        cls, config: CollectorConfig, env_source: EnvSource, policy: Any, weights_module: torch.nn.Module | None = None
    ) -> InProcessEngine:
        """Build ``envs_per_worker`` environments and check the policy on the first one's specs."""
        frames = config.envs_per_worker * config.steps_per_batch
        check_fits_before_env(config, "the in-process batches", BATCHES_HELD * frames)
        policy, device_copy = on_policy_device(config, policy, weights_module)
        envs = [env_source.make()]
        try:
            check_probe(
                envs[0], config.envs_per_worker, AutoresetMode.SAME_STEP, config.max_frames_per_traj, "a collector"
            )
            plan = plan_rollout(config, env_source, envs[0], policy)
            needed = BATCHES_HELD * batch_bytes(plan.fields, config.envs_per_worker, config.steps_per_batch)
            check_fits("the in-process batches", needed, config)  # before the other envs are built
            if is_view(envs[0]):  # the probe was a batched env's first sub-env: the real ones are built now
                close_within(envs.pop(), env_source, config.supervision.shutdown_grace_s)
                envs.extend(env_source.make_envs(config.envs_per_worker))
            else:
                envs.extend(env_source.make_envs(config.envs_per_worker - 1))
        except BaseException:
            for env in envs:  # bounded: a close that hangs must not hide the error
                close_within(env, env_source, config.supervision.shutdown_grace_s)
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
        return cls(plan, runner, config, device_copy, env_source)

    def next_batch(self, *, random_actions: bool, policy_version: int) -> TensorDict:
        """Collect one ``[K, T]`` batch with the policy as it is now (``policy_version``).

        On a CUDA ``storing_device`` the batch is written into pinned host memory and copied
        to the device without blocking.
        """
        self._copier.settle()  # the previous batch's staging memory may be reused from here
        arrays = allocate(self.plan.fields, self.runner.num_envs, self.steps, self._memory)
        if self.reset_at_each_iter and self._batches > 0:
            self.runner.reset()
        meter = self._meter
        self.runner.rollout(
            arrays,
            random_actions=random_actions,
            policy_version=policy_version,
            on_step=meter.begin_step if self._metered else None,
            after_policy=meter.policy_done if self._metered else None,
        )
        meter.end_step()
        meter.rollout_done()
        for key, next_key in self._observations:
            fill_observations(arrays[key], arrays[next_key], arrays[NEXT_DONE])
        self._batches += 1
        td = to_tensordict(arrays)
        if self.storing_device.type == "cuda":
            return self._copier.copy(td, self.storing_device)
        return td

    def publish_weights(self, weights: Any, version: int) -> None:
        """Load ``weights`` into the policy's copy on ``policy_device``, if there is one.

        Otherwise nothing to do: the environments step with the very policy object in use.
        """
        if self.device_copy is not None and weights is not None:
            self.device_copy.load_state_dict(weights.state_dict())

    def counters(self) -> Any | None:
        """The small segment whose worker 0 counts the steps taken here."""
        return self._counters

    def state(self) -> dict[str, Any]:
        """Trajectory numbering and, where every env can be saved, the envs' and the runner's state.

        The env snapshot (pickled: envs, observations, trajectories, the random actions' and
        torch's streams) is what the next batch depends on, so a collector that loads it makes
        the batch this one would make next.
        """
        state: dict[str, Any] = {"runner": self.runner.state()}
        backend = self.env_source.backend
        if all(backend.snapshot_refusal(env) is None for env in self.runner.envs):
            snapshot = {
                "runner": self.runner.snapshot(backend.get_state),
                "torch": torch.get_rng_state().numpy().copy(),
                "batches": self._batches,
            }
            state["env_snapshot"] = pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL)
        return state

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state` (the envs too, if it holds their snapshot)."""
        if "runner" in state:
            self.runner.load_state(state["runner"])
        if "env_snapshot" in state:
            snapshot = pickle.loads(state["env_snapshot"])
            self.runner.restore(snapshot["runner"], self.env_source.backend.set_state)
            torch.set_rng_state(torch.from_numpy(snapshot["torch"]))
            self._batches = int(snapshot["batches"])

    def env_calls(self) -> EnvCalls:
        """The runner's envs, reached in this thread between batches."""
        return self.runner.group

    def close(self) -> None:
        """Close the environments (once) and let go of the batch memory kept for reuse."""
        if not self._closed:
            self._closed = True
            self._copier.settle()
            self.runner.close()
            self._memory = staging_memory(self.storing_device)  # the recycled batch buffers go now
            self._meter = self._counters = None  # the counters' segment goes with the collector's reader


def on_policy_device(
    config: CollectorConfig, policy: Any, weights_module: torch.nn.Module | None
) -> tuple[Any, torch.nn.Module | None]:
    """The policy to call, and the weights module of a copy made for ``policy_device`` (or ``None``).

    TorchRL's rule: when ``policy_device`` (or ``device``) is given and the policy's parameters
    are elsewhere, the collector calls a copy on that device and leaves the user's policy where
    it is. A function policy is copied together with its ``weights_from`` module (through
    cloudpickle, as for workers), so the copy of the function uses the moved module.
    """
    from pycollect._rollout.policy import parameters_device

    requested = config.requested_policy_device
    own = parameters_device(weights_module)
    if requested is None or own is None or own.type == "meta" or _same(own, requested):
        return policy, None  # meta: refused by plan_rollout, naming the argument
    assert weights_module is not None
    if policy is weights_module:
        moved = copy.deepcopy(weights_module).to(requested)
        return moved, moved
    function, moved = cloudpickle.loads(cloudpickle.dumps((policy, weights_module)))
    moved.to(requested)  # in place: the copied function sees its module moved
    return function, moved


def _same(a: torch.device, b: torch.device) -> bool:
    return (a.type, a.index or 0) == (b.type, b.index or 0)
