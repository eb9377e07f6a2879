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

_LAST = 2  # dm_env.StepType.LAST (an IntEnum: it compares equal), without importing dm_env here


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
        self._gym = _gym_fast_path(env, self.layout)
        self._dmc = _dm_control_fast_path(env, self.layout) if self._gym is None else None
        if self._gym is not None:
            self.step = self._step_gym  # type: ignore[method-assign]
        elif self._dmc is not None:
            self.step = self._step_dm_control  # type: ignore[method-assign]

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

    def _step_gym(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """:meth:`step` for a plain ``GymEnv``: its gymnasium env stepped as ``GymEnv._step`` steps it.

        The same conversions as TorchRL's ``GymEnv`` (the action as ``read_action`` gives it, the
        observation and the reward cast to their specs' dtypes, ``done`` the union of the two
        flags) without building TensorDicts: TorchRL's step costs about 20 times CartPole's own.
        """
        assert self._gym is not None  # this method is the step only where it is set
        gym_step, one_hot, observation_dtype, reward_dtype = self._gym
        if one_hot:
            action = int(np.argmax(action))
        elif action.size == 1 and self.layout.action.discrete:
            action = int(action)
        observation, reward, terminated, truncated, _ = gym_step(action)
        if type(observation) is not np.ndarray or observation.dtype is not observation_dtype:
            observation = np.asarray(observation, dtype=observation_dtype)
        return observation, float(reward_dtype.type(reward)), bool(terminated), bool(truncated), {}

    def _step_dm_control(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """:meth:`step` for a plain ``DMControlEnv``: the dm_control step, as ``DMControlWrapper._step`` reads it.

        ``LAST`` with a discount of (close to) 1 is a truncation, any other ``LAST`` a
        termination; observations and the reward are cast to their specs' dtypes and shapes.
        """
        assert self._dmc is not None  # this method is the step only where it is set
        dm_step, leaves, reward_dtype, action_dtype = self._dmc
        timestep = dm_step(np.asarray(action, dtype=action_dtype))
        raw = timestep.observation
        observation = {key: np.asarray(raw[key], dtype=dtype).reshape(shape) for key, dtype, shape in leaves}
        terminated = truncated = False
        if timestep.step_type == _LAST:
            if np.isclose(timestep.discount, 1):
                truncated = True
            else:
                terminated = True
        reward = timestep.reward
        return observation, float(reward_dtype.type(0.0 if reward is None else reward)), terminated, truncated, {}

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


def _gym_fast_path(env: Any, env_layout: Layout) -> tuple[Any, bool, np.dtype[Any], np.dtype[Any]] | None:
    """What :meth:`TorchRLEnv._step_gym` needs, where ``env`` is a plain TorchRL ``GymEnv``; else ``None``.

    Only the exact ``GymEnv``/``GymWrapper`` classes (a subclass or a ``TransformedEnv`` may
    change anything), over a gymnasium env, one ``"observation"`` array, no frame skip, no pixels,
    no info readers, on the CPU: then ``GymEnv._step`` is the gymnasium step and casts.
    """
    from torchrl.data import OneHot
    from torchrl.envs import GymEnv, GymWrapper

    if type(env) not in (GymEnv, GymWrapper) or type(env)._output_transform is not GymWrapper._output_transform:
        return None
    inner = getattr(env, "_env", None)
    if (
        inner is None
        or not type(inner).__module__.startswith("gymnasium")
        or env.wrapper_frame_skip != 1
        or env.info_dict_reader
        or getattr(env, "from_pixels", False)
        or getattr(env, "_is_batched", True)
        or not env._convert_actions_to_numpy
        or env.device not in (None, torch.device("cpu"))
        or [spec.key for spec in env_layout.observation] != [("observation",)]
        or env_layout.reward_key != "reward"
        or not (env_layout.has_terminated and env_layout.has_truncated)
    ):
        return None
    one_hot = isinstance(env.action_spec, OneHot)
    return inner.step, one_hot, env_layout.observation[0].dtype, env_layout.reward_numpy_dtype


def _dm_control_fast_path(
    env: Any, env_layout: Layout
) -> tuple[Any, list[tuple[str, np.dtype[Any], tuple[int, ...]]], np.dtype[Any], np.dtype[Any]] | None:
    """What :meth:`TorchRLEnv._step_dm_control` needs, where ``env`` is a plain TorchRL ``DMControlEnv``; else ``None``.

    Only the exact ``DMControlEnv``/``DMControlWrapper`` classes, state observations (root keys,
    one per dm_control observation), no frame skip, no pixels, no info readers, on the CPU.
    """
    try:
        from torchrl.envs import DMControlEnv, DMControlWrapper
    except ImportError:
        return None
    if type(env) not in (DMControlEnv, DMControlWrapper):
        return None
    inner = getattr(env, "_env", None)
    keys = [spec.key for spec in env_layout.observation]
    if (
        inner is None
        or env.wrapper_frame_skip != 1
        or env.info_dict_reader
        or getattr(env, "from_pixels", False)
        or not env._convert_actions_to_numpy
        or env.device not in (None, torch.device("cpu"))
        or any(len(key) != 1 for key in keys)
        or set(keys) != {(str(name),) for name in inner.observation_spec()}
        or env_layout.reward_key != "reward"
        or not (env_layout.has_terminated and env_layout.has_truncated)
    ):
        return None
    leaves = [(spec.key[0], spec.dtype, spec.shape) for spec in env_layout.observation]
    return inner.step, leaves, env_layout.reward_numpy_dtype, env_layout.action.dtype


def _array(tensor: torch.Tensor) -> np.ndarray:
    """A tensor as numpy (a view of a CPU tensor; a copy from another device)."""
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    return tensor.detach().numpy()
