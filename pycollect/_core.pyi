"""Type stubs for the native module ``pycollect._core`` (built from rust/pycollect-py).

The shared-memory transport: a segment per collector, one SPSC ring of rollout slots per
worker, control blocks, a weights store and, when asked for, one step channel per worker. All blocking calls release the
GIL, wait in slices of at most 50 ms, run Python signal handlers between slices (so Ctrl-C
raises KeyboardInterrupt promptly), and return early (``None``) when the segment's shutdown
flag is set.
Every error is a :class:`pycollect.PyCollectError`, mapped in one place (the bindings'
``errors.rs``): a bad argument raises :class:`pycollect.ConfigError` (a ValueError) naming the
value; a segment of another magic, ABI or layout :class:`pycollect.LayoutMismatchError`; a
runtime failure of the transport (a system call, a corrupt slot, a publish timeout)
:class:`pycollect.TransportError`; a refused buffer export
:class:`pycollect.exceptions.BufferExportError`; worker processes that cannot be started or
stopped :class:`pycollect.exceptions.SupervisorError`.

No policy default lives here: every setting is a required argument (the defaults are in
Python). Wait methods take ``timeout_s=None``, meaning no deadline.

After ``os.fork()`` (without exec) the child's copies of these objects never act on what the
parent owns: :meth:`Supervisor.shutdown` returns an empty report and touches no worker,
:meth:`Segment.shutdown` sets no flag, :meth:`Segment.unlink_name` removes no name,
:meth:`Lease.release` gives no slot back, and dropping any of them does nothing beyond freeing
the child's copy.
"""

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, Protocol, TypeAlias, final

from typing_extensions import Buffer

__version__: str
ABI_VERSION: int

# The contract a worker process is started with (see :class:`Supervisor`).
CHILD_LIFELINE_FD: int
"""fd number of the lifeline in every worker (3)."""
CHILD_SEGMENT_FD: int
"""fd number of the segment in every worker (4)."""
ENV_WORKER: str
"""Environment variable with the worker's index ("PYCOLLECT_WORKER")."""
ENV_GENERATION: str
"""Environment variable with the worker's generation, 1 for the first start ("PYCOLLECT_GENERATION")."""
ENV_SEGMENT_FD: str
"""Environment variable with the segment's fd number ("PYCOLLECT_SEGMENT_FD")."""
ENV_LIFELINE_FD: str
"""Environment variable with the lifeline's fd number ("PYCOLLECT_LIFELINE_FD")."""
WORKER_ERROR_CAPACITY: int
"""Bytes of a worker's error text area (8192): :meth:`WorkerControl.write_error` stores at most
this many bytes of UTF-8 and drops the rest."""

# Step-channel commands (carried, never interpreted, by the transport) and statuses.
STEP_CMD_STEP: int
"""1: step the worker's envs with the actions in its action rows."""
STEP_CMD_RESET: int
"""2: reset the worker's envs (seeds and options in the payload)."""
STEP_CMD_CALL: int
"""3: call a method or get/set an attribute of the envs (pickled in the payload)."""
STEP_CMD_CLOSE: int
"""4: close the envs and stop serving."""
STEP_STATUS_OK: int
"""0: the request was served."""
STEP_STATUS_ERROR: int
"""1: serving the request failed (the payload says why)."""
STEP_STATUS_RESTARTED: int
"""2: the request was posted to a worker generation that died; its successor did not serve it
(:meth:`StepChannel.skip_pending`). Reserved: :meth:`StepChannel.respond` refuses it."""

# GroupStepper's autoreset modes (gymnasium's ``AutoresetMode``, numbered).
AUTORESET_NEXT_STEP: int
"""0: an env whose episode ended at its last step is reset instead of stepped."""
AUTORESET_SAME_STEP: int
"""1: an env whose episode ends is reset in the same step (its last observation in the final rows)."""
AUTORESET_DISABLED: int
"""2: never reset by the stepper (a collector's rollout resets its envs itself)."""

FieldDef: TypeAlias = tuple[str, str, tuple[int, ...]]
"""A :class:`pycollect.envs.Field` as the native layer takes it (Rust's ``layout::Field``):
(name: its key joined by ``/``, dtype name, per-step shape). dtype names: uint8 int8 int16 int32
int64 uint16 uint32 uint64 float16 float32 float64 bool bfloat16."""

