"""Policies shared by test modules (imported by name: pytest puts ``tests/`` on ``sys.path``)."""

from __future__ import annotations

from typing import Any

import torch


def lstm_actor() -> Any:
    """TorchRL's recurrent actor on CartPole: an LSTM, a linear head, a categorical distribution (seeded weights)."""
    from tensordict.nn import TensorDictModule, TensorDictSequential
    from torch.distributions import Categorical
    from torchrl.modules import LSTMModule, ProbabilisticActor

    torch.manual_seed(0)
    lstm = LSTMModule(input_size=4, hidden_size=8, in_key="observation", out_key="embed")
    head = TensorDictModule(torch.nn.Linear(8, 2), in_keys=["embed"], out_keys=["logits"])
    body = TensorDictSequential(lstm, head)
    return ProbabilisticActor(body, in_keys=["logits"], distribution_class=Categorical, return_log_prob=True)
