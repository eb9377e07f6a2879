"""pycollect-jax: JAX environments (gymnax) as a pycollect batched env backend.

Installed, it registers the ``gymnax`` backend through the ``pycollect`` entry-point group, so
that ``Collector("gymnax:CartPole-v1", ...)`` and ``make_vec("gymnax:CartPole-v1", 16, ...)``
step gymnax environments: each worker one :class:`GymnaxBatchedEnv` of ``envs_per_worker``
sub-envs, stepped by one jitted, vmapped call; ``Collector("gymnax:CartPole-v1", ...,
engine="device")`` steps one :class:`GymnaxDeviceEnv` in the trainer, whose tensors share JAX's
memory (DLPack, no copy). Importing this package does not import JAX or
gymnax; checking the first ``gymnax:`` id does.
"""

from __future__ import annotations

from pycollect import hookimpl
from pycollect_jax.backend import GymnaxBackend, known_ids
from pycollect_jax.device import GymnaxDeviceEnv
from pycollect_jax.env import GymnaxBatchedEnv, configure_jax, gymnasium_space

__all__ = [
    "GymnaxBackend",
    "GymnaxBatchedEnv",
    "GymnaxDeviceEnv",
    "configure_jax",
    "gymnasium_space",
    "known_ids",
    "register_env_backend",
]
__version__ = "0.1.0"


@hookimpl
def register_env_backend() -> type[GymnaxBackend]:
    """Contribute the ``gymnax`` env backend (pycollect's ``register_env_backend`` hook)."""
    return GymnaxBackend
