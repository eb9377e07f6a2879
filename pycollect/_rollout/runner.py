"""Stepping a group of environments and writing their transitions into rollout arrays.

:class:`EnvRunner` is the one stepping loop of pycollect: the in-process collector drives it
directly, and each worker process drives its own with arrays that live in shared memory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pycollect import _core
from pycollect._keys import (
    ACTION,
    IS_INIT,
    NEXT_DONE,
    NEXT_OBS_PREFIX,
    NEXT_TERMINATED,
    NEXT_TRUNCATED,
    POLICY_VERSION,
    REWARD,
    TRAJ_IDS,
    Key,
)
from pycollect._rollout.actions import ActionSource
from pycollect._rollout.checks import OutputChecks
from pycollect.envs.backend import GymLikeEnv
from pycollect.envs.specs import EnvSpecs, FieldSpec

__all__ = ["EnvRunner"]


class EnvRunner:
    """Steps ``K`` environments together and writes ``[K, T]`` rollouts.

    Environments reset themselves after ``terminated`` or ``truncated``: the transition keeps
    the terminal observation under ``("next", "observation")`` and the next step starts from
    the reset one, as in TorchRL.

    Args:
        envs: The environments, already built.
        specs: Their fields.
        policy: Chooses actions.
        seeds: One seed per environment for its first reset, or ``None`` for fresh entropy.
        max_frames_per_traj: Truncate trajectories after this many steps (``None``: never).
        traj_id_start: Trajectory id of the first environment's first trajectory.
        traj_id_stride: Distance between consecutive trajectory ids this runner hands out, so
            that runners in different processes never hand out the same id.
        env_name: The env's name, for error messages.
        worker: The worker this runner steps in (``None``: the trainer), for error messages.
        info: Entries of the env's step ``info`` to keep (``info_keys``), stored at their keys
            (``("next", name)``); a step whose info lacks one stores zeros.

    Raises:
        EnvOutputError: (from :meth:`reset` and :meth:`rollout`) an environment returned
            something its spaces do not allow (see :mod:`pycollect._rollout.checks`).
    """

    def __init__(
        self,
        envs: Sequence[GymLikeEnv],
        specs: EnvSpecs,
        policy: ActionSource,
        seeds: Sequence[int] | None,
        *,
        max_frames_per_traj: int | None = None,
        traj_id_start: int = 0,
        traj_id_stride: int = 1,
        env_name: str = "env",
        worker: int | None = None,
        info: tuple[FieldSpec, ...] = (),
    ) -> None:
        self.envs = list(envs)
        self.specs = specs
        self.policy = policy
        self.max_frames_per_traj = max_frames_per_traj
        self._seeds = list(seeds) if seeds is not None else None
        self._traj_stride = traj_id_stride
        self._next_traj_id = traj_id_start
        num_envs = len(self.envs)
        self._paths = specs.observation_paths()
        self._obs = {spec.key: np.zeros((num_envs, *spec.shape), spec.dtype) for spec in specs.observation}
        self._traj_ids = np.zeros(num_envs, np.int64)
        self._steps = [0] * num_envs
        self._has_reset = False
        self._checks = OutputChecks(specs.observation, env_name, worker, info)
        self._info = [(entry.key, entry.key[-1], np.zeros(entry.shape, entry.dtype)) for entry in info]
        # What the policy gets back on the next step: is_init, a recurrent state (zeros at a start).
        self._carried = {c.key: np.zeros((num_envs, *c.shape), c.dtype) for c in policy.carried}
        # What an observation leaf must be to be stored without a check: (field index, dtype, shape).
        self._expected = [(n, spec.dtype, spec.shape) for n, spec in enumerate(specs.observation)]

    @property
    def num_envs(self) -> int:
        """How many environments this runner steps."""
        return len(self.envs)

    def state(self) -> dict[str, Any]:
        """Counters needed to resume trajectory numbering after :meth:`load_state`."""
        return {"next_traj_id": self._next_traj_id}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore counters saved by :meth:`state`."""
        self._next_traj_id = int(state["next_traj_id"])

    def reset(self) -> None:
        """Reset every environment and start a new trajectory in each.

        The first reset uses the per-environment seeds; later ones continue each
        environment's own random stream.
        """
        seeds = self._seeds if not self._has_reset else None
        for i, env in enumerate(self.envs):
            obs, _ = env.reset(seed=None if seeds is None else int(seeds[i]))
            self._store_obs(i, obs)
            self._start_trajectory(i)
        self._has_reset = True
        for key, array in self._carried.items():
            array[...] = key == IS_INIT  # every env starts an episode: is_init True, states zero

    def rollout(
        self,
        out: Mapping[Key, np.ndarray],
        random_actions: bool = False,
        on_step: Callable[[], int | None] | None = None,
        policy_version: int = 0,
    ) -> int:
        """Step every environment ``T`` times, writing into ``out``.

        Args:
            out: Arrays of shape ``[K, T, ...]`` for every batch field (see
                :func:`pycollect._rollout.fields.batch_fields`); ``T`` is read from them. In a
                worker process they are views of a shared-memory slot. Every element is
                written except those of the observation keys that
                :func:`~pycollect._rollout.observations.fill_observations` fills in.
            random_actions: Sample actions uniformly instead of calling the policy.
            on_step: Called before every step (a worker's heartbeat); if it returns a version,
                new weights were applied and the frames from this step on record it.
            policy_version: The version of the policy weights the rollout starts with.

        Returns:
            The version of the weights in use at the end of the rollout.
        """
        if not self._has_reset:
            self.reset()
        envs, obs, num_envs = self.envs, self._obs, len(self.envs)
        steps = next(iter(out.values())).shape[1]
        obs_out = [
            (out[key], out[(*NEXT_OBS_PREFIX, *key)], obs[key], path, *expected)
            for (key, path), expected in zip(self._paths, self._expected, strict=True)
        ]
        checks, ndarray = self._checks, np.ndarray
        # Each observation is written once, from the env into ("next", obs)[t]. Of obs, only
        # step 0 and the reset observations after an episode's end are written here; the rest
        # is ("next", obs) one step later, filled in by whoever takes the rollout (see
        # pycollect._rollout.observations). The runner's current observation, which the policy
        # reads and the next rollout starts from, is kept in a small buffer of its own.
        for obs_array, _, current, *_ in obs_out:
            obs_array[:, 0] = current
        track_current = not random_actions  # without a policy call it is needed only at the end
        actions_out, reward_out, traj_out = out[ACTION], out[REWARD], out[TRAJ_IDS]
        if POLICY_VERSION in out:
            out[POLICY_VERSION][...] = policy_version
        term_out, trunc_out, done_out = out[NEXT_TERMINATED], out[NEXT_TRUNCATED], out[NEXT_DONE]
        extras_out = [(key, out[key]) for key in (o.key for o in self.policy.outputs) if key in out]
        carried = self._carried
        carried_out = [(key, out[key], array) for key, array in carried.items()]
        # A recurrent state comes back from ("next", key) to key; is_init is set by episode ends.
        state_in = [(array, (*NEXT_OBS_PREFIX, *key)) for key, array in carried.items() if key != IS_INIT]
        is_init = carried.get(IS_INIT)
        info_out = [(n, out[key], name, default) for n, (key, name, default) in enumerate(self._info)]
        rollout_actions = None
        if random_actions:  # drawn for the whole rollout at once; no policy call, so no extra outputs
            rollout_actions = self.policy.random_actions(steps)
            actions_out[...] = np.swapaxes(rollout_actions, 0, 1)
            for _, array in extras_out:
                array[...] = 0  # slots are reused
        # Trajectory ids change only where an episode starts: the rollout is filled with the
        # current ones here, and each reset below rewrites the rest of its env's row.
        traj_out[...] = self._traj_ids[:, None]
        limit = self.max_frames_per_traj
        step_counts = self._steps
        # Rewards and flags are gathered step-major, [T, K] (float64, so that a reward too
        # large for the float32 field is caught), and moved into the [K, T, 1] fields once.
        rewards = np.empty((steps, num_envs), np.float64)
        terminated = np.empty((steps, num_envs), bool)
        truncated = np.empty((steps, num_envs), bool)
        next_raw: list[Any] = [None] * num_envs
        env_steps, env_range = [env.step for env in envs], range(num_envs)
        stepper = self._stepper(env_steps, obs_out, (rewards, terminated, truncated), bool(info_out))
        pending: Sequence[int] = env_range  # the envs whose step is handled here, in Python
        no_extras: Mapping[Key, Any] = {}
        for t in range(steps):
            if on_step is not None and (applied := on_step()) is not None:
                policy_version = applied
                if POLICY_VERSION in out:
                    out[POLICY_VERSION][:, t:] = applied
            for _, array, current in carried_out:
                array[:, t] = current
            if rollout_actions is not None:
                actions, extras = rollout_actions[t], no_extras
            else:
                actions, extras = self.policy.act(obs, carried)
                actions_out[:, t] = actions
                if extras:
                    for key, array in extras_out:
                        array[:, t] = extras[key].numpy()
            for state, next_key in state_in:
                if extras:
                    state[...] = extras[next_key].numpy()
                else:
                    state[...] = 0  # random actions: no policy call, so the state stays a start
            finished: list[int] = []
            if stepper is not None:  # the common case natively; the rest (already stepped) below
                pending = stepper.step(t, actions, finished, next_raw)
            else:
                env_actions = list(actions)  # numpy scalars: gymnasium's Discrete check is fastest on them
            if pending:
                step_rewards, step_terminated, step_truncated = rewards[t], terminated[t], truncated[t]
                for i in pending:
                    next_raw[i], reward, term, trunc, info = next_raw[i] if stepper else env_steps[i](env_actions[i])
                    if info_out:
                        for n, array, name, default in info_out:
                            value = info.get(name, default) if isinstance(info, Mapping) else default
                            array[i, t] = checks.info(n, value, i, t + 1)
                    if type(reward) is not float or type(term) is not bool or type(trunc) is not bool:
                        reward, term, trunc = checks.step(reward, term, trunc, i, t + 1)  # else: fits as it is
                    step_rewards[i], step_terminated[i] = reward, term
                    if limit is not None:
                        step_counts[i] += 1
                        trunc = trunc or step_counts[i] >= limit
                    step_truncated[i] = trunc
                    if term or trunc:
                        finished.append(i)
                if stepper is not None and finished:
                    finished.sort()  # resets (and so new trajectory ids) in env order, as without it
            if is_init is not None:
                is_init[...] = False
            last = t + 1 == steps
            if pending or track_current or last:
                for _, next_array, current, path, field, dtype, shape in obs_out:
                    for i in pending:  # one env at a time: no temporary batch array
                        value = checks.leaf(next_raw[i], path, field, i, t + 1) if path else next_raw[i]
                        if type(value) is not ndarray or value.dtype is not dtype or value.shape != shape:
                            value = checks.observation(field, value, i, t + 1)
                        next_array[i, t] = value
                    if track_current or last:
                        current[...] = next_array[:, t]
            for i in finished:
                reset_obs, _ = envs[i].reset()
                for obs_array, _, current, path, field, dtype, shape in obs_out:
                    value = checks.leaf(reset_obs, path, field, i, t + 1) if path else reset_obs
                    if type(value) is not ndarray or value.dtype is not dtype or value.shape != shape:
                        value = checks.observation(field, value, i, t + 1)
                    current[i] = value
                    if not last:
                        obs_array[i, t + 1] = value  # the one frame of obs that ("next", obs) lacks
                self._start_trajectory(i)
                if not last:
                    traj_out[i, t + 1 :] = self._traj_ids[i]
                for key, array in carried.items():
                    array[i] = key == IS_INIT
        checks.reward_range(rewards, steps)
        reward_out[..., 0] = rewards.T
        term_out[..., 0] = terminated.T
        trunc_out[..., 0] = truncated.T
        np.logical_or(term_out, trunc_out, out=done_out)
        return policy_version

    def close(self) -> None:
        """Close every environment."""
        for env in self.envs:
            env.close()

    def _stepper(
        self,
        env_steps: list[Callable[..., Any]],
        obs_out: list[Any],
        flags: tuple[np.ndarray, np.ndarray, np.ndarray],
        with_info: bool,
    ) -> _core.EnvStepper | None:
        """The native stepper for this rollout, where the observation is one plain array field.

        Dict observations and ``info_keys`` are handled in Python only.
        """
        if len(obs_out) != 1 or with_info:
            return None
        ((_, next_array, _, path, _, dtype, shape),) = obs_out
        if path or not next_array.flags.c_contiguous or not next_array.flags.writeable:
            return None
        rewards, terminated, truncated = flags
        return _core.EnvStepper(
            env_steps,
            next_array,
            list(shape),
            np.empty(0, dtype).data.format,  # what a numpy array of the field's dtype exports
            dtype.itemsize,
            next_array.shape[1],
            np.ndarray,
            rewards,
            terminated,
            truncated,
            self._steps,
            self.max_frames_per_traj,
        )

    def _store_obs(self, i: int, raw: Any) -> None:
        for (key, path), (field, _, _) in zip(self._paths, self._expected, strict=True):
            self._obs[key][i] = self._checks.observation(field, self._checks.leaf(raw, path, field, i, 0), i, 0)

    def _start_trajectory(self, i: int) -> None:
        self._traj_ids[i] = self._next_traj_id
        self._next_traj_id += self._traj_stride
        self._steps[i] = 0
