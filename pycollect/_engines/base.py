"""The engine interface: what a :class:`~pycollect.Collector` drives to get batches.

An engine owns the environments (in this process, or in worker processes) and turns them into
``TensorDict`` batches. The collector keeps the counters (frames, policy version, episodes) and
the user-facing checks; the engine only collects, publishes weights, reports supervision and
closes. An :class:`EngineFactory` (the class a plugin registers through ``register_engine()``,
configured by its constructor) starts one engine per collector; :func:`pycollect._engines.start`
picks the factory for a config. :mod:`pycollect.engines` is the public home of these names.
"""

from __future__ import annotations

import abc
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from pycollect.exceptions import ConfigError, PyCollectWarning

if TYPE_CHECKING:
    from tensordict import TensorDict

    from pycollect._core import WorkerEvent, WorkerStats
    from pycollect._rollout.actions import ActionSource
    from pycollect._rollout.fields import BatchField
    from pycollect.config import CollectorConfig
    from pycollect.envs.backend import GymLikeEnv
    from pycollect.envs.source import EnvSource
    from pycollect.envs.specs import EnvSpecs, FieldSpec

__all__ = [
    "FIXED_FRAME_BYTES",
    "Engine",
    "EngineFactory",
    "RolloutPlan",
    "Supervision",
    "check_fits_before_env",
    "close_within",
    "plan_rollout",
]


@dataclass(frozen=True)
class Supervision:
    """What an engine's supervisor knows: per-worker stats and recent events (empty in-process)."""

    workers: tuple[WorkerStats, ...] = ()
    events: tuple[WorkerEvent, ...] = ()


@dataclass(frozen=True)
class RolloutPlan:
    """What every rollout holds, decided once in the trainer before anything is collected.

    Attributes:
        specs: The environment's fields.
        actions: The action source, checked against the action space (a policy was called
            once on an example observation).
        fields: Every array of a rollout, policy outputs included.
        info: The entries of the env's step ``info`` kept (``info_keys``), as fields.
    """

    specs: EnvSpecs
    actions: ActionSource
    fields: tuple[BatchField, ...]
    info: tuple[FieldSpec, ...] = ()


def plan_rollout(config: CollectorConfig, env_source: EnvSource, env: GymLikeEnv, policy: Any) -> RolloutPlan:
    """Read the specs of ``env`` and check ``policy`` against them.

    Raises:
        UnsupportedSpaceError: A space cannot be laid out in a batch.
        PolicyError: The policy fails on an example observation or does not fit the action space.
    """
    from pycollect._rollout.actions import action_source
    from pycollect._rollout.fields import batch_fields
    from pycollect._rollout.seeding import action_rng

    specs = env_source.specs(env)
    device = config.policy_device_for(policy)
    rng = action_rng(config.seed)
    actions = action_source(policy, specs, config.envs_per_worker, device, rng, config.exploration_type)
    info = _info_fields(config, env_source, env, specs)
    return RolloutPlan(specs, actions, batch_fields(specs, actions.outputs, actions.carried, info), info)


def _info_fields(
    config: CollectorConfig, env_source: EnvSource, env: GymLikeEnv, specs: EnvSpecs
) -> tuple[FieldSpec, ...]:
    """The fields of the ``info_keys`` entries, read off one step of ``env`` (reset afterwards by the runner).

    Raises:
        ConfigError: The first step's info lacks a key, or its value is not numeric.
    """
    if not config.info_keys:
        return ()
    import numpy as np

    from pycollect.envs.specs import FieldSpec

    env.reset(seed=config.seed)
    action = specs.action.sample(np.random.default_rng(config.seed), 1)[0]
    info = env.step(action)[4]
    fields = []
    for name in config.info_keys:
        if not isinstance(info, Mapping) or name not in info:
            have = ", ".join(sorted(map(str, info))) if isinstance(info, Mapping) else "no info dict"
            raise ConfigError(f"info_keys: {env_source.describe()!r}'s step info has no {name!r} (it has: {have})")
        value = np.asarray(info[name])
        if value.dtype.kind not in "biuf":
            raise ConfigError(f"info_keys: info[{name!r}] is {value.dtype}, which cannot be stored in a batch")
        shape = tuple(value.shape)
        bounds = np.full(shape, np.inf)
        fields.append(
            FieldSpec(("next", name), shape, value.dtype, -bounds, bounds, value.dtype.kind in "biu", f"info[{name!r}]")
        )
    return tuple(fields)


FIXED_FRAME_BYTES = 4 + 6 + 8 + 8
"""Bytes per frame of the fields every rollout has whatever the env: the reward (float32), six
done flags (bool), the trajectory id and the policy version (int64). The env's observations and
actions, and the policy's outputs, come on top."""


