"""pycollect's vector env against gymnasium's SyncVectorEnv, step for step, and its bad-input errors.

The comparisons run the same env functions (``pycollect.testing.envs.SpacesEnv``: short
seeded episodes, infos of many types, every space kind) with the same seeds and actions
through both, in each autoreset mode, and require everything returned to be equal: the
observations (structure, dtypes, values), rewards, flags and infos (keys, values, dtypes,
``_key`` masks, ``final_obs``/``final_info``). The ``backend`` fixture says where pycollect
steps the envs (in this process, or in a worker process), so the same comparisons run for both.
"""

from __future__ import annotations

import functools
import pickle
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import pycollect
from pycollect import (
    ActionError,
    ConfigError,
    EnvOutputError,
    UnknownEnvError,
    UnsupportedSpaceError,
    VectorEnvClosedError,
    WorkerCrashedError,
)
from pycollect._steps.group import EnvGroup
from pycollect._steps.infos import InfoMerger
from pycollect._steps.spaces import ActionChecker, SpaceLayout, split_rows
from pycollect.testing.envs import CountingEnv, SpacesEnv
from pycollect.vector import VectorEnv, make_vec

MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]
# Every space kind appears as an observation and as an action space.
PAIRS = [
    ("box", "discrete"),
    ("discrete", "box"),
    ("multidiscrete", "multibinary"),
    ("multibinary", "multidiscrete"),
    ("dict", "dict"),
    ("tuple", "tuple"),
    ("nested", "nested"),
]


@pytest.fixture(params=["inprocess", "workers"])
def backend(request: pytest.FixtureRequest) -> dict[str, Any]:
    """make_vec's arguments that choose where the envs step: in this process, or in one worker process.

    One worker, so that every env count the tests use splits; tests/test_vector_workers.py
    compares with several workers, and covers what only processes do (crashes, restarts).
    ``restart="never"``: an env error is a crash, raised at once, not a restart.
    """
    return {"inprocess": {"num_workers": 0}, "workers": {"num_workers": 1, "restart": "never"}}[request.param]


def assert_same(ours: Any, theirs: Any, where: str = "value") -> None:
    """Equal values of equal structure; arrays of equal dtype and shape.

    A scalar leaf of a final observation is a numpy scalar in pycollect's (read back from its
    array) where gymnasium keeps the Python int the env returned: values must be equal.
    """
    if isinstance(theirs, dict):
        assert isinstance(ours, dict), f"{where}: {type(ours).__name__}, not a dict"
        assert set(ours) == set(theirs), f"{where}: keys {list(ours)} != {list(theirs)}"
        for key in theirs:
            assert_same(ours[key], theirs[key], f"{where}[{key!r}]")
    elif isinstance(theirs, tuple):
        assert isinstance(ours, tuple) and len(ours) == len(theirs), f"{where}: {ours!r} != {theirs!r}"
        for n, (mine, other) in enumerate(zip(ours, theirs, strict=True)):
            assert_same(mine, other, f"{where}[{n}]")
    elif isinstance(theirs, np.ndarray):
        assert isinstance(ours, np.ndarray), f"{where}: {type(ours).__name__}, not an array"
        assert (ours.dtype, ours.shape) == (theirs.dtype, theirs.shape), f"{where}: {ours!r} != {theirs!r}"
        if theirs.dtype == object:
            for n, (mine, other) in enumerate(zip(ours, theirs, strict=True)):
                assert_same(mine, other, f"{where}[{n}]")
        else:
            np.testing.assert_array_equal(ours, theirs, err_msg=where)
    else:
        assert ours == theirs, f"{where}: {ours!r} != {theirs!r}"
        assert isinstance(ours, type(theirs) | np.generic), f"{where}: {type(ours)} for {type(theirs)}"


def _pair(
    obs: str, act: str, mode: AutoresetMode, backend: dict[str, Any], num_envs: int = 4
) -> tuple[VectorEnv, SyncVectorEnv]:
    kwargs = {"observation": obs, "action": act}
    theirs = SyncVectorEnv([functools.partial(SpacesEnv, **kwargs)] * num_envs, autoreset_mode=mode)
    ours = make_vec(SpacesEnv, num_envs, autoreset_mode=mode, env_kwargs=kwargs, **backend)
    return ours, theirs


