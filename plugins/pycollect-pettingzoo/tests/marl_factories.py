"""Env factories and deterministic policies for the tests (importable by worker processes)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictSequential

from pycollect.testing.multiagent import CrashingParallelEnv, DyingAgentsEnv


def spread(**kwargs: Any) -> Any:
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env(**{"max_cycles": 25, **kwargs})


def spread_aec(**kwargs: Any) -> Any:
    from mpe2 import simple_spread_v3

    return simple_spread_v3.env(**{"max_cycles": 25, **kwargs})


def dying(**kwargs: Any) -> DyingAgentsEnv:
    return DyingAgentsEnv(**kwargs)


def hetero(**kwargs: Any) -> DyingAgentsEnv:
    return DyingAgentsEnv(heterogeneous=True, **kwargs)


def dying_infos(**kwargs: Any) -> DyingAgentsEnv:
    return DyingAgentsEnv(infos=True, **kwargs)


def hetero_infos(**kwargs: Any) -> DyingAgentsEnv:
    return DyingAgentsEnv(heterogeneous=True, infos=True, **kwargs)


class OddInfosEnv(DyingAgentsEnv):
    """Info entries a group cannot stack (a string, a dict, one only walker_0 reports), and one whose shape changes."""

    def __init__(self, grow_at: int = 1000, **kwargs: Any) -> None:
        super().__init__(infos=True, **kwargs)
        self.grow_at = grow_at

    def _info(self, agent: str, lucky: bool) -> dict[str, Any]:
        info = super()._info(agent, lucky)
        info.update(name=agent, nested={"a": 1}, grows=np.zeros(2 if self._t < self.grow_at else 3))
        if agent == "walker_0":
            info["only_me"] = 1.0
        return info


def crashing(**kwargs: Any) -> CrashingParallelEnv:
    return CrashingParallelEnv(**kwargs)


class _Categorical(torch.nn.Module):
    """A deterministic discrete action from the observation: a hash of its values."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return ((observation.sum(-1) * 7.3).floor().long()) % self.n


class _Continuous(torch.nn.Module):
    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return torch.tanh(observation[..., :2] * 1.7)


def categorical_policy(group: str, n: int) -> TensorDictModule:
    return TensorDictModule(_Categorical(n), in_keys=[(group, "observation")], out_keys=[(group, "action")])


def continuous_policy(group: str) -> TensorDictModule:
    return TensorDictModule(_Continuous(), in_keys=[(group, "observation")], out_keys=[(group, "action")])


def hetero_policy() -> TensorDictSequential:
    return TensorDictSequential(categorical_policy("scout", 3), continuous_policy("tank"))


def not_pettingzoo(**kwargs: Any) -> Any:
    import gymnasium as gym

    return gym.make("CartPole-v1")


def turn_based(**kwargs: Any) -> Any:
    """An AEC env whose metadata does not say it can be parallelised (agents take turns)."""
    from pettingzoo.utils.conversions import parallel_to_aec

    aec = parallel_to_aec(DyingAgentsEnv())
    aec.metadata = {"name": "turns_v0", "is_parallelizable": False}
    return aec


def group_dims_policy(td: TensorDictBase) -> TensorDictBase:
    """Action 0 for every agent of group "agents", and the group's batch dims as seen by the policy, per agent.

    The action's shape is the group sub-TensorDict's batch size: ``[K, n_agents]`` when the policy
    sees TorchRL's layout (anything else is refused as a wrong action shape).
    """
    group = td.get("agents")
    td.set(("agents", "action"), torch.zeros(group.batch_size, dtype=torch.int64))
    td.set(("agents", "seen_batch_dims"), torch.full(group.batch_size, group.batch_dims, dtype=torch.int64))
    return td
