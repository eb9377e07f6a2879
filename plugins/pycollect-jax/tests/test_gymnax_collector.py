"""``Collector("gymnax:CartPole-v1", ...)``: batches in-process, with workers and with the central engine."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from gymnax_helpers import fell, is_reset
from tensordict import TensorDictBase

from pycollect import Collector

SPEC = "gymnax:CartPole-v1"
K, T = 8, 32  # sub-envs per worker, steps per batch


def _batches(count: int = 2, env: str = SPEC, **kwargs: Any) -> list[TensorDictBase]:
    workers = kwargs.get("num_workers", 0) or 1
    kwargs.setdefault("frames_per_batch", workers * K * T)
    with Collector(env, None, envs_per_worker=K, seed=kwargs.pop("seed", 0), **kwargs) as collector:
        return [collector.next_batch() for _ in range(count)]


def _check(batch: TensorDictBase, rows: int) -> None:
    assert batch.batch_size == torch.Size([rows, T])
    for key in ("observation", ("next", "observation")):
        assert batch[key].shape == (rows, T, 4) and batch[key].dtype == torch.float32, key
    assert batch["action"].shape == (rows, T) and batch["action"].dtype == torch.int64
    assert set(batch["action"].unique().tolist()) <= {0, 1}
    assert batch["next", "reward"].shape == (rows, T, 1) and batch["next", "reward"].dtype == torch.float32
    assert (batch["next", "reward"] == 1).all()
    for flag in ("done", "terminated", "truncated"):
        assert batch["next", flag].shape == (rows, T, 1) and batch["next", flag].dtype == torch.bool
    done, terminated = batch["next", "done"][..., 0], batch["next", "terminated"][..., 0]
    assert torch.equal(done, terminated | batch["next", "truncated"][..., 0])
    assert done.any()  # random CartPole episodes last ~20 steps
    assert not batch["next", "truncated"].any()  # ... far from the 500-step limit
    obs, following = batch["observation"].numpy(), batch["next", "observation"].numpy()
    ended = done.numpy()
    # where an episode ended, the next observation is the final one (the pole fell) ...
    assert fell(following[ended]).all() and not fell(following[~ended]).any()
    # ... the next step starts from a reset state, in a new trajectory; elsewhere obs follows next obs
    resumed = ended[:, :-1]
    assert is_reset(obs[:, 1:][resumed]).all()
    assert (obs[:, 1:][~resumed] == following[:, :-1][~resumed]).all()
    traj = batch["collector", "traj_ids"]
    assert (traj[:, 1:][torch.from_numpy(resumed)] != traj[:, :-1][torch.from_numpy(resumed)]).all()
    assert (traj[:, 1:][torch.from_numpy(~resumed)] == traj[:, :-1][torch.from_numpy(~resumed)]).all()


def _assert_identical(a: list[TensorDictBase], b: list[TensorDictBase]) -> None:
    for x, y in zip(a, b, strict=True):
        assert set(x.keys(True, True)) == set(y.keys(True, True))
        for key in x.keys(True, True):
            assert torch.equal(x[key], y[key]), key


def test_in_process_batches_and_reproducibility() -> None:
    a, b, c = _batches(), _batches(), _batches(seed=1)
    for batch in a:
        _check(batch, K)
    _assert_identical(a, b)
    assert not torch.equal(a[0]["observation"], c[0]["observation"])
    assert len({tuple(row.tolist()) for row in a[0]["observation"][:, 0]}) == K  # each sub-env its own start


@pytest.mark.timeout(240)
@pytest.mark.parametrize("engine", [None, "central"])
def test_two_workers_batches_and_reproducibility(engine: str | None) -> None:
    kwargs: dict[str, Any] = {"num_workers": 2} if engine is None else {"num_workers": 2, "engine": engine}
    a, b = _batches(**kwargs), _batches(**kwargs)
    for batch in a:
        _check(batch, 2 * K)
    _assert_identical(a, b)
    # the two workers' sub-envs are seeded apart
    assert not torch.equal(a[0]["observation"][:K, 0], a[0]["observation"][K:, 0])


def test_a_trajectory_limit_resets_sub_envs_by_mask() -> None:
    limit = 16
    (batch,) = _batches(1, max_frames_per_traj=limit)
    done = batch["next", "done"][..., 0].numpy()
    truncated = batch["next", "truncated"][..., 0].numpy()
    terminated = batch["next", "terminated"][..., 0].numpy()
    assert truncated.any() and terminated.any()  # some cut by the limit, some poles fell before it
    following = batch["next", "observation"].numpy()
    assert fell(following[terminated]).all() and not fell(following[truncated]).any()
    for row in range(K):
        ends = np.flatnonzero(done[row])
        lengths = np.diff(np.concatenate([[-1], ends]))
        lengths[0] = T  # the first trajectory may have begun in an earlier batch: not counted
        assert (lengths[1:] <= limit).all()
        for end, length in zip(ends[1:], lengths[1:], strict=True):
            assert truncated[row, end] == (length == limit and not terminated[row, end])
    resumed = done[:, :-1]  # every sub-env cut by the limit was reset (by mask) for the next step
    assert is_reset(batch["observation"].numpy()[:, 1:][resumed]).all()


def test_gymnax_and_gymnasium_cartpole_give_batches_of_one_layout_not_of_the_same_data() -> None:
    (ours,) = _batches(1)
    (theirs,) = _batches(1, env="CartPole-v1")
    assert set(ours.keys(True, True)) == set(theirs.keys(True, True))
    for key in ours.keys(True, True):
        assert (ours[key].shape, ours[key].dtype) == (theirs[key].shape, theirs[key].dtype), key
    assert not torch.equal(ours["observation"], theirs["observation"])


@pytest.mark.parametrize("engine", ["inprocess", "workers", "central"])
def test_a_resumed_run_makes_the_batches_of_the_uninterrupted_one(engine: str) -> None:
    workers = 0 if engine == "inprocess" else 2
    settings: dict[str, Any] = {"num_workers": workers, "engine": engine, "seed": 5}
    if workers:
        settings["snapshots"] = True
    whole = _batches(6, **settings)
    with Collector(SPEC, None, envs_per_worker=K, frames_per_batch=max(workers, 1) * K * T, **settings) as first:
        _assert_identical([first.next_batch() for _ in range(2)], whole[:2])
        state = first.state_dict(env_states=True)  # every sub-env mid-episode, its key stream too
    with Collector(
        SPEC, None, envs_per_worker=K, frames_per_batch=max(workers, 1) * K * T, resume=state, **settings
    ) as resumed:
        _assert_identical([resumed.next_batch() for _ in range(4)], whole[2:])


def test_a_killed_worker_is_replayed_every_batch_identical() -> None:
    import os
    import signal

    settings: dict[str, Any] = {"num_workers": 2, "seed": 5}
    whole = _batches(8, **settings)
    replay = {"recovery": "replay", "max_restarts": 6, "backoff_initial_s": 0.01, "backoff_max_s": 0.05}
    with Collector(SPEC, None, envs_per_worker=K, frames_per_batch=2 * K * T, **settings, **replay) as killed:
        got = []
        for b in range(8):
            got.append(killed.next_batch())
            if b in (1, 4):
                pid = killed.stats().workers[b % 2].pid
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)
        assert killed.stats().restarts >= 1
    _assert_identical(got, whole)
