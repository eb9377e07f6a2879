"""Policies and envs the actors import (through the runtime env's PYTHONPATH)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from pycollect.testing.envs import CountingEnv


class ActsItsWeight(torch.nn.Module):
    """CartPole policy whose action is its weight (0 or 1): a frame shows which weights made it."""

    def __init__(self) -> None:
        super().__init__()
        self.value = torch.nn.Parameter(torch.zeros(()))

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.value.detach().long().expand(observation.shape[0]).clone()


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:  # gone: no /proc entry, or it went between the open and the read (ESRCH)
        return False


def acts_with(collector: Any, version: int) -> bool:
    """Whether ``collector``'s next batch was made by :class:`ActsItsWeight` weights ``version`` alone.

    Version ``v`` sets the weight ``v % 2``, so every frame carries ``policy_version == v`` and
    acts ``v % 2``.
    """
    batch = collector.next_batch()
    return bool((batch["policy_version"] == version).all() and (batch["action"] == version % 2).all())


class LeansWithThePole(torch.nn.Module):
    """A deterministic CartPole policy that looks at its observation: push the way the pole leans."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(()))

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return (observation[:, 2] + self.bias.detach() > 0).long()


class InfoCountingEnv(CountingEnv):
    """:class:`CountingEnv` whose step info holds ``"twice"``, the step count doubled (for ``info_keys``)."""

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, _ = super().step(action)
        return obs, reward, terminated, truncated, {"twice": np.int64(2 * reward)}


class _AgentsCategorical(torch.nn.Module):
    """A deterministic discrete action per agent from its observation (a hash of its values)."""

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return ((observation.sum(-1) * 7.3).floor().long()) % 3


def agents_policy() -> Any:
    """A TensorDict policy for group "agents" of ``DyingAgentsEnv`` (3 actions): TorchRL's multi-agent keys."""
    from tensordict.nn import TensorDictModule

    return TensorDictModule(_AgentsCategorical(), in_keys=[("agents", "observation")], out_keys=[("agents", "action")])


def batched_cartpoles() -> Any:
    """Two CartPoles in one gymnasium SyncVectorEnv: a batched env of 2 sub-envs (reset by mask)."""
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode, SyncVectorEnv

    return SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2, autoreset_mode=AutoresetMode.NEXT_STEP)
