"""pycollect.testing's helpers for tests: the argmax MLP, batch digests and the env-state check.

The env-state check is shown to pass on envs whose state round-trips and to fail, naming the first
difference, on envs whose restore is broken in each of the ways it looks for.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from pycollect import ConfigError, ConformanceError
from pycollect.default_plugins.gymnasium_backend import GymnasiumBackend
from pycollect.testing import check_env_state, first_difference
from pycollect.testing.batches import batch_digest
from pycollect.testing.envs import CountingEnv
from pycollect.testing.policies import argmax_mlp

Step = tuple[np.ndarray, float, bool, bool, dict[str, Any]]  # what gymnasium's step returns
Reset = tuple[np.ndarray, dict[str, Any]]

# -- argmax_mlp -----------------------------------------------------------------------------------


def test_argmax_mlp_draws_the_layers_a_hand_built_mlp_would() -> None:
    torch.manual_seed(5)
    by_hand = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 2))
    torch.manual_seed(5)
    act, net = argmax_mlp(4, 64, 2)
    assert str(net) == str(by_hand)
    assert all(torch.equal(a, b) for a, b in zip(net.state_dict().values(), by_hand.state_dict().values(), strict=True))
    observation = torch.randn(7, 4)
    assert torch.equal(act({"observation": observation}), by_hand(observation).argmax(-1))


def test_argmax_mlp_of_one_layer_is_the_linear_itself() -> None:
    act, net = argmax_mlp(2, 3)
    assert isinstance(net, torch.nn.Linear) and list(net.state_dict()) == ["weight", "bias"]
    assert act({"observation": torch.zeros(5, 2)}).shape == (5,)


def test_argmax_mlp_needs_two_sizes() -> None:
    with pytest.raises(ConfigError, match="argmax_mlp"):
        argmax_mlp(4)


# -- batch_digest ---------------------------------------------------------------------------------


def _batch() -> TensorDict:
    return TensorDict(
        {"action": torch.arange(4), "next": {"reward": torch.ones(4), "done": torch.zeros(4, dtype=torch.bool)}},
        batch_size=[4],
    )


def test_batch_digest_names_every_leaf_and_is_equal_for_equal_batches() -> None:
    digest = batch_digest(_batch())
    assert sorted(digest) == ["action", "next/done", "next/reward"]
    assert batch_digest(_batch()) == digest


def test_batch_digest_changes_with_one_byte_of_one_leaf() -> None:
    changed = _batch()
    changed["next", "reward"][2] = 1.0000001
    digest, other = batch_digest(_batch()), batch_digest(changed)
    assert [key for key in digest if digest[key] != other[key]] == ["next/reward"]


def test_batch_digest_reads_non_contiguous_leaves() -> None:
    batch = _batch()
    batch["action"] = torch.arange(8)[::2]
    assert batch_digest(batch)["action"] == batch_digest(TensorDict({"action": torch.arange(0, 8, 2)}, [4]))["action"]


# -- first_difference -----------------------------------------------------------------------------


def test_first_difference_is_none_for_the_same_values() -> None:
    value = {"a": np.arange(3), "b": [1, 2.5, None, "x"], "c": (np.float32(1.5), True)}
    assert first_difference(value, copy.deepcopy(value)) is None


def test_first_difference_names_the_path_and_both_values() -> None:
    expected = {"a": np.arange(3), "b": [1, 2.5]}
    assert first_difference(expected, {"a": np.arange(3), "b": [1, 2.25]}) == "['b'][1]: 2.25 instead of 2.5"
    assert (
        first_difference(expected, {"b": [1, 2.5], "a": np.arange(3)})
        == "the mapping: keys ['b', 'a'] instead of ['a', 'b']"
    )


def test_first_difference_counts_dtypes_and_exact_bits() -> None:
    assert first_difference(np.zeros(2), np.zeros(2, np.float32)) is not None
    assert first_difference(0.1 + 0.2, 0.3) is not None
    assert first_difference(np.int64(1), 1) is not None


def test_first_difference_ignores_the_keys_it_is_told() -> None:
    assert (
        first_difference({"episode": {"r": 1.0, "t": 0.5}}, {"episode": {"r": 1.0, "t": 0.7}}, ignore_keys={"t"})
        is None
    )


def test_first_difference_refuses_what_it_cannot_compare_by_name() -> None:
    with pytest.raises(ConformanceError, match=r"\['x'\]: cannot compare a value of type object"):
        first_difference({"x": object()}, {"x": object()})


# -- check_env_state: envs that round-trip --------------------------------------------------------


def test_check_env_state_passes_envs_whose_state_round_trips() -> None:
    state = check_env_state(lambda: gym.make("CartPole-v1"))
    assert state.env.endswith("CartPoleEnv")
    check_env_state(lambda: CountingEnv(length=4), after=20, min_episodes=3)


def test_check_env_state_uses_the_backend_it_is_given() -> None:
    calls: list[str] = []

    class Watched(GymnasiumBackend):
        def get_state(self, env: Any) -> Any:
            calls.append("get")
            return super().get_state(env)

        def set_state(self, env: Any, state: Any) -> None:
            calls.append("set")
            super().set_state(env, state)

    backend = Watched()
    check_env_state(lambda: backend.make("CartPole-v1", {}), backend)
    assert calls == ["get"] + ["set"] * 4  # the same env, a fresh one twice, one never reset


# -- check_env_state: envs that do not ------------------------------------------------------------


class Walker(gym.Env[np.ndarray, int]):
    """A random walk that saves its position and its random stream, as docs/env-state.md's does."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float64)
    action_space: gym.Space[Any] = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.position = 0.0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Reset:
        super().reset(seed=seed)
        self.position = 0.0
        return np.array([self.position]), {}

    def step(self, action: int) -> Step:
        self.position += float(self.np_random.normal()) + int(action)
        return np.array([self.position]), -abs(self.position), abs(self.position) > 4, False, {"far": self.position}

    def get_state(self) -> Any:
        return {"position": self.position, "rng": copy.deepcopy(self.np_random.bit_generator.state)}

    def set_state(self, state: Any) -> None:
        self.position = state["position"]
        self.np_random.bit_generator.state = state["rng"]


