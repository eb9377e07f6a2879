"""DMControlEnv's state: restored, a dm_control task continues byte for byte as it would have."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from typing import Any

import dm_env
import numpy as np
import pytest
from dm_env import specs

from pycollect import EnvStateError
from pycollect.envs.state import SnapshotEnv, get_env_state, set_env_state, snapshot_refusal
from pycollect_dmcontrol import DMControlBackend, DMControlEnv

BACKEND = DMControlBackend()


def canonical(value: Any) -> Any:
    """``value`` in a form that compares equal only when it is the same, byte for byte."""
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, np.generic):
        return ("scalar", value.dtype.str, value.tobytes())
    if isinstance(value, float):
        return ("float", value.hex())
    if isinstance(value, bool | int | str | None):
        return (type(value).__name__, value)
    if isinstance(value, dict):  # dm_control's observations are OrderedDicts: the order counts
        return ("dict", tuple((key, canonical(item)) for key, item in value.items()))
    if isinstance(value, list | tuple):
        return (type(value).__name__, tuple(canonical(item) for item in value))
    raise TypeError(f"cannot compare a {type(value).__name__}")


def play(env: DMControlEnv, actions: Sequence[np.ndarray]) -> list[Any]:
    record: list[Any] = []
    for action in actions:
        observation, reward, terminated, truncated, info = env.step(action)
        record.append(("step", dict(observation), reward, terminated, truncated, info))
        if terminated or truncated:
            observation, info = env.reset()  # unseeded: the task's random stream goes on
            record.append(("reset", dict(observation), info))
    return record


def actions_for(env: DMControlEnv, count: int, seed: int = 7) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    space = env.action_space
    return [rng.uniform(space.low, space.high).astype(space.dtype) for _ in range(count)]


def assert_restores(make: Callable[[], DMControlEnv], *, before: int = 3, after: int = 14, episodes: int = 1) -> Any:
    env = make()
    env.reset(seed=3)
    actions = actions_for(env, before + after)
    play(env, actions[:before])
    state = pickle.loads(pickle.dumps(BACKEND.get_state(env)))
    expected = play(env, actions[before:])
    assert sum(entry[0] == "reset" for entry in expected) >= episodes, "the test should cross an episode end"
    want = canonical(expected)

    BACKEND.set_state(env, state)
    assert canonical(play(env, actions[before:])) == want, "restored into the same env"

    fresh = make()
    fresh.reset(seed=1003)  # another history: the restore must not depend on it
    play(fresh, actions[:2])
    BACKEND.set_state(fresh, state)
    assert canonical(play(fresh, actions[before:])) == want, "restored into a fresh env"
    BACKEND.set_state(fresh, state)
    assert canonical(play(fresh, actions[before:])) == want, "restored a second time"
    env.close()
    fresh.close()
    return state


def test_cheetah_run_restores_through_episode_ends() -> None:
    """5-step episodes (time limit 0.05 s): the restored env resets the same way after each."""
    assert_restores(lambda: BACKEND.make("cheetah-run", {"task_kwargs": {"time_limit": 0.05}}), episodes=2)


def test_cheetah_run_restores_mid_episode() -> None:
    env = BACKEND.make("cheetah-run", {})
    env.reset(seed=0)
    actions = actions_for(env, 30)
    play(env, actions[:10])
    state = env.get_state()
    expected = play(env, actions[10:])
    fresh = BACKEND.make("cheetah-run", {})  # never reset
    fresh.set_state(state)
    assert canonical(play(fresh, actions[10:])) == canonical(expected)


def test_a_task_that_moves_its_model_at_reset_restores() -> None:
    """reacher places its target by moving a geom of the model at each reset: that goes with the state."""
    assert_restores(lambda: BACKEND.make("reacher-easy", {"task_kwargs": {"time_limit": 0.1}}), after=12)


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
