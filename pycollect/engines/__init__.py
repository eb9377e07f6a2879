"""Engines: what turns a collector's settings into batches (the fourth extension point).

An :class:`EngineFactory` is what a plugin registers through the ``register_engine()`` hook
(:mod:`pycollect.hookspecs`) and users select with ``Collector(..., engine="<name>")`` or an
instance. Its :meth:`~EngineFactory.start` builds an :class:`Engine`, which owns the
environments (in this process, in worker processes, on other machines) and hands
``TensorDict`` batches to the collector, which keeps the counters and does the
post-processing (``set_truncated``, ``split_trajs``, ``postproc``, the replay buffer).

The built-in engines are ``inprocess`` (``num_workers=0``) and ``workers`` (supervised worker
processes over shared memory), registered from :mod:`pycollect.default_plugins` like any
plugin's; ``engine=None`` picks one of them by ``num_workers``. An engine that runs several
local collectors elsewhere (such as ``pycollect-ray``'s) builds them from the same
:class:`~pycollect.CollectorConfig` and can use :func:`plan_rollout` to check env and policy up
front, :func:`close_within` to close its probe env under a deadline, and :func:`pack_policy` /
:func:`unpack_policy` to ship the policy as the built-in workers get it.

Modules:
    base: the interface (:class:`Engine`, :class:`EngineFactory`, :class:`Supervision`).
    plan: :class:`RolloutPlan` and the checks every engine runs on a probe env.
    policy_blob: :func:`pack_policy` / :func:`unpack_policy`.
"""

from __future__ import annotations

from pycollect.engines.base import Engine, EngineFactory, EnvCalls, Supervision
from pycollect.engines.plan import RolloutPlan, close_within, plan_rollout, policy_device
from pycollect.engines.policy_blob import pack_policy, unpack_policy

__all__ = [
    "Engine",
    "EngineFactory",
    "EnvCalls",
    "RolloutPlan",
    "Supervision",
    "close_within",
    "pack_policy",
    "plan_rollout",
    "policy_device",
    "unpack_policy",
]
