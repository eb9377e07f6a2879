"""The engine interface: what a :class:`~pycollect.Collector` drives to get batches.

An engine owns the environments (in this process, in worker processes, on other machines) and
turns them into ``TensorDict`` batches. The collector keeps the counters (frames, policy
version, episodes) and the user-facing checks; the engine only collects, publishes weights,
reports supervision and closes. An :class:`EngineFactory` (the class a plugin registers through
``register_engine()``, configured by its constructor) starts one engine per collector.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pycollect._engine_traits import EngineTraits

if TYPE_CHECKING:
    from tensordict import TensorDict

    from pycollect._core import WorkerEvent, WorkerStats
    from pycollect.config import CollectorConfig
    from pycollect.engines.plan import RolloutPlan
    from pycollect.envs.source import EnvSource

__all__ = ["Engine", "EngineFactory", "EnvCalls", "Supervision"]


@dataclass(frozen=True)
class Supervision:
    """What an engine's supervisor knows: per-worker stats and recent events (empty in-process).

    Attributes:
        workers: Per local worker process.
        events: Recent supervision events of the local workers, oldest first.
        actors: Per remote actor, for an engine whose workers run in actors elsewhere (e.g.
            ``pycollect-ray``'s ``ActorStats``: node, pid, restarts); empty otherwise.
    """

    workers: tuple[WorkerStats, ...] = ()
    events: tuple[WorkerEvent, ...] = ()
    actors: tuple[Any, ...] = ()


class EnvCalls(Protocol):
    """What reaches an engine's envs while it runs, env by env (:meth:`Engine.env_calls`).

    Env ``i`` is the one whose rows are row ``i`` of a sync batch (worker ``i // K``'s env
    ``i % K`` for an engine with workers). ``indices`` names envs in that numbering, in the
    order the results come back in; ``None``: every env, in order.
    """

    def call(
        self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any], indices: Sequence[int] | None = None
    ) -> list[Any]:
        """Each env's attribute ``name`` (through its wrappers), called with the arguments if callable."""
        ...

    def get_attr(self, name: str, indices: Sequence[int] | None = None) -> list[Any]:
        """Each env's attribute ``name`` (through its wrappers)."""
        ...

    def set_attr(self, name: str, values: Sequence[Any], indices: Sequence[int] | None = None) -> None:
        """Set ``name`` on each env to its value in ``values`` (one per env named)."""
        ...

    def apply(self, function: Callable[[Any], Any], indices: Sequence[int] | None = None) -> list[Any]:
        """``function(env)`` for each env, where the env lives."""
        ...


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

    def counters(self) -> Any | None:
        """The segment (a ``pycollect._core.Segment``) whose control blocks count this engine's work.

        Its worker blocks are the engine's workers' (they count their steps there, see
        :mod:`pycollect.metrics`); the collector adds the trainer's counts. ``None``, the
        default: the collector makes a small segment for the trainer's counts alone.
        """
        return None

    def state(self) -> dict[str, Any]:
        """What :meth:`load_state` needs to resume (e.g. trajectory numbering)."""
        return {}

    def load_state(self, state: Mapping[str, Any]) -> None:  # noqa: B027 - optional hook
        """Restore :meth:`state`."""

    def env_calls(self) -> EnvCalls | None:
        """What reaches the envs while the engine runs (``Collector.env_call`` and its kin).

        ``None``, the default: the engine does not reach them, and the collector refuses the
        calls naming the engine. An engine may raise ``ConfigError`` instead, to say why.
        """
        return None

    @abc.abstractmethod
    def close(self) -> None:
        """Stop collecting and release everything (idempotent)."""


class EngineFactory(EngineTraits, abc.ABC):
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
        default_weight_sync: The weight-sync scheme used when the collector's
            ``weight_sync`` is ``None`` (``"shared_memory"`` for the built-ins but ``central``).
        policy_in_trainer: The policy runs in the trainer even with workers (``central``): the
            very object trained is called, so there are no weights to send and
            ``update_policy_weights_()`` has nothing to warn about for a function policy.
        snapshots_envs: The engine saves its envs' states with its :meth:`Engine.state` (and
            restores them with :meth:`Engine.load_state`) when the collector asks for
            ``snapshots``; ``recovery="replay"`` and env states in a checkpoint need it.
    """

    def check(self, config: CollectorConfig) -> None:
        """Refuse settings this engine cannot honour, before anything runs.

        Raises:
            ConfigError: Naming the setting.
        """

    @abc.abstractmethod
    def start(self, config: CollectorConfig, env_source: EnvSource, policy: Any, weights_module: Any) -> Engine:
        """Build and start the engine; nothing is left running if this raises.

        Args:
            config: The collector's settings, resolved (:func:`pycollect.plugins.resolve`: its
                ``engine``, ``weight_sync`` and ``device_policy`` are instances) and checked by
                :meth:`check`.
            env_source: What builds the environments (picklable).
            policy: The policy (``None``: random actions).
            weights_module: The module whose weights ``publish_weights`` moves (``None``: none).
        """

    def describe(self) -> str:
        """A short description for messages and ``repr``."""
        return self.name or type(self).__qualname__
