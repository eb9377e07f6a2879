"""The ``torch_distributed`` scheme against other local users and against bad requests.

The trainer's ``TCPStore`` listens on 127.0.0.1, where any local user can connect, list every key,
read and write values and push onto the request queue. The attacks run from a process of
another user (uid 65534, see tdist_stranger.py): it must get no weights, and nothing it pushes
or writes may make a worker act with, or stamp, weights the trainer did not send; nor may a
malformed request stop weight sync. The same-process tests check the pieces one by one: requests
that do not authenticate or replay, a peer that pairs without the secret, forged weights.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from test_torch_distributed_scheme import BiasPolicy, _check_frames, _collector, _wait_for_version
from torch import nn

from pycollect import Collector
from pycollect.default_plugins import torch_distributed_scheme as tds
from pycollect.default_plugins.torch_distributed_scheme import TorchDistributedScheme
from pycollect.testing import wait_until
from pycollect.weights import ReceiverContext
from pycollect.weights.layout import WeightsLayout

pytestmark = pytest.mark.timeout(180)

STRANGER = Path(__file__).parent / "tdist_stranger.py"

MALFORMED = [
    b"garbage",
    b"join 0 1",
    b"stop",
    b"",
    b"want",
    b"join 0 1 1",
    b"join x y z cpu",
    b"want 0 1 x",
    b"\xff\xfe\x00 join",
    b"join 0 1 1 cpu",  # the old, unauthenticated format of a real worker's requests
    b"want 0 1 1",
    b"join 0 99 99 cpu extra words",
]


def _start_stranger(orders: dict[str, Any]) -> subprocess.Popen[str]:
    """A process of uid 65534 that carries out ``orders`` (see tdist_stranger.py)."""
    if os.geteuid() != 0:
        pytest.skip("becoming another user (uid 65534) needs root")
    stranger = subprocess.Popen(
        [sys.executable, str(STRANGER)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert stranger.stdin is not None
    stranger.stdin.write(json.dumps(orders))
    stranger.stdin.close()
    stranger.stdin = None  # so that communicate() does not write to it again
    return stranger


def _finish(stranger: subprocess.Popen[str], timeout_s: float = 60) -> dict[str, Any]:
    try:
        out, err = stranger.communicate(timeout=timeout_s)
    finally:
        if stranger.poll() is None:
            stranger.kill()
            stranger.communicate()
    assert stranger.returncode == 0, err
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    assert result["uid"] == 65534
    return result


def _sender(c: Collector) -> tds._Sender:
    sender = c._engine._sender
    assert isinstance(sender, tds._Sender)
    return sender


# -- 4. weights no stranger can read or write ------------------------------------------------------


def test_a_stranger_joining_as_a_worker_gets_no_weights() -> None:
    policy = BiasPolicy()
    with _collector(policy) as c:
        policy.choose(1)
        c.update_policy_weights_()
        _wait_for_version(c, 1)
        sender = _sender(c)
        stranger = _start_stranger(
            {"mode": "join", "port": sender.port, "worker": 7, "wait_s": 10, "nbytes": sender.layout.nbytes}
        )
        try:
            for version in (2, 3):  # the real workers keep getting weights meanwhile
                policy.choose(version)
                c.update_policy_weights_()
                _wait_for_version(c, version)
        finally:
            result = _finish(stranger)
        assert result["got"] is None, "a process of another user received the trainer's weights"
        policy.choose(4)
        c.update_policy_weights_()
        _wait_for_version(c, 4)


def _forged(layout: WeightsLayout, version: int, action: int) -> bytes:
    """A flat buffer in the old wire format: weights that act ``action``, stamped ``version``."""
    policy = BiasPolicy()
    policy.choose(action)
    out = np.zeros(layout.nbytes, np.uint8)
    layout.pack(policy.state_dict(keep_vars=False), out, version)
    return out.tobytes()


def test_a_stranger_cannot_feed_a_restarting_worker_weights_or_a_version() -> None:
    """The stranger pre-claims worker 1's next pairing and forges every key and request it sees."""
    policy = BiasPolicy()
    forged_version = 999
    with _collector(policy, TorchDistributedScheme(timeout_s=2.0)) as c:
        policy.choose(1)
        c.update_policy_weights_()
        _wait_for_version(c, 1)
        sender = _sender(c)
        forged = _forged(sender.layout, forged_version, action=2)  # 999 would act 3: both show
        claimed = "pycollect/w1/g2/s1/backend"  # the old, predictable pairing of generation 2
        stranger = _start_stranger(
            {
                "mode": "preclaim",
                "port": sender.port,
                "worker": 1,
                "generation": 2,
                "forged": forged.hex(),
                "duration_s": 10,
            }
        )
        try:
            observer = tds._client(sender.port, timedelta(seconds=30))
            wait_until(lambda: observer.check([claimed]), timeout_s=30, what="the stranger to pre-claim the pairing")
            victim = c.stats().workers[1].pid
            assert victim is not None
            os.kill(victim, 9)
            versions: set[int] = set()

            def attack_over() -> bool:
                batch = c.next_batch()
                _check_frames(batch)  # every frame acted with the weights of the version it claims
                versions.update(batch["policy_version"].flatten().tolist())
                assert versions <= {0, 1}, f"frames stamped with versions never published: {versions}"
                return c.stats().workers[1].generation == 2 and stranger.poll() is not None

            wait_until(attack_over, timeout_s=90, what="the restarted worker to run through the attack", poll_s=0)
        finally:
            result = _finish(stranger)
        assert not result["sent"], result
        policy.choose(2)
        c.update_policy_weights_()  # and weights reach every worker again, the restarted one too
        _wait_for_version(c, 2)


