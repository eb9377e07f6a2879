"""TorchRL drop-in parity: exploration, weights of function policies, recurrent policies."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch.distributions import Categorical
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.data.postprocs import MultiStep
from torchrl.envs.utils import ExplorationType
from torchrl.modules import LSTMModule, ProbabilisticActor, set_recurrent_mode

from pycollect import Collector, ConfigError, PyCollectWarning
from pycollect.testing.envs import CountingEnv

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


# -- recurrent policies ----------------------------------------------------------------------


def _lstm_actor() -> tuple[ProbabilisticActor, TensorDictSequential]:
    torch.manual_seed(0)
    lstm = LSTMModule(input_size=4, hidden_size=8, in_key="observation", out_key="embed")
    head = TensorDictModule(torch.nn.Linear(8, 2), in_keys=["embed"], out_keys=["logits"])
    body = TensorDictSequential(lstm, head)
    return ProbabilisticActor(body, in_keys=["logits"], distribution_class=Categorical, return_log_prob=True), body


@pytest.mark.parametrize("num_workers", [0, 1])
def test_a_recurrent_policy_gets_its_state_back_and_a_loss_can_replay_the_sequence(num_workers: int) -> None:
    actor, body = _lstm_actor()
    with Collector(
        "CartPole-v1", actor, frames_per_batch=128, envs_per_worker=2, num_workers=num_workers, seed=0
    ) as collector:
        collector.next_batch()
        batch = collector.next_batch()  # a batch whose first states carry over from the one before
    keys = {k if isinstance(k, str) else tuple(k) for k in batch.keys(True, True)}
    assert {"is_init", ("next", "is_init"), "recurrent_state_h", ("next", "recurrent_state_h")} <= keys
    assert batch["recurrent_state_h"].shape == (2, 64, 1, 8) and batch["is_init"].dtype == torch.bool
    h, next_h, done = batch["recurrent_state_h"], batch["next", "recurrent_state_h"], batch["next", "done"][..., 0]
    is_init = batch["is_init"][..., 0]
    going_on = ~done[:, :-1]
    assert torch.equal(h[:, 1:][going_on], next_h[:, :-1][going_on])  # carried from one step to the next
    assert torch.equal(is_init[:, 1:], done[:, :-1]) and is_init.any()  # True exactly where an episode starts
    assert (h[is_init] == 0).all()  # reset where an episode starts
    assert not batch["next", "is_init"].any()
    with set_recurrent_mode(True), torch.no_grad():  # what a loss does with the stored sequence
        replay = body(batch.select("observation", "is_init", "recurrent_state_h", "recurrent_state_c").clone())
    assert torch.allclose(replay["logits"], batch["logits"], atol=1e-5)


# -- TorchRL's collector knobs ----------------------------------------------------------------


def test_a_replay_buffer_is_extended_with_every_batch_and_iteration_yields_none() -> None:
    buffer = ReplayBuffer(storage=LazyTensorStorage(1000, ndim=2))
    with Collector("CartPole-v1", frames_per_batch=64, total_frames=256, envs_per_worker=4, replay_buffer=buffer) as c:
        yielded = list(c)
    assert yielded == [None] * 4 and len(buffer) == 256
    assert buffer.sample(8)["next", "observation"].shape == (8, 4)


def test_postproc_runs_on_every_batch_before_the_buffer() -> None:
    buffer = ReplayBuffer(storage=LazyTensorStorage(1000))
    with Collector(
        "CartPole-v1",
        frames_per_batch=64,
        envs_per_worker=4,
        postproc=MultiStep(gamma=0.9, n_steps=3),
        replay_buffer=buffer,
        seed=0,
    ) as collector:
        batch = collector.next_batch()
    assert ("next", "original_reward") in batch.keys(True) and "steps_to_next_obs" in batch
    assert len(buffer) == 4  # a [4, 16] batch on a one-dimensional storage: one item per env row


@pytest.mark.parametrize("num_workers", [0, 2])
def test_set_truncated_marks_every_rollout_end_and_trajectories_go_on(num_workers: int) -> None:
    with Collector(
        CountingEnv,
        frames_per_batch=8 * max(num_workers, 1),
        envs_per_worker=1,
        num_workers=num_workers,
        set_truncated=True,
        env_kwargs={"length": 100},
    ) as collector:
        first, second = collector.next_batch(), collector.next_batch()
        episodes = collector.episodes.count
    assert first["next", "truncated"][:, -1].all() and first["next", "done"][:, -1].all()
    assert not first["next", "truncated"][:, :-1].any()
    assert torch.equal(first["collector", "traj_ids"][:, -1], second["collector", "traj_ids"][:, 0])  # goes on
    assert episodes == 0  # a marked rollout end is no episode end


def test_cat_results_stack_gives_multisync_shapes() -> None:
    with Collector(
        "CartPole-v1", frames_per_batch=96, envs_per_worker=3, num_workers=2, cat_results="stack", seed=0
    ) as collector:
        batch = collector.next_batch()
    assert batch.batch_size == (2, 3, 16) and batch.names == [None, None, "time"]
    with pytest.raises(ConfigError, match="cat_results='stack'"):
        Collector("CartPole-v1", frames_per_batch=8, cat_results="stack")


class _InfoEnv(CountingEnv):
    def step(self, action: int) -> tuple:
        obs, reward, terminated, truncated, _ = super().step(action)
        return obs, reward, terminated, truncated, {"speed": np.float32(self._t * 2.0), "flags": np.array([1, 0])}


@pytest.mark.parametrize("num_workers", [0, 1])
def test_info_keys_are_kept(num_workers: int) -> None:
    with Collector(
        _InfoEnv, frames_per_batch=8, num_workers=num_workers, info_keys=["speed", "flags"], env_kwargs={"length": 3}
    ) as collector:
        batch = collector.next_batch()
    assert batch["next", "speed"][0].tolist() == [2.0, 4.0, 6.0, 2.0, 4.0, 6.0, 2.0, 4.0]
    assert batch["next", "flags"].shape == (1, 8, 2) and batch["next", "flags"].dtype == torch.int64
    with pytest.raises(ConfigError, match="info_keys: .*has no 'missing'"):
        Collector(_InfoEnv, frames_per_batch=8, info_keys=["missing"])


# -- key by key against a real TorchRL collector --------------------------------------------------

# What differs from TorchRL's batch, and why (docs/collector.md's table lists the same):
ONLY_TORCHRL: set = set()
ONLY_PYCOLLECT = {"policy_version"}  # every frame says which weights made it (TorchRL: opt-in)
ACTION_DIFFERS = "action"  # Discrete: an integer index here, one-hot in TorchRL's GymEnv


def _leaves(td) -> dict:  # type: ignore[no-untyped-def]
    return {k if isinstance(k, str) else tuple(k): td.get(k) for k in td.keys(True, True)}


def test_a_batch_matches_torchrls_key_by_key() -> None:
    from torchrl.collectors import Collector as TorchRLCollector
    from torchrl.envs import GymEnv, SerialEnv

    k, steps = 3, 16
    torchrl = TorchRLCollector(
        SerialEnv(k, lambda: GymEnv("CartPole-v1")), None, frames_per_batch=k * steps, total_frames=-1
    )
    try:
        theirs = next(iter(torchrl))
    finally:
        torchrl.shutdown()
    with Collector("CartPole-v1", frames_per_batch=k * steps, envs_per_worker=k, seed=0) as collector:
        ours = collector.next_batch()
    assert ours.batch_size == theirs.batch_size == (k, steps)
    assert ours.names == theirs.names == [None, "time"]
    a, b = _leaves(ours), _leaves(theirs)
    assert set(b) - set(a) == ONLY_TORCHRL and set(a) - set(b) == ONLY_PYCOLLECT
    for key in sorted(set(a) & set(b), key=str):
        if key == ACTION_DIFFERS:
            assert a[key].shape == (k, steps) and b[key].shape == (k, steps, 2)
            continue
        assert a[key].shape == b[key].shape, key
        assert a[key].dtype == b[key].dtype, key


def _cartpoles(k: int):  # type: ignore[no-untyped-def]
    from torchrl.envs import GymEnv, SerialEnv

    return SerialEnv(k, lambda: GymEnv("CartPole-v1"))


def test_cat_results_stack_matches_torchrls_multisync_shape() -> None:
    import functools

    from torchrl.collectors import MultiSyncCollector

    k, steps = 3, 16
    torchrl = MultiSyncCollector(
        [functools.partial(_cartpoles, k)] * 2,
        None,
        frames_per_batch=2 * k * steps,
        total_frames=-1,
        cat_results="stack",
    )
    try:
        theirs = next(iter(torchrl))
    finally:
        torchrl.shutdown()
    with Collector(
        "CartPole-v1", frames_per_batch=2 * k * steps, envs_per_worker=k, num_workers=2, cat_results="stack"
    ) as collector:
        ours = collector.next_batch()
    assert ours.batch_size == theirs.batch_size == (2, k, steps)
    assert ours.names[-1] == theirs.names[-1] == "time"
