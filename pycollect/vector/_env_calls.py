"""Small functions run on one env where it lives, for :class:`pycollect.vector.SB3VecEnv`.

Each is sent to the envs through the step backend's ``apply`` (pickled with cloudpickle to a
worker process, which imports this module to unpickle it), and does what SB3's own
``DummyVecEnv`` does to each env, so that the results are the same. This module imports
neither Stable-Baselines3 nor torch: a worker that unpickles one of these stays light.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym

__all__ = ["GetAttr", "IsWrapped", "Render", "SetAttr"]


@dataclass(frozen=True)
class GetAttr:
    """The env's attribute ``name``, found through its wrappers, never called (SB3's ``get_attr``)."""

    name: str

    def __call__(self, env: Any) -> Any:
        return env.get_wrapper_attr(self.name) if hasattr(env, "get_wrapper_attr") else getattr(env, self.name)


@dataclass(frozen=True)
class SetAttr:
    """Sets ``name`` to ``value`` on the env as built, its outermost wrapper (SB3's ``set_attr``)."""

    name: str
    value: Any

    def __call__(self, env: Any) -> None:
        setattr(env, self.name, self.value)


@dataclass(frozen=True)
class IsWrapped:
    """Whether one of the env's wrappers is a ``wrapper_class`` (SB3's ``env_util.is_wrapped``)."""

    wrapper_class: type

    def __call__(self, env: Any) -> bool:
        while isinstance(env, gym.Wrapper):
            if isinstance(env, self.wrapper_class):
                return True
            env = env.env
        return False


@dataclass(frozen=True)
class Render:
    """The env's ``render()``."""

    def __call__(self, env: Any) -> Any:
        return env.render()