# -- 5. malformed requests -------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["the same process", "another user"])
def test_malformed_requests_do_not_stop_weight_sync(who: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="pycollect.weights")
    policy = BiasPolicy()
    with _collector(policy) as c:
        policy.choose(1)
        c.update_policy_weights_()
        _wait_for_version(c, 1)
        sender = _sender(c)
        client = tds._client(sender.port, timedelta(seconds=30))
        if who == "another user":
            _finish(_start_stranger({"mode": "flood", "port": sender.port, "messages": [m.hex() for m in MALFORMED]}))
        else:
            for message in MALFORMED:
                client.queue_push(tds._QUEUE_KEY, message)
        wait_until(lambda: client.queue_len(tds._QUEUE_KEY) == 0, timeout_s=30, what="the dispatcher to read them")
        for version in (2, 3):
            policy.choose(version)
            c.update_policy_weights_()
            _wait_for_version(c, version)
    assert any("did not parse or authenticate" in record.getMessage() for record in caplog.records)


# -- the pieces, in one process ----------------------------------------------------------------------


def _one_tensor_sender(timeout_s: float = 2.0, n: int = 1000) -> tuple[tds._Sender, dict[str, torch.Tensor]]:
    state = {"w": torch.arange(n, dtype=torch.float32)}
    return tds._Sender(WeightsLayout.from_state_dict(state), timeout_s=timeout_s, backend="gloo"), state


def _module(n: int = 1000) -> nn.Module:
    module = nn.Module()
    module.register_buffer("w", torch.zeros(n))
    return module


