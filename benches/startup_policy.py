"""The policy and env of ``benches/startup.py``, importable by TorchRL's spawned workers."""

from __future__ import annotations

import gymnasium as gym
import torch
from torch import nn


class MLPPolicy(nn.Module):
    """A 2x64 tanh MLP returning argmax actions (integers), or one-hot ones for TorchRL."""

    def __init__(self, one_hot: bool = False) -> None:
        super().__init__()
        self.one_hot = one_hot
        self.net = nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 2))

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        action: torch.Tensor = self.net(observation).argmax(-1)
        return nn.functional.one_hot(action, 2) if self.one_hot else action


def make_env() -> gym.Env:
    """CartPole-v1 for pycollect."""
    return gym.make("CartPole-v1")


def make_torchrl_env() -> object:
    """CartPole-v1 for TorchRL."""
    from torchrl.envs import GymEnv

    return GymEnv("CartPole-v1")
