"""Batches plug into TorchRL unchanged and match a hand-written gymnasium loop exactly."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.objectives.value import GAE

import pycollect
from pycollect import Collector

pytestmark = pytest.mark.compat


def _greedy(td):
    return (td["observation"][:, 2] > 0).long()


def test_batches_extend_a_torchrl_replay_buffer() -> None:
    buffer = ReplayBuffer(storage=LazyTensorStorage(1000), batch_size=32)
    with Collector("CartPole-v1", frames_per_batch=64, total_frames=256, envs_per_worker=4, seed=0) as c:
        for batch in c:
            buffer.extend(batch.reshape(-1))
    assert len(buffer) == 256
    sample = buffer.sample()
    assert sample.batch_size == torch.Size([32])
    assert sample["next", "observation"].shape == (32, 4) and sample["next", "done"].shape == (32, 1)


def test_batches_go_through_torchrl_gae_with_correct_values() -> None:
    value_net = TensorDictModule(nn.Linear(4, 1), in_keys=["observation"], out_keys=["state_value"])
    gamma, lmbda = 0.9, 0.8
    gae = GAE(gamma=gamma, lmbda=lmbda, value_network=value_net, time_dim=1)
    with Collector(
        "CartPole-v1", frames_per_batch=60, envs_per_worker=2, seed=3, env_kwargs={"max_episode_steps": 8}
    ) as c:
        batch = c.next_batch()
    out = gae(batch.clone())
    assert out["advantage"].shape == (2, 30, 1) and out["value_target"].shape == (2, 30, 1)

    with torch.no_grad():
        value = value_net.module(batch["observation"])
        next_value = value_net.module(batch["next", "observation"])
    reward = batch["next", "reward"]
    terminated = batch["next", "terminated"].float()
    done = batch["next", "done"].float()
    expected = torch.zeros_like(reward)
    running = torch.zeros(2, 1)
    for t in reversed(range(30)):
        delta = reward[:, t] + gamma * next_value[:, t] * (1 - terminated[:, t]) - value[:, t]
        running = delta + gamma * lmbda * (1 - done[:, t]) * running
        expected[:, t] = running
    assert torch.allclose(out["advantage"], expected, atol=1e-5)


def test_transitions_match_a_hand_written_gymnasium_loop() -> None:
    num_envs, steps, seed = 3, 120, 11
    with Collector("CartPole-v1", _greedy, frames_per_batch=num_envs * steps, envs_per_worker=num_envs, seed=seed) as c:
        batch = c.next_batch()

    for i, env_seed in enumerate(pycollect.env_seeds(seed, num_envs)):
        env = gym.make("CartPole-v1")
        obs, _ = env.reset(seed=env_seed)
        rows = []
        for _ in range(steps):
            action = int(obs[2] > 0)
            next_obs, reward, terminated, truncated, _ = env.step(action)
            rows.append((obs, action, reward, next_obs, terminated, truncated))
            obs = env.reset()[0] if terminated or truncated else next_obs
        env.close()
        obs_, action_, reward_, next_obs_, term_, trunc_ = (np.array(col) for col in zip(*rows, strict=True))
        np.testing.assert_array_equal(batch["observation"][i].numpy(), obs_)
        np.testing.assert_array_equal(batch["action"][i].numpy(), action_)
        np.testing.assert_array_equal(batch["next", "reward"][i, :, 0].numpy(), reward_.astype(np.float32))
        np.testing.assert_array_equal(batch["next", "observation"][i].numpy(), next_obs_)
        np.testing.assert_array_equal(batch["next", "terminated"][i, :, 0].numpy(), term_)
        np.testing.assert_array_equal(batch["next", "truncated"][i, :, 0].numpy(), trunc_)
        assert term_.any(), "the comparison should cover at least one auto-reset"
