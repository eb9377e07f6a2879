"""The collector's settings: the one place where defaults live and arguments are checked.

:class:`CollectorConfig` (with its :class:`SupervisionConfig`) is frozen and checks every
value when it is made, raising :class:`~pycollect.ConfigError` that names the bad value
before any environment or worker exists. The Rust side receives explicit values only.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pycollect.exceptions import ConfigError

if TYPE_CHECKING:
    import torch

    from pycollect.devices import DevicePolicy
    from pycollect.engines import EngineFactory
    from pycollect.weights import WeightSyncScheme

__all__ = [
    "APPLY_WEIGHTS",
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


def _ordinal(device: torch.device | str | None) -> torch.device | None:
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


@dataclass(frozen=True)
class CollectorConfig:
    """Every setting of a :class:`~pycollect.Collector` but the env and the policy.

    The meaning of each field is documented on :class:`~pycollect.Collector`, whose keyword
    arguments fill it. Device arguments are parsed into ``torch.device`` objects.

    Attributes:
        frames_per_batch: Frames requested per batch (see :attr:`batch_frames`).
        total_frames: Stop after this many frames; -1 collects forever.
        envs_per_worker: Environments stepped together.
        num_workers: Worker processes; 0 steps the environments in the trainer.
        sync: With workers: one rollout of every worker per batch, or the next one of any.
        zero_copy: With workers: yield views of the shared-memory slots.
        max_frames_per_traj: Truncate a trajectory after this many steps.
        init_random_frames: Uniform random actions until this many frames are collected.
        reset_at_each_iter: Reset every environment at the start of every batch.
        split_trajs: Yield one trajectory per row.
        seed: The seed everything random derives from, or ``None``.
        device: In-process: TorchRL's generic device, the default of ``policy_device`` and
            ``storing_device``. With workers only the CPU (and only with the ``cpu`` device
            policy): a ``device_policy`` places each worker.
        policy_device: In-process: where the policy runs (``None``: ``device``, else where
            its parameters are, else the CPU). Not with workers (see ``device``).
        env_device: Where the environments' data lives: the CPU only (gymnasium-style
            environments step there); accepted for TorchRL compatibility.
        storing_device: Where batches are delivered (``None``: ``device`` in-process, else
            the CPU; with workers where the device policy places worker 0 in sync mode, the
            delivering worker in async mode).
        weight_sync: With workers: the weight-sync scheme, a registered name, a class or an
            instance (``None``: :data:`DEFAULT_WEIGHT_SYNC`).
        weight_sync_timeout_s: The longest ``update_policy_weights_()`` may block (at most
            :data:`MAX_SECONDS`).
        apply_weights: With workers: when a worker applies new weights, ``"between_rollouts"``
            (the default: a rollout is collected with one version) or ``"between_steps"``
            (before any step, never during a policy call: fresher weights, mixed versions
            within a rollout, each frame still stamped with its own).
        device_policy: With workers: the device placement policy, a name or an instance.
        exploration_type: How a probabilistic policy (a TorchRL ``ProbabilisticActor``) acts:
            TorchRL's ``ExplorationType`` (``RANDOM``, the default as in TorchRL's collectors:
            it samples; ``DETERMINISTIC``, ``MODE``, ``MEAN``, ``MEDIAN``) or its name;
            normalised to the lowercase name. Applied around every policy call.
        info_keys: Entries of the env's step ``info`` dict to keep in the batch, each at
            ``("next", name)`` with the shape and dtype it has on the first step.
        set_truncated: Mark the last step of every rollout truncated (and done) where the
            episode goes on, as TorchRL's ``set_truncated`` does (for bootstrapping values).
        cat_results: How a sync batch of workers is shaped: ``0`` (the default) concatenates
            their rollouts, ``[num_workers * envs_per_worker, T]``; ``"stack"`` stacks them,
            ``[num_workers, envs_per_worker, T]``, as TorchRL's ``MultiSyncCollector`` does.
        engine: What runs the environments: ``None`` (the built-in ``inprocess`` engine for
            ``num_workers=0``, ``workers`` otherwise), a registered engine's name or an
            :class:`~pycollect.engines.EngineFactory` instance; resolved to an instance and
            checked (:meth:`~pycollect.engines.EngineFactory.check`) here.
        check_resources: Refuse, before anything is allocated or started, memory this machine
            does not have (the shared-memory segment, owned batches) and absurd counts of
            workers or environments; ``False`` lets those who know better through.
        supervision: How workers are watched, restarted and stopped.
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
    engine: str | EngineFactory | None = None

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
        for name in ("sync", "zero_copy", "reset_at_each_iter", "split_trajs", "set_truncated", "check_resources"):
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
        if isinstance(self.info_keys, str) or not all(isinstance(k, str) and k for k in self.info_keys):
            raise ConfigError(f"info_keys must be a sequence of non-empty strings, got {self.info_keys!r}")
        object.__setattr__(self, "info_keys", tuple(self.info_keys))
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
        for name in ("device", "policy_device", "env_device", "storing_device"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, resolve_device(value, name))
        if self.env_device is not None and resolve_device(self.env_device, "env_device").type != "cpu":
            raise ConfigError(
                f"env_device={str(self.env_device)!r}: gymnasium-style environments step on the CPU; "
                "put the policy on the GPU with policy_device= (or device=) instead"
            )
        if self.num_workers:
            policy_name = getattr(self.device_policy, "name", self.device_policy)
            for name in ("device", "policy_device"):
                value = getattr(self, name)
                if value is not None and (value.type != "cpu" or policy_name != "cpu"):
                    raise ConfigError(
                        f"{name}={str(value)!r}: with workers a device_policy places each worker's "
                        "policy (device_policy='round_robin', or device_policy=ExplicitPolicy(['cuda:0', 'cpu'])); "
                        f"leave {name} unset (storing_device= still chooses where batches arrive)"
                    )
        if self.engine is not None:
            from pycollect import plugins

            factory = plugins.instance("engine", self.engine, "engine")
            object.__setattr__(self, "engine", factory)
            factory.check(self)

    @property
    def requested_policy_device(self) -> torch.device | None:
        """``policy_device``, else ``device`` (TorchRL's rule), made ordinal (``cuda`` -> ``cuda:<current>``)."""
        chosen = self.policy_device if self.policy_device is not None else self.device
        return _ordinal(chosen)

    @property
    def resolved_storing_device(self) -> torch.device | None:
        """``storing_device``, else (in-process) ``device``, made ordinal; ``None``: the default."""
        chosen = self.storing_device
        if chosen is None and not self.num_workers:
            chosen = self.device
        return _ordinal(chosen)

    def policy_device_for(self, policy: Any) -> torch.device:
        """Where ``policy`` runs: ``policy_device``, else ``device``, else where its parameters are, else the CPU.

        Raises:
            ConfigError: The policy's parameters are on the ``meta`` device (no data to move),
                or (with workers, which receive the policy pickled) they are not on the CPU.
        """
        import torch

        from pycollect._rollout.policy import parameters_device

        own = parameters_device(policy)
        requested = self.requested_policy_device
        if requested is None:
            chosen = own or torch.device("cpu")
        else:
            chosen = requested
            if own is not None and own.type == "meta":
                name = "policy_device" if self.policy_device is not None else "device"
                raise ConfigError(
                    f"{name}={str(chosen)!r} but the policy's parameters are on {own}, which holds no data to "
                    "copy; materialise the policy first (e.g. policy.to_empty(device=...) and load weights)"
                )
        if self.num_workers and chosen.type != "cpu":
            raise ConfigError(
                f"the policy's parameters are on {chosen}; workers receive the policy pickled, so keep it "
                "on the CPU (a device_policy decides where each worker runs it)"
            )
        return chosen

    @property
    def scheme(self) -> str | WeightSyncScheme:
        """The weight-sync scheme workers use: ``weight_sync``, or :data:`DEFAULT_WEIGHT_SYNC`."""
        return self.weight_sync if self.weight_sync is not None else DEFAULT_WEIGHT_SYNC

    @property
    def engine_factory(self) -> EngineFactory | None:
        """The resolved ``engine`` (``None``: the built-in one for ``num_workers``)."""
        from pycollect.engines import EngineFactory

        return self.engine if isinstance(self.engine, EngineFactory) else None

    @property
    def replicas(self) -> int:
        """Copies of the workers the engine runs (:attr:`EngineFactory.replicas`; 1 for the built-ins)."""
        factory = self.engine_factory
        return 1 if factory is None else factory.replicas

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