def check_fits_before_env(config: CollectorConfig, what: str, frames: int) -> None:
    """Refuse, before any env is built, ``frames`` frames whose env-independent fields alone cannot fit.

    The full check (:func:`~pycollect._engines.resources.check_fits` on every field) needs the
    env's specs, so it runs after the probe env is built; this one catches the absurd sizes
    (``frames_per_batch=10**13``) before, as the collector promises.

    Raises:
        ConfigError: Saying how much was asked for, how much there is, and what to change.
    """
    from pycollect._engines.resources import available_memory, format_bytes

    if not config.check_resources:
        return
    needed, available = frames * FIXED_FRAME_BYTES, available_memory()
    if needed > available:
        raise ConfigError(
            f"{what} would take at least {format_bytes(needed)} (the fields every env has alone), but only "
            f"{format_bytes(available)} of memory is available (frames_per_batch={config.frames_per_batch}, "
            f"envs_per_worker={config.envs_per_worker}, num_workers={config.num_workers}); lower "
            "frames_per_batch, or pass check_resources=False if you know the memory will be there"
        )


def close_within(env: GymLikeEnv, env_source: EnvSource, timeout_s: float, *, what: str = "env") -> None:
    """Close ``env`` in a daemon thread, waiting at most ``timeout_s`` for it.

    The probe env a trainer builds to read the specs is closed in the constructor: an env
    whose ``close()`` never returns (a stuck simulator, a dead socket) must not make
    ``Collector(...)`` never return, as workers' closes are bounded by the supervisor. If the
    deadline passes, a :class:`~pycollect.PyCollectWarning` names the env and the thread is
    left to finish (or to end with the interpreter).

    Raises:
        Exception: What ``close()`` raised, if it returned within the deadline.
    """
    done = threading.Event()
    failed: list[BaseException] = []

    def close() -> None:
        try:
            env.close()
        except BaseException as exc:  # handed to the caller below
            failed.append(exc)
        finally:
            done.set()

    threading.Thread(target=close, name="pycollect-close-env", daemon=True).start()
    if not done.wait(timeout_s):
        warnings.warn(
            f"the {what} {env_source.describe()!r}: close() did not return within {timeout_s:g} s; going on "
            "without it (a daemon thread keeps waiting for it)",
            PyCollectWarning,
            stacklevel=3,
        )
        return
    if failed:
        raise failed[0]


class Engine(abc.ABC):
    """Makes batches; one per collector.

    Attributes:
        plan: What every rollout holds.
    """

    plan: RolloutPlan

    @abc.abstractmethod
    def next_batch(self, *, random_actions: bool, policy_version: int) -> TensorDict:
        """Collect and return the next batch.

        Args:
            random_actions: The trainer's view of the warm-up phase (``init_random_frames``);
                engines whose workers count frames themselves ignore it.
            policy_version: The collector's version of the policy weights now, which an
                engine that calls the very policy object records on every frame.
        """

    @abc.abstractmethod
    def publish_weights(self, weights: Any, version: int) -> None:
        """Make the current weights of ``weights`` (a module), stamped ``version``, reach wherever the policy runs."""

    def supervision(self) -> Supervision:
        """Per-worker stats and recent supervision events (none for an engine without workers)."""
        return Supervision()

    def state(self) -> dict[str, Any]:
        """What :meth:`load_state` needs to resume (e.g. trajectory numbering)."""
        return {}

    def load_state(self, state: Mapping[str, Any]) -> None:  # noqa: B027 - optional hook
        """Restore :meth:`state`."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop collecting and release everything (idempotent)."""


class EngineFactory(abc.ABC):
    """Starts an :class:`Engine` for a collector; what the ``register_engine()`` hook contributes.

    Users select one with ``Collector(..., engine="<name>")`` (built with no arguments) or pass
    an instance configured through its constructor (``engine=RayEngine(num_actors=4)``). With
    ``engine=None`` the collector picks a built-in one by ``num_workers``: ``inprocess`` for 0,
    ``workers`` otherwise.

    Attributes:
        name: The name users select it by.
        replicas: How many copies of the ``num_workers`` workers the engine runs; a sync batch
            holds one rollout of each (``[replicas * num_workers * envs_per_worker, T]``), so
            the collector's batch size and counts account for it. 1 for single-machine engines.
    """

    name: ClassVar[str] = ""
    replicas: int = 1

    def check(self, config: CollectorConfig) -> None:  # noqa: B027 - optional hook
        """Refuse settings this engine cannot honour, before anything runs.

        Raises:
            ConfigError: Naming the setting.
        """

    @abc.abstractmethod
    def start(self, config: CollectorConfig, env_source: EnvSource, policy: Any, weights_module: Any) -> Engine:
        """Build and start the engine; nothing is left running if this raises.

        Args:
            config: The collector's settings (already checked by :meth:`check`).
            env_source: What builds the environments (picklable).
            policy: The policy (``None``: random actions).
            weights_module: The module whose weights ``publish_weights`` moves (``None``: none).
        """

    def describe(self) -> str:
        """A short description for messages and ``repr``."""
        return self.name or type(self).__qualname__
