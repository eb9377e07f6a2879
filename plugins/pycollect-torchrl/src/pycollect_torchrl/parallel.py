"""``pycollect.torchrl.ParallelEnv``: TorchRL's ``ParallelEnv`` on pycollect's worker processes.

A TorchRL ``EnvBase`` of ``batch_size=[num_workers]`` with the signature and batch semantics of
``torchrl.envs.ParallelEnv`` (``reset`` with or without a ``"_reset"`` mask, ``step``,
``step_and_maybe_reset``, ``rollout``, the batched specs, ``set_seed`` chained through the
workers), so it drops into TorchRL's ``Collector``, ``MultiSyncCollector`` and ``env.rollout()``.
Underneath it is the step-level exchange of ``pycollect.make_vec``
(:func:`pycollect.vector.start_backend`: the ``workers`` :class:`pycollect.vector.StepBackend`,
with a :class:`pycollect.VectorConfig` in ``DISABLED`` autoreset mode): one supervised,
non-daemonic worker process per env, actions and results through shared memory with
futex-backed handshakes, and the supervision of every
pycollect worker (a crash raises :class:`pycollect.WorkerCrashedError` carrying the env's
traceback, or restarts the worker as configured; shutdown is bounded; nothing is left behind).

What differs from TorchRL's, by design: only the action travels to the workers (each worker
carries its env's own TensorDict from step to step, as TorchRL's ``rollout`` does, so
``StepCounter`` and the like work; a state key the *caller* changes on the root TensorDict is not
sent), and the specs are read from one env built in this process when the ``ParallelEnv`` is made
(TorchRL does the same unless ``metadata_from_workers=True``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from tensordict import TensorDict, TensorDictBase
from torchrl.envs import EnvBase
from torchrl.envs.utils import _aggregate_end_of_traj

from pycollect import ActionError, ConfigError, SupervisionConfig, VectorConfig
from pycollect.envs.source import EnvSource
from pycollect.metrics import StepCounter
from pycollect.vector import StepBackend, VectorEnvStats
from pycollect_torchrl.backend import TorchRLBackend, is_torchrl_env
from pycollect_torchrl.layout import Layout, layout

__all__ = ["ParallelEnv"]

# TorchRL ParallelEnv arguments that concern its own transport (pipes, shared TensorDicts, thread
# counts, start method): accepted so that a script passes them unchanged; pycollect's transport
# needs none of them.
_TRANSPORT_ARGUMENTS = (
    "pin_memory",
    "share_individual_td",
    "shared_memory",
    "memmap",
    "policy_proof",
    "allow_step_when_done",
    "num_threads",
    "num_sub_threads",
    "serial_for_single",
    "non_blocking",
    "mp_start_method",
    "use_buffers",
    "metadata_from_workers",
    "consolidate",
    "daemon",
)


def _one(value: Any, num_workers: int, what: str) -> Any:
    """The one factory (or kwargs) of a per-worker list, which pycollect's workers all share."""
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        items = list(value)
        if len(items) != num_workers:
            raise ConfigError(f"{what}: a list of {len(items)} for num_workers={num_workers}")
        first = items[0]
        if any(item is not first and item != first for item in items[1:]):
            raise ConfigError(
                f"{what}: a different value per worker is not supported by pycollect.torchrl.ParallelEnv (every "
                "worker builds its env from the same factory and kwargs); use torchrl.envs.ParallelEnv for that"
            )
        return first
    return value


