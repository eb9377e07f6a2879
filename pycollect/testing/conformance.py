"""Conformance checkers: drive a plugin through the contract of its extension point.

Each checker takes the plugin's class (or an instance, or a registered name), checks what can
be checked in this process, and then runs a real collection with worker processes through the
public :class:`~pycollect.Collector`, so a plugin that passes works the way users will use it.
A broken contract raises :class:`~pycollect.ConformanceError` (an ``AssertionError``) that says
what was expected and what happened. Plugin authors call them from their own tests::

    from pycollect.testing import check_env_backend

    def test_my_backend_conforms():
        check_env_backend(MyBackend, "level-1")

A class that is not registered yet is registered for the duration of the check (and
unregistered afterwards), so the check also works before the package is installed.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import time
import types
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import cloudpickle
import numpy as np
import torch
from tensordict import TensorDictBase

from pycollect import plugins
from pycollect.collector import Collector
from pycollect.config import MAX_WEIGHT_BUFFERS, WEIGHT_BUFFERS, SupervisionConfig
from pycollect.devices import placement as _placement
from pycollect.devices.placement import DevicePolicy, Placement
from pycollect.engines.base import EngineFactory
from pycollect.envs.backend import EnvBackend
from pycollect.envs.source import EnvSource
from pycollect.envs.specs import EnvSpecs, read_leaf
from pycollect.exceptions import ConformanceError, PyCollectWarning, UnknownEnvError, WeightsMismatchError
from pycollect.hookspecs import hookimpl
from pycollect.testing import leaks
from pycollect.testing.envs import CountingEnv, RaisingEnv
from pycollect.weights.layout import WeightsLayout
from pycollect.weights.scheme import WeightSyncScheme

__all__ = ["check_device_policy", "check_engine", "check_env_backend", "check_scheme"]

_STEPS = 8  # steps per env and rollout in the collections the checkers run


def _values(tensor: torch.Tensor) -> list[Any]:
    """The distinct values of a tensor, for messages."""
    values: list[Any] = torch.unique(tensor).tolist()
    return values


def _fail(message: str) -> ConformanceError:
    return ConformanceError(message)


def _expect(condition: Any, message: str) -> None:
    if not condition:
        raise _fail(message)


def _name_of(cls: type) -> str:
    name = getattr(cls, "name", None)
    _expect(isinstance(name, str) and name, f"{cls.__qualname__}.name must be a non-empty string, got {name!r}")
    return str(name)


@contextlib.contextmanager
def _registered(kind: plugins.Kind, cls: type) -> Iterator[str]:
    """Make ``cls`` selectable by its name while the block runs (registering it if need be)."""
    name = _name_of(cls)
    known = {registration.name: registration.cls for registration in plugins.registrations(kind)}
    if known.get(name) is cls:
        yield name
        return
    _expect(
        name not in known,
        f"{cls.__qualname__}.name is {name!r}, which {known.get(name)!r} already has; pick another name",
    )

    def contribute() -> type:
        return cls

    plugin = types.SimpleNamespace(**{plugins.hook_name(kind): hookimpl(contribute)})
    registered = plugins.register(plugin, name=f"pycollect.testing:{name}")
    try:
        yield name
    finally:
        plugins.unregister(registered)


def _resolve(kind: plugins.Kind, interface: type, value: Any) -> type:
    if isinstance(value, str):
        lookup = {
            "env_backend": plugins.env_backend,
            "scheme": plugins.scheme,
            "device_policy": plugins.device_policy,
            "engine": plugins.engine,
        }
        return lookup[kind](value)
    if isinstance(value, interface):
        return type(value)
    _expect(
        isinstance(value, type) and issubclass(value, interface),
        f"expected a {interface.__qualname__} subclass, an instance or a registered name, got {value!r}",
    )
    return value  # type: ignore[no-any-return]


def _roundtrip(obj: Any, what: str) -> Any:
    try:
        return cloudpickle.loads(cloudpickle.dumps(obj))
    except Exception as exc:
        raise _fail(f"{what} must be picklable (it travels to worker processes): {type(exc).__name__}: {exc}") from exc


# -- env backends --------------------------------------------------------------------------------


def _check_fits(specs: EnvSpecs, raw: Any, where: str) -> None:
    for spec, (_, path) in zip(specs.observation, specs.observation_paths(), strict=True):
        try:
            value = np.asarray(read_leaf(raw, path) if path else raw)
        except (KeyError, TypeError) as exc:
            raise _fail(f"{where}: the observation has no {'/'.join(spec.key)!r} ({exc})") from exc
        _expect(
            value.shape == spec.shape,
            f"{where}: observation {'/'.join(spec.key)!r} has shape {value.shape}, the spec says {spec.shape}",
        )
        _expect(
            np.can_cast(value.dtype, spec.dtype, "same_kind"),
            f"{where}: observation {'/'.join(spec.key)!r} has dtype {value.dtype}, the spec says {spec.dtype}",
        )


def _check_step(result: Any, specs: EnvSpecs, where: str) -> tuple[Any, bool]:
    _expect(
        isinstance(result, tuple) and len(result) == 5,
        f"{where}: step() must return (observation, reward, terminated, truncated, info), got {result!r}",
    )
    obs, reward, terminated, truncated, info = result
    _check_fits(specs, obs, where)
    _expect(
        isinstance(reward, int | float | np.number) and not isinstance(reward, bool) and math.isfinite(float(reward)),
        f"{where}: the reward must be a finite real number, got {reward!r}",
    )
    for flag, value in (("terminated", terminated), ("truncated", truncated)):
        _expect(isinstance(value, bool | np.bool_), f"{where}: {flag} must be a bool, got {value!r}")
    _expect(isinstance(info, Mapping), f"{where}: info must be a mapping, got {type(info).__name__}")
    return obs, bool(terminated or truncated)


def _check_batch(batch: TensorDictBase, specs: EnvSpecs, rows: int, where: str) -> None:
    _expect(
        batch.batch_size == torch.Size([rows, _STEPS]),
        f"{where}: batch size {batch.batch_size}, expected {[rows, _STEPS]}",
    )
    for spec in specs.observation:
        for key in (spec.key, ("next", *spec.key)):
            value = batch.get(key)
            _expect(
                tuple(value.shape[2:]) == spec.shape,
                f"{where}: {'/'.join(key)!r} has per-step shape {tuple(value.shape[2:])}, the spec says {spec.shape}",
            )
    obs_key = specs.observation[0].key
    obs, next_obs = batch.get(obs_key), batch.get(("next", *obs_key))
    done = batch.get(("next", "done"))[..., 0]
    same = ~done[:, :-1]
    _expect(
        torch.equal(next_obs[:, :-1][same], obs[:, 1:][same]),
        f"{where}: within an episode the next observation of a step must be the observation of the step after",
    )
    ids = batch.get(("collector", "traj_ids"))
    _expect(torch.equal(ids[:, 1:][same], ids[:, :-1][same]), f"{where}: a trajectory id changed within an episode")


def check_env_backend(
    backend: type[EnvBackend] | EnvBackend | str,
    target: Any,
    env_kwargs: Mapping[str, Any] | None = None,
    *,
    num_workers: int = 2,
    envs_per_worker: int = 2,
    seed: int = 0,
    deterministic: bool = True,
    unknown_target: Any = None,
) -> None:
    """Check an env backend against its contract, in this process and in worker processes.

    In this process: the backend builds with no arguments and pickles; ``check`` accepts
    ``target`` (and refuses ``unknown_target`` with :class:`~pycollect.UnknownEnvError`, if
    given); ``make`` builds gymnasium-style envs whose observations fit ``specs`` on reset and
    on every step of random actions; ``step`` returns the five gymnasium values; with
    ``deterministic``, two envs reset with one seed and given the same actions agree. With
    workers: a collection through ``"<name>:<target>"`` gives well-formed batches; with
    ``deterministic``, one worker reproduces the in-process collector exactly.

    Args:
        backend: The backend class, an instance, or its registered name.
        target: What users write after ``"<name>:"``.
        env_kwargs: Keyword arguments for the environments.
        num_workers: Workers of the multi-process collection.
        envs_per_worker: Environments per worker.
        seed: The seed of every collection.
        deterministic: Whether the env is a function of its seed and actions.
        unknown_target: A target the backend must refuse, if there is one.

    Raises:
        ConformanceError: What broke the contract.
    """
    cls = _resolve("env_backend", EnvBackend, backend)
    kwargs = dict(env_kwargs or {})
    try:
        instance = cls()
    except Exception as exc:
        raise _fail(f"{cls.__qualname__}() must build with no arguments: {type(exc).__name__}: {exc}") from exc
    _roundtrip(instance, f"env backend {cls.__qualname__}")
    instance.check(target, kwargs)
    if unknown_target is not None:
        try:
            instance.check(unknown_target, kwargs)
        except UnknownEnvError:
            pass
        else:
            raise _fail(f"{cls.__qualname__}.check({unknown_target!r}) must raise UnknownEnvError")
    source = EnvSource(instance, target, kwargs)
    envs = [source.make() for _ in range(2)]
    try:
        specs = source.specs(envs[0])
        _expect(isinstance(specs, EnvSpecs), f"{cls.__qualname__}.specs() must return EnvSpecs, got {specs!r}")
        _check_envs(envs, specs, seed, deterministic)
    finally:
        for env in envs:
            env.close()
    with _registered("env_backend", cls) as name:
        spec = f"{name}:{target}" if isinstance(target, str) else None
        if spec is None:
            return  # a non-string target cannot be named in an env spec; nothing more to run
        rows = num_workers * envs_per_worker
        common: dict[str, Any] = {"envs_per_worker": envs_per_worker, "seed": seed, "env_kwargs": kwargs}
        with Collector(spec, frames_per_batch=rows * _STEPS, num_workers=num_workers, **common) as collector:
            for index in range(2):
                _check_batch(collector.next_batch(), specs, rows, f"batch {index} from {num_workers} workers")
        if deterministic:
            frames = envs_per_worker * _STEPS
            with (
                Collector(spec, frames_per_batch=frames, **common) as here,
                Collector(spec, frames_per_batch=frames, num_workers=1, **common) as there,
            ):
                for index in range(2):
                    a, b = here.next_batch(), there.next_batch()
                    _expect(
                        (a == b).all(),
                        f"batch {index}: one worker must reproduce the in-process collector with the same seed",
                    )


def _check_envs(envs: Sequence[Any], specs: EnvSpecs, seed: int, deterministic: bool) -> None:
    first = [env.reset(seed=seed) for env in envs]
    for index, result in enumerate(first):
        _expect(
            isinstance(result, tuple) and len(result) == 2,
            f"reset() must return (observation, info), got {result!r}",
        )
        _check_fits(specs, result[0], f"env {index} after reset(seed={seed})")
    rng = np.random.default_rng(seed)
    observations = [result[0] for result in first]
    for step in range(4 * _STEPS):
        action = specs.sample_action(rng)
        for index, env in enumerate(envs):
            observations[index], done = _check_step(env.step(action), specs, f"env {index}, step {step}")
            if done:
                observations[index] = env.reset()[0]
        if deterministic:
            _expect(
                _same(observations[0], observations[1]),
                f"step {step}: two envs reset with seed {seed} and given the same actions disagree "
                "(pass deterministic=False if the env is not a function of its seed and actions)",
            )


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, Mapping):
        return isinstance(b, Mapping) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(np.array_equal(np.asarray(a), np.asarray(b)))


# -- weight-sync schemes -------------------------------------------------------------------------


class _VersionedPolicy(torch.nn.Module):
    """Acts ``value`` and echoes the buffer ``echo``: a frame shows which weights made it."""

    def __init__(self) -> None:
        super().__init__()
        self.value = torch.nn.Parameter(torch.zeros(()))
        self.echo: torch.Tensor
        self.register_buffer("echo", torch.zeros(()))

    def forward(self, observation: torch.Tensor) -> dict[str, torch.Tensor]:
        n = observation.shape[0]
        return {"action": self.value.detach().long().expand(n).clone(), "check_echo": self.echo.expand(n).clone()}

    def set(self, version: int) -> None:
        with torch.no_grad():
            self.value.fill_(version)
            self.echo.fill_(version)


def _check_versions(batch: TensorDictBase, newest: int, where: str) -> torch.Tensor:
    version = batch.get("policy_version")
    action, echo = batch.get("action"), batch.get("check_echo")
    _expect(
        torch.equal(action, version),
        f"{where}: a frame stamped with policy version v must be collected with the weights of version v "
        f"(versions {_values(version)}, actions {_values(action)})",
    )
    _expect(
        torch.equal(echo.long(), version),
        f"{where}: module buffers must travel with the parameters, in the same version (echo "
        f"{_values(echo)} for versions {_values(version)})",
    )
    _expect(
        bool((version == version[:, :1]).all()),
        f"{where}: weights must change between rollouts only, never within one",
    )
    _expect(bool((version <= newest).all()), f"{where}: a frame claims a version newer than any sent")
    first: torch.Tensor = version[:, 0]
    return first


def check_scheme(
    scheme: type[WeightSyncScheme] | WeightSyncScheme | str,
    *,
    num_workers: int = 2,
    updates: int = 3,
    syncs: bool = True,
    check_restart: bool = True,
) -> None:
    """Check a weight-sync scheme against its contract, with real worker processes.

    In this process: ``store_bytes`` is a non-negative int, ``store_buffers`` an int from 3 to
    255, and the workers' half pickles.
    With workers (a policy whose action is its parameter and whose extra output is one of its
    buffers): every frame stamped with version ``v`` was collected with version ``v``'s
    parameters *and* buffers; weights change between rollouts only; after each of ``updates``
    updates every worker acts with the new version within a few batches (or, with
    ``syncs=False``, never changes); and a worker killed and restarted starts from the latest
    version.

    Args:
        scheme: The scheme class, an instance (used as given), or its registered name.
        num_workers: Workers of the collection.
        updates: How many versions to send.
        syncs: Whether the scheme delivers new weights at all (``False`` for ``no_sync``).
        check_restart: Also kill a worker and check its restart starts from the latest version.

    Raises:
        ConformanceError: What broke the contract.
    """
    cls = _resolve("scheme", WeightSyncScheme, scheme)
    instance = scheme if isinstance(scheme, WeightSyncScheme) else cls()
    policy = _VersionedPolicy()
    layout = WeightsLayout.from_module(policy)
    store = instance.store_bytes(layout)
    _expect(
        isinstance(store, int) and not isinstance(store, bool) and store >= 0,
        f"{cls.__qualname__}.store_bytes() must return a non-negative int, got {store!r}",
    )
    buffers = instance.store_buffers(num_workers)
    _expect(
        isinstance(buffers, int) and not isinstance(buffers, bool) and WEIGHT_BUFFERS <= buffers <= MAX_WEIGHT_BUFFERS,
        f"{cls.__qualname__}.store_buffers({num_workers}) must return an int from {WEIGHT_BUFFERS} to "
        f"{MAX_WEIGHT_BUFFERS}, got {buffers!r}",
    )
    k = 2
    rows, patience = num_workers * k, 6  # a worker runs at most one rollout ahead: 2 batches suffice
    with (
        warnings.catch_warnings(),
        Collector(
            CountingEnv,
            policy,
            frames_per_batch=rows * _STEPS,
            envs_per_worker=k,
            num_workers=num_workers,
            env_kwargs={"length": 10**9, "n_actions": updates + 1},
            weight_sync=instance,
            seed=0,
        ) as collector,
    ):
        warnings.simplefilter("ignore", PyCollectWarning)  # no_sync warns that updates do not reach workers
        _run_updates(collector, policy, updates, syncs, patience)
        if check_restart and syncs:
            _check_restart(collector, k, num_workers, updates, patience)


def _run_updates(collector: Collector, policy: Any, updates: int, syncs: bool, patience: int) -> None:
    """Publish ``updates`` versions, each checked in the batches after it.

    The workers engine compares the digest of the weights each worker applied with that of
    the weights published (``WeightsMismatchError``): a scheme that changes or drops any byte
    (a buffer it does not carry) fails there, named.
    """
    try:
        _check_updates(collector, policy, updates, syncs, patience)
    except WeightsMismatchError as exc:
        raise _fail(
            f"worker {exc.worker} applied, as version {exc.version}, weights whose bytes differ from those "
            f"published: every parameter and module buffer must travel, unchanged ({exc})"
        ) from exc


def _check_updates(collector: Collector, policy: Any, updates: int, syncs: bool, patience: int) -> None:
    first = _check_versions(collector.next_batch(), 0, "the first batch")
    _expect(bool((first == 0).all()), "workers must start with the weights the policy had at start (version 0)")
    for version in range(1, updates + 1):
        policy.set(version)
        collector.update_policy_weights_()
        expected = version if syncs else 0
        for attempt in range(patience):
            latest = _check_versions(collector.next_batch(), version, f"update {version}, batch {attempt}")
            if bool((latest == expected).all()):
                break
        else:
            raise _fail(
                f"after update {version}, workers still collect with versions {_values(latest)} "
                f"{patience} batches later (expected {expected})"
            )


def _check_restart(collector: Collector, k: int, num_workers: int, newest: int, patience: int) -> None:
    victim = collector.stats().workers[0].pid
    _expect(victim is not None, "worker 0 has no pid: it is not running")
    os.kill(int(victim or 0), signal.SIGKILL)
    restarted = num_workers << 32  # trajectory ids of worker 0's second generation start here
    for attempt in range(patience * 4):
        batch = collector.next_batch()
        versions = _check_versions(batch, newest, f"after a restart, batch {attempt}")
        ids = batch.get(("collector", "traj_ids"))[:k, 0]
        if bool((ids >= restarted).all()):
            _expect(
                bool((versions[:k] == newest).all()),
                f"a restarted worker must start from the latest version ({newest}), it collects with "
                f"{_values(versions[:k])}",
            )
            return
    raise _fail("the killed worker was not restarted within the batches waited for")


# -- device policies -----------------------------------------------------------------------------


class _PlacementProbe(torch.nn.Module):
    """Reports, per frame, whether CUDA is hidden and where its parameters are."""

    def __init__(self) -> None:
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(()))

    def forward(self, observation: torch.Tensor) -> dict[str, torch.Tensor]:
        n, device = observation.shape[0], self.anchor.device
        hidden = os.environ.get("CUDA_VISIBLE_DEVICES") == ""
        index = -1 if device.type == "cpu" else (device.index or 0)
        return {
            "action": torch.zeros(n, dtype=torch.long, device=device),
            "check_cuda_hidden": torch.full((n,), hidden, device=device),
            "check_device_index": torch.full((n,), index, device=device),
        }


def check_device_policy(
    policy: type[DevicePolicy] | DevicePolicy | str,
    *,
    num_workers: int = 2,
    devices: Sequence[str] | None = None,
) -> None:
    """Check a device placement policy against its contract, then run workers where it says.

    For each worker of ``num_workers``, ``place()`` must return a :class:`~pycollect.Placement`
    whose devices are among ``devices``, that allows CUDA wherever it names a CUDA device, and
    that is the same when asked twice. Then (on this machine's devices) a collection runs with
    the policy, and every worker must report that its policy ran on ``policy_device`` and that
    CUDA was hidden exactly when the placement says so.

    Args:
        policy: The policy class, an instance (used as given), or its registered name.
        num_workers: Workers to place (and run).
        devices: The devices to place on (default: this machine's). With devices this
            machine does not have, only the placements are checked.

    Raises:
        ConformanceError: What broke the contract.
    """
    cls = _resolve("device_policy", DevicePolicy, policy)
    instance = policy if isinstance(policy, DevicePolicy) else cls()
    here = _placement.available_devices()
    offered = list(devices) if devices is not None else here
    placements = []
    for worker in range(num_workers):
        placement = instance.place(worker, num_workers, list(offered))
        _expect(
            isinstance(placement, Placement),
            f"{cls.__qualname__}.place({worker}, ...) must return a Placement, got {placement!r}",
        )
        for device in placement.devices():
            _expect(device in offered, f"worker {worker}: device {device!r} is not among the devices offered {offered}")
            _expect(
                placement.cuda or not device.startswith("cuda"),
                f"worker {worker}: {device!r} is a CUDA device but the placement hides CUDA (cuda=False)",
            )
        _expect(
            instance.place(worker, num_workers, list(offered)) == placement,
            f"worker {worker}: place() must give the same placement when asked twice",
        )
        placements.append(placement)
    if any(device not in here for placement in placements for device in placement.devices()):
        return  # placed on devices this machine lacks: nothing more can run here
    k = 2
    with Collector(
        CountingEnv,
        _PlacementProbe(),
        frames_per_batch=num_workers * k * _STEPS,
        envs_per_worker=k,
        num_workers=num_workers,
        device_policy=instance,
        seed=0,
    ) as collector:
        batch = collector.next_batch()
    for worker, placement in enumerate(placements):
        rows = slice(worker * k, (worker + 1) * k)
        hidden = batch.get("check_cuda_hidden")[rows]
        index = batch.get("check_device_index")[rows]
        want = -1 if placement.policy_device == "cpu" else int(placement.policy_device.partition(":")[2] or 0)
        _expect(
            bool((hidden == (not placement.cuda)).all()),
            f"worker {worker}: CUDA must be {'hidden' if not placement.cuda else 'visible'} as its placement says",
        )
        _expect(
            bool((index == want).all()),
            f"worker {worker}: its policy must run on {placement.policy_device}, it ran on device index "
            f"{_values(index)}",
        )


# -- engines -------------------------------------------------------------------------------------


def _layout(batch: TensorDictBase) -> dict[Any, tuple[tuple[int, ...], torch.dtype]]:
    """Every key of a batch with its per-step shape and dtype."""
    return {key: (tuple(value.shape[2:]), value.dtype) for key, value in batch.items(True, True)}


def _check_engine_batch(batch: TensorDictBase, reference: TensorDictBase, rows: int, where: str) -> None:
    """The batch format: its size, and the keys, per-step shapes, dtypes and names of the in-process engine's."""
    _expect(
        batch.batch_size == torch.Size([rows, _STEPS]),
        f"{where}: batch size {batch.batch_size}, expected [replicas * num_workers * envs_per_worker, T] = "
        f"{[rows, _STEPS]}",
    )
    _expect(
        _layout(batch) == _layout(reference),
        f"{where}: the batch's keys, per-step shapes and dtypes {_layout(batch)} are not the in-process "
        f"engine's {_layout(reference)}",
    )
    _expect(batch.names == reference.names, f"{where}: dimension names {batch.names}, not {reference.names}")


def _check_order(batch: TensorDictBase, previous: TensorDictBase | None, where: str) -> None:
    """A :class:`CountingEnv` batch (observation ``[base, step]``): each row steps one env in time order.

    Within a row, every step counts one on from its observation and the next step starts where
    it ended (or at a reset); from one batch to the next, each row goes on with the same env.
    """
    obs, next_obs = batch.get("observation"), batch.get(("next", "observation"))
    _expect(
        torch.equal(next_obs[..., 1], obs[..., 1] + 1),
        f"{where}: a row's steps are not one env's steps in time order (each step counts one on from its observation)",
    )
    done = batch.get(("next", "done"))[..., 0]
    ids = batch.get(("collector", "traj_ids"))
    starts, ended = obs[:, 1:], done[:, :-1]
    _expect(
        bool((starts[..., 1][ended] == 0).all()),
        f"{where}: after an episode ends, its row must go on with a reset (step 0)",
    )
    if previous is not None:
        last_done = previous.get(("next", "done"))[:, -1, 0]
        going_on = ~last_done
        _expect(
            torch.equal(obs[:, 0][going_on], previous.get(("next", "observation"))[:, -1][going_on]),
            f"{where}: each row must go on with the env it stepped in the batch before, where it stopped",
        )
        _expect(
            torch.equal(ids[:, 0][going_on], previous.get(("collector", "traj_ids"))[:, -1][going_on]),
            f"{where}: a trajectory that goes on into the next batch must keep its id",
        )
        _expect(
            bool((obs[:, 0, 1][last_done] == 0).all()),
            f"{where}: a row whose episode ended with the batch before must start with a reset (step 0)",
        )


def _described(error: BaseException) -> str:
    """An exception and its causes, as a user reads them."""
    parts: list[str] = []
    seen: BaseException | None = error
    while seen is not None and len(parts) < 5:
        parts.append(f"{type(seen).__name__}: {seen}")
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
    return "\n".join(parts)


def _check_closed(
    before: leaks.Snapshot,
    engine_processes: set[int],
    foreign: Callable[[int], bool] | None,
    timeout_s: float,
    where: str,
) -> None:
    """After a collector closed: no process it started is left, and no named segment of one."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = {pid for pid in leaks.child_processes() - before.processes if foreign is None or not foreign(pid)}
        segments = set().union(*(leaks.shm_segments(pid) for pid in {os.getpid(), *engine_processes}))
        found = leaks.Leftovers(frozenset(left), frozenset(segments - before.segments))
        if not found or time.monotonic() > deadline:
            break
        time.sleep(0.1)  # polling for processes that are still exiting, under the deadline
    described = found.describe()  # before any kill: the command line of a killed process is gone
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # one leaking check must not break the tests after it
    _expect(not found, f"{where}: closing the collector left behind (after {timeout_s:g} s):\n{described}")


def check_engine(
    engine: type[EngineFactory] | EngineFactory | str,
    *,
    num_workers: int = 2,
    envs_per_worker: int = 2,
    updates: int = 2,
    foreign: Callable[[int], bool] | None = None,
    close_timeout_s: float = 30.0,
) -> None:
    """Check an engine against its contract, through the public :class:`~pycollect.Collector`.

    With the engine, on :class:`~pycollect.testing.envs.CountingEnv` (observations that count
    the steps) and a policy whose action is its weight:

    * **order**: each row of a sync batch is one env's steps in time order, and goes on in the
      next batch where it stopped, with the same trajectory id;
    * **batch format**: batches are ``[replicas * num_workers * envs_per_worker, T]``, with the
      keys, per-step shapes, dtypes and dimension names of the in-process engine's;
    * **weights stamps**: every frame stamped with ``policy_version`` ``v`` was collected with
      version ``v``'s parameters *and* buffers, and after each of ``updates`` updates every row
      acts with the new version within a few batches;
    * **close leaves nothing**: once the collector is closed, no process the engine started
      (worker, actor: a descendant of this process) is left, nor a named shared-memory segment
      of this process or of one of them;
    * **a crash named**: with :class:`~pycollect.testing.envs.RaisingEnv` and
      ``restart="never"``, ``next_batch`` raises an error that names the worker's exception
      (``ZeroDivisionError: boom at step 3``), and closing leaves nothing either.

    Args:
        engine: The engine factory class (built with no arguments), an instance (used as
            given), or its registered name.
        num_workers: ``num_workers`` of the collections (``0`` for an engine without workers,
            such as ``inprocess``).
        envs_per_worker: Environments per worker.
        updates: How many weight versions to send.
        foreign: Tells a process that is not the engine's (``True``) from one that is: a
            process that appears while the check runs and is still there after close is a
            leftover unless this says so (a Ray cluster starts idle worker processes of its own).
        close_timeout_s: How long the engine's processes get to exit after close.

    Raises:
        ConformanceError: What broke the contract.
    """
    cls = _resolve("engine", EngineFactory, engine)
    instance = engine if isinstance(engine, EngineFactory) else cls()
    name = instance.describe()
    rows = instance.replicas * max(num_workers, 1) * envs_per_worker
    env_kwargs = {"length": 7, "n_actions": updates + 1}
    common: dict[str, Any] = {"envs_per_worker": envs_per_worker, "seed": 0, "env_kwargs": env_kwargs}
    with Collector(CountingEnv, _VersionedPolicy(), frames_per_batch=envs_per_worker * _STEPS, **common) as here:
        reference = here.next_batch()
    before = leaks.snapshot()
    engine_processes: set[int] = set()
    policy = _VersionedPolicy()
    patience = 6  # a worker runs at most one rollout ahead: 2 batches suffice
    with Collector(
        CountingEnv, policy, frames_per_batch=rows * _STEPS, num_workers=num_workers, engine=instance, **common
    ) as collector:
        engine_processes |= leaks.child_processes() - before.processes
        previous: TensorDictBase | None = None
        for version in range(updates + 1):
            if version:
                policy.set(version)
                collector.update_policy_weights_()
            for attempt in range(patience):
                batch = collector.next_batch()
                engine_processes |= leaks.child_processes() - before.processes
                where = f"{name}, version {version}, batch {attempt}"
                _check_engine_batch(batch, reference, rows, where)
                _check_order(batch, previous, where)
                latest = _check_versions(batch, version, where)
                previous = batch.clone()
                if bool((latest == version).all()):
                    break
            else:
                raise _fail(
                    f"{name}: after update {version}, rows still collect with versions {_values(latest)} "
                    f"{patience} batches later"
                )
    _check_closed(before, engine_processes, foreign, close_timeout_s, name)

    crashing: dict[str, Any] = {**common, "env_kwargs": {"fail_at": 3}}
    before = leaks.snapshot()
    raised: BaseException | None = None
    with Collector(
        RaisingEnv,
        frames_per_batch=rows * _STEPS,
        num_workers=num_workers,
        engine=instance,
        supervision=SupervisionConfig(restart="never"),
        **crashing,
    ) as collector:
        engine_processes |= leaks.child_processes() - before.processes
        for _ in range(4):
            try:
                collector.next_batch()
            except Exception as exc:  # what the engine raises for the worker's ZeroDivisionError
                raised = exc
                break
            engine_processes |= leaks.child_processes() - before.processes
    _expect(raised is not None, f"{name}: an env that raises on its third step must fail the collection")
    text = _described(raised) if raised is not None else ""
    _expect(
        "ZeroDivisionError" in text and "boom at step 3" in text,
        f"{name}: the error raised for a worker whose env raised ZeroDivisionError('boom at step 3') must name "
        f"it, got:\n{text[:2000]}",
    )
    _check_closed(before, engine_processes, foreign, close_timeout_s, f"{name}, after a crash")
