"""The ``torch_distributed`` weight-sync scheme: weights over ``torch.distributed`` process groups.

For workers that do not share memory with the trainer's weights store, or whose policy lives on
another GPU than the trainer's (``nccl``). Select it with
``Collector(..., weight_sync="torch_distributed")`` or configure it with
``weight_sync=TorchDistributedScheme(timeout_s=..., backend=...)``.

Design
------
A single world-size ``N + 1`` group for the trainer and all workers does not fit: a gloo or nccl
group cannot re-admit a rank that died, and the supervisor restarts a killed worker as a new
generation. A collective broadcast at ``send()`` time does not fit either: workers take weights
between rollouts only, so the trainer would block on every worker busy mid-rollout (or dead, or
hung). So the scheme pairs the trainer with each worker on its own, and pulls rather than pushes:

* **Rendezvous.** The trainer hosts a ``torch.distributed.TCPStore`` on a socket it binds to
  ``127.0.0.1`` itself (port 0: the OS picks; the store would otherwise listen on every
  interface). The workers' half, pickled into every worker, carries only the port and options.
* **Publishing.** ``send(state, version)`` packs the state dict once into a flat host buffer
  (:class:`~pycollect.weights.layout.WeightsLayout`, the version in its header), makes it the
  latest, and sets the ``version`` key of the store. It waits on no worker: the only thing it
  promises within ``timeout_s`` is that the store has the new version (it raises
  :class:`~pycollect.exceptions.TransportError` naming the store otherwise). A buffer still being
  sent to a worker is never overwritten: the next version is packed into a free buffer, or a new
  one (so there are at most ``2 + transfers in flight`` buffers).
* **Pairing.** A worker that sees a newer version in the store (one ``get``, between rollouts)
  and has no group yet pushes ``join <worker> <generation> <session> <device>`` onto a queue in
  the store. The trainer's dispatcher thread answers with the backend for that pair (the key
  ``<prefix>backend``) and starts a session thread, which builds a 2-rank ``ProcessGroupGloo``
  (or ``ProcessGroupNCCL``) over ``PrefixStore("pycollect/w<worker>/g<generation>/s<session>/")``
  with the trainer as rank 0 (directly, not the global default group), while the worker builds
  rank 1. A join of a worker drops the trainer's session of that worker's earlier generation or
  session, so a restarted worker (generation g+1) pairs afresh and a dead one's group is let go.
* **Transfer.** The worker then pushes ``want <worker> <generation> <session>`` and receives; the
  session thread sends the latest flat buffer point to point. The worker unpacks it into its
  module and returns the version from the buffer's header, so frames are stamped with exactly the
  version they ran. A worker that starts (or restarts) reads the version before its first
  rollout, so it starts from the latest one.
* **Timeouts.** Every wait has the scheme's ``timeout_s``: the group rendezvous on both sides,
  every send and receive, the worker's wait for its backend. A session thread whose send fails
  or times out ends and lets its group go; a worker whose join or receive fails logs a warning,
  keeps the weights it has (its frames keep their version) and joins again, as a new session, at
  its next rollout. The trainer's main thread never waits on a worker.
* **Backend.** ``backend="auto"`` (the default) uses nccl when the worker's policy module is on
  a CUDA device, the trainer has CUDA and nccl, and the two are on different GPUs (nccl cannot
  pair two ranks on one device; the trainer sends from ``torch.cuda.current_device()``); gloo
  otherwise. ``"gloo"`` always uses gloo (a CUDA policy is filled from host memory);
  ``"nccl"`` insists, and a worker that cannot use it fails to join, with the reason. Gloo is
  given a device bound to ``127.0.0.1``, so nothing listens beyond loopback.

Limits: the trainer and the workers are on one machine (loopback); every new version costs each
worker one transfer of the whole state dict (no deltas); the worker receives into a buffer of
the state dict's size, so each side holds one extra copy. ``torch`` is imported only when a
sender or receiver is used, never when the plugin loads.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

from pycollect.exceptions import ConfigError, TransportError
from pycollect.hookspecs import hookimpl
from pycollect.weights.scheme import ReceiverContext, SenderContext, WeightReceiver, WeightSender, WeightSyncScheme

if TYPE_CHECKING:
    import torch

    from pycollect.weights.layout import WeightsLayout

__all__ = ["TorchDistributedScheme", "choose_backend"]

HOST = "127.0.0.1"
"""Where the store and the gloo pairs listen: loopback only."""

_VERSION_KEY = "pycollect/version"
_QUEUE_KEY = "pycollect/requests"
_BACKENDS = ("auto", "gloo", "nccl")
_DISPATCH_TIMEOUT = timedelta(days=1)  # the dispatcher blocks on the queue; close() wakes it
_TAG = 0

logger = logging.getLogger("pycollect.weights")


class TorchDistributedScheme(WeightSyncScheme):
    """Weights pulled by each worker over its own 2-rank ``torch.distributed`` group.

    Args:
        timeout_s: The longest any one wait takes: a group's rendezvous, one transfer, a
            worker's wait for the trainer's answer.
        backend: ``"auto"`` (nccl for a CUDA policy on another GPU than the trainer's, gloo
            otherwise), ``"gloo"`` or ``"nccl"``.
    """

    name = "torch_distributed"

    def __init__(self, *, timeout_s: float = 10.0, backend: str = "auto") -> None:
        if not timeout_s > 0:
            raise ConfigError(f"TorchDistributedScheme: timeout_s must be positive, got {timeout_s!r}")
        if backend not in _BACKENDS:
            raise ConfigError(f"TorchDistributedScheme: backend must be one of {_BACKENDS}, got {backend!r}")
        self.timeout_s = float(timeout_s)
        self.backend = backend

    def sender(self, context: SenderContext) -> WeightSender:
        """Host the store on loopback and start the dispatcher thread."""
        return _Sender(context.layout, self.timeout_s, self.backend)


def choose_backend(
    option: str,
    *,
    worker_cuda: str | None,
    trainer_cuda: str | None,
    nccl_available: bool,
) -> str:
    """The backend of one trainer-worker pair.

    Args:
        option: The scheme's ``backend`` option.
        worker_cuda: The UUID of the GPU the worker's policy is on, ``None`` for the CPU.
        trainer_cuda: The UUID of the trainer's current GPU, ``None`` without CUDA.
        nccl_available: Whether this torch has nccl.

    Returns:
        ``"gloo"`` or ``"nccl"``.

    Raises:
        TransportError: ``option`` is ``"nccl"`` and the pair cannot use it.
    """
    if option == "gloo":
        return "gloo"
    reason = None
    if worker_cuda is None:
        reason = "the worker's policy is not on a CUDA device"
    elif trainer_cuda is None:
        reason = "the trainer has no CUDA device"
    elif not nccl_available:
        reason = "this torch has no nccl"
    elif worker_cuda == trainer_cuda:
        reason = "the worker's policy is on the trainer's GPU (nccl cannot pair two ranks on one device)"
    if reason is None:
        return "nccl"
    if option == "nccl":
        raise TransportError(f"weight_sync='torch_distributed' with backend='nccl': {reason}")
    return "gloo"


def _make_group(backend: str, store: Any, rank: int, timeout_s: float) -> Any:
    """A 2-rank process group over ``store`` (a ``PrefixStore``), not the default group."""
    from torch._C import _distributed_c10d as c10d

    timeout = timedelta(seconds=timeout_s)
    if backend == "nccl":
        options = c10d.ProcessGroupNCCL.Options()
        options._timeout = timeout
        return c10d.ProcessGroupNCCL(store, rank, 2, options)
    options = c10d.ProcessGroupGloo._Options()  # type: ignore[attr-defined]  # not in the stubs
    options._timeout = timeout
    options._devices = [c10d.ProcessGroupGloo.create_device(hostname=HOST)]
    return c10d.ProcessGroupGloo(store, rank, 2, options)


def _client(port: int, timeout: timedelta) -> Any:
    from torch._C._distributed_c10d import TCPStore

    return TCPStore(HOST, port, None, False, timeout)


def _prefix(worker: int, generation: int, session: int) -> str:
    return f"pycollect/w{worker}/g{generation}/s{session}/"


def _cuda_uuid(device: Any) -> str:
    import torch

    return str(torch.cuda.get_device_properties(device).uuid)


class _Buffer:
    """One packed state dict; ``users`` counts the transfers reading it."""

    def __init__(self, nbytes: int) -> None:
        import torch

        self.array = np.empty(nbytes, np.uint8)
        self.tensor = torch.from_numpy(self.array)
        self.version = 0
        self.users = 0


@dataclass
class _Session:
    worker: int
    generation: int
    session: int
    backend: str
    requests: queue.SimpleQueue[bool]
    thread: threading.Thread | None = None


class _Sender(WeightSender):
    def __init__(self, layout: WeightsLayout, timeout_s: float, backend: str) -> None:
        from torch._C._distributed_c10d import TCPStore

        self.layout = layout
        self.timeout_s = timeout_s
        self.backend = backend
        self._lock = threading.Lock()
        self._latest: _Buffer | None = None
        self._buffers: list[_Buffer] = []
        self._sessions: dict[int, _Session] = {}
        self._retired: list[threading.Thread] = []
        self._closed = False
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # close-on-exec: workers never hold it
        try:
            listener.bind((HOST, 0))
            listener.listen(128)
            self.port = int(listener.getsockname()[1])
        except BaseException:
            listener.close()
            raise
        timeout = timedelta(seconds=timeout_s)
        # The store takes the descriptor over (and closes it when it goes).
        self._store: Any = TCPStore(
            HOST, self.port, None, True, timeout, wait_for_workers=False, master_listen_fd=listener.detach()
        )
        self._store.set(_VERSION_KEY, "0")
        self._dispatch_store: Any = _client(self.port, _DISPATCH_TIMEOUT)
        self._dispatcher = threading.Thread(target=self._dispatch, name="pycollect-tdist-dispatch", daemon=True)
        self._dispatcher.start()

    def receiver(self) -> WeightReceiver:
        return _Receiver(self.port, self.timeout_s, self.backend)

    # -- the trainer's main thread -----------------------------------------------------------

    def send(self, state: Mapping[str, torch.Tensor], version: int, *, timeout_s: float) -> None:
        if self._closed:
            raise TransportError("weight_sync='torch_distributed': the sender is closed")
        if not self._dispatcher.is_alive():
            raise TransportError(
                "weight_sync='torch_distributed': the trainer's dispatcher thread has stopped, "
                "so no worker could ask for these weights"
            )
        start = time.monotonic()
        buffer = self._free_buffer()
        self.layout.pack(state, buffer.array, version)
        with self._lock:
            buffer.version = version
            self._latest = buffer
        remaining = max(timeout_s - (time.monotonic() - start), 1e-3)
        try:
            self._store.set_timeout(timedelta(seconds=remaining))
            self._store.set(_VERSION_KEY, str(version))
            published = int(self._store.get(_VERSION_KEY))  # a round trip: the store has it
        except RuntimeError as exc:  # torch.distributed.DistError is a RuntimeError
            raise TransportError(
                f"weight_sync='torch_distributed': publishing policy version {version} to the trainer's "
                f"TCPStore at {HOST}:{self.port} did not complete within {timeout_s} s: {exc}"
            ) from exc
        if published != version:
            raise TransportError(
                f"weight_sync='torch_distributed': the TCPStore at {HOST}:{self.port} holds version "
                f"{published} right after version {version} was published"
            )

    def _free_buffer(self) -> _Buffer:
        with self._lock:
            for buffer in self._buffers:
                if buffer.users == 0 and buffer is not self._latest:
                    return buffer
        buffer = _Buffer(self.layout.nbytes)  # every other one is latest or being sent
        with self._lock:
            self._buffers.append(buffer)
        return buffer

    def _acquire_latest(self) -> _Buffer | None:
        with self._lock:
            buffer = self._latest
            if buffer is not None:
                buffer.users += 1
            return buffer

    def _release(self, buffer: _Buffer) -> None:
        with self._lock:
            buffer.users -= 1

    # -- the dispatcher thread ---------------------------------------------------------------

    def _dispatch(self) -> None:
        try:
            while True:
                try:
                    message = self._dispatch_store.queue_pop(_QUEUE_KEY, True).decode()
                except RuntimeError:
                    if self._closed:
                        return
                    continue  # a day without any message
                if message == "stop":
                    return
                self._handle(message.split())
        except BaseException as exc:  # the thread ends; send() then reports it
            if not self._closed:
                logger.error("torch_distributed: the dispatcher thread failed", exc_info=exc)
        finally:
            self._dispatch_store = None

    def _handle(self, words: list[str]) -> None:
        kind, worker, generation, session = words[0], int(words[1]), int(words[2]), int(words[3])
        if kind == "want":
            with self._lock:
                current = self._sessions.get(worker)
            if current is not None and (current.generation, current.session) == (generation, session):
                current.requests.put(True)
            return  # a request of a session already dropped: that worker times out and rejoins
        assert kind == "join", words
        worker_cuda = None if words[4] == "cpu" else words[4]
        prefix = _prefix(worker, generation, session)
        try:
            backend = choose_backend(
                self.backend,
                worker_cuda=worker_cuda,
                trainer_cuda=_trainer_cuda() if worker_cuda is not None and self.backend != "gloo" else None,
                nccl_available=_nccl_available(),
            )
        except TransportError as exc:
            self._store_answer(prefix, f"error {exc}")
            return
        entry = _Session(worker, generation, session, backend, queue.SimpleQueue())
        entry.thread = threading.Thread(
            target=self._serve, args=(entry,), name=f"pycollect-tdist-w{worker}", daemon=True
        )
        with self._lock:
            previous = self._sessions.get(worker)
            self._sessions[worker] = entry
        if previous is not None:  # that worker's earlier generation or session: let its group go
            previous.requests.put(False)
            if previous.thread is not None:
                self._retired.append(previous.thread)
        self._retired = [thread for thread in self._retired if thread.is_alive()]
        entry.thread.start()
        self._store_answer(prefix, backend)

    def _store_answer(self, prefix: str, answer: str) -> None:
        store = self._dispatch_store
        if store is not None:
            store.set(prefix + "backend", answer)

    # -- one session thread per (worker, generation, session) --------------------------------

    def _serve(self, entry: _Session) -> None:
        from torch._C._distributed_c10d import PrefixStore

        where = f"worker {entry.worker} (generation {entry.generation})"
        group = None
        try:
            store = _client(self.port, timedelta(seconds=self.timeout_s))
            group = _make_group(
                entry.backend,
                PrefixStore(_prefix(entry.worker, entry.generation, entry.session), store),
                0,
                self.timeout_s,
            )
            staging = _Staging(entry.backend, self.layout.nbytes)
            while entry.requests.get():
                buffer = self._acquire_latest()
                if buffer is None:
                    continue  # cannot happen: a worker asks only after a version was published
                try:
                    tensor = staging.load(buffer)
                    if staging.copies:
                        self._release(buffer)
                        buffer = None
                    group.send([tensor], 1, _TAG).wait(timedelta(seconds=self.timeout_s))
                finally:
                    if buffer is not None:
                        self._release(buffer)
        except RuntimeError as exc:  # a dead, hung or departed worker: let its group go
            if not self._closed:
                logger.info("torch_distributed: dropped the group of %s: %s", where, exc)
        finally:
            with self._lock:
                if self._sessions.get(entry.worker) is entry:
                    del self._sessions[entry.worker]
            del group

    # -- shutdown ------------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._lock:
            sessions = list(self._sessions.values())
        for entry in sessions:
            entry.requests.put(False)
        with contextlib.suppress(RuntimeError):
            self._store.queue_push(_QUEUE_KEY, "stop")
        self._dispatcher.join(self.timeout_s)
        threads = [entry.thread for entry in sessions if entry.thread is not None] + self._retired
        for thread in threads:
            thread.join(1.0)
        # Stopping the store's server fails whatever still waits on it (a rendezvous with a
        # worker that never came), so every thread ends.
        self._store = None
        for thread in [self._dispatcher, *threads]:
            thread.join(self.timeout_s)
        self._buffers = []
        self._latest = None


class _Staging:
    """What the session thread sends: the host buffer itself (gloo) or a copy on the GPU (nccl)."""

    def __init__(self, backend: str, nbytes: int) -> None:
        self.copies = backend == "nccl"
        self._device: Any = None
        self._tensor: Any = None
        self._version = -1
        self._nbytes = nbytes

    def load(self, buffer: _Buffer) -> Any:
        if not self.copies:
            return buffer.tensor
        import torch

        if self._tensor is None:
            self._device = torch.device("cuda", torch.cuda.current_device())
            self._tensor = torch.empty(self._nbytes, dtype=torch.uint8, device=self._device)
        if self._version != buffer.version:
            self._tensor.copy_(buffer.tensor)
            self._version = buffer.version
        return self._tensor


def _trainer_cuda() -> str | None:
    import torch

    if not torch.cuda.is_available():
        return None
    return _cuda_uuid(torch.cuda.current_device())


def _nccl_available() -> bool:
    import torch.distributed

    return bool(torch.distributed.is_nccl_available())


class _Receiver(WeightReceiver):
    def __init__(self, port: int, timeout_s: float, backend: str) -> None:
        self.port = port
        self.timeout_s = timeout_s
        self.backend = backend
        self._reset()

    def _reset(self) -> None:
        self._layout: WeightsLayout | None = None
        self._store: Any = None
        self._group: Any = None
        self._gpu = False
        self._array = np.empty(0, np.uint8)
        self._tensor: Any = None
        self._worker = self._generation = self._session = self._seen = 0

    def __getstate__(self) -> dict[str, Any]:
        return {"port": self.port, "timeout_s": self.timeout_s, "backend": self.backend}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.port, self.timeout_s, self.backend = state["port"], state["timeout_s"], state["backend"]
        self._reset()

    def attach(self, context: ReceiverContext) -> None:
        self._layout = context.layout
        self._worker, self._generation = context.worker, context.generation
        self._store = _client(self.port, timedelta(seconds=self.timeout_s))

    def receive(self, module: torch.nn.Module) -> int | None:
        try:
            latest = int(self._store.get(_VERSION_KEY))
        except RuntimeError as exc:
            raise TransportError(
                f"weight_sync='torch_distributed': the trainer's TCPStore at {HOST}:{self.port} "
                f"did not answer within {self.timeout_s} s: {exc}"
            ) from exc
        if latest <= self._seen:
            return None
        try:
            if self._group is None:
                self._join(module)
            version = self._fetch(module)
        except (RuntimeError, TransportError) as exc:  # TransportError (nccl refused) is final
            self._group = None  # a new session at the next rollout
            if isinstance(exc, TransportError):
                raise
            logger.warning(
                "torch_distributed: could not fetch policy version %d within %s s (%s); keeping version %d",
                latest,
                self.timeout_s,
                exc,
                self._seen,
            )
            return None
        self._seen = version
        return version

    def _join(self, module: torch.nn.Module) -> None:
        import itertools

        import torch
        from torch._C._distributed_c10d import PrefixStore

        anchor = next(itertools.chain(module.parameters(), module.buffers()), None)
        device = anchor.device if anchor is not None else torch.device("cpu")
        described = _cuda_uuid(device) if device.type == "cuda" else "cpu"
        self._session += 1
        prefix = _prefix(self._worker, self._generation, self._session)
        self._store.queue_push(_QUEUE_KEY, f"join {self._worker} {self._generation} {self._session} {described}")
        self._store.wait([prefix + "backend"], timedelta(seconds=self.timeout_s))
        answer = self._store.get(prefix + "backend").decode()
        if answer.startswith("error "):
            raise TransportError(answer[len("error ") :])
        assert self._layout is not None
        nbytes = self._layout.nbytes
        self._gpu = answer == "nccl"
        if self._gpu:
            torch.cuda.set_device(device)
            self._tensor = torch.empty(nbytes, dtype=torch.uint8, device=device)
        elif self._array.size != nbytes:
            self._array = np.empty(nbytes, np.uint8)
            self._tensor = torch.from_numpy(self._array)
        self._group = _make_group(answer, PrefixStore(prefix, self._store), 1, self.timeout_s)

    def _fetch(self, module: torch.nn.Module) -> int:
        assert self._layout is not None
        self._store.queue_push(_QUEUE_KEY, f"want {self._worker} {self._generation} {self._session}")
        self._group.recv([self._tensor], 0, _TAG).wait(timedelta(seconds=self.timeout_s))
        if not self._gpu:
            return self._layout.unpack(self._array, module)
        return _unpack_device(self._layout, self._tensor, module)

    def close(self) -> None:
        self._group = None
        self._store = None


def _unpack_device(layout: WeightsLayout, flat: torch.Tensor, module: torch.nn.Module) -> int:
    """``layout.unpack`` for a flat buffer on the GPU: device-to-device copies, no host trip."""
    import torch

    state = module.state_dict()
    with torch.no_grad():
        for entry in layout.entries:
            if entry.nbytes:
                raw = flat[entry.offset : entry.offset + entry.nbytes]
                state[entry.name].copy_(raw.view(entry.dtype).reshape(entry.shape))
    return int(flat[:8].cpu().numpy().view(np.int64)[0])


@hookimpl
def register_scheme() -> type[WeightSyncScheme]:
    """Register :class:`TorchDistributedScheme`."""
    return TorchDistributedScheme
