"""Central inference: the engine of ``Collector(num_workers=N, engine="central")``.

Worker processes only step environments; the trainer runs the policy once per step over the
envs of every worker, on ``policy_device``, and writes the actions back. The workers are a
vector env's (one :class:`~pycollect._engines.workers.step_backend.WorkerStepBackend`, each
worker an :class:`~pycollect._steps.group.EnvGroup` of ``K`` envs in ``SAME_STEP`` autoreset
mode, which also applies ``max_frames_per_traj``); the stepping loop is
:class:`~pycollect._rollout.runner.EnvRunner`'s, with :class:`CentralRunner` saying where the
envs are. What crosses the process boundary per step: the actions into shared memory, one
request per worker, then observations, final observations, rewards, flags and fixed-size info
entries out of shared memory, and through the mailbox only the kept info entries that fit no
info field.

**Groups of envs, each spanning every worker** (Sample Factory's double-buffered sampling).
Each worker's ``K`` envs are split into groups (two by default): group ``g`` is envs
``range_g`` of *every* worker, stepped by a runner of its own. One thread, the caller's, drives
them all: it posts group A's step to every worker, runs the policy on group B's observations
while the workers step A, waits for A's answers (the wait releases the GIL), stores them,
posts B's step, runs the policy on A's, and so on, group after group, step after step. Each
worker has one request in flight at a time, and every policy call covers envs of every worker.

Batches equal the ``workers`` engine's for the same seed and a deterministic policy: worker
``w``'s envs get ``env_seeds(seed, K, w, generation)`` at their first reset; trajectory ids
are handed out per worker as that worker's runner would (:class:`TrajectoryIds`, from
``traj_id_start(w, N, generation)`` with stride ``N``, in step-then-env order); random actions
(``init_random_frames``, ``policy=None``) are drawn from one stream per worker
(``action_rng(seed, w, generation)``), ``[T, K]`` per round exactly as each worker would
(:class:`WorkerDraws`), each group taking its envs' columns. A stochastic policy samples from
one torch stream per group (:class:`TorchStreams`): the same for the same seed, not the
``workers`` engine's samples. Every batch is one round: all workers stepped ``T`` times,
``[N*K, T]`` ordered by worker. In async mode (``sync=False``) the round is handed out one
worker's ``[K, T]`` rollout per batch, in worker order, and the next round starts only when all
of them have been taken: frames carry the policy version that chose them, which may be older
than the collector's by then.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from tensordict import TensorDict
from tensordict.nn import InteractionType, set_interaction_type

from pycollect._batch.device import DeviceCopier, staging_memory
from pycollect._batch.recycle import RecycledMemory
from pycollect._batch.tensordict import allocate, to_tensordict
from pycollect._engines.inprocess import on_policy_device
from pycollect._engines.resources import BATCHES_HELD, batch_bytes, check_fits, check_fits_before_env
from pycollect._engines.workers import forkserver
from pycollect._engines.workers.step_backend import WorkerStepBackend
from pycollect._keys import IS_INIT, NEXT_DONE, TRAJ_IDS, Key
from pycollect._native import _core
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
    from pycollect._rollout.runner import _Rollout
    from pycollect.envs.specs import EnvSpecs, Field, FieldSpec

__all__ = [
    "CentralActions",
    "CentralEngine",
    "CentralRunner",
    "TorchStreams",
    "TrajectoryIds",
    "WorkerDraws",
    "env_groups",
]


class TorchStreams:
    """One torch random stream per group, so a stochastic policy samples the same for the same seed.

    torch has one global generator, and the groups' calls take turns with it: each group's
    policy calls run with the global generator set to the group's own state, which is kept for
    its next call, so a group's samples do not depend on how many groups there are or on where
    the other groups' calls fall. Group ``g``'s stream starts as ``torch_seed(seed, g)`` (and
    the policy's dry run for the group's envs). The trainer's own generator state is put back
    after every use (:meth:`keep_trainers`).

    Args:
        device: Where the policy runs; a CUDA device's generator is streamed too.
    """

    def __init__(self, device: torch.device | None) -> None:
        self._cuda = device if device is not None and device.type == "cuda" else None
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
        trainers = self._get()
        try:
            yield
        finally:
            self._set(trainers)

    def start(self, seed: int) -> int:
        """A new stream from ``seed`` (call within :meth:`keep_trainers`); its index.

        The global generator is left seeded with it, so what runs next (the group's policy dry
        run) draws from it; :meth:`take` then keeps where that left the stream.
        """
        torch.manual_seed(seed)
        self._states.append(self._get())
        return len(self._states) - 1

    def take(self, stream: int) -> bool:
        """Keep the global generator's state as ``stream``'s (after its dry run); whether it drew from it."""
        seeded, now = self._states[stream], self._get()
        self._states[stream] = now
        cpu_drew = not torch.equal(seeded[0], now[0])
        cuda_drew = seeded[1] is not None and now[1] is not None and not torch.equal(seeded[1], now[1])
        return cpu_drew or cuda_drew

    @contextlib.contextmanager
    def drawing(self, stream: int) -> Iterator[None]:
        """Run the block (a policy call) on ``stream``."""
        self._set(self._states[stream])
        try:
            yield
        finally:
            self._states[stream] = self._get()


class WorkerDraws:
    """Each worker's random actions, drawn as its own stepping loop would, shared by the groups.

    Worker ``w`` of the ``workers`` engine draws ``[T, K, ...]`` random actions per rollout from
    ``action_rng(seed, w, generation)``; here that draw is made once per round, and each group
    takes its envs' columns of every worker's draw.

    Args:
        action: The action field, or every action leaf.
        envs_per_worker: ``K``.
        num_workers: ``N``.
        seed: The collector's seed.
    """

    def __init__(
        self, action: FieldSpec | Sequence[FieldSpec], envs_per_worker: int, num_workers: int, seed: int | None
    ) -> None:
        self._action, self._k, self._seed = action, envs_per_worker, seed
        self._sources = [RandomActions(action, envs_per_worker, action_rng(seed, w)) for w in range(num_workers)]
        self._generations = [1] * num_workers
        self._round = 0
        self._drawn: tuple[int, int, list[Any]] | None = None  # (round, steps, each worker's draw)

    def begin_round(self) -> None:
        """Draw anew for the next round."""
        self._round += 1

    def restart(self, worker: int, generation: int) -> None:
        """Worker ``worker``'s new generation draws from its own stream, as its process would (once a generation)."""
        if generation > self._generations[worker]:
            self._generations[worker] = generation
            self._sources[worker] = RandomActions(self._action, self._k, action_rng(self._seed, worker, generation))

    def columns(self, steps: int, envs: range) -> Any:
        """``[steps, N * len(envs), ...]``: envs ``envs`` of each worker's draw of this round, in worker order."""
        if self._drawn is None or self._drawn[:2] != (self._round, steps):
            self._drawn = (self._round, steps, [source.random_actions(steps) for source in self._sources])
        drawn = self._drawn[2]
        if isinstance(drawn[0], tuple):
            return tuple(
                np.concatenate([leaf[:, envs] for leaf in leaves], axis=1) for leaves in zip(*drawn, strict=True)
            )
        return np.concatenate([draw[:, envs] for draw in drawn], axis=1)


