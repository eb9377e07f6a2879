"""Random streams: every one derived from (seed, worker, generation, purpose), none shared across seeds."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from tensordict import TensorDictBase

import pycollect
from pycollect import Collector
from pycollect._rollout.seeding import action_rng, env_seeds, torch_seed, traj_id_start

SEEDS = range(5)
WORKERS = range(4)
GENERATIONS = (1, 2, 3)


def noisy_policy(td: TensorDictBase) -> dict[str, torch.Tensor]:
    """Acts on a draw from torch's global generator and shows the draw."""
    noise = torch.rand(td.batch_size[0])
    return {"action": (noise > 0.5).long(), "noise": noise}


def _noise_rows(seed: int, num_workers: int) -> torch.Tensor:
    frames = 16 * max(num_workers, 1)
    with Collector("CartPole-v1", noisy_policy, num_workers=num_workers, frames_per_batch=frames, seed=seed) as c:
        return c.next_batch()["noise"].clone()  # [workers, T]: row w is worker w


def test_no_stream_of_one_seed_is_a_stream_of_another() -> None:
    keys = list(itertools.product(SEEDS, WORKERS, GENERATIONS))
    envs = [tuple(env_seeds(s, 3, w, g)) for s, w, g in keys]
    torches = [torch_seed(s, w, g) for s, w, g in keys]
    actions = [tuple(action_rng(s, w, g).integers(0, 2**62, 4)) for s, w, g in keys]
    every_env_seed = [seed for seeds in envs for seed in seeds]
    assert len(set(every_env_seed)) == len(every_env_seed)
    assert len(set(torches)) == len(torches)
    assert len(set(actions)) == len(actions)


def test_streams_replay_and_do_not_depend_on_the_number_of_envs() -> None:
    assert env_seeds(3, 4, 1, 2) == env_seeds(3, 4, 1, 2)
    assert env_seeds(3, 2, 1, 2) == env_seeds(3, 4, 1, 2)[:2]
    assert torch_seed(3, 1, 2) == torch_seed(3, 1, 2) and torch_seed(None) is None
    assert np.array_equal(action_rng(3, 1).random(8), action_rng(3, 1).random(8))
    assert env_seeds(None, 2) != env_seeds(None, 2)  # fresh entropy each time
    assert pycollect.env_seeds is env_seeds


def test_trajectory_ids_of_workers_and_generations_never_meet() -> None:
    starts = {traj_id_start(w, 4, g) for w in WORKERS for g in GENERATIONS}
    assert len(starts) == len(WORKERS) * len(GENERATIONS)
    assert traj_id_start(0, 4, 1) == 0 and traj_id_start(3, 4, 1) == 3


@pytest.mark.timeout(120)
def test_runs_with_different_seeds_draw_different_torch_samples_in_workers() -> None:
    # The bug: workers seeded torch with seed + worker, so worker 1 of seed 0 drew exactly the
    # samples of worker 0 of seed 1.
    seed0, seed1 = _noise_rows(0, 2), _noise_rows(1, 2)
    rows = [seed0[0], seed0[1], seed1[0], seed1[1]]
    for a, b in itertools.combinations(rows, 2):
        assert not torch.equal(a, b)
    assert torch.equal(_noise_rows(0, 2), seed0)  # and a seed still replays exactly


@pytest.mark.timeout(120)
def test_worker_zero_draws_what_the_in_process_collector_draws() -> None:
    assert torch.equal(_noise_rows(0, 1), _noise_rows(0, 0))