class ParallelEnv(EnvBase):  # type: ignore[misc]
    """Creates one environment per worker process: ``torchrl.envs.ParallelEnv`` on pycollect's workers.

    Args:
        num_workers: How many envs (one worker process each); the batch size.
        create_env_fn: A factory of one unbatched TorchRL env (a function, an ``EnvCreator``, an
            env class), or a list of ``num_workers`` of the same one.
        create_env_kwargs: Keyword arguments for the factory (or a list of the same dict).
        device: Where the TensorDicts it returns live (``None``: the CPU, where the workers write).
        shutdown_timeout: Seconds ``close()`` gives each worker to close its env before it is
            killed (pycollect's ``shutdown_grace_s``).
        supervision: How the workers are watched and restarted (a
            :class:`pycollect.SupervisionConfig`); ``restart`` defaults to ``"never"`` here, so a
            crash raises :class:`pycollect.WorkerCrashedError` as TorchRL's raises. With
            ``restart="permanent"`` a crashed worker is restarted and its env reports its
            episode ``truncated`` (``done``), so ``step_and_maybe_reset`` resets it.
        **kwargs: TorchRL's other ``ParallelEnv`` arguments (``pin_memory``, ``shared_memory``,
            ``mp_start_method``, ``daemon``, ...; accepted and not needed: workers are never
            daemonic here) and pycollect supervision settings by name (``restart="permanent"``,
            ``max_restarts=3``, ``heartbeat_timeout_s=30``, ...).

    Raises:
        ConfigError: A bad argument, or an env that pycollect cannot lay out (batched, a
            non-tensor or variable-shape key: see :func:`pycollect_torchrl.layout.layout`).
    """

    def __init__(
        self,
        num_workers: int,
        create_env_fn: Callable[..., Any] | Sequence[Callable[..., Any]],
        create_env_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        *,
        device: Any = None,
        shutdown_timeout: float = 10.0,
        supervision: SupervisionConfig | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(num_workers, int) or isinstance(num_workers, bool) or num_workers < 1:
            raise ConfigError(f"num_workers must be an int of 1 or more, got {num_workers!r}")
        factory = _one(create_env_fn, num_workers, "create_env_fn")
        env_kwargs = dict(_one(create_env_kwargs, num_workers, "create_env_kwargs") or {})
        if not callable(factory):
            raise ConfigError(f"create_env_fn must be a factory of one TorchRL env, got {factory!r}")
        settings = {key: kwargs.pop(key) for key in list(kwargs) if key not in _TRANSPORT_ARGUMENTS}
        if kwargs.get("pin_memory"):
            raise ConfigError("pin_memory=True is deprecated in TorchRL's ParallelEnv and not supported here")
        base = supervision if supervision is not None else SupervisionConfig(restart="never")
        settings.setdefault("shutdown_grace_s", float(shutdown_timeout))
        try:
            supervised = _replace(base, settings)
        except TypeError as exc:
            raise TypeError(f"ParallelEnv got an unexpected argument: {exc}") from None
        # One env per worker; no autoreset (TorchRL resets done envs itself, through "_reset"),
        # and no infos: a TorchRL env returns everything in its TensorDict.
        self._vector_config = VectorConfig(
            num_workers,
            num_workers=num_workers,
            autoreset_mode=AutoresetMode.DISABLED,
            info_keys=(),
            supervision=supervised,
        )
        self._arguments = {
            "num_workers": num_workers,
            "create_env_fn": create_env_fn,
            "create_env_kwargs": create_env_kwargs,
            "device": device,
            "shutdown_timeout": shutdown_timeout,
            "supervision": supervision,
            **kwargs,
            **settings,
        }
        self._factory, self._env_kwargs = factory, env_kwargs
        meta = factory(**env_kwargs)  # in this process, for the specs (as TorchRL's ParallelEnv does)
        try:
            if not is_torchrl_env(meta):
                raise ConfigError(f"create_env_fn built a {type(meta).__name__}, not a TorchRL EnvBase")
            self._layout: Layout = layout(meta)
            output_spec, input_spec = meta.output_spec.clone(), meta.input_spec.clone()
            env_device = meta.device
        finally:
            if is_torchrl_env(meta) and not meta.is_closed:
                meta.close()
        # The workers write on the CPU: that is the default device, whatever the meta env says.
        device = device if device is not None else env_device if env_device is not None else "cpu"
        super().__init__(device=device, batch_size=[num_workers])
        specs_device = self.device
        output_spec = output_spec.expand(num_workers, *output_spec.shape)
        input_spec = input_spec.expand(num_workers, *input_spec.shape)
        output_spec, input_spec = output_spec.to(specs_device), input_spec.to(specs_device)
        self.action_spec = input_spec["full_action_spec"]
        self.state_spec = input_spec["full_state_spec"]
        self.observation_spec = output_spec["full_observation_spec"]
        self.reward_spec = output_spec["full_reward_spec"]
        self.done_spec = output_spec["full_done_spec"]
        self.num_workers = num_workers
        self._backend: StepBackend | None = None
        self._counter: StepCounter | None = None  # the trainer's counts, while the workers run
        self._closed = True
        self._leaves: list[tuple[int, tuple[str, ...]]] = []
        self._ended = np.zeros(num_workers, bool)  # done at their last step, not reset since
        self._reward_dtype = self._layout.reward_numpy_dtype

    # -- life cycle ------------------------------------------------------------------------

    @property
    def is_closed(self) -> bool:
        """Whether no worker runs (before the first use, and after :meth:`close`)."""
        return bool(self.__dict__.get("_closed", True))

    @is_closed.setter
    def is_closed(self, value: bool) -> None:
        self.__dict__["_closed"] = bool(value)

    def start(self) -> None:
        """Start the workers (done by the first ``reset``, ``step`` or ``set_seed``)."""
        self._started()

    def _started(self) -> StepBackend:
        """The step backend, started now if it was not."""
        if self._backend is not None:
            return self._backend
        from pycollect.vector import start_backend

        source = EnvSource(TorchRLBackend(), self._factory, self._env_kwargs)
        backend, _ = start_backend(source, self._vector_config, step_backend="workers")
        self._backend = backend
        self._counter = StepCounter(backend.counters(), f"ParallelEnv {source.describe()}", backend.num_envs)
        self._closed = False
        self._ended[:] = False
        # The backend's observation leaves (its SpaceLayout's order) are the layout's fields, found by path
        keys = {spec.path: spec.key for spec in self._layout.observation}
        self._leaves = [(n, keys[tuple(leaf.path)]) for n, leaf in enumerate(backend.observation.leaves)]
        return backend

    def close(self, *, raise_if_closed: bool = True) -> None:
        """Stop the workers (each env's ``close()`` runs); a later use starts them again."""
        backend, self._backend = self._backend, None
        self._closed = True
        if backend is not None:
            if self._counter is not None:
                self._counter.close()  # its last figures stay readable in stats()
            backend.close()

    def __reduce__(self) -> tuple[Any, ...]:
        # Like TorchRL's: what pickles is how to make it (a collector builds it in its own process).
        return (_rebuild, (self._arguments,))

    @property
    def workers(self) -> tuple[Any, ...]:
        """Each worker process's supervision state (pid, generation, restarts, last exit)."""
        return tuple(self._backend.workers()) if self._backend is not None else ()

    def stats(self) -> VectorEnvStats:
        """What the workers did: supervision and metrics (docs/metrics.md; ``None`` before they start)."""
        metrics = self._counter.read() if self._counter is not None else None
        return VectorEnvStats(workers=self.workers, metrics=metrics)

    # -- TorchRL's EnvBase ------------------------------------------------------------------

    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int | None:
        """Seed each worker's env in turn, each with the seed the previous one returned (as TorchRL's).

        Returns:
            The seed the last env returned (the next one to use).
        """
        backend = self._started()
        for i in range(self.num_workers):
            seed = backend.call("set_seed", (seed,), {"static_seed": static_seed}, [i])[0]
        return seed

    def _set_seed(self, seed: int | None) -> None:
        self.set_seed(seed)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        backend = self._started()
        n = self.num_workers
        mask: np.ndarray | None = None
        if tensordict is not None:
            if "_reset" in tensordict.keys():  # noqa: SIM118 - a TensorDict refuses `in` itself
                needs = tensordict.get("_reset")
            else:
                needs = _aggregate_end_of_traj(tensordict, reset_keys=self.reset_keys)
            needs = needs.reshape(n, -1).any(-1) if needs.ndim else needs.expand(n)
            mask = needs.cpu().numpy().astype(bool)
            if mask.all():
                mask = None
        if mask is None or mask.any():
            backend.reset([None] * n, None, mask)
            self._ended[mask if mask is not None else slice(None)] = False
        source = self._observations()
        for key in self.done_keys:
            source[key] = torch.zeros(n, 1, dtype=torch.bool)
        return self._tensordict(source)

    def _checked_actions(self, actions: np.ndarray) -> np.ndarray:
        """``actions`` in the action field's dtype, once their shape and kind fit it (nothing cast across kinds).

        Raises:
            ActionError: Another shape than ``[num_workers, *action_shape]``, or floats for a
                discrete action (0.9 would become 0) or integers for a continuous one.
        """
        spec, n = self._layout.action, self.num_workers
        expected = (n, *spec.shape)
        fits = actions.dtype.kind in "biu" if spec.discrete else actions.dtype.kind == "f"
        if actions.shape != expected or not fits:
            kind = "integer" if spec.discrete else "floating-point"
            raise ActionError(
                f"pycollect.torchrl.ParallelEnv: actions of shape {actions.shape} and dtype {actions.dtype}, but the "
                f"action spec {spec.space} takes {kind} actions of shape {expected} for {n} envs; nothing was sent"
            )
        return actions if actions.dtype == spec.dtype else actions.astype(spec.dtype)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict.get("action")
        backend = self._backend
        if backend is None:
            raise RuntimeError("pycollect.torchrl.ParallelEnv: reset() it before the first step()")
        if self._ended.any():
            # The workers step without autoreset and refuse a done env; say so here, before any worker sees it.
            ended = np.flatnonzero(self._ended).tolist()
            raise RuntimeError(
                f"pycollect.torchrl.ParallelEnv: env(s) {ended} are done and were not reset since; reset them "
                "(reset() with a '_reset' mask, or step_and_maybe_reset(), as TorchRL's collectors and rollout do) "
                "before stepping them again"
            )
        actions = self._checked_actions(action.detach().cpu().numpy())
        backend.step_async([actions])
        backend.step_wait()
        if self._counter is not None:
            self._counter.step()
        source = self._observations()
        n, layout_ = self.num_workers, self._layout
        source[layout_.reward_key] = torch.from_numpy(backend.rewards.astype(self._reward_dtype).reshape(n, 1))
        terminated, truncated = backend.terminated.reshape(n, 1), backend.truncated.reshape(n, 1)
        done = terminated | truncated
        self._ended[:] = done[:, 0]  # in place: EnvBase.__setattr__ costs more than the step's own work
        source["done"] = torch.from_numpy(done)
        if layout_.has_terminated:
            source["terminated"] = torch.from_numpy(terminated.copy())
        if layout_.has_truncated:
            source["truncated"] = torch.from_numpy(truncated.copy())
        return self._tensordict(source)

    def _observations(self) -> dict[str, Any]:
        """The workers' observations, copied out of shared memory: a (nested) dict of ``[num_workers, ...]`` tensors."""
        assert self._backend is not None  # after a reset or step
        arrays = self._backend.observations
        source: dict[str, Any] = {}
        for n, key in self._leaves:
            node = source
            for part in key[:-1]:
                node = node.setdefault(part, {})
            node[key[-1]] = torch.from_numpy(arrays[n].copy())
        return source

    def _tensordict(self, source: dict[str, Any]) -> TensorDictBase:
        """``source`` as a TensorDict of the batch size, without the checks of ``TensorDict(...)``.

        Every leaf was made here with the spec's shape and dtype (TorchRL's ``GymEnv`` builds its
        outputs the same way).
        """
        out = TensorDict._new_unsafe(source, batch_size=self.batch_size)  # nested dicts become nested TensorDicts
        return out.to(self.device) if self.device.type != "cpu" else out

    def __repr__(self) -> str:
        state = "closed" if self.is_closed else "running"
        return f"pycollect.torchrl.ParallelEnv(num_workers={self.num_workers}, {self._factory!r}, {state})"


def _replace(config: SupervisionConfig, settings: Mapping[str, Any]) -> SupervisionConfig:
    import dataclasses

    return dataclasses.replace(config, **settings)


def _rebuild(arguments: Mapping[str, Any]) -> ParallelEnv:
    arguments = dict(arguments)
    return ParallelEnv(arguments.pop("num_workers"), arguments.pop("create_env_fn"), **arguments)
