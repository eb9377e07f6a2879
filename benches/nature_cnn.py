"""The Nature DQN CNN, the policy of the central-inference benches (``central.py``, ``gpu_check.py``)."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["NatureCNN"]


class NatureCNN(nn.Module):
    """The DQN Nature CNN (Mnih et al. 2015) over ``uint8 [..., 4, 84, 84]``, argmax actions.

    Weights are drawn from a fixed generator, so every contender runs the same network.
    """

    def __init__(self, num_actions: int = 6) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(4, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(3136, 512),
            nn.ReLU(),
            nn.Linear(512, num_actions),
        )
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for param in self.parameters():
                param.copy_(torch.randn(param.shape, generator=gen) * 0.05)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        batch = observation.shape[:-3]  # TorchRL's ParallelEnv batches are [workers, envs]
        logits = self.net(observation.reshape(-1, *observation.shape[-3:]).float() / 255.0)
        return logits.argmax(-1).reshape(batch)
