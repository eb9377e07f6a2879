"""A gymnasium-style view of one unbatched TorchRL env: what pycollect's workers step.

:class:`TorchRLEnv` keeps the env's own TensorDict between steps, as TorchRL's ``rollout``
does (``step``, then ``step_mdp``), so transforms that keep state in it (``StepCounter``'s
``step_count``, a recurrent state a primer adds) or in themselves (``CatFrames``,
``ObservationNorm``'s statistics, ``InitTracker``) behave as in a TorchRL collector. The
observation it returns holds the env's tensors as numpy views (no copy: pycollect copies them
into its batch before the env steps again).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from pycollect_torchrl.layout import Layout, layout

__all__ = ["TorchRLEnv"]


class TorchRLEnv:
    """One TorchRL ``EnvBase`` behind gymnasium's ``reset``/``step``/``close``.

    Args:
        env: An unbatched TorchRL env.
        env_layout: Its checked specs (read from ``env`` when not given).

    Attributes:
        observation_space: A ``Box`` for an env with one observation key, else a (nested)
            ``Dict`` of ``Box`` es keyed as the env's observation spec.
        action_space: ``Discrete`` (a ``Categorical`` action), ``OneHotSpace`` (``OneHot``),
            ``MultiDiscrete``, ``MultiBinary`` or ``Box``.
        layout: The env's :class:`~pycollect_torchrl.layout.Layout`.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - gymnasium's class attribute
    render_mode: None = None

    def __init__(self, env: Any, env_layout: Layout | None = None) -> None:
        self._env = env
        self.layout = env_layout if env_layout is not None else layout(env)
        self.observation_space = self.layout.observation_space
        self.action_space = self.layout.action_space
        self._paths = [(spec.key, spec.path) for spec in self.layout.observation]
        self._single = len(self._paths) == 1
        self._reward_key = self.layout.reward_key
        self._action_dtype = self.layout.action.dtype
        self._td: Any = None

    @property
    def torchrl_env(self) -> Any:
        """The wrapped TorchRL env (its transforms included)."""
        return self._env

    def set_seed(self, seed: int | None, static_seed: bool = False) -> int | None:
        """The env's own ``set_seed`` (what TorchRL's batched envs call in each worker)."""
        result: int | None = self._env.set_seed(seed, static_seed=static_seed)
        return result

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Start an episode.

        Args:
            seed: ``env.set_seed(seed)`` before the reset (``None``: the env's stream goes on).
            options: Ignored (a TorchRL reset takes a TensorDict, which pycollect does not send).

        Returns:
            The first observation and an empty info dict.
        """
        if seed is not None:
            self._env.set_seed(int(seed))
        td = self._env.reset()
        self._td = td
        return self._read(td), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """One ``env.step``; the env's input TensorDict is carried on with ``step_mdp``.

        ``done`` without ``terminated`` or ``truncated`` (an env that reports only ``done``, or
        reports them inconsistently) counts as a truncation, so ``terminated or truncated`` is
        always TorchRL's ``done``.

        Returns:
            ``(observation, reward, terminated, truncated, {})``.
        """
        td = self._td
        td.set("action", torch.as_tensor(np.array(action, dtype=self._action_dtype)))
        out = self._env.step(td)
        nxt = out.get("next")
        layout = self.layout
        terminated = bool(nxt.get("terminated").item()) if layout.has_terminated else False
        truncated = bool(nxt.get("truncated").item()) if layout.has_truncated else False
        if bool(nxt.get("done").item()) and not (terminated or truncated):
            if layout.has_terminated:
                truncated = True
            else:
                terminated = True  # an env with "done" only: TorchRL reads it as a termination
        reward = float(nxt.get(self._reward_key).item())
        observation = self._read(nxt)
        self._td = self._env._step_mdp(out)
        return observation, reward, terminated, truncated, {}

    def _read(self, td: Any) -> Any:
        if self._single:
            ((key, _),) = self._paths
            return _array(td.get(key))
        out: dict[str, Any] = {}
        for key, _ in self._paths:
            node = out
            for part in key[:-1]:
                node = node.setdefault(part, {})
            node[key[-1]] = _array(td.get(key))
        return out

    def close(self) -> None:
        """Close the TorchRL env."""
        if not self._env.is_closed:
            self._env.close()

    def __repr__(self) -> str:
        return f"TorchRLEnv({type(self._env).__name__}, observation={[k for k, _ in self._paths]})"


def _array(tensor: torch.Tensor) -> np.ndarray:
    """A tensor as numpy (a view of a CPU tensor; a copy from another device)."""
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    return tensor.detach().numpy()
