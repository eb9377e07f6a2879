"""The trainer's side of a vector env over worker processes (``make_vec(num_workers=N)``).

:class:`WorkerStepBackend`, the :class:`~pycollect.vector.StepBackend` registered as
``"workers"`` (the default for ``num_workers >= 1``), steps a vector env's envs in
``N`` supervised worker processes of ``K = num_envs / N`` envs each (the loop in
:mod:`pycollect._workers.steps`), started and stopped by a
:class:`~pycollect._workers.processes.WorkerProcesses`, whose shared-memory segment holds
everything a step moves, one step deep: per field, the rows of every worker side by side, so
the trainer's ``[num_envs, ...]`` result arrays are single views of it and the actions go in
with one copy per action leaf. Each worker has a step channel
(:mod:`pycollect._workers.step_protocol`); a step posts one request to every worker, then
waits for all the answers (spinning briefly, yielding, then sleeping on the futex; after a long
wait the next one sleeps sooner: ``step_wait_policy`` in the core crate), looking at the
supervisor's events between waits.

Faults follow the restart policy. A worker given up on (``restart="never"``, or past
``max_restarts``) makes the waiting call raise :class:`~pycollect.WorkerCrashedError` with
what the worker raised. A restarted worker answers the request it was sent with "restarted"
(or "not mine", for a request meant for its dead predecessor), and the trainer reports its
envs' episodes as cut at that step: reward 0, ``truncated`` True, ``info["worker_restarted"]``
True; the observation is the last one the envs returned (in ``SAME_STEP`` mode that one is
the final observation, and the observation is the reset one of the new generation, whose
envs are reset with fresh seeds, or with those ``restart_seeds`` gives: the central engine
derives them from the collector's seed). The new generation starts with every episode
ended, so the next ``NEXT_STEP`` step resets them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import cloudpickle
import numpy as np
from gymnasium.vector import AutoresetMode

from pycollect._native import _core
from pycollect._steps.backend import InfoParts, StepBackend
from pycollect._steps.group import EnvSlotState, InfoEntry, Material
from pycollect._steps.info_fields import probe_info_fields
from pycollect._steps.spaces import SpaceLayout
from pycollect._workers import forkserver
from pycollect._workers import step_protocol as protocol
from pycollect._workers.env_requests import AGAIN, RESTARTED, WorkerRequests
from pycollect._workers.processes import WorkerProcesses
from pycollect._workers.spec import StepLoop, WorkerSpec, info_arrays, step_fields
from pycollect.config import WEIGHT_BUFFERS, VectorConfig
from pycollect.engines import close_within
from pycollect.envs.batched import check_probe
from pycollect.envs.pool import check_pool
from pycollect.envs.source import EnvSource
from pycollect.exceptions import ConfigError, TransportError, VectorEnvClosedError

__all__ = ["RESTARTED_KEY", "WorkerStepBackend"]

RESTARTED_KEY = "worker_restarted"
"""The info entry (True) of the envs whose episode a worker restart cut."""
_POLL_S = 0.1  # how often a waiting trainer looks at the supervisor's events

logger = logging.getLogger("pycollect.vector")


class WorkerStepBackend(StepBackend):
    """Steps ``num_envs`` envs in ``num_workers`` supervised processes, results in shared memory.

    Build it with :meth:`start`. The attributes are :class:`~pycollect.vector.StepBackend`'s; it
    serves a pool (``batch_size < num_envs``: the ``pool_*`` methods).
    """

    name = "workers"

    def __init__(self, spec: WorkerSpec[StepLoop], metadata: Mapping[str, Any], render_mode: str | None) -> None:
        loop = spec.loop
        config = loop.config
        k = config.envs_per_worker
        self.num_envs = config.num_envs
        self.num_workers = config.num_workers
        self.observation = loop.observation
        self.action = loop.action
        self.metadata = dict(metadata)
        self.render_mode = render_mode
        self._mode = config.autoreset_mode
        self._k = k
        self._generations = [1] * self.num_workers  # the generation of each worker requests are meant for
        self._workers_posted: list[int] | None = None  # the workers step_async posted to (None: all)
        # The pool (recv/send): the seq of each worker's request in flight, in the order they
        # were posted (a dict keeps its insertion order: the longest waiting is served first),
        # and the resets among them (their seeds, to post again to a restarted worker).
        self._in_flight: dict[int, int] = {}
        self._resets: dict[int, Sequence[int | None]] = {}
        self._closed = False
        # The seeds of a restarted worker's envs, by (worker, generation) (None: fresh entropy);
        # the central engine derives them from the collector's seed, as the workers engine does.
        self.restart_seeds: Callable[[int, int], Sequence[int | None]] | None = None
        self.last_restarted: list[int] = []  # the workers step_wait found restarted (their envs cut)
        self._channels: list[Any] = []
        self._requests: Any = None  # _core.StepRequests over the channels, while open
        fields = step_fields(loop)
        segment_layout = {
            "fields": [field for role in fields.values() for field in role],
            "n_workers": self.num_workers,
            "envs_per_worker": k,
            "steps": 1,
            "slots_per_worker": 1,
            "weights_capacity": 0,
            "weights_buffers": WEIGHT_BUFFERS,
            "mailbox_bytes": protocol.MAILBOX_BYTES,
        }
        self._loop = loop
        self._processes = WorkerProcesses(segment_layout, config.supervision)
        self.segment: Any = self._processes.segment
        try:

            def block(role: str) -> list[np.ndarray]:
                # batch_view is [num_envs, 1, *shape]: every worker's rows of one field
                views = [self.segment.batch_view(name, 0, writable=True) for name, _, _ in fields[role]]
                return [np.asarray(view)[:, 0] for view in views]

            self._views = {role: block(role) for role in fields}
            self._bind(self._views.__getitem__)
            self._channels = [self.segment.step_channel(w) for w in range(self.num_workers)]
            self._requests = _core.StepRequests(self._channels)
            self._env_requests = WorkerRequests(
                self._live,
                k,
                generation=self._generations.__getitem__,
                restarted=self._restarted,
                wait_checks=self._wait_checks,
                idle=self._idle,
            )
            # owner: closed at interpreter exit and on SIGTERM, and forgotten by a fork child, as a Collector is
            self._processes.start(spec, hide_cuda=True, owner=self)
            self._processes.await_running()  # an env that fails to build fails here
        except BaseException:
            self.close()
            raise

    def _bind(self, arrays: Callable[[str], list[np.ndarray]]) -> None:
        """Point the result attributes at ``arrays(role)`` (the roles of :func:`step_fields`)."""
        self.observations = arrays("observation")
        self.final_observations = arrays("final") if self._loop.config.final_observations else None
        self.actions = arrays("action")
        self.rewards, self.terminated, self.truncated = arrays("flags")
        self.info = info_arrays(self._loop, arrays)

    @classmethod
    def check(cls, config: VectorConfig) -> None:
        """Require workers.

        Raises:
            ConfigError: ``num_workers`` is 0.
        """
        if not config.num_workers:
            raise ConfigError(f"step_backend={cls.name!r} needs num_workers >= 1; got num_workers=0")

    @classmethod
    def start(cls, source: EnvSource, config: VectorConfig, probe: Any = None) -> WorkerStepBackend:
        """Check the env (one probe env's spaces, pickling), find its info fields, then start the workers.

        ``config`` was checked when it was made (the split of ``num_envs`` over the workers,
        ``max_episode_steps`` in ``SAME_STEP`` mode only...). ``probe``: an env of ``source``
        the caller has built already (and closes), read instead of building one here. The
        probe env is reset and stepped a few times with random actions, to find the info
        entries that travel as fields (:func:`~pycollect._steps.info_fields.probe_info_fields`).

        Raises:
            ConfigError: The env source cannot be pickled for the workers; before any worker starts.
            UnsupportedSpaceError: A space pycollect cannot lay out.
            EnvCreationError: The probe env's constructor raised.
            WorkerCrashedError: A worker failed to start and its restart policy gave up.
        """
        forkserver.start()  # its imports overlap with the probe env
        own_probe = probe is None
        if own_probe:
            probe = source.make()
        try:
            mode = config.autoreset_mode
            check_probe(probe, config.envs_per_worker, mode, config.max_episode_steps, "a vector env")
            observation = SpaceLayout(probe.observation_space, "observation")
            action = SpaceLayout(probe.action_space, "action")
            metadata = dict(getattr(probe, "metadata", {}))
            render_mode = getattr(probe, "render_mode", None)
            info_fields = probe_info_fields(probe, config.info_keys, timeout_s=config.supervision.heartbeat_timeout_s)
        finally:
            if own_probe:
                with contextlib.suppress(Exception):  # a probe that fails to close does not stop the start
                    close_within(probe, source, config.supervision.shutdown_grace_s, what="probe env")
        check_pool(  # a pool's other envs must fill the same rows
            source,
            lambda _source, env: {"spaces": (env.observation_space, env.action_space)},
            lambda env: check_probe(env, config.envs_per_worker, mode, config.max_episode_steps, "a vector env"),
        )
        try:
            cloudpickle.dumps(source)
        except Exception as exc:
            raise ConfigError(
                f"env {source.describe()!r} cannot be pickled for worker processes: {type(exc).__name__}: {exc}"
            ) from exc
        # layout_hash: filled in once the segment exists
        spec = WorkerSpec(source, StepLoop(config, observation, action, info_fields=info_fields))
        return cls(spec, metadata, render_mode)

    # -- the StepBackend interface --------------------------------------------------------

    def reset(self, seeds: Sequence[int | None], options: dict[str, Any] | None, mask: np.ndarray | None) -> InfoParts:
        """Reset every env or the envs of ``mask`` (see :class:`~pycollect.vector.StepBackend`)."""
        k = self._k
        payloads = {}
        for w in range(self.num_workers):
            rows = slice(w * k, (w + 1) * k)
            worker_mask = None if mask is None else [bool(m) for m in mask[rows]]
            if worker_mask is not None and not any(worker_mask):
                self.info.clear_rows(rows)  # it is not asked, so its envs return no info
                continue
            payloads[w] = protocol.dumps((list(seeds[rows]), options, worker_mask))
        answers = self._exchange(protocol.RESET, payloads, retry=True)
        return [(w * k, material) for w, material in sorted(answers.items()) if material]

    def step_async(
        self,
        actions: Sequence[np.ndarray] | None = None,
        *,
        envs: range | None = None,
        workers: Sequence[int] | None = None,
    ) -> None:
        """Post a step to every worker, its actions in :attr:`actions` (written there, or copied from ``actions``).

        Args:
            actions: One ``[num_envs, *shape]`` array per action leaf, copied into :attr:`actions`
                first (``None``: they were written there).
            envs: Step only these envs of each worker (numbered from 0 in a worker; the
                ``central`` engine's groups); ``None``: all of them.
            workers: Post only to these workers (ascending); ``None``: to every worker.
        """
        if actions is not None:
            for block, leaf in zip(self.actions, actions, strict=True):
                block[...] = leaf
        channels, requests = self._open()
        if requests.any_pending():
            self._env_requests.drain(channels)
        payload = None if envs is None else protocol.step_range(envs.start, envs.stop)
        self._workers_posted = None if workers is None else list(workers)
        requests.post_all(protocol.STEP, self._generations, payload, self._workers_posted)

    def step_wait(self) -> InfoParts:
        """Wait for every worker's answer to the step :meth:`step_async` posted.

        The common step takes the short way: one wait, every answer OK with an empty payload
        (the results, info fields included, are in the segment). Anything else goes through
        the handling of :meth:`_answer`.
        """
        channels, requests = self._open()
        if not requests.wait_all(timeout_s=_POLL_S):
            self._env_requests.wait(channels, dict(enumerate(requests.seqs())))
        parts: InfoParts = []
        self.last_restarted = []
        for w, _generation, status, payload in requests.unusual(self._workers_posted):
            if status != protocol.OK:
                material = self._env_requests.answer(w, status, payload, retry=False)
                if material is RESTARTED:
                    material = self._cut(w)
                    self.last_restarted.append(w)
            else:
                material = protocol.loads(payload)
            if material:
                parts.append((w * self._k, material))
        return parts

    # -- the pool: workers served first-ready ------------------------------------------------

    def pool_reset(self, seeds: Sequence[int | None], options: dict[str, Any] | None) -> None:
        """Post a reset to every worker and return: :meth:`pool_recv` collects the answers."""
        channels, k = self._live(), self._k
        self._env_requests.drain(channels)
        self._in_flight = {
            w: channel.post(
                protocol.RESET, self._generations[w], protocol.dumps((list(seeds[w * k : (w + 1) * k]), options, None))
            )
            for w, channel in enumerate(channels)
        }
        self._resets = {w: seeds[w * k : (w + 1) * k] for w in range(self.num_workers)}

    def pool_recv(self, count: int) -> tuple[list[int], dict[int, Material | None]]:
        """Wait until ``count`` workers have answered; return them and their info material.

        Among the workers that have answered, the one whose request was posted first is served
        first (ties: in worker order), so a worker that has answered is served before any
        worker whose request was posted after its own. The workers returned are the caller's
        until :meth:`pool_send` posts their next step.

        Raises:
            ConfigError: Fewer than ``count`` workers have a request in flight (send first).
            WorkerCrashedError, VectorEnvClosedError: as :meth:`step_wait`.
        """
        channels, requests = self._open()
        if len(self._in_flight) < count:
            raise ConfigError(
                f"recv() of {count * self._k} envs, but only {len(self._in_flight) * self._k} have a step or reset in "
                "flight: send() the actions of the envs the last recv() returned first"
            )
        picked: list[int] = []
        materials: dict[int, Material | None] = {}
        while len(picked) < count:
            ready, unusual = requests.oldest_answered(list(self._in_flight), count - len(picked), timeout_s=_POLL_S)
            if not ready:
                self._wait_checks(list(self._in_flight))
                continue
            said = {w: (status, payload) for w, _, status, payload in unusual}
            for w in ready:
                reset = self._resets.get(w)
                answer = None  # done, nothing to add: the common step
                if w in said:
                    answer = self._env_requests.answer(
                        w, *said[w], retry=reset is not None
                    )  # raises: w stays in flight
                del self._in_flight[w]
                if answer is AGAIN:  # a reset its restarted worker did not serve: post it again, last
                    assert reset is not None
                    self._in_flight[w] = channels[w].post(
                        protocol.RESET, self._generations[w], protocol.dumps((list(reset), None, None))
                    )
                    continue
                self._resets.pop(w, None)
                materials[w] = self._cut(w) if answer is RESTARTED else answer
                picked.append(w)
        return picked, materials

    def pool_send(self, workers: Sequence[int], actions: Sequence[np.ndarray]) -> None:
        """Post the next step of ``workers``; ``actions``: one ``[len(workers) * K, ...]`` array per leaf."""
        self._live()
        k = self._k
        for leaf, block in zip(actions, self.actions, strict=True):
            for position, w in enumerate(workers):
                block[w * k : (w + 1) * k] = leaf[position * k : (position + 1) * k]
        self.pool_post(workers)

    def pool_post(self, workers: Sequence[int]) -> None:
        """Post the next step of ``workers``, whose actions are already in :attr:`actions`."""
        _, requests = self._open()
        posted = sorted(workers)
        requests.post_all(protocol.STEP, self._generations, None, posted)
        seqs = requests.seqs()
        for w in posted:  # after every request in flight, in worker order
            self._in_flight[w] = seqs[w]

    def call(
        self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any], indices: Sequence[int] | None = None
    ) -> list[Any]:
        """Each env's ``name`` (of ``indices``), called with the arguments if callable."""
        return self._env_requests.call(name, args, kwargs, indices)

    def get_attr(self, name: str, indices: Sequence[int] | None = None) -> list[Any]:
        """Each env's ``name`` (of ``indices``)."""
        return self._env_requests.get_attr(name, indices)

    def set_attr(self, name: str, values: Sequence[Any], indices: Sequence[int] | None = None) -> None:
        """Set ``name`` on env ``indices[j]`` (``None``: env ``j``) to ``values[j]``."""
        self._env_requests.set_attr(name, values, indices)

    def apply(self, function: Callable[[Any], Any], indices: Sequence[int] | None = None) -> list[Any]:
        """``function(env)`` on each env (of ``indices``), in the workers; ``function`` travels cloudpickled."""
        return self._env_requests.apply(function, indices)

    def env_states(self, envs_per_request: int | None = None) -> list[EnvSlotState]:
        """Every env's saved state, in env order (see :meth:`.WorkerRequests.env_states`)."""
        return self._env_requests.env_states(envs_per_request)

    def load_env_states(self, states: Sequence[EnvSlotState], envs_per_request: int | None = None) -> None:
        """Restore :meth:`env_states` into every env (see :meth:`.WorkerRequests.load_env_states`)."""
        self._env_requests.load_env_states(states, envs_per_request)

    def counters(self) -> Any | None:
        """The segment: the workers count their steps in their control blocks (None once closed)."""
        return self.segment

    def workers(self) -> tuple[Any, ...]:
        """Each worker's :class:`~pycollect._core.WorkerStats` (pid, generation, restarts, last exit...)."""
        return self._processes.stats()

    def generation(self, worker: int) -> int:
        """The generation of ``worker`` that requests are meant for (1, then +1 at each restart seen)."""
        return self._generations[worker]

    def events(self) -> tuple[Any, ...]:
        """The supervisor's recent events (at most 100), oldest first; once closed, those taken before."""
        return self._processes.events()

    def close(self) -> None:
        """Stop the workers (they close their envs) and release the segment; a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        self._processes.close()
        self._channels = []
        self._release()

    def _release(self) -> None:
        """Let go of the segment now, not when this backend is collected.

        A closed vector env the program still refers to would otherwise keep the segment mapped.
        The result attributes become copies of their own (the last results stay readable); the
        views a caller took from them keep what they view mapped by themselves, safely.
        """
        if hasattr(self, "_views"):
            self._views = {role: [view.copy() for view in views] for role, views in self._views.items()}
            self._bind(self._views.__getitem__)
        self.observation.forget_views()  # copy=False results are built over the segment's views
        self._requests = None  # it holds the segment
        self.segment = None

    def shutdown(self) -> None:
        """:meth:`close`, under the name process-exit handling calls (``pycollect._lifetime``)."""
        self.close()

    def _forget(self) -> None:
        """In a forked child: this copy owns none of the workers; never act on them."""
        self._closed = True
        self._channels = []
        self._processes.forget()

    # -- requests --------------------------------------------------------------------------

    def _exchange(self, command: int, payloads: dict[int, bytes], *, retry: bool) -> dict[int, Any]:
        """:meth:`.WorkerRequests.exchange` (refused while a pool has steps in flight)."""
        return self._env_requests.exchange(command, payloads, retry=retry)

    def _idle(self) -> None:
        if self._in_flight:
            raise ConfigError(
                f"envs of workers {sorted(self._in_flight)} have a step or reset in flight: recv() them before "
                "calling reset(), call(), get_attr() or set_attr()"
            )

    def _wait_checks(self, workers: Sequence[int]) -> None:
        """Between two slices of a wait: a worker given up on or stopped, or the env closed, ends it.

        Raises:
            WorkerCrashedError: A worker was given up on.
            WorkerStoppedError: One of ``workers`` ended cleanly and its restart policy leaves it down.
            VectorEnvClosedError: The vector env was closed (or is shutting down).
        """
        log = self._processes.log
        if log is None:
            raise VectorEnvClosedError("the vector env was closed while it waited for its workers")
        log.poll()  # raises WorkerCrashedError once a worker is given up on
        for w in workers:
            if log.stopped(w):
                raise log.stopped_error(w, "and a vector env needs every worker")
        segment = self.segment  # None once closed (from another thread, by a signal or at exit)
        if segment is None or segment.is_shutdown:
            raise VectorEnvClosedError("the vector env is shutting down")

    def _restarted(self, worker: int, generation: int) -> None:
        if generation <= self._generations[worker]:
            raise TransportError(
                f"worker {worker} answered 'restarted' as generation {generation}, but generation "
                f"{self._generations[worker]} is the one it was asked as"
            )
        logger.warning("worker %d was restarted (generation %d): its envs' episodes end here", worker, generation)
        self._generations[worker] = generation

    def _cut(self, worker: int) -> Material:
        """Report the envs of ``worker``, just restarted, as truncated at this step (see the module doc)."""
        k = self._k
        rows = slice(worker * k, (worker + 1) * k)
        restarted = {RESTARTED_KEY: True}
        self.info.clear_rows(rows)  # what the dead generation left there is no info of this step
        if self._mode is AutoresetMode.SAME_STEP:
            assert self.final_observations is not None
            for final, last in zip(self.final_observations, self.observations, strict=True):
                final[rows] = last[rows]  # the last observations the envs returned end their episodes
            seeds = (
                [None] * k
                if self.restart_seeds is None
                else list(self.restart_seeds(worker, self._generations[worker]))
            )
            answers = self._exchange(protocol.RESET, {worker: protocol.dumps((seeds, None, None))}, retry=True)
            reset_infos = {i: info for i, info, _ in answers[worker] or []}
            entries: list[InfoEntry] = [(i, reset_infos.get(i, {}), dict(restarted)) for i in range(k)]
        else:
            entries = [(i, dict(restarted), None) for i in range(k)]
        self.rewards[rows] = 0.0
        self.terminated[rows] = False
        self.truncated[rows] = True
        return entries

    def _live(self) -> list[Any]:
        if self._closed or not self._channels:
            raise VectorEnvClosedError("the vector env is closed")
        return self._channels

    def _open(self) -> tuple[list[Any], Any]:
        """The channels and their ``StepRequests``, while open.

        Taken together, so that a close from another thread leaves the caller's references
        working until its wait sees the shutdown (and raises :class:`VectorEnvClosedError`).
        """
        requests = self._requests
        channels = self._live()
        if requests is None:
            raise VectorEnvClosedError("the vector env is closed")
        return channels, requests
