"""The ``torchrl`` env backend: TorchRL envs in pycollect's Collector and make_vec."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
import torch
import torchrl_factories as f
from tensordict import TensorDictBase
from torchrl.collectors import Collector as TorchRLCollector
from torchrl.envs import EnvCreator, GymEnv

import pycollect
from pycollect import Collector, ConfigError
from pycollect._rollout.seeding import env_seeds
from pycollect.plugins import resolve_env
from pycollect.testing import check_env_backend
from pycollect_torchrl import TorchRLBackend
from pycollect_torchrl.layout import OneHotSpace

pytestmark = pytest.mark.usefixtures("pycollect_no_leftovers")


def _keys(td: TensorDictBase) -> set[Any]:
    return {k if isinstance(k, tuple) else (k,) for k in td.keys(include_nested=True, leaves_only=True)}


def _one_batch(env: Any, policy: Any = None, **kwargs: Any) -> TensorDictBase:
    with Collector(env, policy, **kwargs) as collector:
        return collector.next_batch()


def test_a_factory_of_a_torchrl_env_is_adopted_by_the_callable_backend() -> None:
    source = resolve_env(f.transformed)
    assert source.backend.name == "callable"
    assert TorchRLBackend in [type(a) for a in source.adopters]  # with the other adopting backends installed
    env = source.make()
    try:
        assert [s.key for s in source.specs(env).observation] == [("observation",), ("step_count",), ("is_init",)]
    finally:
        env.close()


def test_the_conformance_checks_pass() -> None:
    check_env_backend(TorchRLBackend, "torchrl_factories:transformed", unknown_target="torchrl_factories:nothing")


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_transformed_env_gives_the_keys_of_torchrl_s_collector(num_workers: int) -> None:
    batch = _one_batch(f.transformed, frames_per_batch=40, num_workers=num_workers, envs_per_worker=1, seed=3)
    theirs = TorchRLCollector(f.transformed(), None, frames_per_batch=20, total_frames=20)
    try:
        reference = next(iter(theirs))
    finally:
        theirs.shutdown()
    assert _keys(batch) - {("policy_version",)} == _keys(reference)
    for key in _keys(reference):
        assert batch[key].dtype == reference[key].dtype, key
        assert batch[key].shape[2:] == reference[key].shape[1:], key
    # StepCounter(max_steps=10) truncates every 10th step and restarts the count; InitTracker marks starts.
    count = batch["step_count"][..., 0]
    assert torch.equal(count[0, :20] % 10, torch.arange(20) % 10) or batch["next", "terminated"].any()
    assert torch.equal(batch["is_init"][..., 0], count == 0)
    assert torch.equal(batch["next", "truncated"][..., 0], batch["next", "step_count"][..., 0] == 10)
    assert not batch["next", "is_init"].any()
    # CatFrames(N=3): the newest frame is the last 4 features, the one before it shifted one step.
    frames = batch["next", "observation"]
    same_episode = count[:, 1:] > 0
    torch.testing.assert_close(frames[:, 1:, 4:8][same_episode], frames[:, :-1, 8:][same_episode])


CASES = {  # factory -> (policy, whether pycollect steps its gymnasium env directly: the GymEnv fast path)
    "transformed": (f.transformed, f.first_feature_policy, False),
    "cartpole-one-hot": (f.cartpole, f.first_feature_policy, True),
    "cartpole-categorical": (f.cartpole_categorical, f.first_feature_index_policy, True),
    "pendulum": (f.pendulum, f.torque_policy, True),
    "cheetah-run": (f.cheetah, f.squash_policy, True),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("num_workers", [0, 1])
def test_a_rollout_equals_torchrl_s_rollout_of_the_same_env_and_seed(case: str, num_workers: int) -> None:
    factory, make_policy, fast = CASES[case]
    probe = resolve_env(factory).make()
    assert (getattr(probe, "_gym", None) is not None or getattr(probe, "_dmc", None) is not None) is fast
    probe.close()
    steps = 40 if case != "pendulum" else 210  # Pendulum's episodes are cut at 200 steps
    policy = make_policy()
    batch = _one_batch(factory, policy, frames_per_batch=steps, num_workers=num_workers, envs_per_worker=1, seed=7)[0]
    env = factory()
    env.set_seed(env_seeds(7, 1)[0])  # the seed pycollect gives its first env
    reference = env.rollout(steps, policy, break_when_any_done=False)
    env.close()
    # episodes ended (and were reset) within the rollout, but cheetah-run's, which last 1000 steps
    assert bool(reference["next", "done"].any()) is not (case == "cheetah-run")
    for key in _keys(reference):
        expected = reference[key]
        if key == ("next", "reward"):
            expected = expected.float()  # pycollect's batches hold float32 rewards (dm_control's are float64)
        torch.testing.assert_close(batch[key], expected, msg=lambda m, key=key: f"{key}: {m}")


def test_observation_norm_statistics_reach_the_workers_through_an_env_creator() -> None:
    # Statistics computed in the trainer (init_stats on a probe env) reach every worker's env through
    # the factory, as TorchRL's examples hand them to a ParallelEnv.
    probe = f.normalised()
    probe.transform.init_stats(num_iter=20, reduce_dim=0, cat_dim=0)
    state = {k: v.clone() for k, v in probe.transform.state_dict().items()}
    loc, scale = state["loc"], state["scale"]
    probe.close()
    creator = EnvCreator(functools.partial(f.normalised, state))
    policy = f.first_feature_policy()
    batch = _one_batch(creator, policy, frames_per_batch=8, num_workers=1, envs_per_worker=1, seed=1)[0]
    raw = GymEnv("CartPole-v1")
    raw.set_seed(env_seeds(1, 1, worker_index=0)[0])
    reference = raw.rollout(
        8,
        policy=lambda td: td.set("action", f.FirstFeature()((td["observation"] - loc) / scale)),
        break_when_any_done=False,
    )
    raw.close()
    torch.testing.assert_close(batch["observation"], (reference["observation"] - loc) / scale)


def test_categorical_one_hot_and_bounded_actions() -> None:
    categorical = _one_batch(f.cartpole_categorical, frames_per_batch=16, envs_per_worker=2, seed=0)
    assert categorical["action"].shape == (2, 8) and categorical["action"].dtype == torch.int64
    assert set(categorical["action"].unique().tolist()) <= {0, 1}
    one_hot = _one_batch(f.cartpole, frames_per_batch=64, envs_per_worker=2, seed=0)
    assert one_hot["action"].shape == (2, 32, 2)
    assert torch.equal(one_hot["action"].sum(-1), torch.ones(2, 32, dtype=torch.int64))  # random actions are one-hot
    bounded = _one_batch(f.pendulum, frames_per_batch=64, envs_per_worker=2, seed=0)
    assert bounded["action"].shape == (2, 32, 1) and bounded["action"].abs().max() <= 2.0
    assert bounded["action"].abs().max() > 1.0  # drawn over Pendulum's [-2, 2], not a default range


def test_nested_keys_and_a_collector_in_workers() -> None:
    batch = _one_batch(f.tiny_nested, frames_per_batch=12, num_workers=2, envs_per_worker=1, seed=0)
    assert {("agent", "position"), ("agent", "mode"), ("count",), ("next", "agent", "mode")} <= _keys(batch)
    assert batch["agent", "mode"].dtype == torch.int64
    # 5-step episodes, terminated: the counter restarts, and ("next", "count") is the terminal one.
    assert batch["next", "terminated"][0, 4, 0] and batch["next", "count"][0, 4, 0] == 5
    assert batch["count"][0, 5, 0] == 0
    torch.testing.assert_close(batch["agent", "position"][0, :5, 0], torch.arange(5) / 10)


def test_make_vec_steps_torchrl_envs_in_workers() -> None:
    envs = pycollect.make_vec(f.transformed, 2, num_workers=2)
    try:
        assert isinstance(envs.single_action_space, OneHotSpace)
        observations, _ = envs.reset(seed=5)
        assert set(observations) == {"observation", "step_count", "is_init"}
        assert observations["observation"].shape == (2, 12)
        ended = np.zeros(2, bool)
        for t in range(12):
            action = np.eye(2, dtype=np.int64)[(np.arange(2) + t) % 2]  # one-hot for each env
            observations, _rewards, terminated, truncated, _ = envs.step(action)
            ended |= terminated | truncated
            assert (observations["step_count"][~ended, 0] == t + 1).all()
        assert ended.all()  # by StepCounter(max_steps=10) at the latest
    finally:
        envs.close()


def test_one_hot_space_samples_one_hots() -> None:
    space = OneHotSpace(4)
    space.seed(0)
    samples = np.stack([space.sample() for _ in range(50)])
    assert (samples.sum(-1) == 1).all() and space.contains(samples[0]) and not space.contains(np.ones(4, np.int8))


@pytest.mark.parametrize(
    ("factory", "match"),
    [
        (f.batched, "already batched \\(batch_size=\\[2\\]\\)"),
        (f.tiny_non_tensor, "observation 'text' is a NonTensor spec, not a tensor"),
        (f.tiny_variable_shape, "observation 'tokens' has a variable shape \\[-1\\]"),
    ],
)
@pytest.mark.parametrize("num_workers", [0, 2])
def test_envs_that_cannot_be_laid_out_are_refused_before_any_worker_starts(
    factory: Any, match: str, num_workers: int
) -> None:
    with pytest.raises(ConfigError, match=match):
        Collector(factory, frames_per_batch=8, num_workers=num_workers)
    with pytest.raises(ConfigError, match=match):
        pycollect.make_vec(factory, 2, num_workers=num_workers)


def test_an_env_instance_is_refused_with_what_to_pass() -> None:
    env = GymEnv("CartPole-v1")
    try:
        with pytest.raises(ConfigError, match="TorchRL EnvBase instance \\(GymEnv\\).*factory of one"):
            Collector(env, frames_per_batch=8)
    finally:
        env.close()


def test_the_backend_by_name_and_an_env_class_as_factory() -> None:
    batch = _one_batch("torchrl:torchrl_factories:cartpole_categorical", frames_per_batch=8, seed=0)
    assert batch["observation"].shape == (1, 8, 4)
    batch = _one_batch(GymEnv, env_kwargs={"env_name": "Pendulum-v1"}, frames_per_batch=8, seed=0)
    assert batch["action"].shape == (1, 8, 1)
    with pytest.raises(pycollect.UnknownEnvError, match="cannot import TorchRL env factory"):
        Collector("torchrl:torchrl_factories:nothing", frames_per_batch=8)


@pytest.mark.parametrize("num_workers", [0, 1])
def test_an_init_tracker_s_is_init_is_the_one_a_policy_reading_is_init_gets(num_workers: int) -> None:
    # pycollect carries is_init for such a policy; the env observes it too: one field, in workers as well.
    batch = _one_batch(
        f.transformed, f.start_aware_policy(), frames_per_batch=24, num_workers=num_workers, envs_per_worker=1, seed=1
    )
    assert torch.equal(batch["is_init"][..., 0], batch["step_count"][..., 0] == 0)
    assert batch["is_init"][0, 0, 0] and not batch["next", "is_init"].any()
    assert torch.equal(
        batch["action"][batch["is_init"][..., 0]][:, 1], torch.ones(int(batch["is_init"].sum()), dtype=torch.int64)
    )
