"""The built-in engines, ``inprocess``, ``workers``, ``central`` and ``device``, registered as any plugin's would be."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pycollect.engines.base import Engine, EngineFactory
from pycollect.exceptions import ConfigError
from pycollect.hookspecs import hookimpl

if TYPE_CHECKING:
    from pycollect.config import CollectorConfig
    from pycollect.envs.source import EnvSource

__all__ = ["Central", "Device", "InProcess", "Workers"]


class InProcess(EngineFactory):
    """The environments step in the trainer process (``num_workers=0``)."""

    name = "inprocess"
    snapshots_envs = True

    def check(self, config: CollectorConfig) -> None:
        """Refuse workers: this engine has none."""
        if config.num_workers:
            raise ConfigError(
                f"engine='inprocess' steps the environments in this process; got num_workers={config.num_workers}"
            )

    def start(self, config: CollectorConfig, env_source: EnvSource, policy: Any, weights_module: Any) -> Engine:
        """Build the environments here."""
        from pycollect._engines.inprocess import InProcessEngine

        return InProcessEngine.start(config, env_source, policy, weights_module)


class Workers(EngineFactory):
    """Supervised worker processes, batches through shared memory (``num_workers >= 1``)."""

    name = "workers"
    snapshots_envs = True

    def check(self, config: CollectorConfig) -> None:
        """Require at least one worker."""
        if not config.num_workers:
            raise ConfigError("engine='workers' needs num_workers >= 1")

    def start(self, config: CollectorConfig, env_source: EnvSource, policy: Any, weights_module: Any) -> Engine:
        """Check everything, then start the workers."""
        from pycollect._engines.workers import WorkerPool

        return WorkerPool.start(config, env_source, policy, weights_module)


class Central(EngineFactory):
    """Workers only step the envs; the trainer runs the policy once per step for all of them.

    ``Collector(env, policy, num_workers=N, engine="central")``: see docs/central.md. The
    policy is the trainer's own object, on ``policy_device`` (or ``device``), so no weight-sync
    scheme moves it and no device policy places it.

    Args:
        groups: How many groups each worker's envs are split into (consecutive, as evenly as
            they go, at most ``envs_per_worker``); each group spans every worker. The policy
            runs on one group's observations while the workers step another group's envs, all
            driven from the caller's thread. ``2`` double-buffers, which needs somewhere for
            the policy to run while the workers step; ``1`` makes one policy call for every
            worker's envs, with the envs idle meanwhile. ``None`` (the default) chooses: ``2``
            where the policy runs on a GPU or this process may use more CPUs than there are
            workers, else ``1`` (and ``1`` without a policy, which has no call to overlap);
            see :func:`pycollect._engines.central.engine.default_groups`. On CPUs that the
            workers fill, two groups still pay where the policy's cost grows with its batch (a
            CNN: ``engine=Central(groups=2)``) and cost where it does not (a small MLP).
        policy_threads: torch's intra-op threads for the policy calls, while a batch is
            collected, when the policy runs on the CPU (the trainer's setting is restored
            after). ``None`` (the default): the CPUs this process may use, less one per worker
            (they step the envs meanwhile), at least 1. On a GPU the setting is left alone.

    Raises:
        ConfigError: ``groups`` or ``policy_threads`` is neither a positive int nor ``None``.
    """

    name = "central"
    default_weight_sync = "no_sync"  # nothing moves: update_policy_weights_() needs no scheme
    policy_in_trainer = True
    snapshots_envs = True  # between batches, for checkpoints: not for replay (check refuses it)

    def __init__(self, groups: int | None = None, policy_threads: int | None = None) -> None:
        if groups is not None and not _positive_int(groups):
            raise ConfigError(
                f"Central(groups={groups!r}): groups must be an int of 1 or more, or None (2 where the policy can "
                "run while the workers step, else 1)"
            )
        if policy_threads is not None and not _positive_int(policy_threads):
            raise ConfigError(
                f"Central(policy_threads={policy_threads!r}): policy_threads must be an int of 1 or more, or None "
                "(as many as the CPUs the workers leave free)"
            )
        self.groups = groups
        self.policy_threads = policy_threads

    def describe(self) -> str:
        """``central`` with its groups and policy threads."""
        groups = "auto" if self.groups is None else self.groups
        threads = "auto" if self.policy_threads is None else self.policy_threads
        return f"central (groups={groups}, policy_threads={threads})"

    def check(self, config: CollectorConfig) -> None:
        """Require workers; refuse the settings that place or feed a policy in the workers."""
        if not config.num_workers:
            raise ConfigError(
                "engine='central' needs num_workers >= 1 (its workers step the envs); with num_workers=0 the "
                "in-process engine already runs the policy here"
            )
        _refuse_worker_policy_settings(
            config,
            "central",
            "runs the policy in this process, so no scheme moves its weights (update_policy_weights_() needs none)",
            "runs no policy in the workers; choose where the policy runs with policy_device= (or device=)",
        )
        if config.zero_copy:
            raise ConfigError(
                "zero_copy=True: engine='central' assembles every batch in this process, so there are no "
                "shared-memory rollout slots to view; leave zero_copy unset"
            )
        if config.recovery == "replay":
            raise ConfigError(
                "recovery='replay': engine 'central' saves its envs' states between batches (snapshots=True, "
                "checkpoints), but cannot replay a crashed worker's steps within one; its crashes are cut "
                "(recovery='cut'). The workers engine replays them"
            )

    def start(self, config: CollectorConfig, env_source: EnvSource, policy: Any, weights_module: Any) -> Engine:
        """Check everything, then start the workers."""
        from pycollect._engines.central import CentralEngine

        return CentralEngine.start(
            config, env_source, policy, weights_module, groups=self.groups, policy_threads=self.policy_threads
        )


class Device(EngineFactory):
    """One device env stepped in the trainer, its rollouts kept on its device: no host copy at any step.

    ``Collector(env, policy, engine="device", envs_per_worker=N, frames_per_batch=N * T)``: ``env``
    builds a :class:`~pycollect.envs.DeviceBatchedEnv` of ``N`` sub-envs (a factory returning one,
    or an env backend with :meth:`~pycollect.envs.EnvBackend.make_device`), and the batches are
    ``[N, T]`` TensorDicts on the env's device, with the other engines' keys, dtypes and
    semantics (docs/device.md). The policy is the trainer's own object, called on the env's
    observation tensors, so no weight-sync scheme moves it.
    """

    name = "device"
    default_weight_sync = "no_sync"  # nothing moves: update_policy_weights_() needs no scheme
    policy_in_trainer = True
    snapshots_envs = True  # an env implementing get_state/set_state: checkpoints, state_dict() (no replay: no workers)

    def check(self, config: CollectorConfig) -> None:
        """Refuse workers and the settings that only mean something for host envs or workers."""
        if config.num_workers:
            raise ConfigError(
                f"engine='device' steps one device env in this process, where its tensors are; got "
                f"num_workers={config.num_workers}: leave num_workers=0 and give the env all the sub-envs "
                "(envs_per_worker)"
            )
        _refuse_worker_policy_settings(
            config,
            "device",
            "calls the very policy object in this process, so no scheme moves its weights (update_policy_weights_() "
            "needs none)",
            "has no workers to place; the env's device is where the policy runs and the batches are stored",
        )
        if config.info_keys:
            raise ConfigError(
                f"info_keys={list(config.info_keys)!r}: a device env's step returns no info dict (its values would be "
                "read on the host); return what you need as part of the observation"
            )

    def start(self, config: CollectorConfig, env_source: EnvSource, policy: Any, weights_module: Any) -> Engine:
        """Build the device env here and check it, the settings and the policy."""
        from pycollect._engines.device import DeviceEngine

        return DeviceEngine.start(config, env_source, policy, weights_module)


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@hookimpl
def register_engine() -> Sequence[type[EngineFactory]]:
    """Register :class:`InProcess`, :class:`Workers`, :class:`Central` and :class:`Device`."""
    return [InProcess, Workers, Central, Device]


def _refuse_worker_policy_settings(config: CollectorConfig, engine: str, no_scheme: str, no_placement: str) -> None:
    """Refuse a weight-sync scheme or device policy for an engine whose policy runs in this process.

    Args:
        config: The resolved settings.
        engine: The engine's name, for the message.
        no_scheme: Why the engine needs no scheme.
        no_placement: Why it places no policy in workers.

    Raises:
        ConfigError: ``weight_sync`` other than ``no_sync``, or ``device_policy`` other than ``cpu``.
    """
    scheme = getattr(config.weight_sync, "name", config.weight_sync)
    if scheme != "no_sync":
        raise ConfigError(f"weight_sync={scheme!r}: engine={engine!r} {no_scheme}; leave weight_sync unset")
    placement = getattr(config.device_policy, "name", config.device_policy)
    if placement != "cpu":
        raise ConfigError(f"device_policy={placement!r}: engine={engine!r} {no_placement}")
