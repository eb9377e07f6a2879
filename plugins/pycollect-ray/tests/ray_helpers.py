"""Policies and envs the actors import (through the runtime env's PYTHONPATH)."""

from __future__ import annotations

import torch


class ActsItsWeight(torch.nn.Module):
    """CartPole policy whose action is its weight (0 or 1): a frame shows which weights made it."""

    def __init__(self) -> None:
        super().__init__()
        self.value = torch.nn.Parameter(torch.zeros(()))

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.value.detach().long().expand(observation.shape[0]).clone()
