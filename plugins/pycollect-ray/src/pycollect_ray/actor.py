"""What runs inside each Ray actor: one local pycollect collector, driven by the trainer.

This module is imported in the actor processes (Ray pickles :class:`CollectorActor` by
reference), so it imports nothing heavy at module level.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pycollect import Collector

__all__ = ["CollectorActor", "pack"]

Packed = dict[str, Any]
"""A batch as it travels: ``{"shape": [rows, T], "fields": [(key, ndarray), ...], "actor": {...}, "state": {...}}``."""


def pack(batch: Any) -> Packed:
    """A batch as numpy arrays, which Ray's serializer stores out of band (no pickling of data)."""
    fields = [(key, tensor.numpy()) for key, tensor in batch.items(include_nested=True, leaves_only=True)]
    return {"shape": list(batch.batch_size), "fields": fields}


def _node_ip() -> str:
    import ray.util

    return str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]


_ENV_METHODS = frozenset({"env_call", "env_get_attr", "env_set_attr", "env_apply"})


class CollectorActor:
    """A local :class:`pycollect.Collector` in a Ray actor.

    Ray calls the constructor again with the same arguments when it restarts the actor, so a
    restarted actor builds a fresh collector; with snapshots the trainer then sends it the state
    after its last delivered rollout (:meth:`resume`), and always the latest weights, before
    asking for a rollout.

    Args:
        index: The actor's index (its place in a sync batch).
        env_source: The resolved env (``pycollect.envs.source.EnvSource``).
        policy_blob: ``pycollect.engines.pack_policy(policy, weights_module)`` or ``None`` (random
            actions): one blob, so a function policy and the module it closes over stay one
            object here, and tensors that share a parameter's storage keep sharing it.
        config: The local collector's config (``pycollect_ray.actor_config``: the trainer's, whole,
            with a few settings derived for one actor).
        scheme: The :class:`~pycollect_ray.RayScheme` that fetches weights.
    """

    def __init__(self, index: int, env_source: Any, policy_blob: bytes | None, config: Any, scheme: Any):
        self.index = index
        self.scheme = scheme
        self._made_with = (env_source, policy_blob, config)
        # With snapshots (the trainer's ``takes_snapshots``, derived into ``config.snapshots``)
        # every rollout carries the env states after it; without, only the counters.
        self.snapshots = bool(config.snapshots)
        # Without snapshots the state is the counters and trajectory numbering: a few µs to read
        # from a workers engine, but the in-process engine pickles its envs to make any state
        # (about 0.4 ms a rollout for 8 CartPoles), the cost snapshots=True opts into; so no
        # state travels from an in-process actor without snapshots (it resumes afresh).
        self.carries_state = self.snapshots or config.num_workers > 0
        self._force_weights = False  # after a resume: apply the next weights whatever their version
        self.collector = self._build()

    def _build(self) -> Collector:
        from pycollect import Collector
        from pycollect.engines import unpack_policy

        env_source, policy_blob, config = self._made_with
        policy, weights_module = unpack_policy(policy_blob) if policy_blob is not None else (None, None)
        return Collector(env_source, policy, config=config, weights_from=weights_module)

    def config(self) -> Any:
        """The local collector's config, as resolved in the actor."""
        return self.collector.config

    def ready(self) -> dict[str, Any]:
        """Where the actor runs, once its collector (and its workers) started: pid, node id and node address."""
        import ray

        return {"pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id(), "node_ip": _node_ip()}

    def pid(self) -> int:
        """The actor's process id."""
        return os.getpid()

    def worker_pids(self) -> list[int]:
        """The process ids of the local collector's workers (none in-process)."""
        return [worker.pid for worker in self.collector.stats().workers if worker.pid]

    def policy_version(self) -> int:
        """The local collector's policy version."""
        return self.collector.policy_version

    def set_weights(self, version: int, ref: list[Any]) -> int:
        """Load weights ``version`` (the ``ObjectRef`` wrapped in a list, so Ray does not fetch it unasked).

        The local collector takes them to its workers through its own scheme, stamped with the
        trainer's version. An older or equal version (a duplicate after a restart) is ignored,
        but after :meth:`resume` (whose state brings back the version, not the weights) the
        next weights are applied whatever their version.
        """
        if version > self.collector.policy_version or self._force_weights:
            self._force_weights = False
            state = self.scheme.fetch(ref[0])
            self.collector.policy_version = version - 1  # update_policy_weights_ counts up by one
            self.collector.update_policy_weights_(state)
        return self.collector.policy_version

    def collect(self) -> Packed:
        """The local collector's next batch; returning it is its one ``ray.put``.

        The rollout carries a few numbers about the actor (under ``"actor"``) for the trainer's
        ``stats()``, so that asking for them never waits behind a rollout in flight, and the
        local collector's state after it (under ``"state"``, see :meth:`state`; ``None`` from an
        in-process actor without snapshots): the trainer
        keeps the state of the last rollout it delivered, which is where a resume (or this
        actor, restarted) continues from, while this actor collects ahead.
        """
        packed = pack(self.collector.next_batch())
        stats = self.collector.stats()
        workers = stats.workers
        packed["actor"] = {
            "policy_version": self.collector.policy_version,
            "worker_pids": [worker.pid for worker in workers if worker.pid],
            "worker_restarts": sum(worker.restarts for worker in workers),
            "metrics": stats.metrics,  # its workers' rates, times and lag (pycollect.metrics)
        }
        packed["state"] = self.state() if self.carries_state else None
        return packed

    def state(self) -> dict[str, Any]:
        """The local collector's ``state_dict``: its env states only with snapshots, never its weights.

        The weights are the trainer's to save (they come from it, :meth:`set_weights`); with
        snapshots the workers' states are pickles the local engine already holds (the workers
        made them with the rollout), so this copies nothing but the in-process engine's
        snapshot, which it pickles here.
        """
        state: dict[str, Any] = self.collector.state_dict(env_states=self.snapshots)
        state.pop("policy_state_dict", None)
        return state

    def resume(self, state: Mapping[str, Any] | None) -> None:
        """Continue from ``state`` (a :meth:`state` of this actor's collector, maybe of another run).

        ``None`` is the state before the first rollout: the local collector is built afresh.
        The weights are not in ``state``: the trainer sends them next (:meth:`set_weights`),
        and they are applied whatever their version.

        Raises:
            ConfigError: ``state`` is of another collector (the local check names the difference).
        """
        if state is None:
            self.collector.shutdown()
            self.collector = self._build()
        else:
            self.collector.load_state_dict(state)
        self._force_weights = True

    def env_request(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The local collector's ``env_call``, ``env_get_attr``, ``env_set_attr`` or ``env_apply``.

        An actor runs one call at a time, in the order they were submitted: this one runs
        between two rollouts (the one in flight, and the next the trainer asks for).

        Raises:
            ConfigError: ``method`` is none of the four.
            Exception: What the local collector raised (an env's error, a bad index).
        """
        if method not in _ENV_METHODS:
            from pycollect import ConfigError

            raise ConfigError(f"ray actor {self.index}: {method!r} is not one of {sorted(_ENV_METHODS)}")
        return getattr(self.collector, method)(*args, **kwargs)

    def close(self) -> None:
        """Shut the local collector down (workers stopped and reaped, segment gone)."""
        self.collector.shutdown()
