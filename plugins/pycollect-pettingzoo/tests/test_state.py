"""MultiAgentEnv's state: a PettingZoo env restored continues byte for byte as it would have."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from pycollect import EnvStateError
from pycollect.envs.state import SnapshotEnv, check_snapshots, get_env_state, set_env_state, snapshot_refusal
from pycollect.testing.multiagent import DyingAgentsEnv
from pycollect_pettingzoo import PettingZoo, PettingZooBackend
from pycollect_pettingzoo.env import MultiAgentEnv

BACKEND = PettingZooBackend()


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
    if isinstance(value, dict):
        return ("dict", tuple((key, canonical(item)) for key, item in value.items()))
    if isinstance(value, list | tuple):
        return (type(value).__name__, tuple(canonical(item) for item in value))
    raise TypeError(f"cannot compare a {type(value).__name__}")


def play(env: MultiAgentEnv, actions: Sequence[Any]) -> list[Any]:
    record: list[Any] = []
    for action in actions:
        observation, reward, terminated, truncated, info = env.step(action)
        record.append(("step", observation, reward, terminated, truncated, info))
        if terminated or truncated:
            observation, info = env.reset()  # unseeded: the env's random stream goes on
            record.append(("reset", observation, info))
    return record


def random_actions(env: MultiAgentEnv, count: int, seed: int = 7) -> list[Any]:
    space = copy.deepcopy(env.action_space)
    space.seed(seed)
    return [space.sample() for _ in range(count)]


def assert_restores(make: Callable[[], MultiAgentEnv], *, before: int = 3, after: int = 20) -> Any:
    env = make()
    env.reset(seed=3)
    actions = random_actions(env, before + after)
    play(env, actions[:before])
    state = pickle.loads(pickle.dumps(BACKEND.get_state(env)))
    expected = play(env, actions[before:])
    assert sum(entry[0] == "reset" for entry in expected) >= 2, "the test should cross episode ends"
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


def spread(**kwargs: Any) -> Any:
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env(**{"max_cycles": 6, **kwargs})


def spread_aec(**kwargs: Any) -> Any:
    from mpe2 import simple_spread_v3

    return simple_spread_v3.env(max_cycles=6, **kwargs)


def test_mpe_simple_spread_restores() -> None:
    assert_restores(PettingZoo(spread))


def test_mpe_with_continuous_actions_restores() -> None:
    assert_restores(PettingZoo(spread, use_mask=True), after=14)
    assert_restores(lambda: PettingZoo(spread)(continuous_actions=True), after=14)


def test_an_adopted_aec_env_restores() -> None:
    assert_restores(lambda: BACKEND.adopt(spread_aec()), after=14)


@pytest.mark.parametrize(
    "scenario",
    ["simple_v3", "simple_adversary_v3", "simple_push_v3", "simple_reference_v3", "simple_tag_v3", "simple_crypto_v3"],
)
def test_other_mpe_scenarios_restore(scenario: str) -> None:
    import importlib

    module = importlib.import_module(f"mpe2.{scenario}")
    assert_restores(lambda: BACKEND.adopt(module.parallel_env(max_cycles=5)), after=12)


def test_restores_into_an_env_whose_episode_is_over() -> None:
    """The Parallel wrapper's live agents come back too: an ended episode has none."""
    make = PettingZoo(spread)
    env = make()
    env.reset(seed=0)
    actions = random_actions(env, 10)
    env.step(actions[0])
    state = env.get_state()
    expected = play(env, actions[1:])
    ended = make()
    ended.reset(seed=5)
    while not any(ended.step(actions[0])[2:4]):
        pass
    assert ended.env.agents == []
    ended.set_state(state)
    assert canonical(play(ended, actions[1:])) == canonical(expected)


def test_the_env_implements_the_protocol_and_says_what_it_holds() -> None:
    env = PettingZoo(spread)()
    assert isinstance(env, SnapshotEnv)
    assert snapshot_refusal(env) is None
    state = env.get_state()
    assert [layer for layer, _ in state["layers"]] == [
        "pettingzoo.utils.conversions.aec_to_parallel_wrapper",
        "pettingzoo.utils.wrappers.order_enforcing.OrderEnforcingWrapper",
        "pettingzoo.utils.wrappers.assert_out_of_bounds.AssertOutOfBoundsWrapper",
        "mpe2.simple_spread.simple_spread.raw_env",
    ]


def test_a_state_of_another_scenario_is_refused_naming_both() -> None:
    from mpe2 import simple_tag_v3

    tag = BACKEND.adopt(simple_tag_v3.parallel_env())
    with pytest.raises(EnvStateError, match=r"simple_spread.*simple_tag"):
        set_env_state(tag, get_env_state(PettingZoo(spread)()))


class SavedDyingAgents(DyingAgentsEnv):
    """A user's PettingZoo env implementing pycollect's protocol itself."""

    def get_state(self) -> Any:
        return copy.deepcopy(
            {"agents": self.agents, "t": self._t, "life": self._lifetime, "offset": self._offset, "rng": self._rng}
        )

    def set_state(self, state: Any) -> None:
        state = copy.deepcopy(state)
        self.agents, self._t, self._lifetime, self._offset = state["agents"], state["t"], state["life"], state["offset"]
        self._rng = state["rng"]


def test_a_pettingzoo_env_implementing_the_protocol_is_saved_by_it() -> None:
    assert_restores(PettingZoo(SavedDyingAgents, use_mask=True), after=40)


def test_an_env_pycollect_cannot_save_is_refused_by_name() -> None:
    env = PettingZoo(DyingAgentsEnv, use_mask=True)()
    why = snapshot_refusal(env)
    assert why is not None and "DyingAgentsEnv" in why and "get_state" in why
    with pytest.raises(EnvStateError, match=r"crash replay.*DyingAgentsEnv"):
        check_snapshots(env, "crash replay")
    with pytest.raises(EnvStateError, match="DyingAgentsEnv"):
        env.get_state()


def test_mpe_with_action_noise_is_refused() -> None:
    """MPE draws action noise from numpy's global random stream, which is not the env's to save."""
    env = PettingZoo(spread)()
    env.env.aec_env.env.env.world.agents[1].u_noise = 0.1
    why = snapshot_refusal(env)
    assert why is not None and "agent_1" in why and "u_noise" in why
