"""Gymnasium's vector infos, rebuilt in the trainer from what each group of envs returned.

Each :class:`~pycollect._steps.group.EnvGroup` returns the info material of its envs (see
:data:`~pycollect._steps.group.Material`); :class:`InfoMerger` turns the material of every group
into the one ``infos`` dict a gymnasium vector env returns. It merges env by env, in env order,
with gymnasium's own ``VectorEnv._add_info``, so that keys, dtypes (an array's dtype is that
of the first env that has the key), nesting and the ``_key`` masks are exactly gymnasium's.

In ``SAME_STEP`` mode an env whose episode ended adds, as ``SyncVectorEnv`` does, first
``{"final_obs": ..., "final_info": ...}`` (``infos["final_obs"]`` is an object array of
observations in the single observation space's structure, ``infos["final_info"]`` a nested
info dict, each with its mask), then the info of the reset that followed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import gymnasium as gym
import numpy as np

from pycollect._steps.group import Material

__all__ = ["InfoMerger"]


class InfoMerger(gym.vector.VectorEnv[Any, Any, np.ndarray]):
    """Holds ``num_envs`` for gymnasium's ``VectorEnv._add_info``, the one merge of infos used.

    It is a gymnasium ``VectorEnv`` only to call that method as gymnasium defines it; it
    steps nothing.

    Args:
        num_envs: Envs of the vector env (the length of every info array).
    """

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs

    def merge(
        self, parts: Iterable[tuple[int, Material]], final_obs: Callable[[int], Any] | None = None
    ) -> dict[str, Any]:
        """The vector infos of one step or reset.

        Args:
            parts: ``(index of the group's first env, its material)`` for each group that
                returned material, in env order.
            final_obs: Env ``n``'s final observation, for an entry with a final info
                (``SAME_STEP`` mode).
        """
        infos: dict[str, Any] = {}
        for offset, material in parts:
            for index, info, final in material:
                env = offset + index
                if final is not None:
                    if final_obs is None:
                        raise ValueError("an env's episode ended in SAME_STEP mode but there are no final observations")
                    infos = self._add_info(infos, {"final_obs": final_obs(env), "final_info": final}, env)
                infos = self._add_info(infos, info, env)
        return infos
