"""Device arguments: parsing, checking they exist, and where a module policy lives."""

from __future__ import annotations

from typing import Any

import torch

from pycollect.exceptions import ConfigError

__all__ = ["policy_device", "resolve_device"]


def resolve_device(value: Any, what: str) -> torch.device:
    """Parse a device argument and check it exists here.

    Raises:
        ConfigError: The value is not a device, or names a CUDA device that is not available.
    """
    try:
        device = torch.device(value)
    except (RuntimeError, TypeError) as exc:
        raise ConfigError(f"{what}={value!r} is not a torch device ({exc})") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = device.index or 0
        if index >= count:
            raise ConfigError(f"{what}={value!r}: this machine has {count} CUDA device(s)")
    elif device.type != "cpu":
        raise ConfigError(f"{what}={value!r}: only 'cpu' and 'cuda' devices are supported")
    return device


def policy_device(policy: Any) -> torch.device | None:
    """The device of a module policy's first parameter or buffer, if it has any."""
    if isinstance(policy, torch.nn.Module):
        for tensor in (*policy.parameters(), *policy.buffers()):
            return tensor.device
    return None