def _run(ours: VectorEnv, theirs: SyncVectorEnv, steps: int, seed: int) -> dict[str, int]:
    """Drive both the same way; return how often things happened, to show the test saw them."""
    seen = {"ended": 0, "final_obs": 0, "masked_resets": 0, "infos": 0}
    assert_same(ours.reset(seed=seed), theirs.reset(seed=seed), "reset")
    theirs.action_space.seed(seed)
    ended = np.zeros(ours.num_envs, bool)
    for step in range(steps):
        if step == steps // 2:  # a reset mid-run: a seed list and options reach every env
            seeds: list[int | None] = [seed + 10, None, seed + 12, None][: ours.num_envs]
            assert_same(ours.reset(seed=seeds, options={"x": 1}), theirs.reset(seed=seeds, options={"x": 1}), "reset")
            ended[:] = False
        if ours.autoreset_mode is AutoresetMode.DISABLED and ended.any():
            got = ours.reset(options={"reset_mask": ended.copy(), "y": 2})
            assert_same(got, theirs.reset(options={"reset_mask": ended.copy(), "y": 2}), f"masked reset {step}")
            seen["masked_resets"] += 1
        actions = theirs.action_space.sample()
        result = ours.step(actions)
        assert_same(result, theirs.step(actions), f"step {step}")
        assert ours.observation_space.contains(result[0])
        ended = result[2] | result[3]
        seen["ended"] += int(ended.sum())
        seen["final_obs"] += int(result[4].get("_final_obs", np.zeros(1, bool)).sum())
        seen["infos"] += bool(result[4])
    return seen


@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.name)
@pytest.mark.parametrize(("obs", "act"), PAIRS, ids=[f"{o}-{a}" for o, a in PAIRS])
def test_step_for_step_equal_to_sync_vector_env(
    obs: str, act: str, mode: AutoresetMode, backend: dict[str, Any]
) -> None:
    ours, theirs = _pair(obs, act, mode, backend)
    try:
        assert ours.single_observation_space == theirs.single_observation_space
        assert ours.single_action_space == theirs.single_action_space
        assert ours.observation_space == theirs.observation_space
        assert ours.action_space == theirs.action_space
        assert ours.metadata["autoreset_mode"] is mode and ours.num_envs == 4
        seen = _run(ours, theirs, steps=40, seed=123)
    finally:
        ours.close()
        theirs.close()
    assert seen["ended"] >= 20 and seen["infos"] >= 20, seen  # episodes of 2 to 6 steps ended, infos came
    if mode is AutoresetMode.SAME_STEP:
        assert seen["final_obs"] == seen["ended"], seen
    if mode is AutoresetMode.DISABLED:
        assert seen["masked_resets"] >= 5, seen


def test_equal_with_one_env_and_with_odd_seeds(backend: dict[str, Any]) -> None:
    for num_envs, seed in ((1, 0), (3, 2**31)):
        ours, theirs = _pair("dict", "box", AutoresetMode.NEXT_STEP, backend, num_envs=num_envs)
        try:
            _run(ours, theirs, steps=25, seed=seed)
        finally:
            ours.close()
            theirs.close()


def test_call_get_attr_set_attr_as_sync_vector_env(backend: dict[str, Any]) -> None:
    ours, theirs = _pair("box", "discrete", AutoresetMode.NEXT_STEP, backend, num_envs=3)
    try:
        for env in (ours, theirs):
            env.reset(seed=7, options={"k": 1})
        assert ours.get_attr("np_random_seed") == theirs.get_attr("np_random_seed") == (7, 8, 9)
        assert ours.call("last_options") == theirs.call("last_options") == ({"k": 1},) * 3
        assert_same(ours.call("reset", seed=3), theirs.call("reset", seed=3))  # a method, called with kwargs
        ours.set_attr("max_length", [2, 3, 4])
        theirs.set_attr("max_length", [2, 3, 4])
        assert ours.get_attr("max_length") == theirs.get_attr("max_length") == (2, 3, 4)
        ours.set_attr("max_length", 5)
        assert ours.get_attr("max_length") == (5, 5, 5)
        with pytest.raises(ConfigError, match="length equal to the number of environments"):
            ours.set_attr("max_length", [1, 2])
    finally:
        ours.close()
        theirs.close()


def test_copy_false_gives_views_of_the_result_arrays_valid_until_the_next_step(backend: dict[str, Any]) -> None:
    env = make_vec(SpacesEnv, 3, copy=False, env_kwargs={"observation": "dict", "action": "discrete"}, **backend)
    copied = make_vec(SpacesEnv, 3, env_kwargs={"observation": "dict", "action": "discrete"}, **backend)
    try:
        first, _ = env.reset(seed=1)
        kept = {"position": first["position"].copy(), "count": first["inner"]["count"].copy()}
        second = env.step(np.array([2, 3, 4]))[0]
        assert second["position"] is first["position"]  # the same arrays, rewritten by the step
        assert not np.array_equal(first["inner"]["count"], kept["count"])
        assert env.reset(seed=1)[0]["position"] is first["position"]
        np.testing.assert_array_equal(first["position"], kept["position"])  # reset wrote the same again
        one, _ = copied.reset(seed=1)
        two = copied.step(np.array([2, 3, 4]))[0]
        assert not np.shares_memory(one["position"], two["position"])
        np.testing.assert_array_equal(one["position"], kept["position"])  # a copy keeps its values
    finally:
        env.close()
        copied.close()


