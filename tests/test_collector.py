"""The in-process Collector: batch format, episode semantics and the knobs users expect."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import pycollect
from pycollect import Collector, CollectorClosedError, ConfigError, PyCollectWarning
from pycollect.testing.envs import CountingEnv, DictObsEnv, MultiBinaryActionEnv

TORCHRL_KEYS = {
    "observation",
    "action",
    "done",
    "terminated",
    "truncated",
    ("next", "observation"),
    ("next", "reward"),
    ("next", "done"),
    ("next", "terminated"),
    ("next", "truncated"),
    ("collector", "traj_ids"),
}


def _keys(batch) -> set:
    return {k if isinstance(k, str) else tuple(k) for k in batch.keys(include_nested=True, leaves_only=True)}


def test_batch_has_torchrl_keys_shapes_and_time_dim() -> None:
    with Collector("CartPole-v1", frames_per_batch=64, envs_per_worker=4, seed=1) as collector:
        batch = collector.next_batch()
    assert _keys(batch) >= TORCHRL_KEYS
    assert batch.batch_size == torch.Size([4, 16]) and batch.names == [None, "time"]
    assert batch["observation"].shape == (4, 16, 4) and batch["observation"].dtype == torch.float32
    assert batch["action"].shape == (4, 16) and batch["action"].dtype == torch.int64
    assert batch["next", "reward"].shape == (4, 16, 1) and batch["next", "reward"].dtype == torch.float32
    for key in ("done", "terminated", "truncated"):
        assert batch[key].shape == (4, 16, 1) and batch[key].dtype == torch.bool
        assert batch["next", key].shape == (4, 16, 1)
    assert batch["collector", "traj_ids"].dtype == torch.int64
    assert torch.equal(batch["next", "done"], batch["next", "terminated"] | batch["next", "truncated"])
    assert not batch["done"].any()


def test_auto_reset_keeps_terminal_next_obs_and_starts_from_reset_obs() -> None:
    with Collector(CountingEnv, frames_per_batch=12, envs_per_worker=1, seed=3, env_kwargs={"length": 5}) as c:
        batch = c.next_batch()
    step = batch["observation"][0, :, 1]
    next_step = batch["next", "observation"][0, :, 1]
    done = batch["next", "done"][0, :, 0]
    assert step.tolist() == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1]
    assert next_step.tolist() == [1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2]
    assert done.tolist() == [False] * 4 + [True] + [False] * 4 + [True] + [False] * 2
    assert batch["next", "terminated"][0, 4, 0] and not batch["next", "truncated"][0, 4, 0]
    traj = batch["collector", "traj_ids"][0]
    assert traj.tolist() == [0] * 5 + [1] * 5 + [2] * 2
    # Within an episode the next observation of step t is the observation of step t+1.
    not_done = ~done[:-1]
    assert torch.equal(batch["next", "observation"][0, :-1][not_done], batch["observation"][0, 1:][not_done])


def test_trajectories_continue_across_batches() -> None:
    with Collector(CountingEnv, frames_per_batch=3, seed=0, env_kwargs={"length": 5}) as c:
        first, second = c.next_batch(), c.next_batch()
    assert first["collector", "traj_ids"][0].tolist() == [0, 0, 0]
    assert second["collector", "traj_ids"][0].tolist() == [0, 0, 1]
    assert second["observation"][0, :, 1].tolist() == [3, 4, 0]


def test_traj_ids_are_unique_across_envs() -> None:
    with Collector(CountingEnv, frames_per_batch=40, envs_per_worker=4, seed=0, env_kwargs={"length": 3}) as c:
        batch = c.next_batch()
    ids = batch["collector", "traj_ids"]
    rows = [set(ids[i].tolist()) for i in range(4)]
    for i in range(4):
        for j in range(i + 1, 4):
            assert not rows[i] & rows[j]


def test_max_frames_per_traj_truncates() -> None:
    with Collector(CountingEnv, frames_per_batch=10, max_frames_per_traj=3, env_kwargs={"length": 100}) as c:
        batch = c.next_batch()
    truncated = batch["next", "truncated"][0, :, 0]
    assert truncated.tolist() == [False, False, True] * 3 + [False]
    assert not batch["next", "terminated"].any()
    assert batch["observation"][0, :, 1].tolist() == [0, 1, 2] * 3 + [0]


def test_gymnasium_time_limit_shows_as_truncated() -> None:
    with Collector("CartPole-v1", frames_per_batch=50, env_kwargs={"max_episode_steps": 5}, seed=0) as c:
        batch = c.next_batch()
    assert batch["next", "truncated"].any() or batch["next", "terminated"].any()
    assert batch["next", "done"].sum() >= 50 // 5


def test_total_frames_len_and_iteration() -> None:
    with pytest.warns(
        PyCollectWarning,
        match=(
            r"total_frames \(100\) is not exactly divisible by frames_per_batch \(30\): "
            r"the collector delivers 4 batches, 120 frames \(20 more\)"
        ),
    ):
        c = Collector("CartPole-v1", frames_per_batch=30, total_frames=100, envs_per_worker=3)
    with c:
        assert len(c) == math.ceil(100 / 30)
        batches = list(c)
        assert len(batches) == 4 and c.frames == 120
        assert list(c) == []  # already done


def test_endless_collector_has_no_len() -> None:
    with Collector("CartPole-v1", frames_per_batch=8) as c:
        with pytest.raises(TypeError, match="endless"):
            len(c)
        iterator = iter(c)
        for _ in range(3):
            next(iterator)
        assert c.frames == 24


def test_frames_per_batch_rounds_up_with_a_warning() -> None:
    with pytest.warns(PyCollectWarning, match="frames_per_batch=10 .* 4 environments .*envs_per_worker=4"):
        c = Collector("CartPole-v1", frames_per_batch=10, envs_per_worker=4)
    with c:
        assert c.frames_per_batch == 12 and c.next_batch().batch_size == torch.Size([4, 3])


def test_init_random_frames_then_policy() -> None:
    calls = []

    def policy(td):
        calls.append(td.batch_size)
        return torch.zeros(td.batch_size[0], dtype=torch.int64)

    with Collector("CartPole-v1", policy, frames_per_batch=10, init_random_frames=20, seed=0) as c:
        calls.clear()  # the dry run during construction
        first = c.next_batch()
        c.next_batch()
        assert calls == []
        third = c.next_batch()
    assert len(calls) == 10 and (third["action"] == 0).all()
    assert first["action"].unique().numel() == 2  # random actions use both


def test_reset_at_each_iter_starts_fresh_trajectories() -> None:
    with Collector(CountingEnv, frames_per_batch=3, reset_at_each_iter=True, env_kwargs={"length": 10}) as c:
        first, second = c.next_batch(), c.next_batch()
    assert first["observation"][0, :, 1].tolist() == [0, 1, 2]
    assert second["observation"][0, :, 1].tolist() == [0, 1, 2]
    assert second["collector", "traj_ids"][0, 0] != first["collector", "traj_ids"][0, 0]


def test_split_trajs_pads_and_masks() -> None:
    with Collector(
        CountingEnv, frames_per_batch=14, envs_per_worker=2, split_trajs=True, env_kwargs={"length": 3}, seed=0
    ) as c:
        batch = c.next_batch()
    mask = batch["collector", "mask"]
    assert batch.names == [None, "time"] and batch.batch_size[1] == 3
    # each env row of 7 steps = trajectories of 3, 3 and 1 steps
    assert sorted(mask.sum(1).tolist()) == [1, 1, 3, 3, 3, 3]
    ids = batch["collector", "traj_ids"]
    for row in range(batch.batch_size[0]):
        n = int(mask[row].sum())
        assert batch["observation"][row, :n, 1].tolist() == list(range(n))
        assert (ids[row, :n] == ids[row, 0]).all()
        assert (batch["observation"][row, n:] == 0).all() and not batch["next", "done"][row, n:].any()
    assert ids[:, 0].tolist() == sorted(ids[:, 0].tolist())


def test_same_seed_same_batches_different_seed_different() -> None:
    def run(seed):
        with Collector("CartPole-v1", frames_per_batch=64, envs_per_worker=4, seed=seed) as c:
            return [c.next_batch() for _ in range(3)]

    a, b, other = run(7), run(7), run(8)
    for x, y in zip(a, b, strict=True):
        assert (x == y).all()
    assert not all((x["observation"] == y["observation"]).all() for x, y in zip(a, other, strict=True))


def test_envs_in_a_worker_get_distinct_seeds() -> None:
    seeds = pycollect.env_seeds(0, 8)
    assert len(set(seeds)) == 8 and seeds == pycollect.env_seeds(0, 8)
    assert pycollect.env_seeds(0, 8, worker_index=1) != seeds
    with Collector("CartPole-v1", frames_per_batch=8, envs_per_worker=8, seed=0) as c:
        first_obs = c.next_batch()["observation"][:, 0]
    assert len({tuple(row.tolist()) for row in first_obs}) == 8


def test_dict_observations_become_nested_keys_and_multidiscrete_actions() -> None:
    with Collector(DictObsEnv, frames_per_batch=20, envs_per_worker=2, seed=0) as c:
        batch = c.next_batch()
    assert batch["observation", "position"].shape == (2, 10, 3)
    assert batch["observation", "sensors", "touch"].dtype == torch.int8
    assert batch["next", "observation", "sensors", "mode"].shape == (2, 10)
    assert batch["action"].shape == (2, 10, 2)
    assert batch["next", "truncated"][:, 6].all()  # 7-step episodes
    assert torch.allclose(batch["next", "reward"][..., 0], batch["action"].sum(-1).float())


def test_multibinary_actions() -> None:
    with Collector(MultiBinaryActionEnv, frames_per_batch=6, seed=0) as c:
        batch = c.next_batch()
    assert batch["action"].dtype == torch.int8 and batch["action"].shape == (1, 6, 4)
    assert torch.equal(batch["next", "observation"], batch["action"].float())


def test_continuous_actions_random_policy_within_bounds() -> None:
    with Collector("Pendulum-v1", frames_per_batch=200, envs_per_worker=2, seed=0) as c:
        batch = c.next_batch()
    action = batch["action"]
    assert action.shape == (2, 100, 1) and action.dtype == torch.float32
    assert action.min() >= -2 and action.max() <= 2 and action.std() > 0.5


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"frames_per_batch": 0}, "frames_per_batch must be a positive integer, got 0"),
        ({"frames_per_batch": -5}, "frames_per_batch .* got -5"),
        ({"frames_per_batch": 2.5}, "frames_per_batch .* got 2.5"),
        ({"frames_per_batch": 8, "total_frames": 0}, "total_frames .* got 0"),
        ({"frames_per_batch": 8, "envs_per_worker": 0}, "envs_per_worker .* got 0"),
        ({"frames_per_batch": 8, "max_frames_per_traj": 0}, "max_frames_per_traj .* got 0"),
        ({"frames_per_batch": 8, "init_random_frames": -1}, "init_random_frames .* got -1"),
        ({"frames_per_batch": 8, "seed": -3}, "seed .* got -3"),
        ({"frames_per_batch": 8, "device": "tpu"}, "device='tpu'"),
        ({"frames_per_batch": 8, "storing_device": "cuda:7"}, "storing_device='cuda:7'"),
        ({"frames_per_batch": 8, "info_keys": "lives"}, "info_keys must be a sequence .* got 'lives'"),
        ({"frames_per_batch": 8, "info_keys": ["lives", ""]}, r"info_keys .* got \['lives', ''\]"),
        # make_vec's "every entry"; a collector's batch keeps named entries only
        ({"frames_per_batch": 8, "info_keys": None}, r"info_keys .* got None.*name the entries"),
        ({"frames_per_batch": 8, "info_keys": 3}, "info_keys must be a sequence .* got 3"),
    ],
)
def test_bad_arguments_fail_before_anything_runs(kwargs: dict, match: str) -> None:
    built = []

    def factory():
        built.append(1)
        return CountingEnv()

    with pytest.raises(ConfigError, match=match):
        Collector(factory, **kwargs)
    assert built == []


def test_unknown_env_and_backend() -> None:
    with pytest.raises(pycollect.UnknownEnvError, match="NoSuch-v0"):
        Collector("NoSuch-v0", frames_per_batch=8)
    with pytest.raises(pycollect.UnknownBackendError, match="'nosuchlib'"):
        Collector("nosuchlib:Pong-v5", frames_per_batch=8)


def test_shutdown_is_idempotent_and_closes_envs() -> None:
    closed = []

    class Tracked(CountingEnv):
        def close(self) -> None:
            closed.append(1)

    c = Collector(Tracked, frames_per_batch=4, envs_per_worker=2)
    c.next_batch()
    c.shutdown()
    c.shutdown()
    assert closed == [1, 1]
    with pytest.raises(CollectorClosedError):
        c.next_batch()


def test_state_dict_round_trip() -> None:
    policy = torch.nn.Linear(4, 1)
    with Collector("CartPole-v1", _argmax(policy), frames_per_batch=8, total_frames=32) as c:
        c.next_batch()
        c.update_policy_weights_()
        state = c.state_dict()
    assert state["frames"] == 8 and state["policy_version"] == 1
    with Collector("CartPole-v1", frames_per_batch=8, total_frames=32) as resumed:
        resumed.load_state_dict({k: v for k, v in state.items() if k != "policy_state_dict"})
        assert resumed.frames == 8 and resumed.policy_version == 1
        assert len(list(resumed)) == 3
    with pytest.raises(ConfigError, match="state_dict"):
        Collector("CartPole-v1", frames_per_batch=8).load_state_dict({"frames": 1})


class _argmax(torch.nn.Module):
    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return (self.net(obs)[:, 0] > 0).long()


def test_observation_dtypes_and_values_match_env() -> None:
    with Collector("CartPole-v1", frames_per_batch=16, envs_per_worker=2, seed=0) as c:
        batch = c.next_batch()
    obs = batch["observation"].numpy()
    assert np.isfinite(obs).all() and obs.dtype == np.float32
