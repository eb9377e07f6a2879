"""The kinds of policy a Collector accepts, their extra outputs and their errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn

from pycollect import Collector, PolicyError, WorkerCrashedError
from pycollect.default_plugins import Central
from pycollect.testing.envs import DictObsEnv


def test_tensordict_module_with_log_prob_extras_kept() -> None:
    net = TensorDictModule(nn.Linear(4, 2), in_keys=["observation"], out_keys=["logits"])

    def sample(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dist = torch.distributions.Categorical(logits=logits)
        action = dist.sample()
        return action, dist.log_prob(action)

    sampler = TensorDictModule(sample, in_keys=["logits"], out_keys=["action", "sample_log_prob"])
    policy = TensorDictSequential(net, sampler)
    with Collector("CartPole-v1", policy, frames_per_batch=32, envs_per_worker=4, seed=0) as c:
        batch = c.next_batch()
    assert batch["logits"].shape == (4, 8, 2)
    assert batch["sample_log_prob"].shape == (4, 8) and (batch["sample_log_prob"] <= 0).all()
    expected = torch.distributions.Categorical(logits=batch["logits"]).log_prob(batch["action"])
    assert torch.allclose(expected, batch["sample_log_prob"], atol=1e-6)


def test_plain_module_gets_observation_tensor() -> None:
    class Greedy(nn.Module):
        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            assert obs.shape == (3, 4)
            return (obs[:, 2] > 0).long()

    with Collector("CartPole-v1", Greedy(), frames_per_batch=30, envs_per_worker=3, seed=0) as c:
        batch = c.next_batch()
    assert torch.equal(batch["action"], (batch["observation"][..., 2] > 0).long())


def test_callable_gets_tensordict_and_may_return_mapping_with_extras() -> None:
    def policy(td: TensorDict) -> dict:
        assert isinstance(td, TensorDict) and td.batch_size == torch.Size([2])
        pos = td["observation", "position"]
        return {"action": torch.ones(2, 2, dtype=torch.int64), "value": pos.sum(-1, keepdim=True)}

    with Collector(DictObsEnv, policy, frames_per_batch=6, envs_per_worker=2, seed=0) as c:
        batch = c.next_batch()
    assert (batch["action"] == 1).all()
    assert torch.allclose(batch["value"][..., 0], batch["observation", "position"].sum(-1))


def test_callable_may_return_numpy() -> None:
    def policy(td: TensorDict) -> np.ndarray:
        return np.full((td.batch_size[0], 1), 0.5, np.float64)

    with Collector("Pendulum-v1", policy, frames_per_batch=8, envs_per_worker=2) as c:
        batch = c.next_batch()
    assert batch["action"].dtype == torch.float32 and (batch["action"] == 0.5).all()


@pytest.mark.parametrize(
    ("policy", "match"),
    [
        (lambda td: torch.zeros(3, dtype=torch.int64), r"shape \(3,\).*Discrete\(2\) needs shape \(2,\)"),
        (lambda td: torch.zeros(2), "is discrete: return integer actions"),
        (lambda td: {"logits": torch.zeros(2, 2)}, "no 'action' key; its keys are \\['logits'\\]"),
        (lambda td: (torch.zeros(2, dtype=torch.int64), None), "returned a tuple"),
        (lambda td: 1 / 0, "failed on an example observation.*ZeroDivisionError"),
        (
            lambda td: {"action": torch.zeros(2, dtype=torch.int64), "extra": torch.zeros(5)},
            "'extra' has shape \\(5,\\)",
        ),
        ("not a policy", "must be callable"),
    ],
)
def test_policy_that_does_not_fit_is_rejected_before_collection(policy, match: str) -> None:
    with pytest.raises(PolicyError, match=match):
        Collector("CartPole-v1", policy, frames_per_batch=8, envs_per_worker=2)


def test_continuous_space_rejects_integer_actions() -> None:
    with pytest.raises(PolicyError, match="continuous"):
        Collector("Pendulum-v1", lambda td: torch.zeros(1, 1, dtype=torch.int64), frames_per_batch=8)


def _greedy_policy() -> TensorDictSequential:
    return TensorDictSequential(
        TensorDictModule(nn.Linear(4, 2), in_keys=["observation"], out_keys=["logits"]),
        TensorDictModule(lambda logits: logits.argmax(-1), in_keys=["logits"], out_keys=["action"]),
    )


def _fill(policy: nn.Module, value: float) -> nn.Module:
    with torch.no_grad():
        for parameter in policy.parameters():
            parameter.fill_(value)
    return policy


def test_update_policy_weights_copies_weights_and_bumps_version() -> None:
    policy = _fill(_greedy_policy(), 0.0)
    with Collector("CartPole-v1", policy, frames_per_batch=8) as c:
        assert (c.next_batch()["policy_version"] == 0).all()
        c.update_policy_weights_()
        assert c.policy_version == 1 and (c.next_batch()["policy_version"] == 1).all()
        c.update_policy_weights_(_fill(_greedy_policy(), 1.0))  # a module
        assert all((p == 1.0).all() for p in policy.parameters()) and c.policy_version == 2
        c.update_policy_weights_(TensorDict.from_module(_fill(_greedy_policy(), 2.0)))  # a TensorDict
        assert all((p == 2.0).all() for p in policy.parameters())
        c.update_policy_weights_(_fill(_greedy_policy(), 3.0).state_dict())  # a state_dict
        assert all((p == 3.0).all() for p in policy.parameters()) and c.policy_version == 4
        with pytest.raises(Exception, match="worker_ids"):
            c.update_policy_weights_(worker_ids=[1])


@pytest.mark.parametrize(
    "engine", [{}, {"engine": "central", "num_workers": 2}, {"num_workers": 2}], ids=["inprocess", "central", "workers"]
)
def test_weights_given_as_a_tensordict_are_copied_not_shared_with_the_learner(engine: dict[str, Any]) -> None:
    """Training the learner in place after an update must not change what the collector acts
    with: its frames would record the old version while acting with newer weights."""
    policy, learner = _fill(_greedy_policy(), 0.0), _fill(_greedy_policy(), 2.0)
    with Collector("CartPole-v1", policy, frames_per_batch=8, envs_per_worker=2, **engine) as c:
        c.update_policy_weights_(TensorDict.from_module(learner))
        _fill(learner, 5.0)  # a training step, in place
        assert all((p == 2.0).all() for p in policy.parameters())
        assert all(p.data_ptr() != q.data_ptr() for p, q in zip(policy.parameters(), learner.parameters(), strict=True))
        weights = c.state_dict()["policy_state_dict"]
        assert all((w == 2.0).all() for w in weights.values())


def _extras_policy(later: dict[str, Any]) -> Any:
    """An action and extras ``score`` (float32 [n]) and ``count`` (int64 [n]) for three calls
    (dry runs included), then ``later``'s replacements (``None``: the key is left out)."""
    calls = {"n": 0}

    def policy(td: TensorDict) -> dict[str, torch.Tensor]:
        calls["n"] += 1
        n = td.batch_size[0]
        out = {
            "action": torch.zeros(n, dtype=torch.long),
            "score": torch.zeros(n),
            "count": torch.ones(n, dtype=torch.long),
        }
        if calls["n"] > 3:
            for key, make in later.items():
                if make is None:
                    del out[key]  # no longer returned
                else:
                    out[key] = make(n)
        return out

    return policy


