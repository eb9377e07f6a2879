"""Env state snapshots (pycollect.envs.state): a restored env's future is the snapshot's, byte for byte.

Each supported env goes through :func:`pycollect.testing.check_env_state`: reset with a seed,
stepped a little, snapshot, then stepped on (through episode ends and resets) while everything it
returns is recorded. The snapshot, pickled and unpickled, is restored into the same env, into a
fresh one reset with another seed and into one never reset; the same actions must give the same
observations, rewards, flags and infos.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from pycollect import ConfigError, EnvStateError
from pycollect.default_plugins.gymnasium_backend import GymnasiumBackend
from pycollect.envs import EnvBackend
from pycollect.envs.state import (
    FORMAT,
    EnvState,
    SnapshotEnv,
    check_snapshots,
    get_env_state,
    rng_state,
    set_env_state,
    set_rng_state,
    snapshot_refusal,
)
from pycollect.testing import check_env_state, first_difference
from pycollect.testing.envs import CountingEnv, DictObsEnv, SpacesEnv

Maker = Callable[[], Any]


# -- gymnasium's own envs ----------------------------------------------------------------


CLASSIC = {
    "CartPole-v1": {},
    "Pendulum-v1": {"max_episode_steps": 20},
    "MountainCar-v0": {"max_episode_steps": 15},
    "MountainCarContinuous-v0": {"max_episode_steps": 15},
    "Acrobot-v1": {"max_episode_steps": 15},
    "FrozenLake-v1": {},
    "Taxi-v4": {"max_episode_steps": 15},
    "CliffWalking-v1": {"max_episode_steps": 15},
    "Blackjack-v1": {},
}


@pytest.mark.parametrize("env_id", sorted(CLASSIC))
def test_gymnasium_envs_restore(env_id: str) -> None:
    check_env_state(lambda: gym.make(env_id, **CLASSIC[env_id]))


def test_a_never_reset_env_restores_and_so_does_a_fresh_one() -> None:
    """A probe env (built, not reset) has a state too, and restoring it makes the same first episode."""
    probe = gym.make("CartPole-v1")
    probe.reset(seed=11)
    state = get_env_state(gym.make("CartPole-v1"))  # never reset
    set_env_state(probe, state)
    with pytest.raises(gym.error.ResetNeeded):  # OrderEnforcing's flag came back too
        probe.step(0)
    fresh = gym.make("CartPole-v1")
    set_env_state(fresh, get_env_state(probe))
    assert first_difference(fresh.reset(seed=5), probe.reset(seed=5)) is None


def test_the_random_stream_is_restored_with_its_seed() -> None:
    env = gym.make("CartPole-v1")
    env.reset(seed=21)
    state = get_env_state(env)
    draws = env.unwrapped.np_random.random(4)
    fresh = gym.make("CartPole-v1")
    fresh.reset(seed=1)
    set_env_state(fresh, state)
    assert fresh.unwrapped.np_random_seed == 21
    np.testing.assert_array_equal(fresh.unwrapped.np_random.random(4), draws)


# -- wrappers ------------------------------------------------------------------------------


def counting(length: int = 1000) -> gym.Env[Any, Any]:
    return CountingEnv(length=length)


def test_time_limit_truncates_at_the_same_step_after_a_restore() -> None:
    env = gym.wrappers.TimeLimit(counting(), max_episode_steps=7)
    env.reset(seed=0)
    for _ in range(3):
        env.step(0)
    state = get_env_state(env)
    fresh = gym.wrappers.TimeLimit(counting(), max_episode_steps=7)
    fresh.reset(seed=9)
    set_env_state(fresh, state)
    truncated = [fresh.step(0)[3] for _ in range(4)]
    assert truncated == [False, False, False, True]  # steps 4..7 of the episode


def test_episode_statistics_carry_the_episode_so_far() -> None:
    def make() -> Any:
        return gym.wrappers.RecordEpisodeStatistics(counting(length=6))

    env = make()
    env.reset(seed=0)
    for action in (0, 1, 2):
        env.step(action)
    state = get_env_state(env)
    *_, info = [env.step(0) for _ in range(3)][-1]  # the episode's last step
    uninterrupted = info["episode"]
    fresh = make()
    fresh.reset(seed=5)
    set_env_state(fresh, state)
    *_, info = [fresh.step(0) for _ in range(3)][-1]
    assert (info["episode"]["r"], info["episode"]["l"]) == (uninterrupted["r"], uninterrupted["l"]) == (21.0, 6)
    assert 0 <= info["episode"]["t"] < 60  # the episode's time so far, carried over (not a clock of another process)
    assert list(fresh.return_queue) == list(env.return_queue) == [21.0]
    # Everything else is the same, byte for byte, but the wall-clock time.
    check_env_state(make, after=30, min_episodes=3, ignore_keys={"t"})


def test_frame_stack_restores_its_frames() -> None:
    for padding in ("reset", "zero"):
        check_env_state(lambda p=padding: gym.wrappers.FrameStackObservation(counting(length=9), 4, padding_type=p))


def test_stateful_gymnasium_wrappers_restore() -> None:
    def make() -> Any:
        env = gym.make("CartPole-v1")
        env = gym.wrappers.NormalizeObservation(env)
        env = gym.wrappers.NormalizeReward(env)
        env = gym.wrappers.DelayObservation(env, 2)
        env = gym.wrappers.TimeAwareObservation(env)
        env = gym.wrappers.FrameStackObservation(env, 3)
        env = gym.wrappers.StickyAction(env, 0.5)
        env = gym.wrappers.Autoreset(env)
        return gym.wrappers.RecordEpisodeStatistics(env)

    check_env_state(make, ignore_keys={"t"})


def test_stateless_wrappers_pass_through() -> None:
    def make() -> Any:
        env = gym.make("Pendulum-v1", max_episode_steps=12)
        env = gym.wrappers.RescaleAction(env, np.float32(-1.0), np.float32(1.0))
        env = gym.wrappers.ClipAction(env)
        env = gym.wrappers.TransformObservation(env, lambda o: o * 2, env.observation_space)
        env = gym.wrappers.DtypeObservation(env, np.float32)
        env = gym.wrappers.ClipReward(env, np.float32(-1.0), np.float32(1.0))
        return gym.wrappers.MaxAndSkipObservation(env, 2)

    state = check_env_state(make, after=30)
    assert state.layers[0].endswith("MaxAndSkipObservation")


class ScaledReward(gym.RewardWrapper[Any, Any]):
    """A user's wrapper without attributes of its own: nothing to save."""

    def reward(self, reward: Any) -> Any:
        return reward * 2


