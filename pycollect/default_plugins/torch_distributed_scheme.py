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
  interface). The workers' half, pickled into every worker, carries the port, the options and
  the collector's secret (below).
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
  (or ``ProcessGroupNCCL``) over ``PrefixStore(<prefix>)`` with the trainer as rank 0 (directly,
  not the global default group), while the worker builds rank 1. A join of a worker drops the
  trainer's session of that worker's earlier generation or session, so a restarted worker
  (generation g+1) pairs afresh and a dead one's group is let go.
* **Transfer.** The worker then pushes ``want <worker> <generation> <session> <n>`` and
  receives; the session thread sends the latest flat buffer point to point. The worker unpacks it
  into its module and returns the version from the buffer's header, so frames are stamped with
  exactly the version they ran. A worker that starts (or restarts) reads the version before its
  first rollout, so it starts from the latest one.
* **Authentication.** Any local user can connect to a TCP port on 127.0.0.1, list the store's
  keys, read and write them and push onto the queue, and connect to a gloo listener. So the
  sender draws a random 32-byte secret per collector; it reaches the workers only inside their
  pickled receiver (the sealed spec, never the store), and keys for separate purposes are
  derived from it (HMAC-SHA256). With them:

  - every value the scheme and its groups keep in the store (the version, the backend answers,
    gloo's addresses, nccl's unique id) and every request is *sealed*: a fresh 16-byte nonce,
    the bytes XORed with a SHAKE-256 keystream of the key and nonce, and an HMAC-SHA256 over the
    store key, nonce and ciphertext. A value or request that does not open is never used:
    the dispatcher skips it (and logs, at most once a minute, how many it skipped), a worker
    keeps its weights and pairs again, a group's rendezvous fails;
  - a request also has to be newer than what it replays: a join only for a generation and
    session above the last one served for that worker, a ``want`` only for the current session
    and with a counter above its last;
  - each pair's prefix is ``pycollect/<HMAC of worker, generation, session>/``: nobody without
    the secret can know, and so pre-claim, the keys of a pairing before it starts;
  - right after its group forms, the session thread sends a random 32-byte challenge over the
    group, and sends weights only if the peer answers with the HMAC of the challenge and the
    pairing: a stranger that reached the trainer's gloo (or nccl) listener first is sent
    nothing else;
  - each flat buffer carries an HMAC-SHA256 of its bytes (version header included) after them,
    computed once per version by the first session thread that sends it; a worker checks it
    before it loads a byte, so weights it did not get from the trainer are never acted with nor
    their version stamped.

  What a stranger can still do is deny service: pop or delete requests and keys, overwrite
  them with garbage, flood the queue, or take a pairing's listener first; workers then keep the
  weights (and version) they have and pair again at their next rollout, and the trainer drops the
  pair, until the stranger stops. The weights themselves travel unencrypted over the pair's TCP
  connection, which only its two ends can read (another user cannot read loopback traffic of a
  connection that is not theirs); gloo does not authenticate whoever connects to its listener,
  hence the challenge. Encrypting the weights too, with the standard library (a SHAKE-256
  keystream), measured about 0.9 s per 160 MB on one core, against about 0.25 s for their
  HMAC-SHA256 (1.2-1.6 ms per MB, on a loaded 2-core machine), so their confidentiality rests
  on the challenge instead.
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
import functools
import hashlib
import hmac
import logging
import math
import queue
import secrets
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from pycollect.config import MAX_SECONDS
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
_SECRET_BYTES = 32
_NONCE_BYTES = 16
_MAC_BYTES = 32  # HMAC-SHA256
_CHALLENGE_BYTES = 32
_LOG_EVERY_S = 60.0  # at most one warning a minute about requests or values that do not open

logger = logging.getLogger("pycollect.weights")