@final
class Segment:
    """One collector's shared-memory segment (memfd; named fallback)."""

    @staticmethod
    def create(
        fields: Sequence[FieldDef],
        *,
        n_workers: int,
        envs_per_worker: int,
        steps: int,
        slots_per_worker: int,
        weights_capacity: int,
        weights_buffers: int,
        backing: Literal["auto", "memfd", "named"],
        mailbox_bytes: int = 0,
        snapshot_bytes: int = 0,
    ) -> Segment:
        """Create and map a segment of :func:`segment_bytes` of the same arguments.

        Every page is reserved and touched now (a full /dev/shm or memory cgroup fails here
        with TransportError, never later). Invalid or overflowing sizes raise ConfigError
        naming the value. ``mailbox_bytes > 0`` gives every worker a step channel whose
        mailbox holds that many bytes per direction (:meth:`step_channel`); 0 (the default)
        makes none, and the segment does not grow. ``snapshot_bytes > 0`` gives every rollout
        slot a snapshot area of that many bytes (:meth:`snapshot_view`).
        """
    @staticmethod
    def attach(fd: int, *, timeout_s: float, expected_layout_hash: int | None = None) -> Segment:
        """Attach to a segment whose fd this process inherited (the fd is dup'ed).

        Waits up to ``timeout_s`` for the creator to mark it ready.
        """
    @staticmethod
    def attach_named(name: str, *, timeout_s: float, expected_layout_hash: int | None = None) -> Segment: ...
    @property
    def fd(self) -> int: ...
    @property
    def name(self) -> str | None:
        """The /dev/shm name of a named segment until unlinked; None for memfd."""
    def unlink_name(self) -> None:
        """Remove the name of a named segment; a no-op for memfd and in a forked child."""
    @property
    def layout_hash(self) -> int: ...
    @property
    def n_workers(self) -> int: ...
    @property
    def envs_per_worker(self) -> int: ...
    @property
    def steps(self) -> int: ...
    @property
    def slots_per_worker(self) -> int: ...
    @property
    def total_len(self) -> int: ...
    @property
    def weights_capacity(self) -> int: ...
    @property
    def mailbox_bytes(self) -> int:
        """Bytes of each half of every worker's step-channel mailbox (0: no step channels)."""
    @property
    def address(self) -> int:
        """Base address of this process's mapping (for zero-copy checks)."""
    def fields(self) -> list[FieldDef]: ...
    def slot_view(self, field: str, slot: int, worker: int, *, writable: bool = False) -> SlotView:
        """View of one worker's rollout of ``field`` in ``slot``: shape [K, T, *shape]."""
    def batch_view(self, field: str, slot: int, *, writable: bool = False) -> SlotView:
        """View of ``field`` in ``slot`` for all workers at once: [n_workers*K, T, *shape].

        It is one contiguous block, so a sync-mode batch is a single view.
        """
    def producer(self, worker: int, generation: int) -> Producer:
        """The producing end of ``worker``'s data ring (one per process)."""
    def consumer(self, worker: int) -> Consumer: ...
    def worker_control(self, worker: int) -> WorkerControl: ...
    def weights_writer(self) -> WeightsWriter: ...
    def weights_reader(self, worker: int) -> WeightsReader: ...
    def step_channel(self, worker: int) -> StepChannel:
        """``worker``'s step channel; the same object on every call for this handle.

        Raises:
            ConfigError: The segment was created with ``mailbox_bytes=0``, or ``worker`` is
                out of range.
        """
    def shutdown(self) -> None:
        """Set the shutdown flag and wake every waiter (idempotent).

        Does nothing in a process forked from the one that created or attached this handle.
        """
    @property
    def is_shutdown(self) -> bool: ...
    @property
    def snapshot_bytes(self) -> int:
        """Bytes of each rollout slot's snapshot area (0: none)."""
    def snapshot_view(self, worker: int, slot: int, *, writable: bool = False) -> SlotView:
        """A slot's snapshot area: :data:`SNAPSHOT_HEADER` bytes, then :attr:`snapshot_bytes`.

        The length comes first (a little-endian u64); written before the slot is committed,
        read after it is popped.
        """
    def watch(self) -> Watch:
        """A read-only view of this segment's metrics and workers (what ``pycollect top`` reads)."""
    def count_batch(self, frames: int, wait_ns: int, lag_sum: int, lag_min: int, lag_max: int, dropped: int) -> None:
        """Trainer: a batch was delivered (0 frames: a stale rollout dropped, counted in ``dropped``)."""
    def count_steps(self, steps: int, frames: int) -> None:
        """Trainer of a vector env, whose batches are steps."""
    def count_publish(self, version: int, size: int, ns: int) -> None:
        """Trainer: the weights of ``version``, ``size`` bytes, were published in ``ns`` nanoseconds."""
    def count_policy(self, ns: int) -> None:
        """Trainer: a policy call of its own (the central engine's) took ``ns`` nanoseconds."""
    def describe(self, text: str) -> None:
        """Trainer, once: what the collection is; at most 248 bytes of UTF-8 are kept."""

@final
class Watch:
    """Read-only access to a segment's control blocks: metrics, worker states, ring fill."""

    @staticmethod
    def open(fd: int) -> Watch:
        """Watch the segment behind ``fd`` (opened read-only; duplicated), mapping its control part only."""
    @property
    def creator_pid(self) -> int: ...
    @property
    def creator_start_time(self) -> int: ...
    @property
    def n_workers(self) -> int: ...
    @property
    def envs_per_worker(self) -> int: ...
    @property
    def slots_per_worker(self) -> int: ...
    @property
    def serves_steps(self) -> bool: ...
    def description(self) -> str: ...
    def trainer_totals(self) -> list[int]:
        """The trainer's totals, in the order of :data:`TRAINER_TOTALS`."""
    def worker_totals(self, worker: int) -> tuple[list[int], list[int]]:
        """A worker's totals (order of :data:`WORKER_TOTALS`) and its steps per latency bucket."""
    def worker_state(self, worker: int) -> tuple[str, int, int, int, int]:
        """A worker's state, pid (0: none), generation, last heartbeat (monotonic ns) and ring fill."""

SNAPSHOT_HEADER: int
WORKER_TOTALS: list[str]
TRAINER_TOTALS: list[str]

def weights_digest(parts: Sequence[Any]) -> int:
    """XXH3-64 of ``parts`` (bytes-like objects), hashed in order as one stream, without the GIL."""

def latency_buckets() -> list[tuple[int, int]]:
    """``[low, high)`` nanoseconds of each step-latency bucket."""

