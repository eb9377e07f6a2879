"""DMControlBackend: check, make, specs, env_kwargs, registration."""

from __future__ import annotations

import importlib.metadata
import pickle
import subprocess
import sys

import numpy as np
import pluggy
import pytest
from dm_control import suite

from pycollect import ConfigError, UnknownEnvError, hookspecs
from pycollect.envs import EnvBackend, GymLikeEnv
from pycollect.exceptions import EnvCreationError
from pycollect_dmcontrol import DMControlBackend, DMControlEnv, split_target

BACKEND = DMControlBackend()


# -- targets ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("cheetah-run", ("cheetah", "run")),
        ("ball_in_cup-catch", ("ball_in_cup", "catch")),
        ("cartpole-swingup_sparse", ("cartpole", "swingup_sparse")),
        ("humanoid_CMU-stand", ("humanoid_CMU", "stand")),
        ("lqr-lqr_2_1", ("lqr", "lqr_2_1")),
    ],
)
def test_split_at_the_first_dash(target: str, expected: tuple[str, str]) -> None:
    assert split_target(target) == expected
    BACKEND.check(target, {})


def test_every_suite_task_passes_check() -> None:
    for domain, task in suite.ALL_TASKS:
        BACKEND.check(f"{domain}-{task}", {})
    assert set(suite.BENCHMARKING) <= set(suite.ALL_TASKS)


def test_unknown_task_lists_the_domains_tasks() -> None:
    with pytest.raises(UnknownEnvError) as info:
        BACKEND.check("cheetah-fly", {})
    assert str(info.value) == "unknown dm_control task 'cheetah-fly'; cheetah has: run"
    with pytest.raises(UnknownEnvError, match=r"'cartpole-swing'; cartpole has: .*balance.*swingup_sparse"):
        BACKEND.check("cartpole-swing", {})


def test_unknown_domain_lists_the_domains() -> None:
    with pytest.raises(
        UnknownEnvError, match=r"unknown dm_control domain 'cheeta' in 'cheeta-run'; domains: .*cheetah"
    ):
        BACKEND.check("cheeta-run", {})


@pytest.mark.parametrize("target", ["cheetah", "cheetah-", "-run"])
def test_malformed_targets(target: str) -> None:
    with pytest.raises(UnknownEnvError, match=repr(target)):
        BACKEND.check(target, {})


@pytest.mark.parametrize("target", [None, 3, "", ("cheetah", "run")])
def test_non_string_target(target: object) -> None:
    with pytest.raises(UnknownEnvError, match="'domain-task' string"):
        BACKEND.check(target, {})


def test_check_builds_no_physics(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("check() must not build an environment")

    monkeypatch.setattr(suite, "load", forbidden)
    monkeypatch.setattr(suite, "build_environment", forbidden)
    BACKEND.check("cheetah-run", {"task_kwargs": {"time_limit": 2}, "environment_kwargs": {"n_sub_steps": 2}})


def test_unknown_env_error_is_a_config_error() -> None:
    assert issubclass(UnknownEnvError, ConfigError)
    assert issubclass(ConfigError, ValueError)


# -- env_kwargs ------------------------------------------------------------------------------


def test_unknown_top_level_key() -> None:
    with pytest.raises(ConfigError, match=r"'time_limit'.*accepted: task_kwargs, environment_kwargs, visualize_reward"):
        BACKEND.check("cheetah-run", {"time_limit": 5})


def test_task_random_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"\['random'\] conflicts with pycollect's seeding.*seed="):
        BACKEND.check("cheetah-run", {"task_kwargs": {"random": 0}})
    with pytest.raises(ConfigError, match="seed="):
        BACKEND.make("cheetah-run", {"task_kwargs": {"random": np.random.RandomState(0)}})


def test_unknown_task_kwarg_lists_the_tasks_arguments() -> None:
    with pytest.raises(ConfigError, match=r"unknown task_kwargs key 'sparse'.*accepted: time_limit$"):
        BACKEND.check("cheetah-run", {"task_kwargs": {"sparse": True}})
    BACKEND.check("cartpole-three_poles", {"task_kwargs": {"sparse": True, "num_poles": 3}})


def test_time_limit_belongs_in_task_kwargs() -> None:
    # dm_control itself would raise "got multiple values for keyword argument 'time_limit'".
    with pytest.raises(ConfigError, match=r"'time_limit'.*pass it in task_kwargs"):
        BACKEND.check("cheetah-run", {"environment_kwargs": {"time_limit": 1}})


def test_unknown_environment_kwarg_lists_the_accepted_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown environment_kwargs key 'fps'.*flat_observation"):
        BACKEND.check("cheetah-run", {"environment_kwargs": {"fps": 30}})