def test_rewards_and_flags_are_fresh_arrays_whatever_copy_says(backend: dict[str, Any]) -> None:
    env = make_vec(CountingEnv, 2, copy=False, env_kwargs={"length": 2}, **backend)
    try:
        env.reset(seed=0)
        _, reward, terminated, truncated, _ = env.step(np.array([0, 1]))
        _, reward2, terminated2, _, _ = env.step(np.array([0, 1]))
        assert reward.dtype == np.float64 and terminated.dtype == truncated.dtype == np.bool_
        assert reward.tolist() == [1.0, 1.0] and reward2.tolist() == [2.0, 2.0]
        assert not terminated.any() and terminated2.all()
    finally:
        env.close()


# ---- the group's material: nothing in the common case, plain data otherwise ----


def _group(envs: list[gym.Env[Any, Any]], mode: AutoresetMode) -> EnvGroup:
    observation = SpaceLayout(envs[0].observation_space, "observation")
    action = SpaceLayout(envs[0].action_space, "action")
    k = len(envs)
    final = observation.empty(k) if mode is AutoresetMode.SAME_STEP else None
    rewards, flags = np.zeros(k), [np.zeros(k, bool), np.zeros(k, bool)]
    return EnvGroup(envs, mode, observation, action, observation.empty(k), rewards, *flags, final)


def test_a_group_returns_no_material_when_every_info_is_empty() -> None:
    group = _group([CountingEnv(length=2) for _ in range(3)], AutoresetMode.NEXT_STEP)
    assert group.reset(seeds=[1, 2, 3]) is None
    for _ in range(6):  # episodes end and envs are reset: their infos are empty too
        assert group.step([np.zeros(3, np.int64)]) is None
    same = _group([CountingEnv(length=2) for _ in range(2)], AutoresetMode.SAME_STEP)
    same.reset()
    assert same.step([np.zeros(2, np.int64)]) is None
    # Both end here, their final infos empty: the flags say they ended, no material is needed.
    assert same.step([np.zeros(2, np.int64)]) is None
    assert (same.terminated | same.truncated).all()
    group.close()
    same.close()


def test_a_group_in_disabled_mode_refuses_an_ended_env_itself() -> None:
    """The worker side checks too: a group is not stepped past an end it was not reset from."""
    group = _group([CountingEnv(length=1) for _ in range(2)], AutoresetMode.DISABLED)
    group.reset(seeds=[0, 1])
    group.step([np.zeros(2, np.int64)])
    with pytest.raises(ActionError, match=r"DISABLED and envs 0, 1 ended"):
        group.step([np.zeros(2, np.int64)])
    group.reset(mask=np.array([False, True]))
    with pytest.raises(ActionError, match=r"DISABLED and env 0 ended"):
        group.step([np.zeros(2, np.int64)])
    group.close()


def test_layouts_travel_pickled_without_their_views() -> None:
    layout = SpaceLayout(SpacesEnv("dict", "tuple").observation_space, "observation")
    arrays = layout.empty(2)
    layout.batched(arrays, copy=False)
    copy = pickle.loads(pickle.dumps(layout))
    assert copy.fields == layout.fields and copy.tree == layout.tree and copy._views is None
    assert [leaf.path for leaf in copy.leaves] == [("inner", "bits"), ("inner", "count"), ("position",)]
    assert copy.fields[0].key == ("observation", "inner", "bits")


def test_material_survives_pickling_and_merges_as_gymnasium() -> None:
    envs: list[gym.Env[Any, Any]] = [SpacesEnv("tuple", "discrete") for _ in range(3)]
    group = _group(envs, AutoresetMode.SAME_STEP)
    theirs = SyncVectorEnv([functools.partial(SpacesEnv, "tuple", "discrete")] * 3, autoreset_mode="SameStep")
    merger = InfoMerger(3)
    layout, final = group.observation, group._final_out
    assert final is not None
    arrays = [array for *_, array in final]
    assert_same(merger.merge([(0, group.reset(seeds=[5, 6, 7]) or [])]), theirs.reset(seed=5)[1])
    for _ in range(12):
        material = group.step([np.array([2, 3, 4])])
        shipped = pickle.loads(pickle.dumps(material))
        infos = merger.merge([(0, shipped)] if shipped else [], lambda n: layout.single(arrays, n))
        assert_same(infos, theirs.step(np.array([2, 3, 4]))[4])
    group.close()
    theirs.close()


