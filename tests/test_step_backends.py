"""Step backends as an extension point: ``register_step_backend()``, ``step_backend=``, the listing.

A vector env steps its envs through a :class:`pycollect.vector.StepBackend`, chosen by name (or
class) like every other plugin: ``inprocess`` and ``workers`` are built-in plugins, a third-party
class registered through a plugin is used by ``make_vec``, and a bad choice is refused, naming
it, before any env is built or any worker starts.
"""

from __future__ import annotations

import json
import re
import types
from collections.abc import Iterator, Sequence
from contextlib import closing
from typing import Any, ClassVar

import numpy as np
import pytest

import pycollect
from pycollect import ConfigError, PluginError, plugins
from pycollect.cli import main
from pycollect.config import VectorConfig
from pycollect.envs.source import EnvSource
from pycollect.testing.envs import CountingEnv
from pycollect.vector import StepBackend, make_vec, start_backend
from pycollect.vector.backend import InfoParts

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """A registry of its own, so that what a test registers goes with it."""
    monkeypatch.setattr(plugins, "_registry", plugins._Registry())
    monkeypatch.delenv(plugins.DISABLE_VARIABLE, raising=False)
    monkeypatch.delenv(plugins.LOAD_VARIABLE, raising=False)


class Recording(StepBackend):
    """A third-party backend: the built-in in-process one underneath, each call recorded."""

    name = "recording"
    calls: ClassVar[list[str]] = []

    def __init__(self, inner: StepBackend) -> None:
        self.inner = inner
        for attribute in ("num_envs", "observation", "action", "metadata", "render_mode", "observations"):
            setattr(self, attribute, getattr(inner, attribute))
        self.final_observations, self.actions, self.info = inner.final_observations, inner.actions, inner.info
        self.rewards, self.terminated, self.truncated = inner.rewards, inner.terminated, inner.truncated

    @classmethod
    def start(cls, source: EnvSource, config: VectorConfig) -> Recording:
        cls.calls.append("start")
        return cls(plugins.step_backend("inprocess").start(source, config))

    def reset(self, seeds: Sequence[int | None], options: dict[str, Any] | None, mask: np.ndarray | None) -> InfoParts:
        self.calls.append("reset")
        return self.inner.reset(seeds, options, mask)

    def step_async(self, actions: Sequence[np.ndarray] | None = None) -> None:
        self.calls.append("step_async")
        self.inner.step_async(actions)

    def step_wait(self) -> InfoParts:
        self.calls.append("step_wait")
        return self.inner.step_wait()

    def call(self, name: str, args: Sequence[Any], kwargs: Any, indices: Sequence[int] | None = None) -> list[Any]:
        return self.inner.call(name, args, kwargs, indices)

    def get_attr(self, name: str, indices: Sequence[int] | None = None) -> list[Any]:
        return self.inner.get_attr(name, indices)

    def set_attr(self, name: str, values: Sequence[Any], indices: Sequence[int] | None = None) -> None:
        self.inner.set_attr(name, values, indices)

    def apply(self, function: Any, indices: Sequence[int] | None = None) -> list[Any]:
        return self.inner.apply(function, indices)

    def close(self) -> None:
        self.calls.append("close")
        self.inner.close()


@pytest.fixture
def recording(fresh: None) -> Iterator[type[Recording]]:
    """:class:`Recording`, registered through a plugin for the test."""
    Recording.calls = []
    plugin = types.SimpleNamespace(register_step_backend=pycollect.hookimpl(lambda: Recording))
    name = plugins.register(plugin, name="recording-plugin")
    yield Recording
    plugins.unregister(name)


def test_an_unknown_step_backend_is_a_named_error_before_any_env_is_built() -> None:
    built: list[int] = []

    def make_env() -> CountingEnv:
        built.append(1)
        return CountingEnv()

    with pytest.raises(ConfigError, match=r"unknown step backend 'nope'; registered: .*inprocess, workers"):
        make_vec(make_env, 2, num_workers=0, step_backend="nope")
    with pytest.raises(ConfigError, match=r"register_step_backend\(\) hook"):
        start_backend(make_env, VectorConfig(2, num_workers=0), step_backend="nope")
    assert not built


def test_a_third_party_backend_registered_through_a_plugin_is_used_by_make_vec(recording: type[Recording]) -> None:
    assert plugins.step_backend("recording") is recording
    with closing(make_vec(CountingEnv, 2, num_workers=0, step_backend="recording")) as venv:
        assert isinstance(venv._backend, recording)
        venv.reset(seed=0)
        observations, rewards, *_ = venv.step(np.array([1, 0]))
    assert recording.calls == ["start", "reset", "step_async", "step_wait", "close"]
    with closing(make_vec(CountingEnv, 2, num_workers=0)) as plain:  # the default is still the built-in one
        plain.reset(seed=0)
        expected, expected_rewards, *_ = plain.step(np.array([1, 0]))
    np.testing.assert_array_equal(observations, expected)
    np.testing.assert_array_equal(rewards, expected_rewards)


