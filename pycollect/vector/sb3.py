"""Stable-Baselines3's ``VecEnv``, stepped by pycollect: :class:`SB3VecEnv`.

A drop-in for SB3's ``SubprocVecEnv`` and ``DummyVecEnv``: what it returns is, step for step,
what ``DummyVecEnv`` returns over the same env functions, seeds and actions (the tests compare
them side by side), with the envs in pycollect's supervised worker processes (or in this
process: ``num_workers=0``). It stands directly on a step backend in gymnasium's ``SAME_STEP``
autoreset mode, which is SB3's: the backend's per-env info material holds each env's own info
dicts, from which SB3's list of infos is built (``"terminal_observation"``,
``"TimeLimit.truncated"``).

This module imports Stable-Baselines3 (and so torch); ``pycollect.vector`` imports it only
when ``pycollect.vector.SB3VecEnv`` is first used. Install SB3 with the ``sb3`` extra
(``pip install "pycollect-rl[sb3]"``).
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from copy import deepcopy
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvObs, VecEnvStepReturn

from pycollect._steps.backend import StepBackend
from pycollect._steps.group import material_entries
from pycollect._steps.spaces import ActionChecker
from pycollect.config import SupervisionConfig, VectorConfig
from pycollect.envs._vector_infos import WholeInfos
from pycollect.envs.source import EnvSource
from pycollect.exceptions import ConfigError, UnsupportedSpaceError, VectorEnvClosedError
from pycollect.metrics import StepCounter
from pycollect.vector._env_calls import GetAttr, IsWrapped, Render, SetAttr
from pycollect.vector.env import VectorEnvStats, start_backend

__all__ = ["SB3VecEnv"]


def _as_is(info: dict[str, Any]) -> dict[str, Any]:
    return info


_ARGUMENTS = ("num_workers", "env_kwargs", "info_keys", "supervision", "step_backend")


class SB3VecEnv(VecEnv):
    """Stable-Baselines3's ``VecEnv`` over pycollect's supervised workers; behaves as SB3's ``DummyVecEnv``.

    Swap it in for ``SubprocVecEnv`` or ``DummyVecEnv``::

        # was: vec_env = make_vec_env("CartPole-v1", 8, vec_env_cls=SubprocVecEnv)
        vec_env = SB3VecEnv("CartPole-v1", 8, num_workers=2)
        model = PPO("MlpPolicy", vec_env).learn(100_000)

    What it returns is ``DummyVecEnv``'s: ``reset()`` gives the observations only (the reset
    infos are in :attr:`reset_infos`; the seeds of :meth:`seed` and the options of
    ``set_options`` are used by the next ``reset()`` only); ``step_wait()`` gives
    ``(observations, rewards, dones, infos)``, rewards float32, ``dones = terminated or
    truncated``, and a list of one info dict per env with ``"TimeLimit.truncated"`` (``truncated
    and not terminated``) and, for an env whose episode ended (it is reset within the step),
    ``"terminal_observation"``. Observations are arrays, or an ``OrderedDict`` (Dict space) or a
    tuple (Tuple space) of arrays; nested Dict and Tuple spaces are refused, as SB3 does.

    Where it differs from ``DummyVecEnv``:

    * Actions are checked against the action space (structure, shape, kind, bounds) when
      ``step_async`` gets them, and raise :class:`~pycollect.ActionError` there; ``DummyVecEnv``
      hands any value to the envs.
    * ``env_method`` on an attribute that is not callable returns its value (gymnasium's
      ``call``), where ``DummyVecEnv`` raises ``TypeError``.
    * ``terminal_observation`` is read back from pycollect's arrays: the observation space's
      dtype, a numpy scalar for a Discrete, where ``DummyVecEnv`` keeps the env's own object.
    * With worker processes, what ``get_attr``, ``env_method`` and ``get_images`` return, and
      the infos, cross the process boundary pickled (through a 1 MiB mailbox per worker).
      Seeds are checked (``None`` or an int of 0 or more) before anything is sent. A worker
      that crashes or hangs is handled as ``make_vec`` handles it: restarted (its envs report
      ``done`` with ``infos[i]["worker_restarted"]``) or, with ``restart="never"``, a
      :class:`~pycollect.WorkerCrashedError` carrying what the env raised.

    Args:
        env: A gymnasium id (``"CartPole-v1"``), ``"<backend>:<target>"`` for an env backend
            plugin, or a callable that builds one env (a factory or an env class).
        num_envs: How many envs.
        num_workers: Worker processes to step them in (``num_envs`` must be a multiple);
            ``0``: in this process; ``None``: as :func:`pycollect.make_vec` chooses.
        env_kwargs: Keyword arguments for every env's constructor.
        info_keys: The entries of each env's info to keep (``None``, the default: all of them;
            ``("episode",)`` keeps what SB3's ``Monitor`` adds, which is what SB3's logger reads).
            ``terminal_observation`` is always there.
        supervision: How the worker processes are watched and restarted
            (:class:`~pycollect.SupervisionConfig`).
        step_backend: What steps the envs, as for :func:`pycollect.make_vec`: a registered
            :class:`~pycollect.vector.StepBackend`'s name or such a class (``None``:
            ``"inprocess"`` for ``num_workers=0``, ``"workers"`` otherwise).
        **supervision_overrides: Its fields, applied on top (``restart="never"``...).

    Raises:
        ConfigError: A bad argument, before any env is built; a nested Dict or Tuple
            observation space (:class:`~pycollect.UnsupportedSpaceError`).
        UnknownEnvError: The backend does not know the env.
        EnvCreationError: An env's constructor raised.
        WorkerCrashedError: A worker failed to start and its restart policy gave up.
    """

    def __init__(
        self,
        env: str | Callable[..., Any] | EnvSource,
        num_envs: int,
        *,
        num_workers: int | None = None,
        env_kwargs: Mapping[str, Any] | None = None,
        info_keys: Sequence[str] | None = None,
        supervision: SupervisionConfig | None = None,
        step_backend: str | type[StepBackend] | None = None,
        **supervision_overrides: Any,
    ) -> None:
        settings = SupervisionConfig.from_settings(supervision, also=_ARGUMENTS, **supervision_overrides)
        config = VectorConfig(
            num_envs,
            num_workers=num_workers,
            autoreset_mode=AutoresetMode.SAME_STEP,  # SB3's: an ended episode is reset within the step
            info_keys=info_keys,
            supervision=settings,
        )
        backend, name = start_backend(env, config, env_kwargs, step_backend=step_backend)
        self._backend = backend
        self._name = name
        self.closed = False
        self._counter = StepCounter(backend.counters(), f"SB3VecEnv {name} ({backend.name})", num_envs)
        try:
            _refuse_nested(backend.observation.space)
            self._checker = ActionChecker(backend.action, num_envs)
            self._write_actions = self._checker.writer(backend.actions)  # checks, then writes where the envs read
            self._pending = False  # step_async sent a step that step_wait has not collected
            self._was_reset = False
            # get_images asks one env per worker at a time (an image fills much of a mailbox):
            # env j of every worker, then env j + 1 (all at once in-process).
            workers, k = config.num_workers, config.envs_per_worker
            self._render_rounds = (
                [[w * k + j for w in range(workers)] for j in range(k)] if workers else [list(range(num_envs))]
            )
            super().__init__(num_envs, backend.observation.space, backend.action.space)
            self.metadata = dict(backend.metadata)  # DummyVecEnv's: the first env's
        except BaseException:
            backend.close()
            raise

    # -- stepping ---------------------------------------------------------------------------

    def reset(self) -> VecEnvObs:
        """Reset every env with the seeds of :meth:`seed` and the options of ``set_options`` (once); the observations.

        Each env's reset info goes to :attr:`reset_infos`.

        Raises:
            ConfigError: A seed that is not ``None`` or an int of 0 or more, or options that are
                not one dict per env; nothing was reset.
            VectorEnvClosedError: The vector env was closed.
        """
        self._check_open("reset")
        seeds = self._checked_seeds()
        groups = self._option_groups()
        if self._pending:  # a step sent and never collected: its results go, as a reset's do
            self._pending = False
            self._backend.step_wait()
        self.reset_infos = [{} for _ in range(self.num_envs)]
        for options, mask in groups:
            parts = self._backend.reset(seeds, options or None, mask)
            for n in range(self.num_envs) if mask is None else np.flatnonzero(mask).tolist():
                self.reset_infos[n] = self._backend.info.env_info(n)
            for offset, material in parts:
                for index, info, _ in material_entries(material):
                    self.reset_infos[offset + index].update(info)
        self._was_reset = True
        # Seeds and options are used once (DummyVecEnv's rule).
        self._reset_seeds()
        self._reset_options()
        return self._observations()

    def step_async(self, actions: np.ndarray) -> None:
        """Check the actions and send them: with workers, the envs step while the caller goes on.

        Raises:
            ActionError: The actions do not fit the action space (see the class doc).
            ConfigError: No :meth:`reset` yet, or a step already sent and not collected.
            VectorEnvClosedError: The vector env was closed.
        """
        self._check_open("step_async")
        if not self._was_reset:
            raise ConfigError(f"step before reset() on {self._name}: call reset() first")
        if self._pending:
            raise ConfigError(f"step_async() on {self._name} while a step waits for its step_wait(): call step_wait()")
        self._write_actions(actions)
        self._backend.step_async()
        self._pending = True

    def step_wait(self) -> VecEnvStepReturn:
        """Step every env with the actions of :meth:`step_async`: ``(observations, rewards, dones, infos)``.

        An env whose episode ended is reset within the step: its observation is the reset's,
        its info has ``"terminal_observation"``, and :attr:`reset_infos` its reset info.

        Raises:
            ConfigError: No :meth:`reset` yet, or no :meth:`step_async` since the last step.
            WorkerCrashedError: A worker crashed or hung and its restart policy gave up.
            EnvOutputError: An env returned what its spaces do not allow.
            VectorEnvClosedError: The vector env was closed.
        """
        self._check_open("step_wait")
        if not self._was_reset:
            raise ConfigError(f"step before reset() on {self._name}: call reset() first")
        if not self._pending:
            raise ConfigError(f"step_wait() without step_async() on {self._name}: give the actions to step_async()")
        self._pending = False
        backend = self._backend
        parts = backend.step_wait()
        self._counter.step()
        terminated, truncated = backend.terminated, backend.truncated
        dones = terminated | truncated
        # An env whose episode ended: its info is the ending step's (the final info), and the
        # info of the reset that followed goes to reset_infos. Each is what the info fields hold
        # and what of it fit none (the material).
        fields = backend.info
        infos: list[dict[str, Any]] = [fields.env_info(n, final=bool(dones[n])) for n in range(self.num_envs)]
        for n in np.flatnonzero(dones).tolist():
            self.reset_infos[n] = fields.env_info(n)
        for offset, material in parts:
            # An env's own info objects are copied (the env may change them later); infos kept
            # whole are read into new ones.
            copy: Callable[[dict[str, Any]], dict[str, Any]] = _as_is if isinstance(material, WholeInfos) else deepcopy
            for index, info, final in material_entries(material):
                n = offset + index
                if dones[n]:
                    infos[n].update(copy(final or {}))
                    self.reset_infos[n].update(info)
                else:
                    infos[n].update(copy(info))
        time_limit = truncated & ~terminated
        for n, info in enumerate(infos):
            info["TimeLimit.truncated"] = bool(time_limit[n])
        if dones.any():
            final_observations, layout = backend.final_observations, backend.observation
            assert final_observations is not None  # SAME_STEP mode keeps them
            for n in np.flatnonzero(dones).tolist():
                infos[n]["terminal_observation"] = layout.single(final_observations, n)
        return self._observations(), backend.rewards.astype(np.float32), dones, infos

    def close(self) -> None:
        """Close the envs and stop the workers; a second call does nothing."""
        if self.closed:
            return
        self.closed = True
        self._counter.close()
        self._backend.close()
        self._write_actions = self._checker.writer(self._backend.actions)  # the old one's views held the segment

    # -- the envs' attributes ---------------------------------------------------------------

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """Each env's ``attr_name`` (of ``indices``), found through its wrappers, never called."""
        self._check_open("get_attr")
        return self._backend.apply(GetAttr(attr_name), self._indices(indices))

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Set ``attr_name`` to ``value`` on each env (of ``indices``), on its outermost wrapper as SB3 does."""
        self._check_open("set_attr")
        self._backend.apply(SetAttr(attr_name, value), self._indices(indices))

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        """Each env's ``method_name`` (of ``indices``) called with the arguments; the results."""
        self._check_open("env_method")
        return self._backend.call(method_name, method_args, method_kwargs, self._indices(indices))

    def env_is_wrapped(
        self, wrapper_class: type[gym.Wrapper[Any, Any, Any, Any]], indices: VecEnvIndices = None
    ) -> list[bool]:
        """Whether each env (of ``indices``) has a ``wrapper_class`` among its wrappers."""
        self._check_open("env_is_wrapped")
        return self._backend.apply(IsWrapped(wrapper_class), self._indices(indices))

    def get_images(self) -> Sequence[np.ndarray | None]:
        """Each env's ``render()`` (``render_mode="rgb_array"``), asked of one env per worker at a time.

        One env per worker and request, so that an image needs to fit a worker's 1 MiB mailbox
        alone. Another render mode warns and gives ``None`` per env, as ``DummyVecEnv`` does.
        """
        self._check_open("get_images")
        if self.render_mode != "rgb_array":
            warnings.warn(
                f"The render mode is {self.render_mode}, but this method assumes it is `rgb_array` to obtain images.",
                stacklevel=2,
            )
            return [None for _ in range(self.num_envs)]
        images: list[np.ndarray | None] = [None] * self.num_envs
        for envs in self._render_rounds:
            for n, image in zip(envs, self._backend.apply(Render(), envs), strict=True):
                images[n] = image
        return images

    @property
    def workers(self) -> tuple[Any, ...]:
        """Each worker process's :class:`~pycollect._core.WorkerStats`; ``()`` in-process."""
        return self._backend.workers()

    def stats(self) -> VectorEnvStats:
        """What the envs and their workers did: supervision and metrics (docs/metrics.md)."""
        return VectorEnvStats(workers=self.workers, metrics=self._counter.read())

    def __repr__(self) -> str:
        return f"pycollect.vector.SB3VecEnv({self._name}, num_envs={self.num_envs})"

    # -- helpers ----------------------------------------------------------------------------

    def _check_open(self, what: str) -> None:
        if self.closed:
            raise VectorEnvClosedError(f"{what}() on a closed vector env ({self._name}): it was closed by close()")

    def _observations(self) -> VecEnvObs:
        backend = self._backend
        observations = backend.observation.batched(backend.observations, copy=True)
        return OrderedDict(observations) if isinstance(observations, dict) else observations

    def _indices(self, indices: VecEnvIndices) -> list[int] | None:
        """SB3's ``indices`` (``None``, an int or ints; negative ones count from the end, as list indices do)."""
        if indices is None:
            return None
        if isinstance(indices, int | np.integer) and not isinstance(indices, bool | np.bool_):
            indices = [indices]
        if not isinstance(indices, Iterable) or isinstance(indices, str | bytes):
            raise ConfigError(f"indices must be None, an int or ints, got {indices!r}")
        checked = []
        for index in indices:
            if isinstance(index, int | np.integer) and not isinstance(index, bool | np.bool_) and index < 0:
                index = int(index) + self.num_envs if index >= -self.num_envs else int(index)
            checked.append(index)
        return checked  # the backend checks each names an env

    def _checked_seeds(self) -> list[int | None]:
        seeds = list(self._seeds)
        if len(seeds) != self.num_envs:
            raise ConfigError(f"{len(seeds)} seeds for {self.num_envs} envs: {seeds!r}")
        for seed in seeds:
            if seed is not None and (
                not isinstance(seed, int | np.integer) or isinstance(seed, bool | np.bool_) or seed < 0
            ):
                raise ConfigError(f"seed {seed!r} is not None or an int of 0 or more (the seeds are {seeds!r})")
        return [None if seed is None else int(seed) for seed in seeds]

    def _option_groups(self) -> list[tuple[dict[str, Any], np.ndarray | None]]:
        """The envs that get the same reset options, as ``(options, mask)`` (``mask`` ``None``: every env).

        The common case (every env gets ``{}``, or the one dict ``set_options`` copied to all)
        is one group: one reset of every env.
        """
        options = list(self._options)
        if len(options) != self.num_envs:
            raise ConfigError(f"set_options gave {len(options)} option dicts for {self.num_envs} envs")
        groups: list[tuple[dict[str, Any], np.ndarray | None]] = []
        for n, option in enumerate(options):
            if option is not None and not isinstance(option, dict):
                raise ConfigError(f"the reset options of env {n} are {option!r}, not a dict")
            option = option or {}
            for existing, mask in groups:
                if existing is option or _equal(existing, option):
                    assert mask is not None
                    mask[n] = True
                    break
            else:
                mask = np.zeros(self.num_envs, np.bool_)
                mask[n] = True
                groups.append((option, mask))
        return [(groups[0][0], None)] if len(groups) == 1 else groups


def _equal(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two option dicts are equal; ones that cannot be compared (arrays inside) count as different."""
    try:
        return bool(a == b)
    except Exception:
        return False


def _refuse_nested(space: gym.Space[Any]) -> None:
    """SB3's rule (``check_for_nested_spaces``): no Dict or Tuple inside a Dict or Tuple observation space."""
    if isinstance(space, gym.spaces.Dict | gym.spaces.Tuple):
        inner = space.spaces.values() if isinstance(space, gym.spaces.Dict) else space.spaces
        if any(isinstance(sub, gym.spaces.Dict | gym.spaces.Tuple) for sub in inner):
            raise UnsupportedSpaceError(
                f"the observation space {space} nests a Dict or Tuple space in another: Stable-Baselines3 "
                "does not support nested observation spaces (flatten the inner one, or use pycollect.make_vec)"
            )
