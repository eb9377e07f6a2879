"""A vector env's worker: ``K`` envs, one request at a time from the trainer's step channel.

The second kind of worker loop (the first, in :mod:`.rollouts`, fills rollout slots with a policy
inside the worker). Here the trainer drives: it writes actions into this worker's rows of the
action fields and posts a request (see :mod:`.step_protocol`); the worker steps its
:class:`~pycollect._steps.group.EnvGroup` (gymnasium's autoreset semantics), whose results go
straight into its rows of the result fields in the segment (info entries of a fixed kind into
the info fields), and answers with the info material that fits no field (an empty payload in
the common step). It beats its heartbeat while it waits and before each request, so the
supervisor tells a hung env from an idle trainer.

The common step never reaches Python: the group's native stepper waits for requests, steps the
envs, stores their results and answers (``_core.GroupStepper.serve``), and hands a request
over only when it needs Python (another command, an env whose result is not the common case).

An exception from an env ends the process as in the rollout loop (its traceback in the control
block, exit status 1): the supervisor restarts the worker or gives up, and the trainer reports
the crash. ``call``/``get_attr``/``set_attr``/``apply`` errors are answered instead (the
trainer raises them), as is an answer that cannot be pickled or is too large for the mailbox.
A restarted generation starts with every episode ended, which is what the trainer told the
user (``truncated``) when it saw the restart.
"""

from __future__ import annotations

import traceback
from typing import Any

import numpy as np

from pycollect._steps.group import EnvGroup
from pycollect._workers import step_protocol as protocol
from pycollect._workers.spec import StepLoop, WorkerSpec, info_arrays, step_fields
from pycollect.envs.backend import EnvBackend
from pycollect.envs.pool import source_for
from pycollect.exceptions import PyCollectError, TransportError

__all__ = ["serve_steps"]

_WAIT_SLICE_S = 0.25  # how long one wait for a request lasts before the next heartbeat


def serve_steps(segment: Any, control: Any, worker: int, generation: int, spec: WorkerSpec[StepLoop]) -> None:
    """Build this worker's envs and answer the trainer's requests until shutdown or CLOSE."""
    channel = segment.step_channel(worker)
    channel.skip_pending()  # a request left for a dead predecessor is never served
    loop = spec.loop
    config = loop.config
    k = config.envs_per_worker
    fields = step_fields(loop)

    def rows(role: str, writable: bool) -> list[np.ndarray]:
        # slot_view is [K, 1, *shape]: a vector env's segment holds one step
        return [np.asarray(segment.slot_view(name, 0, worker, writable=writable))[:, 0] for name, _, _ in fields[role]]

    reward, terminated, truncated = rows("flags", writable=True)
    actions = rows("action", writable=False)
    envs: list[Any] = []
    source = source_for(spec.env_source, worker)  # a pool's worker: its own env
    try:
        envs.extend(source.make_envs(k))
        group = EnvGroup(
            envs,
            config.autoreset_mode,
            loop.observation,
            loop.action,
            rows("observation", writable=True),
            reward,
            terminated,
            truncated,
            rows("final", writable=True) if config.final_observations else None,
            env_name=source.describe(),
            env_offset=worker * k,
            worker=worker,
            info_keys=config.info_keys,
            max_episode_steps=config.max_episode_steps,
            info=info_arrays(loop, lambda role: rows(role, writable=True)),
        )
    except BaseException:
        for env in envs:
            env.close()
        raise
    if generation > 1:
        group.end_every_episode()  # the trainer reported them truncated when it saw the restart
    control.state = "running"
    try:
        _serve(channel, control, generation, group, actions, segment, config.metrics, source.backend)
    finally:
        group.close()


