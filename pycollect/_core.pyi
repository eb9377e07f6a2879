"""Type stubs for the native module ``pycollect._core`` (built from rust/pycollect-py).

The shared-memory transport: a segment per collector, one SPSC ring of rollout slots per
worker, control blocks, command rings and a weights store. All blocking calls release the
GIL, wait in slices of at most 50 ms, run Python signal handlers between slices (so Ctrl-C
raises KeyboardInterrupt promptly), and return early (``None``) when the segment's shutdown
flag is set.
Native errors are raised as :class:`pycollect.TransportError` or its subclass
:class:`pycollect.LayoutMismatchError` (attach with a different magic, ABI or layout hash);
bad arguments raise ValueError naming the value.
"""

from collections.abc import Sequence
from typing import Any, TypeAlias, final

from typing_extensions import Buffer

__version__: str
ABI_VERSION: int

FieldDef: TypeAlias = tuple[str, str, tuple[int, ...]]
"""(name, dtype name, per-step shape). dtype names: uint8 int8 int16 int32 int64 uint16 uint32
uint64 float16 float32 float64 bool bfloat16."""

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
        slots_per_worker: int = 2,
        weights_capacity: int = 0,
        weights_buffers: int = 3,
        backing: str = "auto",  # "auto" | "memfd" | "named"
    ) -> Segment: ...
    @staticmethod
    def attach(fd: int, *, expected_layout_hash: int | None = None, timeout_s: float = 10.0) -> Segment:
        """Attach to a segment whose fd this process inherited (the fd is dup'ed)."""
    @staticmethod
    def attach_named(name: str, *, expected_layout_hash: int | None = None, timeout_s: float = 10.0) -> Segment: ...
    @property
    def fd(self) -> int: ...
    @property
    def name(self) -> str | None:
        """The /dev/shm name of a named segment until unlinked; None for memfd."""
    def unlink_name(self) -> None: ...
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
    def command_sender(self, worker: int) -> CommandSender: ...
    def command_receiver(self, worker: int) -> CommandReceiver:
        """Receives ``worker``'s commands addressed to its current generation or later."""
    def weights_writer(self) -> WeightsWriter: ...
    def weights_reader(self, worker: int) -> WeightsReader: ...
    def shutdown(self) -> None:
        """Set the shutdown flag and wake every waiter (idempotent)."""
    @property
    def is_shutdown(self) -> bool: ...

def sweep_stale_segments() -> list[str]:
    """Remove named fallback segments whose creator is dead; return their names."""

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
    def claim(self, timeout_s: float | None = None) -> int | None:
        """Claim the next free slot (blocking up to timeout_s, GIL released).

        Returns the slot index, or None on timeout/shutdown.
        """
    def commit(self, slot: int, flags: int = 0) -> None:
        """Publish the claimed slot (stamped with seq and this generation)."""

@final
class Consumer:
    @property
    def worker(self) -> int: ...
    def available(self) -> int: ...
    def peek(self) -> tuple[int, int] | None:
        """``(seq, generation)`` of the next committed slot, without popping it."""
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
    have been garbage-collected.
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
class WorkerControl:
    """A worker's control block: state, pid, generation, heartbeat, error text."""

    @property
    def worker(self) -> int: ...
    state: str
    """"empty", "starting", "running", "paused", "exiting" or "failed"."""
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
    def write_error(self, text: str) -> int: ...
    def read_error(self) -> str | None: ...

@final
class CommandSender:
    def send(self, command: str, arg: int = 0, *, generation: int) -> None:
        """command: "shutdown" "pause" "resume" "reset" (arg=seed) "weights" (arg=version)."""

@final
class CommandReceiver:
    def try_recv(self) -> tuple[str, int] | None: ...
    def recv(self, timeout_s: float | None = None) -> tuple[str, int] | None: ...

@final
class WeightsWriter:
    @property
    def capacity(self) -> int: ...
    def publish(self, data: Buffer, timeout_s: float = 5.0) -> int:
        """Copy ``data`` into a free buffer (GIL released) and publish; returns the version."""
    @property
    def latest_version(self) -> int: ...

@final
class WeightsReader:
    @property
    def latest_version(self) -> int: ...
    def read_into(self, out: Buffer) -> tuple[int, int] | None:
        """Copy the latest weights into the writable buffer ``out``; (version, nbytes) or None."""

@final
class Supervisor:
    """The worker processes of one segment: started in parallel, watched, restarted, stopped.

    Each child runs ``argv`` with ``env`` plus ``PYCOLLECT_WORKER``, ``PYCOLLECT_GENERATION``,
    ``PYCOLLECT_SEGMENT_FD`` (the segment at fd 4), ``PYCOLLECT_LIFELINE_FD`` and every
    ``(our_fd, child_fd)`` of ``pass_fds``, in its own process group with a parent-death
    signal. Events and stats are dicts.
    """

    def __init__(
        self,
        segment: Segment,
        argv: Sequence[str],
        *,
        env: dict[str, str],
        pass_fds: Sequence[tuple[int, int]],
        restart: str = "permanent",
        max_restarts: int = 3,
        restart_window_s: float = 60.0,
        backoff_initial_s: float = 0.1,
        backoff_max_s: float = 5.0,
        startup_timeout_s: float = 120.0,
        heartbeat_timeout_s: float = 30.0,
        check_interval_s: float = 0.1,
        grace_s: float = 2.0,
        term_timeout_s: float = 2.0,
    ) -> None: ...
    @property
    def workers(self) -> int: ...
    def next_event(self, timeout_s: float = 0.0) -> dict[str, Any] | None:
        """The next event: ``kind`` is started, exited, spawn_failed, restarting or gave_up."""
    def stats(self) -> list[dict[str, Any]]:
        """Per worker: state, pid, generation, restarts, last_exit, last_error."""
    def last_error(self, worker: int) -> str | None:
        """The error text (type, message, traceback) the worker last wrote, if any."""
    def shutdown(self, grace_s: float = 2.0) -> list[dict[str, Any]]:
        """Flag, grace, SIGTERM to each group, SIGKILL, reap; how each worker ended."""