@pytest.mark.parametrize(
    ("env_kwargs", "match"),
    [
        ({"task_kwargs": [("time_limit", 1)]}, r"env_kwargs\['task_kwargs'\] must be a mapping"),
        ({"environment_kwargs": 3}, r"env_kwargs\['environment_kwargs'\] must be a mapping"),
        ({"visualize_reward": "yes"}, r"env_kwargs\['visualize_reward'\] must be a bool"),
        ({"task_kwargs": {"environment_kwargs": {}}}, "at the top level"),
    ],
)
def test_bad_values(env_kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        BACKEND.check("cheetah-run", env_kwargs)


def test_none_values_mean_defaults() -> None:
    env = BACKEND.make("cheetah-run", {"task_kwargs": None, "environment_kwargs": None})
    try:
        assert env.dm_env._step_limit == 1000
    finally:
        env.close()


def test_kwargs_reach_suite_load() -> None:
    env = BACKEND.make(
        "cheetah-run",
        {"task_kwargs": {"time_limit": 0.5}, "environment_kwargs": {"n_sub_steps": 2}, "visualize_reward": True},
    )
    try:
        assert env.dm_env._step_limit == pytest.approx(0.5 / (0.01 * 2))
        assert env.dm_env.task.visualize_reward is True
    finally:
        env.close()


def test_flat_observation() -> None:
    env = BACKEND.make("cheetah-run", {"environment_kwargs": {"flat_observation": True}})
    try:
        assert list(env.observation_space.spaces) == ["observations"]
        assert env.observation_space["observations"].shape == (17,)
        specs = BACKEND.specs(env)
        assert [field.key for field in specs.observation] == [("observation", "observations")]
    finally:
        env.close()


def test_what_suite_load_rejects_is_an_env_creation_error() -> None:
    # walker passes control_timestep itself, which no signature shows: suite.load raises TypeError.
    with pytest.raises(EnvCreationError, match=r"'walker', 'walk'.*control_timestep"):
        BACKEND.make("walker-walk", {"environment_kwargs": {"control_timestep": 0.01}})


# -- make and specs --------------------------------------------------------------------------


def test_make_returns_a_gym_like_env() -> None:
    env = BACKEND.make("cheetah-run", {})
    try:
        assert isinstance(env, DMControlEnv)
        assert isinstance(env, GymLikeEnv)
        assert not hasattr(env, "render")
    finally:
        env.close()


def test_specs_of_cheetah_run() -> None:
    env = BACKEND.make("cheetah-run", {})
    try:
        specs = BACKEND.specs(env)
    finally:
        env.close()
    assert [(f.key, f.shape, f.dtype) for f in specs.observation] == [
        (("observation", "position"), (8,), np.dtype(np.float64)),
        (("observation", "velocity"), (9,), np.dtype(np.float64)),
    ]
    action = specs.action
    assert (action.key, action.shape, action.dtype, action.discrete) == (("action",), (6,), np.dtype(np.float64), False)
    np.testing.assert_array_equal(action.low, -np.ones(6))
    np.testing.assert_array_equal(action.high, np.ones(6))


def test_specs_keep_scalars_and_spec_order() -> None:
    env = BACKEND.make("walker-walk", {})
    try:
        specs = BACKEND.specs(env)
        names = list(env.dm_env.observation_spec())
    finally:
        env.close()
    assert [f.key[1] for f in specs.observation] == names == ["orientations", "height", "velocity"]
    assert specs.observation[1].shape == ()
    assert specs.observation[1].dtype == np.float64


# -- the backend as a plugin -------------------------------------------------------------------


def test_backend_is_an_env_backend_named_dm_control() -> None:
    assert issubclass(DMControlBackend, EnvBackend)
    assert DMControlBackend.name == "dm_control"


def test_backend_pickles_by_reference_and_has_no_state() -> None:
    assert vars(BACKEND) == {}
    clone = pickle.loads(pickle.dumps(BACKEND))
    assert type(clone) is DMControlBackend


def test_hookimpl_registers_the_backend() -> None:
    import pycollect_dmcontrol

    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    manager.register(pycollect_dmcontrol)
    assert manager.hook.register_env_backend() == [DMControlBackend]


def test_entry_point_is_installed() -> None:
    (entry_point,) = [ep for ep in importlib.metadata.entry_points(group="pycollect") if ep.name == "dmcontrol"]
    assert entry_point.value == "pycollect_dmcontrol"
    assert entry_point.load().register_env_backend() is DMControlBackend
    assert entry_point.dist is not None and entry_point.dist.name == "pycollect-dmcontrol"


def test_importing_the_plugin_does_not_import_dm_control() -> None:
    code = "import sys, pycollect_dmcontrol; print('dm_control' in sys.modules, 'mujoco' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.split() == ["False", "False"]