_ENGINES = [
    pytest.param({}, id="inprocess"),
    pytest.param({"engine": Central(groups=2), "num_workers": 2}, id="central"),  # a call of 2 envs: 1 per worker
    pytest.param({"num_workers": 2, "restart": "never"}, id="workers"),
]


@pytest.mark.parametrize("engine", _ENGINES)
@pytest.mark.parametrize(
    ("later", "match"),
    [
        (
            {"score": lambda n: torch.zeros(1)},
            r"'score' of shape \(1,\) and dtype torch.float32 at step \d+.*shape \(2,\) and dtype torch.float32",
        ),
        (
            {"count": lambda n: torch.full((n,), 0.5)},
            r"'count' of shape \(2,\) and dtype torch.float32 at step \d+.*shape \(2,\) and dtype torch.int64",
        ),
        ({"score": None}, r"'score' at step \d+.*returned it when the collector was built"),
    ],
    ids=["broadcast", "cast", "dropped"],
)
def test_an_extra_output_that_changes_shape_dtype_or_goes_missing_mid_run_is_a_policy_error(
    engine: dict[str, Any], later: dict[str, Any], match: str
) -> None:
    """The extras are checked on every call as the action is: never broadcast or cast silently."""
    policy = _extras_policy(later)
    error = WorkerCrashedError if engine.get("num_workers") and "engine" not in engine else PolicyError
    with (
        Collector("CartPole-v1", policy, frames_per_batch=16, envs_per_worker=2, **engine) as collector,
        pytest.raises(error, match=match),
    ):
        collector.next_batch()