class CountedSteps(gym.Wrapper[Any, Any, Any, Any]):
    """A user's wrapper that keeps a counter and says nothing about it."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self.steps_seen = 0

    def step(self, action: Any) -> Any:
        self.steps_seen += 1
        return self.env.step(action)


class SavedCountedSteps(CountedSteps):
    """The same wrapper, saving its own counter through the protocol (the env inside is saved by pycollect)."""

    def get_state(self) -> Any:
        return self.steps_seen

    def set_state(self, state: Any) -> None:
        self.steps_seen = state


def test_a_users_stateless_wrapper_passes_through() -> None:
    assert snapshot_refusal(ScaledReward(gym.make("CartPole-v1"))) is None
    check_env_state(lambda: ScaledReward(gym.make("CartPole-v1")))


def test_a_users_wrapper_with_attributes_is_refused_by_name() -> None:
    env = CountedSteps(gym.make("CartPole-v1"))
    why = snapshot_refusal(env)
    assert why is not None and "CountedSteps" in why and "steps_seen" in why and "get_state" in why
    with pytest.raises(EnvStateError, match="CountedSteps"):
        get_env_state(env)


def test_a_wrapper_implementing_the_protocol_saves_its_own_part() -> None:
    env = SavedCountedSteps(gym.make("CartPole-v1"))
    assert snapshot_refusal(env) is None
    env.reset(seed=0)
    for action in (0, 1, 0):
        env.step(action)
    state = get_env_state(env)
    fresh = SavedCountedSteps(gym.make("CartPole-v1"))
    set_env_state(fresh, state)
    assert fresh.steps_seen == 3
    check_env_state(lambda: SavedCountedSteps(gym.make("CartPole-v1")))


def test_a_subclass_of_a_known_wrapper_that_adds_attributes_is_refused() -> None:
    class NotedTimeLimit(gym.wrappers.TimeLimit[Any, Any]):
        def __init__(self, env: Any) -> None:
            super().__init__(env, 10)
            self.note = "mine"

    why = snapshot_refusal(NotedTimeLimit(gym.make("CartPole-v1")))
    assert why is not None and "NotedTimeLimit" in why and "note" in why


def test_rendering_wrappers_are_refused_by_name() -> None:
    env = gym.wrappers.RenderCollection(gym.make("CartPole-v1", render_mode="rgb_array"))
    why = snapshot_refusal(env)
    assert why is not None and "RenderCollection" in why and "frame_list" in why


# -- the protocol, refusals and mismatches ------------------------------------------------


class Walker(gym.Env[np.ndarray, int]):
    """A user's env implementing the protocol: a random walk whose steps come from its seeded stream."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float64)
        self.action_space = gym.spaces.Discrete(2)
        self.position = 0.0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.position = 0.0
        return np.array([self.position]), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.position += float(self.np_random.normal()) + action
        return np.array([self.position]), -abs(self.position), abs(self.position) > 4, False, {}

    def get_state(self) -> Any:
        return {"position": self.position, "rng": self.np_random.bit_generator.state}

    def set_state(self, state: Any) -> None:
        self.position = state["position"]
        self.np_random.bit_generator.state = state["rng"]


