"""The trainer's side of a collector's worker processes: weights, and batches out of the rings.

A :class:`WorkerPool` composes one :class:`~pycollect._workers.processes.WorkerProcesses` (the segment, the spec,
the supervisor) and owns the trainer's half of the weight-sync scheme. Each of its
``num_workers`` worker processes (``python -m pycollect.worker``) fills rollout slots in its
own ring; the pool turns committed slots into ``TensorDict`` batches:

* sync: one rollout of every worker per batch, ordered by worker, ``[W*K, T]``. Every worker
  commits exactly one slot per batch, so batch ``b`` sits in slot ``b % slots`` of every
  ring and, in the segment, forms one contiguous block per field.
* async: the next finished rollout of any worker, ``[K, T]``; workers keep collecting while
  the trainer trains.

Batches are copied out (owned by the caller) unless ``zero_copy`` is set, in which case they
are views of the slots, valid until the next batch. On a CUDA storing device (``storing_device=``,
else the placement's: of worker 0 for a sync batch, of the delivering worker in async mode) an
owned batch is assembled in pinned host memory and copied to the device without blocking
(:mod:`pycollect._batch.device`); a zero-copy batch is copied there straight from the slots.
"""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import cloudpickle
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from tensordict import TensorDict

from pycollect._batch.device import DeviceCopier, staging_memory
from pycollect._batch.tensordict import allocate, to_tensordict
from pycollect._engines.resources import BATCHES_HELD, batch_bytes, check_fits, check_fits_before_env
from pycollect._keys import NEXT_DONE, NEXT_OBS_PREFIX, Key
from pycollect._native import _core
from pycollect._rollout.observations import fill_observations, observation_pairs
from pycollect._workers import forkserver
from pycollect._workers.env_requests import WorkerRequests
from pycollect._workers.processes import WorkerProcesses
from pycollect._workers.snapshots import RESUMED, read_snapshot, snapshot_capacity
from pycollect._workers.spec import RolloutLoop, WorkerSpec, field_name
from pycollect._workers.step_protocol import MAILBOX_BYTES
from pycollect._workers.supervision import SupervisionLog
from pycollect.config import MAX_WEIGHT_BUFFERS, SLOTS_PER_WORKER, WEIGHT_BUFFERS, CollectorConfig
from pycollect.devices import placement as _placement
from pycollect.devices.placement import DevicePolicy, Placement
from pycollect.engines import Engine, EnvCalls, RolloutPlan, Supervision, close_within, pack_policy, plan_rollout
from pycollect.envs.batched import check_probe
from pycollect.envs.pool import check_pool
from pycollect.envs.source import EnvSource
from pycollect.exceptions import (
    CollectorClosedError,
    ConfigError,
    EnvStateError,
    PolicyError,
    PyCollectError,
    PyCollectWarning,
    TransportError,
    WeightsMismatchError,
)
from pycollect.weights.digest import weights_digest
from pycollect.weights.layout import WeightsLayout, module_weights
from pycollect.weights.scheme import SenderContext, WeightSender, WeightSyncScheme

__all__ = ["WorkerPool", "place_workers", "storing_devices"]

_POLL_S = 0.1  # how often a waiting trainer looks at supervisor events
_DIGESTS_KEPT = 1024  # published versions whose digest is kept (a worker is never that far behind)


@dataclass(frozen=True)
class _Weights:
    """How the policy's weights travel: its layout and the scheme chosen for it."""

    layout: WeightsLayout
    scheme: WeightSyncScheme
    initial_digest: int  # of the weights pickled into the workers: version 0


