"""Snapshots of dm_control suite environments, for :class:`~pycollect_dmcontrol.env.DMControlEnv`.

What a ``dm_control.rl.control.Environment``'s future depends on, and so what is saved:

* the physics: MuJoCo's integration state (``physics.get_state(mjSTATE_INTEGRATION)``: time,
  ``qpos``, ``qvel``, ``act``, the solver's warm start, controls, applied forces, mocap bodies,
  user and plugin data), restored with ``physics.set_state`` and then ``physics.forward()``,
  which recomputes what the positions and velocities determine, as dm_control requires;
* the parts of the model that suite tasks move at each episode's start (reacher's and fish's
  targets, manipulator's and stacker's bodies, quadruped's terrain, finger's target site, ...);
* the task's random stream (``task.random``) and its other attributes (numbers, strings, arrays:
  settings, mostly);
* the environment's step counter and whether its next step resets.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from pycollect import EnvStateError
from pycollect.envs.state import rng_state, set_rng_state

__all__ = ["MODEL_FIELDS", "get_state", "set_state", "snapshot_refusal"]

MODEL_FIELDS = (
    "body_pos",
    "body_quat",
    "geom_pos",
    "geom_quat",
    "geom_size",
    "geom_rgba",
    "site_pos",
    "site_quat",
    "site_size",
    "site_rgba",
    "light_pos",
    "light_dir",
    "wrap_prm",
    "dof_damping",
    "hfield_data",
)
"""Model arrays the suite's tasks change when an episode starts (read in dm_control 1.0's suite)."""

_PLAIN = (bool, int, float, str, bytes, type(None), np.generic, np.ndarray, list, tuple, dict)


def _integration() -> int:
    import mujoco

    return int(mujoco.mjtState.mjSTATE_INTEGRATION)


def _qualified(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def snapshot_refusal(env: Any) -> str | None:
    """Why the dm_env environment ``env`` cannot be snapshot, or ``None``."""
    from dm_control.rl import control

    if not isinstance(env, control.Environment):
        return (
            f"dm_env environment {type(env).__qualname__} ({type(env).__module__}) is not a dm_control "
            "control.Environment (a suite task), the kind pycollect-dmcontrol can snapshot"
        )
    task = env.task
    odd = sorted(name for name, value in vars(task).items() if name != "_random" and not isinstance(value, _PLAIN))
    if odd:
        return (
            f"dm_control task {type(task).__qualname__} keeps attributes pycollect-dmcontrol does not know how to "
            f"save ({', '.join(odd)})"
        )
    return None


def get_state(env: Any) -> dict[str, Any]:
    """The state of a dm_control ``control.Environment`` (see the module's docstring).

    Raises:
        EnvStateError: See :func:`snapshot_refusal`.
    """
    why = snapshot_refusal(env)
    if why is not None:
        raise EnvStateError(why)
    physics, task = env.physics, env.task
    model = physics.model
    return {
        "task": _qualified(task),
        "sizes": _sizes(model),
        "physics": physics.get_state(sig=_integration()),
        "model": {name: getattr(model, name).copy() for name in MODEL_FIELDS if getattr(model, name).size},
        "random": rng_state(task.random),
        "task_attributes": {name: copy.deepcopy(value) for name, value in vars(task).items() if name != "_random"},
        "step_count": env._step_count,
        "reset_next_step": env._reset_next_step,
    }


def set_state(env: Any, state: Any) -> None:
    """Restore :func:`get_state`'s ``state`` into ``env``, a dm_control environment of the same task.

    Raises:
        EnvStateError: ``state`` is not such a state, or is of another task or model (named);
            ``env`` is left as it was.
    """
    why = snapshot_refusal(env)
    if why is not None:
        raise EnvStateError(why)
    if not isinstance(state, dict) or "physics" not in state or "task" not in state or "sizes" not in state:
        raise EnvStateError(f"not a state of DMControlEnv (from its get_state()): {type(state).__name__}")
    physics, task = env.physics, env.task
    if state["task"] != _qualified(task) or state["sizes"] != _sizes(physics.model):
        raise EnvStateError(
            f"a state of dm_control task {state['task']} (model sizes {state['sizes']}) cannot be restored into "
            f"{_qualified(task)} (model sizes {_sizes(physics.model)})"
        )
    for name, saved in state["model"].items():
        getattr(physics.model, name)[...] = saved
    physics.set_state(state["physics"], sig=_integration())
    physics.forward()  # what positions and velocities determine, as after a step
    set_rng_state(task.random, state["random"])  # in place: task.random is read-only, and shared
    for name, value in state["task_attributes"].items():
        setattr(task, name, copy.deepcopy(value))
    env._step_count = state["step_count"]
    env._reset_next_step = state["reset_next_step"]


def _sizes(model: Any) -> dict[str, int]:
    return {name: int(getattr(model, name)) for name in ("nq", "nv", "nu", "na", "nbody", "ngeom")}