class Opaque(gym.Env[np.ndarray, int]):
    """An env pycollect knows nothing about."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)


def test_a_users_env_implementing_the_protocol_restores_under_wrappers() -> None:
    assert isinstance(Walker(), SnapshotEnv)
    assert not isinstance(Opaque(), SnapshotEnv)
    check_env_state(lambda: gym.wrappers.TimeLimit(gym.wrappers.OrderEnforcing(Walker()), 9), after=40)


def test_a_protocol_env_may_refuse_itself() -> None:
    """An env class wrapping simulators of several kinds says which of its instances cannot be saved."""

    class Remote(Walker):
        def snapshot_refusal(self) -> str | None:
            return "env Remote steps a simulator on another machine" if self.position > 100 else None

    env = gym.wrappers.TimeLimit(Remote(), 5)
    assert snapshot_refusal(env) is None
    env.unwrapped.position = 101.0
    why = snapshot_refusal(env)
    assert why is not None and why.startswith("env Remote steps a simulator on another machine")
    with pytest.raises(EnvStateError, match="another machine"):
        get_env_state(env)


def test_an_unknown_env_is_refused_naming_it_and_the_protocol() -> None:
    env = gym.wrappers.TimeLimit(Opaque(), 5)
    why = snapshot_refusal(env)
    assert why is not None
    assert "Opaque" in why and "get_state" in why and "set_state" in why
    assert snapshot_refusal(object()) is not None and "object" in str(snapshot_refusal(object()))
    with pytest.raises(EnvStateError, match="Opaque"):
        set_env_state(env, get_env_state(gym.make("CartPole-v1")))


def test_check_snapshots_names_the_feature_and_the_culprit() -> None:
    check_snapshots(gym.make("CartPole-v1"), "crash replay")  # no error
    with pytest.raises(EnvStateError, match=r"crash replay.*Opaque") as caught:
        check_snapshots(Opaque(), "crash replay")
    assert isinstance(caught.value, ConfigError)


def test_a_cartpole_state_given_to_pendulum_is_refused_naming_both() -> None:
    cartpole = gym.make("CartPole-v1")
    cartpole.reset(seed=0)
    pendulum = gym.make("Pendulum-v1")
    pendulum.reset(seed=0)
    before = get_env_state(pendulum).parts  # a copy: it shares nothing with the env
    with pytest.raises(EnvStateError, match=r"CartPoleEnv.*PendulumEnv"):
        set_env_state(pendulum, get_env_state(cartpole))
    assert first_difference(before, get_env_state(pendulum).parts) is None  # nothing was half-restored


def test_an_env_refusing_in_its_own_set_state_leaves_the_wrappers_as_they_were() -> None:
    class Strict(Walker):
        def set_state(self, state: Any) -> None:
            if not isinstance(state, dict):
                raise EnvStateError(f"not a Strict state: {state!r}")
            super().set_state(state)

    env = gym.wrappers.TimeLimit(Strict(), 50)
    env.reset(seed=0)
    env.step(0)
    bad = EnvState(FORMAT, get_env_state(env).layers, ({"_elapsed_steps": 40}, "garbage"))
    with pytest.raises(EnvStateError, match="not a Strict state"):
        set_env_state(env, bad)
    assert env._elapsed_steps == 1


def test_a_state_under_other_wrappers_is_refused() -> None:
    state = get_env_state(gym.make("CartPole-v1"))
    with pytest.raises(EnvStateError, match="RecordEpisodeStatistics"):
        set_env_state(gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1")), state)


def test_a_state_of_another_format_or_not_a_state_is_refused() -> None:
    env = gym.make("CartPole-v1")
    state = get_env_state(env)
    old = EnvState(FORMAT + 1, state.layers, state.parts)
    with pytest.raises(EnvStateError, match=rf"format {FORMAT + 1}.*{FORMAT}"):
        set_env_state(env, old)
    with pytest.raises(EnvStateError, match="dict"):
        set_env_state(env, {"state": 1})


def test_the_state_names_its_env_and_layers() -> None:
    state = get_env_state(gym.make("CartPole-v1"))
    assert state.format == FORMAT
    assert state.env.endswith("CartPoleEnv")
    assert [layer.rsplit(".", 1)[-1] for layer in state.layers] == [
        "TimeLimit",
        "OrderEnforcing",
        "PassiveEnvChecker",
        "CartPoleEnv",
    ]
    assert "CartPoleEnv" in repr(state)


def test_random_stream_helpers() -> None:
    generator = np.random.default_rng(4)
    saved = rng_state(generator)
    first = generator.random(3)
    other = np.random.default_rng(99)
    assert set_rng_state(other, saved) is other  # moved in place
    np.testing.assert_array_equal(other.random(3), first)
    legacy = np.random.RandomState(1)
    saved = rng_state(legacy)
    first = legacy.rand(3)
    np.testing.assert_array_equal(set_rng_state(np.random.RandomState(2), saved).rand(3), first)
    fresh = set_rng_state(None, rng_state(np.random.default_rng(4)))
    assert isinstance(fresh, np.random.Generator)
    assert rng_state(None) is None and set_rng_state(np.random.default_rng(), None) is None


# -- through the env backend --------------------------------------------------------------


def test_the_backend_methods_default_to_these_functions() -> None:
    backend = GymnasiumBackend()
    check_env_state(lambda: backend.make("CartPole-v1", {}), backend)
    assert backend.snapshot_refusal(Opaque()) == snapshot_refusal(Opaque())


def test_a_backend_can_override_them() -> None:
    class Counting(EnvBackend):
        name = "counting-test"

        def make(self, target: Any, env_kwargs: Any) -> Any:
            return CountingEnv()

        def snapshot_refusal(self, env: Any) -> str | None:
            return "this backend's envs live on another machine"

    backend = Counting()
    env = backend.make(None, {})
    assert backend.snapshot_refusal(env) == "this backend's envs live on another machine"
    assert EnvBackend.snapshot_refusal(backend, env) is None


# -- pycollect's own test envs ------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: CountingEnv(length=4),
        DictObsEnv,
        lambda: SpacesEnv("dict", "multidiscrete"),
        lambda: SpacesEnv("nested", "box"),
        lambda: gym.wrappers.TimeLimit(SpacesEnv("box", "discrete", max_length=9), 5),
    ],
    ids=["counting", "dict-obs", "spaces-dict", "spaces-nested", "spaces-time-limit"],
)
def test_pycollect_test_envs_restore(make: Maker) -> None:
    check_env_state(make, after=30)


# -- MuJoCo through gymnasium ----------------------------------------------------------------

# gymnasium's MuJoCo envs import imageio (their renderer) when they load.
MUJOCO = importlib.util.find_spec("mujoco") is not None and importlib.util.find_spec("imageio") is not None


@pytest.fixture
def in_tmp_path(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """MuJoCo writes MUJOCO_LOG.TXT into the working directory when a model warns (HalfCheetah's does)."""
    monkeypatch.chdir(tmp_path)


@pytest.mark.skipif(not MUJOCO, reason="gymnasium's MuJoCo envs need mujoco and imageio (gymnasium[mujoco])")
@pytest.mark.parametrize("env_id", ["HalfCheetah-v5", "Humanoid-v5", "Reacher-v5"])
@pytest.mark.usefixtures("in_tmp_path")
def test_mujoco_envs_restore(env_id: str) -> None:
    check_env_state(lambda: gym.make(env_id, max_episode_steps=10), before=4, after=25)


@pytest.mark.skipif(not MUJOCO, reason="gymnasium's MuJoCo envs need mujoco and imageio (gymnasium[mujoco])")
@pytest.mark.usefixtures("in_tmp_path")
def test_a_mujoco_state_of_another_model_is_refused() -> None:
    state = get_env_state(gym.make("HalfCheetah-v5"))
    with pytest.raises(EnvStateError, match="HalfCheetahEnv.*HopperEnv"):
        set_env_state(gym.make("Hopper-v5"), state)


def test_a_plain_mujoco_env_is_refused_unless_it_implements_the_protocol() -> None:
    class Hinge(gym.Env[np.ndarray, np.ndarray]):
        def __init__(self) -> None:
            self.model = object()
            self.data = object()
            self.observation_space = gym.spaces.Box(-1, 1, (1,))
            self.action_space = gym.spaces.Box(-1, 1, (1,))

    why = snapshot_refusal(Hinge())
    assert why is not None and "Hinge" in why and "get_state" in why


# -- ALE -------------------------------------------------------------------------------------


def sticky_pong(**kwargs: Any) -> Any:
    """ALE Pong with sticky actions pycollect can save: gymnasium's StickyAction over ALE without its own."""
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", repeat_action_probability=0.0, **kwargs)
    return gym.wrappers.StickyAction(env, repeat_action_probability=0.25)


def pong(max_episode_steps: int = 120) -> Any:
    """ALE Pong as pycollect's Atari bench builds it (benches/atari_env.py), with a short time limit."""
    env = sticky_pong(frameskip=1, obs_type="grayscale", max_episode_steps=max_episode_steps)
    env = gym.wrappers.AtariPreprocessing(env, frame_skip=4, screen_size=84, grayscale_obs=True, noop_max=30)
    return gym.wrappers.FrameStackObservation(env, stack_size=4)


def test_pong_restores() -> None:
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    check_env_state(lambda: sticky_pong(max_episode_steps=20), before=4, after=30)


def test_ales_own_sticky_actions_are_refused_by_name() -> None:
    """ALE keeps the action a sticky frame repeats outside cloneState: a restored env would repeat another."""
    pytest.importorskip("ale_py")
    import ale_py

    gym.register_envs(ale_py)
    why = snapshot_refusal(gym.make("ALE/Pong-v5"))  # the -v5 default: repeat_action_probability=0.25
    assert why is not None and "repeat_action_probability=0.25" in why and "StickyAction" in why
    with pytest.raises(EnvStateError, match="sticky actions"):
        get_env_state(gym.make("ALE/Pong-v5"))


def test_why_ales_sticky_actions_cannot_be_restored() -> None:
    """The refusal's reason, shown: ALE's state restored into another env steps differently.

    Restored into an env whose last action was another, a frame stepped next repeats (with
    probability 0.25) that env's own last action, not the saved env's; so some of 20 restores
    differ from the env they were taken of.
    """
    pytest.importorskip("ale_py")
    import ale_py

    gym.register_envs(ale_py)
    differed = 0
    for trial in range(20):
        actions = np.random.default_rng(trial).integers(0, 6, 110)
        first, second = (gym.make("ALE/Pong-v5", frameskip=1, obs_type="ram") for _ in range(2))
        first.reset(seed=trial)
        for action in actions[:50]:
            first.step(action)
        saved = first.unwrapped.ale.cloneState(include_rng=True)
        second.reset(seed=trial + 100)
        second.step((trial + 1) % 6)
        second.unwrapped.ale.restoreState(saved)
        runs = [[env.step(action)[0].tobytes() for action in actions[50:]] for env in (first, second)]
        differed += runs[0] != runs[1]
    assert differed


def test_pong_with_atari_preprocessing_and_frame_stack_restores() -> None:
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    state = check_env_state(pong, before=6, after=40, min_episodes=1)
    assert [layer.rsplit(".", 1)[-1] for layer in state.layers][:2] == ["FrameStackObservation", "AtariPreprocessing"]


def test_atari_preprocessing_buffers_go_with_it() -> None:
    """An episode that ends inside a frame skip is observed from the buffers of the step before the snapshot."""
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")

    def make() -> Any:
        import ale_py

        gym.register_envs(ale_py)
        # No no-ops at reset: the 22-frame limit falls on the 2nd frame of the 6th step, after the snapshot.
        env = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0, max_episode_steps=22)
        return gym.wrappers.AtariPreprocessing(env, frame_skip=4, noop_max=0)

    check_env_state(make, before=5, after=12, min_episodes=2)


def test_an_ale_state_of_another_game_is_refused() -> None:
    pytest.importorskip("ale_py")
    import ale_py

    gym.register_envs(ale_py)
    state = get_env_state(gym.make("ALE/Pong-v5", repeat_action_probability=0.0))
    with pytest.raises(EnvStateError, match=r"pong.*breakout"):
        set_env_state(gym.make("ALE/Breakout-v5", repeat_action_probability=0.0), state)


# -- what cannot be saved -----------------------------------------------------------------


def test_box2d_envs_are_refused_by_name() -> None:
    """Box2D's worlds keep contacts and solver state that Python cannot read back."""

    class LunarLander(Opaque):
        pass

    LunarLander.__module__ = "gymnasium.envs.box2d.lunar_lander"
    why = snapshot_refusal(gym.wrappers.TimeLimit(LunarLander(), 10))
    assert why is not None and "LunarLander" in why and "Box2D" in why


def test_an_env_that_is_not_a_gymnasium_env_is_refused() -> None:
    why = snapshot_refusal(gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")]))
    assert why is not None and "SyncVectorEnv" in why
