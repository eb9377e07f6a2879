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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

from pycollect.config import MAX_SECONDS
from pycollect.engines import Engine, EngineFactory, RolloutPlan, Supervision, close_within, pack_policy, plan_rollout
from pycollect.exceptions import ConfigError, EnvStateError, PyCollectWarning, WorkerCrashedError
from pycollect_ray.scheme import RayScheme

if TYPE_CHECKING:
    import torch
    from tensordict import TensorDict

    from pycollect.config import CollectorConfig
    from pycollect.envs.source import EnvSource

__all__ = ["ACTOR_DERIVED", "ActorStats", "RayEngine", "RayRun", "actor_config", "actor_seed"]

_TRAJ_KEY = ("collector", "traj_ids")
_RESTART_POLL_S = 0.1
_NODE_CHECK_S = 0.5  # how often a wait for a lost actor asks the GCS whether its node is gone
# The entries of a local collector's state_dict that hold env states (pycollect.collector's, which
# state_dict(env_states=False) leaves out): the trainer's state keeps them apart, under
# "worker_states", so that the trainer's state_dict(env_states=...) finds and drops them too.
_LOCAL_ENV_STATE_KEYS = ("worker_states", "env_snapshot")


@dataclass(frozen=True)
class ActorStats:
    """One Ray actor as the trainer last saw it (``collector.stats().actors[i]``).

    Attributes:
        actor: The actor's index (its place in a sync batch).
        state: ``"alive"``, ``"restarting"`` (it died and Ray is restarting it, or its node was
            lost) or ``"dead"`` (past ``max_restarts``, or no node can hold it any more).
        node_id: The Ray node it runs on (hex), its latest.
        node_ip: That node's address.
        pid: The actor's process id (on that node).
        restarts: How many times it died and was restarted (a rollout dropped each time).
        rollouts: Rollouts it delivered.
        policy_version: The weights version of its last rollout.
        worker_pids: Its local collector's worker processes (on its node), as of its last rollout.
        worker_restarts: Restarts of those workers by the actor's own supervisor, as of its last rollout.
        metrics: Its local collection's metrics (:class:`pycollect.metrics.CollectionMetrics`:
            its workers' rates, step latencies, time splits), as of its last rollout; ``None``
            before the first.
        resumed: Of its ``restarts``, those after which it continued from the state of its last
            delivered rollout (with snapshots: the lost rollout is collected again); the others
            started afresh, their trajectories cut.
    """

    actor: int
    state: str
    node_id: str
    node_ip: str
    pid: int
    restarts: int
    rollouts: int
    policy_version: int
    worker_pids: tuple[int, ...] = field(default=())
    worker_restarts: int = 0
    metrics: Any = None
    resumed: int = 0


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
        "max_policy_lag",
        "policy_lag_key",
        "checkpoint_dir",
        "checkpoint_every",
        "snapshots",
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
    (``set_truncated``, ``split_trajs``, ``cat_results``, ``postproc``), so the actors do none;
    and the trainer's alone are the policy lag's (``max_policy_lag``, ``policy_lag_key``) and the
    checkpoints' (``checkpoint_dir``, ``checkpoint_every``). ``snapshots`` is the trainer's
    :attr:`~pycollect.config.CollectorConfig.takes_snapshots` (on for ``snapshots=True``,
    ``recovery="replay"`` or a ``checkpoint_dir``), since the actors save the env states the
    trainer's checkpoints hold; ``recovery`` travels unchanged (each actor's workers engine
    replays its own crashed workers).

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
        max_policy_lag=None,
        policy_lag_key=False,
        checkpoint_dir=None,
        checkpoint_every=0,
        snapshots=config.takes_snapshots,
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
            is lost and collection goes on: with snapshots the restarted actor continues from
            the state of its last delivered rollout and collects the lost one again, without
            it starts afresh (its trajectories cut). One more death is a ``WorkerCrashedError``.
        address: The Ray cluster to connect to when Ray is not initialised yet (``"head-ip:6379"``,
            ``"auto"``, or ``"ray://head:10001"``); ``None`` starts a local one (shut down with the
            collector). A connection to an existing cluster stays open after the collector.
        init_kwargs: More ``ray.init`` keyword arguments, used when this engine initialises Ray.
        runtime_env: The actors' Ray runtime env (e.g. ``{"working_dir": ".", "py_modules": [...]}``
            so they import the user's env module; ``{"env_vars": {...}}``).
        actor_options: More ``.options()`` for the actors (``resources``, ``scheduling_strategy``...):
            one mapping for every actor, or a sequence of ``num_actors`` mappings, one per actor
            (e.g. ``[{"resources": {"node_a": 0.01}}, {"resources": {"node_b": 0.01}}]`` to place
            actor 0 on one node and actor 1 on another).
        timeout_s: The longest the trainer waits for actors to start or to close (at most
            ``pycollect.config.MAX_SECONDS``). Actors that never started are not waited for at
            close, so actors Ray cannot place fail after ``timeout_s``, not twice that.
    """

    name = "ray"
    default_weight_sync: ClassVar[str] = RayScheme.name
    # Each actor's local engine (workers, or in-process) saves its envs' states; the trainer
    # keeps every actor's state after its last delivered rollout (RayRun.state).
    snapshots_envs: ClassVar[bool] = True

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
        actor_options: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
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
        if actor_options is None or isinstance(actor_options, Mapping):
            per_actor = [dict(actor_options or {})] * num_actors
        elif isinstance(actor_options, Sequence) and not isinstance(actor_options, str | bytes):
            per_actor = [dict(options) for options in actor_options]
            if len(per_actor) != num_actors:
                raise ConfigError(
                    f"RayEngine(actor_options=...): {len(per_actor)} mappings for num_actors={num_actors}; "
                    "give one mapping for all actors or one per actor"
                )
        else:
            raise ConfigError(f"RayEngine(actor_options={actor_options!r}): expected a mapping or a list of mappings")
        self.actor_options = per_actor
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
        deaths: Per actor, how many times it died (a rollout lost each time).
        resumed: Per actor, how many of those deaths it resumed from (with snapshots).
        snapshots: Whether the actors' rollouts carry their env states (the trainer's
            ``takes_snapshots``).
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
        self.resumed = [0] * factory.num_actors
        self.snapshots = config.takes_snapshots
        self._envs_per_actor = max(config.num_workers, 1) * config.envs_per_worker  # its rows of a sync batch
        # Per actor, its local collector's state after the last rollout delivered to the trainer
        # (None before the first: a fresh actor is that state). The actors collect ahead, so
        # their state now is never asked for: this is what state() saves and a restart resumes.
        self._states: list[dict[str, Any] | None] = [None] * factory.num_actors
        # Per actor, where it runs ({"pid", "node_id", "node_ip"} from its ready()): a new pid
        # after a lost rollout means Ray restarted it; the node tells which actors a lost node takes.
        self._where: list[dict[str, Any]] = [{"pid": 0, "node_id": "", "node_ip": ""}] * factory.num_actors
        self._state = ["starting"] * factory.num_actors
        self._rollouts = [0] * factory.num_actors
        self._reported: list[dict[str, Any]] = [{} for _ in range(factory.num_actors)]  # "actor" of its last rollout
        self._lost_nodes: set[str] = set()
        self._options: list[dict[str, Any]] = []
        self._ready: list[Any] = []  # per actor, the ObjectRef of its first ready() (done: it started)
        self._pending: dict[int, Any] = {}  # actor index -> ObjectRef of its collect() in flight
        self._latest: tuple[int, Any] | None = None  # the newest (version, ObjectRef of its state dict)
        self._owns_ray = False
        self._closed = False
        probe = env_source.make()  # bad env or policy fails here, before any actor starts
        try:
            self.plan: RolloutPlan = plan_rollout(config, env_source, probe, policy)
            if self.snapshots and (why := env_source.backend.snapshot_refusal(probe)) is not None:
                reason = "recovery='replay'" if config.recovery == "replay" else "snapshots=True"
                if config.recovery != "replay" and not config.snapshots:
                    reason = "checkpoint_dir (its checkpoints hold env states)"
                raise EnvStateError(
                    f"{reason} with engine='ray': every actor saves its envs' states, but env "
                    f"{env_source.describe()!r} cannot: {why}"
                )
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
            common: dict[str, Any] = {
                "num_cpus": factory.num_cpus_per_actor,
                "num_gpus": factory.num_gpus_per_actor,
                "max_restarts": factory.max_restarts,
                "max_task_retries": 0,  # a rollout is never collected twice: a death drops it
            }
            if factory.runtime_env is not None:
                common["runtime_env"] = factory.runtime_env
            self._options = [{**common, **own} for own in factory.actor_options]
            remote = ray.remote(CollectorActor)
            self.actors = [
                remote.options(**self._options[index]).remote(
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
                self._where[index] = ray.get(ref, timeout=self.factory.timeout_s)
                self._state[index] = "alive"
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

    def _submit_missing(self) -> None:
        """Ask every actor without a rollout in flight (after :meth:`load_state`) for one."""
        for index in range(len(self.actors)):
            if index not in self._pending:
                self._submit(index)

    def _take(self, index: int) -> dict[str, Any]:
        """Actor ``index``'s rollout in flight, resubmitting at once; a dead actor's is collected again or dropped."""
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
            self._rollouts[index] += 1
            self._reported[index] = packed.get("actor", {})
            return packed

    def _lost(self, index: int, exc: BaseException) -> None:
        """Actor ``index``'s rollout in flight is lost: wait for the actor, count a death if it restarted.

        A restarted actor resumes from the state of its last delivered rollout when its rollouts
        carry env states (snapshots), so it collects the lost rollout again; otherwise it starts
        afresh. Either way it gets the latest weights before its next rollout.
        """
        self._recover(index, exc)
        self._submit(index)

    def _recover(self, index: int, exc: BaseException) -> None:
        """After a call to actor ``index`` failed with ``exc`` (its rollout in flight, or an env call): wait for it.

        If it then runs in a new process, Ray restarted it: the death is counted, with
        snapshots it resumes from the state of its last delivered rollout (its rollout in
        flight, made from the state it leaves, is dropped: the next is asked for by the
        caller, or by the next batch), and it gets the latest weights.

        Raises:
            WorkerCrashedError: It is dead for good, or died more than ``max_restarts`` times.
        """
        from ray.exceptions import RayActorError

        self._state[index] = "restarting"
        try:
            where = self._await_available(index)
        except RayActorError as final:  # past Ray's max_restarts (ours): dead for good
            self.deaths[index] += 1
            self._state[index] = "dead"
            raise self._gave_up(index, _cause(final)) from final
        except WorkerCrashedError:
            self._state[index] = "dead"
            raise
        self._state[index] = "alive"
        if where["pid"] != self._where[index]["pid"] or where["node_id"] != self._where[index]["node_id"]:
            self.deaths[index] += 1  # a new process: Ray restarted it (on the same node or another)
            moved = where["node_id"] != self._where[index]["node_id"]
            self._where[index] = where
            if self.deaths[index] > self.factory.max_restarts:
                self._state[index] = "dead"
                raise self._gave_up(index, _cause(exc)) from exc
            if self.snapshots:
                # Its constructor built the state before its first rollout, which is exact when
                # it never delivered one; otherwise it loads the state of its last one.
                if self._states[index] is not None:
                    self._resume([index], [self._states[index]], what="resume after its restart")
                self.resumed[index] += 1
                fate = "it resumed from the state of its last delivered rollout and collects the lost one again"
            else:
                fate = "the rollout it was collecting is dropped (its trajectories cut: no snapshots)"
            warnings.warn(
                f"ray actor {index} died ({_cause(exc)}); Ray restarted it ({self.deaths[index]} of "
                f"max_restarts={self.factory.max_restarts}"
                + (f", now on node {where['node_id'][:12]} ({where['node_ip']})" if moved else "")
                + f") and {fate}",
                PyCollectWarning,
                stacklevel=5,
            )
            if self._latest is not None:  # a restarted actor starts from its constructor's weights
                version, ref = self._latest
                self.actors[index].set_weights.remote(version, [ref])

    def _resume(self, indices: list[int], states: list[dict[str, Any] | None], *, what: str) -> None:
        """Have each actor of ``indices`` load its state of ``states`` (``None``: built afresh), and wait.

        Its rollout in flight, made from the state it leaves, is dropped; the next is asked
        for later (after the weights the caller sends next).

        Raises:
            ConfigError: An actor could not load its state (the cause named).
            WorkerCrashedError: An actor did not load it within the engine's ``timeout_s``.
        """
        import ray
        from ray.exceptions import GetTimeoutError, RayError

        refs = []
        for index, state in zip(indices, states, strict=True):
            self._pending.pop(index, None)
            refs.append(self.actors[index].resume.remote(state))
        for index, ref in zip(indices, refs, strict=True):
            try:
                ray.get(ref, timeout=self.factory.timeout_s)
            except GetTimeoutError:
                raise self._timed_out(index, what) from None
            except RayError as exc:
                cause = getattr(exc, "cause", None) or exc  # a task's error carries the actor's own
                raise ConfigError(f"ray actor {index} could not {what}: {_cause(cause)}") from exc

    def _gave_up(self, index: int, cause: str) -> WorkerCrashedError:
        return WorkerCrashedError(
            f"ray actor {index} died {self.deaths[index]} time(s), past max_restarts={self.factory.max_restarts} "
            f"of RayEngine: {cause}",
            worker=index,
            generation=self.deaths[index],
            error=cause,
        )

    def _await_available(self, index: int) -> dict[str, Any]:
        """Wait until actor ``index`` answers again (Ray refuses calls while it restarts); where it runs.

        While it waits it watches the actor's node: a lost node is reported once, naming every
        actor it held, and if one of them cannot be placed on any remaining node (the resources
        or the node affinity it asks for are nowhere), waiting is pointless and it raises.

        Raises:
            RayActorError: The actor is dead for good.
            WorkerCrashedError: Its node was lost and no remaining node can hold it or another
                actor lost with it, or it did not answer within the engine's ``timeout_s``.
        """
        import ray
        from ray.exceptions import ActorUnavailableError

        deadline = time.monotonic() + self.factory.timeout_s
        node = self._where[index]["node_id"]
        ref = self.actors[index].ready.remote()
        next_check = time.monotonic()
        while time.monotonic() < deadline:
            if node not in self._lost_nodes and time.monotonic() >= next_check:
                next_check = time.monotonic() + _NODE_CHECK_S
                self._check_node(node)
            done, _ = ray.wait([ref], timeout=min(_NODE_CHECK_S, max(deadline - time.monotonic(), 0.0)))
            if not done:
                continue
            try:
                where: dict[str, Any] = ray.get(ref)
                return where
            except ActorUnavailableError:
                time.sleep(_RESTART_POLL_S)  # Ray offers no wait for "restarted"; poll, bounded
                ref = self.actors[index].ready.remote()
        raise self._timed_out(index, "answer again after a call to it failed")

    def _timed_out(self, index: int, what: str) -> WorkerCrashedError:
        """The error for actor ``index``, which did not ``what`` within the engine's ``timeout_s``."""
        return WorkerCrashedError(
            f"ray actor {index} did not {what} within {self.factory.timeout_s:g} s",
            worker=index,
            generation=self.deaths[index],
            error=None,
        )

    def _check_node(self, node: str) -> None:
        """If ``node`` is dead: warn once naming its actors, or raise if one of them fits no remaining node."""
        import ray

        nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
        if not node or any(entry["NodeID"] == node and entry["Alive"] for entry in nodes):
            return
        self._lost_nodes.add(node)
        held = [i for i, where in enumerate(self._where) if where["node_id"] == node]
        ip = next((str(where["node_ip"]) for where in self._where if where["node_id"] == node), "?")
        alive = [dict(entry["Resources"]) for entry in nodes if entry["Alive"]]
        alive_ids = {str(entry["NodeID"]) for entry in nodes if entry["Alive"]}
        stuck = [i for i in held if not _placeable(self._options[i], alive, alive_ids)]
        if stuck:
            for i in held:
                self._state[i] = "dead"
            cause = f"ray node {node[:12]} ({ip}) was lost"
            raise WorkerCrashedError(
                f"{cause} with actors {held}; actors {stuck} cannot be placed on any remaining node "
                f"(the resources or node affinity they ask for are on none of the {len(alive)} alive node(s)), "
                "so collection stops rather than wait for them",
                worker=stuck[0],
                generation=self.deaths[stuck[0]],
                error=cause,
            )
        warnings.warn(
            f"ray node {node[:12]} ({ip}) was lost with actors {held}: Ray restarts them on the remaining "
            "node(s) and the rollouts they were collecting are dropped",
            PyCollectWarning,
            stacklevel=7,
        )

    def next_batch(self, *, random_actions: bool, policy_version: int) -> TensorDict:
        """One rollout of every actor in actor order (sync), or the first ready one (async).

        Each rollout brings its actor's state after it, kept once the whole batch is here:
        what :meth:`state` saves is the state of the rollouts delivered, never of those the
        actors collect ahead.
        """
        import ray

        self._submit_missing()
        if self.sync:
            parts = [(index, self._take(index)) for index in range(len(self.actors))]
        else:
            index = -1
            while index < 0:
                refs = list(self._pending.values())
                ready, _ = ray.wait(refs, num_returns=1)
                index = next(i for i, ref in self._pending.items() if ref == ready[0])
            parts = [(index, self._take(index))]
        for index, packed in parts:
            self._states[index] = packed.pop("state", None)
        batch = _unpack(parts, len(self.actors))
        if self.storing_device is not None:
            batch = batch.to(self.storing_device)
        return batch

    def state(self) -> dict[str, Any]:
        """Each actor's local collector state after its last delivered rollout (no weights: the trainer's).

        ``"ray_actors"``: per actor, its counters and trajectory numbering (``None`` before its
        first rollout: a fresh actor is that state); ``"worker_states"``, with snapshots: per
        actor, its env states (its workers' snapshots, or its in-process envs'), kept apart so
        that ``state_dict(env_states=False)`` leaves them out.
        """
        actors = [
            None if state is None else {k: v for k, v in state.items() if k not in _LOCAL_ENV_STATE_KEYS}
            for state in self._states
        ]
        saved: dict[str, Any] = {"ray_actors": actors}
        if self.snapshots:
            saved["worker_states"] = [
                None if state is None else {k: state[k] for k in _LOCAL_ENV_STATE_KEYS if k in state}
                for state in self._states
            ]
        return saved

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Have every actor continue from its own state in ``state`` (:meth:`state` of an earlier run).

        The rollouts the actors collected ahead are dropped; each is asked for its next rollout
        after the weights the collector publishes next (``load_state_dict`` publishes the
        saved ones), so those are the weights it collects with.

        Raises:
            ConfigError: ``state`` holds another number of actors, or an actor could not load
                its own (the local collector names the difference).
        """
        actors = state.get("ray_actors")
        if actors is None:
            return
        envs = state.get("worker_states") or [None] * len(actors)
        if len(actors) != len(self.actors) or len(envs) != len(actors):
            raise ConfigError(
                f"the state_dict holds the states of {len(actors)} ray actors, this collector has "
                f"{len(self.actors)} (RayEngine(num_actors={len(self.actors)}))"
            )
        merged = [None if own is None else {**own, **(env or {})} for own, env in zip(actors, envs, strict=True)]
        # An actor with no saved state that has delivered nothing here is already that state.
        indices = [i for i, own in enumerate(merged) if own is not None or self._rollouts[i]]
        self._resume(indices, [merged[i] for i in indices], what="load its state")
        self._states = merged

    def publish_weights(self, weights: torch.nn.Module | None, version: int) -> None:
        """Put the weights in the object store once; every actor loads them before its next rollout."""
        if weights is None:
            return
        ref = self.scheme.publish(weights.state_dict())
        self._latest = (version, ref)
        for actor in self.actors:
            # Actor calls run in submission order: after the rollout in flight, before the next.
            actor.set_weights.remote(version, [ref])

    def env_calls(self) -> _ActorEnvCalls:
        """Every actor's envs, through its local collector (``Collector.env_call`` and its kin there)."""
        return _ActorEnvCalls(self, self._envs_per_actor)

    def supervision(self) -> Supervision:
        """Per actor, an :class:`ActorStats` (the actors' workers are supervised inside the actors)."""
        return Supervision(actors=tuple(self.actor_stats()))

    def actor_stats(self) -> list[ActorStats]:
        """Each actor as the trainer last saw it: node, pid, state, restarts, rollouts and its workers."""
        return [
            ActorStats(
                actor=index,
                state=self._state[index],
                node_id=str(where["node_id"]),
                node_ip=str(where["node_ip"]),
                pid=int(where["pid"]),
                restarts=self.deaths[index],
                rollouts=self._rollouts[index],
                policy_version=int(self._reported[index].get("policy_version", 0)),
                worker_pids=tuple(self._reported[index].get("worker_pids", ())),
                worker_restarts=int(self._reported[index].get("worker_restarts", 0)),
                metrics=self._reported[index].get("metrics"),
                resumed=self.resumed[index],
            )
            for index, where in enumerate(self._where)
        ]

    def close(self) -> None:
        """Shut every local collector down, kill the actors, and stop Ray if this engine started it."""
        if self._closed:
            return
        self._closed = True
        import ray

        if not ray.is_initialized():
            return
        # Only actors that started and are alive have a collector to close: one Ray never
        # placed, still builds, or restarts (its node lost) would run close() only once it is
        # up, so waiting on it would cost another timeout_s for nothing; ray.kill ends it anyway.
        started: set[Any] = set()
        if self._ready:
            done, _ = ray.wait(self._ready, num_returns=len(self._ready), timeout=0)
            started = set(done)
        refs = [
            actor.close.remote()
            for index, (actor, ready) in enumerate(zip(self.actors, self._ready, strict=False))
            if ready in started and self._state[index] == "alive"
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


def _placeable(options: Mapping[str, Any], alive: list[dict[str, float]], alive_ids: set[str]) -> bool:
    """Whether some alive node has, in total, what an actor with these ``.options()`` asks for.

    A hard node affinity to a node that is gone places it nowhere; other scheduling strategies
    (placement groups, soft affinity, ``"SPREAD"``) are Ray's to resolve, so they count as placeable.
    """
    strategy = options.get("scheduling_strategy")
    node_id = getattr(strategy, "node_id", None)
    if node_id is not None and not getattr(strategy, "soft", True) and node_id not in alive_ids:
        return False
    demand = {"CPU": float(options.get("num_cpus") or 0), "GPU": float(options.get("num_gpus") or 0)}
    demand.update({name: float(amount) for name, amount in (options.get("resources") or {}).items()})
    wanted = {name: amount for name, amount in demand.items() if amount > 0}
    return any(all(total.get(name, 0.0) >= amount for name, amount in wanted.items()) for total in alive)


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


class _ActorEnvCalls:
    """The envs of every actor, env ``i`` being row ``i`` of a sync batch: actor ``i // n``'s env ``i % n``.

    Each actor gets one request for its envs (its local collector's method of the same name),
    queued behind its rollout in flight; the answers are put back in the order of ``indices``.
    An actor that died is waited for and asked again (a restarted actor builds its envs afresh);
    one past ``max_restarts`` ends the call with :class:`~pycollect.WorkerCrashedError`. An error
    an env raised is raised here once every actor has answered.
    """

    def __init__(self, run: RayRun, envs_per_actor: int) -> None:
        self._run = run
        self._n = envs_per_actor

    def call(
        self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any], indices: Sequence[int] | None = None
    ) -> list[Any]:
        """Each env's ``name``, called with the arguments if callable."""
        return self._gather("env_call", lambda local, _: ((name, *args), {**kwargs, "indices": local}), indices)

    def get_attr(self, name: str, indices: Sequence[int] | None = None) -> list[Any]:
        """Each env's ``name``."""
        return self._gather("env_get_attr", lambda local, _: ((name,), {"indices": local}), indices)

    def set_attr(self, name: str, values: Sequence[Any], indices: Sequence[int] | None = None) -> None:
        """Set ``name`` on each env to its value."""
        count = self._n * len(self._run.actors) if indices is None else len(indices)
        if len(values) != count:
            raise ConfigError(f"set_attr({name!r}): {len(values)} values for {count} envs")
        self._gather(
            "env_set_attr",
            lambda local, positions: ((name, [values[p] for p in positions]), {"indices": local}),
            indices,
        )

    def apply(self, function: Callable[[Any], Any], indices: Sequence[int] | None = None) -> list[Any]:
        """``function(env)`` for each env, in its actor."""
        return self._gather("env_apply", lambda local, _: ((function,), {"indices": local}), indices)

    def _gather(
        self,
        method: str,
        arguments: Callable[[list[int] | None, list[int]], tuple[tuple[Any, ...], dict[str, Any]]],
        indices: Sequence[int] | None,
    ) -> list[Any]:
        import ray
        from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError, RayTaskError

        from pycollect.vector.backend import split_indices

        run = self._run
        targets = split_indices(indices, len(run.actors), self._n)
        results: list[Any] = [None] * sum(len(positions) for _, positions in targets.values())
        error: BaseException | None = None
        todo = dict(targets)
        while todo:
            refs = {a: run.actors[a].env_request.remote(method, *arguments(*todo[a])) for a in todo}
            again = {}
            for a, ref in refs.items():
                try:
                    answers = ray.get(ref, timeout=run.factory.timeout_s)
                except GetTimeoutError:
                    raise run._timed_out(a, f"answer {method}()") from None
                except (RayActorError, ActorUnavailableError) as exc:  # died or restarting: ask its successor
                    run._recover(a, exc)
                    again[a] = todo[a]
                    continue
                except RayTaskError as exc:  # the local collector raised: raised once every answer is in
                    error = error or (getattr(exc, "cause", None) or exc)
                    continue
                if answers is not None:  # env_set_attr answers nothing
                    for position, value in zip(todo[a][1], answers, strict=True):
                        results[position] = value
            todo = again
        if error is not None:
            raise error
        return results
