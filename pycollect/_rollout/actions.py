"""Where actions come from, seen from the stepping loop (no torch needed here).

:class:`~pycollect._rollout.runner.EnvRunner` asks an :class:`ActionSource` for one action batch
per step. :class:`RandomActions` samples uniformly from the action space with numpy alone,
so a worker with ``policy=None`` never imports torch; :class:`~pycollect._rollout.policy.PolicyRunner`
calls a user policy (and uses :class:`RandomActions` for its warm-up); :mod:`.action_source`
chooses between the two.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from pycollect._keys import Key
from pycollect.envs.specs import Field, FieldSpec

__all__ = ["ActionSource", "Actions", "RandomActions", "step_of"]


Actions = np.ndarray | tuple[np.ndarray, ...]
"""A batch of actions: one array for an env with one action leaf (any key), else one array per
leaf in :attr:`~pycollect.envs.EnvSpecs.action_fields` order (a multi-agent env's groups)."""


class ActionSource(Protocol):
    """Chooses the actions of ``num_envs`` environments, one batch per step."""

    outputs: tuple[Field, ...]
    """Extra outputs :meth:`act` returns besides the action."""

    carried: tuple[Field, ...]
    """Inputs the stepping loop carries from one step to the next (a recurrent policy's state,
    read at ``key`` and written at ``("next", *key)``, and ``is_init``); empty for most policies."""

    def act(
        self,
        observation: Mapping[Key, np.ndarray],
        carried: Mapping[Key, np.ndarray] | None = None,
        step: int | None = None,
    ) -> tuple[Any, Mapping[Key, Any]]:
        """Actions ``[num_envs, *action_shape]`` (one per action leaf, see :data:`Actions`) and extra outputs.

        ``step``: the rollout's step, which an error names (``None``: not in a rollout).
        """

    def random_actions(self, steps: int) -> Any:
        """Uniform random actions for ``steps`` steps: ``[steps, num_envs, *action_shape]`` (see :data:`Actions`)."""


class RandomActions:
    """Uniform random actions from the action space (``policy=None``).

    Args:
        action: The action field, or every action leaf (:attr:`~pycollect.envs.EnvSpecs.action_fields`):
            with several, actions are one array per leaf (:data:`Actions`).
        num_envs: Environments stepped together.
        rng: The random stream (see :func:`pycollect._seeding.action_rng`).
    """

    outputs: tuple[Field, ...] = ()
    carried: tuple[Field, ...] = ()

    _CHUNK = 256  # steps sampled per call: one numpy call per step would cost more than a CartPole step

    def __init__(self, action: FieldSpec | Sequence[FieldSpec], num_envs: int, rng: np.random.Generator) -> None:
        leaves = (action,) if isinstance(action, FieldSpec) else tuple(action)
        self.action = leaves[0]
        self.leaves = leaves
        self.num_envs = num_envs
        self.rng = rng
        self._chunks: list[np.ndarray] = [np.empty((0, num_envs, *leaf.shape), leaf.dtype) for leaf in leaves]
        self._next = 0

    def random_actions(self, steps: int) -> Any:
        """Uniform random actions for ``steps`` steps of every env (a view where it can be).

        The stream is drawn in chunks of :attr:`_CHUNK` steps whatever ``steps`` is, so the
        actions of a seed do not depend on how a rollout asks for them. With several action
        leaves, one array per leaf (each leaf's chunk drawn in turn).
        """
        parts: list[list[np.ndarray]] = []
        while steps > 0:
            if self._next == len(self._chunks[0]):
                self._chunks = [
                    leaf.sample(self.rng, self._CHUNK * self.num_envs).reshape(self._CHUNK, self.num_envs, *leaf.shape)
                    for leaf in self.leaves
                ]
                self._next = 0
            take = min(steps, len(self._chunks[0]) - self._next)
            parts.append([chunk[self._next : self._next + take] for chunk in self._chunks])
            self._next += take
            steps -= take
        per_leaf = [part[0] if len(parts) == 1 else np.concatenate(part) for part in zip(*parts, strict=True)]
        return per_leaf[0] if len(per_leaf) == 1 else tuple(per_leaf)

    def random_state(self) -> dict[str, Any]:
        """The generator's state and the actions drawn but not used yet (a chunk's rest)."""
        return {
            "generator": self.rng.bit_generator.state,
            "chunks": [chunk[self._next :].copy() for chunk in self._chunks],
        }

    def load_random_state(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`random_state`: the same actions come next."""
        self.rng.bit_generator.state = state["generator"]
        self._chunks = [np.array(chunk) for chunk in state["chunks"]]
        self._next = 0

    def act(
        self,
        observation: Mapping[Key, np.ndarray],
        carried: Mapping[Key, np.ndarray] | None = None,
        step: int | None = None,
    ) -> tuple[Any, Mapping[Key, Any]]:
        """Random actions: the observation is not looked at."""
        return step_of(self.random_actions(1), 0), {}


def step_of(actions: Any, t: int) -> Any:
    """Step ``t`` of ``[steps, num_envs, ...]`` actions (one array, or one per leaf)."""
    if isinstance(actions, tuple):
        return tuple(leaf[t] for leaf in actions)
    return actions[t]