def test_infos_of_several_groups_merge_in_env_order() -> None:
    merger = InfoMerger(4)
    parts = [(0, [(1, {"a": 1}, None)]), (2, [(0, {"a": 2.5, "b": "x"}, None), (1, {"a": 3}, None)])]
    infos = merger.merge(parts)
    assert infos["a"].tolist() == [0, 1, 2, 3] and infos["a"].dtype == np.int64  # the first env's type
    assert infos["_a"].tolist() == [False, True, True, True]
    assert infos["b"].tolist() == [None, None, "x", None] and infos["_b"].tolist() == [False, False, True, False]


# ---- actions: checked before anything is sent ----


def _vec(backend: dict[str, Any], obs: str = "box", act: str = "discrete", **kwargs: Any) -> VectorEnv:
    env = make_vec(SpacesEnv, 3, env_kwargs={"observation": obs, "action": act}, **kwargs, **backend)
    env.reset(seed=0)
    return env


@pytest.mark.parametrize(
    ("act", "actions", "match"),
    [
        ("discrete", np.array([2, 3]), r"actions have shape \(2,\); the batched action space .* takes shape \(3,\)"),
        ("discrete", 3, r"actions have shape \(\); .* takes shape \(3,\)"),
        ("discrete", np.array([2.0, 3.0, 4.0]), r"actions have dtype float64, which cannot be cast .* int64"),
        (
            "discrete",
            np.array([2, 7, 3]),
            r"action of env 1 is 7 \(int64\), outside the action space Discrete\(5, start=2\)",
        ),
        ("discrete", np.array([2, 3, 1]), r"action of env 2 is 1 \(int64\), outside"),
        ("discrete", ["a", "b", "c"], r"actions have dtype <U1, which cannot be cast"),
        ("discrete", [1, [2], 3], r"cannot be made an array|not numbers of one shape"),
        (
            "box",
            np.full((3, 3), 11.0),
            r"action of env 0 is array\(\[11\., 11\., 11\.\], dtype=float64\), outside .*Box",
        ),
        ("box", np.array([[0, 0, 0], [0, np.nan, 0], [0, 0, 0]]), r"action of env 1 is array\(\[ 0., nan,  0.\]"),
        ("box", np.zeros((3, 2)), r"actions have shape \(3, 2\); .* takes shape \(3, 3\)"),
        (
            "multibinary",
            np.full((3, 4), 2),
            r"action of env 0 is array\(\[2, 2, 2, 2\], dtype=int64\), outside .*MultiBinary",
        ),
        ("multidiscrete", np.array([[0, 0], [0, 0], [3, 0]]), r"action of env 2 is .*, outside .*MultiDiscrete"),
        ("dict", {"position": np.zeros((3, 2))}, r"actions lacks \['inner'\]: the Dict action space takes exactly"),
        ("dict", np.zeros(3), r"actions is a ndarray; the action space is a Dict"),
        ("tuple", (np.zeros((3, 2)),), r"actions is a tuple of 1 items; the action space is a Tuple of 2"),
        (
            "tuple",
            (np.zeros((3, 2)), np.array([0, 5, 0])),
            r"action\[1\] of env 1 is 5 \(int64\), outside .*Discrete\(3\)",
        ),
    ],
)
def test_actions_that_do_not_fit_are_refused_naming_value_and_env(
    act: str, actions: Any, match: str, backend: dict[str, Any]
) -> None:
    env = _vec(backend, act=act)
    try:
        with pytest.raises(ActionError, match=match):
            env.step(actions)
        assert env.call("_t") == (0, 0, 0)  # nothing was stepped
    finally:
        env.close()


def test_dict_actions_with_a_key_too_many_or_the_wrong_nesting_are_refused(backend: dict[str, Any]) -> None:
    env = _vec(backend, act="dict")
    try:
        good = env.action_space.sample()
        with pytest.raises(ActionError, match=r"actions has \['extra'\], which the space does not"):
            env.step({**good, "extra": np.zeros(3)})
        with pytest.raises(ActionError, match=r"actions\['inner'\] is a ndarray; the action space is a Dict"):
            env.step({**good, "inner": np.zeros(3)})
        with pytest.raises(ActionError, match=r"action\['inner'\]\['count'\] of env 0 is 9"):
            env.step({**good, "inner": {**good["inner"], "count": np.array([9, 0, 0])}})
        env.step(good)
    finally:
        env.close()


