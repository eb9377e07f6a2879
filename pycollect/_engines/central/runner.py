"""One group's stepping loop: :class:`CentralRunner`, the rollout loop over envs of every worker.

:class:`CentralActions` chooses the group's actions (one policy call for all of them, or the
workers' random draws); :class:`CentralRunner` posts a step of the group's envs to every worker
and collects it, storing the results natively (``_core.StepRecorder``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pycollect._keys import IS_INIT, NEXT_OBS_PREFIX, Key
from pycollect._native import _core
from pycollect._rollout.actions import ActionSource, step_of
from pycollect._rollout.runner import PolicyRunner
from pycollect._rollout.streams import TorchStreams, WorkerDraws
from pycollect._step_backends.workers import WorkerStepBackend
from pycollect._steps.group import material_entries
from pycollect.config import CollectorConfig
from pycollect.exceptions import ConfigError

if TYPE_CHECKING:
    from pycollect._rollout.runner import _Rollout
    from pycollect.envs.specs import EnvSpecs, Field, FieldSpec

__all__ = ["CentralActions", "CentralRunner"]


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


class CentralRunner(PolicyRunner):
    """A runner of one group's envs: envs ``envs`` of every worker of the step backend.

    The policy call, carried state and the reward range check are the base class's, as a
    collector's :class:`~pycollect._rollout.runner.EnvRunner` has them. Here a step writes the
    group's actions into its rows of the backend's action arrays and posts a STEP of those envs
    to every worker (:meth:`post`), then waits for the answers and stores its rows natively
    (:meth:`collect`); the engine runs other groups' policy calls in between. The
    envs' results were checked by the workers' :class:`~pycollect._steps.group.EnvGroup` (which
    also truncates at ``max_frames_per_traj`` and resets ended envs in the same step, so
    :meth:`end_step` only carries ``is_init`` and recurrent state). The group's env ``i`` is
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
        super().__init__(self._count, specs, actions, env_name=env_name, info=info)
        # The group's rows in the backend's [N * K] arrays (every row, in order, for one group).
        self._every_env = self._kg == k
        self.rows = np.array([w * k + j for w in range(workers) for j in envs], np.int64)
        self._seen = [1] * workers  # the generation of each worker the group's envs last stepped in
        self.cuts: list[tuple[int, int, int]] = []  # (step, worker, generation) of this round's restarts
        self._posted_cut: list[int] = []  # the workers the posted step left out (restarted meanwhile)
        self._recorder: _core.StepRecorder | None = None  # the native recorder of the rollout begun last
        # Each env's steps since its episode began, where the trajectory limit cuts an env that
        # keeps done flags of its own (a multi-agent env's per-agent flags): the workers' groups
        # cut the episode, and the trainer marks those flags, as a collector's runner does.
        self._limit = config.max_frames_per_traj if self._own_flags else None
        self._lengths = np.zeros(self._count, np.int64)
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
    def seen(self) -> list[int]:
        """The generation of each worker the group's envs last stepped in (a later one: a restart not seen yet)."""
        return list(self._seen)

    def snapshot(self) -> dict[str, Any]:
        """What the group's next step depends on, between rounds: :meth:`policy_state` and each episode's length."""
        return {**self.policy_state(), "episode_lengths": self._lengths.tolist()}

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Continue from :meth:`snapshot` (the workers' envs restored too, generations as they are now)."""
        self.load_policy_state(snapshot)
        self._lengths[...] = snapshot["episode_lengths"]
        self._seen = [self.backend.generation(w) for w in range(self._workers)]
        self._has_reset = True  # the envs go on from their restored states, not from a reset

    def close(self) -> None:
        """Let go of any view of the workers' segment (the engine closes the backend)."""
        self._recorder = None

    def reset(self) -> None:
        """Take the group's rows of the observations, checked, after the engine reset the envs; start their episodes."""
        rows = [array.copy() if self._every_env else array[self.rows] for array in self.backend.observations]
        single = self.backend.observation.single
        for i in range(self._count):
            self._store_obs(i, single(rows, i))
        self._seen = [self.backend.generation(w) for w in range(self._workers)]
        self._has_reset = True
        self._start_episodes()
        self._lengths[...] = 0

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

    def begin(
        self,
        out: Mapping[Key, np.ndarray],
        random_actions: bool,
        policy_version: int,
        batch: Mapping[Key, np.ndarray] | None = None,
    ) -> _Rollout:
        """Bind a rollout to ``out`` and the native recorder of its steps to the workers' result rows.

        ``batch``: the ``[N * K, T]`` batch whose rows ``rows`` the group's envs are, where
        ``out`` holds the group's own rows (``None``: ``out`` is the batch, the group every
        env). The observations go straight into the batch's rows then: they are the large
        fields, and copying them in after the round would keep the workers waiting. The
        recorder holds the buffers until :meth:`release` (or the next ``begin``).
        """
        run = super().begin(out, random_actions, policy_version)
        backend, final = self.backend, self.backend.final_observations
        assert final is not None  # SAME_STEP mode
        rows = self.rows.tolist()
        frames = [(o.next_obs, o.obs) for o in run.obs_out]
        placed: dict[str, Any] = {}
        if batch is not None:
            frames = [(batch[(*NEXT_OBS_PREFIX, *key)], batch[key]) for key, _ in self._paths]
            for (_, first), o in zip(frames, run.obs_out, strict=True):
                first[self.rows, 0] = o.current  # step 0: what the policy reads first
            placed = {"out_rows": rows, "out_envs": backend.num_envs}
        self._recorder = _core.StepRecorder(
            rows,
            backend.num_envs,
            run.steps,
            [
                (backend.observations[n], final[n], next_obs, obs, o.current, o.current[0].nbytes)
                for n, o, (next_obs, obs) in zip(self._leaves, run.obs_out, frames, strict=True)
            ],
            (backend.rewards, backend.terminated, backend.truncated),
            (run.rewards, run.terminated, run.truncated),
            **placed,
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
        if self._limit is not None:
            self._count_episode_steps(run, t, ended, self._limit)
        for w in cut:  # the group's envs of these workers were cut (truncated) at this step
            generation = backend.generation(w)
            self._seen[w] = generation
            self.cuts.append((t, w, generation))
            self.actions._draws.restart(w, generation)
            envs = slice(w * self._kg, (w + 1) * self._kg)
            run.cut_own_flags(envs, t)  # the env's own (per-agent) flags are cut too
            self._lengths[envs] = 0  # a new generation's envs start new episodes
        if run.info_out:
            done = np.zeros(self._count, bool)
            done[ended] = True
            self._store_infos(run, t, self._infos(parts, done))
        return ended

    def _count_episode_steps(self, run: _Rollout, t: int, ended: list[int], limit: int) -> None:
        """Count step ``t`` in each episode; the env's own done flags where the trajectory limit cut one.

        The workers' groups cut it (``max_episode_steps``) and reset the env; they cannot know
        where an env keeps flags of its own, so those are marked here, for the envs that ended
        after ``max_frames_per_traj`` steps, as a collector's runner marks them.
        """
        lengths = self._lengths
        lengths += 1
        if ended:
            self._mark_limit(run, t, ended, lengths, limit)
            lengths[ended] = 0

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
            for j, info, final_info in material_entries(material):
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
