"""The trainer's end of the env commands every worker serves: calls, attributes, env states.

A worker's step channel (:mod:`.step_protocol`) carries, beside a vector env's steps, the
commands that reach the worker's envs (:mod:`.commands` serves them): ``call``, ``get_attr``,
``set_attr``, ``apply``, and the saving and restoring of env states. :class:`WorkerRequests`
sends one to every worker that holds envs it names, waits for every answer (looking at the
supervisor between waits) and puts the results back in env order. Both owners of workers use
it: a vector env over workers (:mod:`pycollect._step_backends.workers`, where the central
engine's checkpoints save env states through it too) and a collector's worker pool
(``Collector.env_call`` and its kin, :mod:`pycollect._engines.workers`), whose workers serve the
commands between two rollouts.

A worker that was restarted answers a request it did not serve with "restarted" (or "not mine",
for a request meant for its dead predecessor); the request then goes again to the new
generation, so a command always reaches the envs that are alive.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pycollect._native import _core
from pycollect._steps.backend import split_indices
from pycollect._steps.group import EnvSlotState
from pycollect._workers import step_protocol as protocol
from pycollect.exceptions import ConfigError, TransportError

__all__ = ["AGAIN", "RESTARTED", "WorkerRequests", "dumps"]

_POLL_S = 0.1  # how often a waiting trainer looks at the supervisor's events

logger = logging.getLogger("pycollect.workers")


class _Restarted:
    """The answer of a worker that was restarted instead of serving a request (not retried)."""

    def __repr__(self) -> str:
        return "<restarted>"


RESTARTED = _Restarted()
"""What :meth:`WorkerRequests.answer` gives for a request a restarted worker did not serve (``retry=False``)."""
AGAIN = object()
"""What :meth:`WorkerRequests.answer` gives for a request a restarted worker did not serve, to post again."""


def dumps(value: Any, what: str) -> bytes:
    """A request's payload; what cannot be pickled is the caller's error, raised before anything is sent."""
    try:
        return protocol.dumps(value)
    except Exception as exc:
        raise ConfigError(
            f"{what} cannot be pickled to go to the worker processes: {type(exc).__name__}: {exc}"
        ) from exc


class WorkerRequests:
    """Env commands to ``num_workers`` workers of ``envs_per_worker`` envs each, through their step channels.

    Args:
        channels: The step channels of workers ``0..N`` while they are open (raises once closed).
        envs_per_worker: Envs of each worker; env ``i`` is worker ``i // K``'s env ``i % K``.
        generation: The generation of a worker that a request is meant for.
        restarted: Called with a worker and its new generation when a worker answers "restarted".
        wait_checks: Called with the workers waited on between two slices of a wait; raises to
            end it (a worker given up on, the owner closed).
        posted: Called with a worker after a request is posted to it (a collector's pool wakes
            a worker that waits for a free slot).
        idle: Called before a command is posted; raises if the channels are busy otherwise (a
            vector env's pool with steps in flight).
    """

    def __init__(
        self,
        channels: Callable[[], list[Any]],
        envs_per_worker: int,
        *,
        generation: Callable[[int], int],
        restarted: Callable[[int, int], None],
        wait_checks: Callable[[Sequence[int]], None],
        posted: Callable[[int], None] | None = None,
        idle: Callable[[], None] | None = None,
    ) -> None:
        self._channels = channels
        self._k = envs_per_worker
        self._generation = generation
        self._restarted = restarted
        self._wait_checks = wait_checks
        self._posted = posted
        self._idle = idle

    def num_envs(self) -> int:
        """Envs of every worker together."""
        return len(self._channels()) * self._k

    def call(
        self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any], indices: Sequence[int] | None = None
    ) -> list[Any]:
        """Each env's ``name`` (of ``indices``), called with the arguments if callable."""
        args, kwargs = tuple(args), dict(kwargs)
        return self.gather(
            protocol.CALL, lambda local: (name, args, kwargs, local), indices, f"call({name!r})'s arguments"
        )

    def get_attr(self, name: str, indices: Sequence[int] | None = None) -> list[Any]:
        """Each env's ``name`` (of ``indices``)."""
        return self.gather(protocol.GET_ATTR, lambda local: (name, local), indices, f"get_attr({name!r})")

    def set_attr(self, name: str, values: Sequence[Any], indices: Sequence[int] | None = None) -> None:
        """Set ``name`` on env ``indices[j]`` (``None``: env ``j``) to ``values[j]``."""
        targets = self.targets(indices)
        count = sum(len(positions) for _, positions in targets.values())
        if len(values) != count:
            raise ConfigError(f"set_attr({name!r}): {len(values)} values for {count} envs")
        payloads = {
            w: dumps((name, [values[p] for p in positions], local), f"set_attr({name!r})'s values")
            for w, (local, positions) in targets.items()
        }
        self.exchange(protocol.SET_ATTR, payloads, retry=True)

    def apply(self, function: Callable[[Any], Any], indices: Sequence[int] | None = None) -> list[Any]:
        """``function(env)`` on each env (of ``indices``), in the workers; ``function`` travels cloudpickled.

        Raises:
            ConfigError: ``function`` cannot be pickled; nothing was sent.
        """
        return self.gather(protocol.APPLY, lambda local: (function, local), indices, f"apply's function {function!r}")

    def env_states(self, envs_per_request: int | None = None) -> list[EnvSlotState]:
        """Every env's saved state, in env order (see :meth:`~pycollect._steps.group.EnvGroup.env_states`).

        Asked between steps, every worker at once, ``envs_per_request`` of its envs a request
        (``None``: all of them in one), so that an answer of big envs (Atari's frames) still
        fits a worker's mailbox.

        Raises:
            TransportError: The states of a request are too large for the mailbox, or cannot be pickled.
        """
        states: dict[int, EnvSlotState] = {}
        for envs in self._env_chunks(envs_per_request):
            answers = self.gather(protocol.GET_STATE, lambda local: local, envs, "env states")
            states.update(zip(envs, answers, strict=True))
        return [states[index] for index in range(self.num_envs())]

    def load_env_states(self, states: Sequence[EnvSlotState], envs_per_request: int | None = None) -> None:
        """Restore :meth:`env_states` into every env, ``envs_per_request`` envs of every worker a request.

        Raises:
            ConfigError: Not one state per env, or a state that cannot be pickled.
        """
        if len(states) != self.num_envs():
            raise ConfigError(f"{len(states)} env states for a vector env of {self.num_envs} envs")
        for envs in self._env_chunks(envs_per_request):
            targets = self.targets(envs)
            payloads = {
                w: dumps(([states[envs[p]] for p in positions], local), "an env state")
                for w, (local, positions) in targets.items()
            }
            self.exchange(protocol.SET_STATE, payloads, retry=True)

    def _env_chunks(self, envs_per_request: int | None) -> list[list[int]]:
        """The envs of each round of requests: ``envs_per_request`` of every worker's (``None``: all)."""
        k, n = self._k, len(self._channels())
        size = k if envs_per_request is None else max(1, min(envs_per_request, k))
        return [
            [w * k + j for w in range(n) for j in range(start, min(start + size, k))] for start in range(0, k, size)
        ]

    # -- requests --------------------------------------------------------------------------

    def targets(self, indices: Sequence[int] | None) -> dict[int, tuple[list[int] | None, list[int]]]:
        """Per worker that ``indices`` names: its local env indices (``None``: all), their positions in ``indices``."""
        return split_indices(indices, len(self._channels()), self._k)

    def gather(
        self, command: int, arguments: Callable[[list[int] | None], Any], indices: Sequence[int] | None, what: str
    ) -> list[Any]:
        """Send ``command`` with ``arguments(local indices)`` to each worker ``indices`` names; the results in order.

        Raises:
            ConfigError: The arguments (``what``) cannot be pickled; nothing was sent.
        """
        targets = self.targets(indices)
        payloads = {w: dumps(arguments(local), what) for w, (local, _) in targets.items()}
        answers = self.exchange(command, payloads, retry=True)
        results: list[Any] = [None] * sum(len(positions) for _, positions in targets.values())
        for w, (_, positions) in targets.items():
            for position, value in zip(positions, answers[w], strict=True):
                results[position] = value
        return results

    def exchange(self, command: int, payloads: dict[int, bytes], *, retry: bool) -> dict[int, Any]:
        """Post ``command`` to each worker of ``payloads``, wait for every answer, return them unpickled.

        A worker that was restarted answers without serving: with ``retry`` the request goes
        again to its new generation; else its answer is :data:`RESTARTED`. An error a worker
        answered with (a ``call`` that raised, an answer too large for the mailbox) is raised
        here once every answer is in, so the channels are all free again.

        Raises:
            WorkerCrashedError: A worker was given up on.
            WorkerStoppedError: A worker ended cleanly and its restart policy leaves it down.
            VectorEnvClosedError, CollectorClosedError: The owner was closed (or is closing).
        """
        if self._idle is not None:
            self._idle()
        channels = self._channels()
        self.drain(channels)
        answers: dict[int, Any] = {}
        error: BaseException | None = None
        todo = dict(payloads)
        while todo:
            posted = {}
            for w, payload in todo.items():
                posted[w] = channels[w].post(command, self._generation(w), payload)
                if self._posted is not None:
                    self._posted(w)
            self.wait(channels, posted)
            again = {}
            for w in posted:
                _, status, payload = channels[w].response()
                try:
                    answer = self.answer(w, status, payload, retry)
                except Exception as exc:  # raised once every answer is in: the channels are free again
                    error = error or exc
                    continue
                if answer is AGAIN:
                    again[w] = todo[w]
                else:
                    answers[w] = answer
            todo = again
        if error is not None:
            raise error
        return answers

    def answer(self, worker: int, status: int, payload: bytes, retry: bool) -> Any:
        """What worker ``worker``'s answer means: the value, :data:`AGAIN` (post again) or :data:`RESTARTED`.

        Raises:
            Exception: What the worker answered with (a ``call`` that raised, an answer too large).
        """
        if status == protocol.OK:
            return protocol.loads(payload)
        if status in (protocol.NOT_MINE, protocol.RESTARTED):
            self._restarted(worker, self._channels()[worker].response()[0])
            return AGAIN if retry else RESTARTED
        if status == protocol.CALL_FAILED:
            exc, trace = protocol.loads(payload)
            logger.debug("worker %d raised:\n%s", worker, trace)
            raise exc
        raise TransportError(f"worker {worker} answered with unknown status {status}")

    def wait(self, channels: list[Any], posted: dict[int, int]) -> None:
        """Wait until every posted request is answered, looking at the supervisor between slices."""
        waiting = dict(posted)
        while waiting:
            self._wait_checks(list(waiting))
            workers = list(waiting)
            done = _core.wait_answers([channels[w] for w in workers], [waiting[w] for w in workers], timeout_s=_POLL_S)
            for i in done:
                del waiting[workers[i]]

    def drain(self, channels: list[Any]) -> None:
        """Wait out requests left unanswered by an interrupted call (Ctrl-C); their answers are dropped."""
        pending = {w: seq for w, channel in enumerate(channels) if (seq := channel.pending) is not None}
        if not pending:
            return
        self.wait(channels, pending)
        for w in pending:
            generation, status, _ = channels[w].response()
            if status in (protocol.NOT_MINE, protocol.RESTARTED):
                self._restarted(w, generation)