def test_actions_are_cast_to_the_space_dtype_when_their_kind_allows(backend: dict[str, Any]) -> None:
    env = _vec(backend, act="box")
    try:
        env.step(np.full((3, 3), 0.5, np.float64))  # float64 into a float32 Box: the env asserts contains()
        env.step([[1, 2, 3]] * 3)  # a list of ints
    finally:
        env.close()
    discrete = _vec(backend, act="discrete")
    try:
        discrete.step(np.array([2, 3, 4], np.int8))
        discrete.step([2, 3, 4])
    finally:
        discrete.close()
    checker = ActionChecker(SpaceLayout(gym.spaces.Box(-np.inf, np.inf, (1,), np.float32), "action"), 2)
    with pytest.raises(
        ActionError, match=r"action of env 1 is array\(\[1.e\+300\], dtype=float64\), which does not fit"
    ):
        checker.check(np.array([[0.0], [1e300]]))
    checked = checker.check(np.array([[0.0], [2.0]]))
    assert checked[0].dtype == np.float32 and checked[0].tolist() == [[0.0], [2.0]]
    exact = np.zeros((2, 1), np.float32)
    assert checker.check(exact)[0] is exact  # what fits exactly is passed through


def test_action_errors_are_config_errors_and_value_errors() -> None:
    assert issubclass(ActionError, ConfigError) and issubclass(ActionError, ValueError)
    assert issubclass(VectorEnvClosedError, pycollect.PyCollectError) and issubclass(VectorEnvClosedError, RuntimeError)


def test_split_rows_cuts_leaves_into_consecutive_blocks() -> None:
    first, second = np.arange(5), np.arange(10).reshape(5, 2)
    blocks = split_rows([first, second], [2, 3])
    assert [b[0].tolist() for b in blocks] == [[0, 1], [2, 3, 4]]
    assert blocks[1][1].tolist() == [[4, 5], [6, 7], [8, 9]] and np.shares_memory(blocks[1][1], second)
    with pytest.raises(ConfigError):
        split_rows([first], [2, 2])


# ---- DISABLED mode, reset arguments, closing ----


def test_disabled_mode_refuses_to_step_an_ended_env_until_it_is_reset(backend: dict[str, Any]) -> None:
    env = make_vec(CountingEnv, 3, autoreset_mode="disabled", env_kwargs={"length": 2}, **backend)
    try:
        env.reset(seed=0)
        env.step(np.zeros(3, np.int64))
        terminated = env.step(np.zeros(3, np.int64))[2]
        assert terminated.all()
        with pytest.raises(ActionError, match=r"DISABLED and envs 0, 1, 2 ended .*reset_mask"):
            env.step(np.zeros(3, np.int64))
        env.reset(options={"reset_mask": np.array([True, False, False])})
        with pytest.raises(ActionError, match=r"DISABLED and envs 1, 2 ended"):
            env.step(np.zeros(3, np.int64))
        env.reset(options={"reset_mask": np.array([False, True, True])})
        _, reward, *_ = env.step(np.zeros(3, np.int64))
        assert reward.tolist() == [1.0, 1.0, 1.0]
    finally:
        env.close()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"seed": [1, 2]}, r"length must match num_envs=3 but got length=2"),
        ({"seed": "abc"}, r"seed must be None, an int or a list of 3 ints"),
        ({"seed": [1, 2.5, None]}, r"seed list item 2.5 is not an int or None"),
        ({"options": {"reset_mask": [True, False, True]}}, r"must be a numpy array"),
        ({"options": {"reset_mask": np.ones(2, bool)}}, r"must have shape `\(3,\)`, got \(2,\)"),
        ({"options": {"reset_mask": np.ones(3, int)}}, r"must have `dtype=np.bool_`, got int64"),
        ({"options": {"reset_mask": np.zeros(3, bool)}}, r"at least one True value"),
        ({"options": [1, 2]}, r"options must be a dict or None"),
    ],
)
def test_bad_reset_arguments_are_refused_with_gymnasiums_checks(
    kwargs: dict[str, Any], match: str, backend: dict[str, Any]
) -> None:
    env = make_vec(CountingEnv, 3, **backend)
    try:
        with pytest.raises(ConfigError, match=match):
            env.reset(**kwargs)
    finally:
        env.close()


def test_reset_leaves_the_callers_options_alone(backend: dict[str, Any]) -> None:
    env = make_vec(SpacesEnv, 2, autoreset_mode="disabled", **backend)
    try:
        env.reset(seed=0)
        options = {"reset_mask": np.array([True, False]), "z": 3}
        _, infos = env.reset(options=options)
        assert "reset_mask" in options
        assert env.call("last_options")[0] == {"z": 3} and infos["_options"].tolist() == [True, False]
    finally:
        env.close()


