"""Env specs resolve to a backend and a target; bad specs fail before anything is built."""

from __future__ import annotations

import gymnasium as gym
import pytest

from pycollect import ConfigError, UnknownBackendError, UnknownEnvError, plugins
from pycollect.default_plugins.callable_backend import CallableBackend
from pycollect.envs.batched import SubEnv
from pycollect.envs.source import EnvSource
from pycollect.plugins import resolve_env
from pycollect.testing.envs import CountingEnv


def test_builtin_backends_are_registered() -> None:
    assert {"gymnasium", "callable"} <= set(plugins.names("env_backend"))


@pytest.mark.parametrize("spec", ["CartPole-v1", "gymnasium:CartPole-v1"])
def test_gymnasium_id_with_or_without_prefix(spec: str) -> None:
    source = resolve_env(spec)
    assert (source.backend.name, source.target) == ("gymnasium", "CartPole-v1")
    env = source.make()
    try:
        assert source.specs(env).observation[0].shape == (4,)
    finally:
        env.close()


def test_gymnasium_module_prefixed_id() -> None:
    source = resolve_env("gymnasium:gymnasium.envs.classic_control:CartPole-v1")
    source.make().close()


def test_env_kwargs_are_passed_through() -> None:
    env = resolve_env("CartPole-v1", {"max_episode_steps": 3}).make()
    try:
        env.reset(seed=0)
        truncated = [env.step(0)[3] for _ in range(3)]
    finally:
        env.close()
    assert truncated == [False, False, True] or any(truncated)


def test_unknown_gymnasium_id_names_it() -> None:
    with pytest.raises(UnknownEnvError, match="'NoSuchEnv-v0'"):
        resolve_env("NoSuchEnv-v0")


def test_unknown_backend_prefix_names_it_and_lists_known() -> None:
    with pytest.raises(UnknownBackendError, match="'nosuch'; registered: callable, .*gymnasium"):
        resolve_env("nosuch:Thing-v0")


def test_callable_factory_and_import_path() -> None:
    assert resolve_env(CountingEnv).backend.name == "callable"
    env = resolve_env("callable:pycollect.testing.envs:make_counting", {"length": 2}).make()
    assert isinstance(env, CountingEnv) and env.length == 2


@pytest.mark.parametrize(
    "target",
    ["callable:pycollect.testing.envs", "callable:pycollect.testing.envs:no_such_factory", "callable:no_such_module:f"],
)
def test_bad_callable_targets_fail_by_name(target: str) -> None:
    with pytest.raises(UnknownEnvError, match="envs|no_such"):
        resolve_env(target)


def test_factory_that_returns_no_env_is_rejected() -> None:
    with pytest.raises(ConfigError, match="gymnasium-style env"):
        resolve_env(lambda: object()).make()


@pytest.mark.parametrize("bad", [42, None])
def test_env_of_wrong_type(bad: object) -> None:
    with pytest.raises(ConfigError, match="env must be"):
        resolve_env(bad)  # type: ignore[arg-type]


def test_env_kwargs_must_be_a_mapping() -> None:
    with pytest.raises(ConfigError, match="env_kwargs"):
        resolve_env("CartPole-v1", [("a", 1)])  # type: ignore[arg-type]


class _RaisingFactory:
    """An env whose constructor raises, with a multi-line message."""

    def __init__(self, level: int = 0) -> None:
        raise FileNotFoundError(f"no map for level {level}\n(looked in /maps)")


@pytest.mark.parametrize(
    ("env", "match"),
    [
        (lambda: gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2), None),
        (gym.vector.SyncVectorEnv, "a gymnasium VectorEnv class \\(SyncVectorEnv\\)"),
    ],
)
def test_a_vector_env_is_refused_naming_it(env: object, match: str | None) -> None:
    if match is None:  # an instance built here, then passed
        instance = env()  # type: ignore[operator]
        try:
            with pytest.raises(
                ConfigError, match="already built batched env \\(SyncVectorEnv of 2 sub-envs\\).*envs_per_worker=2"
            ):
                resolve_env(instance)
        finally:
            instance.close()
    else:
        with pytest.raises(ConfigError, match=match):
            resolve_env(env)  # type: ignore[arg-type]


