"""DMControlEnv's state: restored, a dm_control task continues byte for byte as it would have."""

from __future__ import annotations

import pickle
from typing import Any

import dm_env
import numpy as np
import pytest
from dm_env import specs

from pycollect import EnvStateError
from pycollect.envs.state import SnapshotEnv, get_env_state, set_env_state, snapshot_refusal
from pycollect.testing import check_env_state
from pycollect_dmcontrol import DMControlBackend, DMControlEnv

BACKEND = DMControlBackend()


def test_cheetah_run_restores_through_episode_ends() -> None:
    """5-step episodes (time limit 0.05 s): the restored env resets the same way after each."""
    five_steps = {"task_kwargs": {"time_limit": 0.05}}
    check_env_state(lambda: BACKEND.make("cheetah-run", five_steps), BACKEND, before=3, after=14, min_episodes=2)


def test_cheetah_run_restores_mid_episode() -> None:
    """Through the env's own get_state/set_state (the protocol), into envs never reset among others."""
    check_env_state(lambda: BACKEND.make("cheetah-run", {}), seed=0, before=10, after=20, min_episodes=0)


def test_a_task_that_moves_its_model_at_reset_restores() -> None:
    """reacher places its target by moving a geom of the model at each reset: that goes with the state."""
    ten_steps = {"task_kwargs": {"time_limit": 0.1}}
    check_env_state(lambda: BACKEND.make("reacher-easy", ten_steps), BACKEND, before=3, after=12)


def test_the_state_is_a_snapshot_of_the_env() -> None:
    env = BACKEND.make("cheetah-run", {})
    assert isinstance(env, SnapshotEnv)
    assert snapshot_refusal(env) is None and BACKEND.snapshot_refusal(env) is None
    state = get_env_state(env)
    assert state.env == "pycollect_dmcontrol.env.DMControlEnv"
    assert pickle.loads(pickle.dumps(state)).parts[0]["task"] == "dm_control.suite.cheetah.Cheetah"


def test_a_state_of_another_task_is_refused_naming_both() -> None:
    cheetah = BACKEND.make("cheetah-run", {})
    walker = BACKEND.make("walker-walk", {})
    walker.reset(seed=0)
    with pytest.raises(EnvStateError, match=r"cheetah.Cheetah.*walker.PlanarWalker"):
        set_env_state(walker, get_env_state(cheetah))
    with pytest.raises(EnvStateError, match="not a state of DMControlEnv"):
        walker.set_state({"physics": 1})


class _Counter(dm_env.Environment):  # type: ignore[misc]  # dm_env is untyped
    """A dm_env environment that is not dm_control's control.Environment."""

    def reset(self) -> dm_env.TimeStep:
        return dm_env.restart({"x": np.zeros(1)})

    def step(self, action: Any) -> dm_env.TimeStep:
        return dm_env.transition(0.0, {"x": np.zeros(1)})

    def observation_spec(self) -> Any:
        return {"x": specs.Array((1,), np.float64, "x")}

    def action_spec(self) -> Any:
        return specs.BoundedArray((1,), np.float64, -1.0, 1.0, "a")


def test_an_env_that_is_not_a_control_environment_is_refused_by_name() -> None:
    env = DMControlEnv(_Counter())
    why = snapshot_refusal(env)
    assert why is not None and "_Counter" in why and "control.Environment" in why
    with pytest.raises(EnvStateError, match="_Counter"):
        get_env_state(env)
