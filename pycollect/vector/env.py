"""``pycollect.make_vec`` and the gymnasium vector env it returns."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from pycollect._steps.backend import StepBackend
from pycollect._steps.group import disabled_message
from pycollect._steps.infos import InfoMerger
from pycollect._steps.spaces import ActionChecker
from pycollect.config import SupervisionConfig, VectorConfig
from pycollect.envs.pool import with_num_envs
from pycollect.envs.source import EnvSource
from pycollect.exceptions import ActionError, ConfigError, VectorEnvClosedError
from pycollect.metrics import CollectionMetrics, StepCounter
from pycollect.plugins import resolve_env, resolve_step_backend

__all__ = ["VectorEnv", "VectorEnvStats", "make_vec", "start_backend"]


@dataclass(frozen=True)
class VectorEnvStats:
    """A snapshot of a vector env (:meth:`VectorEnv.stats`).

    Attributes:
        workers: Each worker process's supervision state; ``()`` in-process.
        metrics: Rates, time splits and step latencies over the last 10 seconds of the
            workers and of the trainer, whose batches are the vector env's steps
            (:mod:`pycollect.metrics`); after ``close()``, the last ones read.
    """

    workers: tuple[Any, ...]
    metrics: CollectionMetrics | None


class VectorEnv(gym.vector.VectorEnv[Any, npt.NDArray[Any], npt.NDArray[Any]]):
    """A gymnasium vector env whose envs pycollect steps, step for step what ``SyncVectorEnv`` returns.

    Made by :func:`make_vec`. It checks what it is given (actions, seeds, the reset mask)
    before anything is sent, hands the request to its backend (which steps the envs, in this
    process or in worker processes) and builds what gymnasium returns from the backend's result
    arrays: observations in the batched observation space's structure, float64 rewards, bool
    flags, and infos merged with gymnasium's own ``_add_info``.

    Args:
        backend: What steps the envs.
        config: The vector env's settings (``backend`` was started with the same).
        name: The env's name, for messages.

    Attributes:
        config: The vector env's settings.
        num_envs: How many envs it steps.
        single_observation_space: One env's observation space.
        single_action_space: One env's action space.
        observation_space: The batched observation space (gymnasium's ``batch_space``).
        action_space: The batched action space.
        metadata: The first env's metadata, with ``"autoreset_mode"`` (an ``AutoresetMode``).
        autoreset_mode: The autoreset mode.
        copy: Whether observations are fresh arrays (``True``) or views of the result arrays,
            valid until the next ``step`` or ``reset`` (``False``).
        batch_size: How many envs :meth:`recv` returns (fewer than ``num_envs``: a pool).
    """

    def __init__(self, backend: StepBackend, config: VectorConfig, *, name: str = "env") -> None:
        self._backend = backend
        self._name = name
        self.config = config
        self.autoreset_mode = config.autoreset_mode
        self.copy = config.copy
        self.num_envs = backend.num_envs
        self.single_observation_space = backend.observation.space
        self.single_action_space = backend.action.space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self._actions = ActionChecker(backend.action, self.num_envs)
        self.action_space = self._actions.space
        self.metadata = dict(backend.metadata)
        self.metadata["autoreset_mode"] = self.autoreset_mode
        self.render_mode = backend.render_mode
        self._infos = InfoMerger(self.num_envs)
        self._ended = np.zeros(self.num_envs, np.bool_)  # DISABLED mode: envs that ended and were not reset
        self._was_reset = False  # gymnasium's order: reset() before the first step()
        self._stepping = False  # step_async() sent a step that step_wait() has not collected
        self.batch_size = config.batch_size
        self._pool = self.batch_size < self.num_envs  # recv() serves the first workers ready
        self._batch_actions = ActionChecker(backend.action, self.batch_size) if self._pool else self._actions
        self._batch_infos = InfoMerger(self.batch_size) if self._pool else self._infos
        self._envs_per_worker = config.envs_per_worker
        self._bind_writers()
        self._rows: dict[tuple[int, ...], _Rows] = {}  # the rows of a set of workers, for recv()
        self._received_workers: list[int] = []  # the workers the last recv() returned, in order
        self._received: np.ndarray | None = None  # the env ids the last recv() returned
        self._reset_result: tuple[Any, dict[str, Any]] | None = None  # async_reset's, for recv (no pool)
        self._same_step = self.autoreset_mode is AutoresetMode.SAME_STEP
        self._final_obs = self._final_observation if backend.final_observations is not None else None
        where = f"{backend.name}, {self.num_envs} envs"
        self._counter = StepCounter(backend.counters(), f"make_vec {name} ({where})", self.num_envs)
        self._metered = config.metrics

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset every env (or those of ``options["reset_mask"]``); return the observations and infos.

        Args:
            seed: ``None`` (each env's own stream goes on, or fresh entropy at the first
                reset), an int ``s`` (env ``i`` gets ``s + i``), or one seed (or ``None``) per env.
            options: Passed to every env's ``reset``. ``options["reset_mask"]``, a bool array of
                ``num_envs``, resets only the envs where it is True (they get the other options);
                the others keep their observation.

        Raises:
            ConfigError: A bad seed or reset mask (gymnasium's checks and messages).
            VectorEnvClosedError: The vector env was closed.
        """
        self._check_open("reset")
        self._not_a_pool("reset")
        seeds = self._seeds(seed)
        if self._stepping:  # a step sent and never collected: its results go, as gymnasium's reset does
            self._stepping = False
            self._backend.step_wait()
        mask, passed = None, None
        if options is not None:
            if not isinstance(options, Mapping):
                raise ConfigError(f"options must be a dict or None, got {type(options).__name__}: {options!r}")
            passed = dict(options)  # gymnasium pops the mask out of the caller's dict; this leaves it alone
            if "reset_mask" in passed:
                mask = self._mask(passed.pop("reset_mask"))
        parts = self._backend.reset(seeds, passed, mask)
        self._was_reset = True
        if mask is None:
            self._ended[:] = False
        else:
            self._ended[mask] = False
        infos = self._infos.merge(parts, fields=self._backend.info)
        return self._observations(), infos

    def step(
        self, actions: Any
    ) -> tuple[Any, npt.NDArray[np.float64], npt.NDArray[np.bool_], npt.NDArray[np.bool_], dict[str, Any]]:
        """Step every env with its action, autoresetting as ``autoreset_mode`` says.

        Args:
            actions: A batch of the batched action space (``[num_envs, ...]`` arrays, in the
                action space's Dict or Tuple structure). Any array-like that numpy can make one
                of the same kind is accepted and cast to the space's dtype.

        Returns:
            ``(observations, rewards, terminated, truncated, infos)``, as gymnasium's vector envs.

        Raises:
            ActionError: The actions do not fit the action space, or (``DISABLED`` mode) an env
                that ended was not reset; nothing was stepped.
            ConfigError: ``step()`` before the first ``reset()``.
            WorkerCrashedError: (worker processes) a worker crashed or hung and its restart
                policy gives up; the error carries what the worker raised.
            EnvOutputError: An env returned what its spaces do not allow.
            VectorEnvClosedError: The vector env was closed.
        """
        self.step_async(actions)
        return self.step_wait()

    # -- the pool API (EnvPool's): async_reset, recv, send ----------------------------------

    def async_reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: Mapping[str, Any] | None = None
    ) -> None:
        """Reset every env without waiting: :meth:`recv` returns the envs as they are ready.

        ``seed`` and ``options`` as for :meth:`reset` (no ``reset_mask``).
        """
        self._check_open("async_reset")
        if not self._pool:
            self._reset_result = self.reset(seed=seed, options=options)
            self._received = None
            return
        seeds = self._seeds(seed)
        passed = None if options is None else dict(options)
        if passed is not None and "reset_mask" in passed:
            raise ConfigError("async_reset() resets every env: reset_mask is for reset() (batch_size == num_envs)")
        self._backend.pool_reset(seeds, passed)
        self._was_reset, self._received = True, None

    def recv(
        self,
    ) -> tuple[Any, npt.NDArray[np.float64], npt.NDArray[np.bool_], npt.NDArray[np.bool_], dict[str, Any], np.ndarray]:
        """The next ``batch_size`` envs whose step (or reset) is done.

        Returns ``(observations, rewards, terminated, truncated, infos, env_ids)``: ``env_ids``
        (int32) says which env each row is; infos are gymnasium's, indexed by row.
        Whole workers are served, only workers that have answered, and among those the one
        whose request was sent first (ties: in worker order): a worker that is ready is served
        before any worker sent to after it. With ``batch_size == num_envs`` it is every env, in
        order. Send the actions of exactly these envs with :meth:`send`.

        Raises:
            ConfigError: Nothing is in flight (call :meth:`async_reset`, then :meth:`send`).
            WorkerCrashedError, EnvOutputError, VectorEnvClosedError: as :meth:`step`.
        """
        self._check_open("recv")
        if not self._pool:
            ids = np.arange(self.num_envs, dtype=np.int32)
            if self._reset_result is not None:
                (obs, reset_infos), self._reset_result = self._reset_result, None
                flags = np.zeros(self.num_envs, np.bool_)
                self._received = ids
                return obs, np.zeros(self.num_envs, np.float64), flags, flags.copy(), reset_infos, ids
            if not self._stepping:
                raise ConfigError(f"recv() on {self._name} with nothing in flight: async_reset() or send() first")
            result = self.step_wait()
            self._received = ids
            return (*result, ids)
        backend = self._backend
        k = self._envs_per_worker
        workers, materials = backend.pool_recv(self.batch_size // k)
        rows = self._rows.get(key := tuple(workers))
        if rows is None:
            rows = self._rows[key] = _Rows.of(workers, k)
        self._received_workers = workers
        layout, ids, take = backend.observation, rows.ids, rows.take
        obs = layout.batched([take(array) for array in backend.observations], copy=False)
        terminated, truncated = take(backend.terminated), take(backend.truncated)
        parts = [(position * k, material) for position, w in enumerate(workers) if (material := materials[w])]
        final = backend.final_observations
        infos = self._batch_infos.merge(
            parts,
            None if final is None else (lambda row: layout.single(final, int(ids[row]))),
            backend.info,
            terminated | truncated if self._same_step else None,
            rows.select,
        )
        self._received = ids
        return obs, take(backend.rewards), terminated, truncated, infos, ids.copy()

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Send the actions of the envs the last :meth:`recv` returned (``env_ids``: those, in that order).

        Raises:
            ActionError: The actions do not fit the action space (``batch_size`` of them), or
                ``env_ids`` are not what the last ``recv()`` returned.
            ConfigError: No ``recv()`` since the last ``send()``.
        """
        self._check_open("send")
        received = self._received
        if received is None:
            raise ConfigError(f"send() on {self._name} without a recv() before it: send the envs recv() returned")
        if env_ids is not None and not _same_ids(env_ids, received):
            raise ActionError(
                f"send() for env_ids {np.asarray(env_ids).tolist()}, but the last recv() returned env_ids "
                f"{received.tolist()}: send exactly those, in that order"
            )
        if not self._pool:
            self.step_async(actions)
            self._received = None
            return
        backend = self._backend
        if self._worker_writers is not None:
            [worker] = self._received_workers
            self._worker_writers[worker](actions)  # ActionError: nothing written, nothing sent
            backend.pool_post(self._received_workers)
        else:
            backend.pool_send(self._received_workers, self._batch_actions.check(actions))
        self._received = None

    def step_async(self, actions: Any) -> None:
        """Check ``actions`` and send them: the envs step while the caller does something else.

        Collect the results with :meth:`step_wait` (gymnasium's ``AsyncVectorEnv`` API). With
        ``num_workers=0`` the envs step in :meth:`step_wait`.

        Raises:
            ActionError, ConfigError, VectorEnvClosedError: as :meth:`step` (nothing was sent);
                a ``ConfigError`` too if a step is already waiting for its ``step_wait()``.
        """
        self._check_open("step_async")
        self._not_a_pool("step")
        if not self._was_reset:
            raise ConfigError(f"step() before reset() on {self._name}: call reset() first, as with any gymnasium env")
        if self._stepping:
            raise ConfigError(f"step_async() on {self._name} while a step waits for its step_wait(): call step_wait()")
        self._write_actions(actions)  # checked (ActionError: nothing is sent), then written where the envs read
        if self.autoreset_mode is AutoresetMode.DISABLED and self._ended.any():
            raise ActionError(disabled_message(np.flatnonzero(self._ended).tolist()))
        self._backend.step_async()
        self._stepping = True

    def step_wait(
        self,
    ) -> tuple[Any, npt.NDArray[np.float64], npt.NDArray[np.bool_], npt.NDArray[np.bool_], dict[str, Any]]:
        """The results of the step :meth:`step_async` sent, as :meth:`step` returns them.

        Raises:
            ConfigError: No step was sent.
            WorkerCrashedError, EnvOutputError, VectorEnvClosedError: as :meth:`step`.
        """
        self._check_open("step_wait")
        if not self._stepping:
            raise ConfigError(f"step_wait() on {self._name} without a step_async() before it")
        self._stepping = False
        parts = self._backend.step_wait()
        if self._metered:
            self._counter.step()
        backend = self._backend
        terminated, truncated = backend.terminated.copy(), backend.truncated.copy()
        ended = np.logical_or(terminated, truncated, out=self._ended)
        infos = self._infos.merge(parts, self._final_obs, backend.info, ended if self._same_step else None)
        return self._observations(), backend.rewards.copy(), terminated, truncated, infos

    def render(self) -> tuple[Any, ...]:
        """Each env's ``render()``."""
        return self.call("render")

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Each env's ``name``: called with the arguments if it is callable, else its value.

        Raises:
            VectorEnvClosedError: The vector env was closed.
        """
        self._check_open("call")
        return tuple(self._backend.call(name, args, kwargs))

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Each env's ``name`` (as ``SyncVectorEnv.get_attr``: a method is called without arguments).

        Raises:
            VectorEnvClosedError: The vector env was closed.
        """
        self._check_open("get_attr")
        return tuple(self._backend.get_attr(name))

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | Any) -> None:
        """Set ``name`` on every env: ``values[i]`` on env ``i`` for a list or tuple, else the one value on all.

        Raises:
            ConfigError: A list or tuple whose length is not ``num_envs``.
            VectorEnvClosedError: The vector env was closed.
        """
        self._check_open("set_attr")
        if not isinstance(values, list | tuple):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ConfigError(
                "Values must be a list or tuple with length equal to the number of environments. "
                f"Got `{len(values)}` values for {self.num_envs} environments."
            )
        self._backend.set_attr(name, list(values))

    @property
    def workers(self) -> tuple[Any, ...]:
        """Each worker process's :class:`~pycollect._core.WorkerStats`; ``()`` in-process.

        Its pid, generation, restarts and last exit, as the supervisor sees them now.
        """
        return self._backend.workers()

    def stats(self) -> VectorEnvStats:
        """What the vector env and its workers did: supervision and metrics (docs/metrics.md)."""
        return VectorEnvStats(workers=self.workers, metrics=self._counter.read())

    def close_extras(self, **kwargs: Any) -> None:
        """Close the envs (and whatever the backend holds)."""
        self._counter.close()
        self._backend.close()
        self._bind_writers()  # the writers' views held the backend's shared memory

    def _final_observation(self, env: int) -> Any:
        """Env ``env``'s final observation of the last step (``SAME_STEP`` mode)."""
        final = self._backend.final_observations
        assert final is not None  # only bound when the backend has them
        return self._backend.observation.single(final, env)

    def _bind_writers(self) -> None:
        """The native action writers, over where the envs read their actions (checks, then writes)."""
        backend, k = self._backend, self._envs_per_worker
        self._write_actions = self._actions.writer(backend.actions)
        # A pool serving one worker per recv() writes its actions where that worker reads them,
        # checked as the synchronous step's are (natively in the common case).
        self._worker_writers = (
            [
                self._batch_actions.writer([array[w * k : (w + 1) * k] for array in backend.actions])
                for w in range(self.num_envs // k)
            ]
            if self._pool and self.batch_size == k
            else None
        )

    def __repr__(self) -> str:
        return f"pycollect.vector.VectorEnv({self._name}, num_envs={self.num_envs})"

    def _not_a_pool(self, what: str) -> None:
        if self._pool:
            raise ConfigError(
                f"{what}() on {self._name}, a pool of {self.num_envs} envs served {self.batch_size} at a time "
                "(batch_size): use async_reset(), recv() and send()"
            )

    def _check_open(self, what: str) -> None:
        if self.closed:
            raise VectorEnvClosedError(f"{what}() on a closed vector env ({self._name}): it was closed by close()")

    def _observations(self) -> Any:
        return self._backend.observation.batched(self._backend.observations, copy=self.copy)

    def _seeds(self, seed: Any) -> list[int | None]:
        if seed is None:
            return [None] * self.num_envs
        if isinstance(seed, int | np.integer) and not isinstance(seed, bool):
            return [int(seed) + i for i in range(self.num_envs)]
        if not isinstance(seed, Sequence | np.ndarray) or isinstance(seed, str | bytes):
            raise ConfigError(f"seed must be None, an int or a list of {self.num_envs} ints, got {seed!r}")
        seeds = list(seed)
        if len(seeds) != self.num_envs:
            raise ConfigError(
                "If seeds are passed as a list the length must match "
                f"num_envs={self.num_envs} but got length={len(seeds)}."
            )
        for value in seeds:
            if value is not None and (not isinstance(value, int | np.integer) or isinstance(value, bool)):
                raise ConfigError(f"seed list item {value!r} is not an int or None (seed={seed!r})")
        return [None if value is None else int(value) for value in seeds]

    def _mask(self, mask: Any) -> np.ndarray:
        """Gymnasium's checks of ``options["reset_mask"]``, with its messages."""
        if not isinstance(mask, np.ndarray):
            raise ConfigError(f"`options['reset_mask']` must be a numpy array, got {type(mask)}")
        if mask.shape != (self.num_envs,):
            raise ConfigError(f"`options['reset_mask']` must have shape `({self.num_envs},)`, got {mask.shape}")
        if mask.dtype != np.bool_:
            raise ConfigError(f"`options['reset_mask']` must have `dtype=np.bool_`, got {mask.dtype}")
        if not np.any(mask):
            raise ConfigError(
                "`options['reset_mask']` must contain a boolean array with at least one True value, "
                f"got reset_mask={mask}"
            )
        return mask


def make_vec(
    env: str | Callable[..., Any] | EnvSource | Sequence[Any],
    num_envs: int,
    *,
    num_workers: int | None = None,
    autoreset_mode: str | AutoresetMode = "next_step",
    copy: bool = True,
    env_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
    batch_size: int | None = None,
    info_keys: Sequence[str] | None = None,
    supervision: SupervisionConfig | None = None,
    step_backend: str | type[StepBackend] | None = None,
    metrics: bool = True,
    **supervision_overrides: Any,
) -> VectorEnv:
    """A gymnasium vector env of ``num_envs`` envs, stepped by pycollect.

    Its settings become one :class:`~pycollect.VectorConfig`, which checks them (see there for
    each one's default and checks) before any env is built.

    Step for step it returns what ``gymnasium.vector.SyncVectorEnv`` over the same env
    functions returns, for the same seeds and actions: observations, rewards, flags, infos
    (with their ``_key`` masks) and, in ``SAME_STEP`` mode, ``final_obs`` and ``final_info``.

    With worker processes (``num_workers > 0``) each worker steps ``num_envs / num_workers``
    envs, env ``i`` in worker ``i // (num_envs / num_workers)``; the processes are supervised
    as a :class:`~pycollect.Collector`'s are (``restart``, ``max_restarts``, heartbeats, ...).
    A worker that crashes or hangs makes ``step()`` raise :class:`~pycollect.WorkerCrashedError`
    with what it raised (``restart="never"``), or is restarted, and its envs report
    ``truncated`` at that step with ``infos["worker_restarted"]`` (``"permanent"``, the default).

    Args:
        env: A gymnasium id (``"CartPole-v1"``), ``"<backend>:<target>"`` for an env backend
            plugin, or a callable that builds one env (a factory or an env class) or a batched env
            of ``num_envs / num_workers`` sub-envs. A list, one per worker, gives each worker its own.
        num_envs: How many envs (1 or more).
        num_workers: Worker processes to step them in; ``0``: in this process. ``None`` (the
            default): as many as there are CPUs, or fewer, so that they split ``num_envs``
            evenly (:func:`~pycollect.config.default_num_workers`).
        autoreset_mode: ``"next_step"`` (the default), ``"same_step"``, ``"disabled"``, or a
            ``gymnasium.vector.AutoresetMode``.
        copy: ``True``: observations are fresh arrays. ``False``: views of the arrays the
            results are written into, valid until the next ``step`` or ``reset``.
        env_kwargs: Keyword arguments for every env's constructor (a list: one dict per worker).
        batch_size: Fewer than ``num_envs`` (a multiple of ``num_envs / num_workers``): a pool
            that serves the first envs ready, ``batch_size`` at a time, through
            :meth:`VectorEnv.async_reset`, :meth:`VectorEnv.recv` and :meth:`VectorEnv.send`
            (EnvPool's API); ``reset()`` and ``step()`` are then refused. ``None``: ``num_envs``.
        info_keys: The entries of the envs' infos that reach ``infos`` (with their ``_key``
            masks; in ``SAME_STEP`` mode ``final_info`` is kept to them too). ``None`` (the
            default): all of them, as ``SyncVectorEnv``. The rest is dropped where the env
            steps, before it crosses to this process, and ``()`` lets every step take the
            native path (see docs/vector.md, "Infos"). The vector env's own entries
            (``final_obs``, ``final_info``, ``worker_restarted``) are always there.
        supervision: How worker processes are watched and restarted (a
            :class:`~pycollect.SupervisionConfig`; ``None``: its defaults).
        step_backend: What steps the envs: the name of a registered
            :class:`~pycollect.vector.StepBackend` (``"inprocess"``, ``"workers"``, or a plugin's;
            ``pycollect plugins`` lists them) or such a class. ``None`` (the default):
            ``"inprocess"`` for ``num_workers=0``, ``"workers"`` otherwise.
        metrics: Count each step for :meth:`VectorEnv.stats`, ``pycollect top`` and the
            exporters (``False``: nothing counted, to measure what counting costs).
        **supervision_overrides: Fields of :class:`~pycollect.SupervisionConfig` applied on
            top (``restart="never"``, ``max_restarts=5``, ``heartbeat_timeout_s=10``...).

    Raises:
        ConfigError: A bad argument (the message names it; an unknown ``step_backend``, or
            settings it refuses, too), before any env is built; envs whose spaces differ;
            ``env`` that is not something to build envs from.
        UnknownEnvError: The backend does not know the env.
        EnvCreationError: An env's constructor raised.
        UnsupportedSpaceError: A space pycollect cannot lay out (Text, Graph, Sequence...).
    """
    settings = SupervisionConfig.from_settings(supervision, also=_MAKE_VEC_ARGUMENTS, **supervision_overrides)
    config = VectorConfig(
        num_envs,
        num_workers=num_workers,
        autoreset_mode=autoreset_mode,
        batch_size=batch_size,
        info_keys=info_keys,
        copy=copy,
        supervision=settings,
        metrics=metrics,
    )
    backend, name = start_backend(env, config, env_kwargs, step_backend=step_backend)
    try:
        return VectorEnv(backend, config, name=name)
    except BaseException:
        backend.close()  # its workers are running: stop them now, not at the process's exit
        raise


_MAKE_VEC_ARGUMENTS = (
    "num_workers",
    "autoreset_mode",
    "copy",
    "env_kwargs",
    "batch_size",
    "info_keys",
    "supervision",
    "step_backend",
)


def start_backend(
    env: str | Callable[..., Any] | EnvSource | Sequence[Any],
    config: VectorConfig,
    env_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
    *,
    step_backend: str | type[StepBackend] | None = None,
) -> tuple[StepBackend, str]:
    """Start the step backend of a vector env; return it and the env's name.

    What :func:`make_vec`, :class:`pycollect.vector.SB3VecEnv` and ``pycollect.torchrl.ParallelEnv``
    stand on; ``env``, ``env_kwargs`` and ``step_backend`` are :func:`make_vec`'s. The step
    backend is resolved and its :meth:`~pycollect.vector.StepBackend.check` sees ``config``, and
    the env argument is resolved and checked by its env backend, before anything is built.
    Close the backend when done (a :class:`VectorEnv` over it does).

    Args:
        env: A gymnasium id, ``"<backend>:<target>"``, a factory callable, or an
            :class:`~pycollect.envs.source.EnvSource` resolved before.
        config: The vector env's settings (:class:`~pycollect.VectorConfig`).
        env_kwargs: Keyword arguments for every env's constructor.
        step_backend: A registered step backend's name or a :class:`~pycollect.vector.StepBackend`
            subclass; ``None``: ``"inprocess"`` for ``num_workers=0``, ``"workers"`` otherwise.

    Raises:
        ConfigError: An unknown ``step_backend`` (the message lists the registered ones) or
            settings it refuses; ``env`` is not something to build envs from; what the
            backend's ``start`` raises, or a ``start`` that returns no ``StepBackend``.
        UnknownEnvError: The env backend does not know the env.
        PluginError: An installed plugin is broken.
    """
    chosen = resolve_step_backend(step_backend, config)
    # A batched backend builds one batched env of each worker's envs (all of them in this process)
    source = with_num_envs(resolve_env(env, env_kwargs, num_workers=config.num_workers), config.envs_per_worker)
    backend = chosen.start(source, config)
    if not isinstance(backend, StepBackend):
        closing = getattr(backend, "close", None)
        if callable(closing):
            closing()  # whatever it started: stopped now, not at the process's exit
        raise ConfigError(
            f"step backend {chosen.name!r} ({chosen.__module__}.{chosen.__qualname__}): start() returned "
            f"{backend!r}, not a pycollect.vector.StepBackend"
        )
    return backend, source.describe()


class _Rows(NamedTuple):
    """The rows of the result arrays that a set of workers' envs fill, in the order ``recv()`` returns them.

    ``ids``: the env ids (int32); ``select``: what selects them from a ``[num_envs, ...]`` array
    (a slice where they are consecutive, as one worker's are: cheaper than a fancy index);
    ``take``: a fresh array of those rows of an array.
    """

    ids: np.ndarray
    select: slice | np.ndarray
    take: Callable[[np.ndarray], np.ndarray]

    @classmethod
    def of(cls, workers: Sequence[int], k: int) -> _Rows:
        ids = np.concatenate([np.arange(w * k, (w + 1) * k) for w in workers]).astype(np.int32)
        if (np.diff(ids) == 1).all():
            block = slice(int(ids[0]), int(ids[-1]) + 1)
            return cls(ids, block, lambda array: array[block].copy())
        return cls(ids, ids, lambda array: array[ids])  # fancy indexing copies


def _same_ids(env_ids: Any, received: np.ndarray) -> bool:
    """Whether ``env_ids`` are ``received`` (int32), in order; cheaply for the ids recv() returned."""
    if isinstance(env_ids, np.ndarray) and env_ids.dtype == received.dtype and env_ids.shape == received.shape:
        return env_ids.tobytes() == received.tobytes()
    return bool(np.array_equal(np.asarray(env_ids), received))
