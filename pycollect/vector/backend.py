"""Step backends: what a vector env steps its environments through, and what a plugin implements.

A :class:`~pycollect.vector.VectorEnv` (and :class:`~pycollect.vector.SB3VecEnv`, and
``pycollect.torchrl.ParallelEnv``) checks its input, hands it to a :class:`StepBackend`, and
builds what gymnasium returns from the backend's result arrays and info material. The built-in
backends are ``"inprocess"`` (every env in this process, the default for ``num_workers=0``) and
``"workers"`` (supervised worker processes, results in shared memory, the default otherwise).
A plugin adds one through the ``register_step_backend()`` hook (:mod:`pycollect.hookspecs`);
users choose it with ``make_vec(..., step_backend="<name>")``. ``docs/plugins.md`` has an
example.

This module names what an implementation deals in: the base class, the spaces as fixed-shape
leaves (:class:`SpaceLayout`: ``observation.empty(num_envs)`` makes the result arrays), the
info fields (:class:`InfoArrays`; a backend without any has ``InfoArrays((), (), (),
info_keys=config.info_keys)``) and the info material (:data:`InfoParts`, :data:`Material`).
The classes are defined in :mod:`pycollect._steps`, below the plugin manager and the engines
that use them (the import layers of ``pyproject.toml``); these are their public names.
"""

from __future__ import annotations

from pycollect._steps.backend import InfoParts, StepBackend, check_indices, split_indices
from pycollect._steps.group import InfoEntry, Material
from pycollect._steps.info_fields import InfoArrays
from pycollect._steps.spaces import Leaf, SpaceLayout

__all__ = [
    "InfoArrays",
    "InfoEntry",
    "InfoParts",
    "Leaf",
    "Material",
    "SpaceLayout",
    "StepBackend",
    "check_indices",
    "split_indices",
]
