"""The gymnax batched env alone: spaces, seeding, SAME_STEP autoreset, partial resets, the time limit."""

from __future__ import annotations

import gymnasium as gym
import gymnax
import jax
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from gymnax_helpers import cartpole, fell, is_reset

from pycollect.exceptions import ConfigError, EnvStateError
from pycollect_jax import GymnaxBackend, GymnaxBatchedEnv

N = 8
PUSH_RIGHT = np.ones(N, np.int64)  # the pole falls (left) within ~10 steps from any initial state


def _seeds(start: int = 0) -> list[int | None]:
    return list(range(start, start + N))


def _steps(env: GymnaxBatchedEnv, actions: list[np.ndarray]) -> list[tuple[np.ndarray, ...]]:
    out = []
    for action in actions:
        obs, reward, terminated, truncated, infos = env.step_batch(action)
        out.append((obs.copy(), reward, terminated, truncated, infos.get("final_obs"), infos.get("_final_obs")))
    return out


def _actions(count: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 2, N) for _ in range(count)]


# -- what it declares ---------------------------------------------------------------------------


def test_declares_same_step_partial_resets_and_the_spaces_of_gymnasiums_cartpole() -> None:
    env = cartpole()
    assert env.autoreset_mode is AutoresetMode.SAME_STEP and env.partial_reset
    assert env.num_envs == N
    assert env.describe() == "gymnax CartPole-v1 of 8 sub-envs"
    reference = gym.make("CartPole-v1")
    try:
        # Not the same data (gymnax's keys and gymnasium's generator differ), but the same spaces:
        # float32 [4] with gymnax's "largest float32" bounds made infinite, as gymnasium writes them.
        assert env.single_observation_space == reference.observation_space
        assert env.single_action_space == reference.action_space
        obs, _ = env.reset_batch(_seeds(), None)
        ref_obs, _ = reference.reset(seed=0)
        assert obs.shape == (N, *ref_obs.shape) and obs.dtype == ref_obs.dtype
        assert not np.array_equal(obs[0], ref_obs)
    finally:
        reference.close()


def test_step_returns_numpy_arrays_of_the_declared_shapes_and_dtypes() -> None:
    env = cartpole()
    obs, infos = env.reset_batch(_seeds(), None)
    assert type(obs) is np.ndarray and obs.shape == (N, 4) and obs.dtype == np.float32 and infos == {}
    assert is_reset(obs).all()
    obs, reward, terminated, truncated, infos = env.step_batch(np.zeros(N, np.int64))
    assert type(obs) is np.ndarray and obs.shape == (N, 4) and obs.dtype == np.float32
    assert type(reward) is np.ndarray and reward.shape == (N,) and reward.dtype == np.float32
    for flags in (terminated, truncated):
        assert type(flags) is np.ndarray and flags.shape == (N,) and flags.dtype == np.bool_
    assert infos == {}  # no episode ends at the first step
    np.testing.assert_array_equal(reward, np.ones(N, np.float32))
    for row in obs:
        assert env.single_observation_space.contains(row)


def test_each_jitted_function_is_compiled_once() -> None:
    env = cartpole()
    env.reset_batch(_seeds(), None)
    for n, action in enumerate(_actions(60)):
        env.step_batch(action)
        if n % 7 == 0:
            env.reset_batch([None, 3, *[None] * (N - 2)], np.arange(N) % 2 == 0)
    env.reset_batch(None, None)
    for function in (env._step, env._reset):
        cache_size = getattr(function, "_cache_size", None)
        if cache_size is None:
            pytest.skip("this JAX's jitted functions do not report their cache size")
        assert cache_size() == 1


# -- seeding ----------------------------------------------------------------------------------


def test_the_same_seeds_give_the_same_episodes_whatever_the_keys_before() -> None:
    a, b = cartpole(), GymnaxBackend().make_batched("CartPole-v1", {}, N)  # built with other entropy
    b.reset_batch(_seeds(100), None)
    b.step_batch(np.zeros(N, np.int64))  # b's streams moved on before its seeded reset
    obs_a, _ = a.reset_batch(_seeds(), None)
    obs_b, _ = b.reset_batch(_seeds(), None)
    np.testing.assert_array_equal(obs_a, obs_b)
    actions = _actions(80)
    for x, y in zip(_steps(a, actions), _steps(b, actions), strict=True):
        for u, v in zip(x, y, strict=True):
            np.testing.assert_array_equal(u, v)
    # unseeded resets go on with each sub-env's own stream: the same for both, and new states
    again_a, _ = a.reset_batch(None, None)
    again_b, _ = b.reset_batch(None, None)
    np.testing.assert_array_equal(again_a, again_b)
    assert not np.array_equal(again_a, obs_a)


def test_seed_i_starts_sub_env_i_from_prng_key_of_it() -> None:
    env = cartpole()
    seeds = [0, 1, 7, 2**31 + 5, 2**32 - 1, None, 12, 13]
    obs, _ = env.reset_batch(seeds, None)
    gymnax_env, params = gymnax.make("CartPole-v1")
    for i, seed in enumerate(seeds):
        if seed is None:
            continue
        _, reset_key = jax.random.split(jax.random.PRNGKey(seed))
        expected, _ = gymnax_env.reset_env(reset_key, params)
        np.testing.assert_array_equal(obs[i], np.asarray(expected), err_msg=f"seed {seed}")
    assert len({row.tobytes() for row in obs}) == N  # every sub-env its own state


