"""The hooks through which plugins extend pycollect (pluggy project and entry-point group ``pycollect``).

A plugin is a module (or any object) with functions marked ``@pycollect.hookimpl`` whose names
are the hooks below. An installed package makes itself known through the ``pycollect``
entry-point group::

    # pyproject.toml of pycollect-mything
    [project.entry-points.pycollect]
    mything = "pycollect_mything"

    # pycollect_mything/__init__.py
    import pycollect

    @pycollect.hookimpl
    def register_env_backend():
        return MyThingBackend

Every hook returns one class or a list of classes; each class names itself with its ``name``
class attribute, which users pass as a string (``env="mything:level-1"``,
``weight_sync="mything"``, ``device_policy="mything"``, ``engine="mything"``,
``inference_runner="mything"``, ``make_vec(..., step_backend="mything")``). pycollect's own env
backends, weight-sync schemes, device policies, engines, inference runners and step backends
are plugins too (``pycollect.default_plugins``), registered before any entry point loads.
Names are unique across plugins: two classes with one name are a
:class:`~pycollect.PluginError` that names both plugins.

Hooks are called in the trainer process only. Workers receive the class that was chosen (by
reference, so its module must be importable there) and never scan entry points.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from pycollect._steps.backend import StepBackend  # public as pycollect.vector.StepBackend (a layer above)
    from pycollect.devices import DevicePolicy
    from pycollect.engines import EngineFactory
    from pycollect.envs import EnvBackend
    from pycollect.inference import InferenceRunner
    from pycollect.weights import WeightSyncScheme

__all__ = [
    "PROJECT",
    "hookimpl",
    "hookspec",
    "register_device_policy",
    "register_engine",
    "register_env_backend",
    "register_inference_runner",
    "register_scheme",
    "register_step_backend",
]

PROJECT = "pycollect"
"""The pluggy project name, which is also the entry-point group plugins are found through."""

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
"""Marks a plugin's function as the implementation of the hook of the same name."""


@hookspec
def register_env_backend() -> type[EnvBackend] | Sequence[type[EnvBackend]]:  # type: ignore[empty-body]
    """Contribute env backends: what turns ``"<name>:<target>"`` into environments.

    Returns:
        One :class:`~pycollect.envs.EnvBackend` subclass, or a list of them. Each one's
        ``name`` is the prefix users write in front of a target (``"dm_control"`` for
        ``"dm_control:cheetah-run"``).
    """


@hookspec
def register_scheme() -> type[WeightSyncScheme] | Sequence[type[WeightSyncScheme]]:  # type: ignore[empty-body]
    """Contribute weight-sync schemes: how policy weights travel from the trainer to workers.

    Returns:
        One :class:`~pycollect.weights.WeightSyncScheme` subclass, or a list of them. Users
        select one with ``Collector(..., weight_sync="<name>")`` or pass an instance.
    """


@hookspec
def register_device_policy() -> type[DevicePolicy] | Sequence[type[DevicePolicy]]:  # type: ignore[empty-body]
    """Contribute device placement policies: which devices each worker uses.

    Returns:
        One :class:`~pycollect.devices.DevicePolicy` subclass, or a list of them. Users
        select one with ``Collector(..., device_policy="<name>")`` or pass an instance.
    """


@hookspec
def register_engine() -> type[EngineFactory] | Sequence[type[EngineFactory]]:  # type: ignore[empty-body]
    """Contribute engines: what runs the environments and turns them into batches.

    Returns:
        One :class:`~pycollect.engines.EngineFactory` subclass, or a list of them. Users
        select one with ``Collector(..., engine="<name>")`` or pass an instance configured
        through its constructor.
    """


@hookspec
def register_inference_runner() -> type[InferenceRunner] | Sequence[type[InferenceRunner]]:  # type: ignore[empty-body]
    """Contribute inference runners: how the policy is called on a batch of observations.

    Returns:
        One :class:`~pycollect.inference.InferenceRunner` subclass, or a list of them. Users
        select one with ``Collector(..., inference_runner="<name>")`` or pass an instance
        configured through its constructor.
    """


@hookspec
def register_step_backend() -> type[StepBackend] | Sequence[type[StepBackend]]:  # type: ignore[empty-body]
    """Contribute step backends: what steps a vector env's environments, and where.

    Returns:
        One :class:`~pycollect.vector.StepBackend` subclass, or a list of them. Users select
        one with ``make_vec(..., step_backend="<name>")`` (or ``SB3VecEnv(...)``, or
        :func:`~pycollect.vector.start_backend`), or pass the class.
    """