def _serve(
    channel: Any,
    control: Any,
    generation: int,
    group: EnvGroup,
    actions: list[np.ndarray],
    segment: Any,
    metered: bool,
    backend: EnvBackend,
) -> None:
    """Answer requests until shutdown or CLOSE: the common step natively, the rest here.

    ``metered``: count each step's time and frames in the worker's control block
    (pycollect.metrics); ``backend``: the env backend, which saves and restores the envs' states.
    """
    per_env = group.action.per_env

    def step_actions(start: int, stop: int) -> list[Any]:
        # Copies: an env may keep its action, and the trainer rewrites the rows next step.
        return per_env([rows[start:stop].copy() for rows in actions])

    native = group.native
    while True:
        if native is not None:
            served, handed = native.serve(channel, control, generation, step_actions, metered)
            group.count_native_steps(served)
            if handed is None:
                return  # the segment shuts down
            _seq, command, addressed, payload, left = handed
        else:
            control.beat()  # waiting for the trainer is not a hang
            request = channel.wait_request(timeout_s=_WAIT_SLICE_S)
            if request is None:
                if segment.is_shutdown:
                    return
                continue
            _seq, command, addressed, payload = request
            left = None
            if addressed != generation:
                channel.respond(protocol.NOT_MINE)
                continue
        control.beat()
        if command == protocol.STEP:
            if left is not None:  # stepped natively: finish the envs it handed back
                material = group.finish_step(left)
            else:
                start, stop = _step_range(payload, group.num_envs)
                if metered:
                    control.start_metering(stop - start)
                    control.begin_step()
                material = group.step([rows[start:stop].copy() for rows in actions], start, stop)
                if metered:
                    control.end_step()
            _answer(channel, material, "the infos of a step")
        elif command == protocol.RESET:
            seeds, options, mask = protocol.loads(payload)
            _answer(channel, group.reset(seeds, options, mask), "the infos of a reset")
        elif command == protocol.CLOSE:
            channel.respond(protocol.OK)
            return
        else:
            _answer_call(channel, group, command, payload, backend)


def _step_range(payload: bytes, count: int) -> tuple[int, int]:
    """The envs a STEP request names: all (no payload) or ``start..stop`` (:func:`~.step_protocol.step_range`)."""
    if not payload:
        return 0, count
    return protocol.read_step_range(payload)


def _answer(channel: Any, value: Any, what: str) -> None:
    """Answer OK with ``value``; one that cannot be pickled, or too large for the mailbox, is answered as an error.

    The error is raised in the trainer; the worker serves on (a ``get_attr`` of an attribute
    that cannot be pickled must not cost the worker its envs).
    """
    try:
        payload = protocol.dumps(value)
    except Exception as exc:
        error = TransportError(
            f"{what} of worker {channel.worker} cannot be pickled to go to the trainer: {type(exc).__name__}: {exc}"
        )
        channel.respond(protocol.CALL_FAILED, _exception_payload(error))
        return
    if len(payload) > channel.mailbox_bytes:
        error = TransportError(
            f"{what} of worker {channel.worker} take {len(payload):,} bytes pickled, more than the "
            f"{channel.mailbox_bytes:,} bytes of its mailbox"
        )
        channel.respond(protocol.CALL_FAILED, _exception_payload(error))
        return
    channel.respond(protocol.OK, payload)


def _answer_call(channel: Any, group: EnvGroup, command: int, payload: bytes, backend: EnvBackend) -> None:
    """Serve a ``call``/``get_attr``/``set_attr``/``apply`` or a state's save or restore.

    Its result, or the exception it raised, goes back.
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
        elif command == protocol.GET_STATE:
            result = group.env_states(backend.get_state, arguments)
        elif command == protocol.SET_STATE:
            states, indices = arguments
            group.load_env_states(states, backend.set_state, indices)
            result = None
        else:
            raise TransportError(f"worker {channel.worker} got unknown command {command}")
    except Exception as exc:
        channel.respond(protocol.CALL_FAILED, _exception_payload(exc))
        return
    _answer(channel, result, "the results of a call")


def _exception_payload(exc: Exception) -> bytes:
    """``exc`` pickled with its traceback text, or (unpicklable) a PyCollectError that says what it was."""
    trace = "".join(traceback.format_exception(exc))
    try:
        return protocol.dumps((exc, trace))
    except Exception:
        return protocol.dumps((PyCollectError(f"{type(exc).__name__}: {exc}"), trace))