def test_seeds_past_32_bits_stay_apart_and_bad_seeds_are_refused() -> None:
    env = cartpole()
    low, _ = env.reset_batch([5] * N, None)
    high, _ = env.reset_batch([2**40 + 5] * N, None)  # JAX's 32-bit PRNGKey alone would make it 5
    assert not np.array_equal(low, high)
    again, _ = env.reset_batch([2**40 + 5] * N, None)
    np.testing.assert_array_equal(high, again)
    for bad in (-1, 2**64, 1.5, "0", True):
        with pytest.raises(ConfigError, match="seed"):
            env.reset_batch([bad, *[None] * (N - 1)], None)
    with pytest.raises(ConfigError, match="seeds"):
        env.reset_batch([0, 1], None)
    with pytest.raises(ConfigError, match="reset options"):
        env.reset_batch(None, None, options={"x": 1})


# -- SAME_STEP autoreset ------------------------------------------------------------------------


def test_a_sub_env_whose_pole_falls_returns_its_final_obs_in_infos_and_a_reset_obs() -> None:
    env = cartpole()
    obs, _ = env.reset_batch(_seeds(), None)
    seen = np.zeros(N, bool)
    for _ in range(40):
        previous = obs
        obs, reward, terminated, truncated, infos = env.step_batch(PUSH_RIGHT)
        assert not truncated.any()
        np.testing.assert_array_equal(reward, np.ones(N, np.float32))  # the falling step still pays 1
        if not terminated.any():
            assert infos == {}
            assert not fell(obs).any()
            continue
        final, mask = infos["final_obs"], infos["_final_obs"]
        np.testing.assert_array_equal(mask, terminated)
        assert final.shape == (N, 4) and final.dtype == np.float32
        assert fell(final[terminated]).all()  # the final observation: past the threshold
        assert is_reset(obs[terminated]).all()  # the observation: the next episode's first
        assert not fell(obs).any()
        # the final observation follows from the one before: the pole kept falling the same way
        assert (np.sign(final[terminated, 2]) == np.sign(previous[terminated, 2])).all()
        seen |= terminated
    assert seen.all()


def test_the_time_limit_is_a_truncation() -> None:
    env = cartpole(params={"max_steps_in_episode": 5})
    env.reset_batch(_seeds(), None)
    alternate = [np.full(N, t % 2, np.int64) for t in range(12)]  # keeps the pole up for 12 steps
    for t, (obs, _, terminated, truncated, final, mask) in enumerate(_steps(env, alternate), start=1):
        assert not terminated.any()
        if t % 5 == 0:
            assert truncated.all() and mask.all()
            assert not is_reset(final).all()  # moved away from the start
            assert is_reset(obs).all()
        else:
            assert not truncated.any() and final is None


def test_an_end_on_both_counts_is_a_termination_only() -> None:
    env = cartpole()
    env.reset_batch(_seeds(), None)
    steps = _steps(env, [PUSH_RIGHT] * 40)
    first = next(t for t, step in enumerate(steps, start=1) if step[2][0])  # sub-env 0's pole fell at step `first`
    limited = cartpole(params={"max_steps_in_episode": first})
    limited.reset_batch(_seeds(), None)
    *_, (_, _, terminated, truncated, final, _) = _steps(limited, [PUSH_RIGHT] * first)
    assert terminated[0] and not truncated[0]  # the time limit reached at the very step the pole fell
    # the sub-envs whose first episode lasts as long: fallen at that step too, or stopped by the limit
    lasting = ~np.any([step[2] for step in steps[: first - 1]], axis=0)
    np.testing.assert_array_equal(terminated[lasting], steps[first - 1][2][lasting])
    np.testing.assert_array_equal(truncated[lasting], ~steps[first - 1][2][lasting])
    assert fell(final[terminated]).all()


# -- partial resets -------------------------------------------------------------------------------


def test_a_reset_by_mask_leaves_the_other_sub_envs_untouched() -> None:
    env, twin = cartpole(), cartpole()
    actions = _actions(30)
    for e in (env, twin):
        e.reset_batch(_seeds(), None)
        _steps(e, actions[:3])
    before = env.step_batch(actions[3])[0].copy()
    twin.step_batch(actions[3])
    mask = np.zeros(N, bool)
    mask[[1, 4]] = True
    obs, infos = env.reset_batch([None, 42, *[None] * (N - 2)], mask)
    assert infos == {}
    np.testing.assert_array_equal(obs[~mask], before[~mask])
    assert is_reset(obs[mask]).all() and not np.array_equal(obs[mask], before[mask])
    # sub-env 1 took seed 42, sub-env 4 its own stream
    gymnax_env, params = gymnax.make("CartPole-v1")
    expected, _ = gymnax_env.reset_env(jax.random.split(jax.random.PRNGKey(42))[1], params)
    np.testing.assert_array_equal(obs[1], np.asarray(expected))
    # the others step on exactly as their twins, which were never reset: state and key streams untouched
    for x, y in zip(_steps(env, actions[4:]), _steps(twin, actions[4:]), strict=True):
        np.testing.assert_array_equal(x[0][~mask], y[0][~mask])
        np.testing.assert_array_equal(x[1][~mask], y[1][~mask])
        np.testing.assert_array_equal(x[2][~mask], y[2][~mask])


