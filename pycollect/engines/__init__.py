"""Engines: what turns a collector's settings into batches (the fourth extension point).

An :class:`EngineFactory` is what a plugin registers through the ``register_engine()`` hook
(:mod:`pycollect.hookspecs`) and users select with ``Collector(..., engine="<name>")`` or an
instance. Its :meth:`~EngineFactory.start` builds an :class:`Engine`, which owns the
environments (in this process, in worker processes, on other machines) and hands
``TensorDict`` batches to the collector, which keeps the counters and does the
post-processing (``set_truncated``, ``split_trajs``, ``postproc``, the replay buffer).

The built-in engines are ``inprocess`` (``num_workers=0``) and ``workers`` (supervised worker
processes over shared memory); ``engine=None`` picks one of them by ``num_workers``. An
engine that runs several local collectors elsewhere (such as ``pycollect-ray``'s) builds them
from the same settings and can use :func:`plan_rollout` to check env and policy up front,
:func:`close_within` to close its probe env under a deadline, and :func:`pack_policy` /
:func:`unpack_policy` to ship the policy as the built-in workers get it.
"""

from __future__ import annotations

from pycollect._engines.base import Engine, EngineFactory, RolloutPlan, Supervision, close_within, plan_rollout
from pycollect._engines.workers.spec import pack_policy, unpack_policy

__all__ = [
    "Engine",
    "EngineFactory",
    "RolloutPlan",
    "Supervision",
    "close_within",
    "pack_policy",
    "plan_rollout",
    "unpack_policy",
]