def test_check_env_state_passes_the_walker() -> None:
    check_env_state(Walker)


def test_a_restore_that_forgets_the_random_stream_is_caught_at_the_first_step() -> None:
    class Forgetful(Walker):
        def set_state(self, state: Any) -> None:
            self.position = state["position"]  # the random stream goes on from wherever it was

    with pytest.raises(ConformanceError, match=r"restored into the same env: step 1 after the restore differs, "):
        check_env_state(Forgetful)


def test_the_message_names_the_field_and_both_values() -> None:
    class Offset(Walker):
        def set_state(self, state: Any) -> None:
            super().set_state(state)
            self.position += 0.5

    with pytest.raises(ConformanceError, match="step 1 after the restore differs, observation: ") as caught:
        check_env_state(Offset)
    assert re.search(r"observation: float64 array\(\[.*\]\) instead of float64 array\(\[", str(caught.value))


def test_an_info_difference_is_named_by_its_key() -> None:
    class Chatty(Walker):
        def step(self, action: int) -> Step:
            observation, reward, terminated, truncated, info = super().step(action)
            return observation, reward, terminated, truncated, {**info, "calls": id(self)}

    with pytest.raises(ConformanceError, match=r"a fresh env .*: step 1 after the restore differs, info\['calls'\]"):
        check_env_state(Chatty)
    check_env_state(Chatty, ignore_keys={"calls"})


def test_a_restore_that_works_once_per_env_is_caught() -> None:
    class Once(Walker):
        restores = 0

        def set_state(self, state: Any) -> None:
            super().set_state(state)
            self.restores += 1
            self.position += self.restores - 1  # off from the second restore on

    with pytest.raises(ConformanceError, match="restored into that env a second time"):
        check_env_state(Once)


def test_a_restore_that_needs_a_reset_first_is_caught_in_an_env_never_reset() -> None:
    class NeedsReset(Walker):
        step_size = 0.0  # set by reset and left out of the state

        def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Reset:
            self.step_size = 1.0
            return super().reset(seed=seed, options=options)

        def step(self, action: int) -> Step:
            return super().step(int(action) * int(self.step_size))

    with pytest.raises(ConformanceError, match="restored into a fresh env never reset: step"):
        check_env_state(NeedsReset)


def test_an_env_restored_after_its_episode_ended_is_checked_with_also_into() -> None:
    class Sticky(Walker):
        """Once an episode has ended, a restore does not bring the walk back."""

        ended = False

        def step(self, action: int) -> Step:
            result = super().step(action)
            self.ended = self.ended or result[2]
            return result

        def set_state(self, state: Any) -> None:
            super().set_state(state)
            if self.ended:
                self.position = 9.0

    def ended() -> Sticky:
        env = Sticky()
        env.reset(seed=0)
        while not env.step(1)[2]:
            pass
        return env

    with pytest.raises(ConformanceError, match=r"restored into also_into\[0\]'s env"):
        check_env_state(Sticky, before=1, after=4, min_episodes=0, also_into=[ended])


def test_an_env_that_refuses_snapshots_fails_the_check_saying_why() -> None:
    class Opaque(gym.Env[np.ndarray, int]):
        observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
        action_space: gym.Space[Any] = gym.spaces.Discrete(2)

    with pytest.raises(ConformanceError, match="refuses to be saved.*Opaque"):
        check_env_state(Opaque)


def test_a_state_that_does_not_pickle_fails_the_check() -> None:
    class Unpicklable(Walker):
        def get_state(self) -> Any:
            return {**super().get_state(), "callback": lambda: None}

    with pytest.raises(ConformanceError, match="the state must pickle"):
        check_env_state(Unpicklable)


def test_steps_that_cross_too_few_episode_ends_fail_the_check() -> None:
    with pytest.raises(ConformanceError, match="cross 0 episode ends, fewer than min_episodes=1"):
        check_env_state(lambda: CountingEnv(length=1000), after=10)
