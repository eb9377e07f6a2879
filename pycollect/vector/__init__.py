"""Step-level vector envs: a drop-in for gymnasium's vector envs, stepped by pycollect.

:func:`make_vec` builds a :class:`VectorEnv`, a ``gymnasium.vector.VectorEnv`` that returns,
step for step, what ``gymnasium.vector.SyncVectorEnv`` returns over the same env functions,
seeds and actions, in each of gymnasium's three autoreset modes, with the envs in supervised
worker processes (or in this process: ``num_workers=0``); see ``docs/vector.md``.

The internals both sides of a process boundary use are in :mod:`pycollect._steps`.
"""

from __future__ import annotations

from pycollect.vector.env import VectorEnv, default_num_workers, make_vec

__all__ = ["VectorEnv", "default_num_workers", "make_vec"]
