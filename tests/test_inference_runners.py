"""The inference-runner extension point: registration, selection, and where the prepared call runs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import pycollect
from pycollect import Collector, ConfigError, UnknownInferenceRunnerError, plugins
from pycollect.default_plugins import CompileRunner, PlainRunner
from pycollect.inference import InferenceRunner
from pycollect.testing.envs import CountingEnv

pytestmark = pytest.mark.timeout(120)


class Linear(torch.nn.Module):
    """A deterministic policy for CountingEnv (Box(2) observations, Discrete(2) actions)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(1, 2)
        with torch.no_grad():
            self.linear.weight.copy_(torch.tensor([[1.0], [-1.0]]))
            self.linear.bias.zero_()

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.linear(observation[..., :1] % 2 - 0.5).argmax(-1)


class ZeroActions(InferenceRunner):
    """Calls the policy, then answers action 0 for every env: shows where its prepared call ran."""

    name = "zero-actions"

    def prepare(self, policy: Callable[..., Any], device: torch.device) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            return torch.zeros_like(policy(*args))

        return call


@pytest.fixture
def zero_runner() -> Iterator[None]:
    plugin = SimpleNamespace(register_inference_runner=pycollect.hookimpl(lambda: ZeroActions))
    name = plugins.register(plugin, name="zero-runner-plugin")
    yield
    plugins.unregister(name)


def _actions(**settings: Any) -> torch.Tensor:
    with Collector(CountingEnv, Linear(), frames_per_batch=32, envs_per_worker=2, seed=1, **settings) as collector:
        return collector.next_batch()["action"]


def test_the_built_in_runners_are_registered_plugins() -> None:
    assert plugins.inference_runner("plain") is PlainRunner
    assert plugins.inference_runner("compile") is CompileRunner
    assert {"plain", "compile"} <= set(plugins.names("inference_runner"))


def test_an_unknown_runner_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(UnknownInferenceRunnerError, match=r"no-such-runner.*plain.*compile|compile.*plain"):
        Collector(CountingEnv, Linear(), frames_per_batch=8, inference_runner="no-such-runner")


def test_a_value_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(UnknownInferenceRunnerError, match=r"inference_runner=3: expected the name"):
        Collector(CountingEnv, Linear(), frames_per_batch=8, inference_runner=3)


@pytest.mark.parametrize(
    "where", [{"num_workers": 0}, {"num_workers": 1}, {"num_workers": 2, "engine": "central"}], ids=str
)
def test_a_plugins_runner_makes_every_policy_call_where_the_policy_runs(
    zero_runner: None, where: dict[str, Any]
) -> None:
    """In the trainer (in-process, central) and in a worker, which gets the runner with the settings."""
    plain = _actions(**where)
    assert plain.any(), "the policy alone picks action 1 on some steps"
    zeroed = _actions(**where, inference_runner="zero-actions")
    assert not zeroed.any()
    assert zeroed.shape == plain.shape


def test_the_plain_runner_changes_nothing() -> None:
    assert torch.equal(_actions(), _actions(inference_runner=PlainRunner()))


def test_torch_compile_gives_the_plain_policys_batches() -> None:
    """``backend="eager"``: dynamo traces the policy (quick, no code generated)."""
    assert torch.equal(_actions(), _actions(inference_runner=CompileRunner(backend="eager")))


def test_the_runner_is_prepared_on_the_first_policy_call_not_for_the_dry_run(zero_runner: None) -> None:
    """The trainer's dry run checks the policy itself, so a compiling runner compiles only where it runs."""
    prepared: list[torch.device] = []

    class Counting(ZeroActions):
        name = "counting"

        def prepare(self, policy: Callable[..., Any], device: torch.device) -> Callable[..., Any]:
            prepared.append(device)
            return super().prepare(policy, device)

    collector = Collector(CountingEnv, Linear(), frames_per_batch=8, inference_runner=Counting())
    try:
        assert prepared == []
        collector.next_batch()
        collector.next_batch()
        assert prepared == [torch.device("cpu")]
    finally:
        collector.shutdown()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": "fastest"}, r"CompileRunner\(mode='fastest'\): torch.compile's mode is one of"),
        ({"backend": ""}, r"CompileRunner\(backend=''\)"),
    ],
)
def test_bad_compile_options_are_refused(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        CompileRunner(**kwargs)


def test_a_runner_name_in_a_config_nobody_resolved_is_an_error_not_ignored() -> None:
    from pycollect._rollout.action_source import action_source
    from pycollect._rollout.seeding import action_rng

    env = CountingEnv()
    specs = pycollect.specs_from_spaces(env.observation_space, env.action_space)
    with pytest.raises(ConfigError, match=r"inference_runner='compile' is a name"):
        action_source(Linear(), specs, 2, None, action_rng(0), "random", "compile")
