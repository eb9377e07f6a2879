"""The :class:`Collector`: pycollect's front door."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any

import torch
from tensordict import TensorDictBase

from pycollect import _checks
from pycollect._backends import EnvSource, resolve_env
from pycollect._batch import BatchField, allocate, batch_fields, split_trajectories, to_tensordict
from pycollect._errors import CollectorClosedError, ConfigError, PolicyError, PyCollectWarning
from pycollect._policy import Policy, PolicyRunner, policy_device, resolve_device
from pycollect._rollout import EnvRunner, EpisodeRecord
from pycollect._seeding import action_rng, env_seeds
from pycollect._specs import EnvSpecs

__all__ = ["Collector"]


class Collector:
    """Collects batches of experience from environments, in TorchRL's batch format.

    Iterating yields ``TensorDict`` batches of size ``[envs_per_worker, T]`` whose last
    dimension is named ``"time"``, with the keys of TorchRL's collectors: ``observation``,
    ``action``, ``done``, ``terminated``, ``truncated``, ``("next", "observation")``,
    ``("next", "reward")``, ``("next", "done")``, ``("next", "terminated")``,
    ``("next", "truncated")``, ``("collector", "traj_ids")``, plus any extra policy outputs.
    Environments reset themselves when an episode ends: ``("next", "observation")`` holds the
    terminal observation and the next step's ``observation`` the reset one. Batches are owned
    by the caller.

    This version steps the environments in the calling process.

    Args:
        env: A gymnasium id (``"CartPole-v1"``), a backend-prefixed spec
            (``"gymnasium:CartPole-v1"``, ``"callable:package.module:make_env"``) or a factory
            callable returning a gymnasium-style env.
        policy: ``None`` for uniform random actions; a tensordict ``TensorDictModule`` (gets
            the observation TensorDict, writes ``"action"`` and optionally more keys); a
            ``torch.nn.Module`` (gets one tensor per observation field, returns the action);
            or any callable (gets the observation TensorDict, returns the action or a mapping
            with an ``"action"`` key). Outputs beyond the action are kept in the batch.
        frames_per_batch: Frames (env steps) per batch, rounded up to a multiple of
            ``envs_per_worker``.
        total_frames: Stop after this many frames; -1 collects forever.
        envs_per_worker: Environments stepped together (one policy call per step for all).
        max_frames_per_traj: Truncate a trajectory after this many steps.
        init_random_frames: Use uniform random actions until this many frames are collected.
        reset_at_each_iter: Reset every environment at the start of every batch.
        split_trajs: Yield ``[n_traj, T_max]`` batches, one trajectory per row, zero-padded,
            with a ``("collector", "mask")`` marking real steps.
        seed: Makes runs reproducible: each environment gets a distinct seed derived from it
            (see :func:`pycollect.env_seeds`) and torch's global generator is seeded with it
            when there is a policy.
        env_kwargs: Keyword arguments for the environment constructor.
        device: Device the policy runs on; defaults to the device of the policy's parameters.
        storing_device: Device batches are delivered on (default: CPU).

    Raises:
        ConfigError: A bad argument, before anything runs; subclasses say which kind
            (:class:`UnknownEnvError`, :class:`UnknownBackendError`,
            :class:`UnsupportedSpaceError`, :class:`PolicyError`).

    Example:
        >>> with Collector("CartPole-v1", frames_per_batch=256, total_frames=1024) as collector:
        ...     for batch in collector:
        ...         print(batch["next", "reward"].sum())
    """

    def __init__(
        self,
        env: str | Callable[..., Any],
        policy: Policy = None,
        *,
        frames_per_batch: int,
        total_frames: int = -1,
        envs_per_worker: int = 1,
        max_frames_per_traj: int | None = None,
        init_random_frames: int = 0,
        reset_at_each_iter: bool = False,
        split_trajs: bool = False,
        seed: int | None = None,
        env_kwargs: Mapping[str, Any] | None = None,
        device: torch.device | str | None = None,
        storing_device: torch.device | str | None = None,
    ) -> None:
        self._closed = True  # until construction succeeds, shutdown() has nothing to do
        requested_frames = _checks.positive_int("frames_per_batch", frames_per_batch)
        self.total_frames = _checks.total_frames_arg(total_frames)
        self.envs_per_worker = _checks.positive_int("envs_per_worker", envs_per_worker)
        self.max_frames_per_traj = _checks.optional_positive_int("max_frames_per_traj", max_frames_per_traj)
        self.init_random_frames = _checks.non_negative_int("init_random_frames", init_random_frames)
        self.reset_at_each_iter = bool(reset_at_each_iter)
        self.split_trajs = bool(split_trajs)
        self.seed = _checks.seed_arg(seed)
        self.storing_device = resolve_device(storing_device or "cpu", "storing_device")
        self.device = self._policy_device(policy, device)

        self.steps_per_batch = math.ceil(requested_frames / self.envs_per_worker)
        self.frames_per_batch = self.steps_per_batch * self.envs_per_worker
        if self.frames_per_batch != requested_frames:
            warnings.warn(
                f"frames_per_batch={requested_frames} is not a multiple of envs_per_worker="
                f"{self.envs_per_worker}; each batch holds {self.frames_per_batch} frames",
                PyCollectWarning,
                stacklevel=2,
            )

        self.env_source: EnvSource = resolve_env(env, env_kwargs)
        self.policy = policy
        self.policy_version = 0
        self._frames = 0
        self._batches = 0
        if self.seed is not None and policy is not None:
            torch.manual_seed(self.seed)

        envs = [self.env_source.make() for _ in range(self.envs_per_worker)]
        try:
            self.specs: EnvSpecs = self.env_source.specs(envs[0])
            policy_runner = PolicyRunner(
                policy,
                self.specs,
                self.envs_per_worker,
                self.device,
                action_rng(self.seed, self.envs_per_worker),
            )
        except BaseException:
            for built in envs:
                built.close()
            raise
        self.fields: tuple[BatchField, ...] = batch_fields(self.specs, policy_runner.outputs)
        self._runner = EnvRunner(
            envs,
            self.specs,
            policy_runner,
            env_seeds(self.seed, self.envs_per_worker),
            max_frames_per_traj=self.max_frames_per_traj,
        )
        self._closed = False

    # -- iteration -------------------------------------------------------------------------

    def __iter__(self) -> Iterator[TensorDictBase]:
        """Yield batches until ``total_frames`` is reached (forever if it is -1)."""
        while self.total_frames < 0 or self._frames < self.total_frames:
            yield self.next_batch()

    def __len__(self) -> int:
        """The number of batches, when ``total_frames`` is set."""
        if self.total_frames < 0:
            raise TypeError("len() is undefined for an endless collector (total_frames=-1)")
        return math.ceil(self.total_frames / self.frames_per_batch)

    def next_batch(self) -> TensorDictBase:
        """Collect and return one batch, regardless of ``total_frames``."""
        self._check_open()
        arrays = allocate(self.fields, self.envs_per_worker, self.steps_per_batch)
        if self.reset_at_each_iter and self._batches > 0:
            self._runner.reset()
        self._runner.rollout(arrays, random_actions=self.random_phase)
        batch: TensorDictBase = to_tensordict(arrays, self.storing_device)
        self._frames += self.frames_per_batch
        self._batches += 1
        return split_trajectories(batch) if self.split_trajs else batch

    @property
    def random_phase(self) -> bool:
        """Whether the next batch uses random actions (``policy=None`` or warm-up frames)."""
        return self.policy is None or self._frames < self.init_random_frames

    @property
    def frames(self) -> int:
        """Frames delivered so far."""
        return self._frames

    @property
    def episodes(self) -> EpisodeRecord:
        """Counts and returns of the episodes finished so far."""
        return self._runner.episodes

    # -- weights and state -----------------------------------------------------------------

    def update_policy_weights_(
        self,
        policy_or_weights: torch.nn.Module | TensorDictBase | Mapping[str, Any] | None = None,
        *,
        worker_ids: int | list[int] | None = None,
    ) -> None:
        """Make the collector act with new policy weights from now on.

        In-process the collector calls the very policy object it was given, so weights
        trained in place are already live and calling this with no argument only bumps
        :attr:`policy_version`. Given a module, a ``TensorDict`` of parameters (as from
        ``TensorDict.from_module``) or a ``state_dict``, the weights are copied into the
        collector's policy first.

        Args:
            policy_or_weights: Where to take the weights from; ``None``: the policy as it is.
            worker_ids: Which workers to update; in-process only worker 0 exists.

        Raises:
            PolicyError: Weights were given but the policy is not an ``nn.Module``.
            ConfigError: ``worker_ids`` names a worker that does not exist.
        """
        self._check_open()
        ids = [worker_ids] if isinstance(worker_ids, int) else list(worker_ids or [0])
        if any(i != 0 for i in ids):
            raise ConfigError(f"worker_ids={worker_ids!r}: this collector has one worker, index 0")
        if policy_or_weights is not None:
            target = self.policy
            if not isinstance(target, torch.nn.Module):
                raise PolicyError(f"cannot load weights into policy {type(target).__name__}: it is not an nn.Module")
            if isinstance(policy_or_weights, torch.nn.Module):
                if policy_or_weights is not target:
                    target.load_state_dict(policy_or_weights.state_dict())
            elif isinstance(policy_or_weights, TensorDictBase):
                policy_or_weights.to_module(target)
            elif isinstance(policy_or_weights, Mapping):
                target.load_state_dict(policy_or_weights)
            else:
                raise PolicyError(
                    f"policy_or_weights must be a module, a TensorDict or a state_dict, "
                    f"got {type(policy_or_weights).__name__}"
                )
        self.policy_version += 1

    def state_dict(self) -> dict[str, Any]:
        """Progress counters and policy weights, to resume with :meth:`load_state_dict`.

        Environment internals are not saved: a resumed collector starts fresh episodes.
        """
        state: dict[str, Any] = {
            "frames": self._frames,
            "batches": self._batches,
            "policy_version": self.policy_version,
            "runner": self._runner.state(),
        }
        if isinstance(self.policy, torch.nn.Module):
            state["policy_state_dict"] = self.policy.state_dict()
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved (counters, trajectory ids, policy weights)."""
        self._check_open()
        try:
            frames, batches = int(state_dict["frames"]), int(state_dict["batches"])
            version, runner = int(state_dict["policy_version"]), state_dict["runner"]
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"not a pycollect Collector state_dict: {exc!r}") from None
        if "policy_state_dict" in state_dict:
            if not isinstance(self.policy, torch.nn.Module):
                raise PolicyError("state_dict holds policy weights but this collector's policy is not an nn.Module")
            self.policy.load_state_dict(state_dict["policy_state_dict"])
        self._frames, self._batches, self.policy_version = frames, batches, version
        self._runner.load_state(runner)

    # -- lifetime --------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Close every environment. Safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        self._runner.close()

    close = shutdown

    def __enter__(self) -> Collector:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self.shutdown()

    def __repr__(self) -> str:
        return (
            f"Collector(env={self.env_source.describe()!r}, envs_per_worker={self.envs_per_worker}, "
            f"frames_per_batch={self.frames_per_batch}, total_frames={self.total_frames}, "
            f"frames={self._frames}{', closed' if self._closed else ''})"
        )

    def _check_open(self) -> None:
        if self._closed:
            raise CollectorClosedError("this Collector has been shut down")

    @staticmethod
    def _policy_device(policy: Policy, device: torch.device | str | None) -> torch.device:
        own = policy_device(policy)
        if device is None:
            return own or torch.device("cpu")
        chosen = resolve_device(device, "device")
        if own is not None and (own.type, own.index or 0) != (chosen.type, chosen.index or 0):
            raise ConfigError(
                f"device={device!r} but the policy's parameters are on {own}; move the policy "
                f"with policy.to({str(chosen)!r}) or leave device unset"
            )
        return chosen