def test_a_closed_vector_env_refuses_everything_but_close(backend: dict[str, Any]) -> None:
    env = make_vec(CountingEnv, 2, **backend)
    env.reset(seed=0)
    env.close()
    env.close()  # idempotent
    assert env.closed
    for call in (
        lambda: env.step(np.zeros(2, np.int64)),
        lambda: env.reset(),
        lambda: env.call("length"),
        lambda: env.get_attr("length"),
        lambda: env.set_attr("length", 3),
    ):
        with pytest.raises(VectorEnvClosedError, match=r"on a closed vector env \(callable:CountingEnv\)"):
            call()


# ---- make_vec's arguments ----


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"autoreset_mode": "bogus"},
            ConfigError,
            r"unknown autoreset_mode 'bogus': use one of 'next_step', 'same_step', 'disabled'",
        ),
        ({"autoreset_mode": 1}, ConfigError, r"unknown autoreset_mode 1"),
        ({"num_envs": 0}, ConfigError, r"num_envs must be an int of 1 or more, got 0"),
        ({"num_envs": 2.0}, ConfigError, r"num_envs must be an int"),
        ({"num_envs": True}, ConfigError, r"num_envs must be an int"),
        ({"num_workers": -1}, ConfigError, r"num_workers must be an int of 0 or more"),
        ({"copy": "yes"}, ConfigError, r"copy must be a bool"),
        ({"env": "NoSuchEnv-v0"}, UnknownEnvError, r"NoSuchEnv-v0"),
        ({"env_kwargs": {"no_such_argument": 1}}, pycollect.EnvCreationError, r"no_such_argument"),
    ],
)
def test_bad_make_vec_arguments_are_refused_before_anything_runs(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    arguments: dict[str, Any] = {"env": CountingEnv, "num_envs": 2, **kwargs}
    with pytest.raises(error, match=match):
        make_vec(arguments.pop("env"), arguments.pop("num_envs"), **arguments)


@pytest.mark.parametrize("name", ["next_step", "NEXT_STEP", "NextStep", AutoresetMode.NEXT_STEP])
def test_autoreset_mode_by_name_value_or_enum(name: Any) -> None:
    env = make_vec(CountingEnv, 1, autoreset_mode=name)
    assert env.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP is env.autoreset_mode
    env.close()


class _Varying(gym.Env[np.ndarray, int]):
    made = 0

    def __init__(self) -> None:
        _Varying.made += 1
        self.observation_space = gym.spaces.Box(0, 1, (_Varying.made,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_envs_whose_spaces_differ_are_refused() -> None:
    _Varying.made = 0
    with pytest.raises(ConfigError, match=r"\(env 1\) has observation_space Box\(0.0, 1.0, \(2,\), float32\), but"):
        make_vec(_Varying, 3, num_workers=0)


class _TextEnv(gym.Env[str, int]):
    def __init__(self) -> None:
        self.observation_space = gym.spaces.Dict({"text": gym.spaces.Text(5)})
        self.action_space = gym.spaces.Discrete(2)


def test_unsupported_spaces_are_refused_naming_where() -> None:
    with pytest.raises(UnsupportedSpaceError, match=r"unsupported observation space Text\(.*\) at observation/text"):
        make_vec(_TextEnv, 2)


def test_make_vec_is_exported_lazily() -> None:
    assert pycollect.make_vec is make_vec
    assert "make_vec" in pycollect.__all__ and "ActionError" in pycollect.__all__


# ---- what envs return goes through the output checks ----


class _BadEnv(CountingEnv):
    def __init__(self, bad_at: int = 3, what: str = "shape") -> None:
        super().__init__(length=100)
        self.bad_at, self.what = bad_at, what

    def step(self, action: int) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        if self._t == self.bad_at:
            if self.what == "shape":
                obs = np.zeros(3, np.float32)
            elif self.what == "reward":
                reward = "much"
            else:
                info = ["not", "a", "dict"]  # type: ignore[assignment]
        return obs, reward, terminated, truncated, info


@pytest.mark.parametrize(
    ("what", "match"),
    [
        (
            "shape",
            r"\(env 0(, in worker 0)?\) at step 3 returned observation 'observation' of shape \(3,\) and dtype float32",
        ),
        ("reward", r"\(env 0(, in worker 0)?\) at step 3 returned reward 'much' \(str\); a reward is one real number"),
        ("info", r"\(env 0(, in worker 0)?\) at step 3 returned info \['not', 'a', 'dict'\]; an info is a dict"),
    ],
)
def test_env_outputs_that_do_not_fit_raise_naming_env_and_step(what: str, match: str, backend: dict[str, Any]) -> None:
    """In a worker process the error ends the worker: the crash, raised in the trainer, carries it."""
    env = make_vec(_BadEnv, 2, env_kwargs={"what": what}, **backend)
    expected = WorkerCrashedError if backend["num_workers"] else EnvOutputError
    try:
        env.reset(seed=0)
        for _ in range(2):
            env.step(np.zeros(2, np.int64))
        with pytest.raises(expected, match=match) as raised:
            env.step(np.zeros(2, np.int64))
        if expected is WorkerCrashedError:
            assert "EnvOutputError" in str(raised.value.error)
    finally:
        env.close()


def test_observations_that_fit_after_conversion_are_stored_like_gymnasium(backend: dict[str, Any]) -> None:
    """A float64 observation for a float32 Box, a Python int for a Discrete: converted as gymnasium does."""

    class Loose(CountingEnv):
        def _obs(self) -> Any:
            return [self._base, float(self._t)]  # a list of Python numbers

    ours = make_vec(Loose, 2, **backend)
    theirs = SyncVectorEnv([Loose] * 2)
    try:
        assert_same(ours.reset(seed=4), theirs.reset(seed=4))
        for _ in range(7):
            assert_same(ours.step(np.array([0, 1])), theirs.step(np.array([0, 1])))
    finally:
        ours.close()
        theirs.close()


def test_the_docs_example_runs() -> None:
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "vector.md").read_text()
    (block,) = re.findall(r"<!-- test -->\n```python\n(.*?)```", text, re.S)
    exec(compile(block, "docs/vector.md", "exec"), {})


@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.name)
def test_the_native_stepper_gives_sync_vector_envs_steps(mode: AutoresetMode, backend: dict[str, Any]) -> None:
    """CartPole's results are the common case (an exact float32 array, a float, bools, ``{}``):
    the native stepper stores them, and resets, final observations and infos still match."""
    ours = make_vec("CartPole-v1", 4, autoreset_mode=mode, **backend)
    theirs = SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 4, autoreset_mode=mode)
    if backend["num_workers"] == 0:
        assert ours._backend.group._native is not None  # type: ignore[attr-defined]
    try:
        seen = _run(ours, theirs, steps=120, seed=3)
    finally:
        ours.close()
        theirs.close()
    assert seen["ended"] >= 10, seen  # random play ends an episode every ~20 steps


