"""Helpers of the tests: building gymnax batched envs, and what CartPole's states look like."""

from __future__ import annotations

from typing import Any

import numpy as np

from pycollect_jax import GymnaxBackend, GymnaxBatchedEnv

X_LIMIT = 2.4  # CartPole ends an episode past these (gymnax's EnvParams defaults, gymnasium's too)
THETA_LIMIT = 12 * 2 * np.pi / 360
RESET_HALF_WIDTH = 0.05  # CartPole's reset draws each state variable from U(-0.05, 0.05)


def cartpole(num_envs: int = 8, **env_kwargs: Any) -> GymnaxBatchedEnv:
    """``gymnax:CartPole-v1`` as the backend builds it for a worker of ``num_envs`` envs."""
    return GymnaxBackend().make_batched("CartPole-v1", env_kwargs, num_envs)


def fell(obs: np.ndarray) -> np.ndarray:
    """Which CartPole observations (``[..., 4]``) are past the termination thresholds."""
    return (np.abs(obs[..., 0]) > X_LIMIT) | (np.abs(obs[..., 2]) > THETA_LIMIT)


def is_reset(obs: np.ndarray) -> np.ndarray:
    """Which CartPole observations (``[..., 4]``) are initial ones (every variable within 0.05)."""
    return np.all(np.abs(obs) <= RESET_HALF_WIDTH, axis=-1)
