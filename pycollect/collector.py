"""The :class:`Collector`: pycollect's front door."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDict, TensorDictBase

from pycollect import _engines, _lifetime
from pycollect._batch.episodes import EpisodeRecord
from pycollect._batch.split import mark_rollout_ends, split_trajectories, stack_workers
from pycollect._rollout.policy import Policy
from pycollect._rollout.seeding import torch_seed
from pycollect.config import CollectorConfig, RestartPolicy, SupervisionConfig
from pycollect.envs.source import EnvSource, resolve_env
from pycollect.exceptions import (
    CollectorClosedError,
    ConfigError,
    PolicyError,
    PyCollectError,
    PyCollectWarning,
    TransportError,
)
from pycollect.weights.layout import WeightsLayout

if TYPE_CHECKING:
    from pycollect._core import WorkerEvent, WorkerStats
    from pycollect._engines.base import Engine
    from pycollect._rollout.fields import BatchField
    from pycollect.devices import DevicePolicy
    from pycollect.engines import EngineFactory
    from pycollect.envs.specs import EnvSpecs
    from pycollect.weights import WeightSyncScheme

__all__ = ["Collector", "CollectorStats"]

_D, _S = CollectorConfig, SupervisionConfig  # the defaults of every argument live there


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
    """

    frames: int
    batches: int
    policy_version: int
    episodes: int
    workers: tuple[WorkerStats, ...]
    events: tuple[WorkerEvent, ...]

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
    half-written.

    Every argument is checked (by :class:`~pycollect.config.CollectorConfig`, where the
    defaults live) before any environment is built or any worker starts.

    Args:
        env: A gymnasium id (``"CartPole-v1"``), a backend-prefixed spec
            (``"gymnasium:CartPole-v1"``, ``"callable:package.module:make_env"``, or the
            prefix of any installed env-backend plugin such as ``"dm_control:cheetah-run"``)
            or a factory callable returning a gymnasium-style env (picklable, for workers).
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
        device: In-process, TorchRL's generic device: the default of ``policy_device`` and
            ``storing_device``. With workers the ``device_policy`` decides (only ``"cpu"``,
            with the ``cpu`` policy, is accepted).
        policy_device: In-process: where the policy runs (default: ``device``, else where
            its parameters are). If its parameters are elsewhere, a copy on ``policy_device``
            is called, as in TorchRL, and ``update_policy_weights_()`` loads the trained
            weights into it. Observations are moved there, actions come back to the CPU for
            the environments. Not with workers: use ``device_policy``.
        env_device: Where the environments' data lives; only the CPU (gymnasium-style
            environments step there), accepted for TorchRL compatibility.
        storing_device: Device batches are delivered on. Default in-process: ``device``, else
            the CPU. Default with workers: the placement's storing device, of worker 0 for a
            sync batch (which holds every worker's rollout), of the delivering worker in async
            mode. A batch bound for CUDA is assembled in pinned host memory and copied with
            ``non_blocking=True``; a ``zero_copy`` batch is copied there from shared memory.
        weight_sync: With workers: how ``update_policy_weights_()`` reaches them. The name of
            a registered weight-sync scheme (``"shared_memory"``, the default, or
            ``"no_sync"``, or one a plugin adds) or a
            :class:`~pycollect.weights.WeightSyncScheme` instance.
        weight_sync_timeout_s: The longest ``update_policy_weights_()`` may block. This and every
            other duration is a positive number of seconds, at most
            :data:`~pycollect.config.MAX_SECONDS` (1e9 s).
        apply_weights: With workers: when a worker applies new weights. ``"between_rollouts"``
            (the default): before a rollout, so each rollout is collected with one version;
            ``"between_steps"``: before any step (never during a policy call), so a rollout
            may mix versions; either way every frame carries the ``policy_version`` it was
            collected with.
        device_policy: With workers: which devices each worker uses. The name of a registered
            device placement policy (``"cpu"``, the default; ``"round_robin"``: worker ``i`` on
            ``cuda:(i % n)``) or a :class:`~pycollect.devices.DevicePolicy` instance such as
            ``ExplicitPolicy(["cuda:0", "cpu"])``. Every device is checked against this
            machine's before any worker starts.
        exploration_type: How a probabilistic policy (TorchRL's ``ProbabilisticActor``) acts,
            applied around every policy call, in-process and in every worker: TorchRL's
            ``ExplorationType.RANDOM`` (the default, as in TorchRL's collectors: it samples),
            ``DETERMINISTIC``, ``MODE``, ``MEAN`` or ``MEDIAN``, or the member's name.
            ``init_random_frames`` still means uniform random actions from the action space.
        weights_from: The module whose weights ``update_policy_weights_()`` sends to the
            workers when the policy is not itself that module, e.g. a function over a network
            (``policy=lambda td: net(td["observation"]).argmax(-1), weights_from=net``). The
            function and the module are pickled together, so in each worker the function uses
            the module the new weights are loaded into. Default: the policy, if it is an
            ``nn.Module``.
        info_keys: Entries of the env's step ``info`` dict to keep in the batch, each at
            ``("next", name)`` with the shape and dtype it has on the first step (a step whose
            info lacks it stores zeros); TorchRL's ``GymEnv`` info-dict reader does the same.
        replay_buffer: A TorchRL replay buffer (anything with ``extend``): every batch extends
            it (as it comes, after ``postproc``) and iteration yields ``None``, as TorchRL's
            collectors do; ``next_batch()`` extends it too and returns the batch.
        postproc: Called on every batch before it is yielded or stored (e.g. TorchRL's
            ``MultiStep``, or ``lambda td: td.reshape(-1)`` for a one-dimensional buffer).
        set_truncated: Mark the last step of every rollout truncated and done where the
            episode goes on (its trajectory continues in the next batch), as TorchRL does.
        cat_results: With workers in sync mode: ``0`` (the default) gives
            ``[num_workers * envs_per_worker, T]`` batches; ``"stack"`` gives
            ``[num_workers, envs_per_worker, T]``, as TorchRL's ``MultiSyncCollector``.
        engine: What runs the environments. ``None`` (the default): in this process for
            ``num_workers=0``, supervised worker processes otherwise (the built-in
            ``"inprocess"`` and ``"workers"`` engines). The name of a registered engine (a
            plugin's, e.g. ``"ray"`` from ``pycollect-ray``, built with its defaults) or an
            :class:`~pycollect.engines.EngineFactory` instance carrying its own options
            (``engine=RayEngine(num_actors=4)``). An engine that runs several copies of the
            workers delivers sync batches of one rollout of each.
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
        env: str | Callable[..., Any],
        policy: Policy = None,
        *,
        frames_per_batch: int,
        total_frames: int = _D.total_frames,
        envs_per_worker: int = _D.envs_per_worker,
        num_workers: int = _D.num_workers,
        sync: bool = _D.sync,
        zero_copy: bool = _D.zero_copy,
        max_frames_per_traj: int | None = _D.max_frames_per_traj,
        init_random_frames: int = _D.init_random_frames,
        reset_at_each_iter: bool = _D.reset_at_each_iter,
        split_trajs: bool = _D.split_trajs,
        seed: int | None = _D.seed,
        env_kwargs: Mapping[str, Any] | None = None,
        device: torch.device | str | None = _D.device,
        policy_device: torch.device | str | None = _D.policy_device,
        env_device: torch.device | str | None = _D.env_device,
        storing_device: torch.device | str | None = _D.storing_device,
        weight_sync: str | WeightSyncScheme | None = _D.weight_sync,
        weight_sync_timeout_s: float = _D.weight_sync_timeout_s,
        apply_weights: str = _D.apply_weights,
        device_policy: str | DevicePolicy = _D.device_policy,
        exploration_type: Any = _D.exploration_type,
        weights_from: torch.nn.Module | None = None,
        info_keys: Sequence[str] = _D.info_keys,
        replay_buffer: Any = None,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        set_truncated: bool = _D.set_truncated,
        cat_results: Any = _D.cat_results,
        check_resources: bool = _D.check_resources,
        engine: str | EngineFactory | None = _D.engine,
        restart: RestartPolicy = _S.restart,
        max_restarts: int = _S.max_restarts,
        restart_window_s: float = _S.restart_window_s,
        heartbeat_timeout_s: float = _S.heartbeat_timeout_s,
        startup_timeout_s: float = _S.startup_timeout_s,
    ) -> None:
        self._closed = True  # until construction succeeds, shutdown() has nothing to do
        self.config = CollectorConfig(
            frames_per_batch=frames_per_batch,
            total_frames=total_frames,
            envs_per_worker=envs_per_worker,
            num_workers=num_workers,
            sync=sync,
            zero_copy=zero_copy,
            max_frames_per_traj=max_frames_per_traj,
            init_random_frames=init_random_frames,
            reset_at_each_iter=reset_at_each_iter,
            split_trajs=split_trajs,
            seed=seed,
            device=device,
            policy_device=policy_device,
            env_device=env_device,
            storing_device=storing_device,
            weight_sync=weight_sync,
            weight_sync_timeout_s=weight_sync_timeout_s,
            apply_weights=apply_weights,
            device_policy=device_policy,
            exploration_type=exploration_type,
            info_keys=tuple(info_keys) if not isinstance(info_keys, str) else info_keys,  # type: ignore[arg-type]
            set_truncated=set_truncated,
            cat_results=cat_results,
            check_resources=check_resources,
            supervision=SupervisionConfig(
                restart=restart,
                max_restarts=max_restarts,
                restart_window_s=restart_window_s,
                heartbeat_timeout_s=heartbeat_timeout_s,
                startup_timeout_s=startup_timeout_s,
            ),
            engine=engine,
        )
        config = self.config
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
        if not config.num_workers and config.engine is None and weight_sync is not None:
            warnings.warn(
                f"weight_sync={weight_sync!r} has no effect in-process (num_workers=0): the collector "
                "calls the very policy object you train",
                PyCollectWarning,
                stacklevel=2,
            )
        if not config.num_workers and config.engine is None and device_policy != _D.device_policy:
            warnings.warn(
                f"device_policy={_describe_choice(device_policy)} has no effect in-process (num_workers=0): it "
                "places worker processes; choose where the policy runs with policy_device= (or device=) and "
                "where batches arrive with storing_device=",
                PyCollectWarning,
                stacklevel=2,
            )
        self.env_source: EnvSource = resolve_env(env, env_kwargs)
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
        self._engine: Engine = _engines.start(config, self.env_source, policy, self.weights_module)
        self._closed = False
        _lifetime.track(self)  # shut down at interpreter exit and on SIGTERM; forgotten by a fork

    # -- what was decided at construction ----------------------------------------------------

    @property
    def specs(self) -> EnvSpecs:
        """The environment's fields, as the env backend reported them."""
        return self._engine.plan.specs

    @property
    def fields(self) -> tuple[BatchField, ...]:
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

        In order: episodes are counted (from the true episode ends), ``set_truncated`` marks
        rollout ends, ``cat_results="stack"`` reshapes, ``split_trajs`` splits, ``postproc``
        runs, and a ``replay_buffer`` is extended with the result, which is also returned.
        """
        self._check_open()
        config = self.config
        batch: TensorDictBase = self._engine.next_batch(
            random_actions=self.random_phase, policy_version=self.policy_version
        )
        self._frames += batch.numel()
        self._batches += 1
        self.episodes.update(batch)
        if config.set_truncated:
            mark_rollout_ends(batch)
        if config.cat_results == "stack":
            batch = stack_workers(batch, config.num_workers)
        if config.split_trajs:
            batch = split_trajectories(batch)
        if self.postproc is not None:
            batch = self.postproc(batch)
        if self.replay_buffer is not None:
            self.replay_buffer.extend(batch)
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
        )

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
        if self.num_workers and self.weights_module is None and self.policy is not None:
            self._warn_no_weights()
        version = self.policy_version + 1
        try:
            self._engine.publish_weights(self.weights_module, version)
        except PyCollectError:
            raise
        except Exception as exc:  # a plugin engine's or scheme's own error: keep the hierarchy's promise
            raise TransportError(
                f"update_policy_weights_(): publishing version {version} failed: {type(exc).__name__}: {exc}"
            ) from exc
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
            source.to_module(target)
        elif isinstance(source, Mapping):
            WeightsLayout.from_state_dict(target.state_dict()).check(source, policy=policy, dtypes=False)
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
            **self._engine.state(),
        }
        if self.weights_module is not None:
            state["policy_state_dict"] = self.weights_module.state_dict()
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
            self._engine.publish_weights(self.weights_module, self.policy_version)
        self._engine.load_state(state_dict)

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