def monotonic_time_ns() -> int:
    """``CLOCK_MONOTONIC`` now, in nanoseconds (the clock heartbeats are stamped with)."""

def segment_bytes(
    fields: Sequence[FieldDef],
    *,
    n_workers: int,
    envs_per_worker: int,
    steps: int,
    slots_per_worker: int,
    weights_capacity: int,
    weights_buffers: int,
    mailbox_bytes: int = 0,
    snapshot_bytes: int = 0,
) -> int:
    """Exactly the ``total_len`` that :meth:`Segment.create` with these arguments would map.

    Only the layout is computed; nothing is allocated, so it is the check to make against the
    memory available before creating. Invalid or overflowing sizes raise ConfigError naming
    the value, as :meth:`Segment.create` does.
    """

def sweep_stale_segments() -> list[str]:
    """Remove named fallback segments whose creator is dead; return their names."""

def set_parent_death_signal(signum: int) -> None:
    """Arm ``PR_SET_PDEATHSIG`` with ``signum`` for this process (a worker forked by the fork server)."""

def guard_process_group() -> int | None:
    """Fork the guardian of this worker's process group; its pid (``None``: this process leads no group).

    When this process ends, however it ends, the guardian SIGKILLs the group, so what the
    worker's envs started in it cannot outlive the worker (a SIGKILLed trainer included).
    Raises SupervisorError if the fork fails.
    """

