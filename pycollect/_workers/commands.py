"""The env commands every worker answers, whichever local work it does: calls, attributes, states.

A worker's step channel carries, beside a vector env's steps and resets (:mod:`.steps`), the
commands that reach a worker's envs by name: ``call``/``get_attr``/``set_attr``/``apply`` (a
vector env's methods of those names, and a running :class:`~pycollect.Collector`'s
``env_call``/``env_get_attr``/``env_set_attr``/``env_apply``) and the saving and restoring of
env states (the central engine's checkpoints). :func:`answer_command` serves one and answers it;
the result, or the exception the env raised, goes back to the trainer, which raises it there:
the worker serves on, with its envs.
"""

from __future__ import annotations

import traceback
from typing import Any

from pycollect._steps.group import EnvGroup
from pycollect._workers import step_protocol as protocol
from pycollect.envs.backend import EnvBackend
from pycollect.exceptions import PyCollectError, TransportError

__all__ = ["answer", "answer_command", "refuse", "take"]


def answer(channel: Any, value: Any, what: str) -> None:
    """Answer OK with ``value``; one that cannot be pickled, or too large for the mailbox, is answered as an error.

    The error is raised in the trainer; the worker serves on (a ``get_attr`` of an attribute
    that cannot be pickled must not cost the worker its envs).
    """
    try:
        payload = protocol.dumps(value)
    except Exception as exc:
        refuse(
            channel,
            TransportError(
                f"{what} of worker {channel.worker} cannot be pickled to go to the trainer: {type(exc).__name__}: {exc}"
            ),
        )
        return
    if len(payload) > channel.mailbox_bytes:
        refuse(
            channel,
            TransportError(
                f"{what} of worker {channel.worker} take {len(payload):,} bytes pickled, more than the "
                f"{channel.mailbox_bytes:,} bytes of its mailbox"
            ),
        )
        return
    channel.respond(protocol.OK, payload)


def refuse(channel: Any, exc: Exception) -> None:
    """Answer the request being served with ``exc`` (and its traceback), which the trainer raises."""
    channel.respond(protocol.CALL_FAILED, _exception_payload(exc))


def answer_command(
    channel: Any, group: EnvGroup, command: int, payload: bytes, backend: EnvBackend, *, serves_states: bool = True
) -> None:
    """Serve a ``call``/``get_attr``/``set_attr``/``apply``, or (``serves_states``) a state's save or restore.

    Its result, or the exception it raised, goes back. ``serves_states=False`` (a collector's worker,
    whose snapshots save its envs' states with the rollout they belong to) refuses the two
    state commands.
    """
    try:
        arguments = protocol.loads(payload)  # an apply's function may fail to unpickle here (a missing module)
        if command == protocol.CALL:
            name, args, kwargs, indices = arguments
            result: Any = group.call(name, args, kwargs, indices)
        elif command == protocol.GET_ATTR:
            name, indices = arguments
            result = group.get_attr(name, indices)
        elif command == protocol.SET_ATTR:
            name, values, indices = arguments
            group.set_attr(name, values, indices)
            result = None
        elif command == protocol.APPLY:
            function, indices = arguments
            result = group.apply(function, indices)
        elif command == protocol.GET_STATE and serves_states:
            result = group.env_states(backend.get_state, arguments)
        elif command == protocol.SET_STATE and serves_states:
            states, indices = arguments
            group.load_env_states(states, backend.set_state, indices)
            result = None
        else:
            raise TransportError(f"worker {channel.worker} does not serve command {command}")
    except Exception as exc:
        refuse(channel, exc)
        return
    answer(channel, result, "the results of a call")


def _exception_payload(exc: Exception) -> bytes:
    """``exc`` pickled with its traceback text, or (unpicklable) a PyCollectError that says what it was."""
    trace = "".join(traceback.format_exception(exc))
    try:
        return protocol.dumps((exc, trace))
    except Exception:
        return protocol.dumps((PyCollectError(f"{type(exc).__name__}: {exc}"), trace))


def take(channel: Any, generation: int, request: tuple[int, int, int, bytes] | None) -> tuple[int, bytes] | None:
    """``(command, payload)`` of a request taken from the channel, if it is for this generation.

    One addressed to an earlier generation (the trainer had not seen this worker's restart) is
    answered :data:`~.step_protocol.NOT_MINE`, unserved, and gives ``None``, as no request does.
    """
    if request is None:
        return None
    _seq, command, addressed, payload = request
    if addressed != generation:
        channel.respond(protocol.NOT_MINE)
        return None
    return command, payload