class _KeepInfo(gym.Wrapper[Any, Any, Any, Any]):
    """An env whose step and reset infos are kept to ``keys``: what ``info_keys=keys`` must return."""

    def __init__(self, env: gym.Env[Any, Any], keys: tuple[str, ...]) -> None:
        super().__init__(env)
        self.keys = keys

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        return obs, self._keep(info)

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, self._keep(info)

    def _keep(self, info: dict[str, Any]) -> dict[str, Any]:
        return {key: info[key] for key in self.keys if key in info}


@pytest.mark.parametrize("keys", [(), ("episode", "t"), ("no_such_entry",)], ids=["none", "two", "absent"])
@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.name)
@pytest.mark.parametrize("obs", ["box", "dict"])
def test_info_keys_return_what_sync_vector_env_returns_over_envs_that_keep_only_them(
    obs: str, mode: AutoresetMode, keys: tuple[str, ...], backend: dict[str, Any]
) -> None:
    """``info_keys`` is gymnasium's vector env over envs whose infos hold those entries only.

    A Box observation steps natively (with ``()`` whatever the info), a Dict one in Python.
    """
    kwargs = {"observation": obs, "action": "discrete"}
    theirs = SyncVectorEnv([lambda: _KeepInfo(SpacesEnv(**kwargs), keys)] * 4, autoreset_mode=mode)
    ours = make_vec(SpacesEnv, 4, autoreset_mode=mode, env_kwargs=kwargs, info_keys=list(keys), **backend)
    try:
        seen = _run(ours, theirs, steps=40, seed=7)
    finally:
        ours.close()
        theirs.close()
    assert seen["ended"] >= 20, seen
    if keys == ("episode", "t"):
        assert seen["infos"] >= 20, seen
    elif mode is not AutoresetMode.SAME_STEP:  # SAME_STEP still has final_obs and final_info
        assert seen["infos"] == 0, seen


class _LivesInfo(gym.Wrapper[Any, Any, Any, Any]):
    """CartPole, whose steps are the native stepper's common case, with an info entry of a fixed kind."""

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, _ = self.env.step(action)
        return obs, reward, terminated, truncated, {"lives": 3}


def _lives_env() -> gym.Env[Any, Any]:
    return _LivesInfo(gym.make("CartPole-v1"))


class _Counting:
    """The native stepper, counting the envs it hands back to Python."""

    def __init__(self, native: Any) -> None:
        self.native, self.left = native, 0

    def step(self, *args: Any) -> Any:
        left = self.native.step(*args)
        self.left += len(left or ())
        return left


