"""The central engine: :class:`CentralEngine` starts the workers and collects a round from the caller's thread."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import pickle
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from tensordict import TensorDict
from tensordict.nn import InteractionType, set_interaction_type

from pycollect._batch.device import DeviceCopier, staging_memory
from pycollect._batch.recycle import RecycledMemory
from pycollect._batch.tensordict import allocate, to_tensordict
from pycollect._engines.central.runner import CentralActions, CentralRunner
from pycollect._engines.inprocess import on_policy_device
from pycollect._engines.resources import BATCHES_HELD, batch_bytes, check_fits, check_fits_before_env
from pycollect._keys import NEXT_DONE, TRAJ_IDS, Key
from pycollect._rollout.observations import observation_pairs
from pycollect._rollout.policy import PolicyRunner, parameters_device
from pycollect._rollout.seeding import action_rng, env_seeds, torch_seed
from pycollect._rollout.streams import TorchStreams, WorkerDraws
from pycollect._rollout.trajectories import TrajectoryIds
from pycollect._step_backends.workers import WorkerStepBackend
from pycollect._workers import forkserver
from pycollect._workers.step_protocol import MAILBOX_BYTES
from pycollect.config import CollectorConfig, VectorConfig
from pycollect.engines import Engine, EnvCalls, RolloutPlan, Supervision, close_within, plan_rollout, policy_device
from pycollect.envs.batched import is_view
from pycollect.envs.source import EnvSource
from pycollect.exceptions import CollectorClosedError, ConfigError, EnvStateError

if TYPE_CHECKING:
    from pycollect._rollout.runner import _Rollout

__all__ = ["CentralEngine", "default_groups", "env_groups"]

logger = logging.getLogger("pycollect.central")


def _info_names(config: CollectorConfig, plan: RolloutPlan) -> tuple[str, ...]:
    """The info entries the step workers send: ``info_keys`` and the env's own next fields (per-agent rewards)."""
    own = tuple(entry.path[0] for entry in plan.specs.next_fields if entry.path)
    return (*own, *config.info_keys)


