"""A vector env's worker: ``K`` envs, stepped one request at a time from the trainer's step channel.

The local work of a :class:`~.spec.StepLoop` worker (see :mod:`.serve`, the loop every worker
runs; the other local work, :mod:`.rollouts`, fills rollout slots with a policy inside the
worker). Here the trainer drives: it writes actions into this worker's rows of the action
fields and posts a request (see :mod:`.step_protocol`); the worker steps its
:class:`~pycollect._steps.group.EnvGroup` (gymnasium's autoreset semantics), whose results go
straight into its rows of the result fields in the segment (info entries of a fixed kind into
the info fields), and answers with the info material that fits no field (an empty payload in
the common step). It beats its heartbeat while it waits and before each request, so the
supervisor tells a hung env from an idle trainer.

The common step never reaches Python: the group's native stepper waits for requests, steps the
envs, stores their results and answers (``_core.GroupStepper.serve``), and hands a request
over only when it needs Python (another command, an env whose result is not the common case).

An exception from an env ends the process (its traceback in the control block, exit status 1):
the supervisor restarts the worker or gives up, and the trainer reports the crash. A restarted
generation starts with every episode ended, which is what the trainer told the user
(``truncated``) when it saw the restart.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pycollect._steps.group import EnvGroup
from pycollect._workers import step_protocol as protocol
from pycollect._workers.commands import answer, take
from pycollect._workers.spec import StepLoop, WorkerSpec, info_arrays, step_fields
from pycollect.envs.pool import source_for

__all__ = ["StepWork"]

_WAIT_SLICE_S = 0.25  # how long one wait for a request lasts before the next heartbeat


class StepWork:
    """A vector env worker's envs, stepped as the trainer's requests ask (see the module doc).

    Args:
        segment: The segment the worker attached to.
        control: The worker's control block.
        worker: The worker's index.
        generation: The worker's generation (1, then +1 at each restart).
        spec: What the worker was told.
    """

    serves_states = True

    def __init__(self, segment: Any, control: Any, worker: int, generation: int, spec: WorkerSpec[StepLoop]) -> None:
        loop = spec.loop
        config = loop.config
        k = config.envs_per_worker
        fields = step_fields(loop)

        def rows(role: str, writable: bool) -> list[np.ndarray]:
            # slot_view is [K, 1, *shape]: a vector env's segment holds one step
            return [
                np.asarray(segment.slot_view(name, 0, worker, writable=writable))[:, 0] for name, _, _ in fields[role]
            ]

        reward, terminated, truncated = rows("flags", writable=True)
        self._actions = rows("action", writable=False)
        self._control, self._generation, self._metered = control, generation, config.metrics
        envs: list[Any] = []
        source = source_for(spec.env_source, worker)  # a pool's worker: its own env
        self.backend = source.backend
        try:
            envs.extend(source.make_envs(k))
            self.group = EnvGroup(
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
            self.group.end_every_episode()  # the trainer reported them truncated when it saw the restart
        per_env = self.group.action.per_env
        actions = self._actions

        def step_actions(start: int, stop: int) -> list[Any]:
            # Copies: an env may keep its action, and the trainer rewrites the rows next step.
            return per_env([rows[start:stop].copy() for rows in actions])

        self._step_actions = step_actions
        control.state = "running"

    def next_request(self, channel: Any) -> tuple[int, bytes, Any] | None:
        """Serve common steps natively (where the group can) until a request needs Python; wait for it."""
        native = self.group.native
        if native is not None:
            served, handed = native.serve(channel, self._control, self._generation, self._step_actions, self._metered)
            self.group.count_native_steps(served)
            if handed is None:
                return None  # the segment shuts down
            _seq, command, _addressed, payload, left = handed
            return command, payload, left
        self._control.beat()  # waiting for the trainer is not a hang
        taken = take(channel, self._generation, channel.wait_request(timeout_s=_WAIT_SLICE_S))
        return None if taken is None else (*taken, None)

    def serve_step(self, channel: Any, command: int, payload: bytes, left: Any) -> None:
        """Step (all the envs, or the range a payload names) or reset, and answer with the infos."""
        group, control = self.group, self._control
        if command == protocol.RESET:
            seeds, options, mask = protocol.loads(payload)
            answer(channel, group.reset(seeds, options, mask), "the infos of a reset")
            return
        if left is not None:  # stepped natively: finish the envs it handed back
            material = group.finish_step(left)
        else:
            start, stop = _step_range(payload, group.num_envs)
            if self._metered:
                control.start_metering(stop - start)
                control.begin_step()
            material = group.step([rows[start:stop].copy() for rows in self._actions], start, stop)
            if self._metered:
                control.end_step()
        answer(channel, material, "the infos of a step")

    def close(self) -> None:
        """Close the envs."""
        self.group.close()


def _step_range(payload: bytes, count: int) -> tuple[int, int]:
    """The envs a STEP request names: all (no payload) or ``start..stop`` (:func:`~.step_protocol.step_range`)."""
    if not payload:
        return 0, count
    return protocol.read_step_range(payload)
