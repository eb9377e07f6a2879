"""Env specs resolve to a backend and a target; bad specs fail before anything is built."""

from __future__ import annotations

import pytest
from envs import CountingEnv

from pycollect import ConfigError, UnknownBackendError, UnknownEnvError, backend_names
from pycollect.envs.source import resolve_env


def test_builtin_backends_are_registered() -> None:
    assert {"gymnasium", "callable"} <= set(backend_names())


@pytest.mark.parametrize("spec", ["CartPole-v1", "gymnasium:CartPole-v1"])
def test_gymnasium_id_with_or_without_prefix(spec: str) -> None:
    source = resolve_env(spec)
    assert (source.backend, source.target) == ("gymnasium", "CartPole-v1")
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
    with pytest.raises(UnknownBackendError, match="'nosuch'.*callable, gymnasium"):
        resolve_env("nosuch:Thing-v0")


def test_callable_factory_and_import_path() -> None:
    assert resolve_env(CountingEnv).backend == "callable"
    env = resolve_env("callable:envs:make_counting", {"length": 2}).make()
    assert isinstance(env, CountingEnv) and env.length == 2


@pytest.mark.parametrize("target", ["callable:envs", "callable:envs:no_such_factory", "callable:no_such_module:f"])
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