class CentralActions:
    """The actions of one group's envs: one policy call for all of them, random ones from the workers' draws.

    Args:
        policy: The policy's action source for the group's envs (``None``: random actions only).
        draws: The workers' random draws.
        envs: The group's envs of each worker.
        streams: The groups' torch streams and this group's stream in them (``None``: the
            policy draws from torch's global generator as it is, as without a seed).
    """

    def __init__(
        self,
        policy: ActionSource | None,
        draws: WorkerDraws,
        envs: range,
        streams: tuple[TorchStreams, int] | None = None,
    ) -> None:
        self.policy = policy
        self.outputs: tuple[Field, ...] = policy.outputs if policy is not None else ()
        self.carried: tuple[Field, ...] = policy.carried if policy is not None else ()
        self._draws, self._envs = draws, envs
        self._streams = streams

    def act(
        self,
        observation: Mapping[Key, np.ndarray],
        carried: Mapping[Key, np.ndarray] | None = None,
        step: int | None = None,
    ) -> tuple[Any, Mapping[Key, Any]]:
        """The policy's actions for every env of the group (random ones without a policy)."""
        if self.policy is None:
            return step_of(self.random_actions(1), 0), {}
        if self._streams is None:
            return self.policy.act(observation, carried, step)
        streams, stream = self._streams
        with streams.drawing(stream):
            return self.policy.act(observation, carried, step)

    def random_actions(self, steps: int) -> Any:
        """``[steps, N * K_g, ...]``: the group's columns of each worker's draw, in worker order."""
        return self._draws.columns(steps, self._envs)