@final
class SlotView:
    """Buffer-protocol exporter over part of a segment.

    numpy reads it with ``np.asarray(view)``, torch with ``torch.from_numpy(np.asarray(view))``
    or ``torch.frombuffer``. It keeps the mapping alive, and the lease it came from (if any)
    unreleased, for as long as any export exists. bfloat16 fields are exported as uint16
    (format "H").
    """

    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def address(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def readonly(self) -> bool: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

@final
class Producer:
    @property
    def worker(self) -> int: ...
    @property
    def generation(self) -> int: ...
    @property
    def slots(self) -> int: ...
    @property
    def committed(self) -> int:
        """Slots committed so far by every generation (the last at index ``(committed - 1) % slots``)."""
    def claim(self, timeout_s: float | None = None, until_request: StepChannel | None = None) -> int | None:
        """Claim the next free slot (blocking up to timeout_s, GIL released).

        With ``until_request`` (this worker's step channel) the wait also ends as soon as a
        request is posted there (the trainer then calls :meth:`Consumer.wake_producer`).
        Returns the slot index, or None on timeout, shutdown or such a request.
        """
    def commit(self, slot: int, flags: int = 0) -> None:
        """Publish the claimed slot (stamped with seq and this generation)."""

@final
class Consumer:
    @property
    def worker(self) -> int: ...
    def available(self) -> int: ...
    def wake_producer(self) -> None:
        """Wake the worker if it waits for a free slot, to see a request just posted on its step channel."""
    def peek(self) -> tuple[int, int, int] | None:
        """``(seq, generation, flags)`` of the next committed slot, without popping it."""
    def try_pop(self) -> Lease | None: ...
    def pop(self, timeout_s: float | None = None) -> Lease | None:
        """Wait for the next committed slot (GIL released); None on timeout/shutdown."""

def wait_any(consumers: Sequence[Consumer], timeout_s: float | None = None, start: int = 0) -> int | None:
    """Block on the data doorbell until one of ``consumers`` has a committed slot.

    Returns its position in ``consumers`` (the search starts at ``start``), or None on
    timeout or shutdown.
    """

@final
class Lease:
    """A popped slot.

    It goes back to its producer on ``release()``, or when it and every view made from it
    have been garbage-collected, in the process that popped it (a forked child's copy gives
    nothing back).
    """

    @property
    def worker(self) -> int: ...
    @property
    def slot(self) -> int: ...
    @property
    def seq(self) -> int: ...
    @property
    def generation(self) -> int: ...
    @property
    def flags(self) -> int: ...
    @property
    def released(self) -> bool: ...
    def view(self, field: str, *, writable: bool = True) -> SlotView:
        """View of this worker's rollout of ``field`` ([K, T, *shape]); keeps the lease alive."""
    def release(self) -> None:
        """Return the slot now (idempotent).

        Views made from the lease stay memory-safe but their contents may be overwritten
        afterwards.
        """

@final
class StepChannel:
    """One worker's step channel: one request in flight at a time, answered by the worker.

    The trainer posts a request (a command, an argument and a payload of at most
    :attr:`mailbox_bytes` bytes, copied into the channel's mailbox in the segment) and rings
    the worker's bell; the worker takes it with :meth:`wait_request`, does the work and
    answers with :meth:`respond` (a status and a payload), which rings the segment's doorbell
    the trainer waits on (:func:`wait_answers`). No pipe and no pickling is involved: the
    payloads are bytes the caller chose. The same object serves both ends (the trainer uses
    ``post``, ``answered``, ``response``, ``pending``; the worker ``skip_pending``,
    ``wait_request``, ``respond``); each end is opened on first use and remembers the last seq
    it posted or answered, which is why a segment handle gives out one object per worker.

    Restarts: each request is for the worker generation in the worker's control block when it
    is posted (the supervisor begins a generation just before it starts the process), and the
    worker's end is for the generation there when it is first used. A worker never serves a
    request for an older generation: it answers it with :data:`STEP_STATUS_RESTARTED`, no
    payload and its own generation (at :meth:`skip_pending`, or when one arrives). A request
    posted for a generation whose process is still starting is served by it.
    Misuse (posting while a request is pending, answering nothing, a payload over the mailbox)
    raises ConfigError naming the worker and the values; seq words out of protocol
    TransportError.
    """

    @property
    def worker(self) -> int: ...
    @property
    def mailbox_bytes(self) -> int:
        """Bytes a request payload, and a response payload, may each take."""
    @property
    def pending(self) -> int | None:
        """Trainer: the seq of the latest request posted if it is still unanswered."""
    def post(self, command: int, arg: int, payload: Buffer = b"") -> int:
        """Trainer: post a request and ring the worker's bell; return its seq (1, 2, ...).

        ``payload`` is copied (bytes-like, at most :attr:`mailbox_bytes` bytes). The request is
        for the generation in the worker's control block now.

        Raises:
            ConfigError: The previous request is not answered yet (naming the worker and its
                seq), or the payload is larger than the mailbox (naming both sizes).
        """
    def answered(self, seq: int) -> bool:
        """Trainer: whether request ``seq`` has been answered."""
    def response(self) -> tuple[int, int, bytes]:
        """Trainer: ``(generation, status, payload)`` of the answer to the latest request.

        ``generation`` is the answering worker's (from its control block), so the trainer can
        tell a restarted worker's answer; status :data:`STEP_STATUS_RESTARTED` means the
        request was never served.

        Raises:
            ConfigError: Nothing was posted, or the latest request is not answered yet.
        """
    def wait_request(self, timeout_s: float | None = None) -> tuple[int, int, int, bytes] | None:
        """Worker: take the next request, waiting up to ``timeout_s`` (None: no deadline).

        Spins briefly, then sleeps on the worker's bell, with the GIL released in slices
        (Ctrl-C raises KeyboardInterrupt). Returns ``(seq, command, arg, payload)``, or None on
        timeout or shutdown. Answer it with :meth:`respond` before taking the next one. A
        request for an older generation is answered RESTARTED on the way, never returned.

        Raises:
            ConfigError: A request is being served (answer it first).
            TransportError: A request is for a newer generation (this process was replaced),
                or the channel is corrupt.
        """
    def poll_request(self) -> tuple[int, int, int, bytes] | None:
        """Worker: take the next request if one is posted, never waiting; as :meth:`wait_request` otherwise.

        Raises:
            ConfigError: A request is being served (answer it first).
            TransportError: A request is for a newer generation (this process was replaced).
        """
    def respond(self, status: int, payload: Buffer = b"") -> int:
        """Worker: answer the request being served; return its seq.

        The answer is stamped with this end's generation (the one in the worker's control block
        when the worker's end was first used: the one the supervisor started the process as)
        and rings the segment's doorbell.

        Raises:
            ConfigError: No request is being served, ``status`` is
                :data:`STEP_STATUS_RESTARTED`, or the payload is larger than the mailbox
                (naming both sizes; the request stays served, so a smaller answer may follow).
        """
    def skip_pending(self) -> int | None:
        """Worker, first thing in a new generation: answer a request left for a dead predecessor.

        A pending request for an older generation is answered with
        :data:`STEP_STATUS_RESTARTED`, no payload and this generation, and never served (the
        envs it was meant for are gone). Returns its seq, or None when there was none (a
        request for this generation stays pending, for :meth:`wait_request`).
        """

class StepRequests:
    """Every worker's step channel of one segment handle, driven together by the trainer.

    A synchronous step of a vector env in three calls: :meth:`post_all`, :meth:`wait_all`,
    :meth:`unusual` (which returns only the answers that say more than "done"). The channels'
    trainer ends are the :class:`StepChannel` objects' own: requests posted here and through a
    channel are one sequence.
    """

    def __init__(self, channels: Sequence[StepChannel]) -> None:
        """Drive ``channels``, the step channels of workers ``0..N`` of one segment handle, in order.

        Raises:
            ConfigError: No channel, or channel ``w`` is not worker ``w``'s of the first one's handle.
        """
    def any_pending(self) -> bool:
        """Whether any worker has a request that is not answered yet."""
    def post_all(
        self,
        command: int,
        generations: Sequence[int],
        payload: bytes | None = None,
        workers: Sequence[int] | None = None,
    ) -> None:
        """Post ``command`` (with ``payload``, the same for all) to every worker (or those of ``workers``).

        ``generations[w]`` is the request's argument for worker ``w`` (the generation the
        trainer means it for); ``workers``: ascending indices, each once.

        Raises:
            TransportError: The previous request of a worker it posts to is unanswered (nothing
                is posted), or the payload is larger than the mailbox.
        """
    def seqs(self) -> list[int]:
        """The seq of the latest request posted to each worker (0: none)."""
    def wait_all(self, *, timeout_s: float | None) -> bool:
        """Wait (GIL released, sliced, Ctrl-C raises) until every latest request is answered.

        Returns ``False`` when ``timeout_s`` passed first or the segment shut down.
        """
    def unusual(self, workers: Sequence[int] | None = None) -> list[tuple[int, int, int, bytes]]:
        """Each latest answer that is not "OK, no payload": ``(worker, generation, status, payload)``.

        Of every worker, or of ``workers``; in worker order.
        """
    def oldest_answered(
        self, queue: Sequence[int], count: int, *, timeout_s: float | None
    ) -> tuple[list[int], list[tuple[int, int, int, bytes]]]:
        """A pool's receive: the first ``count`` workers of ``queue`` that have answered.

        ``queue``: the workers with a request in flight, the longest waiting first. Returns
        those taken in queue order, with the answers among them that are not "OK, no payload"
        (as :meth:`unusual` gives them). Waits (GIL released, sliced, Ctrl-C raises) until
        ``count`` have answered; if ``timeout_s`` passes first, or the segment shuts down,
        returns ``([], [])`` (nothing is taken: a later call finds the same answers).

        Raises:
            ConfigError: ``queue`` names a worker twice or one out of range, or ``count`` is 0
                or more than ``len(queue)``.
        """

def wait_answers(
    channels: Sequence[StepChannel], seqs: Sequence[int], *, timeout_s: float | None, any: bool = False
) -> list[int]:
    """Wait for answers: ``channels[i]`` to request ``seqs[i]``, all of them or (``any``) one.

    Returns the positions of the answered ones, in order. Sleeps on the segment's doorbell
    (spin briefly, then futex) with the GIL released in slices; Ctrl-C raises
    KeyboardInterrupt. On timeout (``timeout_s``; None: no deadline) or shutdown it returns the
    positions answered by then, so fewer than asked for (possibly none).

    Raises:
        ConfigError: No channel, not one seq per channel, or channels of different segment
            handles.
    """

@final
class WorkerControl:
    """A worker's control block: state, pid, generation, heartbeat, error text."""

    @property
    def worker(self) -> int: ...
    state: str
    """"empty", "starting", "running", "exiting" or "failed"."""
    pid: int
    @property
    def generation(self) -> int: ...
    def begin_generation(self) -> int: ...
    def beat(self) -> None:
        """Record a heartbeat now (monotonic clock)."""
    @property
    def last_heartbeat_ns(self) -> int: ...
    @property
    def heartbeats(self) -> int: ...
    def write_error(self, text: str) -> int:
        """Store ``text`` (e.g. a traceback) as UTF-8; return the number of bytes stored.

        At most :data:`WORKER_ERROR_CAPACITY` bytes are stored: a longer text keeps its head
        and loses the rest, cut before the first character that would not fit whole, so the
        stored bytes are always valid UTF-8 (a cut never splits a character). Lone surrogates
        are stored as U+FFFD. Callers that want the end of a long traceback truncate first.
        """
    def read_error(self) -> str | None:
        """The stored text, or None if empty; bytes torn by a concurrent write read as U+FFFD."""
    def start_metering(self, frames_per_step: int) -> None:
        """Metering, once before stepping: how many frames one step makes."""
    def begin_step(self) -> None:
        """A step begins now (ending the open one); also a heartbeat. The time since the last step is waiting."""
    def policy_done(self) -> None:
        """The open step's policy call ended now."""
    def end_step(self) -> None:
        """The open step (if any) ends now."""
    def rollout_done(self) -> None:
        """A rollout was handed over."""
    def restarted(self, replayed: bool) -> None:
        """A restarted generation starts: it restored its predecessor's state, or starts afresh (a cut)."""
    def weights_applied(self, version: int, digest: int) -> None:
        """The weights of ``version``, whose bytes hash to ``digest`` (:func:`weights_digest`), were applied."""
    def applied_weights(self) -> tuple[int, int] | None:
        """The version and digest of the weights applied last, as a consistent pair (None before any)."""

@final
class WeightsWriter:
    @property
    def capacity(self) -> int: ...
    @property
    def buffers(self) -> int:
        """Number of buffers in the store."""
    def publish(self, data: Buffer, timeout_s: float) -> int:
        """Copy ``data`` into a free buffer (GIL released) and publish; returns the version.

        Waits up to ``timeout_s`` for a buffer no reader holds (TransportError after that).
        A worker that dies while reading holds no buffer once its supervisor has reaped it.
        """
    def reserve(self, nbytes: int, timeout_s: float) -> SlotView:
        """Reserve a free buffer and return a writable view of its first ``nbytes`` bytes.

        Fill it, then :meth:`commit` (or :meth:`abandon`); do not write it afterwards. Waits
        up to ``timeout_s`` for a buffer no reader pins (TransportError after that).
        """
    def commit(self) -> int:
        """Publish the reserved buffer; returns the new version."""
    def abandon(self) -> None:
        """Give the reserved buffer back unpublished (no-op without one)."""
    def populate(self) -> None:
        """Write zeros over every buffer, so later publishes do not page-fault; before any publish."""
    @property
    def latest_version(self) -> int: ...

@final
class WeightsReader:
    @property
    def latest_version(self) -> int: ...
    @property
    def pinned_version(self) -> int | None:
        """The version this reader holds pinned, or None."""
    def read_into(self, out: Buffer) -> tuple[int, int] | None:
        """Copy the latest weights into the writable buffer ``out``; (version, nbytes) or None."""
    def pin_latest(self) -> tuple[int, SlotView] | None:
        """Pin the latest weights: (version, read-only view of their bytes), or None if none yet.

        The buffer is not reused while pinned; the pin lasts until :meth:`unpin` or the next
        ``pin_latest`` (this reader's only pin moves).
        """
    def unpin(self) -> None:
        """Release the pin (no-op without one)."""
    def protect(self, entries: list[tuple[int, int, str]], other: str) -> None:
        """Map every weights buffer read-only in this process, for the rest of its life.

        Only for a process that never writes weights through this segment handle (a worker).
        A write into a buffer then faults: the SIGSEGV handler installed here (once per
        process) writes the message of the entry ``(start, end, message)`` whose byte range
        inside a buffer holds the address (else ``other``) into this reader's worker error
        text and onto stderr, marks the worker failed and hands the fault to the previous
        disposition (death by SIGSEGV, after Python's faulthandler if enabled). Other faults
        only meet the previous disposition.

        Raises:
            ConfigError: The buffers are not aligned to this machine's pages, or this process
                already protects a store.
            OSError: ``sigaction`` or ``mprotect`` failed.
        """

WorkerEventKind: TypeAlias = Literal["started", "exited", "spawn_failed", "restarting", "stopped", "gave_up"]
WorkerState: TypeAlias = Literal["running", "backingoff", "stopped", "gaveup", "shutdown"]
ExitReason: TypeAlias = Literal["exit", "signal", "hung"]
EndingKind: TypeAlias = Literal["not_running", "exited", "terminated", "killed", "unreaped"]

@final
class WorkerExit:
    """How one generation of a worker ended."""

    @property
    def generation(self) -> int: ...
    @property
    def pid(self) -> int:
        """Its pid (already reaped: do not signal it)."""
    @property
    def reason(self) -> ExitReason:
        """Why it is considered ended.

        exit: it ended by itself; signal: a signal the supervisor did not send; hung: its
        heartbeat stopped and the supervisor killed it.
        """
    @property
    def code(self) -> int | None:
        """Exit status, if it exited."""
    @property
    def signal(self) -> int | None:
        """Signal number, if a signal ended it."""

@final
class WorkerEvent:
    """One change in a worker's life, in the order it happened.

    Right after every ``exited`` comes what follows from it: ``restarting`` (a restart is
    scheduled), ``stopped`` (it ended cleanly and the restart policy, transient or never, does
    not restart it: it stays down for good) or ``gave_up``; after a ``spawn_failed``,
    ``restarting`` or ``gave_up``. Which optional fields are set depends on
    ``kind``: ``pid`` (started, exited), ``exit`` (exited), ``error`` (spawn_failed),
    ``after_s`` (restarting), ``restarts`` (gave_up), ``launched_by`` and ``fallback``
    (started); ``stopped`` sets none.
    """

    @property
    def kind(self) -> WorkerEventKind: ...
    @property
    def worker(self) -> int: ...
    @property
    def generation(self) -> int:
        """The generation concerned.

        For restarting, the generation it will get; for stopped, the generation that ended.
        """
    @property
    def pid(self) -> int | None: ...
    @property
    def exit(self) -> WorkerExit | None: ...
    @property
    def error(self) -> str | None:
        """Why the spawn failed."""
    @property
    def after_s(self) -> float | None:
        """Backoff before the restart."""
    @property
    def restarts(self) -> int | None:
        """Restarts of this worker in total, when the policy gave up."""
    @property
    def launched_by(self) -> Literal["fork_server", "exec"] | None:
        """How a started process was started: forked by the fork server, or fork+exec."""
    @property
    def fallback(self) -> str | None:
        """Why a started process was exec'd although a fork server was configured."""

@final
class WorkerStats:
    """A snapshot of one worker."""

    @property
    def worker(self) -> int: ...
    @property
    def state(self) -> WorkerState: ...
    @property
    def pid(self) -> int | None:
        """Pid of the running process, if one runs."""
    @property
    def generation(self) -> int:
        """Current (or last) generation; the first is 1."""
    @property
    def restarts(self) -> int: ...
    @property
    def last_exit(self) -> WorkerExit | None:
        """How the previous generation ended."""
    @property
    def last_error(self) -> str | None:
        """The error text (type, message, traceback) the worker last wrote, if any."""

@final
class WorkerEnding:
    """How one worker ended during :meth:`Supervisor.shutdown`."""

    @property
    def worker(self) -> int: ...
    @property
    def generation(self) -> int: ...
    @property
    def pid(self) -> int | None:
        """Pid of the process that was running at shutdown, if any."""
    @property
    def ending(self) -> EndingKind:
        """How it ended.

        not_running, exited (within the grace period), terminated (after SIGTERM), killed
        (after SIGKILL) or unreaped (still not reaped after SIGKILL).
        """
    @property
    def code(self) -> int | None: ...
    @property
    def signal(self) -> int | None: ...

class _Supervision(Protocol):
    """What :class:`Supervisor` reads from its ``supervision`` (a ``pycollect.SupervisionConfig``)."""

    @property
    def restart(self) -> str: ...  # "permanent" | "transient" | "never"
    @property
    def max_restarts(self) -> int: ...
    @property
    def restart_window_s(self) -> float: ...
    @property
    def backoff_initial_s(self) -> float: ...
    @property
    def backoff_max_s(self) -> float: ...
    @property
    def startup_timeout_s(self) -> float: ...
    @property
    def heartbeat_timeout_s(self) -> float: ...
    @property
    def check_interval_s(self) -> float: ...
    @property
    def shutdown_grace_s(self) -> float: ...
    @property
    def term_timeout_s(self) -> float: ...

@final
class Supervisor:
    """The worker processes of one segment: started in parallel, watched, restarted, stopped.

    Each child runs ``argv`` with ``env`` plus :data:`ENV_WORKER`, :data:`ENV_GENERATION`,
    :data:`ENV_SEGMENT_FD` (the segment at :data:`CHILD_SEGMENT_FD`), :data:`ENV_LIFELINE_FD`
    (the lifeline at :data:`CHILD_LIFELINE_FD`) and every ``(our_fd, child_fd)`` of
    ``pass_fds``, in its own process group with a parent-death signal. ``supervision`` (a
    :class:`pycollect.SupervisionConfig`) is read attribute by attribute; its defaults live
    there only, and its values are checked again here. Once a generation has ended and
    been reaped, the weights pin of its worker is cleared (before any backoff or restart), so a
    worker killed while reading weights never keeps a buffer from :meth:`WeightsWriter.publish`.
    """

    def __init__(
        self,
        segment: Segment,
        argv: Sequence[str],
        *,
        env: dict[str, str],
        pass_fds: Sequence[tuple[int, int]],
        supervision: _Supervision,
        fork_server: int | None = None,
    ) -> None: ...
    @property
    def workers(self) -> int: ...
    @property
    def supervision(self) -> dict[str, str | int | float]:
        """The settings it runs with, under ``SupervisionConfig``'s names (durations in seconds)."""
    def next_event(self, timeout_s: float) -> WorkerEvent | None:
        """The next event, waiting up to ``timeout_s`` (0: do not wait; GIL released).

        None when none came in time, or once the supervisor has shut down and every event was
        taken.
        """
    def stats(self) -> list[WorkerStats]:
        """One snapshot per worker, in index order."""
    def last_error(self, worker: int) -> str | None:
        """The error text (type, message, traceback) the worker last wrote, if any."""
    def shutdown(self, grace_s: float) -> list[WorkerEnding]:
        """Flag, ``grace_s`` to exit, SIGTERM to each group, SIGKILL, reap; how each worker ended.

        Idempotent: later calls return the same report. In a process forked from the one that
        started the supervisor it stops nothing and returns ``[]``.
        """

@final
class GroupStepper:
    """``K`` envs stepped with gymnasium's autoreset semantics, the common case natively (the one native stepper).

    The native side of :class:`pycollect._steps.group.EnvGroup` (a vector env's rows, one step
    column) and of a collector's rollout (:mod:`pycollect._rollout.runner`: ``[K, T]`` arrays,
    step ``t`` into column ``t``, ``DISABLED`` mode with the trajectory limit as
    ``max_episode_steps``). Per env it does what ``SyncVectorEnv`` does in the autoreset mode
    (``NEXT_STEP`` resets an env that ended at its last step instead of stepping it;
    ``SAME_STEP`` resets an env whose episode ends, or reaches ``max_episode_steps``, in the same
    step, its last observation in the final rows and its info in the final info fields;
    ``DISABLED`` resets nothing, and flags an env that reaches ``max_episode_steps`` as ended,
    truncated), writing each result that is the common case (observation leaves
    the native store takes, a ``float`` reward, ``bool`` flags, an info whose kept entries all
    fit the info fields) into the rows, and handing every other env back with its raw result.
    ``ended`` and ``lengths`` are shared with the Python side.

    Every per-step array has ``T`` step columns (``steps_per_row``): env ``i``'s frame at column
    ``t`` is frame ``i * T + t`` of its leaf's rows, its reward and flags element ``t * K + i``.
    """

    def __init__(self, spec: _StepperSpec) -> None:
        """Bind the envs' ``step`` and ``reset`` methods to the arrays they are stepped into: ``spec``'s attributes.

        ``spec`` (:class:`pycollect._steps.stepper.StepperSpec`): ``leaves``, ``(path, shape,
        dtype, itemsize)`` per observation leaf, ``path`` the Dict keys and Tuple indices
        leading to it (empty: the observation itself); ``rows`` (and ``finals``, exactly in
        ``SAME_STEP`` mode) one writable C-contiguous ``[K, T, *shape]`` array per leaf;
        ``rewards`` float64, ``terminated`` and ``truncated`` bool, each ``[T, K]``; ``ended``
        bool and ``lengths`` int64, each ``[K]``; ``T`` is ``steps_per_row``. ``mode``: one of
        :data:`AUTORESET_NEXT_STEP`, :data:`AUTORESET_SAME_STEP`, :data:`AUTORESET_DISABLED`.
        ``info_keys``: the entries kept (``None``: all). ``info_fields``: ``(key, kind, type or
        dtype, shape, itemsize, values, mask, final values, final mask)`` per field, each
        ``[K]``: an env's latest entries (:meth:`pycollect._steps.info_fields.InfoArrays.native_args`).

        Raises:
            ConfigError: An array that does not fit its role, an unknown mode or kind, an
                episode limit outside ``SAME_STEP`` mode.
        """
    def step(
        self, actions: Iterable[object], start: int = 0, stop: int | None = None, t: int = 0
    ) -> list[tuple[int, int, object]] | None:
        """Step envs ``start..stop`` (default: all) with ``actions``, one per env of the range, into step column ``t``.

        An env whose episode ended and that was not reset here gets its ``ended`` flag.

        Returns ``None`` when every env was stored, else ``(env, kind, raw result)`` for each env
        Python finishes (kinds: :data:`pycollect._steps.group.LEFT_STEPPED`, ``LEFT_RESET``,
        ``LEFT_ENDED_RESET``), in env order.

        Raises:
            ConfigError: A bad range or column, or fewer actions than envs in the range.
        """
    def take_ended(self) -> list[int]:
        """The envs whose ``ended`` flag is set, in env order, their flags cleared.

        What a caller that resets ended envs itself (a rollout, ``DISABLED`` mode) takes after a step.
        """
    def serve(
        self,
        channel: StepChannel,
        control: WorkerControl,
        generation: int,
        actions: Callable[[int, int], Iterable[object]],
        metered: bool,
    ) -> tuple[int, tuple[int, int, int, bytes, list[tuple[int, int, object]] | None] | None]:
        """A step worker's request loop: serve STEP requests natively until one needs Python.

        Waits for requests (GIL released, sliced: between slices it beats ``control``'s
        heartbeat and runs signal handlers), answers one for another generation than
        ``generation`` with NOT_MINE, and steps the envs of a STEP request (``actions(start,
        stop)`` gives their actions; an 8-byte payload names the range, none means all): when
        every env was stored it answers OK with no payload itself. Returns ``(served, handed)``:
        the steps it answered, and the request left to Python as ``(seq, command, arg,
        payload, left)`` (``left`` as :meth:`step` returns it; ``None`` when nothing was
        stepped), or ``None`` once the segment shuts down. With ``metered`` each step's frames
        and time are counted in ``control``'s metrics.

        Raises:
            ConfigError: The stepper has more than one step column (a worker's group has one).
        """

class _StepperSpec(Protocol):
    """What :class:`GroupStepper` reads, attribute by attribute (:class:`pycollect._steps.stepper.StepperSpec`)."""

    @property
    def steps(self) -> Sequence[Callable[[Any], Any]]: ...
    @property
    def resets(self) -> Sequence[Callable[..., Any]]: ...
    @property
    def leaves(self) -> Sequence[tuple[Sequence[Any], Sequence[int], Any, int]]: ...
    @property
    def rows(self) -> Sequence[Any]: ...
    @property
    def finals(self) -> Sequence[Any] | None: ...
    @property
    def rewards(self) -> Any: ...
    @property
    def terminated(self) -> Any: ...
    @property
    def truncated(self) -> Any: ...
    @property
    def ended(self) -> Any: ...
    @property
    def lengths(self) -> Any: ...
    @property
    def mode(self) -> int: ...
    @property
    def max_episode_steps(self) -> int | None: ...
    @property
    def info_keys(self) -> Sequence[str] | None: ...
    @property
    def info_fields(self) -> Sequence[tuple[Any, ...]]: ...
    @property
    def steps_per_row(self) -> int: ...
    @property
    def ndarray(self) -> type: ...

@final
class StepRecorder:
    """A group's rows of a vector env's step results, stored as one step column of a rollout.

    For env ``i`` of the group (row ``rows[i]`` of the results) at column ``t``: the returned
    observation into ``next_obs[r, t]`` (the final one where its episode ended), reward and
    flags into ``[t, i]`` of the rollout's ``[T, K]`` arrays, the observation the policy reads
    next into ``current[i]`` (the reset one where the episode ended), and that one also into
    ``obs[r, t + 1]`` (when ``t + 1 < T``), where ``r`` is ``out_rows[i]`` (``i`` without
    them). Copies only, one native pass.
    """

    def __init__(
        self,
        rows: Sequence[int],
        result_rows: int,
        steps: int,
        leaves: Sequence[tuple[object, object, object, object, object, int]],
        results: tuple[object, object, object],
        out: tuple[object, object, object],
        out_rows: Sequence[int] | None = None,
        out_envs: int | None = None,
    ) -> None:
        """Bind the arrays: per leaf ``(source, finals, next_obs, obs, current, frame_bytes)``.

        ``results``: the step's ``(rewards, terminated, truncated)``, ``[result_rows]``
        float64 and bool; ``out``: the rollout's, ``[T, K]``. ``next_obs`` and ``obs`` are
        ``[K, T, ...]``, or with ``out_rows`` (env ``i``'s row in them) ``[out_envs, T, ...]``:
        a batch of which the group's envs are some rows. Every array writable and C-contiguous;
        the buffers are held until the recorder is dropped.

        Raises:
            ConfigError: An array of another size or format, a row outside the results or
                the observations, ``out_rows`` without ``out_envs`` or the other way round.
        """
    def record(self, t: int) -> list[int]:
        """Record the step's results as column ``t``; the group's envs whose episode ended, in order.

        Raises:
            ConfigError: ``t`` is not a column of the rollout.
        """

class ActionWriter:
    """A batch of one action leaf checked against its bounds and written, cast, in one pass.

    The common case only: exactly a C-contiguous ``numpy.ndarray`` of the batch's shape whose
    dtype is one of the dtype objects given, of a kind the leaf takes, every value inside the
    bounds (compared as float64; NaN is outside), floats staying finite when narrowed.
    Anything else is refused without a message, for the Python checks to take.
    """

    def __init__(
        self,
        out: object,
        shape: Sequence[int],
        low: Sequence[float],
        high: Sequence[float],
        target: int,
        dtypes: Sequence[tuple[object, int]],
        ndarray: type,
    ) -> None:
        """Bind ``out``, a writable C-contiguous ``[N, *shape]`` array of element type ``target``, to the bounds.

        ``low`` and ``high``: one float64 per element of one env's action, flattened;
        ``dtypes``: ``(numpy dtype object, element code)`` per input dtype read natively (codes:
        :data:`pycollect._steps.spaces.ELEMENT_CODES`).

        Raises:
            ConfigError: An array that does not fit, bounds of the wrong size, an unknown code.
        """
    def write(self, actions: object) -> bool:
        """Check ``actions`` and write them into the array; ``False`` (nothing promised of the array) if not."""
