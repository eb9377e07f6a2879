"""A small policy for tests and benches: an MLP acting the argmax of its outputs.

The collector's usual pairing (``policy=act, weights_from=net``): ``act`` reads the batch's
``"observation"`` and returns the index of the largest output of ``net``, the module whose weights
``update_policy_weights_()`` publishes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import torch

from pycollect.exceptions import ConfigError

__all__ = ["argmax_mlp"]


def argmax_mlp(*sizes: int) -> tuple[Callable[[Any], torch.Tensor], torch.nn.Module]:
    """An MLP of the given layer sizes and a policy acting the argmax of its outputs.

    The layers are ``torch.nn.Linear`` with ``Tanh`` between them, drawn from torch's global
    random stream in order (exactly as building them by hand would: seed with
    ``torch.manual_seed`` for the same numbers). Two sizes give the ``Linear`` itself, not a
    ``Sequential`` of one layer, so its parameters are ``weight`` and ``bias``.

    Args:
        *sizes: The observation's width, the hidden widths, then the number of actions
            (``argmax_mlp(4, 64, 2)``: CartPole, one hidden layer of 64).

    Returns:
        ``(act, net)``: ``act(td)`` is ``net(td["observation"]).argmax(-1)``, for
        ``Collector(policy=act, weights_from=net)``.

    Raises:
        ConfigError: Fewer than two sizes.

    Example:
        >>> act, net = argmax_mlp(4, 2)
        >>> act({"observation": torch.zeros(3, 4)}).shape
        torch.Size([3])
    """
    if len(sizes) < 2:
        raise ConfigError(f"argmax_mlp{sizes}: give the input width and the number of actions at least")
    layers: list[torch.nn.Module] = []
    for width_in, width_out in itertools.pairwise(sizes):
        if layers:
            layers.append(torch.nn.Tanh())
        layers.append(torch.nn.Linear(width_in, width_out))
    net = layers[0] if len(layers) == 1 else torch.nn.Sequential(*layers)

    def act(td: Any) -> torch.Tensor:
        actions: torch.Tensor = net(td["observation"]).argmax(-1)
        return actions

    return act, net
