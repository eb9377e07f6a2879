"""Gymnasium spaces become fixed-shape fields and back; unsupported spaces fail with their name."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from pycollect import ConfigError, UnsupportedSpaceError, specs_from_spaces
from pycollect.envs.specs import FieldSpec, spaces_from_specs


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


_OBSERVATIONS = [
    gym.spaces.Box(-1, 2, (3,), np.float32),
    gym.spaces.Box(0, 255, (4, 4), np.uint8),
    gym.spaces.Box(np.array([-np.inf, 0.0]), np.array([0.0, np.inf]), dtype=np.float64),
    gym.spaces.Discrete(3, start=-1),
    gym.spaces.MultiDiscrete([2, 7]),
    gym.spaces.MultiBinary(5),
    gym.spaces.Dict(
        {
            "a": gym.spaces.Box(0, 1, (2,)),
            "b": gym.spaces.Dict({"c": gym.spaces.MultiBinary(3), "d": gym.spaces.Discrete(4)}),
        }
    ),
    gym.spaces.Dict(
        {"x": gym.spaces.Box(-1, 1, (2,), np.float32), "y": gym.spaces.Dict({"z": gym.spaces.Box(0, 9, (), np.int32)})}
    ),
]
_ACTIONS = [
    gym.spaces.Discrete(4, start=1),
    gym.spaces.MultiDiscrete([3, 5]),
    gym.spaces.MultiBinary(2),
    gym.spaces.Box(-2, 2, (2,), np.float32),
]


def _boxes_only(space: gym.Space) -> bool:
    if isinstance(space, gym.spaces.Dict):
        return all(_boxes_only(sub) for sub in space.spaces.values())
    return isinstance(space, gym.spaces.Box)


def _same_fields(left: tuple[FieldSpec, ...], right: tuple[FieldSpec, ...]) -> None:
    assert left == right  # key, shape, dtype, discrete
    for a, b in zip(left, right, strict=True):
        np.testing.assert_array_equal(a.low, b.low)
        np.testing.assert_array_equal(a.high, b.high)


@pytest.mark.parametrize("observation_space", _OBSERVATIONS, ids=lambda space: type(space).__name__)
@pytest.mark.parametrize("action_space", _ACTIONS, ids=lambda space: type(space).__name__)
def test_spaces_from_specs_gives_back_the_fields(observation_space: gym.Space, action_space: gym.Space) -> None:
    specs = specs_from_spaces(observation_space, action_space)
    observation, action = spaces_from_specs(specs.observation, specs.action)
    again = specs_from_spaces(observation, action)
    _same_fields(again.observation, specs.observation)
    _same_fields((again.action,), (specs.action,))
    if _boxes_only(observation_space):
        assert observation == observation_space  # Box and Dict-of-Box spaces come back as they were
    if isinstance(action_space, gym.spaces.Box):
        assert action == action_space


def test_spaces_from_specs_makes_integer_boxes_of_discrete_fields() -> None:
    specs = specs_from_spaces(gym.spaces.Dict({"d": gym.spaces.Discrete(3, start=-1)}), gym.spaces.MultiBinary(2))
    observation, action = spaces_from_specs(specs.observation, specs.action)
    assert observation == gym.spaces.Dict({"d": gym.spaces.Box(-1, 1, (), np.int64)})
    assert action == gym.spaces.Box(0, 1, (2,), np.int8)
    assert spaces_from_specs(specs.observation) == (observation, None)


def _field(key: tuple[str, ...], dtype: type, path: tuple[str, ...] | None = None, low: float = -np.inf) -> FieldSpec:
    shape = (2,)
    return FieldSpec(key, shape, np.dtype(dtype), np.full(shape, low), np.full(shape, np.inf), False, "", path)


def test_fields_sit_at_their_paths() -> None:
    # TorchRL's keys: one field is the whole observation (path ()), several sit at their keys
    (alone,) = (_field(("pixels",), np.float32, ()),)
    observation, _ = spaces_from_specs([alone])
    assert observation == gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    two = [_field(("agent", "position"), np.float32, ("agent", "position")), _field(("step",), np.int64, ("step",))]
    observation, _ = spaces_from_specs(two)
    assert list(observation.spaces) == ["agent", "step"]
    assert observation["agent"]["position"].dtype == np.float32
    # Integer bounds saturate at the dtype's range (a cast of float(2**63 - 1) would wrap around)
    step = observation["step"]
    assert (step.low.tolist(), step.high.tolist()) == ([np.iinfo(np.int64).min] * 2, [np.iinfo(np.int64).max] * 2)
    # Action leaves sit at their path (None: their key), as EnvSpecs.env_action puts them
    leaves = [_field(("red", "action"), np.float32, ("red",)), _field(("blue", "action"), np.uint8, low=0)]
    _, action = spaces_from_specs(two, leaves)
    assert list(action.spaces) == ["red", "blue"] and list(action["blue"].spaces) == ["action"]
    assert action["blue"]["action"].high.tolist() == [255, 255]


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ([], "no observation fields"),
        ([_field(("a",), np.float32, ()), _field(("b",), np.float32, ("b",))], "a, b: one of them is the whole"),
        ([_field(("a",), np.float32, ("x",)), _field(("b",), np.float32, ("x",))], "a, b: b sits where another"),
        ([_field(("a",), np.float32, ("x",)), _field(("b",), np.float32, ("x", "y"))], "a, b: b sits where another"),
    ],
)
def test_fields_whose_places_clash_are_refused_by_name(fields: list[FieldSpec], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        spaces_from_specs(fields)
