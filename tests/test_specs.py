"""Gymnasium spaces become fixed-shape fields; unsupported spaces fail with their name."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from pycollect import UnsupportedSpaceError, specs_from_spaces


def test_box_and_discrete() -> None:
    specs = specs_from_spaces(gym.spaces.Box(-1, 2, (3,), np.float32), gym.spaces.Discrete(4, start=1))
    (obs,) = specs.observation
    assert obs.key == ("observation",) and obs.shape == (3,) and obs.dtype == np.float32
    assert not obs.discrete and obs.low.tolist() == [-1, -1, -1] and obs.high.tolist() == [2, 2, 2]
    act = specs.action
    assert act.key == ("action",) and act.shape == () and act.dtype == np.int64 and act.discrete
    assert (int(act.low), int(act.high)) == (1, 4)


def test_dict_becomes_nested_keys_under_observation() -> None:
    space = gym.spaces.Dict({"a": gym.spaces.Box(0, 1, (2,)), "b": gym.spaces.Dict({"c": gym.spaces.MultiBinary(3)})})
    specs = specs_from_spaces(space, gym.spaces.MultiDiscrete([2, 5]))
    assert [s.key for s in specs.observation] == [("observation", "a"), ("observation", "b", "c")]
    assert specs.observation[1].dtype == np.int8 and specs.observation[1].shape == (3,)
    assert specs.action.shape == (2,) and specs.action.high.tolist() == [1, 4]


@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.Tuple((gym.spaces.Discrete(2),)),
        gym.spaces.Text(5),
        gym.spaces.Dict({"x": gym.spaces.Tuple((gym.spaces.Discrete(2),))}),
    ],
)
def test_unsupported_observation_space_is_named(space: gym.Space) -> None:
    with pytest.raises(UnsupportedSpaceError, match="unsupported space (Tuple|Text)"):
        specs_from_spaces(space, gym.spaces.Discrete(2))


def test_dict_action_space_is_rejected_by_name() -> None:
    with pytest.raises(UnsupportedSpaceError, match="Dict"):
        specs_from_spaces(gym.spaces.Discrete(2), gym.spaces.Dict({"a": gym.spaces.Discrete(2)}))


@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.Box(-1, 1, (2, 3), np.float32),
        gym.spaces.Box(np.array([-np.inf, 0.0]), np.array([0.0, np.inf]), dtype=np.float64),
        gym.spaces.Box(0, 255, (4,), np.uint8),
        gym.spaces.Discrete(3, start=-1),
        gym.spaces.MultiDiscrete([2, 7]),
        gym.spaces.MultiBinary(5),
    ],
)
def test_samples_and_examples_are_members_of_the_space(space: gym.Space) -> None:
    field = specs_from_spaces(space, gym.spaces.Discrete(2)).observation[0]
    samples = field.sample(np.random.default_rng(0), 64)
    assert samples.shape == (64, *field.shape) and samples.dtype == field.dtype
    for value in samples:
        assert space.contains(value.item() if isinstance(space, gym.spaces.Discrete) else value)
    example = field.example()
    assert space.contains(example.item() if isinstance(space, gym.spaces.Discrete) else example)