class WorkerPool(Engine):
    """Worker processes that fill the rings of one segment, and the batches they make.

    Build it with :meth:`start`, which checks everything before any process exists.

    Args:
        config: The collector's settings.
        spec: What every worker builds (``layout_hash`` is filled in here).
        plan: What every rollout holds.
        placements: Where each worker runs.
        weights: The policy's weights layout and scheme (``None``: nothing to publish).
        segment_layout: The arguments of ``Segment.create`` (fields, sizes), checked to fit.
    """

    def __init__(
        self,
        config: CollectorConfig,
        spec: WorkerSpec[RolloutLoop],
        plan: RolloutPlan,
        placements: Sequence[Placement],
        weights: _Weights | None,
        segment_layout: dict[str, Any],
    ) -> None:
        self._started_with = (config, spec, plan, placements, weights, segment_layout)  # for load_state
        self.plan = plan
        self.config = config
        self.num_workers = config.num_workers
        self.sync = config.sync
        self.zero_copy = config.zero_copy
        self._storing = storing_devices(config, placements)
        self._fields = plan.fields
        # Pinned host memory when any batch is bound for a GPU (pinned memory serves every device).
        self._memory = staging_memory(next((d for d in self._storing if d.type == "cuda"), torch.device("cpu")))
        self._copier = DeviceCopier()
        self._names = {field.key: field_name(field.key) for field in self._fields}
        self._observations = observation_pairs(spec.key for spec in plan.specs.observation)
        self._observation_keys = {key for key, _ in self._observations}
        self._held: list[Any] = []  # leases of the last zero-copy batch
        self._next_worker = 0  # async round-robin start
        self._closed = False
        self._layout = weights.layout if weights is not None else None
        self._scheme_name = weights.scheme.name if weights is not None else ""
        self._sender: WeightSender | None = None
        self.consumers: list[Any] = []
        self._channels: list[Any] = []
        # The digest of the weights of each version published (pycollect.weights.digest), which
        # every batch checks the workers' against; the oldest go once there are many.
        self._digests: dict[int, int] = {0: weights.initial_digest} if weights is not None else {}
        # With snapshots: each worker's state after the last of its rollouts delivered (pickled),
        # what a checkpoint saves (see .snapshots); a worker's initial state until then.
        self._after: list[tuple[bytes, int] | None] = list(spec.loop.initial_states or (None,) * config.num_workers)

        self._processes = WorkerProcesses(segment_layout, config.supervision)
        self.segment = self._processes.segment
        try:
            receiver = None
            if weights is not None:
                context = SenderContext(weights.layout, config.num_workers, self.segment)
                self._sender = weights.scheme.sender(context)
                receiver = self._sender.receiver()
                _picklable(receiver, f"the worker half of weight-sync scheme {weights.scheme.name!r}")
            self.consumers = [self.segment.consumer(w) for w in range(self.num_workers)]
            self._channels = [self.segment.step_channel(w) for w in range(self.num_workers)]
            # Env commands (Collector.env_call and its kin), which a worker serves between two
            # rollouts; a worker waiting for a free slot is woken to serve one.
            self._env_requests = WorkerRequests(
                self._live_channels,
                config.envs_per_worker,
                generation=lambda w: self.segment.worker_control(w).generation,
                restarted=lambda w, generation: None,  # the request goes again, to the new generation
                wait_checks=self._env_wait_checks,
                posted=lambda w: self.consumers[w].wake_producer(),
            )
            self._processes.start(
                replace(spec, loop=replace(spec.loop, weights=receiver)),
                hide_cuda=not any(placement.cuda for placement in placements),
            )
        except BaseException:
            self.close()
            raise

    @property
    def supervisor(self) -> _core.Supervisor | None:
        """The workers' native supervisor (``None`` once closed)."""
        return self._processes.supervisor

    @property
    def _spec_fd(self) -> int:
        """The descriptor of the workers' spec (what the tests read it back from)."""
        return self._processes.spec_fd

    @classmethod
    def start(
        cls, config: CollectorConfig, env_source: EnvSource, policy: Any, weights_module: torch.nn.Module | None
    ) -> WorkerPool:
        """Check everything (plugins, env, policy, placements, pickling), then start the workers.

        Args:
            config: The collector's settings.
            env_source: What builds the environments.
            policy: The policy (``None``: random actions).
            weights_module: The module whose weights ``publish_weights`` sends (the policy
                itself, or the module a function policy closes over); ``None``: no weights move.

        Raises:
            ConfigError: Anything that would fail in a worker, named, before any worker starts.
        """
        weights = None
        slot_frames = config.num_workers * SLOTS_PER_WORKER * config.envs_per_worker * config.steps_per_batch
        owned_frames = 0 if config.zero_copy else BATCHES_HELD * config.rows * config.steps_per_batch
        check_fits_before_env(
            config,
            f"the shared memory of {config.num_workers} worker(s) and the trainer's batches",
            slot_frames + owned_frames,
        )
        scheme: WeightSyncScheme = _resolved(config.weight_sync, WeightSyncScheme, "weight_sync")
        device_policy: DevicePolicy = _resolved(config.device_policy, DevicePolicy, "device_policy")
        placements = place_workers(device_policy, config)
        # The settings hold: the fork server (if this process has none yet) does its imports
        # while the probe env is built and the policy checked, instead of after.
        forkserver.start()
        # One environment here reports the specs and lets the policy be checked on an
        # example batch, so that bad input fails before any worker starts.
        probe = env_source.make()
        try:
            limit = config.max_frames_per_traj
            check_probe(probe, config.envs_per_worker, AutoresetMode.SAME_STEP, limit, "a collector")
            plan = plan_rollout(config, env_source, probe, policy)
            snapshot_bytes = _snapshot_bytes(config, env_source, probe)
        finally:
            close_within(probe, env_source, config.supervision.shutdown_grace_s, what="probe env")
        check_pool(  # a pool's other envs must fill the same batches
            env_source,
            lambda source, env: {"spaces": (env.observation_space, env.action_space), "fields": source.specs(env)},
            lambda env: check_probe(env, config.envs_per_worker, AutoresetMode.SAME_STEP, limit, "a collector"),
        )
        _picklable(env_source, f"env {env_source.describe()!r}")
        _picklable(config, "the collector's config (its weight_sync, device_policy or engine object)")
        try:
            policy_blob = None if policy is None else pack_policy(policy, weights_module)
        except Exception as exc:
            raise PolicyError(
                f"policy {type(policy).__name__} cannot be pickled for worker processes: {type(exc).__name__}: {exc}"
            ) from exc
        if weights_module is not None:
            state = module_weights(weights_module)
            weights = _Weights(WeightsLayout.from_module(weights_module), scheme, weights_digest(state))
        segment_layout = {**_segment_layout(config, plan, weights), "snapshot_bytes": snapshot_bytes}
        owned = 0 if config.zero_copy else BATCHES_HELD * batch_bytes(plan.fields, config.rows, config.steps_per_batch)
        check_fits(
            f"the shared memory of {config.num_workers} worker(s) (rollout slots, weights) and the trainer's batches",
            _core.segment_bytes(**segment_layout) + owned,
            config,
        )
        loop = RolloutLoop(
            config=config,
            policy=policy_blob,
            fields=tuple(field.key for field in plan.fields),
            info=plan.info,
            placements=tuple(placements),
            weights_layout=weights.layout if weights is not None else None,
            weights=None,  # the scheme's receiver, made once the segment exists
        )
        spec = WorkerSpec(env_source, loop)  # layout_hash: filled in once the segment exists
        return cls(config, spec, plan, placements, weights, segment_layout)

    # -- batches ---------------------------------------------------------------------------

    def next_batch(self, *, random_actions: bool, policy_version: int) -> TensorDict:
        """The next batch: ``[W*K, T]`` in sync mode, ``[K, T]`` in async mode.

        The arguments are the trainer's view; workers count their own frames and stamp the
        version of the weights they received.
        """
        self._release_held()
        leases = [self._pop(worker) for worker in range(self.num_workers)] if self.sync else [self._pop_any()]
        try:
            self._check_applied_weights()
            batch = self._assemble(leases)
        except BaseException:
            for lease in leases:
                lease.release()
            raise
        if self.zero_copy:
            self._held = leases
        else:
            for lease in leases:
                lease.release()
        return batch

    def _live(self) -> tuple[list[Any], Any]:
        """The consumers and the segment, or :class:`CollectorClosedError` once :meth:`close` let them go.

        Read in this order (:meth:`_release` drops the segment first): a thread waiting for a
        batch while another shuts the collector down gets the error, never a half-released pool.
        """
        consumers, segment = self.consumers, getattr(self, "segment", None)
        if segment is None or not consumers:
            raise CollectorClosedError("the collector is shut down")
        return consumers, segment

    def env_calls(self) -> EnvCalls:
        """The workers' envs, through their step channels; each worker serves a command between two rollouts."""
        return self._env_requests

    def _live_channels(self) -> list[Any]:
        self._live()
        return self._channels

    def _env_wait_checks(self, workers: Sequence[int]) -> None:
        """While an env command waits: a worker given up on or stopped, or the collector closed, ends the wait."""
        log = self._poll()
        for w in workers:
            if log.stopped(w):
                raise log.stopped_error(w, "and its envs cannot answer")
        _, segment = self._live()
        if segment.is_shutdown:
            raise CollectorClosedError("the collector is shutting down")

    def _poll(self) -> SupervisionLog:
        log = self._processes.log
        if log is None:
            raise CollectorClosedError("the collector is shut down")
        log.poll()
        if not self.sync:
            for worker in log.newly_stopped():
                left = sum(not log.stopped(w) for w in range(self.num_workers))
                warnings.warn(
                    f"{log.describe_stop(worker)}; collecting from {left} of {self.num_workers} workers",
                    PyCollectWarning,
                    stacklevel=5,
                )
        return log

    def _pop(self, worker: int) -> Any:
        consumers, segment = self._live()
        consumer = consumers[worker]
        while True:
            log = self._poll()
            lease = consumer.pop(timeout_s=_POLL_S)
            if lease is not None:
                return lease
            if log.stopped(worker) and not consumer.available():  # what it committed was delivered
                raise log.stopped_error(worker, "and a sync batch needs a rollout of every worker")
            if segment.is_shutdown:
                raise CollectorClosedError("the collector is shutting down")

    def _pop_any(self) -> Any:
        consumers, segment = self._live()
        while True:
            log = self._poll()
            if all(log.stopped(w) and not consumers[w].available() for w in range(self.num_workers)):
                raise log.stopped_error(self.num_workers - 1, "and no worker is left")
            which = _core.wait_any(consumers, timeout_s=_POLL_S, start=self._next_worker)
            if which is not None:
                lease = consumers[which].try_pop()
                if lease is not None:
                    self._next_worker = (which + 1) % self.num_workers
                    return lease
            if segment.is_shutdown:
                raise CollectorClosedError("the collector is shutting down")

    def _assemble(self, leases: list[Any]) -> TensorDict:
        consumers, segment = self._live()
        k, t = segment.envs_per_worker, segment.steps
        self._copier.settle()  # the previous batch's staging memory may be reused from here
        rows = k * len(leases)
        one_block = self.sync and len({lease.slot for lease in leases}) == 1 and len(leases) == self.num_workers
        # Owned batches are copied into recycled memory (no page faults once warm);
        # zero-copy batches are the slots themselves.
        owned = None if self.zero_copy else allocate(self._fields, rows, t, self._memory)
        arrays: dict[Key, np.ndarray] = {}
        obs_sources: dict[Key, list[np.ndarray]] = {}  # the slots' observation arrays, filled in below
        for field in self._fields:
            name = self._names[field.key]
            if one_block:  # writable: torch warns about read-only buffers; the slots are leased
                sources = [np.asarray(segment.batch_view(name, leases[0].slot, writable=True))]
            else:
                sources = [np.asarray(lease.view(name)) for lease in leases]
            if owned is not None:
                if field.key in self._observation_keys:
                    obs_sources[field.key] = sources
                else:
                    for block, source in _row_blocks(sources):
                        owned[field.key][block] = source
                arrays[field.key] = owned[field.key]
            elif len(sources) == 1:
                arrays[field.key] = sources[0]
            else:  # rings out of step after a restart: no single view exists, so a copy
                arrays[field.key] = np.concatenate(sources)
        # Workers write each observation once, into ("next", obs); obs is filled in here from
        # it: into the owned batch straight from the slots, or in place in the leased slots.
        for key, next_key in self._observations:
            if owned is None:
                fill_observations(arrays[key], arrays[next_key], arrays[NEXT_DONE])
                continue
            for block, source in _row_blocks(obs_sources[key]):
                fill_observations(source, arrays[next_key][block], arrays[NEXT_DONE][block], out=arrays[key][block])
        td = to_tensordict(arrays)
        for i, lease in enumerate(leases):
            if self.config.takes_snapshots:
                self._after[lease.worker] = read_snapshot(np.asarray(segment.snapshot_view(lease.worker, lease.slot)))
            if self._generation_ended(lease, consumers) and not self._replayed_after(lease, consumers):
                _mark_cut(td, slice(i * k, (i + 1) * k), self.plan.specs.done_groups)
        storing = self._storing[leases[0].worker]  # sync: worker 0's; async: the delivering worker's
        if storing.type == "cpu":
            return td
        if self.zero_copy:  # straight from the slots (no host copy); a blocking copy, owned by the caller
            return td.to(storing)
        return self._copier.copy(td, storing)

    def _generation_ended(self, lease: Any, consumers: list[Any]) -> bool:
        """Whether ``lease`` is the last rollout its (dead) worker generation committed."""
        log = self._processes.log
        if log is None:
            raise CollectorClosedError("the collector is shut down")
        if not log.ended(lease.worker, lease.generation):
            return False
        following = consumers[lease.worker].peek()
        return following is None or following[1] != lease.generation

    def _replayed_after(self, lease: Any, consumers: list[Any]) -> bool:
        """Whether the worker's next generation restored the state after ``lease`` (``recovery="replay"``).

        The restarted worker tells with the flag of its first rollout, which this waits for.
        """
        if self.config.recovery != "replay":
            return False
        consumer = consumers[lease.worker]
        while True:
            log = self._poll()
            following = consumer.peek()
            if following is not None:
                return bool(following[2] & RESUMED)
            if log.stopped(lease.worker):
                return False
            _core.wait_any([consumer], timeout_s=_POLL_S)

    def _release_held(self) -> None:
        for lease in self._held:
            lease.release()
        self._held = []

    # -- supervision and weights -------------------------------------------------------------

    def _check_applied_weights(self) -> None:
        """Every worker acts with the bytes published for the version it applied (else the error says so)."""
        if not self._digests:
            return
        _, segment = self._live()
        for worker in range(self.num_workers):
            applied = segment.worker_control(worker).applied_weights()
            if applied is None:
                continue  # not started yet, or restarting
            version, digest = applied
            expected = self._digests.get(version)
            if expected is not None and expected != digest:
                raise WeightsMismatchError(
                    f"worker {worker} applied weights of version {version} whose digest {digest:#018x} is not "
                    f"that of the weights published as version {version} ({expected:#018x}): the worker did not "
                    f"get the bytes sent (weight-sync scheme {self._scheme_name!r})",
                    worker=worker,
                    version=version,
                )

    def state(self) -> dict[str, Any]:
        """With snapshots: each worker's state after the last of its rollouts delivered."""
        if not self.config.takes_snapshots:
            return {}
        return {"worker_states": list(self._after)}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Start the workers again, each from its state in ``state`` (``state()`` of an earlier pool).

        The rollouts the workers made ahead are dropped with the processes that made them.

        Raises:
            ConfigError: The state holds another number of workers.
        """
        states = state.get("worker_states")
        if states is None:
            return
        if len(states) != self.num_workers:
            raise ConfigError(
                f"the state_dict holds the states of {len(states)} workers, this collector has {self.num_workers}"
            )
        config, spec, plan, placements, weights, segment_layout = self._started_with
        self.close()
        self.__init__(  # type: ignore[misc]  # the same pool, its workers started from the states
            config,
            replace(spec, loop=replace(spec.loop, initial_states=tuple(states))),
            plan,
            placements,
            weights,
            segment_layout,
        )

    def counters(self) -> Any | None:
        """The segment: its worker blocks hold what each worker counted."""
        return getattr(self, "segment", None)

    def supervision(self) -> Supervision:
        """Each worker's :class:`~pycollect._core.WorkerStats` and the recent events (as they ended, once closed)."""
        return Supervision(self._processes.stats(), self._processes.events())

    def publish_weights(self, weights: torch.nn.Module | None, version: int) -> None:
        """Send the weights module's state dict through the scheme; workers load it between rollouts.

        Raises:
            PolicyError: The state dict no longer has the layout the workers were started with.
            TransportError: The scheme could not publish within ``weight_sync_timeout_s``, or
                raised an error of its own (the cause).
        """
        if self._sender is None or self._layout is None or weights is None:
            return  # no weights module: the collector has warned that nothing moves
        state = module_weights(weights)
        self._layout.check(state)
        self._digests[version] = weights_digest(state)
        while len(self._digests) > _DIGESTS_KEPT:
            del self._digests[min(self._digests)]
        try:
            self._sender.send(state, version, timeout_s=self.config.weight_sync_timeout_s)
        except PyCollectError:
            raise
        except Exception as exc:  # a scheme's own error (a plugin's, a bare OverflowError): named
            raise TransportError(
                f"weight-sync scheme {self._scheme_name!r} failed to publish version {version}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    # -- lifetime --------------------------------------------------------------------------

    def close(self) -> None:
        """Stop every worker (flag, grace, SIGTERM, SIGKILL, reap) and release the segment."""
        if self._closed:
            return
        self._closed = True
        self._held = []
        self._copier.settle()
        self._processes.close()
        if self._sender is not None:
            self._sender.close()
        self._release()

    def _release(self) -> None:
        """Let go of the segment and the batch memory now, not when the collector is collected.

        A shut-down collector the program still refers to would otherwise keep the segment
        (rollout slots and weights buffers: hundreds of MB with a large policy) mapped. What
        :meth:`supervision` reports is kept; a zero-copy batch the caller still holds keeps
        the mapping it views alive by itself.
        """
        if hasattr(self, "segment"):
            del self.segment  # first: _live() reads the consumers, then the segment
        self.consumers = []
        self._channels = []
        self._sender = None  # the weights store's writer maps the segment
        self._memory = staging_memory(torch.device("cpu"))  # the recycled batch buffers go


def _resolved(value: Any, interface: type, argument: str) -> Any:
    """``value`` as the plugin object the collector resolved it to (:func:`pycollect.plugins.resolve`)."""
    if not isinstance(value, interface):
        raise ConfigError(
            f"{argument}={value!r}: the workers engine takes a resolved config, whose {argument} is a "
            f"{interface.__name__} (pycollect.plugins.resolve makes it one)"
        )
    return value


def place_workers(policy: DevicePolicy, config: CollectorConfig) -> list[Placement]:
    """Ask ``policy`` where each worker goes, and check every answer against this machine.

    Raises:
        ConfigError: A placement that is not a :class:`Placement`, names a device this
            machine lacks, puts environments off the CPU, or names CUDA while hiding it; or
            the policy itself refuses (an explicit list of the wrong length).
    """
    devices = _placement.available_devices()
    where = f"device policy {policy.name!r}"
    placements = []
    for worker in range(config.num_workers):
        placement = policy.place(worker, config.num_workers, list(devices))
        if not isinstance(placement, Placement):
            raise ConfigError(f"{where} returned {placement!r} for worker {worker}; expected a Placement")
        for device in placement.devices():
            if device not in devices:
                raise ConfigError(
                    f"{where} placed worker {worker} on {device!r}, which this machine does not have "
                    f"(it has {', '.join(devices)})"
                )
            if device.startswith("cuda") and not placement.cuda:
                raise ConfigError(f"{where} placed worker {worker} on {device!r} but hides CUDA from it (cuda=False)")
        if placement.env_device != "cpu":
            raise ConfigError(
                f"{where} puts worker {worker}'s environments on {placement.env_device!r}; gymnasium-style "
                "environments step on the CPU"
            )
        placements.append(placement)
    return placements


def storing_devices(config: CollectorConfig, placements: Sequence[Placement]) -> list[torch.device]:
    """Where each worker's rollouts are delivered: ``storing_device`` if given, else its placement's.

    A sync batch holds every worker's rollout and is delivered on worker 0's device (the
    first entry); an async batch on the device of the worker that made it.
    """
    return [torch.device(config.storing_device or placement.storing_device) for placement in placements]


def _segment_layout(config: CollectorConfig, plan: RolloutPlan, weights: _Weights | None) -> dict[str, Any]:
    """The arguments of ``Segment.create`` (and ``segment_bytes``) for this collector."""
    return {
        "fields": [(field_name(f.key), f.dtype.name, f.shape) for f in plan.fields],
        "n_workers": config.num_workers,
        "envs_per_worker": config.envs_per_worker,
        "steps": config.steps_per_batch,
        "slots_per_worker": SLOTS_PER_WORKER,
        "weights_capacity": _store_bytes(weights),
        "weights_buffers": _store_buffers(weights, config.num_workers),
        "mailbox_bytes": MAILBOX_BYTES,  # env commands (Collector.env_call and its kin)
    }


def _snapshot_bytes(config: CollectorConfig, env_source: EnvSource, probe: Any) -> int:
    """Bytes of each rollout's snapshot area (0 without snapshots), from the probe env's state.

    Raises:
        EnvStateError: The env's state cannot be saved, naming what cannot.
    """
    if not config.takes_snapshots:
        return 0
    why = env_source.backend.snapshot_refusal(probe)
    if why is not None:
        reason = "recovery='replay'" if config.recovery == "replay" else "snapshots=True"
        raise EnvStateError(f"{reason} saves every env's state, but env {env_source.describe()!r} cannot: {why}")
    size = len(pickle.dumps(env_source.backend.get_state(probe), protocol=pickle.HIGHEST_PROTOCOL))
    return snapshot_capacity(size, config.envs_per_worker)


def _store_bytes(weights: _Weights | None) -> int:
    if weights is None:
        return 0
    size = weights.scheme.store_bytes(weights.layout)
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ConfigError(f"weight-sync scheme {weights.scheme.name!r}: store_bytes() returned {size!r}")
    return size


def _store_buffers(weights: _Weights | None, num_workers: int) -> int:
    if weights is None:
        return WEIGHT_BUFFERS
    count = weights.scheme.store_buffers(num_workers)
    if not isinstance(count, int) or isinstance(count, bool) or not WEIGHT_BUFFERS <= count <= MAX_WEIGHT_BUFFERS:
        raise ConfigError(
            f"weight-sync scheme {weights.scheme.name!r}: store_buffers({num_workers}) returned {count!r}, "
            f"not an int from {WEIGHT_BUFFERS} to {MAX_WEIGHT_BUFFERS}"
        )
    return count


def _picklable(obj: Any, what: str) -> None:
    try:
        cloudpickle.dumps(obj)
    except Exception as exc:
        raise ConfigError(f"{what} cannot be pickled for worker processes: {type(exc).__name__}: {exc}") from exc


def _row_blocks(sources: list[np.ndarray]) -> list[tuple[slice, np.ndarray]]:
    """Each source (one worker rollout) with the rows it takes in the batch, one after another."""
    blocks, start = [], 0
    for source in sources:
        blocks.append((slice(start, start + len(source)), source))
        start += len(source)
    return blocks


def _mark_cut(td: TensorDict, rows: slice, done_groups: Sequence[Key] = ()) -> None:
    """Mark the last step of ``rows`` truncated: their trajectories end with a dead worker.

    The env's own done flags (``done_groups``: every agent's) are marked too.
    """
    for group in ((), *done_groups):
        td.get((*NEXT_OBS_PREFIX, *group, "truncated"))[rows, -1] = True
        td.get((*NEXT_OBS_PREFIX, *group, "done"))[rows, -1] = True
