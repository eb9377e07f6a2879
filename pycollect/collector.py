"""The :class:`Collector`: pycollect's front door."""

from __future__ import annotations

import atexit
import math
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any

import cloudpickle
import torch
from tensordict import TensorDictBase

from pycollect import config as _checks
from pycollect._batch.episodes import EpisodeRecord
from pycollect._batch.tensordict import BatchField, batch_fields, split_trajectories
from pycollect._engines.inprocess import InProcessEngine
from pycollect._engines.workers.pool import PoolOptions, WorkerPool
from pycollect._engines.workers.spec import WorkerSpec
from pycollect._rollout.actions import action_source
from pycollect._rollout.policy import Policy
from pycollect._rollout.runner import EnvRunner
from pycollect._rollout.seeding import action_rng, env_seeds
from pycollect.devices.arguments import policy_device, resolve_device
from pycollect.envs.source import EnvSource, resolve_env
from pycollect.envs.specs import EnvSpecs
from pycollect.exceptions import CollectorClosedError, ConfigError, PolicyError, PyCollectWarning
from pycollect.weights.layout import WeightsLayout

_RESTART_POLICIES = ("permanent", "transient", "never")
_LIVE: weakref.WeakSet[Collector] = weakref.WeakSet()


@atexit.register
def _shutdown_live_collectors() -> None:
    """Stop every collector's workers when the interpreter exits normally."""
    for collector in list(_LIVE):
        collector.shutdown()


__all__ = ["Collector"]


