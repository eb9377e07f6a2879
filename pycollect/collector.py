"""The :class:`Collector`: pycollect's front door."""

from __future__ import annotations

import contextlib
import math
import os
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from pycollect import _lifetime, plugins
from pycollect._batch.episodes import EpisodeRecord
from pycollect._batch.split import mark_rollout_ends, split_trajectories, stack_workers
from pycollect._checkpoints import load_checkpoint, save_checkpoint
from pycollect._keys import POLICY_LAG, POLICY_VERSION
from pycollect._native import _core
from pycollect._rollout.policy import Policy, add_group_dims
from pycollect._rollout.seeding import torch_seed
from pycollect.config import CollectorConfig
from pycollect.envs.source import EnvSource
from pycollect.exceptions import (
    CollectorClosedError,
    ConfigError,
    PolicyError,
    PyCollectError,
    PyCollectWarning,
    TransportError,
)
from pycollect.metrics import CollectionMetrics
from pycollect.metrics._segment import TrainerCounter
from pycollect.weights.layout import WeightsLayout

if TYPE_CHECKING:
    from pycollect._core import WorkerEvent, WorkerStats
    from pycollect.engines import Engine, EngineFactory, EnvCalls
    from pycollect.envs.specs import EnvSpecs, Field

__all__ = ["Collector", "CollectorStats"]

_DEFAULT = CollectorConfig(frames_per_batch=1)  # for comparing a field with its default


@dataclass(frozen=True)
class CollectorStats:
    """A snapshot of a collector's progress and, with workers, of their supervision.

    Attributes:
        frames: Frames delivered so far.
        batches: Batches delivered so far.
        policy_version: The collector's policy version.
        episodes: Episodes finished so far.
        workers: Per worker: state, pid, generation, restarts, last exit and last error
            (empty in-process).
        events: The most recent supervision events, oldest first: every start, exit,
            failed spawn, scheduled restart and give-up, with the worker and generation.
        actors: Per remote actor, with an engine that runs its workers in actors (the ``ray``
            engine's ``pycollect_ray.ActorStats``: node, pid, restarts, ...); empty otherwise.
        metrics: Rates, time splits, step latencies and policy lag of the trainer and of each
            worker over the last 10 seconds (see :mod:`pycollect.metrics`); after shutdown,
            the last ones read.
    """

    frames: int
    batches: int
    policy_version: int
    episodes: int
    workers: tuple[WorkerStats, ...]
    events: tuple[WorkerEvent, ...]
    actors: tuple[Any, ...] = ()
    metrics: CollectionMetrics | None = None

    @property
    def restarts(self) -> int:
        """Worker restarts so far, over all workers."""
        return sum(worker.restarts for worker in self.workers)

    @property
    def last_error(self) -> str | None:
        """The error text a worker wrote last (type, message, traceback), if any."""
        errors = [worker.last_error for worker in self.workers if worker.last_error]
        return errors[-1] if errors else None


