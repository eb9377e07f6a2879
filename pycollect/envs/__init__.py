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
"""

from __future__ import annotations

from pycollect.envs.backend import EnvBackend, GymLikeEnv, import_factory
from pycollect.envs.specs import EnvSpecs, Field, FieldSpec, specs_from_spaces

__all__ = ["EnvBackend", "EnvSpecs", "Field", "FieldSpec", "GymLikeEnv", "import_factory", "specs_from_spaces"]