@pytest.mark.parametrize(("keys", "natively"), [((), True), (None, False)], ids=["none", "all"])
def test_info_keys_of_none_lets_every_step_take_the_native_path(keys: tuple[str, ...] | None, natively: bool) -> None:
    """In this process (no info fields), ``info_keys=()`` leaves no step with an info to Python; keeping it, all."""
    env = make_vec(_lives_env, 2, num_workers=0, info_keys=keys)
    group = env._backend.group  # type: ignore[attr-defined]
    assert group._native is not None
    counting = group._native = _Counting(group._native)
    try:
        env.reset(seed=0)
        env.action_space.seed(0)
        for _ in range(30):
            infos = env.step(env.action_space.sample())[4]
            assert ("lives" in infos) is (keys is None)
    finally:
        env.close()
    assert (counting.left == 0) is natively, counting.left


class _Requests:
    """A step backend's requests, recording the answers that said more than "done"."""

    def __init__(self, requests: Any) -> None:
        self.requests, self.unusual_answers = requests, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.requests, name)

    def unusual(self, *workers: Any) -> Any:
        answers = self.requests.unusual(*workers)
        self.unusual_answers += len(answers)
        return answers


@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.name)
def test_an_info_entry_of_a_fixed_kind_travels_as_a_field(mode: AutoresetMode) -> None:
    """With workers, ``{"lives": 3}`` on every step is an info field: no answer carries material, and
    the infos are still gymnasium's (with ``final_info`` in ``SAME_STEP`` mode)."""
    ours = make_vec(_lives_env, 4, num_workers=2, autoreset_mode=mode)
    theirs = SyncVectorEnv([_lives_env] * 4, autoreset_mode=mode)
    assert [field.key for field in ours._backend.info.fields] == ["lives"]  # type: ignore[attr-defined]
    requests = ours._backend._requests = _Requests(ours._backend._requests)  # type: ignore[attr-defined]
    try:
        seen = _run(ours, theirs, steps=80, seed=5)
    finally:
        ours.close()
        theirs.close()
    assert seen["ended"] >= 5 and seen["infos"] >= 70, seen
    assert requests.unusual_answers == 0


@pytest.mark.parametrize(
    ("info_keys", "match"),
    [
        ("lives", r"info_keys must be None \(every entry\) or a sequence of info entry names.*got 'lives'"),
        (3, r"info_keys must be None .* got 3"),
        (["lives", ""], r"info_keys: '' is not an info entry name"),
        (["lives", 1], r"info_keys: 1 is not an info entry name"),
    ],
)
def test_bad_info_keys_are_refused_naming_the_value(info_keys: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        make_vec(CountingEnv, 2, num_workers=0, info_keys=info_keys)


def test_step_async_and_step_wait_give_what_step_gives(backend: dict[str, Any]) -> None:
    ours, theirs = _pair("box", "discrete", AutoresetMode.NEXT_STEP, backend, num_envs=2)
    try:
        assert_same(ours.reset(seed=5), theirs.reset(seed=5))
        with pytest.raises(ConfigError, match=r"step_wait\(\) .* without a step_async\(\)"):
            ours.step_wait()
        theirs.action_space.seed(5)
        for _ in range(12):
            actions = theirs.action_space.sample()
            ours.step_async(actions)
            with pytest.raises(ConfigError, match=r"while a step waits for its step_wait\(\)"):
                ours.step_async(actions)
            assert_same(ours.step_wait(), theirs.step(actions))
        ours.step_async(theirs.action_space.sample())  # never collected: reset() lets it go
        assert_same(ours.reset(seed=9), theirs.reset(seed=9))
        actions = theirs.action_space.sample()
        assert_same(ours.step(actions), theirs.step(actions))
    finally:
        ours.close()
        theirs.close()


def test_a_layout_sent_to_a_worker_keeps_numpys_own_dtype_objects() -> None:
    """The stores test an observation's dtype by identity (``is``), as the native stepper does; an
    unpickled dtype is a copy, so a worker would send every observation through the slow checks."""
    layout = SpaceLayout(
        gym.spaces.Dict({"a": gym.spaces.Box(0, 1, (2,), np.float32), "b": gym.spaces.Discrete(3)}), "observation"
    )
    copy = pickle.loads(pickle.dumps(layout))
    assert [leaf.field.dtype for leaf in copy.leaves] == [np.dtype(np.float32), np.dtype(np.int64)]
    assert copy.leaves[0].field.dtype is np.dtype(np.float32) and copy.leaves[1].field.dtype is np.dtype(np.int64)