class Collector:
    """Collects batches of experience from environments, in TorchRL's batch format.

    Iterating yields ``TensorDict`` batches whose last dimension is named ``"time"``, with the
    keys of TorchRL's collectors: ``observation``, ``action``, ``done``, ``terminated``,
    ``truncated``, ``("next", "observation")``, ``("next", "reward")``, ``("next", "done")``,
    ``("next", "terminated")``, ``("next", "truncated")``, ``("collector", "traj_ids")``,
    ``policy_version``, plus any extra policy outputs. Environments reset themselves when an
    episode ends: ``("next", "observation")`` holds the terminal observation and the next
    step's ``observation`` the reset one.

    With ``num_workers=0`` the environments step in this process and batches are
    ``[envs_per_worker, T]``. With ``num_workers >= 1`` they step in supervised worker
    processes that hand whole rollouts over through shared memory: in sync mode a batch holds
    one rollout of every worker, ordered by worker (``[num_workers * envs_per_worker, T]``);
    in async mode each batch is the next finished rollout of any worker (``[envs_per_worker,
    T]``) and workers keep collecting while you train. A crashed or hung worker is restarted
    according to ``restart``; a rollout it was writing is dropped, never delivered
    half-written. With ``engine="central"`` the workers only step the environments and this
    process runs the policy once per step for all of them, on ``policy_device``
    (docs/central.md); the batches are the same.

    Every setting is a field of :class:`~pycollect.CollectorConfig` (or of its
    :class:`~pycollect.SupervisionConfig`), documented, defaulted and checked there, before
    any environment is built or any worker starts. Pass a whole config, name fields as keyword
    overrides, or both (overrides win)::

        Collector("CartPole-v1", frames_per_batch=256, num_workers=2, max_restarts=5)
        Collector("CartPole-v1", config=CollectorConfig(frames_per_batch=256, num_workers=2))

    Args:
        env: A gymnasium id (``"CartPole-v1"``), a backend-prefixed spec
            (``"gymnasium:CartPole-v1"``, ``"callable:package.module:make_env"``, or the
            prefix of any installed env-backend plugin such as ``"dm_control:cheetah-run"``)
            or a factory callable returning a gymnasium-style env (picklable, for workers), or
            a batched env (a gymnasium ``VectorEnv``, EnvPool, a
            :class:`~pycollect.envs.batched.BatchedEnv`) of ``envs_per_worker`` sub-envs. A
            list, one entry per worker, gives each worker its own (a heterogeneous pool, on
            the ``workers`` and ``central`` engines; every entry must fill the same batches).
        policy: ``None`` for uniform random actions; a tensordict ``TensorDictModule`` (gets
            the observation TensorDict, writes ``"action"`` and optionally more keys); a
            ``torch.nn.Module`` (gets one tensor per observation field, returns the action);
            or any callable (gets the observation TensorDict, returns the action or a mapping
            with an ``"action"`` key). Outputs beyond the action are kept in the batch. With
            workers the policy is pickled (cloudpickle) into each of them.
        config: The settings, whole (``None``: made of ``overrides`` alone, which must then
            include ``frames_per_batch``).
        env_kwargs: Keyword arguments for the environment constructor; a list of them, one per
            worker, gives each worker its own.
        weights_from: The module whose weights ``update_policy_weights_()`` sends to the
            workers when the policy is not itself that module, e.g. a function over a network
            (``policy=lambda td: net(td["observation"]).argmax(-1), weights_from=net``). The
            function and the module are pickled together, so in each worker the function uses
            the module the new weights are loaded into. Default: the policy, if it is an
            ``nn.Module``.
        replay_buffer: A TorchRL replay buffer (anything with ``extend``): every batch extends
            it (as it comes, after ``postproc``) and iteration yields ``None``, as TorchRL's
            collectors do; ``next_batch()`` extends it too and returns the batch.
        postproc: Called on every batch before it is yielded or stored (e.g. TorchRL's
            ``MultiStep``, or ``lambda td: td.reshape(-1)`` for a one-dimensional buffer).
        resume: Continue an interrupted run: a checkpoint directory (its newest checkpoint), a
            checkpoint file, or a :meth:`state_dict`; loaded with :meth:`load_state_dict`
            before the first batch (docs/faults.md).
        **overrides: Fields of :class:`~pycollect.CollectorConfig` or
            :class:`~pycollect.SupervisionConfig` by name (``frames_per_batch=256``,
            ``num_workers=2``, ``restart="never"``), applied on top of ``config``.

    Raises:
        ConfigError: A bad argument, before anything runs; subclasses say which kind
            (:class:`UnknownEnvError`, :class:`UnknownBackendError`,
            :class:`UnknownSchemeError`, :class:`UnknownDevicePolicyError`,
            :class:`UnsupportedSpaceError`, :class:`PolicyError`, :class:`EnvCreationError`).
        PluginError: An installed plugin fails to import or register, or a plugin's scheme,
            device policy or engine raises in its constructor.

    Example:
        >>> with Collector("CartPole-v1", frames_per_batch=256, total_frames=1024) as collector:
        ...     for batch in collector:
        ...         print(batch["next", "reward"].sum())
    """

    def __init__(
        self,
        env: str | Callable[..., Any] | EnvSource | Sequence[Any],
        policy: Policy = None,
        *,
        config: CollectorConfig | None = None,
        env_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        weights_from: torch.nn.Module | None = None,
        replay_buffer: Any = None,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        resume: str | os.PathLike[str] | Mapping[str, Any] | None = None,
        **overrides: Any,
    ) -> None:
        self._closed = True  # until construction succeeds, shutdown() has nothing to do
        given = CollectorConfig.from_settings(config, **overrides)
        self.config, self.env_source = plugins.resolve(given, env, env_kwargs)
        config = self.config
        _check_snapshots_wanted(config)
        frames_per_batch = given.frames_per_batch
        if config.batch_frames != frames_per_batch:
            workers = f", num_workers={config.num_workers}" if config.rows != config.envs_per_worker else ""
            warnings.warn(
                f"frames_per_batch={frames_per_batch} is not a multiple of the {config.rows} environments "
                f"stepped per batch (envs_per_worker={config.envs_per_worker}{workers}); "
                f"each batch holds {config.batch_frames} frames",
                PyCollectWarning,
                stacklevel=2,
            )
        if config.total_frames > 0 and config.total_frames % config.batch_frames:
            batches = math.ceil(config.total_frames / config.batch_frames)
            warnings.warn(
                f"total_frames ({config.total_frames}) is not exactly divisible by frames_per_batch "
                f"({config.batch_frames}): the collector delivers {batches} batches, "
                f"{batches * config.batch_frames} frames ({batches * config.batch_frames - config.total_frames} more)",
                PyCollectWarning,
                stacklevel=2,
            )
        if not given.num_workers and given.engine is None and given.weight_sync is not None:
            warnings.warn(
                f"weight_sync={_describe_choice(given.weight_sync)} has no effect in-process (num_workers=0): "
                "the collector calls the very policy object you train",
                PyCollectWarning,
                stacklevel=2,
            )
        if not given.num_workers and given.engine is None and given.device_policy != _DEFAULT.device_policy:
            warnings.warn(
                f"device_policy={_describe_choice(given.device_policy)} has no effect in-process (num_workers=0): it "
                "places worker processes; choose where the policy runs with policy_device= (or device=) and "
                "where batches arrive with storing_device=",
                PyCollectWarning,
                stacklevel=2,
            )
        self.policy = policy
        self.weights_module = _weights_module(policy, weights_from)
        if replay_buffer is not None and not callable(getattr(replay_buffer, "extend", None)):
            raise ConfigError(
                f"replay_buffer must have an extend() method (a TorchRL ReplayBuffer), got {replay_buffer!r}"
            )
        if postproc is not None and not callable(postproc):
            raise ConfigError(f"postproc must be callable (e.g. TorchRL's MultiStep), got {postproc!r}")
        self.replay_buffer = replay_buffer
        self.postproc = postproc
        self._warned_no_weights = False
        self.policy_version = 0
        self.episodes = EpisodeRecord()
        self._frames = 0
        self._batches = 0
        if policy is not None and (seed := torch_seed(config.seed)) is not None:
            torch.manual_seed(seed)  # in-process: the stream of worker 0's first generation
        factory = cast("EngineFactory", config.engine)  # resolved: an instance
        self._engine: Engine = factory.start(config, self.env_source, policy, self.weights_module)
        self._resumable: dict[str, Any] | None = None  # with a checkpoint_dir: the state after the last batch
        self._engine_busy = False  # a batch or a state under way: a SIGTERM's checkpoint must not call the engine
        try:
            self._counter = TrainerCounter(self._engine.counters(), self._description())
            self._closed = False
            if resume is not None:
                self.load_state_dict(resume if isinstance(resume, Mapping) else load_checkpoint(resume))
        except BaseException:
            self._closed = True
            self._engine.close()
            raise
        _lifetime.track(self)  # shut down at interpreter exit and on SIGTERM; forgotten by a fork

    # -- what was decided at construction ----------------------------------------------------

    @property
    def specs(self) -> EnvSpecs:
        """The environment's fields, as the env backend reported them."""
        return self._engine.plan.specs

    @property
    def fields(self) -> tuple[Field, ...]:
        """Every array of a batch (before ``split_trajs``), with shapes and dtypes."""
        return self._engine.plan.fields

    @property
    def frames_per_batch(self) -> int:
        """Frames each batch holds (``frames_per_batch`` rounded up to whole steps)."""
        return self.config.batch_frames

    @property
    def steps_per_batch(self) -> int:
        """Steps per environment and batch (T)."""
        return self.config.steps_per_batch

    @property
    def total_frames(self) -> int:
        """Frames to collect (-1: forever)."""
        return self.config.total_frames

    @property
    def num_workers(self) -> int:
        """Worker processes (0: in-process)."""
        return self.config.num_workers

    @property
    def envs_per_worker(self) -> int:
        """Environments stepped together."""
        return self.config.envs_per_worker

    # -- iteration -------------------------------------------------------------------------

    def __iter__(self) -> Iterator[TensorDictBase | None]:
        """Yield batches until ``total_frames`` is reached (forever if it is -1).

        With a ``replay_buffer`` each batch extends it and ``None`` is yielded, as TorchRL does.
        """
        while self.total_frames < 0 or self._frames < self.total_frames:
            batch = self.next_batch()
            yield None if self.replay_buffer is not None else batch

    def __len__(self) -> int:
        """The number of batches, when ``total_frames`` is set."""
        if self.total_frames < 0:
            raise TypeError("len() is undefined for an endless collector (total_frames=-1)")
        return math.ceil(self.total_frames / self.frames_per_batch)

    def next_batch(self) -> TensorDictBase:
        """Collect and return one batch, regardless of ``total_frames``.

        In order: each group of agents gets its agent dimension in its sub-TensorDicts' batch size
        (:attr:`~pycollect.envs.EnvSpecs.group_sizes`), episodes are counted (from the true
        episode ends), ``set_truncated`` marks rollout ends, ``cat_results="stack"`` reshapes,
        ``split_trajs`` splits, ``postproc`` runs, and a ``replay_buffer`` is extended with the
        result, which is also returned.
        """
        self._check_open()
        with self._using_engine():
            return self._next_batch()

    def _next_batch(self) -> TensorDictBase:
        config = self.config
        batch = self._next_fresh_batch()
        add_group_dims(batch, self._engine.plan.specs.group_sizes)  # [K, T, n_agents]: TorchRL's groups
        self._frames += batch.numel()
        self._batches += 1
        self.episodes.update(batch)
        if config.set_truncated:
            mark_rollout_ends(batch, self._engine.plan.specs.done_groups)
        if config.cat_results == "stack":
            batch = stack_workers(batch, config.num_workers)
        if config.split_trajs:
            batch = split_trajectories(batch)
        if self.postproc is not None:
            batch = self.postproc(batch)
        if self.replay_buffer is not None:
            self.replay_buffer.extend(batch)
        if config.checkpoint_dir is not None:
            self._resumable = resumable = self._progress_state()
            if config.checkpoint_every and self._batches % config.checkpoint_every == 0:
                self._write_checkpoint(dict(resumable))
        return batch

    def _next_fresh_batch(self) -> TensorDictBase:
        """The engine's next batch, counted; with ``max_policy_lag``, the next one recent enough."""
        config = self.config
        while True:
            began = time.perf_counter_ns()
            batch: TensorDictBase = self._engine.next_batch(
                random_actions=self.random_phase, policy_version=self.policy_version
            )
            waited = time.perf_counter_ns() - began
            versions = _versions(batch)
            limit, latest = config.max_policy_lag, self.policy_version
            if limit is not None and versions is not None and versions.size and latest - versions.min() > limit:
                self._counter.batch(0, waited, None, self.policy_version, dropped=batch.numel())
                continue
            self._counter.batch(batch.numel(), waited, versions, self.policy_version)
            if config.policy_lag_key and (recorded := batch.get(POLICY_VERSION, None)) is not None:
                batch.set(POLICY_LAG, self.policy_version - recorded)
            return batch

    @property
    def random_phase(self) -> bool:
        """Whether the next batch uses random actions (``policy=None`` or warm-up frames)."""
        return self.policy is None or self._frames < self.config.init_random_frames

    @property
    def frames(self) -> int:
        """Frames delivered so far."""
        return self._frames

    def stats(self) -> CollectorStats:
        """Progress counters and, with workers, each worker's supervision state and recent events."""
        supervision = self._engine.supervision()
        return CollectorStats(
            frames=self._frames,
            batches=self._batches,
            policy_version=self.policy_version,
            episodes=self.episodes.count,
            workers=supervision.workers,
            events=supervision.events,
            actors=supervision.actors,
            metrics=self._counter.read(),
        )

    def _description(self) -> str:
        """What this collection is, as ``pycollect top`` titles it."""
        engine = _engine_name(self.config)
        envs = f"{self.envs_per_worker} envs"
        where = f"{self.num_workers} workers x {envs}" if self.num_workers else envs
        return f"{self.env_source.describe()} ({engine}, {where})"

    # -- reaching the envs ----------------------------------------------------------------

    def env_call(self, name: str, *args: Any, indices: Sequence[int] | None = None, **kwargs: Any) -> list[Any]:
        """Call method ``name`` of each env, where the env lives, and return the results.

        gymnasium's ``VectorEnv.call`` (SB3's ``env_method``) on a running collector: the
        attribute is found through the env's wrappers; one that is not callable is returned as
        it is. In worker processes, each worker runs the call between two of its rollouts (see
        docs/env-calls.md for when its effect shows in the batches).

        Args:
            name: The env attribute to call.
            *args: Its positional arguments (pickled to the workers).
            indices: The envs, numbered as the rows of a sync batch: env ``i`` is worker
                ``i // envs_per_worker``'s env ``i % envs_per_worker``. ``None``: every env.
            **kwargs: Its keyword arguments.

        Returns:
            One result per env named, in the order of ``indices``.

        Raises:
            ConfigError: An index out of range, arguments that cannot be pickled (nothing was
                sent), or an engine that does not reach its envs (``engine="device"``).
            Exception: What an env raised, once every worker has answered (the workers go on).
            WorkerCrashedError: A worker was given up on while the call waited.
        """
        return self._env_calls().call(name, args, kwargs, indices)

    def env_get_attr(self, name: str, *, indices: Sequence[int] | None = None) -> list[Any]:
        """The attribute ``name`` of each env (through its wrappers), as :meth:`env_call` gives it.

        Args:
            name: The env attribute.
            indices: The envs (see :meth:`env_call`); ``None``: every env.

        Raises:
            ConfigError, Exception: As :meth:`env_call`.
        """
        return self._env_calls().get_attr(name, indices)

    def env_set_attr(self, name: str, values: Any, *, indices: Sequence[int] | None = None) -> None:
        """Set the attribute ``name`` of each env (through its wrappers), as gymnasium's ``VectorEnv.set_attr``.

        A worker restarted afterwards builds its envs afresh, without the value: set it again
        after a restart (``stats()`` counts them), or give the envs the value where they are
        built.

        Args:
            name: The env attribute.
            values: A list or tuple: one value per env named, in order; anything else: the
                same value for every env named.
            indices: The envs (see :meth:`env_call`); ``None``: every env.

        Raises:
            ConfigError: A list or tuple of another length than the envs named, and as
                :meth:`env_call`.
        """
        calls = self._env_calls()
        if not isinstance(values, list | tuple):
            every = self.envs_per_worker * max(self.num_workers, 1) * self.config.replicas  # every engine's copies
            count = every if indices is None else len(indices)
            values = [values] * count
        calls.set_attr(name, list(values), indices)

    def env_apply(self, function: Callable[[Any], Any], *, indices: Sequence[int] | None = None) -> list[Any]:
        """``function(env)`` for each env, where the env lives; the results.

        ``function`` travels to the workers with cloudpickle, so a lambda or a local function
        works; it gets the env as it was built (wrappers included).

        Args:
            function: What to run on each env.
            indices: The envs (see :meth:`env_call`); ``None``: every env.

        Raises:
            ConfigError, Exception: As :meth:`env_call`.
        """
        return self._env_calls().apply(function, indices)

    def _env_calls(self) -> EnvCalls:
        self._check_open()
        calls = self._engine.env_calls()
        if calls is None:
            engine = _engine_name(self.config)
            raise ConfigError(
                f"engine {engine!r} does not reach its envs while it runs: env_call, env_get_attr, env_set_attr "
                "and env_apply need engine 'inprocess', 'workers' or 'central'"
            )
        return calls

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
        with workers, the policy's weights go out through the weight-sync scheme and every
        worker loads them before its next rollout (never in the middle of one). In-process
        the collector calls the very policy object it was given, so weights trained in place
        are already live. Either way :attr:`policy_version` goes up by one, once the weights
        are published: a publish that fails leaves it as it was.

        The weights are those of the policy if it is an ``nn.Module``, else of ``weights_from``.
        With workers and neither, nothing can be sent: the first call warns (naming the policy
        and what to pass instead) and workers keep the weights they started with.

        Args:
            policy_or_weights: Where to take the weights from; ``None``: the policy as it is.
            worker_ids: Which workers to update; all of them always receive the published
                weights, so only ``None`` or every index is accepted with workers.

        Raises:
            PolicyError: Weights were given but the policy is not an ``nn.Module``.
            ConfigError: ``worker_ids`` names a worker that does not exist.
            TransportError: The scheme could not publish within ``weight_sync_timeout_s``, or
                failed otherwise (its own error is the cause).
        """
        self._check_open()
        valid = list(range(max(self.num_workers, 1)))
        ids = [worker_ids] if isinstance(worker_ids, int) else list(worker_ids or valid)
        if any(i not in valid for i in ids):
            raise ConfigError(f"worker_ids={worker_ids!r}: this collector's workers are {valid}")
        if policy_or_weights is not None:
            self._load_weights(policy_or_weights)
        runs_here = getattr(self.config.engine, "policy_in_trainer", False)  # the very policy object is called
        if self.num_workers and not runs_here and self.weights_module is None and self.policy is not None:
            self._warn_no_weights()
        version = self.policy_version + 1
        began = time.perf_counter_ns()
        try:
            self._engine.publish_weights(self.weights_module, version)
        except PyCollectError:
            raise
        except Exception as exc:  # a plugin engine's or scheme's own error: keep the hierarchy's promise
            raise TransportError(
                f"update_policy_weights_(): publishing version {version} failed: {type(exc).__name__}: {exc}"
            ) from exc
        self._counter.publish(version, _weights_bytes(self.weights_module), time.perf_counter_ns() - began)
        # Only now: a frame must never claim a version that was not published.
        self.policy_version = version

    def _warn_no_weights(self) -> None:
        if self._warned_no_weights:
            return
        self._warned_no_weights = True
        warnings.warn(
            f"update_policy_weights_(): policy {_describe(self.policy)} is not an nn.Module, so its weights "
            "cannot be sent and the workers keep the ones they started with; pass the module that holds "
            "them: Collector(..., policy=..., weights_from=net)",
            PyCollectWarning,
            stacklevel=3,
        )

    def _load_weights(self, source: torch.nn.Module | TensorDictBase | Mapping[str, Any]) -> None:
        target = self.weights_module
        if target is None:
            raise PolicyError(
                f"cannot load weights into policy {_describe(self.policy)}: it is not an nn.Module; "
                "pass the module that holds its weights as weights_from="
            )
        if isinstance(source, torch.nn.Module):
            if source is not target:
                self._load_weights(source.state_dict())
            return
        # Checked before anything is loaded, naming the first mismatch (torch would list them
        # all in a RuntimeError, after loading some).
        policy = f"policy {_describe(target)}"
        if isinstance(source, TensorDictBase):  # as TensorDict.from_module(policy) collects them
            expected = dict(TensorDict.from_module(target).flatten_keys(".").items())
            given = dict(source.flatten_keys(".").items())
            WeightsLayout.from_state_dict(expected).check(given, policy=policy, dtypes=False)
            # Copied into the policy's own tensors: without inplace, to_module swaps them for
            # the source's, and training the source in place would change the policy acting.
            source.to_module(target, inplace=True)
        elif isinstance(source, Mapping):
            WeightsLayout.from_state_dict(target.state_dict()).check(source, policy=policy, dtypes=False)
            target.load_state_dict(source)
        else:
            raise PolicyError(
                f"policy_or_weights must be a module, a TensorDict or a state_dict, got {type(source).__name__}"
            )

    def state_dict(self, env_states: bool | None = None) -> dict[str, Any]:
        """Everything a new collector needs to continue this run: :meth:`load_state_dict` (or ``resume=``).

        Progress counters, policy version and weights, trajectory numbering and, where the
        engine keeps them, every env's state, random streams and trajectories (in-process
        always; with workers when ``snapshots`` is on): for a seeded run with a deterministic
        policy, the batches after a resume are byte for byte those the run would have made.

        Args:
            env_states: ``None`` (the default): include the env states where there are some;
                ``True``: they must be there; ``False``: leave them out (a resumed run starts
                fresh episodes).

        Raises:
            ConfigError: ``env_states=True`` and this collector keeps no env states (naming why).
        """
        state = self._progress_state()
        has_envs = any(key in state for key in _ENV_STATE_KEYS)
        if env_states is False:
            state = {key: value for key, value in state.items() if key not in _ENV_STATE_KEYS}
        elif env_states and not has_envs:
            engine = _engine_name(self.config)
            why = (
                f"engine {engine!r} saves its envs' states only with Collector(..., snapshots=True)"
                if getattr(self.config.engine, "snapshots_envs", False)
                else f"engine {engine!r} does not save its envs' states"
            )
            raise ConfigError(f"state_dict(env_states=True): this collector keeps no env states: {why}")
        if self.weights_module is not None:
            state["policy_state_dict"] = self.weights_module.state_dict()
        return state

    def _progress_state(self) -> dict[str, Any]:
        """The counters and the engine's state (without the weights)."""
        with self._using_engine():
            engine_state = self._engine.state()  # the central engine asks its workers for their envs' states
        return {
            "format": _STATE_FORMAT,
            "fingerprint": self._fingerprint(),
            "frames": self._frames,
            "batches": self._batches,
            "policy_version": self.policy_version,
            **engine_state,
        }

    @contextlib.contextmanager
    def _using_engine(self) -> Iterator[None]:
        """Mark the engine in use, so that a SIGTERM arriving meanwhile checkpoints the last state kept instead."""
        outer = self._engine_busy
        self._engine_busy = True
        try:
            yield
        finally:
            self._engine_busy = outer

    def _fingerprint(self) -> dict[str, Any]:
        """What a state_dict must agree on with the collector that loads it."""
        config = self.config
        return {
            "pycollect": _core.__version__,
            "env": self.env_source.describe(),
            "engine": _engine_name(config),
            "num_workers": config.num_workers,
            "envs_per_worker": config.envs_per_worker,
            "frames_per_batch": config.batch_frames,
            "sync": config.sync,
            "seed": config.seed,
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Continue from a :meth:`state_dict` (counters, trajectories, weights, and env states if saved).

        Raises:
            ConfigError: Not a pycollect state_dict, or one of a collector that differs from
                this one (another env, engine, worker or env count, batch size, seed or
                pycollect version: each difference named); nothing is loaded then.
        """
        self._check_open()
        try:
            frames, batches = int(state_dict["frames"]), int(state_dict["batches"])
            version = int(state_dict["policy_version"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"not a pycollect Collector state_dict: {exc!r}") from None
        if state_dict.get("format", _STATE_FORMAT) != _STATE_FORMAT:
            raise ConfigError(
                f"a state_dict of format {state_dict.get('format')!r}; this pycollect reads {_STATE_FORMAT}"
            )
        saved = state_dict.get("fingerprint")
        if saved is not None:
            ours = self._fingerprint()
            differs = [
                f"{key}: saved {saved.get(key)!r}, here {value!r}"
                for key, value in ours.items()
                if saved.get(key) != value
            ]
            if differs:
                raise ConfigError(f"this state_dict is of another collector; {'; '.join(differs)}")
        if "policy_state_dict" in state_dict:
            self._load_weights(state_dict["policy_state_dict"])
        self._engine.load_state(state_dict)
        self._frames, self._batches, self.policy_version = frames, batches, version
        if self._engine.counters() is not self._counter.segment:  # the engine started new workers
            self._counter.close()
            self._counter = TrainerCounter(self._engine.counters(), self._description())
        if "policy_state_dict" in state_dict:
            self._engine.publish_weights(self.weights_module, self.policy_version)

    def save_checkpoint(self) -> Path:
        """Write a checkpoint of this collector into ``checkpoint_dir`` now (atomically; see docs/faults.md).

        Returns:
            The checkpoint file.

        Raises:
            ConfigError: No ``checkpoint_dir`` was given.
        """
        directory = self.config.checkpoint_dir
        if directory is None:
            raise ConfigError("save_checkpoint() needs Collector(..., checkpoint_dir=...)")
        return self._write_checkpoint(self._progress_state())

    def _write_checkpoint(self, state: dict[str, Any]) -> Path:
        """Write ``state`` (a :meth:`_progress_state`) with the policy's weights as they are now."""
        assert self.config.checkpoint_dir is not None
        if self.weights_module is not None:
            state["policy_state_dict"] = self.weights_module.state_dict()
            state["policy_version"] = self.policy_version
        return save_checkpoint(state, self.config.checkpoint_dir, int(state["batches"]), self.config.checkpoints_kept)

    def _before_termination(self) -> None:
        """On SIGTERM: a checkpoint of the state after the last batch delivered (with a ``checkpoint_dir``)."""
        if self.config.checkpoint_dir is None or self._closed:
            return
        state = self._progress_state() if not self._engine_busy else dict(self._resumable or {})
        if not state:
            return  # no batch yet: nothing to resume
        self._write_checkpoint(state)

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
        _lifetime.untrack(self)
        self._engine.close()
        self._counter.close()

    close = shutdown

    def _forget(self) -> None:
        """In a forked child: this copy owns none of the workers; never act on them."""
        self._closed = True

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
        mode = f"num_workers={self.num_workers}, sync={self.config.sync}, " if self.num_workers else ""
        return (
            f"Collector(env={self.env_source.describe()!r}, {mode}envs_per_worker={self.envs_per_worker}, "
            f"frames_per_batch={self.frames_per_batch}, total_frames={self.total_frames}, "
            f"frames={self._frames}{', closed' if self._closed else ''})"
        )

    def _check_open(self) -> None:
        if self._closed:
            raise CollectorClosedError("this Collector has been shut down")


def _describe_choice(value: Any) -> str:
    """A plugin argument as given: a name quoted, an instance as ``Class(...)`` (no repr of its own)."""
    return repr(value) if isinstance(value, str) else f"{type(value).__name__}(...)"


_STATE_FORMAT = 2
"""The layout of a state_dict (1: counters and weights only, before env states)."""
_ENV_STATE_KEYS = ("worker_states", "env_snapshot")
"""An engine's state entries that hold env states (left out by ``state_dict(env_states=False)``)."""


def _engine_name(config: CollectorConfig) -> str:
    """The engine's name as users select it (its class name, for an engine without one)."""
    return str(getattr(config.engine, "name", type(config.engine).__name__))


def _check_snapshots_wanted(config: CollectorConfig) -> None:
    """Refuse ``snapshots=True`` or ``recovery="replay"`` for an engine that cannot save its envs."""
    if getattr(config.engine, "snapshots_envs", False):
        return
    engine = _engine_name(config)
    if config.recovery == "replay":
        raise ConfigError(f"recovery='replay': engine {engine!r} cannot restore its envs (the workers engine can)")
    if config.snapshots:
        raise ConfigError(f"snapshots=True: engine {engine!r} does not save its envs' states (the built-in engines do)")


def _versions(batch: TensorDictBase) -> np.ndarray | None:
    """The policy version of each frame of ``batch``, if it records them on the CPU."""
    versions = batch.get(POLICY_VERSION, None)
    if not isinstance(versions, torch.Tensor) or versions.device.type != "cpu":
        return None  # reading a device's would make the trainer wait for it
    return versions.numpy()


def _weights_bytes(module: torch.nn.Module | None) -> int:
    """Bytes of the weights a publish sends."""
    if module is None:
        return 0
    return sum(t.numel() * t.element_size() for t in module.state_dict().values())


def _describe(policy: Any) -> str:
    return getattr(policy, "__qualname__", None) or type(policy).__name__


def _weights_module(policy: Any, weights_from: Any) -> torch.nn.Module | None:
    """The module whose weights move: ``weights_from``, else the policy if it is a module."""
    if weights_from is not None:
        if not isinstance(weights_from, torch.nn.Module):
            raise PolicyError(f"weights_from must be an nn.Module, got {type(weights_from).__name__}")
        if policy is None:
            raise PolicyError("weights_from needs a policy: with policy=None actions are random")
        return weights_from
    return policy if isinstance(policy, torch.nn.Module) else None