def test_a_factory_returning_a_vector_env_builds_a_batched_env_whose_probe_is_its_first_sub_env() -> None:
    source = resolve_env(lambda: gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")]))
    probe = source.make()
    try:
        assert isinstance(probe, SubEnv) and probe.index == 0 and probe.batch.num_envs == 1
        assert probe.observation_space == gym.make("CartPole-v1").observation_space
    finally:
        probe.close()


def test_a_torchrl_env_is_refused_naming_it() -> None:
    from torchrl.envs import GymEnv

    env = GymEnv("CartPole-v1")
    try:
        with pytest.raises(ConfigError, match="a TorchRL EnvBase instance \\(GymEnv\\)"):
            resolve_env(env)  # type: ignore[arg-type]
    finally:
        env.close()
    # Without an adopting backend (pycollect-torchrl not installed) what a factory builds is refused,
    # pointing to the plugin; with it, resolve_env offers the env to it (plugins/pycollect-torchrl tests that).
    source = EnvSource(CallableBackend(), lambda: GymEnv("CartPole-v1"))
    with pytest.raises(
        ConfigError, match="built a TorchRL EnvBase instance \\(GymEnv\\).*pip install pycollect-torchrl"
    ):
        source.make()


def test_a_torchrl_env_class_is_a_factory() -> None:
    from torchrl.envs import GymEnv

    source = resolve_env(GymEnv, {"env_name": "CartPole-v1"})
    assert source.backend.name == "callable" and source.target is GymEnv


def test_a_built_env_instance_is_refused_with_what_to_pass() -> None:
    env = gym.make("CartPole-v1")
    try:
        with pytest.raises(ConfigError, match="already built TimeLimit: every worker builds its own"):
            resolve_env(env)  # type: ignore[arg-type]
    finally:
        env.close()


def test_a_raising_constructor_is_an_env_creation_error_naming_env_and_kwargs() -> None:
    from pycollect import Collector, EnvCreationError

    with pytest.raises(EnvCreationError) as info:
        Collector(_RaisingFactory, frames_per_batch=8, env_kwargs={"level": 3})
    message = str(info.value)
    assert message == (
        "building env 'callable:_RaisingFactory' with env_kwargs={'level': 3} raised "
        "FileNotFoundError: no map for level 3"
    )
    assert isinstance(info.value.__cause__, FileNotFoundError)


def test_a_raising_gymnasium_constructor_in_the_cli_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    from pycollect.cli import main

    assert main(["run", "CartPole-v1", "--env-kwarg", "no_such_kwarg=1", "--no-progress"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert error.startswith(
        "pycollect: error: building env 'gymnasium:CartPole-v1' with --env-kwarg={'no_such_kwarg': 1} raised TypeError"
    )


def test_pycollect_torchrl_names_the_plugin_where_it_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    import pycollect.torchrl

    monkeypatch.setitem(sys.modules, "pycollect_torchrl", None)  # as if pycollect-torchrl were not installed
    monkeypatch.setitem(sys.modules, "pycollect_torchrl.parallel", None)
    with pytest.raises(ImportError, match="pip install pycollect-torchrl"):
        pycollect.torchrl.ParallelEnv  # noqa: B018 - the attribute access is what raises


def _named(module: str, name: str) -> type:
    """A class that looks, by its names alone, like another library's (as foreign_env reads it)."""
    return type(name, (), {"__module__": module})


@pytest.mark.parametrize(
    ("base", "described", "hint", "factory"),
    [
        (
            _named("gymnasium.vector.vector_env", "VectorEnv"),
            "a gymnasium VectorEnv instance (Mine of 4 envs)",
            "",
            False,
        ),
        (_named("torchrl.envs.common", "EnvBase"), "a TorchRL EnvBase instance (Mine)", "pycollect-torchrl", True),
        (
            _named("pettingzoo.utils.env", "ParallelEnv"),
            "a PettingZoo ParallelEnv instance (Mine: several agents)",
            "pycollect-pettingzoo",
            True,
        ),
        (
            _named("pettingzoo.utils.env", "AECEnv"),
            "a PettingZoo AECEnv instance (Mine: several agents)",
            "pycollect-pettingzoo",
            True,
        ),
        (_named("elsewhere", "EnvBase"), None, "", False),
    ],
)
def test_foreign_envs_are_described_pointed_to_their_plugin_and_their_classes_are_factories(
    base: type, described: str | None, hint: str, factory: bool
) -> None:
    from pycollect.envs.source import _adoptable_class, _plugin_hint, foreign_env

    mine = type("Mine", (base,), {"__module__": "user"})
    env = mine()
    env.num_envs = 4
    assert foreign_env(env) == described
    assert foreign_env(mine) == (described and described.replace(" instance", " class").replace(" of 4 envs", ""))
    said = _plugin_hint(described)
    assert (hint in said and f"pip install {hint}" in said) if hint else said == ""
    assert _adoptable_class(mine) is factory
    # The hint follows the library, not the text: a class named after another library gets its own library's
    other = type("PettingZooTorchRL", (base,), {"__module__": "user"})
    assert _plugin_hint(foreign_env(other())) == said