class TorchDistributedScheme(WeightSyncScheme):
    """Weights pulled by each worker over its own 2-rank ``torch.distributed`` group.

    Args:
        timeout_s: The longest any one wait takes: a group's rendezvous, one transfer, a
            worker's wait for the trainer's answer. At most
            :data:`~pycollect.config.MAX_SECONDS`.
        backend: ``"auto"`` (nccl for a CUDA policy on another GPU than the trainer's, gloo
            otherwise), ``"gloo"`` or ``"nccl"``.

    Raises:
        ConfigError: ``timeout_s`` is not a number of seconds in ``(0, MAX_SECONDS]``, or
            ``backend`` is not one of the above.
    """

    name = "torch_distributed"

    def __init__(self, *, timeout_s: float = 10.0, backend: str = "auto") -> None:
        # timedelta, the store and the groups take it: checked here, not as an OverflowError later.
        if (
            isinstance(timeout_s, bool)
            or not isinstance(timeout_s, int | float)
            or not 0 < timeout_s <= MAX_SECONDS
            or math.isnan(timeout_s)
        ):
            raise ConfigError(
                f"TorchDistributedScheme: timeout_s must be a number of seconds > 0 and at most "
                f"{MAX_SECONDS:g} s, got {timeout_s!r}"
            )
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


# -- the collector's secret and what is derived from it -------------------------------------------


class _Rejected(RuntimeError):
    """Something that should come from the collector's own processes does not authenticate."""


def _derive(secret: bytes, purpose: str) -> bytes:
    return hmac.digest(secret, b"pycollect torch_distributed " + purpose.encode(), "sha256")


@dataclass(frozen=True)
class _Keys:
    """The keys one collector's trainer and workers share, each for one purpose.

    Attributes:
        secret: The collector's random secret, which only the trainer and its workers hold.
        proof: Keys a worker's answer to the trainer's challenge (a test may swap it).
    """

    secret: bytes
    proof: bytes = b""
    _seal_mac: bytes = field(init=False, repr=False)
    _cipher: bytes = field(init=False, repr=False)
    _names: bytes = field(init=False, repr=False)
    _weights: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        derived = {name: _derive(self.secret, name) for name in ("seal", "cipher", "names", "weights", "proof")}
        object.__setattr__(self, "_seal_mac", derived["seal"])
        object.__setattr__(self, "_cipher", derived["cipher"])
        object.__setattr__(self, "_names", derived["names"])
        object.__setattr__(self, "_weights", derived["weights"])
        if not self.proof:
            object.__setattr__(self, "proof", derived["proof"])

    def __repr__(self) -> str:
        return "_Keys(<secret>)"  # never in a log or a traceback

    def seal(self, key: str, value: bytes) -> bytes:
        """``value`` encrypted and authenticated for the store key ``key``."""
        nonce = secrets.token_bytes(_NONCE_BYTES)
        ciphertext = _xor(value, hashlib.shake_256(self._cipher + nonce).digest(len(value)))
        return nonce + ciphertext + self._mac(key, nonce, ciphertext)

    def open(self, key: str, sealed: bytes) -> bytes:
        """The value :meth:`seal` sealed for ``key``.

        Raises:
            _Rejected: ``sealed`` was not sealed for ``key`` with this collector's secret.
        """
        sealed = bytes(sealed)
        if len(sealed) < _NONCE_BYTES + _MAC_BYTES:
            raise _Rejected(f"the value of {key!r} in the store is not the collector's (too short)")
        nonce, ciphertext, tag = sealed[:_NONCE_BYTES], sealed[_NONCE_BYTES:-_MAC_BYTES], sealed[-_MAC_BYTES:]
        if not hmac.compare_digest(tag, self._mac(key, nonce, ciphertext)):
            raise _Rejected(f"the value of {key!r} in the store is not the collector's (it does not authenticate)")
        return _xor(ciphertext, hashlib.shake_256(self._cipher + nonce).digest(len(ciphertext)))

    def _mac(self, key: str, nonce: bytes, ciphertext: bytes) -> bytes:
        name = key.encode()
        return hmac.digest(self._seal_mac, len(name).to_bytes(4, "little") + name + nonce + ciphertext, "sha256")

    def prefix(self, worker: int, generation: int, session: int) -> str:
        """The store prefix of one pairing: nobody without the secret can know it in advance."""
        name = hmac.digest(self._names, f"{worker} {generation} {session}".encode(), "sha256")
        return f"pycollect/{name.hex()[:32]}/"

    def answer(self, pairing: str, challenge: bytes) -> bytes:
        """A worker's answer to the trainer's challenge for ``pairing``."""
        return hmac.digest(self.proof, b"worker " + pairing.encode() + b" " + challenge, "sha256")

    def weights_tag(self, data: Any) -> bytes:
        """The MAC of a flat buffer's bytes (``data``: anything with the buffer protocol)."""
        return hmac.digest(self._weights, data, "sha256")


