"""A collector's rollout worker: ``K`` envs and the policy stepped ``T`` times into each free ring slot.

The local work of a :class:`~.spec.RolloutLoop` worker (see :mod:`.serve`, the loop every worker
runs; the other local work, :mod:`.steps`, steps a vector env's envs as the trainer asks). The
worker builds its envs and policy, and then, each turn of the loop that finds no request from
the trainer waiting: claim a free slot of its ring (a request posted meanwhile ends the wait),
take newer policy weights if the weight-sync scheme has any, step every environment ``T``
times writing transitions straight into the slot (:class:`~pycollect._rollout.runner.EnvRunner`),
commit it. Requests (``Collector.env_call`` and its kin) are so served between two rollouts,
never during one. It beats a heartbeat every step (and while it waits for a free slot), so the
supervisor can tell a hung worker from a busy one. With snapshots on, it pickles its state
after a rollout into the slot's snapshot area (see :mod:`.snapshots`); a restarted generation
under ``recovery="replay"`` restores the last one and steps again what was stepped after it.

With a random policy nothing here imports torch.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pycollect._workers.commands import refuse, take
from pycollect.exceptions import TransportError

if TYPE_CHECKING:
    from pycollect._steps.group import EnvGroup
    from pycollect._workers.spec import RolloutLoop, WorkerSpec

__all__ = ["RolloutWork"]

_CLAIM_SLICE_S = 0.25  # how long one wait for a free slot lasts before the next heartbeat


class RolloutWork:
    """A collector worker's envs and policy, filling its ring's slots with rollouts (see the module doc).

    Built once per worker process: envs, policy, runner, and the state it starts from (a
    checkpoint's, or its predecessor's under ``recovery="replay"``). Then each
    :meth:`next_request` with no request waiting fills one slot.

    Args:
        segment: The segment the worker attached to.
        control: The worker's control block.
        worker: The worker's index.
        generation: The worker's generation (1, then +1 at each restart).
        spec: What the worker was told.
    """

    serves_states = False  # its envs' states go with the rollout they belong to (snapshots)

    def __init__(self, segment: Any, control: Any, worker: int, generation: int, spec: WorkerSpec[RolloutLoop]) -> None:
        log = logging.getLogger("pycollect.worker")
        import numpy as np

        from pycollect._rollout.action_source import action_source
        from pycollect._rollout.runner import EnvRunner
        from pycollect._rollout.seeding import action_rng, env_seeds, torch_seed, traj_id_start
        from pycollect._workers.spec import field_name
        from pycollect.envs.pool import source_for

        loop = spec.loop
        placement = loop.placements[worker]
        if not placement.cuda:
            os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before anything can create a CUDA context
        config = loop.config
        k, w = config.envs_per_worker, config.num_workers
        self._segment, self._control, self._worker, self._config = segment, control, worker, config
        self._envs: list[Any] = []
        envs = self._envs
        self._receiver = receiver = loop.weights
        try:
            source = source_for(spec.env_source, worker)  # a pool's worker has an env of its own
            self.backend = source.backend
            envs.extend(source.make_envs(k))
            specs = source.specs(envs[0])
            policy, weights = loop.load_policy()  # ``weights`` is the module the scheme updates
            self._policy, self._weights = policy, weights
            device = None
            if policy is not None:  # torch is only imported for a real policy
                import torch

                torch.set_num_threads(1)
                if (seed := torch_seed(config.seed, worker, generation)) is not None:
                    torch.manual_seed(seed)
                device = torch.device(placement.policy_device)
                if device.type == "cuda":
                    torch.cuda.set_device(device)  # what the policy allocates without a device goes there too
                if weights is not None and device.type != "cpu":
                    # In place: for a module policy ``weights`` is the policy itself; for a function
                    # policy (weights_from=) it is the module the function closes over, unpickled
                    # with it as one object, so the function sees its module moved too.
                    weights.to(device)

            def runner_of(streams: int) -> EnvRunner:
                # Every stream from the seed, worker and generation (see _rollout/seeding.py): worker
                # 0's first generation draws exactly what an in-process collector draws, and a
                # restarted generation draws fresh values, so it does not replay the episodes it
                # crashed in (but under recovery="replay", where it replays them on purpose).
                rng = action_rng(config.seed, worker, streams)
                actions = action_source(policy, specs, k, device, rng, config.exploration_type, config.inference_runner)
                return EnvRunner(
                    envs,
                    specs,
                    actions,
                    env_seeds(config.seed, k, worker, streams),
                    max_frames_per_traj=config.max_frames_per_traj,
                    traj_id_start=traj_id_start(worker, w, streams),
                    traj_id_stride=w,
                    env_name=source.describe(),
                    worker=worker,
                    info=loop.info,
                )

            replay = config.recovery == "replay"
            runner = runner_of(1 if replay else generation)
            self._slots = slots = [
                {
                    key: np.asarray(segment.slot_view(field_name(key), slot, worker, writable=True))
                    for key in loop.fields
                }
                for slot in range(segment.slots_per_worker)
            ]
            self._producer = producer = segment.producer(worker, generation)
            if receiver is not None:
                from pycollect.weights.scheme import ReceiverContext

                assert loop.weights_layout is not None
                receiver.attach(ReceiverContext(loop.weights_layout, worker, generation, segment))
            self._policy_version = 0  # the trainer's version of the weights in use
            self._frames_per_round = k * config.steps_per_batch * w
            self._applied = applied = _applied_weights(control, weights)
            applied(0)  # what it acts with until the first update
            self._rollouts, self._resumed = 0, False
            # The last snapshot (pickled), when it was taken, and the rollouts stepped since (see .snapshots).
            self._snapshot: bytes | None = None
            self._snapshot_at, self._replays = 0.0, 0
            if config.takes_snapshots or loop.initial_states is not None:
                saved = _state_to_restore(loop, segment, producer, worker, generation)
                if saved is not None:
                    try:
                        self._snapshot, self._replays = saved
                        self._rollouts = _restore(runner, self._snapshot, self.backend, worker)
                        if self._replays:  # step again, silently, what was stepped after the snapshot
                            scratch = {key: np.empty_like(array) for key, array in slots[0].items()}
                            if receiver is not None and (received := receiver.receive(weights)) is not None:
                                self._policy_version = received
                                applied(received)
                            for _ in range(self._replays):
                                runner.rollout(scratch, random_actions=self._random(), on_step=control.beat)
                                self._rollouts += 1
                        self._snapshot_at = time.monotonic()
                        self._resumed = generation > 1
                    except Exception as exc:
                        if generation == 1:
                            raise  # a checkpoint that cannot be restored is the user's error
                        log.warning("cannot replay the lost rollout, its trajectories are cut: %s", exc)
                        runner = runner_of(generation)
                elif replay and generation > 1 and producer.committed:
                    log.warning("no snapshot to replay the lost rollout from: its trajectories are cut")
                    runner = runner_of(generation)
                elif replay and generation > 1:
                    self._resumed = True  # nothing was delivered yet: it replays from its predecessor's start
            self._runner = runner
            if generation > 1:
                control.restarted(self._resumed)  # counted either way: stats() says which restarts lost nothing
            control.state = "running"
            control.start_metering(k)  # the steps' counts and times (pycollect.metrics)
            begin_step = control.begin_step if config.metrics else control.beat  # begin_step beats too
            self._after_policy = control.policy_done if config.metrics else None
            self._on_step: Callable[[], int | None] = begin_step
            if receiver is not None and config.apply_weights == "between_steps":

                def on_step() -> int | None:
                    begin_step()
                    version = receiver.receive(weights)  # between two policy calls, never in one
                    if version is not None:
                        applied(version)
                    return version

                self._on_step = on_step
        except BaseException:
            self.close()
            raise

    @property
    def group(self) -> EnvGroup:
        """The envs the runner steps, which env commands reach."""
        return self._runner.group

    def _random(self) -> bool:
        """Whether the next rollout takes random actions (no policy, or still in ``init_random_frames``)."""
        return self._policy is None or self._rollouts * self._frames_per_round < self._config.init_random_frames

    def next_request(self, channel: Any) -> tuple[int, bytes, Any] | None:
        """A request waiting now; else fill the next slot (a request ends the wait for one) and give ``None``."""
        generation = self._producer.generation
        taken = take(channel, generation, channel.poll_request())
        if taken is not None:
            return (*taken, None)
        control, producer = self._control, self._producer
        slot = None
        while slot is None:
            control.beat()  # waiting for the trainer to free a slot is not a hang
            slot = producer.claim(timeout_s=_CLAIM_SLICE_S, until_request=channel)
            if self._segment.is_shutdown:
                return None
            if slot is None and (taken := take(channel, generation, channel.poll_request())) is not None:
                return (*taken, None)
        self._fill(slot)
        return None

    def _fill(self, slot: int) -> None:
        """Step one rollout into ``slot`` (claimed), with its snapshot if snapshots are on, and commit it."""
        import numpy as np

        from pycollect._workers.snapshots import RESUMED, write_snapshot

        config, control, receiver = self._config, self._control, self._receiver
        # New weights are applied between rollouts (or steps), never during a policy call,
        # and as late as possible: right before the rollout that will use them.
        if receiver is not None:
            received = receiver.receive(self._weights)
            if received is not None:
                self._policy_version = received
                self._applied(received)
        runner = self._runner
        if config.reset_at_each_iter and self._rollouts > 0:
            runner.reset()
        self._policy_version = runner.rollout(
            self._slots[slot],
            random_actions=self._random(),
            on_step=self._on_step,
            policy_version=self._policy_version,
            after_policy=self._after_policy,
        )
        control.end_step()
        self._rollouts += 1
        if config.takes_snapshots:
            now = time.monotonic()
            if self._snapshot is None or now - self._snapshot_at >= config.snapshot_every_s:
                self._snapshot = _pickled_state(runner, self.backend, self._rollouts)
                self._snapshot_at, self._replays = now, 0
            else:
                self._replays += 1
            area = np.asarray(self._segment.snapshot_view(self._worker, slot, writable=True))
            write_snapshot(area, self._snapshot, self._replays, self._worker)
        # A restarted worker that restored its predecessor's state continues its trajectories.
        self._producer.commit(slot, RESUMED if self._resumed else 0)
        control.rollout_done()

    def serve_step(self, channel: Any, command: int, payload: bytes, left: Any) -> None:
        """Refused: a collector's worker steps its envs itself."""
        refuse(channel, TransportError(f"worker {self._worker} collects rollouts; it takes no step or reset requests"))

    def close(self) -> None:
        """Close the weights' receiver and the envs."""
        if self._receiver is not None:
            self._receiver.close()
            self._receiver = None
        envs, self._envs = self._envs, []
        for env in envs:
            env.close()


