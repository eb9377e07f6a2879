"""Each observation is written once: ``observation`` is rebuilt from ``("next", "observation")``.

The stepping loop writes every frame into ``("next", "observation")`` and, of ``observation``,
only step 0 and the reset frames; the engines fill in the rest. These tests check the filling
itself and that every engine and batch mode delivers TorchRL's layout exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from pycollect import Collector
from pycollect._rollout.observations import fill_observations
from pycollect.testing.envs import CountingEnv, DictObsEnv

pytestmark = pytest.mark.timeout(180)

UNDEFINED = -7.0  # what the runner leaves in the observation frames it does not write


def _rollout(done_at: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A [3, 5] rollout of [2]-frames with episodes ending at ``done_at``, and the expected obs."""
    k, t = 3, 5
    next_obs = np.arange(k * t * 2, dtype=np.float32).reshape(k, t, 2)
    done = np.zeros((k, t, 1), bool)
    obs = np.full((k, t, 2), UNDEFINED, np.float32)
    obs[:, 0] = -1.0  # the frames the rollout started from
    expected = np.empty_like(obs)
    expected[:, 0] = -1.0
    expected[:, 1:] = next_obs[:, :-1]
    for row, step in done_at:
        done[row, step] = True
        if step + 1 < t:
            obs[row, step + 1] = 1000.0 + row * 10 + step  # a reset frame
            expected[row, step + 1] = obs[row, step + 1]
    return obs, next_obs, done, expected


@pytest.mark.parametrize("done_at", [[], [(0, 0)], [(1, 2), (1, 3), (2, 4)], [(0, 4), (2, 0), (2, 1)]])
def test_fill_in_place_keeps_the_reset_frames(done_at: list[tuple[int, int]]) -> None:
    obs, next_obs, done, expected = _rollout(done_at)
    fill_observations(obs, next_obs, done)
    np.testing.assert_array_equal(obs, expected)


@pytest.mark.parametrize("done_at", [[], [(1, 2), (1, 3), (2, 4)], [(0, 4), (2, 0)]])
def test_fill_into_another_array_leaves_the_source_alone(done_at: list[tuple[int, int]]) -> None:
    obs, next_obs, done, expected = _rollout(done_at)
    source = obs.copy()
    out = np.full_like(obs, np.nan)
    fill_observations(obs, next_obs, done, out=out)
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(obs, source)


class StepModulo(nn.Module):
    """Acts ``step % 3`` from a CountingEnv observation ``[base, step]``: the action shows what it saw."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return (observation[:, 1] * self.scale).long() % 3


MODES: dict[str, dict[str, Any]] = {
    "in-process": {"num_workers": 0},
    "sync": {"num_workers": 2},
    "sync zero-copy": {"num_workers": 2, "zero_copy": True},
    "async": {"num_workers": 2, "sync": False},
    "async zero-copy": {"num_workers": 2, "sync": False, "zero_copy": True},
}


def _check_counting_batch(batch: Any, length: int) -> None:
    """Every row: obs step t+1 is next step t within an episode, 0 after an end; next is obs + 1."""
    step = batch["observation"][..., 1]
    next_step = batch["next", "observation"][..., 1]
    done = batch["next", "done"][..., 0]
    assert torch.equal(next_step, step + 1)  # a CountingEnv step always adds 1
    assert torch.equal(done, next_step == length)
    after_end = done[:, :-1]
    assert torch.equal(step[:, 1:][after_end], torch.zeros_like(step[:, 1:][after_end]))
    assert torch.equal(step[:, 1:][~after_end], next_step[:, :-1][~after_end])
    assert torch.equal(batch["observation"][:, 1:, 0][~after_end], batch["next", "observation"][:, :-1, 0][~after_end])


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("with_policy", [False, True], ids=["random", "policy"])
def test_every_engine_delivers_both_observation_keys(mode: str, with_policy: bool) -> None:
    length, steps = 4, 8  # episodes end at the last step of a rollout too
    policy = StepModulo() if with_policy else None
    kwargs = {"frames_per_batch": 2 * steps * (2 if MODES[mode]["num_workers"] else 1), "envs_per_worker": 2}
    with Collector(
        CountingEnv, policy=policy, seed=1, env_kwargs={"length": length}, **kwargs, **MODES[mode]
    ) as collector:
        previous = None
        for _, batch in zip(range(4), collector, strict=False):
            batch = batch.clone()  # zero-copy batches are views, valid until the next one
            _check_counting_batch(batch, length)
            if with_policy:
                assert torch.equal(batch["action"], batch["observation"][..., 1].long() % 3)
            if previous is not None and MODES[mode].get("sync", True):
                # Sync and in-process rows keep their env: a rollout starts where its row ended.
                ended = previous["next", "done"][:, -1, 0]
                first = batch["observation"][:, 0]
                assert torch.equal(first[~ended], previous["next", "observation"][:, -1][~ended])
                assert torch.equal(first[ended][:, 1], torch.zeros(int(ended.sum())))
            previous = batch


def test_a_dict_observation_is_rebuilt_leaf_by_leaf() -> None:
    # DictObsEnv truncates after 7 steps; 10 steps per rollout put a reset inside each one.
    for workers in (0, 2):
        with Collector(DictObsEnv, frames_per_batch=20 * max(workers, 1), envs_per_worker=2, num_workers=workers) as c:
            batch = c.next_batch()
        done = batch["next", "done"][..., 0]
        after_end = done[:, :-1]
        assert after_end.any()
        for leaf in (("position",), ("sensors", "touch"), ("sensors", "mode")):
            obs, next_obs = batch[("observation", *leaf)], batch[("next", "observation", *leaf)]
            assert torch.equal(obs[:, 1:][~after_end], next_obs[:, :-1][~after_end]), leaf
        position = batch["observation", "position"][..., 0]
        assert torch.equal(position[:, 1:][after_end], torch.zeros_like(position[:, 1:][after_end]))
