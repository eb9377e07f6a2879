"""The ``ray`` engine: ``M`` Ray actors, each running a local pycollect collector.

In the trainer, :class:`RayEngine` checks the settings and starts :class:`RayRun`, the running
engine: it builds one probe env to check the env and policy (as the ``workers`` engine does),
starts the actors, keeps one ``collect`` call in flight per actor (so actors collect while the
trainer trains, as local workers do) and turns what comes back through the object store into
``TensorDict`` batches. A sync batch is one rollout of every actor in actor order; an async
batch is whichever actor's rollout is ready first.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

from pycollect.config import MAX_SECONDS
from pycollect.engines import Engine, EngineFactory, RolloutPlan, Supervision, close_within, pack_policy, plan_rollout
from pycollect.exceptions import ConfigError, PyCollectWarning, WorkerCrashedError
from pycollect_ray.scheme import RayScheme

if TYPE_CHECKING:
    import torch
    from tensordict import TensorDict

    from pycollect.config import CollectorConfig
    from pycollect.envs.source import EnvSource

__all__ = ["ACTOR_DERIVED", "RayEngine", "RayRun", "actor_config", "actor_seed"]

_TRAJ_KEY = ("collector", "traj_ids")
_RESTART_POLL_S = 0.1


def actor_seed(seed: int | None, index: int) -> int | None:
    """The seed of actor ``index``'s local collector, derived from the user's ``seed``.

    Actor ``i``'s batches are those of ``Collector(..., seed=actor_seed(seed, i))`` with the
    actor's settings (:func:`actor_config`).
    """
    if seed is None:
        return None
    import numpy as np

    return int(np.random.SeedSequence([seed, index]).generate_state(1, np.uint32)[0])


ACTOR_DERIVED = frozenset(
    {
        "frames_per_batch",
        "total_frames",
        "zero_copy",
        "init_random_frames",
        "seed",
        "weight_sync",
        "engine",
        "set_truncated",
        "split_trajs",
        "cat_results",
    }
)
"""The settings :func:`actor_config` derives for an actor; every other one arrives as the trainer set it."""


def actor_config(config: CollectorConfig, index: int, num_actors: int) -> CollectorConfig:
    """The config of actor ``index``'s local :class:`pycollect.Collector`: the trainer's, whole, with a few derived.

    Every setting travels unchanged (a new one included) but those in :data:`ACTOR_DERIVED`:
    each actor collects rollouts of the trainer's length ``T`` (so a sync batch of ``M``
    actors holds the trainer's ``frames_per_batch``), forever (the trainer counts
    ``total_frames``), with its own derived seed (:func:`actor_seed`), its share of
    ``init_random_frames``, the ``ray`` scheme's ``local`` scheme for its workers and the
    built-in engine for its ``num_workers``; the trainer does the post-processing
    (``set_truncated``, ``split_trajs``, ``cat_results``, ``postproc``), so the actors do none.

    Args:
        config: The trainer's resolved config (its ``weight_sync`` a :class:`RayScheme`).
        index: The actor's index.
        num_actors: Actors in all.
    """
    scheme = config.weight_sync
    local_rows = config.envs_per_worker * (max(config.num_workers, 1) if config.sync else 1)
    return replace(
        config,
        frames_per_batch=config.steps_per_batch * local_rows,
        total_frames=-1,
        # The batch is serialized into the object store before the actor asks for the next
        # one, so views of the shared-memory slots save a copy and are never reused too early.
        zero_copy=config.num_workers > 0,
        init_random_frames=math.ceil(config.init_random_frames / num_actors),
        seed=actor_seed(config.seed, index),
        weight_sync=scheme.local if isinstance(scheme, RayScheme) and config.num_workers else None,
        engine=None,
        set_truncated=False,
        split_trajs=False,
        cat_results=0,
    )


class RayEngine(EngineFactory):
    """Runs a collector's workers on Ray: ``num_actors`` actors, each a local collector of ``num_workers`` workers.

    Select it with ``Collector(..., engine="ray")`` (the defaults below) or pass an instance.
    ``num_workers``, ``envs_per_worker`` and every other collector argument mean what they mean
    for one local collector, applied in each actor; ``frames_per_batch`` is a sync batch of all
    actors (each collects its rollouts of the same length); ``seed`` derives one seed per actor
    (:func:`actor_seed`); the ``device_policy`` places the workers inside each actor (on the GPUs
    Ray gives it). ``weight_sync`` is ``"ray"`` (the default here) or a :class:`RayScheme`.

    Args:
        num_actors: Ray actors (M).
        num_cpus_per_actor: CPUs Ray reserves for each actor (its workers run in it).
        num_gpus_per_actor: GPUs Ray reserves for each actor (visible to its workers).
        max_restarts: How often Ray restarts an actor that dies; the rollout it was collecting
            is dropped and collection goes on. One more death is a ``WorkerCrashedError``.
        address: The Ray cluster to connect to when Ray is not initialised yet (``"auto"``, or
            ``"ray://head:10001"``); ``None`` starts a local one (shut down with the collector).
        init_kwargs: More ``ray.init`` keyword arguments, used when this engine initialises Ray.
        runtime_env: The actors' Ray runtime env (e.g. ``{"working_dir": ".", "py_modules": [...]}``
            so they import the user's env module; ``{"env_vars": {...}}``).
        actor_options: More ``.options()`` for the actors (``resources``, ``scheduling_strategy``...).
        timeout_s: The longest the trainer waits for actors to start or to close (at most
            ``pycollect.config.MAX_SECONDS``). Actors that never started are not waited for at
            close, so actors Ray cannot place fail after ``timeout_s``, not twice that.
    """

    name = "ray"
    default_weight_sync: ClassVar[str] = RayScheme.name

    def __init__(
        self,
        num_actors: int = 2,
        *,
        num_cpus_per_actor: float = 1.0,
        num_gpus_per_actor: float = 0.0,
        max_restarts: int = 3,
        address: str | None = None,
        init_kwargs: Mapping[str, Any] | None = None,
        runtime_env: Mapping[str, Any] | None = None,
        actor_options: Mapping[str, Any] | None = None,
        timeout_s: float = 300.0,
    ) -> None:
        if isinstance(num_actors, bool) or not isinstance(num_actors, int) or num_actors < 1:
            raise ConfigError(f"RayEngine(num_actors={num_actors!r}): expected a positive integer")
        if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
            raise ConfigError(f"RayEngine(max_restarts={max_restarts!r}): expected a non-negative integer")
        for name, value in (("num_cpus_per_actor", num_cpus_per_actor), ("num_gpus_per_actor", num_gpus_per_actor)):
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ConfigError(f"RayEngine({name}={value!r}): expected a non-negative number")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or not 0 < timeout_s <= MAX_SECONDS:
            raise ConfigError(
                f"RayEngine(timeout_s={timeout_s!r}): expected a positive number of seconds, at most {MAX_SECONDS:g} s"
            )
        self.num_actors = num_actors
        self.replicas = num_actors
        self.num_cpus_per_actor = float(num_cpus_per_actor)
        self.num_gpus_per_actor = float(num_gpus_per_actor)
        self.max_restarts = max_restarts
        self.address = address
        self.init_kwargs = dict(init_kwargs or {})
        self.runtime_env = dict(runtime_env) if runtime_env is not None else None
        self.actor_options = dict(actor_options or {})
        self.timeout_s = float(timeout_s)

    def scheme(self, config: CollectorConfig) -> RayScheme:
        """The resolved config's weight-sync scheme, which must be a :class:`RayScheme`.

        Raises:
            ConfigError: Any other scheme (the actors get weights through the object store).
        """
        chosen = config.weight_sync
        if isinstance(chosen, RayScheme):
            return chosen
        name = getattr(chosen, "name", chosen)
        raise ConfigError(
            f"weight_sync={name!r}: with engine='ray' weights reach the actors through the object store "
            "(weight_sync='ray', the default here); RayScheme(local=...) chooses the scheme each actor uses "
            "for its workers"
        )

    def check(self, config: CollectorConfig) -> None:
        """Refuse what the actors cannot do, before any actor starts.

        Raises:
            ConfigError: ``cat_results="stack"`` (a sync batch is concatenated over actors and
                workers), or a ``weight_sync`` other than the ``ray`` scheme.
        """
        if config.cat_results == "stack":
            raise ConfigError("cat_results='stack' is not supported with engine='ray'; reshape the batch yourself")
        self.scheme(config)

    def start(self, config: CollectorConfig, env_source: EnvSource, policy: Any, weights_module: Any) -> Engine:
        """Check env and policy here, then start the actors (Ray too, if it is not initialised)."""
        return RayRun(self, config, env_source, policy, weights_module)

    def describe(self) -> str:
        """``ray(num_actors=M)``."""
        return f"ray(num_actors={self.num_actors})"

    def __repr__(self) -> str:
        return (
            f"RayEngine(num_actors={self.num_actors}, num_cpus_per_actor={self.num_cpus_per_actor}, "
            f"num_gpus_per_actor={self.num_gpus_per_actor}, max_restarts={self.max_restarts}, "
            f"address={self.address!r})"
        )


class RayRun(Engine):
    """The running ``ray`` engine of one collector.

    Attributes:
        plan: What every rollout holds (checked here on one probe env).
        actors: The actor handles, by index.
        deaths: Per actor, how many times it died (a rollout dropped each time).
    """

    def __init__(
        self, factory: RayEngine, config: CollectorConfig, env_source: EnvSource, policy: Any, weights_module: Any
    ) -> None:
        import ray

        from pycollect_ray.actor import CollectorActor

        self.factory = factory
        self.sync = config.sync
        self.scheme = factory.scheme(config)
        self.storing_device = config.storing_device
        self.actors: list[Any] = []
        self.deaths = [0] * factory.num_actors
        self._pids = [0] * factory.num_actors  # a new pid after a lost rollout: Ray restarted the actor
        self._ready: list[Any] = []  # per actor, the ObjectRef of its first ready() (done: it started)
        self._pending: dict[int, Any] = {}  # actor index -> ObjectRef of its collect() in flight
        self._latest: tuple[int, Any] | None = None  # the newest (version, ObjectRef of its state dict)
        self._owns_ray = False
        self._closed = False
        probe = env_source.make()  # bad env or policy fails here, before any actor starts
        try:
            self.plan: RolloutPlan = plan_rollout(config, env_source, probe, policy)
        finally:
            close_within(probe, env_source, config.supervision.shutdown_grace_s, what="probe env")
        try:
            blob = None if policy is None else pack_policy(policy, weights_module)
        except Exception as exc:
            from pycollect.exceptions import PolicyError

            raise PolicyError(f"policy {type(policy).__name__} cannot be pickled for Ray actors: {exc}") from exc
        try:
            if not ray.is_initialized():
                kwargs = dict(factory.init_kwargs)
                if factory.address is not None:
                    kwargs.setdefault("address", factory.address)
                kwargs.setdefault("include_dashboard", False)
                ray.init(**kwargs)
                # A cluster this engine started goes with it; one it connected to stays.
                self._owns_ray = kwargs.get("address") in (None, "local")
            options: dict[str, Any] = {
                "num_cpus": factory.num_cpus_per_actor,
                "num_gpus": factory.num_gpus_per_actor,
                "max_restarts": factory.max_restarts,
                "max_task_retries": 0,  # a rollout is never collected twice: a death drops it
                **factory.actor_options,
            }
            if factory.runtime_env is not None:
                options["runtime_env"] = factory.runtime_env
            remote = ray.remote(CollectorActor)
            self.actors = [
                remote.options(**options).remote(
                    index, env_source, blob, actor_config(config, index, factory.num_actors), self.scheme
                )
                for index in range(factory.num_actors)
            ]
            self._wait_started()
            for index in range(factory.num_actors):
                self._submit(index)
        except BaseException:
            self.close()
            raise

    def _wait_started(self) -> None:
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        refs = self._ready = [actor.ready.remote() for actor in self.actors]
        for index, ref in enumerate(refs):
            try:
                self._pids[index] = ray.get(ref, timeout=self.factory.timeout_s)
            except GetTimeoutError:
                raise ConfigError(
                    f"ray actor {index} did not start within {self.factory.timeout_s:g} s; does the cluster have "
                    f"{self.factory.num_cpus_per_actor:g} CPU(s) and {self.factory.num_gpus_per_actor:g} GPU(s) "
                    "free per actor?"
                ) from None
            except RayActorError as exc:
                raise ConfigError(f"ray actor {index} failed to start its collector: {_cause(exc)}") from exc

    # -- batches ---------------------------------------------------------------------------

    def _submit(self, index: int) -> None:
        self._pending[index] = self.actors[index].collect.remote()

    def _take(self, index: int) -> dict[str, Any]:
        """Actor ``index``'s rollout in flight, resubmitting at once; a dead actor's is dropped."""
        import ray
        from ray.exceptions import RayActorError

        while True:
            ref = self._pending.pop(index)
            try:
                packed: dict[str, Any] = ray.get(ref)
            except RayActorError as exc:  # died, restarting, or briefly unreachable
                self._lost(index, exc)
                continue
            self._submit(index)
            return packed

    def _lost(self, index: int, exc: BaseException) -> None:
        """Actor ``index``'s rollout in flight is lost: wait for the actor, count a death if it restarted."""
        from ray.exceptions import RayActorError

        try:
            pid = self._await_available(index)
        except RayActorError as final:  # past Ray's max_restarts (ours): dead for good
            self.deaths[index] += 1
            raise self._gave_up(index, _cause(final)) from final
        if pid != self._pids[index]:  # a new process: Ray restarted it
            self.deaths[index] += 1
            self._pids[index] = pid
            if self.deaths[index] > self.factory.max_restarts:
                raise self._gave_up(index, _cause(exc)) from exc
            warnings.warn(
                f"ray actor {index} died ({_cause(exc)}); Ray restarted it ({self.deaths[index]} of "
                f"max_restarts={self.factory.max_restarts}) and the rollout it was collecting is dropped",
                PyCollectWarning,
                stacklevel=5,
            )
            if self._latest is not None:  # a restarted actor starts from its constructor's weights
                version, ref = self._latest
                self.actors[index].set_weights.remote(version, [ref])
        self._submit(index)

    def _gave_up(self, index: int, cause: str) -> WorkerCrashedError:
        return WorkerCrashedError(
            f"ray actor {index} died {self.deaths[index]} time(s), past max_restarts={self.factory.max_restarts} "
            f"of RayEngine: {cause}",
            worker=index,
            generation=self.deaths[index],
            error=cause,
        )

    def _await_available(self, index: int) -> int:
        """Wait until actor ``index`` answers again (Ray refuses calls while it restarts); its pid.

        Raises:
            RayActorError: The actor is dead for good.
            WorkerCrashedError: It did not answer within the engine's ``timeout_s``.
        """
        import ray
        from ray.exceptions import ActorUnavailableError, GetTimeoutError

        deadline = time.monotonic() + self.factory.timeout_s
        while time.monotonic() < deadline:
            try:
                pid: int = ray.get(self.actors[index].ready.remote(), timeout=max(deadline - time.monotonic(), 0.1))
                return pid
            except ActorUnavailableError:
                time.sleep(_RESTART_POLL_S)  # Ray offers no wait for "restarted"; poll, bounded
            except GetTimeoutError:
                break
        raise WorkerCrashedError(
            f"ray actor {index} did not answer within {self.factory.timeout_s:g} s of losing a rollout",
            worker=index,
            generation=self.deaths[index],
            error=None,
        )

    def next_batch(self, *, random_actions: bool, policy_version: int) -> TensorDict:
        """One rollout of every actor in actor order (sync), or the first ready one (async)."""
        import ray

        if self.sync:
            parts = [(index, self._take(index)) for index in range(len(self.actors))]
        else:
            index = -1
            while index < 0:
                refs = list(self._pending.values())
                ready, _ = ray.wait(refs, num_returns=1)
                index = next(i for i, ref in self._pending.items() if ref == ready[0])
            parts = [(index, self._take(index))]
        batch = _unpack(parts, len(self.actors))
        if self.storing_device is not None:
            batch = batch.to(self.storing_device)
        return batch

    def publish_weights(self, weights: torch.nn.Module | None, version: int) -> None:
        """Put the weights in the object store once; every actor loads them before its next rollout."""
        if weights is None:
            return
        ref = self.scheme.publish(weights.state_dict())
        self._latest = (version, ref)
        for actor in self.actors:
            # Actor calls run in submission order: after the rollout in flight, before the next.
            actor.set_weights.remote(version, [ref])

    def supervision(self) -> Supervision:
        """Nothing per worker: the actors' workers are supervised inside the actors (see :attr:`deaths`)."""
        return Supervision()

    def close(self) -> None:
        """Shut every local collector down, kill the actors, and stop Ray if this engine started it."""
        if self._closed:
            return
        self._closed = True
        import ray

        if not ray.is_initialized():
            return
        # Only actors that started have a collector to close: one Ray never placed (or still
        # builds) would run close() only after it started, so waiting on it would cost another
        # timeout_s for nothing; ray.kill below ends it either way.
        started: set[Any] = set()
        if self._ready:
            done, _ = ray.wait(self._ready, num_returns=len(self._ready), timeout=0)
            started = set(done)
        refs = [
            actor.close.remote() for actor, ready in zip(self.actors, self._ready, strict=False) if ready in started
        ]
        if refs:
            # The local collectors stop and reap their workers; a dead actor's workers died with
            # it (PDEATHSIG), so errors here only mean there was nothing left to close.
            ray.wait(refs, num_returns=len(refs), timeout=self.factory.timeout_s)
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        self.actors = []
        self._pending.clear()
        if self._owns_ray:
            ray.shutdown()


def _cause(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip()


def _unpack(parts: list[tuple[int, dict[str, Any]]], num_actors: int) -> TensorDict:
    """One ``TensorDict`` (owned, writable memory) from the actors' packed rollouts, in the given order.

    Trajectory ids become ``id * num_actors + actor``: unique over actors, as over workers.
    """
    import numpy as np
    import torch
    from tensordict import TensorDict

    rows = sum(packed["shape"][0] for _, packed in parts)
    steps = parts[0][1]["shape"][1]
    batch = TensorDict(batch_size=[rows, steps], names=[None, "time"])
    keys = [key for key, _ in parts[0][1]["fields"]]
    columns = [dict(packed["fields"]) for _, packed in parts]
    for key in keys:
        # np.concatenate copies out of the (read-only) object store into memory the batch owns.
        arrays = [column[key] for column in columns]
        if key == _TRAJ_KEY:
            arrays = [array * num_actors + index for array, (index, _) in zip(arrays, parts, strict=True)]
        merged = np.concatenate(arrays) if len(arrays) > 1 else np.array(arrays[0])
        batch.set(key, torch.from_numpy(merged))
    return batch
