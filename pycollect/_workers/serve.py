"""The one loop every worker runs: answer the trainer's requests, and between them do its local work.

The shape of gymnasium's ``AsyncVectorEnv`` worker: one loop takes each command from the
trainer (here through the worker's step channel, :mod:`.step_protocol`) and serves it. What a
worker does besides is its local work, built from its spec's loop:

* :class:`~.steps.StepWork` (a :class:`~.spec.StepLoop`: a vector env's worker, the central
  engine's too): ``STEP`` and ``RESET`` requests step its envs; nothing runs between requests,
  and the common step is served natively without reaching this loop.
* :class:`~.rollouts.RolloutWork` (a :class:`~.spec.RolloutLoop`: a collector's worker): while no
  request waits, it fills its ring's slots with rollouts of its policy, one per turn of the
  loop; a request waits at most for the rollout being stepped. ``STEP``/``RESET`` are refused
  (it steps its envs itself).

Every other command (``call``/``get_attr``/``set_attr``/``apply``, env states) is served the
same way for both, by :func:`~.commands.answer_command`; ``CLOSE`` ends the loop.
"""

from __future__ import annotations

from typing import Any, Protocol

from pycollect._steps.group import EnvGroup
from pycollect._workers import step_protocol as protocol
from pycollect._workers.commands import answer_command
from pycollect._workers.spec import RolloutLoop, WorkerSpec
from pycollect.envs.backend import EnvBackend

__all__ = ["LocalWork", "serve"]


class LocalWork(Protocol):
    """What a worker does besides answering commands, and what the commands reach.

    Attributes:
        backend: The env backend, which saves and restores the envs' states.
        serves_states: Whether the env-state commands are served (a vector env's worker).
    """

    backend: EnvBackend
    serves_states: bool

    @property
    def group(self) -> EnvGroup:
        """The worker's envs, which ``call``/``get_attr``/``set_attr``/``apply`` reach."""

    def next_request(self, channel: Any) -> tuple[int, bytes, Any] | None:
        """Do local work until a request for this generation arrives: ``(command, payload, left)``.

        ``None``: nothing yet (the loop asks again unless the segment shuts down). ``left``: what
        a native step handed over unfinished (see :meth:`serve_step`), else ``None``.
        """

    def serve_step(self, channel: Any, command: int, payload: bytes, left: Any) -> None:
        """Serve and answer a ``STEP`` or ``RESET`` request."""

    def close(self) -> None:
        """Close the envs (and whatever else the work holds)."""


def serve(segment: Any, control: Any, worker: int, generation: int, spec: WorkerSpec[Any]) -> None:
    """Build this worker's local work, then serve requests until shutdown or ``CLOSE``."""
    channel = segment.step_channel(worker)
    channel.skip_pending()  # a request left for a dead predecessor is never served
    work: LocalWork
    if isinstance(spec.loop, RolloutLoop):
        from pycollect._workers.rollouts import RolloutWork

        work = RolloutWork(segment, control, worker, generation, spec)
    else:
        from pycollect._workers.steps import StepWork

        work = StepWork(segment, control, worker, generation, spec)
    try:
        while True:
            request = work.next_request(channel)
            if request is None:
                if segment.is_shutdown:
                    return
                continue
            command, payload, left = request
            control.beat()
            if command == protocol.CLOSE:
                channel.respond(protocol.OK)
                return
            if command in (protocol.STEP, protocol.RESET):
                work.serve_step(channel, command, payload, left)
            else:
                answer_command(channel, work.group, command, payload, work.backend, serves_states=work.serves_states)
    finally:
        work.close()
