"""Central inference: the engine of ``Collector(num_workers=N, engine="central")``.

Worker processes only step environments; the trainer runs the policy once per step over the
envs of every worker, on ``policy_device``, and writes the actions back. The workers are a
vector env's (:class:`~pycollect._engines.workers.step_backend.WorkerStepBackend`, each with an
:class:`~pycollect._steps.group.EnvGroup` of ``K`` envs in ``SAME_STEP`` autoreset mode, which
also applies ``max_frames_per_traj``); the stepping loop is
:class:`~pycollect._rollout.runner.EnvRunner`'s, with :class:`CentralRunner` saying where the
envs are. What crosses the process boundary per step: the actions into shared memory, one
request per worker, then observations, final observations, rewards and flags out of shared
memory, and through the mailbox only the kept ``info_keys`` entries of envs that had some.

Batches equal the ``workers`` engine's for the same seed and a deterministic policy: worker
``w``'s envs get ``env_seeds(seed, K, w, generation)`` at their first reset and trajectory
ids from ``traj_id_start(w, N, generation)`` with stride ``N``; random actions
(``init_random_frames``, ``policy=None``) are drawn from one stream per worker
(``action_rng(seed, w, generation)``), ``K`` envs at a time, exactly as each worker would.

The workers are split into groups (two by default), each with its own backend and runner;
the groups' rollouts run in two threads, so one group's policy call overlaps the other
group's env steps (double buffering). Every batch is one round: all workers stepped ``T``
times, ``[N*K, T]`` ordered by worker. In async mode (``sync=False``) the round is handed out
one worker's ``[K, T]`` rollout per batch, in worker order, and the next round starts only
when all of them have been taken: frames carry the policy version that chose them, which may
be older than the collector's by then.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from tensordict import TensorDict
from tensordict.nn import InteractionType, set_interaction_type

from pycollect._batch.device import DeviceCopier, staging_memory
from pycollect._batch.tensordict import allocate, to_tensordict
from pycollect._engines.inprocess import on_policy_device
from pycollect._engines.resources import BATCHES_HELD, batch_bytes, check_fits, check_fits_before_env
from pycollect._engines.workers import forkserver
from pycollect._engines.workers.step_backend import WorkerStepBackend
from pycollect._keys import NEXT_DONE, Key
from pycollect._rollout.actions import ActionSource, RandomActions, step_of
from pycollect._rollout.observations import fill_observations, observation_pairs
from pycollect._rollout.policy import parameters_device
from pycollect._rollout.runner import EnvRunner
from pycollect._rollout.seeding import action_rng, env_seeds, torch_seed, traj_id_start
from pycollect.config import CollectorConfig, VectorConfig
from pycollect.engines import Engine, RolloutPlan, Supervision, close_within, plan_rollout
from pycollect.envs.source import EnvSource
from pycollect.exceptions import CollectorClosedError, ConfigError

if TYPE_CHECKING:
    from pycollect._core import WorkerEvent, WorkerStats
    from pycollect._rollout.runner import _Rollout
    from pycollect.envs.specs import EnvSpecs, Field, FieldSpec

__all__ = ["CentralActions", "CentralEngine", "CentralRunner", "TorchStreams"]


class TorchStreams:
    """One torch random stream per group, so a stochastic policy samples the same for the same seed.

    Two groups call the policy from two threads, and torch has one global generator: the order
    of their draws, and so every sample, would depend on how the threads interleave. Instead
    each group's policy calls run with the global generator set to the group's own state, one
    group at a time (a lock), and the state is kept for its next call. A group's stream starts
    as ``torch_seed(seed, w)`` of its first worker ``w`` (and the policy's dry run for the
    group's envs), which is the stream worker ``w`` of the ``workers`` engine starts with: with
    one worker per group, a stochastic policy samples exactly what it samples there. The
    trainer's own generator state is put back after every use (:meth:`keep_trainers`).

    Only the policy calls take the lock, so one group's call still overlaps the other group's
    env steps (the double buffering); two policy calls no longer run at once.

    Args:
        device: Where the policy runs; a CUDA device's generator is streamed too.
    """

    def __init__(self, device: torch.device | None) -> None:
        self._cuda = device if device is not None and device.type == "cuda" else None
        self._lock = threading.Lock()
        self._states: list[tuple[torch.Tensor, torch.Tensor | None]] = []

    def _get(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        cuda = torch.cuda.get_rng_state(self._cuda) if self._cuda is not None else None
        return torch.get_rng_state(), cuda

    def _set(self, state: tuple[torch.Tensor, torch.Tensor | None]) -> None:
        torch.set_rng_state(state[0])
        if self._cuda is not None and state[1] is not None:
            torch.cuda.set_rng_state(state[1], self._cuda)

    @contextlib.contextmanager
    def keep_trainers(self) -> Iterator[None]:
        """Put the trainer's generator state back afterwards."""
        with self._lock:
            trainers = self._get()
        try:
            yield
        finally:
            with self._lock:
                self._set(trainers)

    def start(self, seed: int) -> int:
        """A new stream from ``seed`` (call within :meth:`keep_trainers`); its index.

        The global generator is left seeded with it, so what runs next (the group's policy dry
        run) draws from it; :meth:`take` then keeps where that left the stream.
        """
        with self._lock:
            torch.manual_seed(seed)
            self._states.append(self._get())
            return len(self._states) - 1

    def take(self, stream: int) -> bool:
        """Keep the global generator's state as ``stream``'s (after its dry run); whether it drew from it."""
        with self._lock:
            seeded, now = self._states[stream], self._get()
            self._states[stream] = now
        cpu_drew = not torch.equal(seeded[0], now[0])
        cuda_drew = seeded[1] is not None and now[1] is not None and not torch.equal(seeded[1], now[1])
        return cpu_drew or cuda_drew

    def reseed(self, stream: int, seed: int) -> None:
        """Restart ``stream`` from ``seed`` (a restarted worker's generation, as its own process would)."""
        with self._lock:
            trainers = self._get()
            torch.manual_seed(seed)
            self._states[stream] = self._get()
            self._set(trainers)

    @contextlib.contextmanager
    def drawing(self, stream: int) -> Iterator[None]:
        """Run the block (a policy call) on ``stream``, alone."""
        with self._lock:
            self._set(self._states[stream])
            try:
                yield
            finally:
                self._states[stream] = self._get()


class CentralActions:
    """The actions of ``N * K`` envs: one policy call for all, random ones drawn per worker.

    Args:
        policy: The policy's action source for the envs of ``workers`` (``None``: random actions only).
        action: The action field.
        envs_per_worker: ``K``.
        workers: The workers whose envs these are, as the collector numbers them (consecutive).
        seed: The collector's seed.
        streams: The groups' torch streams and this group's stream in them (``None``: the
            policy draws from torch's global generator as it is, as without a seed).
    """

    def __init__(
        self,
        policy: ActionSource | None,
        action: FieldSpec | Sequence[FieldSpec],
        envs_per_worker: int,
        workers: range,
        seed: int | None,
        streams: tuple[TorchStreams, int] | None = None,
    ) -> None:
        self.policy = policy
        self.outputs: tuple[Field, ...] = policy.outputs if policy is not None else ()
        self.carried: tuple[Field, ...] = policy.carried if policy is not None else ()
        self._action, self._k, self._seed, self._first = action, envs_per_worker, seed, workers.start
        self._random = [RandomActions(action, envs_per_worker, action_rng(seed, w)) for w in workers]
        self._streams = streams

    def restart(self, worker: int, generation: int) -> None:
        """A restarted worker (the collector's number) draws from its new generation's streams, as its own loop would.

        Its random actions, and, where it is its group's first worker, the group's torch stream.
        """
        self._random[worker - self._first] = RandomActions(
            self._action, self._k, action_rng(self._seed, worker, generation)
        )
        seed = torch_seed(self._seed, worker, generation)
        if self._streams is not None and worker == self._first and seed is not None:
            streams, stream = self._streams
            streams.reseed(stream, seed)

    def act(
        self, observation: Mapping[Key, np.ndarray], carried: Mapping[Key, np.ndarray] | None = None
    ) -> tuple[Any, Mapping[Key, Any]]:
        """The policy's actions for every env (random ones without a policy)."""
        if self.policy is None:
            return step_of(self.random_actions(1), 0), {}
        if self._streams is None:
            return self.policy.act(observation, carried)
        streams, stream = self._streams
        with streams.drawing(stream):
            return self.policy.act(observation, carried)

    def random_actions(self, steps: int) -> Any:
        """``[steps, N * K, ...]``: each worker's stream of ``[steps, K, ...]``, in worker order (per action leaf)."""
        drawn = [source.random_actions(steps) for source in self._random]
        if isinstance(drawn[0], tuple):
            return tuple(np.concatenate(leaf, axis=1) for leaf in zip(*drawn, strict=True))
        return np.concatenate(drawn, axis=1)


class CentralRunner(EnvRunner):
    """:class:`EnvRunner` over the envs of one group of workers, a worker step backend's (``SAME_STEP`` mode).

    Everything but where the envs are is the base class's: the policy call, carried state,
    trajectory bookkeeping, storing, the reward range check. Here the envs' steps come back
    through shared memory, already checked by the workers' :class:`~pycollect._steps.group.EnvGroup`
    (which also truncates at ``max_frames_per_traj`` and resets ended envs in the same step),
    and trajectory ids are handed out per worker as in the ``workers`` engine.

    Args:
        backend: The group's workers (its worker ``j`` is the collector's ``workers[j]``).
        specs: The env's fields.
        actions: Where actions come from.
        config: The collector's settings (``seed``, ``num_workers``, ``envs_per_worker``).
        env_name: The env's name, for messages.
        info: The kept info entries, as fields.
        workers: The collector's numbers of the group's workers (default: all of them), which
            their seeds, random streams and trajectory ids derive from.

    Raises:
        ConfigError: The env backend's fields do not match the workers' space layout.
    """

    native = False  # the envs step in the workers (natively there where they can)

    def __init__(
        self,
        backend: WorkerStepBackend,
        specs: EnvSpecs,
        actions: CentralActions,
        config: CollectorConfig,
        env_name: str,
        info: tuple[FieldSpec, ...],
        workers: range | None = None,
    ) -> None:
        self.backend = backend
        self._count = backend.num_envs
        self._workers, self._k, self._seed = config.num_workers, config.envs_per_worker, config.seed
        self.group = range(config.num_workers) if workers is None else workers
        self.actions = actions
        super().__init__([], specs, actions, None, env_name=env_name, info=info)
        self._next_ids = [traj_id_start(w, self._workers, 1) for w in self.group]
        # A field's leaf is found by where it sits in the raw observation (a backend's keys may differ)
        leaves = {leaf.field.key: n for n, leaf in enumerate(backend.observation.leaves)}
        self._leaves: list[int] = []
        for spec, (_, path) in zip(specs.observation, specs.observation_paths(), strict=True):
            n = leaves.get(("observation", *path), -1)
            if n < 0 or backend.observation.leaves[n].field.shape != spec.shape:
                raise ConfigError(
                    f"env {env_name!r}: observation field {'/'.join(spec.key)} {spec.shape} is not a leaf of the "
                    f"workers' observation space {backend.observation.space}; engine='central' needs the env "
                    "backend's fields to be the gymnasium space's leaves"
                )
            self._leaves.append(n)

    @property
    def num_envs(self) -> int:
        """``N * K``."""
        return self._count

    def state(self) -> dict[str, Any]:
        """The next trajectory id of each of the group's workers."""
        return {"next_traj_ids": list(self._next_ids)}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state` (a state of another group size is ignored)."""
        ids = state.get("next_traj_ids")
        if ids is not None and len(ids) == len(self.group):
            self._next_ids = [int(i) for i in ids]

    def close(self) -> None:
        """Nothing here: the engine closes the backend."""

    def _reset_envs(self, seeds: Sequence[int] | None) -> Iterable[tuple[int, Any]]:
        """Reset every env; worker ``w``'s with ``env_seeds(seed, K, w)`` the first time."""
        if not self._has_reset:
            first: list[int | None] = [s for w in self.group for s in env_seeds(self._seed, self._k, w)]
        else:
            first = [None] * self._count
        self.backend.reset(first, None, None)
        return ((i, self._observation(i)) for i in range(self._count))

    def _reset_env(self, i: int) -> Any:
        """The observation env ``i`` was reset to in its worker when its episode ended (``SAME_STEP``)."""
        return self._observation(i)

    def _observation(self, i: int) -> Any:
        return self.backend.observation.single(self.backend.observations, i)

    def _step(self, run: _Rollout, t: int, actions: Any) -> list[int]:
        """Post the actions to the group's workers, wait for their answers, store step ``t``.

        The wait releases the GIL, so the other group's thread runs its policy call meanwhile.
        """
        backend = self.backend
        backend.step_async(list(actions) if isinstance(actions, tuple) else [actions])
        parts = backend.step_wait()
        for j in backend.last_restarted:  # its envs' episodes were cut (truncated) at this step
            generation, w = backend.generation(j), self.group[j]
            self._next_ids[j] = traj_id_start(w, self._workers, generation)
            self.actions.restart(w, generation)
        ended = np.flatnonzero(backend.terminated | backend.truncated)
        final = backend.final_observations
        assert final is not None  # SAME_STEP mode
        for obs_out, n in zip(run.obs_out, self._leaves, strict=True):
            obs_out.next_obs[:, t] = backend.observations[n]
            if len(ended):
                obs_out.next_obs[ended, t] = final[n][ended]  # the final observation, not the reset one
        for j in backend.last_restarted:  # the env's own (per-agent) flags are cut too
            for flags in run.own_flags:
                flags[j * self._k : (j + 1) * self._k, t] = True
        run.rewards[t] = backend.rewards
        run.terminated[t] = backend.terminated
        run.truncated[t] = backend.truncated
        if run.info_out:
            self._store_infos(run, t, parts, backend.terminated | backend.truncated)
        return ended.tolist()

    def _store_infos(self, run: _Rollout, t: int, parts: Sequence[tuple[int, Any]], ended: np.ndarray) -> None:
        """The kept info entries of step ``t``: the step's info (the final one where an episode ended), else zeros.

        Each env's entries are what its info fields hold and what of its info fit none (the material).
        """
        for _, array, _, default in run.info_out:
            array[:, t] = default
        fields = self.backend.info
        entries: dict[int, dict[str, Any]] = {}
        if fields.fields:
            for i in range(self._count):
                if entry := fields.env_info(i, final=bool(ended[i])):
                    entries[i] = entry
        for offset, material in parts:
            for j, info, final_info in material:
                i = offset + j
                entries.setdefault(i, {}).update((final_info or {}) if ended[i] else info)
        for i, entry in entries.items():
            for n, array, name, _ in run.info_out:
                if name in entry:
                    array[i, t] = run.checks.info(n, entry[name], i, t + 1)

    def _start_trajectory(self, i: int) -> None:
        j = i // self._k  # the group's worker
        self._traj_ids[i] = self._next_ids[j]
        self._next_ids[j] += self._workers
        self._started[i] = self._clock


def _info_names(config: CollectorConfig, plan: RolloutPlan) -> tuple[str, ...]:
    """The info entries the step workers send: ``info_keys`` and the env's own next fields (per-agent rewards)."""
    own = tuple(entry.path[0] for entry in plan.specs.next_fields if entry.path)
    return (*own, *config.info_keys)


class CentralEngine(Engine):
    """Worker processes step the envs; this process runs the policy once per step for each group of them.

    Build it with :meth:`start`, which checks everything before any worker starts.

    The workers are split into ``groups`` consecutive groups (two by default), each with its
    own step backend and its own :class:`CentralRunner`, whose rollouts run at the same time in
    two threads of this process: while the policy runs on one group's observations (torch
    releases the GIL), the other group's envs step in their processes (the wait releases it).
    That is the double buffering of EnvPool's async mode and Sample Factory's sampler; with one
    group, the policy and the envs take turns.

    Args:
        plan: What every rollout holds.
        runners: The stepping loop over each group's envs, in worker order.
        backends: Each group's workers.
        config: The collector's settings.
        policy: The policy (``None``: random actions).
        device_copy: The weights module of the policy's copy on ``policy_device`` (``None``:
            the user's policy is called as it is).
        policy_threads: torch's intra-op threads for the policy calls of a round (``None``:
            torch's setting is left alone, as for a policy on a GPU).
        streams: The groups' torch random streams (``None``: no seed, or no policy).
    """

    def __init__(
        self,
        plan: RolloutPlan,
        runners: Sequence[CentralRunner],
        backends: Sequence[WorkerStepBackend],
        config: CollectorConfig,
        policy: Any,
        device_copy: torch.nn.Module | None,
        policy_threads: int | None = None,
        streams: TorchStreams | None = None,
    ) -> None:
        self.plan = plan
        self.streams = streams
        self.runners = list(runners)
        self.backends = list(backends)
        self.config = config
        self.has_policy = policy is not None
        self.device_copy = device_copy
        self.policy_threads = policy_threads
        self.num_workers, self.envs_per_worker = config.num_workers, config.envs_per_worker
        self.steps = config.steps_per_batch
        self.storing_device = config.storing_device or config.device or torch.device("cpu")
        self._memory = staging_memory(torch.device(self.storing_device))
        self._copier = DeviceCopier()
        self._observations = observation_pairs(spec.key for spec in plan.specs.observation)
        self._rounds = 0
        self._broken = False  # a round ended by an exception: the envs' state is not the runners'
        self._pending: list[TensorDict] = []  # async: the rollouts of the last round not yet handed out
        self._closed = False
        self._final: Supervision | None = None
        # The second group's rollouts run here; one thread, kept for the engine's life.
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="pycollect-central") if len(self.runners) > 1 else None

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
        groups: int = 2,
        policy_threads: int | None = None,
    ) -> CentralEngine:
        """Check the env, the policy (on a batch of each group's envs) and the memory; then start the workers.

        Args:
            config: The collector's settings, resolved.
            env_source: What builds the envs.
            policy: The policy (``None``: random actions).
            weights_module: The module whose weights ``update_policy_weights_()`` publishes.
            groups: How many groups of workers take turns with the policy (at most
                ``num_workers``; the workers are split as evenly as they go, in order).
            policy_threads: torch's intra-op threads for a CPU policy's calls during a round
                (``None``: the CPUs the workers leave free, shared between the groups).

        Raises:
            ConfigError: Anything that would fail later, named, before any worker starts
                (:class:`~pycollect.PolicyError` for a policy that cannot act for a group's
                envs at once).
        """
        k, steps, seed = config.envs_per_worker, config.steps_per_batch, config.seed
        rows = config.num_workers * k
        what = f"the batches of engine='central' ({config.num_workers} workers)"
        check_fits_before_env(config, what, BATCHES_HELD * rows * steps)
        policy, device_copy = on_policy_device(config, policy, weights_module)
        split = _groups(config.num_workers, groups)
        forkserver.start()  # its imports overlap with the probe env and the policy's check
        device = config.requested_policy_device or parameters_device(policy)
        streams = TorchStreams(device) if policy is not None and seed is not None else None
        stream_of: list[int] = []
        probe = env_source.make()
        try:
            drew = False
            with streams.keep_trainers() if streams is not None else contextlib.nullcontext():
                plans = []
                for group in split:
                    if streams is not None:  # the group's dry run draws from its stream, as a worker's does
                        stream_of.append(streams.start(cast(int, torch_seed(seed, group.start))))
                    plans.append(
                        plan_rollout(config, env_source, probe, policy, num_envs=len(group) * k, policy_here=True)
                    )
                    if streams is not None:
                        drew |= streams.take(stream_of[-1])
            if not drew:  # a policy that draws nothing (an argmax) needs no streams, nor their lock
                streams, stream_of = None, []
            check_fits(what, BATCHES_HELD * batch_bytes(plans[0].fields, rows, steps), config)
            has_policy = policy is not None
            backends, runners = cls._start_groups(
                config, env_source, probe, split, plans, has_policy, streams, stream_of
            )
        finally:
            close_within(probe, env_source, config.supervision.shutdown_grace_s, what="probe env")
        threads = None
        if policy is not None and getattr(plans[0].actions, "device", None) == torch.device("cpu"):
            threads = policy_threads or _free_cpus(config.num_workers, len(split))
        return cls(plans[0], runners, backends, config, policy, device_copy, threads, streams)

    @staticmethod
    def _start_groups(
        config: CollectorConfig,
        env_source: EnvSource,
        probe: Any,
        split: Sequence[range],
        plans: Sequence[RolloutPlan],
        has_policy: bool,
        streams: TorchStreams | None,
        stream_of: Sequence[int],
    ) -> tuple[list[WorkerStepBackend], list[CentralRunner]]:
        """Start each group's workers (reading ``probe`` for their spaces) and build its runner."""
        k, seed = config.envs_per_worker, config.seed
        backends: list[WorkerStepBackend] = []
        try:
            runners = []
            for g, (group, plan) in enumerate(zip(split, plans, strict=True)):
                backend = WorkerStepBackend.start(env_source, _group_config(config, len(group), plan), probe=probe)
                backends.append(backend)
                backend.restart_seeds = functools.partial(_restart_seeds, seed, k, group)
                actions = CentralActions(
                    plan.actions if has_policy else None,
                    plan.specs.action_fields,
                    k,
                    group,
                    seed,
                    (streams, stream_of[g]) if streams is not None else None,
                )
                runners.append(
                    CentralRunner(backend, plan.specs, actions, config, env_source.describe(), plan.info, group)
                )
        except BaseException:
            for backend in backends:
                backend.close()
            raise
        return backends, runners

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

    def _round(self, policy_version: int) -> dict[Key, np.ndarray]:
        """Step every worker's envs ``T`` times into fresh ``[N*K, T]`` arrays, the groups at the same time."""
        config = self.config
        self._copier.settle()  # the previous batch's staging memory may be reused from here
        arrays = allocate(self.plan.fields, self.num_envs, self.steps, self._memory)
        if self._broken or (config.reset_at_each_iter and self._rounds > 0):
            # After an interrupted round (Ctrl-C, an error) the workers may have stepped once
            # more than the runners recorded: every env starts a new trajectory from a reset.
            for runner in self.runners:
                runner.reset()
            self._broken = False
        random = not self.has_policy or self._rounds * self.num_envs * self.steps < config.init_random_frames
        k = self.envs_per_worker

        threads, trainers_threads = self.policy_threads, torch.get_num_threads()

        def roll(runner: CentralRunner) -> None:
            if threads is not None:
                # torch reads the setting per thread (OpenMP), so each group's thread sets its own
                torch.set_num_threads(threads)
            rows = slice(runner.group.start * k, runner.group.stop * k)  # a view: the group's rows
            runner.rollout({key: array[rows] for key, array in arrays.items()}, random, None, policy_version)

        first, *others = self.runners
        # tensordict's interaction type is one value for the whole process, which each policy
        # call sets and restores: set here for the round, the groups' threads only ever write
        # back this same value.
        keep_trainers = self.streams.keep_trainers() if self.streams is not None else contextlib.nullcontext()
        with set_interaction_type(InteractionType(config.exploration_type)), keep_trainers:
            try:
                pool = self._pool  # there is one exactly when there are other groups
                elsewhere = [pool.submit(roll, runner) for runner in others] if pool is not None else []
                try:
                    roll(first)
                finally:
                    wait(elsewhere)  # never leave a group's rollout running past the round
                for future in elsewhere:
                    future.result()  # its exception, if it raised
            except BaseException:
                self._broken = True
                raise
            finally:
                if threads is not None:
                    torch.set_num_threads(trainers_threads)
        for key, next_key in self._observations:
            fill_observations(arrays[key], arrays[next_key], arrays[NEXT_DONE])
        self._rounds += 1
        return arrays

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

    def supervision(self) -> Supervision:
        """Each worker's stats and the recent supervision events, workers numbered as the collector numbers them."""
        if self._final is not None:
            return self._final
        return Supervision(self._workers(), self._events())

    def _workers(self) -> tuple[WorkerStats, ...]:
        return tuple(
            cast("WorkerStats", _Renumbered(stats, runner.group.start))
            for runner, backend in zip(self.runners, self.backends, strict=True)
            for stats in backend.workers()
        )

    def _events(self) -> tuple[WorkerEvent, ...]:
        return tuple(
            cast("WorkerEvent", _Renumbered(event, runner.group.start))
            for runner, backend in zip(self.runners, self.backends, strict=True)
            for event in backend.events()
        )

    def state(self) -> dict[str, Any]:
        """Trajectory numbering, to continue it after :meth:`load_state`."""
        return {"central": [runner.state() for runner in self.runners]}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state` (one of another group count is ignored)."""
        saved = state.get("central")
        if isinstance(saved, list) and len(saved) == len(self.runners):
            for runner, runner_state in zip(self.runners, saved, strict=True):
                runner.load_state(runner_state)

    def close(self) -> None:
        """Stop the workers (they close their envs) and release the batch memory (once)."""
        if self._closed:
            return
        self._closed = True
        self._pending = []
        self._copier.settle()
        events = self._events()
        for backend in self.backends:
            backend.close()
        self._final = Supervision(self._workers(), events)
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self._memory = staging_memory(torch.device("cpu"))


class _Renumbered:
    """A group backend's worker stats or event, with the worker numbered as the collector numbers it."""

    def __init__(self, inner: Any, first: int) -> None:
        self._inner, self.worker = inner, inner.worker + first

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __repr__(self) -> str:
        return repr(self._inner).replace(f"worker={self._inner.worker}", f"worker={self.worker}", 1)


def _group_config(config: CollectorConfig, workers: int, plan: RolloutPlan) -> VectorConfig:
    """The vector env settings of a group of ``workers`` workers: ``SAME_STEP``, the collector's infos and limits."""
    return VectorConfig(
        workers * config.envs_per_worker,
        num_workers=workers,
        autoreset_mode=AutoresetMode.SAME_STEP,
        info_keys=_info_names(config, plan),
        supervision=config.supervision,
        max_episode_steps=config.max_frames_per_traj,
    )


def _groups(num_workers: int, groups: int) -> list[range]:
    """``num_workers`` split into ``min(groups, num_workers)`` consecutive ranges, as evenly as they go."""
    count = max(1, min(groups, num_workers))
    bounds = [round(g * num_workers / count) for g in range(count + 1)]
    return [range(bounds[g], bounds[g + 1]) for g in range(count)]


def _free_cpus(num_workers: int, groups: int) -> int:
    """A CPU policy's threads per call: the CPUs this process may use less the workers', shared by the groups."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, (cpus - num_workers) // groups)


def _restart_seeds(seed: int | None, k: int, group: range, worker: int, generation: int) -> list[int]:
    """The seeds of a group's restarted worker ``worker`` (the group's number): the collector's worker's."""
    return env_seeds(seed, k, group[worker], generation)
