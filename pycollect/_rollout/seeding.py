"""How one user seed becomes every random stream of a run: the one place they are derived.

Each runner (the in-process loop, or one generation of one worker) has its own streams: a
first-reset seed per environment, the generator of random actions and the seed of torch's
global generator. All of them come from numpy's ``SeedSequence`` keyed by the user's seed, the
worker index, the worker's generation and what the stream is for, so that

* no two streams of one run are the same (environments, workers, restarts, purposes);
* no stream of one run is a stream of a run with another seed: the seed is the sequence's
  entropy, never added to an index (``seed + worker`` would make worker 1 of ``seed=0`` draw
  exactly what worker 0 of ``seed=1`` draws);
* a run can be replayed exactly: the same seed, worker, generation and purpose always give the
  same stream.

Trajectory ids are not random but must not repeat within a run: they are laid out here too
(:func:`traj_id_start`), by worker and generation.
"""

from __future__ import annotations

import numpy as np

__all__ = ["action_rng", "env_seeds", "torch_seed", "traj_id_start"]

# What a stream is for: the last word of its spawn key, so purposes never share a stream.
_ENVS = 0
_ACTIONS = 1
_TORCH = 2


def _sequence(seed: int | None, worker_index: int, generation: int, *purpose: int) -> np.random.SeedSequence:
    if generation < 1:
        raise ValueError(f"generation must be 1 or more, got {generation}")
    entropy = np.random.SeedSequence(seed).entropy  # the seed itself, or fresh entropy for None
    return np.random.SeedSequence(entropy, spawn_key=(worker_index, generation, *purpose))


def env_seeds(seed: int | None, num_envs: int, worker_index: int = 0, generation: int = 1) -> list[int]:
    """The first-reset seeds of a worker's environments.

    Args:
        seed: The collector's ``seed`` (``None``: fresh entropy, not reproducible).
        num_envs: Environments in the worker (``envs_per_worker``).
        worker_index: The worker's index (0 in-process).
        generation: The worker's generation: 1 for its first start, +1 at every restart (a
            restarted worker gets fresh seeds, so it does not replay the episodes it crashed in).

    Returns:
        ``num_envs`` distinct 32-bit seeds; the same arguments always give the same seeds, and
        seed ``i`` does not depend on ``num_envs``.

    Example:
        A hand-written loop that replays a collector's first environment::

            env.reset(seed=pycollect.env_seeds(0, num_envs=4)[0])
    """
    return [int(_sequence(seed, worker_index, generation, _ENVS, i).generate_state(1)[0]) for i in range(num_envs)]


def action_rng(seed: int | None, worker_index: int = 0, generation: int = 1) -> np.random.Generator:
    """The generator a runner draws random actions from (``policy=None``, warm-up frames)."""
    return np.random.default_rng(_sequence(seed, worker_index, generation, _ACTIONS))


def torch_seed(seed: int | None, worker_index: int = 0, generation: int = 1) -> int | None:
    """The seed of torch's global generator in a runner with a policy (``None`` without a seed)."""
    if seed is None:
        return None
    return int(_sequence(seed, worker_index, generation, _TORCH).generate_state(1, np.uint64)[0])


def traj_id_start(worker_index: int, num_workers: int, generation: int) -> int:
    """The first trajectory id of a worker's generation; ids then go up by ``num_workers``.

    Workers interleave (worker ``w`` hands out ``w``, ``w + N``, ...), and each restarted
    generation starts ``2**32 * N`` further on, so no two runners of a run hand out the same id.
    """
    return worker_index + num_workers * ((generation - 1) << 32)
