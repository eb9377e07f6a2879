"""pycollect-pettingzoo: PettingZoo multi-agent envs in pycollect's workers.

Installed, it registers the ``pettingzoo`` env backend through the ``pycollect`` entry-point
group. Two ways in (docs/multi-agent.md):

* ``pycollect.Collector(make_env, ...)`` (or ``env=PettingZoo(make_env, group_map=...,
  use_mask=...)``, or ``env="pettingzoo:mpe2.simple_spread_v3:parallel_env"``) gives batches in
  TorchRL's multi-agent layout: ``("agents", "observation")`` of shape ``[..., n_agents, ...]``,
  per-agent rewards and flags, masks for agents that left.
* :func:`make_agent_vec` gives a gymnasium ``VectorEnv`` whose slots are the agents of all envs,
  as SuperSuit's ``concat_vec_envs_v1(pettingzoo_env_to_vec_env_v1(env), n)`` (parameter sharing).

Importing this package imports neither PettingZoo nor torch; building the first env does.
"""

from __future__ import annotations

from typing import Any

from pycollect import hookimpl
from pycollect_pettingzoo.backend import PettingZoo, PettingZooBackend, is_pettingzoo_env

__all__ = ["PettingZoo", "PettingZooBackend", "is_pettingzoo_env", "make_agent_vec", "register_env_backend"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "make_agent_vec":  # imports pycollect.vector: only on first use
        from pycollect_pettingzoo.vector import make_agent_vec

        return make_agent_vec
    raise AttributeError(f"module 'pycollect_pettingzoo' has no attribute {name!r}")


@hookimpl
def register_env_backend() -> type[PettingZooBackend]:
    """Contribute the ``pettingzoo`` env backend (pycollect's ``register_env_backend`` hook)."""
    return PettingZooBackend