def _xor(data: bytes, stream: bytes) -> bytes:
    return (int.from_bytes(data, "little") ^ int.from_bytes(stream, "little")).to_bytes(len(data), "little")


def _verify(keys: _Keys, flat: np.ndarray, nbytes: int) -> None:
    """Check the MAC after the first ``nbytes`` of a received flat buffer.

    Raises:
        _Rejected: The bytes are not what the trainer sent (or not from this collector).
    """
    if not hmac.compare_digest(keys.weights_tag(flat[:nbytes]), flat[nbytes : nbytes + _MAC_BYTES].tobytes()):
        raise _Rejected("the weights received do not authenticate: they are not the trainer's; none was loaded")


class _Throttled:
    """Counts one kind of rejected input; logs each at debug level, and a warning at most once a minute.

    Anyone on the machine can send such input as fast as they like: the log must not grow with it.
    """

    def __init__(self, what: str) -> None:
        self._what = what
        self._count = 0
        self._last = -math.inf

    def note(self, reason: object) -> None:
        self._count += 1
        logger.debug("torch_distributed: %s: %s", self._what, reason)
        now = time.monotonic()
        if now - self._last >= _LOG_EVERY_S:
            logger.warning("torch_distributed: %d %s (the last: %s)", self._count, self._what, reason)
            self._count, self._last = 0, now


@functools.cache
def _sealed_store_type() -> type[Any]:
    """A ``torch.distributed.Store`` that seals every value its group sets and opens every one it gets."""
    from torch._C._distributed_c10d import Store

    class SealedStore(Store):
        """Over a ``TCPStore`` client: gloo's addresses and nccl's unique id, sealed.

        Keep this object referenced as long as its group lives: the group reaches these methods
        through the Python object.
        """

        def __init__(self, inner: Any, keys: _Keys) -> None:
            super().__init__()
            self._inner = inner
            self._keys = keys
            self._clones: list[Any] = []

        def set(self, key: str, value: Any) -> None:
            data = value.encode() if isinstance(value, str) else bytes(value)
            self._inner.set(key, self._keys.seal(key, data))

        def get(self, key: str) -> bytes:
            return self._keys.open(key, self._inner.get(key))

        def wait(self, keys: list[str], *timeout: timedelta) -> None:
            self._inner.wait(keys, *timeout)

        def check(self, keys: list[str]) -> bool:
            return bool(self._inner.check(keys))

        def add(self, key: str, amount: int) -> int:
            return int(self._inner.add(key, amount))  # a counter: nothing to seal, nothing secret

        def compare_set(self, key: str, expected: Any, desired: Any) -> bytes:
            raise RuntimeError("torch_distributed: a sealed store cannot compare values")

        def delete_key(self, key: str) -> bool:
            return bool(self._inner.delete_key(key))

        def num_keys(self) -> int:
            return int(self._inner.num_keys())

        def set_timeout(self, timeout: timedelta) -> None:
            self._inner.set_timeout(timeout)

        def clone(self) -> Any:
            clone = SealedStore(self._inner.clone(), self._keys)
            self._clones.append(clone)  # referenced from here: see the class docstring
            return clone

    return SealedStore


def _pairing(worker: int, generation: int, session: int) -> str:
    return f"{worker} {generation} {session}"


