"""DMControlEnv: spaces, seeding, termination versus truncation, the step contract."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dm_env
import gymnasium as gym
import numpy as np
import pytest
from dm_control import suite
from dm_env import specs

from pycollect_dmcontrol import DMControlBackend, DMControlEnv
from pycollect_dmcontrol.env import action_space, observation_space

BACKEND = DMControlBackend()


@pytest.fixture
def cheetah() -> Iterator[DMControlEnv]:
    env = BACKEND.make("cheetah-run", {})
    yield env
    env.close()


def _zeros(env: DMControlEnv) -> np.ndarray:
    return np.zeros(env.action_space.shape, env.action_space.dtype)


# -- spaces ----------------------------------------------------------------------------------


def test_spaces_of_cheetah_run(cheetah: DMControlEnv) -> None:
    assert isinstance(cheetah.observation_space, gym.spaces.Dict)
    assert list(cheetah.observation_space.spaces) == ["position", "velocity"]
    for name, shape in (("position", (8,)), ("velocity", (9,))):
        box = cheetah.observation_space[name]
        assert isinstance(box, gym.spaces.Box)
        assert (box.shape, box.dtype) == (shape, np.float64)
        assert np.all(np.isneginf(box.low)) and np.all(np.isposinf(box.high))
    act = cheetah.action_space
    assert isinstance(act, gym.spaces.Box)
    assert (act.shape, act.dtype) == ((6,), np.float64)
    np.testing.assert_array_equal(act.low, -1.0)
    np.testing.assert_array_equal(act.high, 1.0)


def test_observations_fit_their_spaces(cheetah: DMControlEnv) -> None:
    obs, info = cheetah.reset(seed=0)
    assert info == {}
    assert cheetah.observation_space.contains(dict(obs))
    obs, *_ = cheetah.step(cheetah.action_space.sample())
    assert cheetah.observation_space.contains(dict(obs))


def test_observation_space_keeps_spec_order_dtype_and_scalars() -> None:
    spec = {
        "zeta": specs.Array((), np.float64, "zeta"),
        "alpha": specs.Array((3,), np.float32, "alpha"),
        "count": specs.Array((2,), np.int32, "count"),
        "flag": specs.Array((), np.bool_, "flag"),
        "bounded": specs.BoundedArray((2,), np.float64, 0.0, [1.0, 2.0], "bounded"),
    }
    space = observation_space(spec)
    assert list(space.spaces) == ["zeta", "alpha", "count", "flag", "bounded"]
    assert [(s.shape, s.dtype) for s in space.spaces.values()] == [
        ((), np.float64),
        ((3,), np.float32),
        ((2,), np.int32),
        ((), np.bool_),
        ((2,), np.float64),
    ]
    np.testing.assert_array_equal(space["bounded"].high, [1.0, 2.0])
    assert space["count"].high.tolist() == [np.iinfo(np.int32).max] * 2


def test_action_space_broadcasts_scalar_bounds() -> None:
    box = action_space(specs.BoundedArray((3,), np.float32, -2.0, 2.0))
    assert (box.shape, box.dtype) == ((3,), np.float32)
    np.testing.assert_array_equal(box.low, [-2.0] * 3)
    np.testing.assert_array_equal(box.high, [2.0] * 3)


def test_scalar_observations_of_walker() -> None:
    env = BACKEND.make("walker-walk", {})
    try:
        assert env.observation_space["height"].shape == ()
        obs, _ = env.reset(seed=1)
        assert np.shape(obs["height"]) == ()
    finally:
        env.close()


# -- reset and seeding -----------------------------------------------------------------------


def test_same_seed_same_first_observation(cheetah: DMControlEnv) -> None:
    other = BACKEND.make("cheetah-run", {})
    try:
        a, _ = cheetah.reset(seed=123)
        b, _ = other.reset(seed=123)
        for name in a:
            np.testing.assert_array_equal(a[name], b[name])
        # and again on the same env, after stepping
        cheetah.step(_zeros(cheetah))
        c, _ = cheetah.reset(seed=123)
        for name in a:
            np.testing.assert_array_equal(a[name], c[name])
    finally:
        other.close()


def test_different_seeds_different_first_observations(cheetah: DMControlEnv) -> None:
    a, _ = cheetah.reset(seed=1)
    a = {k: v.copy() for k, v in a.items()}
    b, _ = cheetah.reset(seed=2)
    assert not np.array_equal(a["position"], b["position"])


def test_seed_reseeds_the_tasks_random_state_in_place(cheetah: DMControlEnv) -> None:
    random = cheetah.dm_env.task.random
    cheetah.reset(seed=5)
    assert cheetah.dm_env.task.random is random
    expected = np.random.RandomState(5)
    cheetah.dm_env.task.random.seed(5)
    assert cheetah.dm_env.task.random.uniform() == expected.uniform()


def test_unseeded_resets_continue_the_stream(cheetah: DMControlEnv) -> None:
    first, _ = cheetah.reset(seed=7)
    second, _ = cheetah.reset()
    assert not np.array_equal(first["position"], second["position"])
    other = BACKEND.make("cheetah-run", {})
    try:
        other.reset(seed=7)
        again, _ = other.reset()
        np.testing.assert_array_equal(second["position"], again["position"])
    finally:
        other.close()


def test_reset_accepts_and_ignores_options(cheetah: DMControlEnv) -> None:
    obs, info = cheetah.reset(seed=0, options={"anything": 1})
    assert info == {} and set(obs) == {"position", "velocity"}


# -- step ------------------------------------------------------------------------------------


def test_step_contract(cheetah: DMControlEnv) -> None:
    cheetah.reset(seed=0)
    obs, reward, terminated, truncated, info = cheetah.step(cheetah.action_space.sample())
    assert type(reward) is float
    assert terminated is False and truncated is False
    assert info == {}
    assert set(obs) == {"position", "velocity"}
    assert obs["position"].dtype == np.float64


def test_observations_are_fresh_arrays(cheetah: DMControlEnv) -> None:
    first, _ = cheetah.reset(seed=0)
    kept = {k: v.copy() for k, v in first.items()}
    second, *_ = cheetah.step(np.ones(6))
    for name in kept:
        assert second[name] is not first[name]
        np.testing.assert_array_equal(first[name], kept[name])  # stepping did not overwrite it


def test_time_limit_is_a_truncation() -> None:
    env = BACKEND.make("cheetah-run", {"task_kwargs": {"time_limit": 0.05}})  # 5 steps of 0.01 s
    try:
        env.reset(seed=0)
        flags = [env.step(_zeros(env))[2:4] for _ in range(5)]
    finally:
        env.close()
    assert flags == [(False, False)] * 4 + [(False, True)]


def test_task_end_is_a_termination() -> None:
    # lqr is the suite task that can terminate: when the state norm falls below a tolerance.
    env = BACKEND.make("lqr-lqr_2_1", {})
    try:
        env.reset(seed=0)
        physics = env.dm_env.physics
        with physics.reset_context():  # the rest state (qpos0 = 0), derived quantities recomputed
            physics.data.qpos[:] = 0.0
            physics.data.qvel[:] = 0.0
        obs, reward, terminated, truncated, _ = env.step(_zeros(env))
    finally:
        env.close()
    assert (terminated, truncated) == (True, False)
    assert isinstance(reward, float)
    assert set(obs) == {"position", "velocity"}


class _Scripted:
    """A dm_env stand-in that replays a list of TimeSteps."""

    def __init__(self, steps: list[dm_env.TimeStep]) -> None:
        self._steps = iter(steps)
        self.closed = False

    def observation_spec(self) -> dict[str, specs.Array]:
        return {"x": specs.Array((2,), np.float64, "x")}

    def action_spec(self) -> specs.BoundedArray:
        return specs.BoundedArray((1,), np.float64, -1.0, 1.0)

    def step(self, action: Any) -> dm_env.TimeStep:
        return next(self._steps)

    def close(self) -> None:
        self.closed = True


_OBS = {"x": np.zeros(2)}


@pytest.mark.parametrize(
    ("time_step", "expected"),
    [
        (dm_env.TimeStep(dm_env.StepType.MID, 0.25, 1.0, _OBS), (0.25, False, False)),
        (dm_env.TimeStep(dm_env.StepType.LAST, 1.5, 0.0, _OBS), (1.5, True, False)),
        (dm_env.TimeStep(dm_env.StepType.LAST, np.float64(2.0), 1.0, _OBS), (2.0, False, True)),
        (dm_env.TimeStep(dm_env.StepType.LAST, 0.5, 0.5, _OBS), (0.5, False, True)),
        (dm_env.TimeStep(1, 0.75, 1.0, _OBS), (0.75, False, False)),  # a plain int step type
        (dm_env.TimeStep(2, 0.75, 0.0, _OBS), (0.75, True, False)),
        (dm_env.TimeStep(dm_env.StepType.FIRST, None, None, _OBS), (0.0, False, False)),
    ],
)
def test_time_step_mapping(time_step: dm_env.TimeStep, expected: tuple[float, bool, bool]) -> None:
    env = DMControlEnv(_Scripted([time_step]))
    obs, reward, terminated, truncated, info = env.step(np.zeros(1))
    assert obs is _OBS
    assert (reward, terminated, truncated) == expected
    assert type(reward) is float
    assert not (terminated and truncated)
    assert info == {}


def test_close_closes_the_dm_control_env() -> None:
    inner = _Scripted([])
    DMControlEnv(inner).close()
    assert inner.closed


def test_episode_runs_to_its_time_limit_with_random_actions() -> None:
    env = DMControlEnv(suite.load("cartpole", "balance", task_kwargs={"time_limit": 0.2}))
    try:
        env.reset(seed=0)
        steps, done = 0, False
        while not done:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            steps += 1
            done = terminated or truncated
        assert (terminated, truncated) == (False, True)
        assert steps == round(0.2 / env.dm_env.control_timestep())
    finally:
        env.close()