def _pickled_state(runner: Any, backend: Any, rollouts: int) -> bytes:
    """What the next rollout depends on, pickled (see :mod:`.snapshots`); torch's stream if torch runs."""
    from pycollect._workers.snapshots import pickle_state

    torch_state = None
    if "torch" in sys.modules:
        import torch

        torch_state = torch.get_rng_state().numpy().copy()
    return pickle_state({"runner": runner.snapshot(backend.get_state), "torch": torch_state, "rollouts": rollouts})


def _state_to_restore(
    loop: RolloutLoop, segment: Any, producer: Any, worker: int, generation: int
) -> tuple[bytes, int] | None:
    """The state a worker starts from (``None``: afresh).

    A first generation starts from the checkpoint's state, if it was given one. A restarted
    generation under ``recovery="replay"`` starts from the state after its ring's last rollout
    (or, before any, where its predecessor started); under ``"cut"`` afresh.
    """
    import numpy as np

    from pycollect._workers.snapshots import read_snapshot

    initial = loop.initial_states[worker] if loop.initial_states is not None else None
    if generation == 1:
        return initial
    if loop.config.recovery != "replay":
        return None  # cut: a restarted worker starts afresh
    if producer.committed:
        last = (producer.committed - 1) % producer.slots
        return read_snapshot(np.asarray(segment.snapshot_view(worker, last)))
    return initial  # it died before its first rollout: it starts where its predecessor did


def _restore(runner: Any, data: bytes, backend: Any, worker: int) -> int:
    """Restore a worker's state (envs, runner, random streams); the rollouts it had made."""
    from pycollect._workers.snapshots import load_snapshot

    state = load_snapshot(data, worker)
    runner.restore(state["runner"], backend.set_state)
    if state["torch"] is not None:
        import torch

        torch.set_rng_state(torch.from_numpy(state["torch"]))
    return int(state["rollouts"])


def _applied_weights(control: Any, weights: Any) -> Callable[[int], None]:
    """What reports each version of the weights applied, with their digest (nothing without weights).

    The trainer compares the digest with that of the weights it published for the version
    (``pycollect.weights.digest``); torch is imported only when there are weights.
    """
    if weights is None:
        return lambda version: None
    from pycollect.weights.digest import weights_digest
    from pycollect.weights.layout import module_weights

    def applied(version: int) -> None:
        control.weights_applied(version, weights_digest(module_weights(weights)))

    return applied
