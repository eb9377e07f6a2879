"""make_agent_vec against SuperSuit's concat_vec_envs_v1(pettingzoo_env_to_vec_env_v1(env), n), step for step."""

from __future__ import annotations

import marl_factories as f
import numpy as np
import pytest
import supersuit as ss

from pycollect import ActionError, ConfigError
from pycollect_pettingzoo import make_agent_vec

pytestmark = pytest.mark.usefixtures("pycollect_no_leftovers")


@pytest.mark.parametrize("num_workers", [0, 2])
def test_steps_equal_supersuit_concat_vec_envs(num_workers: int) -> None:
    num_envs, steps, seed = 4, 70, 3  # simple_spread (max_cycles=25): every env ends twice
    theirs = ss.concat_vec_envs_v1(ss.pettingzoo_env_to_vec_env_v1(f.spread()), num_envs, base_class="gymnasium")
    ours = make_agent_vec(f.spread, num_envs, num_workers=num_workers)
    try:
        assert ours.num_envs == theirs.num_envs == num_envs * 3
        assert ours.single_observation_space == theirs.observation_space
        assert ours.single_action_space == theirs.action_space
        (obs_a, info_a), (obs_b, info_b) = ours.reset(seed=seed), theirs.reset(seed=seed)
        np.testing.assert_array_equal(obs_a, obs_b)
        assert info_a == info_b
        rng = np.random.default_rng(0)
        ended = 0
        for t in range(steps):
            actions = rng.integers(0, 5, size=ours.num_envs)
            a, b = ours.step(actions), theirs.step(actions)
            for name, x, y in zip(("observation", "reward", "terminated", "truncated"), a[:4], b[:4], strict=True):
                assert x.dtype == y.dtype, (t, name)
                np.testing.assert_array_equal(x, y, err_msg=f"step {t}: {name}")
            assert len(a[4]) == len(b[4]) == ours.num_envs
            for slot, (x, y) in enumerate(zip(a[4], b[4], strict=True)):
                assert x.keys() == y.keys(), (t, slot)
                if "terminal_observation" in y:
                    ended += 1
                    np.testing.assert_array_equal(x["terminal_observation"], y["terminal_observation"])
        assert ended == 2 * ours.num_envs
    finally:
        ours.close()
        theirs.close()


def test_a_cleanrl_style_loop_runs_on_it() -> None:
    """The loop of CleanRL's PettingZoo PPO: done = terminations | truncations, infos iterated as a list."""
    envs = make_agent_vec(f.spread, 2, num_workers=2)
    try:
        next_obs, _ = envs.reset(seed=1)
        returns = np.zeros(envs.num_envs)
        for _ in range(30):
            action = np.array([envs.single_action_space.sample() for _ in range(envs.num_envs)])
            next_obs, reward, terminations, truncations, infos = envs.step(action)
            next_done = np.logical_or(terminations, truncations)
            returns = returns * (1 - next_done) + reward
            for info in infos:
                assert isinstance(info, dict)
        assert next_obs.shape == (6, 18)
    finally:
        envs.close()


def test_what_cannot_be_slots_is_refused_before_any_worker_starts() -> None:
    with pytest.raises(ConfigError, match=r"num_envs=3 does not split over num_workers=2"):
        make_agent_vec(f.spread, 3, num_workers=2)
    with pytest.raises(ConfigError, match=r"agents 'scout_0' and 'tank_0' have different observation spaces"):
        make_agent_vec(f.hetero, 2, num_workers=2)
    with pytest.raises(ConfigError, match="not a PettingZoo ParallelEnv or AECEnv"):
        make_agent_vec(f.not_pettingzoo, 2, num_workers=2)


def test_a_worker_killed_mid_step_cuts_every_agent_of_its_env_as_make_vec_does(tmp_path) -> None:
    """make_vec reports a restart as truncated with worker_restarted; so must every agent slot
    of the restarted env, with the last observation as its terminal_observation and reward 0."""
    marker = tmp_path / "crash"
    marker.touch()
    envs = make_agent_vec(
        f.crashing,
        1,
        num_workers=1,
        env_kwargs={"crash_at": 5, "how": "kill", "marker": str(marker), "min_life": 12},
        backoff_initial_s=0.01,
    )
    try:
        last, _ = envs.reset(seed=0)
        actions = np.zeros(envs.num_envs, np.int64)
        for t in range(4):
            observation, reward, terminated, truncated, infos = envs.step(actions)
            assert not truncated.any() and not any("worker_restarted" in info for info in infos), t
            last = observation
        observation, reward, terminated, truncated, infos = envs.step(actions)  # the worker dies in it
        assert not marker.exists()
        assert truncated.tolist() == [1, 1, 1] and terminated.tolist() == [0, 0, 0]
        assert reward.tolist() == [0.0, 0.0, 0.0]
        for slot, info in enumerate(infos):
            assert info["worker_restarted"] is True
            np.testing.assert_array_equal(info["terminal_observation"], last[slot])
        assert not np.array_equal(observation, last)  # the new episode's first
        _, _, _, truncated, infos = envs.step(actions)
        assert not truncated.any() and not any(infos)
    finally:
        envs.close()


@pytest.mark.parametrize(
    ("actions", "match"),
    [
        (np.zeros((6, 2), np.int64), r"shape \(6, 2\).*12 agent slots.*shape \(12,\)"),
        (np.zeros(11, np.int64), r"shape \(11,\).*12 agent slots.*shape \(12,\)"),
        (np.zeros(13, np.int64), r"shape \(13,\).*12 agent slots.*shape \(12,\)"),
    ],
    ids=["reshaped", "too-few", "too-many"],
)
def test_actions_of_the_wrong_shape_or_count_are_refused_before_any_reshape(actions: np.ndarray, match: str) -> None:
    envs = make_agent_vec(f.spread, 4, num_workers=2)
    try:
        envs.reset(seed=0)
        with pytest.raises(ActionError, match=match):
            envs.step(actions)
        envs.step(np.zeros(12, np.int64))  # nothing was sent: the next step goes on
    finally:
        envs.close()
