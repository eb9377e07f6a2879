"""Step-level vector envs: a drop-in for gymnasium's vector envs, stepped by pycollect.

:func:`make_vec` builds a :class:`VectorEnv`, a ``gymnasium.vector.VectorEnv`` that returns,
step for step, what ``gymnasium.vector.SyncVectorEnv`` returns over the same env functions,
seeds and actions, in each of gymnasium's three autoreset modes, with the envs in supervised
worker processes (or in this process: ``num_workers=0``); see ``docs/vector.md``. Its settings
are one :class:`VectorConfig` (:mod:`pycollect.config`).

:class:`SB3VecEnv` is Stable-Baselines3's ``VecEnv`` over the same machinery, behaving as SB3's
``DummyVecEnv``. It is imported on first use (``pycollect.vector.SB3VecEnv``), so that importing
this package imports neither Stable-Baselines3 nor torch; SB3 is an optional extra
(``pip install "pycollect-rl[sb3]"``).

What steps the envs is a :class:`StepBackend` (:mod:`pycollect.vector.backend`), chosen by
name like any plugin (``make_vec(..., step_backend="<name>")``; by default ``"inprocess"`` for
``num_workers=0``, ``"workers"`` otherwise) and contributed by plugins through the
``register_step_backend()`` hook; :func:`start_backend` starts one, for code that builds on it
as ``SB3VecEnv`` and ``pycollect.torchrl.ParallelEnv`` do. :class:`SpaceLayout` is how a
backend holds a space: its leaves, in a fixed order.

The internals both sides of a process boundary use are in :mod:`pycollect._steps`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pycollect._lazy import lazy_exports
from pycollect.config import VectorConfig, default_num_workers
from pycollect.vector.backend import SpaceLayout, StepBackend
from pycollect.vector.env import VectorEnv, VectorEnvStats, make_vec, start_backend

if TYPE_CHECKING:
    from pycollect.vector.sb3 import SB3VecEnv

__getattr__, __dir__ = lazy_exports(__name__, {"SB3VecEnv": "pycollect.vector.sb3"}, globals())

__all__ = [
    "SB3VecEnv",
    "SpaceLayout",
    "StepBackend",
    "VectorConfig",
    "VectorEnv",
    "VectorEnvStats",
    "default_num_workers",
    "make_vec",
    "start_backend",
]