class CentralRunner(EnvRunner):
    """:class:`EnvRunner` over one group's envs: envs ``envs`` of every worker of the step backend.

    Everything but where the envs are is the base class's: the policy call, carried state,
    episode bookkeeping, storing, the reward range check. Here a step writes the group's
    actions into its rows of the backend's action arrays and posts a STEP of those envs to
    every worker (:meth:`post`), then waits for the answers and reads its rows back
    (:meth:`collect`); the engine runs other groups' policy calls in between. The envs' results
    were checked by the workers' :class:`~pycollect._steps.group.EnvGroup` (which also truncates
    at ``max_frames_per_traj`` and resets ended envs in the same step). The group's env ``i`` is
    env ``envs[i % K_g]`` of worker ``i // K_g``. Trajectory ids are the engine's
    (:class:`TrajectoryIds`): the runner records where a worker restart cut its envs (:attr:`cuts`).

    Args:
        backend: The workers.
        specs: The env's fields.
        actions: Where the group's actions come from.
        config: The collector's settings (``num_workers``, ``envs_per_worker``).
        env_name: The env's name, for messages.
        info: The kept info entries, as fields.
        envs: The group's envs of each worker.

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
        envs: range,
    ) -> None:
        self.backend = backend
        self.envs_range = envs
        self.actions = actions
        workers, k = config.num_workers, config.envs_per_worker
        self._workers, self._kg = workers, len(envs)
        self._count = workers * self._kg
        # The group's rows in the backend's [N * K] arrays (every row, in order, for one group).
        self._every_env = self._kg == k
        self.rows = np.array([w * k + j for w in range(workers) for j in envs], np.int64)
        self._seen = [1] * workers  # the generation of each worker the group's envs last stepped in
        self.cuts: list[tuple[int, int, int]] = []  # (step, worker, generation) of this round's restarts
        self._posted_cut: list[int] = []  # the workers the posted step left out (restarted meanwhile)
        self._recorder: _core.StepRecorder | None = None  # the native recorder of the rollout begun last
        super().__init__([], specs, actions, None, env_name=env_name, info=info)
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
        self._now: list[np.ndarray] = []  # the group's observations after the engine's last reset, per leaf

    @property
    def num_envs(self) -> int:
        """``N * K_g``."""
        return self._count

    def close(self) -> None:
        """Let go of any view of the workers' segment (the engine closes the backend)."""
        self._now = []
        self._recorder = None

    def read_observations(self) -> None:
        """Take the group's rows of the observations (after the engine reset the envs)."""
        self._now = [self._gather(self.backend.observations[n]) for n in self._leaves]
        self._seen = [self.backend.generation(w) for w in range(self._workers)]

    def _gather(self, array: np.ndarray) -> np.ndarray:
        """The group's rows of one of the backend's ``[N * K, ...]`` arrays (a copy)."""
        return array.copy() if self._every_env else array[self.rows]

    def _reset_envs(self, seeds: Sequence[int] | None) -> Iterable[tuple[int, Any]]:
        """The group's envs as the engine reset them (:meth:`read_observations`)."""
        return ((i, self._observation(i)) for i in range(self._count))

    def _reset_env(self, i: int) -> Any:
        """The observation env ``i`` was reset to in its worker when its episode ended (``SAME_STEP``)."""
        return self._observation(i)

    def _observation(self, i: int) -> Any:
        return self.backend.observation.single([self._now[p] for p in self._positions()], i)

    def _positions(self) -> list[int]:
        """Where each of the backend's observation leaves is in :attr:`_now`."""
        order = {n: p for p, n in enumerate(self._leaves)}
        return [order[n] for n in range(len(self.backend.observation.leaves))]

    def _step(self, run: _Rollout, t: int, actions: Any) -> list[int]:
        """Step ``t`` of the group's envs, with nothing in between: :meth:`post`, then :meth:`collect`."""
        self.post(actions)
        return self.collect(run, t)

    def post(self, actions: Any) -> None:
        """Write the group's actions into its rows of the workers' action arrays and post the step.

        A worker restarted since the group's last step (found by another group's step, whose
        handling reset every env of it and wrote their rows as cut) is left out: its envs of
        this group are not stepped, and :meth:`collect` reports them cut.
        """
        backend, rows = self.backend, self.rows
        leaves = list(actions) if isinstance(actions, tuple) else [actions]
        for block, leaf in zip(backend.actions, leaves, strict=True):
            if self._every_env:
                block[...] = leaf
            else:
                block[rows] = leaf
        cut = [w for w in range(self._workers) if backend.generation(w) > self._seen[w]]
        self._posted_cut = cut
        if len(cut) < self._workers:
            envs = None if self._every_env else self.envs_range
            backend.step_async(envs=envs, workers=[w for w in range(self._workers) if w not in cut] if cut else None)

    def begin(self, out: Mapping[Key, np.ndarray], random_actions: bool, policy_version: int) -> _Rollout:
        """Bind a rollout to ``out`` and the native recorder of its steps to the workers' result rows.

        The recorder holds the rows' buffers until :meth:`release` (or the next ``begin``).
        """
        run = super().begin(out, random_actions, policy_version)
        backend, final = self.backend, self.backend.final_observations
        assert final is not None  # SAME_STEP mode
        self._recorder = _core.StepRecorder(
            self.rows.tolist(),
            backend.num_envs,
            run.steps,
            [
                (backend.observations[n], final[n], o.next_obs, o.obs, o.current, o.current[0].nbytes)
                for n, o in zip(self._leaves, run.obs_out, strict=True)
            ],
            (backend.rewards, backend.terminated, backend.truncated),
            (run.rewards, run.terminated, run.truncated),
        )
        return run

    def release(self) -> None:
        """Drop the recorder of the last :meth:`begin`, and with it its hold on the workers' segment."""
        self._recorder = None

    def collect(self, run: _Rollout, t: int) -> list[int]:
        """Wait for the step :meth:`post` posted and store it as step ``t``; the envs whose episode ended.

        The rows are stored natively (:class:`~pycollect._core.StepRecorder`): the returned
        observations (the final one where an episode ended), rewards and flags, what the policy
        reads next (the reset observation where one ended, which the workers' groups reset in the
        same step) and, for an ended env, frame ``t + 1`` of ``obs``. Here only what is rare:
        a worker restart, the kept info entries.
        """
        backend, recorder = self.backend, self._recorder
        assert recorder is not None, "collect() without begin()"
        cut, parts = self._posted_cut, []
        if len(cut) < self._workers:
            parts = backend.step_wait()
            cut = sorted({*cut, *backend.last_restarted})
        ended = recorder.record(t)
        for w in cut:  # the group's envs of these workers were cut (truncated) at this step
            generation = backend.generation(w)
            self._seen[w] = generation
            self.cuts.append((t, w, generation))
            self.actions._draws.restart(w, generation)
            for flags in run.own_flags:  # the env's own (per-agent) flags are cut too
                flags[w * self._kg : (w + 1) * self._kg, t] = True
        if run.info_out:
            done = np.zeros(self._count, bool)
            done[ended] = True
            self._store_infos(run, t, self._infos(parts, done))
        return ended

    def end_step(self, run: _Rollout, t: int, ended: list[int]) -> None:
        """After step ``t``: ``is_init`` and the recurrent state where an episode starts, for all envs at once.

        The rest of the runner's per-env resets is not needed here: :meth:`collect` stored the
        new episodes' observations (the workers' groups applied the trajectory limit and reset
        the ended envs in the same step, checking what they returned), and trajectory ids are
        the engine's (:class:`TrajectoryIds`).
        """
        if run.is_init is not None:
            run.is_init[...] = False
        if ended:
            for key, array in self._carried.items():  # is_init True, a recurrent state zero
                array[ended] = key == IS_INIT

    def _infos(self, parts: Sequence[tuple[int, Any]], ended: np.ndarray) -> dict[int, dict[str, Any]]:
        """The group's envs' info entries of this step (their final ones where an episode ended).

        Each env's entries are what its info fields hold and what of its info fit none (the
        material); read right after the step's answers, as the rows are.
        """
        fields, k, kg, start = (
            self.backend.info,
            self.backend.num_envs // self._workers,
            self._kg,
            self.envs_range.start,
        )
        entries: dict[int, dict[str, Any]] = {}
        if fields.fields:
            for i, row in enumerate(self.rows.tolist()):
                if entry := fields.env_info(row, final=bool(ended[i])):
                    entries[i] = entry
        for offset, material in parts:
            w = offset // k
            for j, info, final_info in material:
                if j in self.envs_range:
                    i = w * kg + (j - start)
                    entries.setdefault(i, {}).update((final_info or {}) if ended[i] else info)
        return entries

    def _store_infos(self, run: _Rollout, t: int, entries: Mapping[int, Mapping[str, Any]]) -> None:
        """The kept info entries of step ``t``, else zeros."""
        for _, array, _, default in run.info_out:
            array[:, t] = default
        for i, entry in entries.items():
            for n, array, name, _ in run.info_out:
                if name in entry:
                    array[i, t] = run.checks.info(n, entry[name], i, t + 1)


