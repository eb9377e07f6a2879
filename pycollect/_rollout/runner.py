"""Stepping a group of environments and writing their transitions into rollout arrays.

:class:`EnvRunner` is the one stepping loop of pycollect: the in-process collector drives it
directly, and each worker process drives its own with arrays that live in shared memory.

A rollout reads top to bottom in :meth:`EnvRunner.rollout`. It binds a ``_Rollout`` to the
output arrays once, then at each step: the weights hook, the policy's actions (``act``), the
envs' steps, the episode ends, the observation the policy reads next, the resets.

The envs' steps are not this module's: the runner steps its ``K`` envs through one
:class:`~pycollect._steps.group.EnvGroup`, the object that steps every group of envs in
pycollect (a vector env's too), built for a rollout (:meth:`EnvGroup.for_rollout
<pycollect._steps.group.EnvGroup.for_rollout>`). Each rollout binds its arrays to the group,
which writes step ``t`` into column ``t`` of them: natively (``_core.GroupStepper``) for the
common case (an observation whose leaves are exactly numpy arrays of their fields' dtypes and
shapes, a ``float`` reward, ``bool`` flags, a ``dict`` info, no ``info_keys`` kept), and every
other env on its Python path, through the same output checks (:mod:`pycollect._steps.checks`),
with the same result. A batched env's batch steps first, with every sub-env's action. The
group steps in ``DISABLED`` autoreset mode and resets nothing. It also applies the trajectory
limit, ``max_frames_per_traj``, as a vector env's group applies its ``max_episode_steps``: it
counts each episode's steps (natively where it steps natively), truncates one that reaches the
limit, and hands back every env whose episode ended, by its own flags or the limit.

What makes a trajectory is this loop's: the ended envs are reset (the group told, so that it
counts the new episode from zero), an env's own per-agent flags are marked where the limit cut
it (``EnvRunner._episode_ends``), and after the rollout each episode end gets a new trajectory
id, step after step, envs in order (:func:`~pycollect._rollout.trajectories.hand_out_ids`, the
central engine's numbering too).

The policy's side of a rollout is :class:`PolicyRunner`'s, the base of every runner, wherever
its envs step: the observations the policy reads next, the carried (recurrent) state, the output
checks and the binding of a rollout's arrays (:meth:`PolicyRunner.begin`, the rollout's ``act``).
:class:`EnvRunner` adds envs of its own; the central engine's ``CentralRunner``
(:mod:`pycollect._engines.central`) adds rows of envs in worker processes, which reset them in
the same step, and drives the steps itself (the rollout's ``act``, its own post and collect,
its ``end_step``), interleaving groups from one thread.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from pycollect._keys import (
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
from pycollect._rollout.actions import ActionSource, step_of
from pycollect._rollout.trajectories import hand_out_ids
from pycollect._steps.checks import OutputChecks
from pycollect._steps.group import EnvGroup
from pycollect.envs.backend import GymLikeEnv
from pycollect.envs.batched import batch_items
from pycollect.envs.specs import EnvSpecs, FieldSpec
from pycollect.exceptions import ConfigError

__all__ = ["EnvRunner", "PolicyRunner"]


class PolicyRunner(abc.ABC):
    """The policy's side of a runner of ``num_envs`` envs, wherever they step: what it reads next, what it carries.

    Holds the observations the policy reads next (``[num_envs, *shape]`` per field), the carried
    state (``is_init``, a recurrent state), the envs' output checks and the kept info entries,
    and binds a rollout's ``[num_envs, T]`` arrays (:meth:`begin`). Subclasses say where the envs
    step and how they start (:meth:`reset`).

    Args:
        num_envs: How many envs the runner steps.
        specs: Their fields.
        policy: Chooses actions.
        env_name: The env's name, for error messages.
        worker: The worker the envs step in (``None``: the trainer), for error messages.
        info: Entries of the env's step ``info`` to keep (``info_keys``), stored at their keys
            (``("next", name)``); a step whose info lacks one stores zeros.
    """

    action_space: Any = None
    """One env's action space, for a batched env's structured actions (``None``: not needed)."""

    def __init__(
        self,
        num_envs: int,
        specs: EnvSpecs,
        policy: ActionSource,
        *,
        env_name: str = "env",
        worker: int | None = None,
        info: tuple[FieldSpec, ...] = (),
    ) -> None:
        self.specs = specs
        self.policy = policy
        self._num_envs = num_envs
        self._paths = specs.observation_paths()
        self._obs = {spec.key: np.zeros((num_envs, *spec.shape), spec.dtype) for spec in specs.observation}
        self._has_reset = False
        self._checks = OutputChecks(specs.observation, env_name, worker, info)
        # Each kept info entry: its key, its name in the info dict (an env's own next_fields name it by path).
        self._info = [
            (entry.key, entry.path[0] if entry.path else entry.key[-1], np.zeros(entry.shape, entry.dtype))
            for entry in info
        ]
        # Where the env's own done flags sit in the next observation ([K, T, ...] arrays found in
        # the rollout's out by key), marked where a trajectory is cut by the runner's side.
        self._own_flags = [
            (*NEXT_OBS_PREFIX, *group, name) for group in specs.done_groups for name in ("truncated", "done")
        ]
        # What the policy gets back on the next step: is_init, a recurrent state (zeros at a start).
        self._carried = {c.key: np.zeros((num_envs, *c.shape), c.dtype) for c in policy.carried}
        # What an observation leaf must be to be stored without a check: (field index, dtype, shape).
        self._expected = [(n, spec.dtype, spec.shape) for n, spec in enumerate(specs.observation)]

    @property
    def num_envs(self) -> int:
        """How many environments this runner steps."""
        return self._num_envs

    @abc.abstractmethod
    def reset(self) -> None:
        """Start every env's episode: what the policy reads first (:meth:`_store_obs`), :meth:`_start_episodes`."""

    def policy_state(self) -> dict[str, Any]:
        """What the next policy call reads: the observations and the carried (recurrent) state, copied."""
        return {
            "observation": {key: array.copy() for key, array in self._obs.items()},
            "carried": {key: array.copy() for key, array in self._carried.items()},
        }

    def load_policy_state(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`policy_state`."""
        for key, array in self._obs.items():
            array[...] = state["observation"][key]
        for key, array in self._carried.items():
            array[...] = state["carried"][key]

    def begin(self, out: Mapping[Key, np.ndarray], random_actions: bool, policy_version: int) -> _Rollout:
        """Bind a rollout to ``out`` (resetting the envs first, the first time).

        A caller that drives the steps itself calls, for each step ``t``: the rollout's
        ``act(t)``, its own way of stepping and storing step ``t``, then its ``end_step``; and
        the rollout's ``finish()`` after the last.
        """
        if not self._has_reset:
            self.reset()
        return _Rollout(self, out, random_actions, policy_version)

    @staticmethod
    def _mark_limit(run: _Rollout, t: int, ended: Sequence[int], lengths: np.ndarray, limit: int) -> None:
        """Mark the own done flags at step ``t`` of the envs of ``ended`` whose episode reached ``limit`` steps."""
        run.cut_own_flags([i for i in ended if lengths[i] >= limit], t)

    def _store_obs(self, i: int, raw: Any) -> None:
        """Env ``i``'s first observation (raw, as the env returned it), checked: what the policy reads first."""
        for (key, path), (field, _, _) in zip(self._paths, self._expected, strict=True):
            self._obs[key][i] = self._checks.observation(field, self._checks.leaf(raw, path, field, i, 0), i, 0)

    def _start_episodes(self) -> None:
        """Every env starts an episode: ``is_init`` True, a recurrent state zero."""
        for key, array in self._carried.items():
            array[...] = key == IS_INIT


class EnvRunner(PolicyRunner):
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

    Attributes:
        native: Whether a rollout's group may use the native stepper for the common case
            (``False``: every env takes the group's Python path, which gives the same batch; for tests).

    Raises:
        EnvOutputError: (from :meth:`reset` and :meth:`rollout`) an environment returned
            something its spaces do not allow (see :mod:`pycollect._steps.checks`).
    """

    native: bool = True

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
        super().__init__(len(self.envs), specs, policy, env_name=env_name, worker=worker, info=info)
        self.max_frames_per_traj = max_frames_per_traj
        self._seeds = list(seeds) if seeds is not None else None
        self._traj_stride = traj_id_stride
        self._next_traj_id = traj_id_start
        self._traj_ids = np.zeros(self.num_envs, np.int64)
        # The one object that steps K envs (also a vector env's): natively where it can, else with
        # the checks; a batched env's batch first; it also counts each episode's steps and
        # truncates at max_frames_per_traj. Each rollout binds its arrays to it (begin).
        self._group = EnvGroup.for_rollout(
            self.envs,
            [(path, n, dtype, shape) for (_, path), (n, dtype, shape) in zip(self._paths, self._expected, strict=True)],
            self._checks,
            max_frames_per_traj=max_frames_per_traj,
            keeps_info=bool(info),
        )

    @property
    def group(self) -> EnvGroup:
        """The group that steps the envs (a worker's env commands reach the envs through it)."""
        return self._group

    @property
    def action_space(self) -> Any:
        """One env's action space."""
        return self.envs[0].action_space

    def state(self) -> dict[str, Any]:
        """Counters needed to resume trajectory numbering after :meth:`load_state`."""
        return {"next_traj_id": self._next_traj_id}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore counters saved by :meth:`state`."""
        self._next_traj_id = int(state["next_traj_id"])

    def snapshot(self, env_state: Callable[[Any], Any]) -> dict[str, Any]:
        """Everything the next rollout depends on, to continue it exactly after :meth:`restore`.

        Each env's state (``env_state(env)``, :func:`pycollect.envs.state.get_env_state`), the
        observations the policy reads next, the carried (recurrent) state, each env's trajectory
        id and step count, the trajectory numbering, the seeds of a first reset still to come and
        the random actions' stream. Torch's random stream (a stochastic policy's) is global: the
        caller saves it.
        """
        random_state = getattr(self.policy, "random_state", None)
        return {
            "envs": [env_state(env) for env in self.envs],
            "has_reset": self._has_reset,
            "seeds": self._seeds,
            **self.policy_state(),
            "traj_ids": self._traj_ids.copy(),
            "next_traj_id": self._next_traj_id,
            "episode_lengths": self._group.episode_lengths.tolist(),
            "random_actions": random_state() if random_state is not None else None,
        }

    def restore(self, snapshot: Mapping[str, Any], set_env_state: Callable[[Any, Any], None]) -> None:
        """Continue from :meth:`snapshot`: the next rollout is the one that would have followed it."""
        saved = len(snapshot["envs"])
        if saved != self.num_envs:
            raise ConfigError(f"a snapshot of {saved} envs cannot restore a runner of {self.num_envs}")
        for env, state in zip(self.envs, snapshot["envs"], strict=True):
            set_env_state(env, state)
        self._has_reset = bool(snapshot["has_reset"])
        self._seeds = snapshot["seeds"]
        self.load_policy_state(snapshot)
        self._traj_ids[...] = snapshot["traj_ids"]
        self._next_traj_id = int(snapshot["next_traj_id"])
        self._group.episode_lengths[...] = snapshot["episode_lengths"]
        if snapshot["random_actions"] is not None and hasattr(self.policy, "load_random_state"):
            self.policy.load_random_state(snapshot["random_actions"])

    def reset(self) -> None:
        """Reset every environment and start a new trajectory in each.

        The first reset uses the per-environment seeds; later ones continue each
        environment's own random stream.
        """
        seeds = self._seeds if not self._has_reset else None
        for i, obs in self._group.reset_each(seeds):
            self._store_obs(i, obs)
        self._start_trajectories(list(range(self.num_envs)))
        self._has_reset = True
        self._start_episodes()

    def rollout(
        self,
        out: Mapping[Key, np.ndarray],
        random_actions: bool = False,
        on_step: Callable[[], int | None] | None = None,
        policy_version: int = 0,
        after_policy: Callable[[], object] | None = None,
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
            after_policy: Called after every step's policy call, before the envs step (a
                worker's metrics); not called with random actions.

        Returns:
            The version of the weights in use at the end of the rollout.
        """
        run = self.begin(out, random_actions, policy_version)
        group = self._group
        if random_actions:
            after_policy = None
        for t in range(run.steps):
            if on_step is not None and (applied := on_step()) is not None:
                run.use_version(applied, t)
            actions = run.act(t)
            if after_policy is not None:
                after_policy()
            batched = run.batched_actions(actions) if group.batched else None
            self.end_step(run, t, group.step_column(t, run.env_actions(actions), batched))
        run.finish()
        ended = run.terminated | run.truncated  # [T, K]: the episode ends, the trajectory limit's included
        self._next_traj_id = hand_out_ids(run.traj_out, ended, self._traj_ids, self._next_traj_id, self._traj_stride)
        return run.policy_version

    def begin(self, out: Mapping[Key, np.ndarray], random_actions: bool, policy_version: int) -> _Rollout:
        """Bind a rollout to ``out``, and the envs' group to its arrays (resetting the envs first, the first time)."""
        run = super().begin(out, random_actions, policy_version)
        self._group.bind_rollout(
            [o.next_obs for o in run.obs_out],
            run.rewards,
            run.terminated,
            run.truncated,
            run.info_out,
            native=self.native and not run.structured_action,
        )
        return run

    def end_step(self, run: _Rollout, t: int, ended: list[int]) -> None:
        """After step ``t`` was stored: the limit in the env's own flags, what the policy reads next, the resets.

        ``ended``: the envs whose episode ended at ``t`` (their own flags or the trajectory
        limit), in env order.
        """
        finished = self._episode_ends(run, t, ended)
        run.observe(t)
        if finished:
            self._restart(run, finished, t)

    def close(self) -> None:
        """Close every environment."""
        for env in self.envs:
            env.close()

    def _episode_ends(self, run: _Rollout, t: int, ended: list[int]) -> list[int]:
        """The envs whose episode ended at step ``t``, in env order; the trajectory limit marked in their own flags.

        ``ended`` comes from the group, which counts each episode's steps and truncated those
        that reached ``max_frames_per_traj`` (the one place a trajectory limit is applied, as for
        a vector env's ``max_episode_steps``). What the group cannot know is where an env keeps
        flags of its own in its observation (a multi-agent env's per-agent ``truncated`` and
        ``done``): those are marked here for the envs the limit cut, found only among the few
        that ended.
        """
        limit = self.max_frames_per_traj
        if limit is None or not ended or not run.own_flags:
            return ended
        self._mark_limit(run, t, ended, self._group.episode_lengths, limit)
        return ended

    def _restart(self, run: _Rollout, ended: list[int], t: int) -> None:
        """Reset the envs ``ended`` (in env order), whose episode ended at step ``t``: new episodes from ``t + 1``.

        A batched env's sub-envs stored whole are reset together by the group
        (:meth:`EnvGroup.reset_ended <pycollect._steps.group.EnvGroup.reset_ended>`), every
        other env one by one, in env order. Their new trajectory ids are handed out after the
        rollout, from its episode ends (:func:`~pycollect._rollout.trajectories.hand_out_ids`).
        """
        observations = self._group.reset_ended(ended, t)
        if observations is None:  # one by one, with scalar indexing: single envs end a few at a step
            for i in ended:
                run.store_reset(i, t, self.envs[i].reset()[0])
                for key, array in self._carried.items():
                    array[i] = key == IS_INIT
        else:
            run.store_resets(ended, t, observations)
            for key, array in self._carried.items():
                array[ended] = key == IS_INIT
        if self.max_frames_per_traj is not None:  # the group counts the new episodes' steps from here
            self._group.start_episodes(ended)

    def _start_trajectories(self, envs: list[int]) -> None:
        """New trajectory ids for ``envs`` (a reset of every env), handed out in their order."""
        stride = self._traj_stride
        self._traj_ids[envs] = self._next_traj_id + stride * np.arange(len(envs))
        self._next_traj_id += stride * len(envs)
        if self.max_frames_per_traj is not None:
            self._group.start_episodes(envs)


class _ObsOut(NamedTuple):
    """One observation field as a rollout writes it (unpacked as a tuple in the per-env loops)."""

    obs: np.ndarray  # out[key], [K, T, *shape]: step 0 and the reset frames
    next_obs: np.ndarray  # out[("next", *key)], [K, T, *shape]: every frame an env returned
    current: np.ndarray  # the runner's [K, *shape] observation, what the policy reads next
    path: Key  # where the leaf sits in a Dict observation (empty: the observation itself)
    field: int  # index into the runner's observation fields, for the checks
    dtype: np.dtype[Any]
    shape: tuple[int, ...]


class _Rollout:
    """What one :meth:`EnvRunner.rollout` writes, bound once before its first step.

    Holds the views of ``out`` every step writes and the ``[T, K]`` rewards and flags (gathered
    step-major, as the runner's group writes them, and moved into the ``[K, T, 1]`` fields by
    :meth:`finish`; float64 rewards, so that one too large for the float32 field is caught).
    Preparing it and binding the group to it costs tens of microseconds, against milliseconds
    for the rollout's steps.

    Args:
        runner: The runner whose observation, carried state and checks this rollout uses.
        out: The rollout's arrays (see :meth:`EnvRunner.rollout`).
        random_actions: Sample actions uniformly instead of calling the policy.
        policy_version: The version of the policy weights the rollout starts with.
    """

    def __init__(
        self, runner: PolicyRunner, out: Mapping[Key, np.ndarray], random_actions: bool, policy_version: int
    ) -> None:
        self.steps = next(iter(out.values())).shape[1]
        self.checks = runner._checks
        self.policy = runner.policy
        self.policy_version = policy_version
        self.observation, self.carried = runner._obs, runner._carried
        self.obs_out = [
            _ObsOut(out[key], out[(*NEXT_OBS_PREFIX, *key)], runner._obs[key], path, *expected)
            for (key, path), expected in zip(runner._paths, runner._expected, strict=True)
        ]
        self.action_outs, self.traj_out = [out[spec.key] for spec in runner.specs.action_fields], out[TRAJ_IDS]
        self.structured_action = runner.specs.structured_action
        self.action_space: Any = runner.action_space
        self.env_action = runner.specs.env_action
        self.own_flags = [out[key] for key in runner._own_flags]
        self.reward_out, self.term_out, self.trunc_out = out[REWARD], out[NEXT_TERMINATED], out[NEXT_TRUNCATED]
        self.done_out = out[NEXT_DONE]
        self.version_out = out.get(POLICY_VERSION)
        self.extras_out = [(o.key, out[o.key]) for o in self.policy.outputs if o.key in out]
        self.carried_out = [(out[key], array) for key, array in self.carried.items()]
        # A recurrent state comes back from ("next", key) to key; is_init is set by episode ends.
        self.state_in = [(array, (*NEXT_OBS_PREFIX, *key)) for key, array in self.carried.items() if key != IS_INIT]
        self.is_init = self.carried.get(IS_INIT)
        self.info_out = [(n, out[key], name, default) for n, (key, name, default) in enumerate(runner._info)]
        num_envs = runner.num_envs
        self.rewards = np.empty((self.steps, num_envs), np.float64)
        self.terminated = np.empty((self.steps, num_envs), bool)
        self.truncated = np.empty((self.steps, num_envs), bool)
        # The current observation is what the policy reads: without a policy call it is needed
        # only at the end, where the next rollout starts from it.
        self.track_current = not random_actions
        self.random_actions = self._start(random_actions)

    def _start(self, random_actions: bool) -> Any:
        """Write what is known before the first step; return the random actions ``[T, K, ...]``, if any."""
        # Each observation is written once, from the env into ("next", obs)[t]. Of obs, only
        # step 0 and the reset observations after an episode's end are written here; the rest
        # is ("next", obs) one step later, filled in by whoever takes the rollout (see
        # pycollect._rollout.observations).
        for obs_out in self.obs_out:
            obs_out.obs[:, 0] = obs_out.current
        if self.version_out is not None:
            self.version_out[...] = self.policy_version
        if not random_actions:
            return None
        # Drawn for the whole rollout at once; no policy call, so no extra outputs.
        actions = self.policy.random_actions(self.steps)
        leaves = actions if isinstance(actions, tuple) else (actions,)
        for action_out, leaf in zip(self.action_outs, leaves, strict=True):
            action_out[...] = np.swapaxes(leaf, 0, 1)
        for _, array in self.extras_out:
            array[...] = 0  # slots are reused
        return actions

    def use_version(self, version: int, t: int) -> None:
        """New weights were applied before step ``t``: the frames from it on record ``version``."""
        self.policy_version = version
        if self.version_out is not None:
            self.version_out[:, t:] = version

    def act(self, t: int) -> Any:
        """The actions of step ``t`` (one array per action leaf, with several); what the policy reads stored."""
        for array, current in self.carried_out:
            array[:, t] = current
        if self.random_actions is not None:
            for state, _ in self.state_in:
                state[...] = 0  # no policy call, so the state stays a start
            return step_of(self.random_actions, t)
        actions, extras = self.policy.act(self.observation, self.carried, t)
        if isinstance(actions, tuple):
            for action_out, leaf in zip(self.action_outs, actions, strict=True):
                action_out[:, t] = leaf
        else:
            self.action_outs[0][:, t] = actions
        if extras:
            for key, array in self.extras_out:
                array[:, t] = extras[key].numpy()
        for state, next_key in self.state_in:
            state[...] = extras[next_key].numpy() if extras else 0
        return actions

    def batched_actions(self, actions: Any) -> Any:
        """``actions`` as a batched env takes them: the array itself, or gymnasium's batch of the envs' mappings."""
        if not self.structured_action:
            return actions
        return batch_items(self.action_space, self.env_actions(actions))

    def env_actions(self, actions: Any) -> Any:
        """``actions`` as the envs take them: the array itself, or a mapping per env (its row of each leaf)."""
        if not self.structured_action:
            return actions  # numpy scalars or rows as iterated: gymnasium's Discrete check is fastest on scalars
        leaves = actions if isinstance(actions, tuple) else (actions,)
        return [self.env_action(values) for values in zip(*(list(leaf) for leaf in leaves), strict=True)]

    def observe(self, t: int) -> None:
        """After step ``t``: what the policy reads next (episode ends are reset after this)."""
        if self.is_init is not None:
            self.is_init[...] = False
        if self.track_current or t + 1 == self.steps:
            for obs_out in self.obs_out:
                obs_out.current[...] = obs_out.next_obs[:, t]

    def store_reset(self, i: int, t: int, raw: Any) -> None:
        """Store env ``i``'s reset observation, after its episode ended at step ``t``."""
        checks, ndarray = self.checks, np.ndarray
        last = t + 1 == self.steps
        for obs, _, current, path, field, dtype, shape in self.obs_out:
            value = checks.leaf(raw, path, field, i, t + 1) if path else raw
            if type(value) is not ndarray or value.dtype is not dtype or value.shape != shape:
                value = checks.observation(field, value, i, t + 1)
            if last:
                current[i] = value  # where the next rollout starts
            else:
                obs[i, t + 1] = value  # the one frame of obs that ("next", obs) lacks
                if self.track_current:
                    current[i] = value  # what the policy reads next (without one, only the last step's is read)

    def cut_own_flags(self, envs: Any, t: int) -> None:
        """Set the own (per-agent) done flags of ``envs`` (indices or a slice) at step ``t``: their episode was cut."""
        for flags in self.own_flags:
            flags[envs, t] = True

    def store_resets(self, envs: list[int], t: int, observations: Sequence[np.ndarray]) -> None:
        """Store ``envs``' reset observations after step ``t``: a checked ``[len(envs), *shape]`` array per field."""
        last = t + 1 == self.steps
        for obs_out, value in zip(self.obs_out, observations, strict=True):
            if last:
                obs_out.current[envs] = value
            else:
                obs_out.obs[envs, t + 1] = value
                if self.track_current:
                    obs_out.current[envs] = value

    def finish(self) -> None:
        """Move the rewards and flags into their ``[K, T, 1]`` fields, once the last step is done."""
        self.checks.reward_range(self.rewards, self.steps)
        self.reward_out[..., 0] = self.rewards.T
        self.term_out[..., 0] = self.terminated.T
        self.trunc_out[..., 0] = self.truncated.T
        np.logical_or(self.term_out, self.trunc_out, out=self.done_out)