def test_a_mask_of_the_wrong_shape_is_refused() -> None:
    env = cartpole()
    with pytest.raises(ConfigError, match="reset mask"):
        env.reset_batch(None, np.ones(N + 1, bool))


# -- other envs ----------------------------------------------------------------------------------


BUILT = [env_id for env_id in gymnax.registered_envs if env_id != "MNISTBandit-bsuite"]  # MNIST downloads its data


@pytest.mark.parametrize("env_id", BUILT)
def test_every_gymnax_env_steps_within_its_spaces(env_id: str) -> None:
    env = GymnaxBackend().make_batched(env_id, {}, 4)
    obs_space, action_space = env.single_observation_space, env.single_action_space
    assert isinstance(obs_space, gym.spaces.Box | gym.spaces.Discrete)
    obs, _ = env.reset_batch(list(range(4)), None)
    assert obs.shape == (4, *obs_space.shape) and obs.dtype == obs_space.dtype
    action_space.seed(0)
    for _ in range(3):
        actions = np.stack([action_space.sample() for _ in range(4)])
        obs, reward, terminated, truncated, _ = env.step_batch(actions)
        assert obs.shape == (4, *obs_space.shape) and obs.dtype == obs_space.dtype, env_id
        assert reward.dtype == np.float32 and terminated.dtype == truncated.dtype == np.bool_
        assert not (terminated & truncated).any()


def test_a_discrete_observation_and_a_box_action() -> None:
    lake = GymnaxBackend().make_batched("FrozenLake-misc", {}, 4)
    assert lake.single_observation_space == gym.spaces.Discrete(16, dtype=np.int32)  # what its step returns
    obs, _ = lake.reset_batch(list(range(4)), None)
    assert obs.shape == (4,) and obs.dtype == np.int32
    pendulum = GymnaxBackend().make_batched("Pendulum-v1", {}, 4)
    assert pendulum.single_action_space == gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    pendulum.reset_batch(list(range(4)), None)
    ends = [pendulum.step_batch(np.zeros((4, 1)))[2:4] for _ in range(200)]  # float64 actions are cast
    assert not any(terminated.any() for terminated, _ in ends)  # Pendulum never terminates...
    assert all(truncated.all() == (t == 199) for t, (_, truncated) in enumerate(ends))  # ...and stops at 200


# -- env states, sub-env by sub-env -------------------------------------------------------------


def test_a_sub_envs_state_restores_its_future_the_others_untouched() -> None:
    from pycollect.envs.state import get_env_state, set_env_state, snapshot_refusal

    source, target = cartpole(), cartpole()
    source.reset_batch(_seeds(), None)
    target.reset_batch(_seeds(50), None)
    _steps(source, _actions(7))
    assert snapshot_refusal(source.views()[3]) is None
    set_env_state(target.views()[3], get_env_state(source.views()[3]))
    before = np.asarray(target.state.x).copy()
    actions = _actions(40, seed=1)  # long enough for sub-env 3 to end and reset from its key stream
    expected, got = _steps(source, actions), _steps(target, actions)
    for want, have in zip(expected, got, strict=True):
        np.testing.assert_array_equal(want[0][3], have[0][3])
        assert want[1][3] == have[1][3] and want[2][3] == have[2][3]
    assert any(step[2][3] for step in expected)  # it did end and reset
    target.reset_batch(_seeds(50), None)  # the other sub-envs were left where they were
    assert not np.array_equal(np.delete(before, 3), np.delete(np.asarray(source.state.x), 3))


def test_a_state_of_another_gymnax_env_is_refused_and_nothing_changes() -> None:
    from pycollect.envs.state import get_env_state, set_env_state

    acrobot = GymnaxBackend().make_batched("Acrobot-v1", {}, N)
    acrobot.reset_batch(_seeds(), None)
    env = cartpole()
    env.reset_batch(_seeds(), None)
    keys = np.asarray(env._keys).copy()
    with pytest.raises(
        EnvStateError, match=r"state of gymnax Acrobot-v1 cannot be restored into batched env gymnax CartPole-v1 of 8"
    ):
        set_env_state(env.views()[0], get_env_state(acrobot.views()[0]))
    np.testing.assert_array_equal(np.asarray(env._keys), keys)
    tampered = get_env_state(env.views()[0])
    part = tampered.parts[-1]
    part["obs"] = [np.zeros(6, np.float32)]
    with pytest.raises(EnvStateError, match=r"cannot hold this one: its obs rows are \[\(\(6,\)"):
        set_env_state(env.views()[1], tampered)
    np.testing.assert_array_equal(np.asarray(env._keys), keys)
