"""A gymnasium-style view of a dm_control environment, kept thin because it is the hot path.

:class:`DMControlEnv` wraps any ``dm_env.Environment`` with dm_control's array specs (what
``dm_control.suite.load`` returns). ``step`` adds one call, a tuple unpacking and a float
conversion to the dm_control step: no space checks, and no copies (dm_control builds fresh
observation arrays every step, so they are handed on as they are).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dm_env
import gymnasium as gym
import numpy as np
from dm_env import specs

from pycollect_dmcontrol import state

__all__ = ["DMControlEnv", "action_space", "observation_space"]

_MID = dm_env.StepType.MID
_LAST = dm_env.StepType.LAST


def _box(spec: specs.Array) -> gym.spaces.Box:
    """One dm_env array spec as a Box of the same shape and dtype (``()`` stays ``()``)."""
    shape = tuple(int(n) for n in spec.shape)
    dtype = np.dtype(spec.dtype)
    if isinstance(spec, specs.BoundedArray):
        low: Any = np.broadcast_to(np.asarray(spec.minimum, dtype=dtype), shape)
        high: Any = np.broadcast_to(np.asarray(spec.maximum, dtype=dtype), shape)
    elif dtype == np.bool_:
        low, high = 0, 1
    elif np.issubdtype(dtype, np.integer):
        low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
    else:
        low, high = -np.inf, np.inf
    return gym.spaces.Box(low=low, high=high, shape=shape, dtype=dtype)


def observation_space(spec: Mapping[str, specs.Array]) -> gym.spaces.Dict:
    """A Dict of Boxes from an observation spec, in the spec's order.

    Args:
        spec: What ``env.observation_spec()`` returns: an ordered mapping of array specs.

    Returns:
        A ``Dict`` whose keys keep the spec's order (gymnasium sorts the keys of a plain
        dict, so the spaces are passed as a list of pairs).
    """
    return gym.spaces.Dict([(str(name), _box(array)) for name, array in spec.items()])


def action_space(spec: specs.Array) -> gym.spaces.Box:
    """A Box from an action spec (normally a ``BoundedArray``), with its bounds and dtype."""
    return _box(spec)


class DMControlEnv:
    """A dm_control environment behind gymnasium's ``reset``/``step``/``close`` API.

    It is deliberately not a ``gymnasium.Env``: it has no ``render`` and no wrappers, and it
    never checks actions against the action space (dm_control copies the action into the
    simulator's controls, which rejects a wrong shape).

    Args:
        env: A dm_control environment, e.g. ``dm_control.suite.load("cheetah", "run")``.

    Attributes:
        observation_space: A ``Dict`` of ``Box`` es, one per observation array, in the order
            of ``env.observation_spec()``.
        action_space: A ``Box`` with the bounds, shape and dtype of ``env.action_spec()``.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - gymnasium's class attribute
    render_mode: None = None

    def __init__(self, env: dm_env.Environment) -> None:
        self._env = env
        self._step = env.step
        self.observation_space = observation_space(env.observation_spec())
        self.action_space = action_space(env.action_spec())

    @property
    def dm_env(self) -> dm_env.Environment:
        """The wrapped dm_control environment (its ``physics`` and ``task`` included)."""
        return self._env

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Mapping[str, np.ndarray], dict[str, Any]]:
        """Start an episode.

        Args:
            seed: Reseeds the task's random state in place (``task.random.seed(seed)``)
                before the reset, so the same seed gives the same initial state. ``None``
                continues the task's random stream. Any value ``numpy.random.RandomState.seed``
                takes (an int in ``[0, 2**32)``).
            options: Ignored (dm_control resets take no options).

        Returns:
            The first observation (dm_control's ordered dict of arrays) and an empty info dict.
        """
        if seed is not None:
            self._env.task.random.seed(seed)
        return self._env.reset().observation, {}

    def step(self, action: Any) -> tuple[Mapping[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """Advance one control step.

        dm_control ends an episode with a ``LAST`` time step. It is a termination when its
        discount is 0 (the task ended it) and a truncation otherwise (the time limit, which
        dm_control reports with discount 1); never both.

        Args:
            action: An array of the action spec's shape; not checked here.

        Returns:
            ``(observation, reward, terminated, truncated, info)``, the observation being
            dm_control's own fresh ordered dict of arrays.
        """
        step_type, reward, discount, observation = self._step(action)
        if step_type is _MID or step_type == _MID:  # dm_control's own enum member passes the first test
            return observation, float(reward), False, False, {}
        if step_type == _LAST:
            terminated = discount == 0
            return observation, float(reward), terminated, not terminated, {}
        # FIRST: a step after the end of an episode, which dm_control answers with a reset.
        return observation, 0.0, False, False, {}

    def get_state(self) -> dict[str, Any]:
        """A snapshot of the task: physics, the model parts tasks move, random stream, step counter.

        pycollect's snapshot protocol (:class:`pycollect.envs.state.SnapshotEnv`); see
        :mod:`pycollect_dmcontrol.state` for what is saved.

        Raises:
            EnvStateError: The wrapped environment cannot be snapshot (see :meth:`snapshot_refusal`).
        """
        return state.get_state(self._env)

    def set_state(self, snapshot: dict[str, Any]) -> None:
        """Continue from a :meth:`get_state` snapshot of an env of the same task.

        Raises:
            EnvStateError: Not such a snapshot, or one of another task or model (both named).
        """
        state.set_state(self._env, snapshot)

    def snapshot_refusal(self) -> str | None:
        """Why this env cannot be snapshot (not a suite ``control.Environment``), or ``None``."""
        return state.snapshot_refusal(self._env)

    def close(self) -> None:
        """Close the dm_control environment (it frees its physics)."""
        self._env.close()

    def __repr__(self) -> str:
        task = type(getattr(self._env, "task", None)).__name__
        return f"DMControlEnv({task}, observation={list(self.observation_space.spaces)})"