def test_weights_given_for_a_non_module_policy_is_an_error() -> None:
    with (
        Collector("CartPole-v1", lambda td: torch.zeros(1, dtype=torch.int64), frames_per_batch=8) as c,
        pytest.raises(PolicyError, match="not an nn.Module"),
    ):
        c.update_policy_weights_({"w": torch.zeros(1)})


def test_device_mismatch_with_policy_parameters_is_named() -> None:
    class OnMeta(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.zeros(1, device="meta"))

        def forward(self, obs):  # pragma: no cover - never called
            return obs

    with pytest.raises(Exception, match="device='cpu' but the policy's parameters are on meta"):
        Collector("CartPole-v1", OnMeta(), frames_per_batch=8, device="cpu")


class _TurningModule(torch.nn.Module):
    """A plain module (called with tensors) acting 0 until its ``turn``-th call, then returning ``later(n)``."""

    def __init__(self, later: Callable[[int], torch.Tensor], turn: int = 4) -> None:
        super().__init__()
        self.later, self.turn, self.calls = later, turn, 0

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        n = observation.shape[0]
        return self.later(n) if self.calls >= self.turn else torch.zeros(n, dtype=torch.int64)


@pytest.mark.parametrize("engine", [{}, {"engine": "central", "num_workers": 2}], ids=["inprocess", "central"])
@pytest.mark.parametrize(
    ("later", "match"),
    [
        (lambda n: torch.full((n,), 0.9), r"returned actions of shape \(\d+,\) and dtype torch.float32.*discrete"),
        (lambda n: torch.zeros(n + 1, dtype=torch.int64), r"returned actions of shape \(\d+,\).*needs shape"),
        (lambda n: (torch.zeros(n, dtype=torch.int64),), r"returned a tuple"),
    ],
    ids=["floats", "shape", "tuple"],
)
def test_a_plain_module_is_checked_on_every_call_too(
    engine: dict[str, Any], later: Callable[[int], Any], match: str
) -> None:
    """A module called with tensors takes the short way of a call; what does not fit still gets the full checks."""
    with (
        Collector("CartPole-v1", _TurningModule(later), frames_per_batch=16, envs_per_worker=2, **engine) as collector,
        pytest.raises(PolicyError, match=match),
    ):
        collector.next_batch()


class _ContextModule(torch.nn.Module):
    """Records, at every call, whether gradients were on and which interaction type was set."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[bool, Any]] = set()

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        from tensordict.nn.probabilistic import interaction_type

        self.seen.add((torch.is_grad_enabled(), interaction_type()))
        return torch.zeros(observation.shape[0], dtype=torch.int64)


@pytest.mark.parametrize("engine", [{}, {"engine": "central", "num_workers": 2}], ids=["inprocess", "central"])
@pytest.mark.parametrize("exploration", ["random", "deterministic"])
def test_a_plain_module_is_called_without_gradients_under_the_collectors_exploration_type(
    engine: dict[str, Any], exploration: str
) -> None:
    from tensordict.nn import InteractionType

    module = _ContextModule()
    kwargs = {"frames_per_batch": 16, "envs_per_worker": 2, "exploration_type": exploration}
    with Collector("CartPole-v1", module, **kwargs, **engine) as collector:
        module.seen.clear()  # the dry run's call
        collector.next_batch()
        collector.next_batch()
    assert module.seen == {(False, InteractionType(exploration))}
    assert torch.is_grad_enabled()  # the caller's mode is left as it was