class Collector:
    """Collects batches of experience from environments, in TorchRL's batch format.

    Iterating yields ``TensorDict`` batches whose last dimension is named ``"time"``, with the
    keys of TorchRL's collectors: ``observation``, ``action``, ``done``, ``terminated``,
    ``truncated``, ``("next", "observation")``, ``("next", "reward")``, ``("next", "done")``,
    ``("next", "terminated")``, ``("next", "truncated")``, ``("collector", "traj_ids")``, plus
    any extra policy outputs. Environments reset themselves when an episode ends:
    ``("next", "observation")`` holds the terminal observation and the next step's
    ``observation`` the reset one.

    With ``num_workers=0`` the environments step in this process and batches are
    ``[envs_per_worker, T]``. With ``num_workers >= 1`` they step in supervised worker
    processes that hand whole rollouts over through shared memory: in sync mode a batch holds
    one rollout of every worker, ordered by worker (``[num_workers * envs_per_worker, T]``);
    in async mode each batch is the next finished rollout of any worker (``[envs_per_worker,
    T]``) and workers keep collecting while you train. A crashed or hung worker is restarted
    according to ``restart``; a rollout it was writing is dropped, never delivered
    half-written.

    Args:
        env: A gymnasium id (``"CartPole-v1"``), a backend-prefixed spec
            (``"gymnasium:CartPole-v1"``, ``"callable:package.module:make_env"``) or a factory
            callable returning a gymnasium-style env (picklable, for workers).
        policy: ``None`` for uniform random actions; a tensordict ``TensorDictModule`` (gets
            the observation TensorDict, writes ``"action"`` and optionally more keys); a
            ``torch.nn.Module`` (gets one tensor per observation field, returns the action);
            or any callable (gets the observation TensorDict, returns the action or a mapping
            with an ``"action"`` key). Outputs beyond the action are kept in the batch. With
            workers the policy is pickled (cloudpickle) into each of them.
        frames_per_batch: Frames (env steps) per batch, rounded up to a multiple of the
            number of environments stepped for one batch; in sync mode split across workers.
        total_frames: Stop after this many frames; -1 collects forever.
        envs_per_worker: Environments stepped together (one policy call per step for all).
        num_workers: Worker processes; 0 steps the environments in this process.
        sync: With workers: one rollout of every worker per batch (True), or the next
            finished rollout of any worker (False).
        zero_copy: With workers: yield views of the shared-memory slots instead of copies.
            A zero-copy batch is valid only until the next batch is requested; copy what you
            keep (``batch.clone()``).
        max_frames_per_traj: Truncate a trajectory after this many steps.
        init_random_frames: Use uniform random actions until this many frames are collected.
        reset_at_each_iter: Reset every environment at the start of every batch.
        split_trajs: Yield ``[n_traj, T_max]`` batches, one trajectory per row, zero-padded,
            with a ``("collector", "mask")`` marking real steps.
        seed: Makes runs reproducible: environment ``i`` of worker ``w`` gets its own seed
            derived from it (see :func:`pycollect.env_seeds`), and torch's generator is
            seeded from it when there is a policy.
        env_kwargs: Keyword arguments for the environment constructor.
        device: Device the policy runs on in-process; defaults to the device of its
            parameters. Worker processes run the policy on the CPU.
        storing_device: Device batches are delivered on (default: CPU).
        restart: With workers: ``"permanent"`` (restart after any end), ``"transient"``
            (only after a crash or hang) or ``"never"``.
        max_restarts: Restarts allowed per worker within ``restart_window_s``; past that the
            collector raises :class:`WorkerCrashedError`.
        restart_window_s: The sliding window for ``max_restarts``.
        heartbeat_timeout_s: A worker whose heartbeat stops for this long counts as hung.
        startup_timeout_s: How long a new worker may take to its first heartbeat.

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
        num_workers: int = 0,
        sync: bool = True,
        zero_copy: bool = False,
        max_frames_per_traj: int | None = None,
        init_random_frames: int = 0,
        reset_at_each_iter: bool = False,
        split_trajs: bool = False,
        seed: int | None = None,
        env_kwargs: Mapping[str, Any] | None = None,
        device: torch.device | str | None = None,
        storing_device: torch.device | str | None = None,
        restart: str = "permanent",
        max_restarts: int = 3,
        restart_window_s: float = 60.0,
        heartbeat_timeout_s: float = 30.0,
        startup_timeout_s: float = 120.0,
    ) -> None:
        self._closed = True  # until construction succeeds, shutdown() has nothing to do
        requested_frames = _checks.positive_int("frames_per_batch", frames_per_batch)
        self.total_frames = _checks.total_frames_arg(total_frames)
        self.envs_per_worker = _checks.positive_int("envs_per_worker", envs_per_worker)
        self.num_workers = _checks.non_negative_int("num_workers", num_workers)
        self.sync = bool(sync)
        self.zero_copy = bool(zero_copy)
        self.max_frames_per_traj = _checks.optional_positive_int("max_frames_per_traj", max_frames_per_traj)
        self.init_random_frames = _checks.non_negative_int("init_random_frames", init_random_frames)
        self.reset_at_each_iter = bool(reset_at_each_iter)
        self.split_trajs = bool(split_trajs)
        self.seed = _checks.seed_arg(seed)
        self.storing_device = resolve_device(storing_device or "cpu", "storing_device")
        self.device = self._policy_device(policy, device)
        options = self._pool_options(restart, max_restarts, restart_window_s, heartbeat_timeout_s, startup_timeout_s)
        if self.num_workers and self.device.type != "cpu":
            raise ConfigError(
                f"device={str(self.device)!r}: worker processes run the policy on the CPU; "
                "use num_workers=0 to run it on another device"
            )
        if self.zero_copy and not self.num_workers:
            raise ConfigError("zero_copy=True needs num_workers >= 1 (in-process batches are never copied)")

        rows = self.envs_per_worker * (self.num_workers if self.num_workers and self.sync else 1)
        self.steps_per_batch = math.ceil(requested_frames / rows)
        self.frames_per_batch = self.steps_per_batch * rows
        if self.frames_per_batch != requested_frames:
            warnings.warn(
                f"frames_per_batch={requested_frames} is not a multiple of the {rows} environments "
                f"stepped per batch (envs_per_worker={self.envs_per_worker}"
                f"{f', num_workers={self.num_workers}' if rows != self.envs_per_worker else ''}); "
                f"each batch holds {self.frames_per_batch} frames",
                PyCollectWarning,
                stacklevel=2,
            )

        self.env_source: EnvSource = resolve_env(env, env_kwargs)
        self.policy = policy
        self.policy_version = 0
        self.episodes = EpisodeRecord()
        self._frames = 0
        self._batches = 0
        if self.seed is not None and policy is not None:
            torch.manual_seed(self.seed)

        self._engine: InProcessEngine | WorkerPool
        if self.num_workers:
            self._engine = self._start_workers(options)
        else:
            self._engine = self._in_process()
        self._closed = False
        _LIVE.add(self)

    def _in_process(self) -> InProcessEngine:
        envs = [self.env_source.make() for _ in range(self.envs_per_worker)]
        try:
            self.specs: EnvSpecs = self.env_source.specs(envs[0])
            actions = action_source(
                self.policy, self.specs, self.envs_per_worker, self.device, action_rng(self.seed, self.envs_per_worker)
            )
        except BaseException:
            for built in envs:
                built.close()
            raise
        self.fields: tuple[BatchField, ...] = batch_fields(self.specs, actions.outputs)
        runner = EnvRunner(
            envs,
            self.specs,
            actions,
            env_seeds(self.seed, self.envs_per_worker),
            max_frames_per_traj=self.max_frames_per_traj,
        )
        return InProcessEngine(runner, self.fields, self.steps_per_batch, self.storing_device, self.reset_at_each_iter)

    def _start_workers(self, options: PoolOptions) -> WorkerPool:
        # One environment here reports the specs and lets the policy be checked on an
        # example batch, so that bad input fails before any worker starts.
        probe = self.env_source.make()
        try:
            self.specs = self.env_source.specs(probe)
        finally:
            probe.close()
        actions = action_source(
            self.policy, self.specs, self.envs_per_worker, self.device, action_rng(self.seed, self.envs_per_worker)
        )
        self.fields = batch_fields(self.specs, actions.outputs)
        try:
            cloudpickle.dumps(self.env_source)  # fail here, naming the env, not in a worker
        except Exception as exc:
            raise ConfigError(
                f"env {self.env_source.describe()!r} cannot be pickled for worker processes: {exc}"
            ) from exc
        try:
            policy_blob = None if self.policy is None else cloudpickle.dumps(self.policy)
        except Exception as exc:
            raise PolicyError(
                f"policy {type(self.policy).__name__} cannot be pickled for worker processes: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        weights = WeightsLayout.from_module(self.policy) if isinstance(self.policy, torch.nn.Module) else None
        spec = WorkerSpec(
            env_source=self.env_source,
            policy=policy_blob,
            num_workers=self.num_workers,
            envs_per_worker=self.envs_per_worker,
            steps=self.steps_per_batch,
            seed=self.seed,
            max_frames_per_traj=self.max_frames_per_traj,
            init_random_frames=self.init_random_frames,
            reset_at_each_iter=self.reset_at_each_iter,
            fields=tuple(field.key for field in self.fields),
            weights=weights,
            layout_hash=0,  # filled in once the segment exists
        )
        return WorkerPool(
            spec,
            self.fields,
            sync=self.sync,
            zero_copy=self.zero_copy,
            storing_device=self.storing_device,
            options=options,
            weights=weights,
        )

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
        engine = self._engine
        if isinstance(engine, InProcessEngine):
            batch: TensorDictBase = engine.next_batch(self.random_phase, self.policy_version)
        else:
            batch = engine.next_batch()
        self._frames += batch.numel()
        self._batches += 1
        self.episodes.update(batch)
        return split_trajectories(batch) if self.split_trajs else batch

    @property
    def random_phase(self) -> bool:
        """Whether the next batch uses random actions (``policy=None`` or warm-up frames)."""
        return self.policy is None or self._frames < self.init_random_frames

    @property
    def frames(self) -> int:
        """Frames delivered so far."""
        return self._frames

    def stats(self) -> dict[str, Any]:
        """Frames, batches, and with workers their state, restarts and last error.

        Returns:
            ``{"frames", "batches", "policy_version", "episodes", "workers", "restarts",
            "last_error"}``; ``workers`` lists per worker its state, pid, generation,
            restarts, last exit and last error text (empty in-process).
        """
        pool = self._engine if isinstance(self._engine, WorkerPool) else None
        supervision = pool.stats() if pool is not None else {"workers": [], "restarts": 0, "last_error": None}
        return {
            "frames": self._frames,
            "batches": self._batches,
            "policy_version": self.policy_version,
            "episodes": self.episodes.count,
            "workers": supervision["workers"],
            "restarts": supervision["restarts"],
            "last_error": supervision["last_error"],
        }

    # -- weights and state -----------------------------------------------------------------

    def update_policy_weights_(
        self,
        policy_or_weights: torch.nn.Module | TensorDictBase | Mapping[str, Any] | None = None,
        *,
        worker_ids: int | list[int] | None = None,
    ) -> None:
        """Make the collector act with new policy weights from now on.

        Given a module, a ``TensorDict`` of parameters (as from ``TensorDict.from_module``)
        or a ``state_dict``, the weights are first copied into the collector's policy. Then,
        with workers, the policy's weights are published to the shared-memory weights store
        and every worker loads them before its next rollout (never in the middle of one).
        In-process the collector calls the very policy object it was given, so weights
        trained in place are already live. Either way :attr:`policy_version` goes up by one.

        Args:
            policy_or_weights: Where to take the weights from; ``None``: the policy as it is.
            worker_ids: Which workers to update; all of them always receive the published
                weights, so only ``None`` or every index is accepted with workers.

        Raises:
            PolicyError: Weights were given but the policy is not an ``nn.Module``.
            ConfigError: ``worker_ids`` names a worker that does not exist.
        """
        self._check_open()
        valid = list(range(max(self.num_workers, 1)))
        ids = [worker_ids] if isinstance(worker_ids, int) else list(worker_ids or valid)
        if any(i not in valid for i in ids):
            raise ConfigError(f"worker_ids={worker_ids!r}: this collector's workers are {valid}")
        if policy_or_weights is not None:
            self._load_weights(policy_or_weights)
        self.policy_version += 1
        if isinstance(self._engine, WorkerPool) and isinstance(self.policy, torch.nn.Module):
            self._engine.publish_weights(self.policy, self.policy_version)

    def _load_weights(self, source: torch.nn.Module | TensorDictBase | Mapping[str, Any]) -> None:
        target = self.policy
        if not isinstance(target, torch.nn.Module):
            raise PolicyError(f"cannot load weights into policy {type(target).__name__}: it is not an nn.Module")
        if isinstance(source, torch.nn.Module):
            if source is not target:
                target.load_state_dict(source.state_dict())
        elif isinstance(source, TensorDictBase):
            source.to_module(target)
        elif isinstance(source, Mapping):
            target.load_state_dict(source)
        else:
            raise PolicyError(
                f"policy_or_weights must be a module, a TensorDict or a state_dict, got {type(source).__name__}"
            )

    def state_dict(self) -> dict[str, Any]:
        """Progress counters and policy weights, to resume with :meth:`load_state_dict`.

        Environment internals are not saved: a resumed collector starts fresh episodes.
        """
        state: dict[str, Any] = {
            "frames": self._frames,
            "batches": self._batches,
            "policy_version": self.policy_version,
        }
        if isinstance(self._engine, InProcessEngine):
            state["runner"] = self._engine.state()
        if isinstance(self.policy, torch.nn.Module):
            state["policy_state_dict"] = self.policy.state_dict()
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved (counters, trajectory ids, policy weights)."""
        self._check_open()
        try:
            frames, batches = int(state_dict["frames"]), int(state_dict["batches"])
            version = int(state_dict["policy_version"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"not a pycollect Collector state_dict: {exc!r}") from None
        self._frames, self._batches, self.policy_version = frames, batches, version
        if "policy_state_dict" in state_dict:
            self._load_weights(state_dict["policy_state_dict"])
            if isinstance(self._engine, WorkerPool) and isinstance(self.policy, torch.nn.Module):
                self._engine.publish_weights(self.policy, self.policy_version)
        if isinstance(self._engine, InProcessEngine) and "runner" in state_dict:
            self._engine.load_state(state_dict["runner"])

    # -- lifetime --------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop the workers (or close the environments). Safe to call more than once.

        Workers get the shutdown flag and a grace period to finish, then SIGTERM, then
        SIGKILL; every process they started in their process group goes with them, and all
        are reaped before this returns.
        """
        if self._closed:
            return
        self._closed = True
        _LIVE.discard(self)
        self._engine.close()

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
        mode = f"num_workers={self.num_workers}, sync={self.sync}, " if self.num_workers else ""
        return (
            f"Collector(env={self.env_source.describe()!r}, {mode}envs_per_worker={self.envs_per_worker}, "
            f"frames_per_batch={self.frames_per_batch}, total_frames={self.total_frames}, "
            f"frames={self._frames}{', closed' if self._closed else ''})"
        )

    def _check_open(self) -> None:
        if self._closed:
            raise CollectorClosedError("this Collector has been shut down")

    @staticmethod
    def _pool_options(restart: str, max_restarts: int, window: float, heartbeat: float, startup: float) -> PoolOptions:
        if restart not in _RESTART_POLICIES:
            raise ConfigError(f"restart={restart!r}: expected one of {', '.join(_RESTART_POLICIES)}")
        _checks.non_negative_int("max_restarts", max_restarts)
        for name, value in (
            ("restart_window_s", window),
            ("heartbeat_timeout_s", heartbeat),
            ("startup_timeout_s", startup),
        ):
            _checks.positive_seconds(name, value)
        return PoolOptions(
            restart=restart,
            max_restarts=max_restarts,
            restart_window_s=window,
            heartbeat_timeout_s=heartbeat,
            startup_timeout_s=startup,
        )

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
