"""pycollect's settings: the one place where they are defined, defaulted, documented and checked.

:class:`CollectorConfig` (a collector's) and :class:`VectorConfig` (a vector env's), each with
its :class:`SupervisionConfig`, are frozen and check every value when they are made, raising
:class:`~pycollect.ConfigError` that names the bad value before any environment or worker
exists. The config object is what travels (to the engines and step backends, the worker
processes, the native supervisor, a distributed engine's collectors); the Rust side keeps no
defaults of its own. This module is a leaf: it imports nothing of pycollect but the
exceptions, and loads no plugin (nor gymnasium, until a vector env's settings are made). Its
annotations name only what lies below it: the interfaces of the plugins it holds and, for the
engine, :class:`~pycollect._engine_traits.EngineTraits` (the engine interface takes a config).
"""

from __future__ import annotations

import difflib
import functools
import math
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Literal

from pycollect.exceptions import ConfigError

if TYPE_CHECKING:
    import torch
    from gymnasium.vector import AutoresetMode

    from pycollect._engine_traits import EngineTraits
    from pycollect.devices import DevicePolicy
    from pycollect.inference import InferenceRunner
    from pycollect.weights import WeightSyncScheme

__all__ = [
    "APPLY_WEIGHTS",
    "AUTORESET_MODES",
    "DEFAULT_WEIGHT_SYNC",
    "EXPLORATION_TYPES",
    "MAX_ENVS_PER_WORKER",
    "MAX_SECONDS",
    "MAX_WEIGHT_BUFFERS",
    "SLOTS_PER_WORKER",
    "WEIGHT_BUFFERS",
    "WORKERS_PER_CPU",
    "CollectorConfig",
    "SupervisionConfig",
    "VectorConfig",
    "default_num_workers",
    "ordinal_device",
    "parse_autoreset_mode",
    "resolve_device",
]

RestartPolicy = Literal["permanent", "transient", "never"]
_RESTART_POLICIES = ("permanent", "transient", "never")

EXPLORATION_TYPES = ("random", "deterministic", "mode", "mean", "median")
"""The names of tensordict's ``InteractionType`` (TorchRL's ``ExplorationType``) members."""

SLOTS_PER_WORKER = 2
"""Rollout slots in each worker's ring: a worker runs at most one rollout ahead of the trainer."""

WEIGHT_BUFFERS = 3
"""Fewest buffers of the shared-memory weights store: the latest, one being written, one being read."""

APPLY_WEIGHTS = ("between_rollouts", "between_steps")
"""When a worker may apply new weights (``apply_weights``)."""

RECOVERY = ("cut", "replay")
"""What a worker's crash costs (``recovery``)."""

MAX_WEIGHT_BUFFERS = 255
"""Most buffers of the weights store (a buffer's index is 8 bits of its ``latest`` word)."""

DEFAULT_WEIGHT_SYNC = "shared_memory"
"""The weight-sync scheme of workers when ``weight_sync`` is not given."""

WORKERS_PER_CPU = 8
"""With ``check_resources``, at most this many workers per CPU (and at least 16 in all)."""

MAX_ENVS_PER_WORKER = 65_536
"""With ``check_resources``, at most this many environments per worker."""


MAX_SECONDS = 1e9
"""The longest duration any ``*_s`` argument accepts (about 31 years).

Every consumer takes it: Rust's ``Duration`` and its deadlines, ``datetime.timedelta`` (the
``torch_distributed`` scheme's store and group timeouts), and Python's thread and ``select``
timeouts (``threading.TIMEOUT_MAX``, about 9.2e9 s on Linux). A longer one would pass here and
fail later, after the environments and the segment were built, or as a bare ``OverflowError``.
"""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive_int(name: str, value: Any) -> None:
    if not _is_int(value) or value <= 0:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")


def _non_negative_int(name: str, value: Any) -> None:
    if not _is_int(value) or value < 0:
        raise ConfigError(f"{name} must be a non-negative integer, got {value!r}")