def _prove_peer(group: Any, keys: _Keys, pairing: str, device: Any, timeout_s: float) -> None:
    """The trainer's side: challenge the peer; it must answer with the secret's HMAC.

    Raises:
        _Rejected: The peer's answer is wrong: it does not hold the collector's secret.
    """
    import torch

    timeout = timedelta(seconds=timeout_s)
    challenge = secrets.token_bytes(_CHALLENGE_BYTES)
    sent = torch.frombuffer(bytearray(challenge), dtype=torch.uint8).to(device)
    group.send([sent], 1, _TAG).wait(timeout)
    answer = torch.zeros(_MAC_BYTES, dtype=torch.uint8, device=device)
    group.recv([answer], 1, _TAG).wait(timeout)
    if not hmac.compare_digest(answer.cpu().numpy().tobytes(), keys.answer(pairing, challenge)):
        raise _Rejected(f"the peer that paired as worker {pairing.split()[0]} did not prove it holds the secret")


def _answer_challenge(group: Any, keys: _Keys, pairing: str, device: Any, timeout_s: float) -> None:
    """The worker's side of :func:`_prove_peer`."""
    import torch

    timeout = timedelta(seconds=timeout_s)
    challenge = torch.zeros(_CHALLENGE_BYTES, dtype=torch.uint8, device=device)
    group.recv([challenge], 0, _TAG).wait(timeout)
    answer = keys.answer(pairing, challenge.cpu().numpy().tobytes())
    group.send([torch.frombuffer(bytearray(answer), dtype=torch.uint8).to(device)], 0, _TAG).wait(timeout)


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


def _cuda_uuid(device: Any) -> str:
    import torch

    return str(torch.cuda.get_device_properties(device).uuid)


class _Buffer:
    """One packed state dict and its MAC; ``users`` counts the transfers reading it."""

    def __init__(self, nbytes: int) -> None:
        import torch

        # Zeroed, not empty: the padding between tensors goes to workers too, and must not carry
        # whatever this memory held before.
        self.array = np.zeros(nbytes + _MAC_BYTES, np.uint8)
        self.tensor = torch.from_numpy(self.array)
        self.nbytes = nbytes
        self.version = 0
        self.users = 0
        self.tagged = False
        self.tagging = threading.Lock()


@dataclass
class _Session:
    worker: int
    generation: int
    session: int
    backend: str
    requests: queue.SimpleQueue[bool]
    thread: threading.Thread | None = None
    wants: int = 0  # the counter of the last request served, so a replayed one is not


@dataclass(frozen=True)
class _Request:
    kind: str
    worker: int
    generation: int
    session: int
    device: str = "cpu"
    number: int = 0


def _parse(words: list[str]) -> _Request:
    """A request's fields (it was authenticated: this only guards against a bug's garbage).

    Raises:
        ValueError: Not a request.
    """
    if len(words) == 5 and words[0] == "join":
        device = words[4]
        request = _Request("join", int(words[1]), int(words[2]), int(words[3]), device=device)
    elif len(words) == 5 and words[0] == "want":
        request = _Request("want", int(words[1]), int(words[2]), int(words[3]), number=int(words[4]))
    else:
        raise ValueError(f"not a request: {' '.join(words)[:80]!r}")
    if min(request.worker, request.generation, request.session, request.number) < 0:
        raise ValueError(f"a negative field in {' '.join(words)[:80]!r}")
    return request


