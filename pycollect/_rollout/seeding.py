"""How one user seed becomes the seeds of every environment and random stream.

Every environment gets its own seed, derived with numpy's ``SeedSequence`` from the user's
seed, the worker index and the environment's index in the worker, so that environments never
share a random stream and a run can be replayed exactly.
"""

from __future__ import annotations

import numpy as np

__all__ = ["action_rng", "env_seeds"]


def _worker_sequence(seed: int | None, worker_index: int) -> np.random.SeedSequence:
    root = np.random.SeedSequence(seed)
    return np.random.SeedSequence(root.entropy, spawn_key=(worker_index,))


def env_seeds(seed: int | None, num_envs: int, worker_index: int = 0) -> list[int]:
    """The first-reset seeds of a worker's environments.

    Args:
        seed: The collector's ``seed`` (``None``: fresh entropy, not reproducible).
        num_envs: Environments in the worker (``envs_per_worker``).
        worker_index: The worker's index (0 in-process).

    Returns:
        ``num_envs`` distinct 32-bit seeds; the same arguments always give the same seeds.

    Example:
        A hand-written loop that replays a collector's first environment::

            env.reset(seed=pycollect.env_seeds(0, num_envs=4)[0])
    """
    children = _worker_sequence(seed, worker_index).spawn(num_envs + 1)[:num_envs]
    return [int(child.generate_state(1)[0]) for child in children]


def action_rng(seed: int | None, num_envs: int, worker_index: int = 0) -> np.random.Generator:
    """The generator a worker draws random actions from (``policy=None``, warm-up frames)."""
    return np.random.default_rng(_worker_sequence(seed, worker_index).spawn(num_envs + 1)[num_envs])
