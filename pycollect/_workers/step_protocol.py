"""What the trainer and a step-serving worker say to each other through a step channel.

A vector env over worker processes (``pycollect.make_vec(num_workers=N)``) talks to each
worker through its :class:`~pycollect._core.StepChannel`: one request in flight, answered
before the next. Requests and answers carry a command or a status (ints), the request's
``arg`` and a payload of bytes in the segment's mailbox. Actions and results never go
through the mailbox: the trainer writes the actions into the worker's rows of the action
fields before it posts a :data:`STEP`, and the worker writes observations, rewards and flags
into its rows of the result fields before it answers. The mailbox carries what varies in size
and is rare or small: reset seeds and options, ``call``/``get_attr``/``set_attr`` arguments and
results, and the info material of a step (``None``, an empty payload, when every env's info
was empty).

Every request's ``arg`` is the worker generation it is meant for. A worker that was restarted
answers a request meant for an earlier generation with :data:`NOT_MINE` and does not serve
it, so the trainer always learns of a restart from the answer itself (a request left pending
for a dead generation is answered :data:`~pycollect._core.STEP_STATUS_RESTARTED` by the new
one, which never serves it either).
"""

from __future__ import annotations

import pickle
import struct
from typing import Any

import cloudpickle

from pycollect._native import _core

__all__ = [
    "APPLY",
    "CALL",
    "CALL_FAILED",
    "CLOSE",
    "GET_ATTR",
    "GET_STATE",
    "MAILBOX_BYTES",
    "NOT_MINE",
    "OK",
    "RESET",
    "RESTARTED",
    "SET_ATTR",
    "SET_STATE",
    "STEP",
    "dumps",
    "loads",
    "read_step_range",
    "step_range",
]

MAILBOX_BYTES = 1 << 20
"""Bytes a request, and an answer, may take in a worker's mailbox (reset options, infos, call results)."""

# Commands (the trainer's): the native module's, and two more.
STEP = _core.STEP_CMD_STEP
"""Step every env with the actions in the worker's action rows; answer: the info material.

A payload of :func:`step_range` steps only the envs it names (the central engine's groups).
"""
RESET = _core.STEP_CMD_RESET
"""Reset the envs: payload ``(seeds, options, mask)``; answer: the info material."""
CALL = _core.STEP_CMD_CALL
"""Call (or read) an attribute of envs: payload ``(name, args, kwargs, indices)``; answer: the results.

``indices`` (here and in :data:`GET_ATTR`, :data:`SET_ATTR`, :data:`APPLY`): the worker's envs to
serve, numbered from 0 in the worker, in order; ``None``: all of them.
"""
CLOSE = _core.STEP_CMD_CLOSE
"""Close the envs and stop serving (the supervisor's shutdown does this too)."""
GET_ATTR = 5
"""Read an attribute of envs: payload ``(name, indices)``; answer: the values."""
SET_ATTR = 6
"""Set an attribute of envs: payload ``(name, values, indices)``; answer: nothing."""
APPLY = 7
"""Run a function on envs: payload ``(function, indices)`` (cloudpickled); answer: ``function(env)`` for each."""
GET_STATE = 8
"""Save envs' states: payload ``indices``; answer: each env's :meth:`~pycollect._steps.group.EnvGroup.env_states`.

Sent between steps only (the central engine's checkpoints), one env per worker at a time, so
that an answer of big envs (Atari's frames) still fits the mailbox.
"""
SET_STATE = 9
"""Restore envs' states: payload ``(states, indices)`` (what :data:`GET_STATE` answered); answer: nothing."""

# Statuses (the worker's): the native module's, and one more.
OK = _core.STEP_STATUS_OK
"""Served; the payload is the answer."""
CALL_FAILED = _core.STEP_STATUS_ERROR
"""Not served, or failed: the payload is ``(exception, traceback text)``, raised in the trainer."""
RESTARTED = _core.STEP_STATUS_RESTARTED
"""Not served: the request was left for a generation that died (answered by its successor)."""
NOT_MINE = 3
"""Not served: the request is for an earlier generation of this worker (it was restarted)."""


def step_range(start: int, stop: int) -> bytes:
    """The payload of a :data:`STEP` of the worker's envs ``start..stop`` only: two little-endian u32s.

    The native request loop reads it too (``_core.GroupStepper.serve``).
    """
    return struct.pack("<II", start, stop)


def read_step_range(payload: bytes) -> tuple[int, int]:
    """``(start, stop)`` of a :func:`step_range` payload."""
    start, stop = struct.unpack("<II", payload)
    return int(start), int(stop)


def dumps(value: Any) -> bytes:
    """A payload: ``b""`` for ``None`` (the common step), else the value pickled (cloudpickle for callables)."""
    if value is None:
        return b""
    payload: bytes = cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return payload


def loads(payload: bytes) -> Any:
    """The value of a payload made by :func:`dumps`."""
    return None if not payload else pickle.loads(payload)