def test_a_class_is_taken_as_it_is_and_anything_else_is_refused(fresh: None) -> None:
    Recording.calls = []
    # A class is used as it is: it need not be registered.
    with closing(make_vec(CountingEnv, 2, num_workers=0, step_backend=Recording)) as venv:
        assert isinstance(venv._backend, Recording)
    with pytest.raises(ConfigError, match=r"step_backend=3: expected the name of a registered step backend"):
        make_vec(CountingEnv, 2, num_workers=0, step_backend=3)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"step_backend=.*CountingEnv.*pycollect\.vector\.StepBackend"):
        make_vec(CountingEnv, 2, num_workers=0, step_backend=CountingEnv)  # type: ignore[arg-type]


@pytest.mark.parametrize(("num_workers", "expected"), [(0, "inprocess"), (2, "workers")])
def test_the_default_is_chosen_by_num_workers_and_can_be_named(num_workers: int, expected: str) -> None:
    with closing(make_vec(CountingEnv, 2, num_workers=num_workers, restart="never")) as venv:
        assert type(venv._backend).name == expected
        assert isinstance(venv._backend, StepBackend)
    with closing(make_vec(CountingEnv, 2, num_workers=num_workers, restart="never", step_backend=expected)) as venv:
        assert type(venv._backend).name == expected


@pytest.mark.parametrize(
    ("step_backend", "num_workers", "match"),
    [
        ("inprocess", 2, r"step_backend='inprocess' steps the envs in this process; got num_workers=2"),
        ("workers", 0, r"step_backend='workers' needs num_workers >= 1"),
    ],
)
def test_a_backend_refuses_settings_it_cannot_honour_before_anything_starts(
    step_backend: str, num_workers: int, match: str
) -> None:
    before = pycollect.testing.snapshot()
    with pytest.raises(ConfigError, match=match):
        make_vec(CountingEnv, 2, num_workers=num_workers, step_backend=step_backend)
    assert not pycollect.testing.leftovers(before, timeout_s=0)


def test_a_backend_that_serves_no_pool_refuses_one(recording: type[Recording]) -> None:
    config = VectorConfig(4, num_workers=2, batch_size=2)
    with pytest.raises(ConfigError, match=r"step backend 'recording' serves no pool.*batch_size=2 < num_envs=4"):
        recording.check(config)
    plugins.step_backend("workers").check(config)  # the workers' backend serves one


def test_a_step_backend_name_taken_twice_names_both_plugins(recording: type[Recording]) -> None:
    class Again(Recording):
        name = "inprocess"

    clash = types.SimpleNamespace(register_step_backend=pycollect.hookimpl(lambda: Again))
    with pytest.raises(PluginError, match=r"two plugins register a step backend named 'inprocess'.*'clash'"):
        plugins.register(clash, name="clash")


def test_a_hook_must_return_step_backend_subclasses(fresh: None) -> None:
    wrong = types.SimpleNamespace(register_step_backend=pycollect.hookimpl(lambda: CountingEnv))
    with pytest.raises(
        PluginError, match=r"register_step_backend\(\) returned .*CountingEnv.*pycollect\.vector\.StepBackend"
    ):
        plugins.register(wrong, name="wrong")


def test_the_plugins_command_lists_step_backends(
    recording: type[Recording], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plugins"]) == 0
    text = capsys.readouterr().out
    builtin_row = r"^step backend +inprocess +pycollect\.default_plugins\.step_backends +pycollect-rl .*\(built-in\)$"
    assert re.search(builtin_row, text, re.M)
    assert re.search(r"^step backend +recording +recording-plugin +\(runtime\)$", text, re.M)
    assert main(["plugins", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    names = [item["name"] for item in listing["step_backends"]]
    assert names[:2] == ["inprocess", "workers"] and "recording" in names
    builtin = listing["step_backends"][0]
    assert builtin["builtin"] and builtin["plugin"] == "pycollect.default_plugins.step_backends"
    assert plugins.names("step_backend") == ["inprocess", "recording", "workers"]
    assert plugins.hook_name("step_backend") == "register_step_backend"


def test_sb3_vec_env_takes_a_step_backend(recording: type[Recording]) -> None:
    pytest.importorskip("stable_baselines3")
    from pycollect.vector import SB3VecEnv

    venv = SB3VecEnv(CountingEnv, 2, num_workers=0, step_backend="recording")
    try:
        assert isinstance(venv._backend, recording)
        venv.reset()
    finally:
        venv.close()
    assert recording.calls[:2] == ["start", "reset"]
    with pytest.raises(ConfigError, match="unknown step backend 'nope'"):
        SB3VecEnv(CountingEnv, 2, num_workers=0, step_backend="nope")
