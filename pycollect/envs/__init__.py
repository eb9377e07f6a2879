"""Extension point: environment backends.

An env backend turns the target of an env spec (``"gymnasium:CartPole-v1"`` names the
``gymnasium`` backend and the target ``CartPole-v1``) into gymnasium-style environments, and
reports their fields before anything is collected. Write one by subclassing
:class:`EnvBackend`; make it known with the ``register_env_backend()`` hook
(:mod:`pycollect.hookspecs`). The built-in ``gymnasium`` and ``callable`` backends live in
:mod:`pycollect.default_plugins` and register the same way.

Modules:
    backend: the :class:`EnvBackend` interface, the :class:`GymLikeEnv` protocol, and
        :func:`import_factory` for backends whose targets are factories.
    specs: :class:`Field` (key, shape, dtype: the one record of a batch array) and
        :class:`EnvSpecs` / :class:`FieldSpec`, gymnasium spaces as fixed-shape fields.
    source: :class:`EnvSource`, a user's ``env`` argument resolved to a backend.
    batched: :class:`BatchedEnv`, ``N`` sub-envs stepped in one call (a gymnasium
        ``VectorEnv``, EnvPool, a simulator of your own), stepped by pycollect as ``N`` envs.
    device: :class:`DeviceBatchedEnv`, ``N`` sub-envs whose torch tensors stay on their device
        (``engine="device"``), and :func:`is_device_env`.
    pool: :class:`PerWorkerSources`, one env source per worker (``env=[...]``).
    state: env snapshots: :func:`get_env_state` / :func:`set_env_state`, what cannot be saved
        (:func:`snapshot_refusal`, :func:`check_snapshots`), and the :class:`SnapshotEnv`
        protocol an env of your own implements to be saved.
"""

from __future__ import annotations

from pycollect.envs.backend import EnvBackend, GymLikeEnv, import_factory
from pycollect.envs.batched import BatchedEnv
from pycollect.envs.device import DeviceBatchedEnv, is_device_env
from pycollect.envs.specs import EnvSpecs, Field, FieldSpec, spaces_from_specs, specs_from_spaces
from pycollect.envs.state import (
    EnvState,
    SnapshotEnv,
    check_snapshots,
    get_env_state,
    set_env_state,
    snapshot_refusal,
)

__all__ = [
    "BatchedEnv",
    "DeviceBatchedEnv",
    "EnvBackend",
    "EnvSpecs",
    "EnvState",
    "Field",
    "FieldSpec",
    "GymLikeEnv",
    "SnapshotEnv",
    "check_snapshots",
    "get_env_state",
    "import_factory",
    "is_device_env",
    "set_env_state",
    "snapshot_refusal",
    "spaces_from_specs",
    "specs_from_spaces",
]