class CentralEngine(Engine):
    """Worker processes step the envs; this process runs the policy once per step for each group of envs.

    Build it with :meth:`start`, which checks everything before any worker starts.

    Each worker's envs are split into ``groups`` groups (see :func:`default_groups`), each spanning every
    worker, with a :class:`CentralRunner` of its own; one thread (the caller's) steps them in
    turn, one step of one group in flight at a time: while the policy runs on one group's
    observations, every worker steps its envs of the group posted before (see
    :meth:`_step_groups`). That is the double buffering of Sample Factory's sampler; with one
    group, the policy and the envs take turns.

    Args:
        plan: What every rollout holds.
        runners: The stepping loop over each group's envs.
        backend: The workers.
        config: The collector's settings.
        policy: The policy (``None``: random actions).
        device_copy: The weights module of the policy's copy on ``policy_device`` (``None``:
            the user's policy is called as it is).
        draws: The workers' random action draws.
        policy_threads: torch's intra-op threads for the policy calls of a round (``None``:
            torch's setting is left alone, as for a policy on a GPU).
        streams: The groups' torch random streams (``None``: no seed, or no policy).
    """

    def __init__(
        self,
        plan: RolloutPlan,
        runners: Sequence[CentralRunner],
        backend: WorkerStepBackend,
        config: CollectorConfig,
        policy: Any,
        device_copy: torch.nn.Module | None,
        draws: WorkerDraws,
        policy_threads: int | None = None,
        streams: TorchStreams | None = None,
    ) -> None:
        self.plan = plan
        self.streams = streams
        self.runners = list(runners)
        self.backend = backend
        self.config = config
        self.has_policy = policy is not None
        self.device_copy = device_copy
        self.policy_threads = policy_threads
        self.num_workers, self.envs_per_worker = config.num_workers, config.envs_per_worker
        self.steps = config.steps_per_batch
        self.storing_device = config.storing_device or config.device or torch.device("cpu")
        self._memory = staging_memory(torch.device(self.storing_device))
        self._parts = RecycledMemory()  # the groups' own arrays, interleaved into each batch
        self._copier = DeviceCopier()
        # The observation keys and their ("next", ...) keys: each group's recorder writes them into the batch
        self._placed = {key for pair in observation_pairs(spec.key for spec in plan.specs.observation) for key in pair}
        self._draws = draws
        self._ids = TrajectoryIds(self.num_workers, self.envs_per_worker)
        self._rounds = 0
        self._reset_needed = True  # the envs are reset before the first round (and after a broken one)
        self._pending: list[TensorDict] = []  # async: the rollouts of the last round not yet handed out
        self._closed = False
        self._final: Supervision | None = None
        self.states_per_request = 1  # envs whose states one request asks a worker for (see start)
        self._env_states: list[Any] | None = None  # every env's state since the last round, once asked

    @property
    def num_envs(self) -> int:
        """``N * K``."""
        return self.num_workers * self.envs_per_worker

    @classmethod
    def start(
        cls,
        config: CollectorConfig,
        env_source: EnvSource,
        policy: Any,
        weights_module: torch.nn.Module | None,
        groups: int | None = None,
        policy_threads: int | None = None,
    ) -> CentralEngine:
        """Check the env, the policy (on a batch of each group's envs) and the memory; then start the workers.

        Args:
            config: The collector's settings, resolved.
            env_source: What builds the envs.
            policy: The policy (``None``: random actions).
            weights_module: The module whose weights ``update_policy_weights_()`` publishes.
            groups: How many groups each worker's envs are split into (at most
                ``envs_per_worker``; as evenly as they go, in order): each group spans every
                worker, and the groups take turns with the policy (``None``:
                :func:`default_groups`).
            policy_threads: torch's intra-op threads for a CPU policy's calls during a round
                (``None``: the CPUs the workers leave free).

        Raises:
            ConfigError: Anything that would fail later, named, before any worker starts
                (:class:`~pycollect.PolicyError` for a policy that cannot act for a group's
                envs at once).
        """
        k, steps, seed, workers = config.envs_per_worker, config.steps_per_batch, config.seed, config.num_workers
        rows = workers * k
        what = f"the batches of engine='central' ({workers} workers)"
        check_fits_before_env(config, what, BATCHES_HELD * rows * steps)
        policy, device_copy = on_policy_device(config, policy, weights_module)
        forkserver.start()  # its imports overlap with the probe env and the policy's check
        device = config.requested_policy_device or parameters_device(policy)
        streams = TorchStreams(device) if policy is not None and seed is not None else None
        stream_of: list[int] = []
        probe = env_source.make()
        # A batched env steps all its sub-envs at once: one group of every env
        if groups is None:
            half = workers * len(env_groups(k, 2)[0])  # the envs of a group of two
            groups, why = (
                (1, "one env per worker, or one batched env")
                if k < 2 or is_view(probe)
                else default_groups(
                    policy is not None, device, workers, lambda: _call_flops(config, env_source, probe, policy, half)
                )
            )
            logger.info("engine='central' steps %d group(s) of envs: %s", groups, why)
        split = env_groups(k, 1 if is_view(probe) else groups)
        try:
            state_bytes = _check_env_states(env_source, probe) if config.takes_snapshots else 0
            drew = False
            with streams.keep_trainers() if streams is not None else contextlib.nullcontext():
                plans = []
                for g, envs in enumerate(split):
                    if streams is not None:  # the group's dry run draws from its stream
                        stream_of.append(streams.start(cast(int, torch_seed(seed, g))))
                    plans.append(
                        plan_rollout(config, env_source, probe, policy, num_envs=workers * len(envs), policy_here=True)
                    )
                    if streams is not None:
                        drew |= streams.take(stream_of[-1])
            if not drew:  # a policy that draws nothing (an argmax) needs no streams, nor their lock
                streams, stream_of = None, []
            check_fits(what, BATCHES_HELD * batch_bytes(plans[0].fields, rows, steps), config)
            backend = WorkerStepBackend.start(env_source, _vector_config(config, plans[0]), probe=probe)
        finally:
            close_within(probe, env_source, config.supervision.shutdown_grace_s, what="probe env")
        try:
            backend.restart_seeds = functools.partial(
                env_seeds, seed, k
            )  # (worker, generation): the workers engine's seeds
            draws = WorkerDraws(plans[0].specs.action_fields, k, workers, seed)
            runners = [
                CentralRunner(
                    backend,
                    plan.specs,
                    CentralActions(
                        plan.actions if policy is not None else None,
                        draws,
                        envs,
                        (streams, stream_of[g]) if streams is not None else None,
                    ),
                    config,
                    env_source.describe(),
                    plan.info,
                    envs,
                )
                for g, (envs, plan) in enumerate(zip(split, plans, strict=True))
            ]
        except BaseException:
            backend.close()
            raise
        threads = None
        if policy is not None and getattr(plans[0].actions, "device", None) == torch.device("cpu"):
            threads = policy_threads or _free_cpus(workers)
        engine = cls(plans[0], runners, backend, config, policy, device_copy, draws, threads, streams)
        # As many envs' states in a worker's answer as fit half its mailbox (the rest: room to grow)
        engine.states_per_request = max(1, MAILBOX_BYTES // 2 // max(1, state_bytes))
        return engine

    def next_batch(self, *, random_actions: bool, policy_version: int) -> TensorDict:
        """The next batch: a round of every worker (sync), or the next worker's rollout of it (async).

        Warm-up frames are counted per round as each worker of the ``workers`` engine counts
        its own (``random_actions`` is the collector's view, not used); ``policy_version`` is
        the version every frame of a new round records.
        """
        if self._closed:
            raise CollectorClosedError("the collector is shut down")
        if not self.config.sync and self._pending:
            return self._deliver(self._pending.pop(0))
        arrays = self._round(policy_version)
        if self.config.sync:
            return self._deliver(to_tensordict(arrays))
        k = self.envs_per_worker
        self._pending = [
            to_tensordict({key: array[w * k : (w + 1) * k] for key, array in arrays.items()})
            for w in range(self.num_workers)
        ]
        return self._deliver(self._pending.pop(0))

    def _reset(self) -> None:
        """Reset every env (with the workers' first seeds the first time) and start a trajectory in each."""
        k, seed = self.envs_per_worker, self.config.seed
        first = self._rounds == 0 and all(self.backend.generation(w) == 1 for w in range(self.num_workers))
        seeds: list[int | None] = (
            [s for w in range(self.num_workers) for s in env_seeds(seed, k, w)] if first else [None] * self.num_envs
        )
        self.backend.reset(seeds, None, None)
        for runner in self.runners:
            runner.reset()
        self._ids.start()

    def _round(self, policy_version: int) -> dict[Key, np.ndarray]:
        """Step every worker's envs ``T`` times into fresh ``[N*K, T]`` arrays, the groups at the same time."""
        config = self.config
        self._env_states = None  # the envs step on from here
        self._copier.settle()  # the previous batch's staging memory may be reused from here
        arrays = allocate(self.plan.fields, self.num_envs, self.steps, self._memory)
        if self._reset_needed or (config.reset_at_each_iter and self._rounds > 0):
            # After an interrupted round (Ctrl-C, an error) the workers may have stepped once
            # more than the runners recorded: every env starts a new trajectory from a reset.
            self._reset()
            self._reset_needed = False
        random = not self.has_policy or self._rounds * self.num_envs * self.steps < config.init_random_frames
        # One group writes straight into the batch; several write their observations straight
        # into its rows too (the large fields), the rest into arrays of their own, interleaved
        # into the batch afterwards (a group's rows are envs of every worker).
        single = len(self.runners) == 1
        outs = (
            [arrays]
            if single
            else [allocate(self.plan.fields, r.num_envs, self.steps, self._parts) for r in self.runners]
        )
        for runner in self.runners:
            runner.cuts = []
        self._draws.begin_round()
        threads, trainers_threads = self.policy_threads, torch.get_num_threads()
        keep_trainers = self.streams.keep_trainers() if self.streams is not None else contextlib.nullcontext()
        # tensordict's interaction type is one value for the whole process, which each policy
        # call sets and restores, and so is torch's gradient mode: both set here for the round,
        # so that a call finds them set (a few microseconds a call on a cheap policy).
        with set_interaction_type(InteractionType(config.exploration_type)), torch.no_grad(), keep_trainers:
            try:
                if threads is not None:
                    torch.set_num_threads(threads)
                self._step_groups(outs, None if single else arrays, random, policy_version)
            except BaseException:
                self._reset_needed = True
                raise
            finally:
                if threads is not None:
                    torch.set_num_threads(trainers_threads)
        if not single:
            self._interleave(arrays, outs)
        self._ids.write(arrays[TRAJ_IDS], arrays[NEXT_DONE], [cut for r in self.runners for cut in r.cuts])
        # Every frame of obs is in place: the runners' recorders write frame t + 1 with step t
        self._rounds += 1
        return arrays

    def _step_groups(
        self,
        outs: Sequence[Mapping[Key, np.ndarray]],
        batch: Mapping[Key, np.ndarray] | None,
        random: bool,
        policy_version: int,
    ) -> None:
        """Step every group ``T`` times into its ``outs``, in this thread, one group's step in flight at a time.

        Steps are posted group after group, step after step. With several groups the policy
        call for the next group's step runs while the workers step the one posted before it,
        whose answers are then collected; with one, the policy waits for them. An error is
        raised as it comes, with a step possibly still in flight (the next post drains it).
        """
        runners, segment = self.runners, self.backend.segment
        overlap = len(runners) > 1
        in_flight: tuple[CentralRunner, _Rollout, int] | None = None
        try:
            runs = [runner.begin(out, random, policy_version, batch) for runner, out in zip(runners, outs, strict=True)]
            for t in range(self.steps):
                for runner, run in zip(runners, runs, strict=True):
                    if in_flight is not None and not overlap:
                        _collect(*in_flight)
                    began = time.perf_counter_ns()
                    actions = run.act(t)  # with several groups: while the workers step the one in flight
                    segment.count_policy(time.perf_counter_ns() - began)
                    if in_flight is not None and overlap:
                        _collect(*in_flight)
                    runner.post(actions)
                    in_flight = (runner, run, t)
            if in_flight is not None:
                _collect(*in_flight)
            for run in runs:
                run.finish()
        finally:
            for runner in runners:
                runner.release()

    def _interleave(self, arrays: Mapping[Key, np.ndarray], outs: Sequence[Mapping[Key, np.ndarray]]) -> None:
        """Each group's ``[N * K_g, T]`` rows into the ``[N * K, T]`` batch (env ``j`` of worker ``w``: ``w*K + j``).

        The observations are there already: each group's recorder wrote them into its rows.
        """
        n, k = self.num_workers, self.envs_per_worker
        for key, array in arrays.items():
            if key in self._placed:  # the recorders wrote them in place
                continue
            batch = array.reshape(n, k, *array.shape[1:])
            for runner, out in zip(self.runners, outs, strict=True):
                part = out[key]
                batch[:, runner.envs_range] = part.reshape(n, len(runner.envs_range), *part.shape[1:])

    def _deliver(self, td: TensorDict) -> TensorDict:
        device = torch.device(self.storing_device)
        if device.type == "cuda":
            return self._copier.copy(td, device)
        return td

    def publish_weights(self, weights: Any, version: int) -> None:
        """Load ``weights`` into the policy's copy on ``policy_device``, if there is one.

        Otherwise nothing moves: the policy called is the very object trained. Either way the
        next policy call uses the new weights (never one under way: the call runs in this
        thread), and the frames of the next round record ``version``.
        """
        if self.device_copy is not None and weights is not None:
            self.device_copy.load_state_dict(weights.state_dict())

    def counters(self) -> Any | None:
        """The workers' segment: they count their steps there, this engine its policy calls."""
        return self.backend.segment

    def supervision(self) -> Supervision:
        """Each worker's stats and the recent supervision events."""
        if self._final is not None:
            return self._final
        return Supervision(self.backend.workers(), self.backend.events())

    def state(self) -> dict[str, Any]:
        """Trajectory numbering and, with ``snapshots``, where every env and random stream is.

        The env snapshot (pickled, under ``"env_snapshot"``) is taken between batches, when no
        step is in flight: every env's state from its worker, what each group's policy reads
        next (observations, recurrent state), the groups' torch streams, the workers' random
        action draws, the rounds made and, in async mode, the rollouts of the last round not
        handed out yet. A collector that loads it makes the batches this one would make next.
        None is taken before the first batch, or after a round broken by an error or a worker
        restart it has not seen yet (the next round resets or cuts those envs anyway).
        """
        state: dict[str, Any] = {"central": {"traj_ids": self._ids.state()}}
        if self.config.takes_snapshots and not self._reset_needed and not self._closed and self._restarts_seen():
            snapshot = {
                "envs": self._saved_env_states(),
                "groups": [runner.snapshot() for runner in self.runners],
                "streams": self.streams.state() if self.streams is not None else None,
                "draws": self._draws.state(),
                "rounds": self._rounds,
                "pending": [(td.to_dict(), list(td.batch_size)) for td in self._pending],
            }
            if self._restarts_seen():  # no worker restarted while its envs were read
                state["env_snapshot"] = pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL)
        return state

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state` (the envs too, if it holds their snapshot; one of another layout is ignored)."""
        saved = state.get("central")
        if isinstance(saved, Mapping) and isinstance(saved.get("traj_ids"), Mapping):
            self._ids.load_state(saved["traj_ids"])
        if "env_snapshot" not in state:
            return
        snapshot = pickle.loads(state["env_snapshot"])
        if len(snapshot["groups"]) != len(self.runners):
            raise ConfigError(
                f"the state_dict's env snapshot holds {len(snapshot['groups'])} groups of envs, this central engine "
                f"steps {len(self.runners)}: make it with the same Central(groups=...)"
            )
        self.backend.load_env_states(snapshot["envs"], self.states_per_request)
        self._env_states = list(snapshot["envs"])
        for runner, group in zip(self.runners, snapshot["groups"], strict=True):
            runner.restore(group)
        if self.streams is not None and snapshot["streams"] is not None:
            self.streams.load_state(snapshot["streams"])
        self._draws.load_state(snapshot["draws"])
        self._rounds = int(snapshot["rounds"])
        self._pending = [TensorDict(fields, batch_size=size) for fields, size in snapshot["pending"]]
        self._reset_needed = False  # the envs continue where they were

    def _saved_env_states(self) -> list[Any]:
        """Every env's state from its worker, asked once between two rounds (async hands out several batches)."""
        if self._env_states is None:
            self._env_states = self.backend.env_states(self.states_per_request)
        return self._env_states

    def _restarts_seen(self) -> bool:
        """Whether every group has seen every worker's current generation (no restart is pending)."""
        generations = [self.backend.generation(w) for w in range(self.num_workers)]
        return all(runner.seen == generations for runner in self.runners)

    def env_calls(self) -> EnvCalls:
        """The workers' envs through their step channels, between batches (no step is in flight then)."""
        return self.backend

    def close(self) -> None:
        """Stop the workers (they close their envs) and release the batch memory (once)."""
        if self._closed:
            return
        self._closed = True
        self._pending = []
        self._copier.settle()
        events = self.backend.events()
        for runner in self.runners:
            runner.close()
        self.backend.close()
        self._final = Supervision(self.backend.workers(), events)
        self._memory = staging_memory(torch.device("cpu"))


def _vector_config(config: CollectorConfig, plan: RolloutPlan) -> VectorConfig:
    """The step workers' settings: ``SAME_STEP``, the collector's infos and episode limit, its supervision."""
    return VectorConfig(
        config.num_workers * config.envs_per_worker,
        num_workers=config.num_workers,
        autoreset_mode=AutoresetMode.SAME_STEP,
        info_keys=_info_names(config, plan),
        supervision=config.supervision,
        max_episode_steps=config.max_frames_per_traj,
    )


def _check_env_states(env_source: EnvSource, probe: Any) -> int:
    """The bytes of an env's state, pickled; an env whose state cannot be saved, or is too large to travel, refused.

    Raises:
        EnvStateError: Naming the env and what cannot be saved, or its size.
    """
    why = env_source.backend.snapshot_refusal(probe)
    size = 0
    if why is None:
        size = len(pickle.dumps(env_source.backend.get_state(probe), protocol=pickle.HIGHEST_PROTOCOL))
        if size > MAILBOX_BYTES // 2:  # room for the episode counters and for states that grow
            why = f"its state takes {size:,} bytes pickled, more than half a worker's {MAILBOX_BYTES:,}-byte mailbox"
    if why is None:
        return size
    raise EnvStateError(
        f"snapshots=True (or a checkpoint_dir) saves every env's state, but env {env_source.describe()!r} cannot "
        f"be saved with engine='central': {why}"
    )


# A group's policy call of at least this many FLOPs does enough work to pay for a second call
# per step: about 100 us on one core of the 2-CPU development machine, five times torch's own
# cost for a call of a small module (about 20 us). The Nature CNN over 8 Atari frames: 150
# MFLOP; a 64-wide MLP over 8 CartPole observations: 72 kFLOP.
GROUP_CALL_FLOPS = 10_000_000


def default_groups(
    has_policy: bool, device: torch.device | None, num_workers: int, group_call_flops: Callable[[], int | None]
) -> tuple[int, str]:
    """How many groups ``Central(groups=None)`` makes, and why: 2 where overlapping the policy with the steps pays.

    Two groups overlap one group's policy call with the other's env steps. That pays where
    the call has somewhere to run meanwhile: a GPU (any device but the CPU), or a CPU of this
    process's that no worker needs. Where the workers take every CPU, the call and the steps
    share them, and two groups pay only where the call's work grows with its batch, so that
    halving the batch halves the call: at least :data:`GROUP_CALL_FLOPS` for a group of two's
    envs (``group_call_flops``, counted only then; ``None``: torch could not count them, and
    two groups it is, as before the count). A smaller policy's call costs about the
    same whatever its batch, and two groups would make twice the calls for nothing: on 2 CPUs,
    CartPole with a 64-wide MLP ran 1.25x faster with one group, Pong with the Nature CNN
    1.3x faster with two. Without a policy there is no call to overlap.
    """
    if not has_policy:
        return 1, "random actions, no policy call to overlap with the steps"
    if device is not None and device.type != "cpu":
        return 2, f"the policy runs on {device} while the workers step"
    cpus = _usable_cpus()
    if cpus > num_workers:
        return 2, f"{cpus} CPUs for {num_workers} workers: one is left for the policy while they step"
    flops = group_call_flops()
    if flops is None:
        return 2, f"{num_workers} workers fill the {cpus} CPUs, and torch could not count the policy call's FLOPs"
    fill = f"{num_workers} workers fill the {cpus} CPUs, and a group of two's policy call does {flops:,} FLOPs"
    if flops >= GROUP_CALL_FLOPS:
        return 2, f"{fill}: at least {GROUP_CALL_FLOPS:,}, so halving its batch halves its work"
    return 1, f"{fill}: under {GROUP_CALL_FLOPS:,}, so two calls would cost about twice one"


def _call_flops(config: CollectorConfig, env_source: EnvSource, probe: Any, policy: Any, num_envs: int) -> int | None:
    """The FLOPs of one policy call over ``num_envs`` envs, on a dry run's example batch; torch's random stream kept.

    Only the policy's runner is built (not a whole :func:`plan_rollout`, whose ``info_keys``
    probe would step the probe env once more).
    """
    with torch.random.fork_rng(devices=[]):
        device = policy_device(config, policy, policy_here=True)
        specs, rng = env_source.specs(probe), action_rng(config.seed)
        runner = PolicyRunner(policy, specs, num_envs, device, rng, config.exploration_type)
        return runner.call_flops()


def env_groups(envs_per_worker: int, groups: int) -> list[range]:
    """A worker's ``envs_per_worker`` envs split into ``min(groups, envs_per_worker)`` consecutive ranges, evenly."""
    count = max(1, min(groups, envs_per_worker))
    bounds = [round(g * envs_per_worker / count) for g in range(count + 1)]
    return [range(bounds[g], bounds[g + 1]) for g in range(count)]


def _usable_cpus() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _free_cpus(num_workers: int) -> int:
    """A CPU policy's threads per call: the CPUs this process may use less the workers'."""
    return max(1, _usable_cpus() - num_workers)


def _collect(runner: CentralRunner, run: _Rollout, t: int) -> None:
    """Collect the step ``t`` that ``runner`` posted, and end it (trajectory limit, resets)."""
    runner.end_step(run, t, runner.collect(run, t))