def test_requests_that_do_not_authenticate_or_replay_start_no_session(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    monkeypatch.setattr(tds, "_make_group", lambda backend, store, rank, timeout_s: built.append(backend))
    monkeypatch.setattr(tds, "_prove_peer", lambda *args: None)
    sender, _ = _one_tensor_sender()
    try:
        client = tds._client(sender.port, timedelta(seconds=10))
        keys = sender.receiver()._keys

        def push(message: str, key: tds._Keys = keys) -> bytes:
            sealed = key.seal(tds._QUEUE_KEY, message.encode())
            client.queue_push(tds._QUEUE_KEY, sealed)
            return sealed

        def drained() -> bool:
            return bool(client.queue_len(tds._QUEUE_KEY) == 0)

        first = push("join 5 1 1 cpu")
        wait_until(lambda: len(built) == 1, timeout_s=10, what="the authenticated join to start a session")
        client.queue_push(tds._QUEUE_KEY, first)  # the same request again
        push("join 5 1 1 cpu")  # a fresh seal of a pairing already served
        push("join 5 0 9 cpu")  # an earlier generation
        push("join 6 1 1 cpu", tds._Keys(b"\x01" * 32))  # another collector's secret
        client.queue_push(tds._QUEUE_KEY, first[:-1] + bytes([first[-1] ^ 1]))  # a flipped bit
        wait_until(drained, timeout_s=10, what="the dispatcher to read them")
        push("join 5 1 2 cpu")  # the worker's next session is served
        wait_until(lambda: len(built) == 2, timeout_s=10, what="the next session")
        wait_until(drained, timeout_s=10, what="the dispatcher to read it")
        assert len(built) == 2 and sorted(sender._sessions) == [5]
        assert sender._dispatcher.is_alive()
    finally:
        sender.close()


def test_a_peer_without_the_secret_is_sent_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """One that can read the store's values (say, it found the gloo address) but cannot prove itself."""
    caplog.set_level(logging.INFO, logger="pycollect.weights")
    sender, state = _one_tensor_sender()
    try:
        sender.send(state, 1, timeout_s=5.0)
        impostor = pickle.loads(pickle.dumps(sender.receiver()))
        impostor._keys = tds._Keys(impostor._keys.secret, proof=b"\x00" * 32)
        impostor.attach(ReceiverContext(sender.layout, 0, 1, None))
        module = _module()
        assert impostor.receive(module) is None  # paired, challenged, dropped
        assert not module.w.any(), "the trainer sent weights to a peer that did not prove itself"
        wait_until(
            lambda: any("did not prove" in r.getMessage() for r in caplog.records),
            timeout_s=10,
            what="the trainer to log the impostor",
        )
        honest = pickle.loads(pickle.dumps(sender.receiver()))
        honest.attach(ReceiverContext(sender.layout, 1, 1, None))
        assert honest.receive(module) == 1 and torch.equal(module.w, state["w"])
        impostor.close()
        honest.close()
    finally:
        sender.close()


def test_weights_that_do_not_authenticate_are_not_loaded() -> None:
    sender, state = _one_tensor_sender()
    try:
        sender.send(state, 3, timeout_s=5.0)
        buffer = sender._latest
        assert buffer is not None
        sender._tag(buffer)
        receiver = sender.receiver()
        keys, nbytes = receiver._keys, sender.layout.nbytes
        assert tds._verify(keys, buffer.array, nbytes) is None  # the genuine buffer passes
        for flip in (0, 8, 100, nbytes - 1, nbytes, nbytes + 31):  # version, weights, tag
            forged = buffer.array.copy()
            forged[flip] ^= 1
            with pytest.raises(tds._Rejected, match="do not authenticate"):
                tds._verify(keys, forged, nbytes)
        with pytest.raises(tds._Rejected):
            tds._verify(tds._Keys(b"\x02" * 32), buffer.array, nbytes)
    finally:
        sender.close()


def test_store_values_are_sealed_and_bound_to_their_key() -> None:
    keys = tds._Keys(b"\x03" * 32)
    sealed = keys.seal("a", b"gloo")
    assert b"gloo" not in sealed and keys.open("a", sealed) == b"gloo"
    assert keys.seal("a", b"gloo") != sealed  # a fresh nonce every time
    for bad in (b"gloo", b"", sealed[:-1], sealed[:5] + bytes([sealed[5] ^ 1]) + sealed[6:]):
        with pytest.raises(tds._Rejected):
            keys.open("a", bad)
    with pytest.raises(tds._Rejected):
        keys.open("b", sealed)  # moved to another key
    with pytest.raises(tds._Rejected):
        tds._Keys(b"\x04" * 32).open("a", sealed)


def test_a_forged_version_in_the_store_is_ignored_by_workers() -> None:
    sender, state = _one_tensor_sender()
    try:
        sender.send(state, 2, timeout_s=5.0)
        receiver = sender.receiver()
        receiver.attach(ReceiverContext(sender.layout, 0, 1, None))
        module = _module()
        assert receiver.receive(module) == 2
        stranger = tds._client(sender.port, timedelta(seconds=10))
        stranger.set(tds._VERSION_KEY, "1000")
        assert receiver.receive(module) is None  # logged, kept version 2, no exception
        assert receiver._seen == 2
        receiver.close()
        del stranger
    finally:
        sender.close()


def test_no_thread_is_left_when_an_impostor_keeps_a_session_waiting() -> None:
    sender, _ = _one_tensor_sender(timeout_s=1.0)
    client = tds._client(sender.port, timedelta(seconds=10))
    keys = sender.receiver()._keys
    client.queue_push(tds._QUEUE_KEY, keys.seal(tds._QUEUE_KEY, b"join 3 1 1 cpu"))
    wait_until(lambda: 3 in sender._sessions, timeout_s=10, what="the session to start")
    sender.close()
    del client
    assert not [t for t in threading.enumerate() if t.name.startswith("pycollect-tdist")]
