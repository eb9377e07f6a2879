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

Every batch is one round: all workers stepped ``T`` times together (post to every worker,
wait for every answer), ``[N*K, T]`` ordered by worker. In async mode (``sync=False``) the
round is handed out one worker's ``[K, T]`` rollout per batch, in worker order, and the next
round starts only when all of them have been taken: frames carry the policy version that
chose them, which may be older than the collector's by then. The seam for overlapping the
policy with the envs' steps (workers in groups, double-buffered) is :meth:`CentralRunner._step`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from tensordict import TensorDict

from pycollect._batch.device import DeviceCopier, staging_memory
from pycollect._batch.tensordict import allocate, to_tensordict
from pycollect._engines.inprocess import on_policy_device
from pycollect._engines.resources import BATCHES_HELD, batch_bytes, check_fits, check_fits_before_env
from pycollect._engines.workers import forkserver
from pycollect._engines.workers.step_backend import WorkerStepBackend
from pycollect._keys import NEXT_DONE, Key
from pycollect._rollout.actions import ActionSource, RandomActions
from pycollect._rollout.observations import fill_observations, observation_pairs
from pycollect._rollout.runner import EnvRunner
from pycollect._rollout.seeding import action_rng, env_seeds, traj_id_start
from pycollect.config import CollectorConfig
from pycollect.engines import Engine, RolloutPlan, Supervision, close_within, plan_rollout
from pycollect.envs.source import EnvSource
from pycollect.exceptions import CollectorClosedError, ConfigError

if TYPE_CHECKING:
    from pycollect._rollout.runner import _Rollout
    from pycollect.envs.specs import EnvSpecs, Field, FieldSpec

__all__ = ["CentralActions", "CentralEngine", "CentralRunner"]


class CentralActions:
    """The actions of ``N * K`` envs: one policy call for all, random ones drawn per worker.

    Args:
        policy: The policy's action source for ``N * K`` envs (``None``: random actions only).
        action: The action field.
        envs_per_worker: ``K``.
        num_workers: ``N``.
        seed: The collector's seed.
    """

    def __init__(
        self, policy: ActionSource | None, action: FieldSpec, envs_per_worker: int, num_workers: int, seed: int | None
    ) -> None:
        self.policy = policy
        self.outputs: tuple[Field, ...] = policy.outputs if policy is not None else ()
        self.carried: tuple[Field, ...] = policy.carried if policy is not None else ()
        self._action, self._k, self._seed = action, envs_per_worker, seed
        self._random = [RandomActions(action, envs_per_worker, action_rng(seed, w)) for w in range(num_workers)]

    def restart(self, worker: int, generation: int) -> None:
        """A restarted worker draws from its new generation's stream, as its own rollout loop would."""
        self._random[worker] = RandomActions(self._action, self._k, action_rng(self._seed, worker, generation))

    def act(
        self, observation: Mapping[Key, np.ndarray], carried: Mapping[Key, np.ndarray] | None = None
    ) -> tuple[np.ndarray, Mapping[Key, Any]]:
        """The policy's actions for every env (random ones without a policy)."""
        if self.policy is None:
            return self.random_actions(1)[0], {}
        return self.policy.act(observation, carried)

    def random_actions(self, steps: int) -> np.ndarray:
        """``[steps, N * K, ...]``: each worker's stream of ``[steps, K, ...]``, in worker order."""
        return np.concatenate([source.random_actions(steps) for source in self._random], axis=1)