class TrajectoryIds:
    """Trajectory ids per worker, handed out as that worker's own runner would hand them out.

    Worker ``w`` of the ``workers`` engine numbers its trajectories from ``traj_id_start(w, N,
    generation)`` with stride ``N``: its ``K`` envs in order at a reset of every env, then, step
    after step, each env whose episode ended, in env order. The central engine's groups step a
    worker's envs in turns, so the ids are handed out here, after a round, from the round's done
    flags; a restart (a new generation, recorded by the runners) starts that worker's count again.

    Args:
        num_workers: ``N``.
        envs_per_worker: ``K``.
    """

    def __init__(self, num_workers: int, envs_per_worker: int) -> None:
        self._w, self._k = num_workers, envs_per_worker
        self._next = [traj_id_start(w, num_workers, 1) for w in range(num_workers)]
        self._generations = [1] * num_workers
        self._current = np.zeros((num_workers, envs_per_worker), np.int64)

    def start(self) -> None:
        """Every env starts a trajectory (every env was reset), in env order within each worker."""
        for w in range(self._w):
            self._current[w] = self._next[w] + self._w * np.arange(self._k)
            self._next[w] += self._w * self._k

    def write(self, traj_ids: np.ndarray, done: np.ndarray, cuts: Iterable[tuple[int, int, int]]) -> None:
        """Write a round's ``[N * K, T]`` trajectory ids from its ``[N * K, T, ...]`` done flags.

        ``cuts``: ``(step, worker, generation)`` where a worker restart cut envs of a group.
        """
        k, steps = self._k, traj_ids.shape[1]
        restarted = {(w, t): generation for t, w, generation in cuts}
        for w in range(self._w):
            block = traj_ids[w * k : (w + 1) * k]
            block[...] = self._current[w][:, None]
            ended = done[w * k : (w + 1) * k].reshape(k, steps, -1).any(-1)
            for t, j in zip(*np.nonzero(ended.T), strict=True):  # step after step, envs in order
                generation = restarted.get((w, int(t)))
                if generation is not None and generation > self._generations[w]:
                    self._generations[w] = generation
                    self._next[w] = traj_id_start(w, self._w, generation)
                self._current[w, j] = self._next[w]
                self._next[w] += self._w
                block[j, t + 1 :] = self._current[w, j]

    def state(self) -> dict[str, Any]:
        """The counters, to continue the numbering after :meth:`load_state`."""
        return {"next": list(self._next), "generations": list(self._generations), "current": self._current.tolist()}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state` (one of another shape is ignored)."""
        current = np.asarray(state.get("current", ()), np.int64)
        if current.shape != self._current.shape:
            return
        self._next = [int(n) for n in state["next"]]
        self._generations = [int(g) for g in state["generations"]]
        self._current = current


def _info_names(config: CollectorConfig, plan: RolloutPlan) -> tuple[str, ...]:
    """The info entries the step workers send: ``info_keys`` and the env's own next fields (per-agent rewards)."""
    own = tuple(entry.path[0] for entry in plan.specs.next_fields if entry.path)
    return (*own, *config.info_keys)


class CentralEngine(Engine):
    """Worker processes step the envs; this process runs the policy once per step for each group of envs.

    Build it with :meth:`start`, which checks everything before any worker starts.

    Each worker's envs are split into ``groups`` groups (two by default), each spanning every
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
        self._observations = observation_pairs(spec.key for spec in plan.specs.observation)
        self._draws = draws
        self._ids = TrajectoryIds(self.num_workers, self.envs_per_worker)
        self._rounds = 0
        self._reset_needed = True  # the envs are reset before the first round (and after a broken one)
        self._pending: list[TensorDict] = []  # async: the rollouts of the last round not yet handed out
        self._closed = False
        self._final: Supervision | None = None

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
            groups: How many groups each worker's envs are split into (at most
                ``envs_per_worker``; as evenly as they go, in order): each group spans every
                worker, and the groups take turns with the policy.
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
        split = env_groups(k, groups)
        forkserver.start()  # its imports overlap with the probe env and the policy's check
        device = config.requested_policy_device or parameters_device(policy)
        streams = TorchStreams(device) if policy is not None and seed is not None else None
        stream_of: list[int] = []
        probe = env_source.make()
        try:
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
            backend.restart_seeds = functools.partial(_restart_seeds, seed, k)
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
        return cls(plans[0], runners, backend, config, policy, device_copy, draws, threads, streams)

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
            runner.read_observations()
            runner.reset()
        self._ids.start()

    def _round(self, policy_version: int) -> dict[Key, np.ndarray]:
        """Step every worker's envs ``T`` times into fresh ``[N*K, T]`` arrays, the groups at the same time."""
        config = self.config
        self._copier.settle()  # the previous batch's staging memory may be reused from here
        arrays = allocate(self.plan.fields, self.num_envs, self.steps, self._memory)
        if self._reset_needed or (config.reset_at_each_iter and self._rounds > 0):
            # After an interrupted round (Ctrl-C, an error) the workers may have stepped once
            # more than the runners recorded: every env starts a new trajectory from a reset.
            self._reset()
            self._reset_needed = False
        random = not self.has_policy or self._rounds * self.num_envs * self.steps < config.init_random_frames
        # One group writes straight into the batch; several write into arrays of their own,
        # interleaved into the batch afterwards (a group's rows are envs of every worker).
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
        # call sets and restores: set here for the round.
        with set_interaction_type(InteractionType(config.exploration_type)), keep_trainers:
            try:
                if threads is not None:
                    torch.set_num_threads(threads)
                self._step_groups(outs, random, policy_version)
            except BaseException:
                self._reset_needed = True
                raise
            finally:
                if threads is not None:
                    torch.set_num_threads(trainers_threads)
        if not single:
            self._interleave(arrays, outs)
        self._ids.write(arrays[TRAJ_IDS], arrays[NEXT_DONE], [cut for r in self.runners for cut in r.cuts])
        for key, next_key in self._observations:
            fill_observations(arrays[key], arrays[next_key], arrays[NEXT_DONE])
        self._rounds += 1
        return arrays

    def _step_groups(self, outs: Sequence[Mapping[Key, np.ndarray]], random: bool, policy_version: int) -> None:
        """Step every group ``T`` times into its ``outs``, in this thread, one group's step in flight at a time.

        Steps are posted group after group, step after step. With several groups the policy
        call for the next group's step runs while the workers step the one posted before it,
        whose answers are then collected; with one, the policy waits for them. An error is
        raised as it comes, with a step possibly still in flight (the next post drains it).
        """
        runners = self.runners
        overlap = len(runners) > 1
        in_flight: tuple[CentralRunner, _Rollout, int] | None = None
        try:
            runs = [runner.begin(out, random, policy_version) for runner, out in zip(runners, outs, strict=True)]
            for t in range(self.steps):
                for runner, run in zip(runners, runs, strict=True):
                    if in_flight is not None and not overlap:
                        _collect(*in_flight)
                    actions = run.act(t)  # with several groups: while the workers step the one in flight
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
        """Each group's ``[N * K_g, T]`` rows into the ``[N * K, T]`` batch (env ``j`` of worker ``w``: ``w*K + j``)."""
        n, k = self.num_workers, self.envs_per_worker
        for key, array in arrays.items():
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

    def supervision(self) -> Supervision:
        """Each worker's stats and the recent supervision events."""
        if self._final is not None:
            return self._final
        return Supervision(self.backend.workers(), self.backend.events())

    def state(self) -> dict[str, Any]:
        """Trajectory numbering, to continue it after :meth:`load_state`."""
        return {"central": {"traj_ids": self._ids.state()}}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state` (one of another layout is ignored)."""
        saved = state.get("central")
        if isinstance(saved, Mapping) and isinstance(saved.get("traj_ids"), Mapping):
            self._ids.load_state(saved["traj_ids"])

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


def env_groups(envs_per_worker: int, groups: int) -> list[range]:
    """A worker's ``envs_per_worker`` envs split into ``min(groups, envs_per_worker)`` consecutive ranges, evenly."""
    count = max(1, min(groups, envs_per_worker))
    bounds = [round(g * envs_per_worker / count) for g in range(count + 1)]
    return [range(bounds[g], bounds[g + 1]) for g in range(count)]


def _free_cpus(num_workers: int) -> int:
    """A CPU policy's threads per call: the CPUs this process may use less the workers'."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cpus - num_workers)


def _collect(runner: CentralRunner, run: _Rollout, t: int) -> None:
    """Collect the step ``t`` that ``runner`` posted, and end it (trajectory limit, resets)."""
    runner.end_step(run, t, runner.collect(run, t))


def _restart_seeds(seed: int | None, k: int, worker: int, generation: int) -> list[int]:
    """The seeds of restarted worker ``worker``'s envs: what the ``workers`` engine's would get."""
    return env_seeds(seed, k, worker, generation)