def _positive_seconds(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_SECONDS:
        raise ConfigError(
            f"{name} must be a positive number of seconds, at most {MAX_SECONDS:g} s (MAX_SECONDS), got {value!r}"
        )


def _flag(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be True or False, got {value!r}")


def resolve_device(value: Any, what: str) -> torch.device:
    """Parse a device argument and check it exists on this machine.

    Raises:
        ConfigError: The value is not a device, or names a CUDA device that is not available.
    """
    import torch

    try:
        device = torch.device(value)
    except (RuntimeError, TypeError) as exc:
        raise ConfigError(f"{what}={value!r} is not a torch device ({exc})") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = device.index or 0
        if index >= count:
            raise ConfigError(f"{what}={value!r}: this machine has {count} CUDA device(s)")
    elif device.type != "cpu":
        raise ConfigError(f"{what}={value!r}: only 'cpu' and 'cuda' devices are supported")
    return device


def ordinal_device(device: torch.device | str | None) -> torch.device | None:
    """TorchRL's ``_make_ordinal_device``: ``cuda`` without an index is the current CUDA device."""
    if device is None:
        return None
    import torch

    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


@dataclass(frozen=True)
class SupervisionConfig:
    """How worker processes are watched, restarted and stopped.

    Attributes:
        restart: ``"permanent"`` (restart after any end), ``"transient"`` (only after a
            crash or hang) or ``"never"``.
        max_restarts: Restarts allowed per worker within ``restart_window_s``; past that the
            collector raises :class:`~pycollect.WorkerCrashedError`.
        restart_window_s: The sliding window for ``max_restarts``.
        heartbeat_timeout_s: A worker whose heartbeat stops for this long counts as hung.
        startup_timeout_s: How long a new worker may take to its first heartbeat.
        backoff_initial_s: The wait before the first restart of a worker; doubled per restart.
        backoff_max_s: The longest wait before a restart.
        check_interval_s: How often the supervisor thread looks at heartbeats.
        shutdown_grace_s: How long workers get to exit by themselves at shutdown.
        term_timeout_s: How long workers get after SIGTERM before SIGKILL.

    Every duration is a positive number of seconds, at most :data:`MAX_SECONDS`.
    """

    restart: RestartPolicy = "permanent"
    max_restarts: int = 3
    restart_window_s: float = 60.0
    heartbeat_timeout_s: float = 30.0
    startup_timeout_s: float = 120.0
    backoff_initial_s: float = 0.1
    backoff_max_s: float = 5.0
    check_interval_s: float = 0.1
    shutdown_grace_s: float = 2.0
    term_timeout_s: float = 2.0

    def __post_init__(self) -> None:
        if self.restart not in _RESTART_POLICIES:
            raise ConfigError(f"restart={self.restart!r}: expected one of {', '.join(_RESTART_POLICIES)}")
        _non_negative_int("max_restarts", self.max_restarts)
        for name in (
            "restart_window_s",
            "heartbeat_timeout_s",
            "startup_timeout_s",
            "backoff_initial_s",
            "backoff_max_s",
            "check_interval_s",
            "shutdown_grace_s",
            "term_timeout_s",
        ):
            _positive_seconds(name, getattr(self, name))

    @classmethod
    def from_settings(
        cls, config: SupervisionConfig | None = None, /, *, also: Iterable[str] = (), **overrides: Any
    ) -> SupervisionConfig:
        """``config`` (or the defaults) with ``overrides`` applied: what a vector env's keywords make.

        Args:
            config: The settings to start from (``None``: the defaults).
            also: Other names the caller takes, suggested too when an override is misspelt.
            **overrides: Fields of this class.

        Raises:
            ConfigError: An override names no field (the message suggests the closest), or a
                value is bad.
        """
        if config is not None and not isinstance(config, SupervisionConfig):
            raise ConfigError(f"supervision must be a SupervisionConfig, got {type(config).__name__}: {config!r}")
        unknown = sorted(set(overrides) - _SUPERVISION_FIELDS)
        if unknown:
            raise ConfigError(_unknown_names(unknown, _SUPERVISION_FIELDS | set(also), "SupervisionConfig"))
        base = config if config is not None else cls()
        return replace(base, **overrides) if overrides else base


@dataclass(frozen=True)
class CollectorConfig:
    """Every setting of a :class:`~pycollect.Collector`: the one place each is defined, defaulted and documented.

    Give one to a collector whole (``Collector(env, policy, config=config)``), or name its
    fields as keyword overrides (``Collector(env, frames_per_batch=256, num_workers=2)``, where
    a :class:`SupervisionConfig` field such as ``max_restarts=5`` is an override too). The
    config itself is what travels: to the engine, into every worker process, to the native
    supervisor and to the collectors a distributed engine runs elsewhere. It is frozen and checks
    every value when it is made, raising :class:`~pycollect.ConfigError` that names the bad
    value. It loads no plugin: names (``weight_sync="no_sync"``, ``engine="ray"``) stay names
    until the collector resolves them (:func:`pycollect.plugins.resolve`). Device arguments are
    parsed into ``torch.device`` objects. Every duration is a positive number of seconds, at
    most :data:`MAX_SECONDS` (1e9 s).

    Attributes:
        frames_per_batch: Frames (env steps) per batch, rounded up to a multiple of the number
            of environments stepped for one batch (:attr:`rows`); in sync mode split across
            workers. See :attr:`batch_frames` for what a batch really holds.
        total_frames: Stop after this many frames; -1 collects forever.
        envs_per_worker: Environments stepped together (one policy call per step for all).
        num_workers: Worker processes; 0 steps the environments in the trainer.
        sync: With workers: one rollout of every worker per batch (``True``), or the next
            finished rollout of any worker (``False``).
        zero_copy: With workers: yield views of the shared-memory slots instead of copies. A
            zero-copy batch is valid only until the next batch is requested; copy what you
            keep (``batch.clone()``).
        max_frames_per_traj: Truncate a trajectory after this many steps.
        init_random_frames: Use uniform random actions until this many frames are collected.
        reset_at_each_iter: Reset every environment at the start of every batch.
        split_trajs: Yield ``[n_traj, T_max]`` batches, one trajectory per row, zero-padded,
            with a ``("collector", "mask")`` marking real steps.
        seed: Makes runs reproducible: environment ``i`` of worker ``w`` gets its own seed
            derived from it (see :func:`pycollect.env_seeds`), and torch's generator is
            seeded from it when there is a policy. ``None``: fresh entropy.
        device: In-process (and with ``engine="central"``), TorchRL's generic device: the
            default of ``policy_device`` and ``storing_device``. With workers the
            ``device_policy`` decides (only ``"cpu"``, with the ``cpu`` policy, is accepted).
        policy_device: In-process: where the policy runs (default: ``device``, else where its
            parameters are). If its parameters are elsewhere, a copy on ``policy_device`` is
            called, as in TorchRL, and ``update_policy_weights_()`` loads the trained weights
            into it. Observations are moved there, actions come back to the CPU for the
            environments. Not with workers (use ``device_policy``), but with ``engine="central"``,
            whose workers run no policy: there it means what it means in-process.
        env_device: Where the environments' data lives; only the CPU (gymnasium-style
            environments step there), accepted for TorchRL compatibility.
        storing_device: Device batches are delivered on. Default in-process: ``device``, else
            the CPU. Default with workers: the placement's storing device, of worker 0 for a
            sync batch (which holds every worker's rollout), of the delivering worker in async
            mode. A batch bound for CUDA is assembled in pinned host memory and copied with
            ``non_blocking=True``; a ``zero_copy`` batch is copied there from shared memory.
        weight_sync: With workers: how ``update_policy_weights_()`` reaches them. The name of
            a registered weight-sync scheme (``"shared_memory"``, ``"no_sync"``,
            ``"torch_distributed"``, or one a plugin adds) or a
            :class:`~pycollect.weights.WeightSyncScheme` instance; ``None``: the engine's
            default (:data:`DEFAULT_WEIGHT_SYNC` for the built-in engines).
        weight_sync_timeout_s: The longest ``update_policy_weights_()`` may block.
        apply_weights: With workers: when a worker applies new weights. ``"between_rollouts"``
            (the default): before a rollout, so each rollout is collected with one version;
            ``"between_steps"``: before any step (never during a policy call), so a rollout may
            mix versions; either way every frame carries the ``policy_version`` it was
            collected with.
        device_policy: With workers: which devices each worker uses. The name of a registered
            device placement policy (``"cpu"``, the default; ``"round_robin"``: worker ``i`` on
            ``cuda:(i % n)``) or a :class:`~pycollect.devices.DevicePolicy` instance such as
            ``ExplicitPolicy(["cuda:0", "cpu"])``. Every device is checked against this
            machine's before any worker starts.
        exploration_type: How a probabilistic policy (TorchRL's ``ProbabilisticActor``) acts,
            applied around every policy call, in-process and in every worker: TorchRL's
            ``ExplorationType.RANDOM`` (the default, as in TorchRL's collectors: it samples),
            ``DETERMINISTIC``, ``MODE``, ``MEAN`` or ``MEDIAN``, or the member's name;
            normalised to the lowercase name. ``init_random_frames`` still means uniform random
            actions from the action space.
        info_keys: Entries of the env's step ``info`` dict to keep in the batch, each at
            ``("next", name)`` with the shape and dtype it has on the first step (a step whose
            info lacks it stores zeros); TorchRL's ``GymEnv`` info-dict reader does the same.
        set_truncated: Mark the last step of every rollout truncated and done where the
            episode goes on (its trajectory continues in the next batch), as TorchRL does.
        cat_results: With workers in sync mode: ``0`` (the default) gives
            ``[num_workers * envs_per_worker, T]`` batches; ``"stack"`` gives
            ``[num_workers, envs_per_worker, T]``, as TorchRL's ``MultiSyncCollector``.
        check_resources: Refuse, before anything is allocated or started, memory this machine
            does not have (the shared-memory segment, owned batches) and absurd counts of
            workers or environments; ``False`` lets those who know better through.
        supervision: With workers: how they are watched, restarted and stopped.
        engine: What runs the environments. ``None`` (the default): in this process for
            ``num_workers=0``, supervised worker processes otherwise (the built-in
            ``"inprocess"`` and ``"workers"`` engines). The name of a registered engine (a
            plugin's, e.g. ``"ray"`` from ``pycollect-ray``, built with its defaults) or an
            :class:`~pycollect.engines.EngineFactory` instance carrying its own options
            (``engine=RayEngine(num_actors=4)``). An engine that runs several copies of the
            workers delivers sync batches of one rollout of each. ``"central"``: the workers
            only step the environments and this process runs the policy once per step for all
            of them, on ``policy_device`` (docs/central.md).
        inference_runner: How each policy call is made (:mod:`pycollect.inference`): ``"plain"``
            (the default: as it is), ``"compile"`` (through ``torch.compile``), the name of a
            plugin's runner, or an :class:`~pycollect.inference.InferenceRunner` instance
            carrying its options (``CompileRunner(mode="reduce-overhead")``). It runs where the
            policy runs: the trainer (in-process, ``engine="central"``) or each worker.
        metrics: Count each worker's and the trainer's work (steps, time in the envs, the
            policy and waiting, step latencies, policy lag) for ``stats().metrics``,
            ``pycollect top`` and the exporters (docs/metrics.md); ``False`` leaves the
            counting to the native step loops only (to measure what it costs).
        max_policy_lag: With workers in async mode: a rollout with a frame collected with
            weights more than this many versions behind the latest published is dropped
            (and counted in ``stats().metrics.trainer.frames_dropped``); the collector
            delivers the next one instead. ``None`` (the default): nothing is dropped.
        policy_lag_key: Add ``("collector", "policy_lag")`` to every batch: for each frame, how
            many versions behind the latest published weights its policy was.
        snapshots: Save the state of every env (and every random stream and trajectory) after
            each rollout, so that :meth:`~pycollect.Collector.state_dict` holds where each env
            is and a resumed collector continues exactly (docs/faults.md). ``None`` (the
            default): on where ``recovery="replay"`` or ``checkpoint_dir`` need it and
            in-process (where it costs nothing until asked for), off otherwise. An env that
            cannot be saved is refused by name before any worker starts.
        snapshot_every_s: With snapshots, the most seconds between two pickles of a worker's
            state: each rollout carries the last one and how many rollouts were stepped since,
            which a restore steps again (0: a pickle after every rollout).
        recovery: With workers, what a worker's crash or hang costs: ``"cut"`` (the default):
            the rollout it was writing is dropped and its trajectories end truncated;
            ``"replay"``: the restarted worker restores the state after its last rollout and
            steps the lost one again, so the batch is the one a run without the crash delivers
            (seeded, deterministic env and policy). Where the state cannot be restored, the
            trajectories are cut as with ``"cut"``, and ``stats()`` says so.
        checkpoint_dir: Where :meth:`~pycollect.Collector.save_checkpoint` writes (every
            ``checkpoint_every`` batches, and when the process gets SIGTERM): one
            ``checkpoint-<batches>.pt`` each, written atomically, the newest
            ``checkpoints_kept`` kept. Resume with ``Collector(..., resume=checkpoint_dir)``.
        checkpoint_every: Batches between two checkpoints (0, the default: only on SIGTERM
            and when asked).
        checkpoints_kept: How many checkpoints stay in ``checkpoint_dir``.
    """

    frames_per_batch: int
    total_frames: int = -1
    envs_per_worker: int = 1
    num_workers: int = 0
    sync: bool = True
    zero_copy: bool = False
    max_frames_per_traj: int | None = None
    init_random_frames: int = 0
    reset_at_each_iter: bool = False
    split_trajs: bool = False
    seed: int | None = None
    device: torch.device | str | None = None
    policy_device: torch.device | str | None = None
    env_device: torch.device | str | None = None
    storing_device: torch.device | str | None = None
    weight_sync: str | WeightSyncScheme | None = None
    weight_sync_timeout_s: float = 5.0
    apply_weights: str = "between_rollouts"
    device_policy: str | DevicePolicy = "cpu"
    exploration_type: Any = "random"
    info_keys: tuple[str, ...] = ()
    set_truncated: bool = False
    cat_results: Any = 0
    check_resources: bool = True
    supervision: SupervisionConfig = field(default_factory=SupervisionConfig)
    engine: str | EngineTraits | None = None
    inference_runner: str | InferenceRunner = "plain"
    metrics: bool = True
    max_policy_lag: int | None = None
    policy_lag_key: bool = False
    snapshots: bool | None = None
    snapshot_every_s: float = 0.25
    recovery: str = "cut"
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0
    checkpoints_kept: int = 3

    def __post_init__(self) -> None:
        _positive_int("frames_per_batch", self.frames_per_batch)
        if not _is_int(self.total_frames) or not (self.total_frames == -1 or self.total_frames > 0):
            raise ConfigError(f"total_frames must be a positive integer or -1 (endless), got {self.total_frames!r}")
        _positive_int("envs_per_worker", self.envs_per_worker)
        _non_negative_int("num_workers", self.num_workers)
        if self.max_frames_per_traj is not None:
            _positive_int("max_frames_per_traj", self.max_frames_per_traj)
        _non_negative_int("init_random_frames", self.init_random_frames)
        if self.seed is not None:
            _non_negative_int("seed", self.seed)
        flags = ("sync", "zero_copy", "reset_at_each_iter", "split_trajs", "set_truncated", "check_resources")
        for name in (*flags, "metrics", "policy_lag_key"):
            _flag(name, getattr(self, name))
        if self.check_resources:
            cpus = os.cpu_count() or 1
            limit = max(16, WORKERS_PER_CPU * cpus)
            if self.num_workers > limit:
                raise ConfigError(
                    f"num_workers={self.num_workers} is far more than this machine's {cpus} CPUs can run "
                    f"(at most {limit} are accepted: {WORKERS_PER_CPU} per CPU); pass check_resources=False "
                    "if you mean it"
                )
            if self.envs_per_worker > MAX_ENVS_PER_WORKER:
                raise ConfigError(
                    f"envs_per_worker={self.envs_per_worker}: at most {MAX_ENVS_PER_WORKER} environments per "
                    "worker are accepted; use more workers, or pass check_resources=False if you mean it"
                )
        _positive_seconds("weight_sync_timeout_s", self.weight_sync_timeout_s)
        if self.snapshots is not None:
            _flag("snapshots", self.snapshots)
        if not isinstance(self.snapshot_every_s, int | float) or not self.snapshot_every_s >= 0:
            raise ConfigError(f"snapshot_every_s must be a number of seconds >= 0, got {self.snapshot_every_s!r}")
        if self.recovery not in RECOVERY:
            choices = ", ".join(map(repr, RECOVERY))
            raise ConfigError(f"recovery must be one of {choices}, got {self.recovery!r}")
        if self.recovery == "replay":
            if not self.num_workers:
                raise ConfigError("recovery='replay' restores crashed workers: it needs num_workers >= 1")
            if self.snapshots is False:
                raise ConfigError("recovery='replay' restores the snapshot of each rollout: it needs snapshots")
        if self.checkpoint_dir is not None:
            if not isinstance(self.checkpoint_dir, str | os.PathLike) or not str(self.checkpoint_dir):
                raise ConfigError(f"checkpoint_dir must be a path, got {self.checkpoint_dir!r}")
            object.__setattr__(self, "checkpoint_dir", os.fspath(self.checkpoint_dir))
        _non_negative_int("checkpoint_every", self.checkpoint_every)
        if self.checkpoint_every and self.checkpoint_dir is None:
            raise ConfigError(f"checkpoint_every={self.checkpoint_every} needs a checkpoint_dir to write into")
        _positive_int("checkpoints_kept", self.checkpoints_kept)
        if self.max_policy_lag is not None:
            _non_negative_int("max_policy_lag", self.max_policy_lag)
            if self.sync or not self.num_workers:
                raise ConfigError(
                    f"max_policy_lag={self.max_policy_lag} drops the stale rollouts of async collection: it needs "
                    "num_workers >= 1 and sync=False (a sync batch is one rollout of every worker, never dropped)"
                )
        if self.apply_weights not in APPLY_WEIGHTS:
            choices = ", ".join(map(repr, APPLY_WEIGHTS))
            raise ConfigError(f"apply_weights must be one of {choices}, got {self.apply_weights!r}")
        exploration = getattr(self.exploration_type, "value", self.exploration_type)  # the enum's name
        if not isinstance(exploration, str) or exploration.lower() not in EXPLORATION_TYPES:
            raise ConfigError(
                f"exploration_type={self.exploration_type!r}: expected an ExplorationType or one of "
                f"{', '.join(EXPLORATION_TYPES)}"
            )
        object.__setattr__(self, "exploration_type", exploration.lower())
        if self.info_keys is None:
            raise ConfigError(
                "info_keys must be a sequence of non-empty strings, got None: a collector's batch keeps the "
                "entries you name (info_keys=('lives',)), each a field of fixed shape; name the entries to keep"
            )
        given = self.info_keys
        if (
            isinstance(given, str)
            or not isinstance(given, Iterable)
            or not all(isinstance(k, str) and k for k in given)
        ):
            raise ConfigError(f"info_keys must be a sequence of non-empty strings, got {given!r}")
        object.__setattr__(self, "info_keys", tuple(given))
        if self.cat_results not in (0, "stack") or isinstance(self.cat_results, bool):
            raise ConfigError(f"cat_results must be 0 (concatenate) or 'stack', got {self.cat_results!r}")
        if self.cat_results == "stack" and not (self.num_workers and self.sync):
            raise ConfigError(
                "cat_results='stack' stacks the rollouts of a sync batch of workers; it needs num_workers >= 1 "
                "and sync=True"
            )
        if not isinstance(self.supervision, SupervisionConfig):
            raise ConfigError(f"supervision must be a SupervisionConfig, got {self.supervision!r}")
        if self.zero_copy and not self.num_workers:
            raise ConfigError("zero_copy=True needs num_workers >= 1 (in-process batches are never copied)")
        for name in _DEVICE_FIELDS:
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, resolve_device(value, name))
        if self.env_device is not None and resolve_device(self.env_device, "env_device").type != "cpu":
            raise ConfigError(
                f"env_device={str(self.env_device)!r}: gymnasium-style environments step on the CPU; "
                "put the policy on the GPU with policy_device= (or device=) instead"
            )
        if self.num_workers and not _policy_in_trainer(self.engine):
            policy_name = getattr(self.device_policy, "name", self.device_policy)
            for name in ("device", "policy_device"):
                value = getattr(self, name)
                if value is not None and (value.type != "cpu" or policy_name != "cpu"):
                    raise ConfigError(
                        f"{name}={str(value)!r}: with workers a device_policy places each worker's "
                        "policy (device_policy='round_robin', or device_policy=ExplicitPolicy(['cuda:0', 'cpu'])); "
                        f"leave {name} unset (storing_device= still chooses where batches arrive)"
                    )

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle with the devices as strings, so a worker unpickles its config without importing torch.

        A worker with a random policy never imports torch; a ``torch.device`` in its config
        would. Unpickled where torch is imported, the devices are ``torch.device`` objects again.
        """
        state = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in _DEVICE_FIELDS:
            if state[name] is not None:
                state[name] = str(state[name])
        return (_unpickle_config, (type(self), state))

    @classmethod
    def from_settings(cls, config: CollectorConfig | None = None, /, **overrides: Any) -> CollectorConfig:
        """``config`` with ``overrides`` applied, or a new config made of them alone.

        How :class:`~pycollect.Collector` (and anything else that builds a collector) turns its
        ``config`` and keyword arguments into one config: each override names a field of this
        class or of :class:`SupervisionConfig` (``max_restarts=5`` sets
        ``supervision.max_restarts``), applied on top of ``config`` if one is given.

        Raises:
            ConfigError: An override names no setting (the message suggests the closest), or
                no ``config`` is given and ``frames_per_batch`` is missing, or a value is bad.
        """
        if config is not None and not isinstance(config, CollectorConfig):
            raise ConfigError(f"config must be a CollectorConfig, got {type(config).__name__}: {config!r}")
        top = {name: value for name, value in overrides.items() if name in _FIELDS}
        nested = {name: value for name, value in overrides.items() if name in _SUPERVISION_FIELDS}
        unknown = sorted(set(overrides) - set(top) - set(nested))
        if unknown:
            raise ConfigError(_unknown_settings(unknown))
        if config is None:
            if "frames_per_batch" not in top:
                raise ConfigError(
                    "frames_per_batch is required: pass frames_per_batch=N, or a whole config=CollectorConfig(...)"
                )
            supervision = top.pop("supervision", SupervisionConfig())
            if not isinstance(supervision, SupervisionConfig):
                raise ConfigError(f"supervision must be a SupervisionConfig, got {supervision!r}")
            return cls(**top, supervision=replace(supervision, **nested) if nested else supervision)
        if nested:
            top["supervision"] = replace(top.get("supervision", config.supervision), **nested)
        return replace(config, **top) if top else config

    @property
    def requested_policy_device(self) -> torch.device | None:
        """``policy_device``, else ``device`` (TorchRL's rule), made ordinal (``cuda`` -> ``cuda:<current>``)."""
        chosen = self.policy_device if self.policy_device is not None else self.device
        return ordinal_device(chosen)

    @property
    def resolved_storing_device(self) -> torch.device | None:
        """``storing_device``, else (in-process) ``device``, made ordinal; ``None``: the default."""
        chosen = self.storing_device
        if chosen is None and not self.num_workers:
            chosen = self.device
        return ordinal_device(chosen)

    @property
    def takes_snapshots(self) -> bool:
        """Whether workers save their state after every rollout (``snapshots``; by default for replay, checkpoints)."""
        if self.snapshots is not None:
            return self.snapshots
        return self.recovery == "replay" or self.checkpoint_dir is not None

    @property
    def replicas(self) -> int:
        """Copies of the workers the engine runs (:attr:`.engines.EngineFactory.replicas`; 1 for the built-ins).

        Known once the config is resolved (:func:`pycollect.plugins.resolve` makes ``engine`` an
        instance); 1 while ``engine`` is still a name or ``None``.
        """
        return int(getattr(self.engine, "replicas", 1))

    @property
    def rows(self) -> int:
        """Environments stepped per batch: ``envs_per_worker``, times ``num_workers`` and the replicas in sync mode."""
        if not self.sync:
            return self.envs_per_worker
        return self.envs_per_worker * max(self.num_workers, 1) * self.replicas

    @property
    def steps_per_batch(self) -> int:
        """Steps per environment and batch (T): ``frames_per_batch`` over :attr:`rows`, rounded up."""
        return math.ceil(self.frames_per_batch / self.rows)

    @property
    def batch_frames(self) -> int:
        """Frames each batch really holds: :attr:`steps_per_batch` times :attr:`rows`."""
        return self.steps_per_batch * self.rows


def _policy_in_trainer(engine: Any) -> bool:
    """Whether ``engine`` (a name, or an engine factory) runs the policy here even with workers (``central``).

    Its workers only step environments, so ``device`` and ``policy_device`` keep their
    in-process meaning (TorchRL's) instead of being left to a ``device_policy``.
    """
    if isinstance(engine, str):
        return engine == "central"  # a name: the config loads no plugin to ask it
    return bool(getattr(engine, "policy_in_trainer", False))


_FIELDS = frozenset(f.name for f in fields(CollectorConfig))
_DEVICE_FIELDS = ("device", "policy_device", "env_device", "storing_device")
_SUPERVISION_FIELDS = frozenset(f.name for f in fields(SupervisionConfig))


def _unknown_settings(names: list[str]) -> str:
    """``'frame_per_batch' is not a setting (did you mean 'frames_per_batch'?)``, for each name."""
    return _unknown_names(names, _FIELDS | _SUPERVISION_FIELDS, "CollectorConfig and SupervisionConfig")


def _unknown_names(names: list[str], known: Iterable[str], classes: str) -> str:
    """Each unknown name with the closest known one, and where the known ones are documented."""
    candidates = sorted(known)
    parts = []
    for name in names:
        close = difflib.get_close_matches(name, candidates, n=1)
        parts.append(f"{name!r} is not a setting" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return "; ".join(parts) + f": the settings are the fields of {classes} (help(pycollect.{classes.split()[0]}))"


def _unpickle_config(cls: type[CollectorConfig], state: dict[str, Any]) -> CollectorConfig:
    """A pickled config as it was, without checking it again (see :meth:`CollectorConfig.__reduce__`).

    Its devices become ``torch.device`` objects again where torch is imported already (so a
    round trip in the trainer gives an equal config), and stay strings where it is not (a
    worker with a random policy).
    """
    torch = sys.modules.get("torch")
    config = object.__new__(cls)
    for name, value in state.items():
        if name in _DEVICE_FIELDS and value is not None and torch is not None:
            value = torch.device(value)
        object.__setattr__(config, name, value)
    return config


# -- a vector env's settings ---------------------------------------------------------------

AUTORESET_MODES = ("next_step", "same_step", "disabled")
"""The names ``autoreset_mode`` accepts (besides gymnasium's ``AutoresetMode`` and its values)."""


def parse_autoreset_mode(value: Any) -> AutoresetMode:
    """Gymnasium's :class:`~gymnasium.vector.AutoresetMode` for a name, a value or the enum itself.

    ``"next_step"``, ``"NEXT_STEP"``, gymnasium's value ``"NextStep"`` and
    ``AutoresetMode.NEXT_STEP`` are the same mode (likewise for the two others).

    Raises:
        ConfigError: No mode has that name; the message lists the valid ones.
    """
    from gymnasium.vector import AutoresetMode  # here: importing the settings imports no env library

    if isinstance(value, AutoresetMode):
        return value
    if isinstance(value, str):
        for mode in AutoresetMode:
            if value == mode.value or value.lower() == mode.name.lower():
                return mode
    names = ", ".join(repr(name) for name in AUTORESET_MODES)
    raise ConfigError(
        f"unknown autoreset_mode {value!r}: use one of {names} or a gymnasium.vector.AutoresetMode "
        f"({', '.join(f'AutoresetMode.{mode.name}' for mode in AutoresetMode)})"
    )


def default_num_workers(num_envs: int) -> int:
    """The workers a vector env starts when not told: the most, up to the CPUs, that split ``num_envs`` evenly."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(w for w in range(1, max(1, min(cpus, num_envs)) + 1) if num_envs % w == 0)


def _info_keys(value: Any) -> tuple[str, ...] | None:
    """``info_keys`` as a tuple of names, each once (``None`` stays ``None``: every entry).

    Raises:
        ConfigError: Not ``None`` nor a sequence of non-empty strings (a lone string too: it
            would be read letter by letter).
    """
    if value is None:
        return None
    if isinstance(value, str | bytes) or not isinstance(value, Sequence | set | frozenset):
        raise ConfigError(
            f"info_keys must be None (every entry) or a sequence of info entry names, such as ('lives',), got {value!r}"
        )
    bad = [key for key in value if not isinstance(key, str) or not key]
    if bad:
        raise ConfigError(f"info_keys: {bad[0]!r} is not an info entry name (a non-empty string), in {value!r}")
    return tuple(dict.fromkeys(value))


@dataclass(frozen=True, init=False)
class VectorConfig:
    """Every setting of a vector env: the one place each is defined, defaulted, documented and checked.

    :func:`~pycollect.make_vec`, :class:`~pycollect.vector.SB3VecEnv` and
    ``pycollect.torchrl.ParallelEnv`` make one from their arguments, and the ``central`` engine
    one for each group of its workers; the step backend, every worker process (it travels in
    their spec) and the vector env get it whole. It is frozen and checks every value when it is
    made, raising :class:`~pycollect.ConfigError` that names the bad value before any env is
    built or any worker started. What a user may leave open is settled then, once: the fields
    hold the resolved values (``num_workers=None`` is a number of workers, the autoreset mode
    an ``AutoresetMode``, ``batch_size=None`` is ``num_envs``, ``info_keys`` a tuple).

    Attributes:
        num_envs: How many envs (1 or more).
        num_workers: Worker processes to step them in, ``num_envs / num_workers`` each (it must
            divide ``num_envs``); ``0``: in this process. Given as ``None`` (the default): the
            most, up to the CPUs this process may run on, that divide ``num_envs``
            (:func:`default_num_workers`).
        autoreset_mode: Gymnasium's ``AutoresetMode``. Given as ``"next_step"`` (the default),
            ``"same_step"`` or ``"disabled"`` (any case), gymnasium's value (``"NextStep"``...)
            or the enum itself.
        batch_size: Envs a pool serves at a time: fewer than ``num_envs`` (a multiple of
            ``num_envs / num_workers``; never in ``DISABLED`` mode, which needs reset masks, nor
            without workers) makes a pool that serves the first envs ready (``async_reset``,
            ``recv``, ``send``). Given as ``None`` (the default): ``num_envs``.
        info_keys: The entries of the envs' infos that reach the caller (each name once);
            ``None`` (the default): all of them. The rest is dropped where the env steps.
        copy: ``True`` (the default): observations are fresh arrays. ``False``: views of the
            arrays the results are written into, valid until the next ``step`` or ``reset``.
        supervision: How the worker processes are watched, restarted and stopped (given as
            ``None``: :class:`SupervisionConfig`'s defaults).
        max_episode_steps: ``SAME_STEP`` mode only: truncate an episode after this many steps
            and reset it in the same step (the ``central`` engine's ``max_frames_per_traj``);
            ``None`` (the default, and what ``make_vec`` uses): never.
        metrics: Count each step's frames and time, in the workers and the trainer, for
            ``stats().metrics``, ``pycollect top`` and the exporters (docs/metrics.md);
            ``False``: nothing is counted (to measure what counting costs).
    """

    num_envs: int
    num_workers: int
    autoreset_mode: AutoresetMode
    batch_size: int
    info_keys: tuple[str, ...] | None
    copy: bool
    supervision: SupervisionConfig
    max_episode_steps: int | None
    metrics: bool

    # Written out rather than generated: it takes what a caller writes (a mode's name, None for
    # a default) while the fields are typed as what __post_init__ resolves them to.
    def __init__(
        self,
        num_envs: int,
        num_workers: int | None = None,
        autoreset_mode: AutoresetMode | str = "next_step",
        batch_size: int | None = None,
        info_keys: Sequence[str] | None = None,
        copy: bool = True,
        supervision: SupervisionConfig | None = None,
        max_episode_steps: int | None = None,
        metrics: bool = True,
    ) -> None:
        given = {
            "num_envs": num_envs,
            "num_workers": num_workers,
            "autoreset_mode": autoreset_mode,
            "batch_size": batch_size,
            "info_keys": info_keys,
            "copy": copy,
            "supervision": SupervisionConfig() if supervision is None else supervision,
            "max_episode_steps": max_episode_steps,
            "metrics": metrics,
        }
        for name, value in given.items():
            object.__setattr__(self, name, value)
        self.__post_init__()

    def __post_init__(self) -> None:
        from gymnasium.vector import AutoresetMode

        resolve = functools.partial(object.__setattr__, self)
        mode = parse_autoreset_mode(self.autoreset_mode)
        resolve("autoreset_mode", mode)
        if not isinstance(self.copy, bool):
            raise ConfigError(f"copy must be a bool, got {self.copy!r}")
        if not isinstance(self.metrics, bool):
            raise ConfigError(f"metrics must be a bool, got {self.metrics!r}")
        num_envs = self.num_envs
        if not _is_int(num_envs) or num_envs < 1:
            raise ConfigError(f"num_envs must be an int of 1 or more, got {num_envs!r}")
        if self.num_workers is None:
            resolve("num_workers", default_num_workers(num_envs))
        num_workers = self.num_workers
        if not _is_int(num_workers) or num_workers < 0:
            raise ConfigError(
                f"num_workers must be an int of 0 or more (0: step the envs in this process), got {num_workers!r}"
            )
        if num_workers > num_envs:
            raise ConfigError(
                f"num_workers={num_workers} is more than num_envs={num_envs}: a worker steps at least one env"
            )
        self._check_batch_size(mode)
        resolve("info_keys", _info_keys(self.info_keys))
        if num_workers and num_envs % num_workers:
            below, above = num_envs - num_envs % num_workers, num_envs - num_envs % num_workers + num_workers
            choices = f"{below} or {above}" if below else f"{above}"
            raise ConfigError(
                f"num_envs={num_envs} does not split over num_workers={num_workers}: every worker steps the "
                f"same number of envs, so num_envs must be a multiple of num_workers ({choices})"
            )
        if self.max_episode_steps is not None:
            _positive_int("max_episode_steps", self.max_episode_steps)
            if mode is not AutoresetMode.SAME_STEP:
                raise ConfigError(f"max_episode_steps={self.max_episode_steps}: in autoreset_mode SAME_STEP only")
        if not isinstance(self.supervision, SupervisionConfig):
            raise ConfigError(f"supervision must be a SupervisionConfig, got {self.supervision!r}")

    def _check_batch_size(self, mode: AutoresetMode) -> None:
        """Check ``batch_size`` (a pool's) against the envs and workers; ``None`` becomes ``num_envs``."""
        from gymnasium.vector import AutoresetMode

        batch_size, num_envs, num_workers = self.batch_size, self.num_envs, self.num_workers
        if batch_size is None:
            object.__setattr__(self, "batch_size", num_envs)
            return
        if not _is_int(batch_size) or not 1 <= batch_size <= num_envs:
            raise ConfigError(f"batch_size must be an int from 1 to num_envs={num_envs}, got {batch_size!r}")
        if batch_size == num_envs:
            return
        if num_workers == 0:
            raise ConfigError(
                f"batch_size={batch_size} < num_envs={num_envs} makes a pool of workers: num_workers=0 has none"
            )
        k = num_envs // num_workers if num_envs % num_workers == 0 else 0
        if k and batch_size % k:
            raise ConfigError(
                f"batch_size={batch_size} is not a multiple of the {k} envs each of the {num_workers} workers "
                "steps: the pool serves whole workers"
            )
        if mode is AutoresetMode.DISABLED:
            raise ConfigError("autoreset_mode DISABLED needs reset masks, which a pool (batch_size < num_envs) has not")

    @property
    def envs_per_worker(self) -> int:
        """Envs each worker process steps: ``num_envs / num_workers`` (``num_envs`` in this process)."""
        return self.num_envs // max(1, self.num_workers)

    @property
    def final_observations(self) -> bool:
        """Whether a step returns the final observations of the episodes it ends (``SAME_STEP`` mode)."""
        from gymnasium.vector import AutoresetMode

        return self.autoreset_mode is AutoresetMode.SAME_STEP