class CentralRunner(EnvRunner):
    """:class:`EnvRunner` over the ``N * K`` envs of a worker step backend (``SAME_STEP`` mode).

    Everything but where the envs are is the base class's: the policy call, carried state,
    trajectory bookkeeping, storing, the reward range check. Here the envs' steps come back
    through shared memory, already checked by the workers' :class:`~pycollect._steps.group.EnvGroup`
    (which also truncates at ``max_frames_per_traj`` and resets ended envs in the same step),
    and trajectory ids are handed out per worker as in the ``workers`` engine.

    Args:
        backend: The workers (``N * K`` envs).
        specs: The env's fields.
        actions: Where actions come from.
        config: The collector's settings (``seed``, ``num_workers``, ``envs_per_worker``).
        env_name: The env's name, for messages.
        info: The kept info entries, as fields.

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
    ) -> None:
        self.backend = backend
        self._count = backend.num_envs
        self._workers, self._k, self._seed = config.num_workers, config.envs_per_worker, config.seed
        self.actions = actions
        super().__init__([], specs, actions, None, env_name=env_name, info=info)
        self._next_ids = [traj_id_start(w, self._workers, 1) for w in range(self._workers)]
        leaves = {leaf.field.key: n for n, leaf in enumerate(backend.observation.leaves)}
        self._leaves: list[int] = []
        for spec in specs.observation:
            n = leaves.get(spec.key, -1)
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
        """Each worker's next trajectory id."""
        return {"next_traj_ids": list(self._next_ids)}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state` (a state of another engine or worker count is ignored)."""
        ids = state.get("next_traj_ids")
        if ids is not None and len(ids) == self._workers:
            self._next_ids = [int(i) for i in ids]

    def close(self) -> None:
        """Nothing here: the engine closes the backend."""

    def _reset_envs(self, seeds: Sequence[int] | None) -> Iterable[tuple[int, Any]]:
        """Reset every env; worker ``w``'s with ``env_seeds(seed, K, w)`` the first time."""
        if not self._has_reset:
            first: list[int | None] = [s for w in range(self._workers) for s in env_seeds(self._seed, self._k, w)]
        else:
            first = [None] * self._count
        self.backend.reset(first, None, None)
        return ((i, self._observation(i)) for i in range(self._count))

    def _reset_env(self, i: int) -> Any:
        """The observation env ``i`` was reset to in its worker when its episode ended (``SAME_STEP``)."""
        return self._observation(i)

    def _observation(self, i: int) -> Any:
        return self.backend.observation.single(self.backend.observations, i)

    def _step(self, run: _Rollout, t: int, actions: np.ndarray) -> list[int]:
        """Post the actions to every worker, wait for every answer, store step ``t``.

        The seam for overlapping the policy with the envs' steps: the backend's ``step_async``
        and ``step_wait`` here would become a group's send and another group's receive.
        """
        backend = self.backend
        backend.step_async([actions])
        parts = backend.step_wait()
        for w in backend.last_restarted:  # its envs' episodes were cut (truncated) at this step
            generation = backend.generation(w)
            self._next_ids[w] = traj_id_start(w, self._workers, generation)
            self.actions.restart(w, generation)
        ended = np.flatnonzero(backend.terminated | backend.truncated)
        final = backend.final_observations
        assert final is not None  # SAME_STEP mode
        for obs_out, n in zip(run.obs_out, self._leaves, strict=True):
            obs_out.next_obs[:, t] = backend.observations[n]
            if len(ended):
                obs_out.next_obs[ended, t] = final[n][ended]  # the final observation, not the reset one
        run.rewards[t] = backend.rewards
        run.terminated[t] = backend.terminated
        run.truncated[t] = backend.truncated
        if run.info_out:
            self._store_infos(run, t, parts)
        return ended.tolist()

    def _store_infos(self, run: _Rollout, t: int, parts: Sequence[tuple[int, Any]]) -> None:
        """The kept info entries of step ``t``: the step's info (the final one where an episode ended), else zeros."""
        for _, array, _, default in run.info_out:
            array[:, t] = default
        for offset, material in parts:
            for j, info, final_info in material:
                entry = final_info if final_info is not None else info
                i = offset + j
                for n, array, name, _ in run.info_out:
                    if name in entry:
                        array[i, t] = run.checks.info(n, entry[name], i, t + 1)

    def _start_trajectory(self, i: int) -> None:
        w = i // self._k
        self._traj_ids[i] = self._next_ids[w]
        self._next_ids[w] += self._workers
        self._started[i] = self._clock


class CentralEngine(Engine):
    """Worker processes step the envs; this process runs the policy once per step for all of them.

    Build it with :meth:`start`, which checks everything before any worker starts.

    Args:
        plan: What every rollout holds.
        runner: The stepping loop over the workers' envs.
        backend: The workers.
        config: The collector's settings.
        policy: The policy (``None``: random actions).
        device_copy: The weights module of the policy's copy on ``policy_device`` (``None``:
            the user's policy is called as it is).
    """

    def __init__(
        self,
        plan: RolloutPlan,
        runner: CentralRunner,
        backend: WorkerStepBackend,
        config: CollectorConfig,
        policy: Any,
        device_copy: torch.nn.Module | None,
    ) -> None:
        self.plan = plan
        self.runner = runner
        self.backend = backend
        self.config = config
        self.has_policy = policy is not None
        self.device_copy = device_copy
        self.num_workers, self.envs_per_worker = config.num_workers, config.envs_per_worker
        self.steps = config.steps_per_batch
        self.storing_device = config.storing_device or config.device or torch.device("cpu")
        self._memory = staging_memory(torch.device(self.storing_device))
        self._copier = DeviceCopier()
        self._observations = observation_pairs(spec.key for spec in plan.specs.observation)
        self._rounds = 0
        self._broken = False  # a round ended by an exception: the envs' state is not the runner's
        self._pending: list[TensorDict] = []  # async: the rollouts of the last round not yet handed out
        self._closed = False
        self._final: Supervision | None = None

    @classmethod
    def start(
        cls, config: CollectorConfig, env_source: EnvSource, policy: Any, weights_module: torch.nn.Module | None
    ) -> CentralEngine:
        """Check the env, the policy (on a batch of every worker's envs) and the memory; then start the workers.

        Raises:
            ConfigError: Anything that would fail later, named, before any worker starts
                (:class:`~pycollect.PolicyError` for a policy that cannot act for ``N * K`` envs).
        """
        rows = config.num_workers * config.envs_per_worker
        steps = config.steps_per_batch
        what = f"the batches of engine='central' ({config.num_workers} workers)"
        check_fits_before_env(config, what, BATCHES_HELD * rows * steps)
        policy, device_copy = on_policy_device(config, policy, weights_module)
        forkserver.start()  # its imports overlap with the probe env and the policy's check
        probe = env_source.make()
        try:
            plan = plan_rollout(config, env_source, probe, policy, num_envs=rows, policy_here=True)
        finally:
            close_within(probe, env_source, config.supervision.shutdown_grace_s, what="probe env")
        check_fits(what, BATCHES_HELD * batch_bytes(plan.fields, rows, steps), config)
        backend = WorkerStepBackend.start(
            env_source,
            rows,
            config.num_workers,
            AutoresetMode.SAME_STEP,
            config.supervision,
            info_keys=config.info_keys,
            max_episode_steps=config.max_frames_per_traj,
        )
        try:
            k, seed = config.envs_per_worker, config.seed
            backend.restart_seeds = lambda worker, generation: env_seeds(seed, k, worker, generation)
            actions = CentralActions(
                plan.actions if policy is not None else None, plan.specs.action, k, config.num_workers, seed
            )
            runner = CentralRunner(backend, plan.specs, actions, config, env_source.describe(), plan.info)
        except BaseException:
            backend.close()
            raise
        return cls(plan, runner, backend, config, policy, device_copy)

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
        """Step every worker's envs ``T`` times into fresh ``[N*K, T]`` arrays."""
        config = self.config
        self._copier.settle()  # the previous batch's staging memory may be reused from here
        arrays = allocate(self.plan.fields, self.runner.num_envs, self.steps, self._memory)
        if self._broken or (config.reset_at_each_iter and self._rounds > 0):
            # After an interrupted round (Ctrl-C, an error) the workers may have stepped once
            # more than the runner recorded: every env starts a new trajectory from a reset.
            self.runner.reset()
            self._broken = False
        frames_per_round = self.runner.num_envs * self.steps
        random = not self.has_policy or self._rounds * frames_per_round < config.init_random_frames
        try:
            self.runner.rollout(arrays, random_actions=random, policy_version=policy_version)
        except BaseException:
            self._broken = True
            raise
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
        """Each worker's stats and the recent supervision events."""
        if self._final is not None:
            return self._final
        return Supervision(self.backend.workers(), self.backend.events())

    def state(self) -> dict[str, Any]:
        """Trajectory numbering, to continue it after :meth:`load_state`."""
        return {"central": self.runner.state()}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state`."""
        if "central" in state:
            self.runner.load_state(state["central"])

    def close(self) -> None:
        """Stop the workers (they close their envs) and release the batch memory (once)."""
        if self._closed:
            return
        self._closed = True
        self._pending = []
        self._copier.settle()
        self._final = Supervision(self.backend.workers(), self.backend.events())
        self.backend.close()
        self._final = Supervision(self.backend.workers(), self._final.events)
        self._memory = staging_memory(torch.device("cpu"))