class _Sender(WeightSender):
    def __init__(self, layout: WeightsLayout, timeout_s: float, backend: str) -> None:
        from torch._C._distributed_c10d import TCPStore

        self.layout = layout
        self.timeout_s = timeout_s
        self.backend = backend
        self._keys = _Keys(secrets.token_bytes(_SECRET_BYTES))
        self._lock = threading.Lock()
        self._latest: _Buffer | None = None
        self._buffers: list[_Buffer] = []
        self._sessions: dict[int, _Session] = {}
        self._served: dict[int, tuple[int, int]] = {}  # worker -> the last (generation, session) joined
        # Every session thread not known to have ended, so close() joins those that are still
        # finishing after their session was dropped (no longer in ``_sessions``) too.
        self._threads: list[threading.Thread] = []
        self._skipped = _Throttled(
            "request(s) on the trainer's store that did not parse or authenticate were skipped: "
            "only the collector's own workers are served"
        )
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
        self._store: Any = cast(
            Any,  # the stubs know values as str only; the bindings take bytes too
            TCPStore(HOST, self.port, None, True, timeout, wait_for_workers=False, master_listen_fd=listener.detach()),
        )
        self._store.set(_VERSION_KEY, self._keys.seal(_VERSION_KEY, b"0"))
        self._dispatch_store: Any = _client(self.port, _DISPATCH_TIMEOUT)
        self._dispatcher = threading.Thread(target=self._dispatch, name="pycollect-tdist-dispatch", daemon=True)
        self._dispatcher.start()

    def receiver(self) -> WeightReceiver:
        return _Receiver(self.port, self.timeout_s, self.backend, self._keys.secret)

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
            buffer.tagged = False  # a free buffer: no session thread is reading or tagging it
            self._latest = buffer
        remaining = max(timeout_s - (time.monotonic() - start), 1e-3)
        sealed = self._keys.seal(_VERSION_KEY, str(version).encode())
        try:
            self._store.set_timeout(timedelta(seconds=remaining))
            self._store.set(_VERSION_KEY, sealed)
            published = self._store.get(_VERSION_KEY)  # a round trip: the store has it
        except RuntimeError as exc:  # torch.distributed.DistError is a RuntimeError
            raise TransportError(
                f"weight_sync='torch_distributed': publishing policy version {version} to the trainer's "
                f"TCPStore at {HOST}:{self.port} did not complete within {timeout_s} s: {exc}"
            ) from exc
        if published != sealed:
            raise TransportError(
                f"weight_sync='torch_distributed': the TCPStore at {HOST}:{self.port} holds another value "
                f"right after policy version {version} was published (another process wrote the key)"
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

    def _tag(self, buffer: _Buffer) -> None:
        """Write the buffer's MAC after its bytes, once per version (hashing releases the GIL)."""
        with buffer.tagging:
            if not buffer.tagged:
                tag = self._keys.weights_tag(buffer.array[: buffer.nbytes])
                buffer.array[buffer.nbytes :] = np.frombuffer(tag, np.uint8)
                buffer.tagged = True

    # -- the dispatcher thread ---------------------------------------------------------------

    def _dispatch(self) -> None:
        try:
            while not self._closed:
                try:
                    raw = self._dispatch_store.queue_pop(_QUEUE_KEY, True)
                except RuntimeError:
                    continue  # a day without any message, or close() stopped the store
                if self._closed:
                    return
                try:
                    request = _parse(self._keys.open(_QUEUE_KEY, raw).decode().split())
                except (_Rejected, ValueError) as exc:  # UnicodeDecodeError is a ValueError
                    self._skipped.note(exc)
                    continue
                try:
                    self._handle(request)
                except Exception as exc:  # a bug with one request must not stop weight sync
                    logger.error("torch_distributed: could not serve %s", request, exc_info=exc)
        except BaseException as exc:  # the store itself failed; send() then reports it
            if not self._closed:
                logger.error("torch_distributed: the dispatcher thread failed", exc_info=exc)
        finally:
            self._dispatch_store = None

    def _handle(self, request: _Request) -> None:
        worker, pairing = request.worker, (request.generation, request.session)
        if request.kind == "want":
            with self._lock:
                current = self._sessions.get(worker)
                if current is None or (current.generation, current.session) != pairing:
                    return  # a request of a session already dropped: that worker times out and rejoins
                if request.number <= current.wants:
                    self._skipped.note(f"a replayed request for worker {worker}")
                    return
                current.wants = request.number
            current.requests.put(True)
            return
        if pairing <= self._served.get(worker, (0, 0)):
            self._skipped.note(f"a replayed or out-of-date join of worker {worker} {pairing}")
            return
        self._served[worker] = pairing
        prefix = self._keys.prefix(worker, *pairing)
        worker_cuda = None if request.device == "cpu" else request.device
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
        entry = _Session(worker, request.generation, request.session, backend, queue.SimpleQueue())
        entry.thread = threading.Thread(
            target=self._serve, args=(entry,), name=f"pycollect-tdist-w{worker}", daemon=True
        )
        with self._lock:
            previous = self._sessions.get(worker)
            self._sessions[worker] = entry
        if previous is not None:  # that worker's earlier generation or session: let its group go
            previous.requests.put(False)
        self._threads = [thread for thread in self._threads if thread.is_alive()]
        self._threads.append(entry.thread)
        entry.thread.start()
        self._store_answer(prefix, backend)

    def _store_answer(self, prefix: str, answer: str) -> None:
        store = self._dispatch_store
        if store is not None:
            key = prefix + "backend"
            store.set(key, self._keys.seal(key, answer.encode()))

    # -- one session thread per (worker, generation, session) --------------------------------

    def _serve(self, entry: _Session) -> None:
        from torch._C._distributed_c10d import PrefixStore

        where = f"worker {entry.worker} (generation {entry.generation})"
        group = sealed = None
        try:
            sealed = _sealed_store_type()(_client(self.port, timedelta(seconds=self.timeout_s)), self._keys)
            prefix = self._keys.prefix(entry.worker, entry.generation, entry.session)
            group = _make_group(entry.backend, PrefixStore(prefix, sealed), 0, self.timeout_s)
            staging = _Staging(entry.backend, self.layout.nbytes + _MAC_BYTES)
            pairing = _pairing(entry.worker, entry.generation, entry.session)
            _prove_peer(group, self._keys, pairing, staging.device(), self.timeout_s)
            while entry.requests.get():
                buffer = self._acquire_latest()
                if buffer is None:
                    continue  # cannot happen: a worker asks only after a version was published
                try:
                    self._tag(buffer)
                    tensor = staging.load(buffer)
                    if staging.copies:
                        self._release(buffer)
                        buffer = None
                    group.send([tensor], 1, _TAG).wait(timedelta(seconds=self.timeout_s))
                finally:
                    if buffer is not None:
                        self._release(buffer)
        except _Rejected as exc:
            if not self._closed:
                logger.warning("torch_distributed: %s; it was sent nothing else and its group was dropped", exc)
        except RuntimeError as exc:  # a dead, hung or departed worker: let its group go
            if not self._closed:
                logger.info("torch_distributed: dropped the group of %s: %s", where, exc)
        except Exception as exc:  # never the trainer's concern beyond this pairing
            if not self._closed:
                logger.warning("torch_distributed: the session of %s failed", where, exc_info=exc)
        finally:
            with self._lock:
                if self._sessions.get(entry.worker) is entry:
                    del self._sessions[entry.worker]
            del group, sealed

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
            self._store.queue_push(_QUEUE_KEY, b"")  # wakes the dispatcher, which sees _closed
        self._dispatcher.join(self.timeout_s)
        threads = list(self._threads)
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

    def device(self) -> Any:
        """Where this pair's tensors live: the CPU (gloo) or the trainer's current GPU (nccl)."""
        import torch

        if not self.copies:
            return torch.device("cpu")
        if self._device is None:
            self._device = torch.device("cuda", torch.cuda.current_device())
        return self._device

    def load(self, buffer: _Buffer) -> Any:
        if not self.copies:
            return buffer.tensor
        import torch

        if self._tensor is None:
            self._tensor = torch.empty(self._nbytes, dtype=torch.uint8, device=self.device())
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
    def __init__(self, port: int, timeout_s: float, backend: str, secret: bytes) -> None:
        self.port = port
        self.timeout_s = timeout_s
        self.backend = backend
        self._keys = _Keys(secret)
        self._reset()

    def _reset(self) -> None:
        self._layout: WeightsLayout | None = None
        self._store: Any = None
        self._sealed: Any = None  # the pair's store: referenced as long as its group lives
        self._group: Any = None
        self._device: Any = None
        self._gpu = False
        self._array = np.empty(0, np.uint8)
        self._tensor: Any = None
        self._worker = self._generation = self._session = self._seen = self._wants = 0
        self._forged = _Throttled("value(s) or weights that do not authenticate were ignored (weights kept)")

    def __getstate__(self) -> dict[str, Any]:
        # The secret travels in the worker's sealed spec, never through the store.
        return {"port": self.port, "timeout_s": self.timeout_s, "backend": self.backend, "secret": self._keys.secret}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.port, self.timeout_s, self.backend = state["port"], state["timeout_s"], state["backend"]
        self._keys = _Keys(state["secret"])
        self._reset()

    def attach(self, context: ReceiverContext) -> None:
        self._layout = context.layout
        self._worker, self._generation = context.worker, context.generation
        self._store = _client(self.port, timedelta(seconds=self.timeout_s))

    def receive(self, module: torch.nn.Module) -> int | None:
        try:
            raw = self._store.get(_VERSION_KEY)
        except RuntimeError as exc:
            raise TransportError(
                f"weight_sync='torch_distributed': the trainer's TCPStore at {HOST}:{self.port} "
                f"did not answer within {self.timeout_s} s: {exc}"
            ) from exc
        try:
            latest = int(self._keys.open(_VERSION_KEY, raw))
        except (_Rejected, ValueError) as exc:  # someone else wrote it: wait for the trainer's next
            self._forged.note(exc)
            return None
        if latest <= self._seen:
            return None
        try:
            if self._group is None:
                self._join(module)
            version = self._fetch(module)
        except (RuntimeError, TransportError) as exc:  # TransportError (nccl refused) is final
            self._group = self._sealed = None  # a new session at the next rollout
            if isinstance(exc, TransportError):
                raise
            if isinstance(exc, _Rejected):  # someone else's answer or weights: may come every rollout
                self._forged.note(exc)
                return None
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

    def _request(self, *fields: object) -> None:
        """Push one sealed request onto the trainer's queue."""
        message = " ".join(str(f) for f in fields).encode()
        self._store.queue_push(_QUEUE_KEY, self._keys.seal(_QUEUE_KEY, message))

    def _join(self, module: torch.nn.Module) -> None:
        import itertools

        import torch
        from torch._C._distributed_c10d import PrefixStore

        anchor = next(itertools.chain(module.parameters(), module.buffers()), None)
        device = anchor.device if anchor is not None else torch.device("cpu")
        described = _cuda_uuid(device) if device.type == "cuda" else "cpu"
        self._session += 1
        self._wants = 0
        prefix = self._keys.prefix(self._worker, self._generation, self._session)
        self._request("join", self._worker, self._generation, self._session, described)
        key = prefix + "backend"
        self._store.wait([key], timedelta(seconds=self.timeout_s))
        answer = self._keys.open(key, self._store.get(key)).decode()
        if answer.startswith("error "):
            raise TransportError(answer[len("error ") :])
        assert self._layout is not None
        nbytes = self._layout.nbytes + _MAC_BYTES
        self._gpu = answer == "nccl"
        if self._gpu:
            torch.cuda.set_device(device)
            self._tensor = torch.empty(nbytes, dtype=torch.uint8, device=device)
            self._device = device
        else:
            if self._array.size != nbytes:
                self._array = np.empty(nbytes, np.uint8)
                self._tensor = torch.from_numpy(self._array)
            self._device = torch.device("cpu")
        sealed = _sealed_store_type()(self._store, self._keys)
        group = _make_group(answer, PrefixStore(prefix, sealed), 1, self.timeout_s)
        pairing = _pairing(self._worker, self._generation, self._session)
        _answer_challenge(group, self._keys, pairing, self._device, self.timeout_s)
        self._group, self._sealed = group, sealed

    def _fetch(self, module: torch.nn.Module) -> int:
        assert self._layout is not None
        self._wants += 1
        self._request("want", self._worker, self._generation, self._session, self._wants)
        self._group.recv([self._tensor], 0, _TAG).wait(timedelta(seconds=self.timeout_s))
        nbytes = self._layout.nbytes
        if not self._gpu:
            _verify(self._keys, self._array, nbytes)  # before a single byte is loaded
            return self._layout.unpack(self._array[:nbytes], module)
        _verify(self._keys, self._tensor.cpu().numpy(), nbytes)
        return _unpack_device(self._layout, self._tensor, module)

    def close(self) -> None:
        self._group = self._sealed = None
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
