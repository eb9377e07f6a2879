"""TorchRL drop-in parity: exploration, weights of function policies, recurrent policies."""

from __future__ import annotations

import warnings

import pytest
import torch
from tensordict.nn import TensorDictModule
from torchrl.envs.utils import ExplorationType
from torchrl.modules import ProbabilisticActor
from torch.distributions import Categorical

from pycollect import Collector, ConfigError, PyCollectWarning

pytestmark = pytest.mark.timeout(180)


def _actor() -> ProbabilisticActor:
    """Logits [1, 0] whatever the observation: action 0 with probability 0.73, the argmax."""
    net = torch.nn.Linear(4, 2)
    with torch.no_grad():
        net.weight.zero_()
        net.bias.copy_(torch.tensor([1.0, 0.0]))
    module = TensorDictModule(net, in_keys=["observation"], out_keys=["logits"])
    return ProbabilisticActor(module, in_keys=["logits"], distribution_class=Categorical, return_log_prob=True)


@pytest.mark.parametrize("num_workers", [0, 1])
@pytest.mark.parametrize("exploration", [None, ExplorationType.RANDOM, "random"])
def test_a_probabilistic_actor_samples_by_default_and_with_random(num_workers: int, exploration: object) -> None:
    kwargs = {} if exploration is None else {"exploration_type": exploration}
    with Collector(
        "CartPole-v1", _actor(), frames_per_batch=512, envs_per_worker=4, num_workers=num_workers, seed=0, **kwargs
    ) as collector:
        batch = collector.next_batch()
    ones = batch["action"].float().mean().item()
    assert 0.15 < ones < 0.40  # sampled: about 27 % of actions are not the argmax
    assert torch.allclose(batch["action_log_prob"].exp(), torch.where(batch["action"] == 0, 0.731, 0.269), atol=1e-3)


@pytest.mark.parametrize("num_workers", [0, 1])
def test_deterministic_exploration_acts_greedily(num_workers: int) -> None:
    with Collector(
        "CartPole-v1",
        _actor(),
        frames_per_batch=256,
        envs_per_worker=4,
        num_workers=num_workers,
        exploration_type=ExplorationType.DETERMINISTIC,
    ) as collector:
        batch = collector.next_batch()
    assert (batch["action"] == 0).all()


def test_init_random_frames_still_means_uniform_random_actions() -> None:
    with Collector(
        "CartPole-v1", _actor(), frames_per_batch=512, init_random_frames=512, exploration_type="deterministic", seed=0
    ) as collector:
        first, second = collector.next_batch(), collector.next_batch()
    assert 0.4 < first["action"].float().mean().item() < 0.6  # uniform
    assert (second["action"] == 0).all()


def test_a_bad_exploration_type_is_named() -> None:
    with pytest.raises(ConfigError, match="exploration_type='greedy'"):
        Collector("CartPole-v1", frames_per_batch=8, exploration_type="greedy")


class _Bias(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.tensor(-1.0))


def test_a_function_policy_with_weights_from_gets_new_weights_in_workers() -> None:
    net = _Bias()

    def policy(td):  # type: ignore[no-untyped-def]
        return (td["observation"][:, 0] * 0 + net.bias > 0).long()  # 0 while bias < 0, then 1

    with Collector(
        "CartPole-v1", policy, weights_from=net, frames_per_batch=32, envs_per_worker=4, num_workers=2, seed=0
    ) as collector:
        assert (collector.next_batch()["action"] == 0).all()
        with torch.no_grad():
            net.bias.fill_(1.0)
        with warnings.catch_warnings():
            warnings.simplefilter("error", PyCollectWarning)  # weights move: nothing to warn about
            collector.update_policy_weights_()
        batches = [collector.next_batch() for _ in range(3)]
    assert (batches[-1]["action"] == 1).all() and (batches[-1]["policy_version"] == 1).all()


def test_a_function_policy_without_weights_from_warns_once_naming_what_to_pass() -> None:
    net = _Bias()

    def policy(td):  # type: ignore[no-untyped-def]
        return (td["observation"][:, 0] * 0 + net.bias > 0).long()

    with Collector("CartPole-v1", policy, frames_per_batch=8, num_workers=1) as collector:
        with pytest.warns(PyCollectWarning, match=r"policy .*policy is not an nn.Module.*weights_from=net"):
            collector.update_policy_weights_()
        with warnings.catch_warnings():
            warnings.simplefilter("error", PyCollectWarning)
            collector.update_policy_weights_()  # once only
