"""MultiAgentEnv's state: a PettingZoo env restored continues byte for byte as it would have."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from pycollect import EnvStateError
from pycollect.envs.state import SnapshotEnv, check_snapshots, get_env_state, set_env_state, snapshot_refusal
from pycollect.testing import check_env_state
from pycollect.testing.multiagent import DyingAgentsEnv
from pycollect_pettingzoo import PettingZoo, PettingZooBackend
from pycollect_pettingzoo.env import MultiAgentEnv

BACKEND = PettingZooBackend()


def spread(**kwargs: Any) -> Any:
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env(**{"max_cycles": 6, **kwargs})


def spread_aec(**kwargs: Any) -> Any:
    from mpe2 import simple_spread_v3

    return simple_spread_v3.env(max_cycles=6, **kwargs)


def test_mpe_simple_spread_restores() -> None:
    check_env_state(PettingZoo(spread), BACKEND, before=3, after=20, min_episodes=2)


def test_mpe_with_continuous_actions_restores() -> None:
    check_env_state(PettingZoo(spread, use_mask=True), BACKEND, before=3, after=14, min_episodes=2)
    check_env_state(lambda: PettingZoo(spread)(continuous_actions=True), BACKEND, before=3, after=14, min_episodes=2)


def test_an_adopted_aec_env_restores() -> None:
    check_env_state(lambda: BACKEND.adopt(spread_aec()), BACKEND, before=3, after=14, min_episodes=2)


@pytest.mark.parametrize(
    "scenario",
    ["simple_v3", "simple_adversary_v3", "simple_push_v3", "simple_reference_v3", "simple_tag_v3", "simple_crypto_v3"],
)
def test_other_mpe_scenarios_restore(scenario: str) -> None:
    import importlib

    module = importlib.import_module(f"mpe2.{scenario}")
    check_env_state(
        lambda: BACKEND.adopt(module.parallel_env(max_cycles=5)), BACKEND, before=3, after=12, min_episodes=2
    )


def test_restores_into_an_env_whose_episode_is_over() -> None:
    """The Parallel wrapper's live agents come back too: an ended episode has none."""
    make = PettingZoo(spread)

    def ended() -> MultiAgentEnv:
        env = make()
        env.reset(seed=5)
        env.action_space.seed(7)
        action = env.action_space.sample()
        while not any(env.step(action)[2:4]):
            pass
        assert env.env.agents == []
        return env

    check_env_state(make, BACKEND, seed=0, before=1, after=20, min_episodes=2, also_into=[ended])


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
    check_env_state(PettingZoo(SavedDyingAgents, use_mask=True), BACKEND, before=3, after=40, min_episodes=2)


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
