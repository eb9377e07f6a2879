"""The ``torch_distributed`` weight-sync scheme: real workers over gloo on loopback.

Weights reach the workers from their next rollout, stamped with the new version; a killed
worker comes back and pairs again at the latest version; a hung, dead or mid-transfer worker
never holds ``update_policy_weights_()`` up; the backend is chosen by the policy's device; and
nothing (store, port, thread, process) is left once the collector closes.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import re
import signal
import socket
import subprocess
import sys
import threading
from datetime import timedelta
from typing import Any

import pytest
import torch
from torch import nn

from pycollect import Collector, ConfigError, TransportError
from pycollect.cli import main
from pycollect.config import MAX_SECONDS
from pycollect.default_plugins import torch_distributed_scheme as tds
from pycollect.default_plugins.torch_distributed_scheme import TorchDistributedScheme, choose_backend
from pycollect.testing import check_scheme, wait_until
from pycollect.testing.envs import CountingEnv
from pycollect.weights import ReceiverContext
from pycollect.weights.layout import WeightsLayout

pytestmark = pytest.mark.timeout(180)

N_ACTIONS = 4


class BiasPolicy(nn.Module):
    """A Linear whose weights are zero: the largest bias entry is the action."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2, N_ACTIONS)
        with torch.no_grad():
            self.linear.weight.zero_()
            self.linear.bias.copy_(torch.eye(N_ACTIONS)[0])

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.linear(observation).argmax(-1)

    def choose(self, version: int) -> None:
        """Act ``version % N_ACTIONS`` from now on."""
        with torch.no_grad():
            self.linear.bias.copy_(torch.eye(N_ACTIONS)[version % N_ACTIONS])


def _collector(policy: nn.Module, scheme: Any = "torch_distributed", **kwargs: Any) -> Collector:
    options: dict[str, Any] = {
        "frames_per_batch": 40,
        "envs_per_worker": 2,
        "num_workers": 2,
        "seed": 0,
        "env_kwargs": {"length": 10**9, "n_actions": N_ACTIONS},
        "weight_sync": scheme,
    }
    options.update(kwargs)
    return Collector(CountingEnv, policy, **options)


def _check_frames(batch: Any) -> None:
    """Every frame was collected with the weights of the version it is stamped with."""
    assert torch.equal(batch["action"], batch["policy_version"].expand_as(batch["action"]) % N_ACTIONS)


def _wait_for_version(c: Collector, version: int, *, rows: slice = slice(None)) -> Any:
    found: list[Any] = []

    def arrived() -> bool:
        batch = c.next_batch()
        _check_frames(batch)
        found.append(batch)
        return bool((batch["policy_version"][rows] == version).all())

    wait_until(arrived, timeout_s=60, what=f"the workers to collect with version {version}", poll_s=0)
    return found


@pytest.mark.timeout(240)
def test_the_scheme_conforms() -> None:
    check_scheme("torch_distributed")


def test_workers_act_with_new_weights_from_their_next_rollout() -> None:
    policy = BiasPolicy()
    with _collector(policy) as c:
        first = c.next_batch()
        assert (first["action"] == 0).all() and (first["policy_version"] == 0).all()
        for version in (1, 2, 3):
            policy.choose(version)  # the action is the version: a frame shows the weights it ran with
            c.update_policy_weights_()
            batches = _wait_for_version(c, version)
            # a worker may have two rollouts done before the update: the third batch has it
            assert len(batches) <= 3, [b["policy_version"][:, 0].tolist() for b in batches]
        assert c.policy_version == 3


def test_a_killed_worker_restarts_from_the_latest_version() -> None:
    policy = BiasPolicy()
    # An update that waited for the dead worker would wait for this long: the test's timeout
    # fails it long before (no clock is asserted).
    with _collector(policy, TorchDistributedScheme(timeout_s=3600)) as c:
        for version in (1, 2):
            policy.choose(version)
            c.update_policy_weights_()
        _wait_for_version(c, 2)
        victim = c.stats().workers[1].pid
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        policy.choose(3)
        c.update_policy_weights_()  # the dead worker's group is nobody's concern here
        restarted = 1 + 2 * (1 << 32)  # trajectory ids of worker 1's generation 2 start here

        def second_generation() -> bool:
            batch = c.next_batch()
            _check_frames(batch)
            ids = batch["collector", "traj_ids"][2:, 0]
            if not bool((ids >= restarted).all()):
                return False
            assert (batch["policy_version"][2:] == 3).all(), batch["policy_version"][2:, 0]
            return True

        wait_until(second_generation, timeout_s=60, what="worker 1's second generation", poll_s=0)
        stats = c.stats()
        assert stats.workers[1].generation == 2 and stats.restarts == 1
        policy.choose(4)
        c.update_policy_weights_()  # the new generation keeps pairing: version 4 reaches it
        _wait_for_version(c, 4)


def test_a_hung_worker_does_not_block_updates() -> None:
    policy = BiasPolicy()
    # An update that waited for the hung worker would wait for this long: the test's timeout
    # fails it long before (no clock is asserted).
    scheme = TorchDistributedScheme(timeout_s=3600)
    with _collector(policy, scheme, sync=False) as c:
        policy.choose(1)
        c.update_policy_weights_()
        _wait_for_version(c, 1)
        hung = c.stats().workers[1].pid
        assert hung is not None
        os.kill(hung, signal.SIGSTOP)
        try:
            for version in (2, 3):
                policy.choose(version)
                c.update_policy_weights_()
            # Worker 0 keeps collecting and takes version 3 (async: its batches alone).
            batches = _wait_for_version(c, 3)
            assert all((b["collector", "traj_ids"] % 2 == 0).all() for b in batches[-1:])
        finally:
            os.kill(hung, signal.SIGCONT)
        _wait_for_version(c, 3)  # both workers, the resumed one too (async: any batch)
        wait_until(
            lambda: _versions_of(c, worker=1) == {3}, timeout_s=60, what="the resumed worker to collect version 3"
        )


def _versions_of(c: Collector, *, worker: int) -> set[int]:
    batch = c.next_batch()
    _check_frames(batch)
    mine = batch["collector", "traj_ids"][:, 0] % 2 == worker
    return set(batch["policy_version"][mine][:, 0].tolist())


def test_a_worker_stalled_mid_transfer_does_not_block_send() -> None:
    """The trainer's side alone, with a worker (a thread here) that asks and never receives."""
    state = {"w": torch.zeros(16 << 20)}  # 64 MiB: more than a socket buffer holds
    layout = WeightsLayout.from_state_dict(state)
    # The stalled session is dropped after the scheme's timeout: long enough for the two sends
    # below to finish before it on a loaded machine.
    sender = tds._Sender(layout, timeout_s=5.0, backend="auto")
    try:
        sender.send(state, 1, timeout_s=5.0)
        receiver = pickle.loads(pickle.dumps(sender.receiver()))
        receiver.attach(ReceiverContext(layout, 0, 1, None))
        module = nn.Module()
        module.register_buffer("w", torch.zeros(16 << 20))
        joined = threading.Thread(target=receiver._join, args=(module,))
        joined.start()
        wait_until(lambda: 0 in sender._sessions, timeout_s=30, what="the trainer to start the session")
        joined.join(30)
        assert receiver._group is not None
        receiver._request("want", 0, 1, 1, 1)  # ... and never receives
        wait_until(lambda: any(b.users for b in sender._buffers), timeout_s=30, what="the transfer to start")
        for version in (2, 3):
            sender.send({"w": torch.full((16 << 20,), float(version))}, version, timeout_s=5.0)
        assert sender._latest is not None and sender._latest.version == 3
        # Both sends returned while version 1 is still being sent (the stalled session is only
        # dropped after the scheme's timeout): they did not wait for it. No clock is asserted:
        # two 64 MiB copies can take more than a second on a loaded machine.
        assert sender._buffers[0].users == 1  # version 1 is still being sent: never overwritten
        # The send times out after the scheme's timeout and the session lets its group go.
        wait_until(lambda: 0 not in sender._sessions, timeout_s=30, what="the stalled session to be dropped")
        assert all(b.users == 0 for b in sender._buffers)
        receiver.close()
    finally:
        sender.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("pycollect-tdist")]


def test_send_names_the_store_it_could_not_publish_to() -> None:
    class Stuck:
        def set_timeout(self, timeout: timedelta) -> None:
            pass

        def set(self, key: str, value: str) -> None:
            raise RuntimeError("wait timeout after 5ms")

    state = {"w": torch.zeros(3)}
    sender = tds._Sender(WeightsLayout.from_state_dict(state), timeout_s=1.0, backend="auto")
    real, sender._store = sender._store, Stuck()
    try:
        with pytest.raises(
            TransportError, match=r"publishing policy version 7 to the trainer's TCPStore at 127\.0\.0\.1"
        ):
            sender.send(state, 7, timeout_s=0.005)
    finally:
        sender._store = real
        sender.close()


@pytest.mark.parametrize(
    ("option", "worker", "trainer", "nccl", "expected"),
    [
        ("auto", None, None, True, "gloo"),
        ("auto", None, "GPU-a", True, "gloo"),
        ("auto", "GPU-b", None, True, "gloo"),
        ("auto", "GPU-b", "GPU-a", False, "gloo"),
        ("auto", "GPU-a", "GPU-a", True, "gloo"),  # one device: nccl cannot pair it with itself
        ("auto", "GPU-b", "GPU-a", True, "nccl"),
        ("gloo", "GPU-b", "GPU-a", True, "gloo"),
        ("nccl", "GPU-b", "GPU-a", True, "nccl"),
    ],
)
def test_the_backend_follows_the_devices(
    option: str, worker: str | None, trainer: str | None, nccl: bool, expected: str
) -> None:
    assert choose_backend(option, worker_cuda=worker, trainer_cuda=trainer, nccl_available=nccl) == expected


@pytest.mark.parametrize(
    ("worker", "trainer", "reason"),
    [(None, "GPU-a", "not on a CUDA device"), ("GPU-a", None, "no CUDA"), ("GPU-a", "GPU-a", "trainer's GPU")],
)
def test_nccl_insisted_on_says_why_it_cannot_be(worker: str | None, trainer: str | None, reason: str) -> None:
    with pytest.raises(TransportError, match=reason):
        choose_backend("nccl", worker_cuda=worker, trainer_cuda=trainer, nccl_available=True)


def test_a_cuda_worker_on_another_gpu_is_paired_over_nccl(monkeypatch: pytest.MonkeyPatch) -> None:
    """The trainer's side of the choice, with the devices and the nccl group mocked."""
    built: list[tuple[str, int]] = []
    monkeypatch.setattr(tds, "_trainer_cuda", lambda: "GPU-trainer")
    monkeypatch.setattr(tds, "_nccl_available", lambda: True)
    monkeypatch.setattr(tds, "_make_group", lambda backend, store, rank, timeout_s: built.append((backend, rank)))
    monkeypatch.setattr(tds, "_prove_peer", lambda *args: None)
    state = {"w": torch.zeros(3)}
    sender = tds._Sender(WeightsLayout.from_state_dict(state), timeout_s=2.0, backend="auto")
    try:
        client = tds._client(sender.port, timedelta(seconds=10))
        keys = sender._keys
        client.queue_push(tds._QUEUE_KEY, keys.seal(tds._QUEUE_KEY, b"join 0 1 1 GPU-worker"))
        client.queue_push(tds._QUEUE_KEY, keys.seal(tds._QUEUE_KEY, b"join 1 1 1 cpu"))
        answers = [keys.prefix(0, 1, 1) + "backend", keys.prefix(1, 1, 1) + "backend"]
        client.wait(answers, timedelta(seconds=10))
        assert [keys.open(key, client.get(key)) for key in answers] == [b"nccl", b"gloo"]
        wait_until(lambda: len(built) == 2, timeout_s=10, what="both groups to be built")
        assert sorted(built) == [("gloo", 0), ("nccl", 0)]
        del client
    finally:
        sender.close()


def test_the_workers_half_pickles_to_its_port_options_and_secret() -> None:
    state = {"w": torch.zeros(1000)}
    sender = tds._Sender(WeightsLayout.from_state_dict(state), timeout_s=3.0, backend="gloo")
    try:
        receiver = sender.receiver()
        secret = sender._keys.secret
        assert len(secret) == 32
        assert receiver.__getstate__() == {"port": sender.port, "timeout_s": 3.0, "backend": "gloo", "secret": secret}
        assert len(pickle.dumps(receiver)) < 500
        assert repr(secret) not in repr(receiver._keys) and repr(secret) not in repr(vars(receiver))
    finally:
        sender.close()


def test_options_are_checked() -> None:
    from pycollect import ConfigError

    with pytest.raises(ConfigError, match="backend"):
        TorchDistributedScheme(backend="mpi")
    with pytest.raises(ConfigError, match="timeout_s"):
        TorchDistributedScheme(timeout_s=0)


@pytest.mark.parametrize("value", [1e300, math.inf, MAX_SECONDS * 2, math.nan, -1.0, 0, True, "5", None])
def test_timeouts_out_of_range_are_refused_up_front(value: Any) -> None:
    """Not accepted, to fail later as a bare OverflowError in timedelta or the store."""
    expected = rf"timeout_s must be .* at most {re.escape(f'{MAX_SECONDS:g}')} s, got {re.escape(repr(value))}"
    with pytest.raises(ConfigError, match=expected):
        TorchDistributedScheme(timeout_s=value)


def test_the_longest_timeout_is_taken_by_the_store_and_the_groups() -> None:
    state = {"w": torch.zeros(3)}
    scheme = TorchDistributedScheme(timeout_s=MAX_SECONDS)
    sender = tds._Sender(WeightsLayout.from_state_dict(state), timeout_s=scheme.timeout_s, backend="gloo")
    try:
        sender.send(state, 1, timeout_s=MAX_SECONDS)
        receiver = pickle.loads(pickle.dumps(sender.receiver()))
        receiver.attach(ReceiverContext(sender.layout, 0, 1, None))
        module = nn.Module()
        module.register_buffer("w", torch.ones(3))
        assert receiver.receive(module) == 1 and not module.w.any()
        receiver.close()
    finally:
        sender.close()


def test_nothing_is_left_once_the_collector_closes() -> None:
    policy = BiasPolicy()
    with _collector(policy) as c:
        policy.choose(1)
        c.update_policy_weights_()
        _wait_for_version(c, 1)
        sender = c._engine._sender
        assert isinstance(sender, tds._Sender)
        port = sender.port
        listening = _listeners(port)
        assert listening == ["127.0.0.1"], listening  # loopback only
    assert not [t for t in threading.enumerate() if t.name.startswith("pycollect-tdist")]
    with pytest.raises(OSError), socket.create_connection((tds.HOST, port), timeout=1.0):
        pass


def _listeners(port: int) -> list[str]:
    """The local addresses listening on TCP ``port`` (from /proc/net/tcp and tcp6)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                address, hex_port = local.split(":")
                if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                    ipv4 = len(address) == 8
                    found.append(socket.inet_ntop(socket.AF_INET, bytes.fromhex(address)[::-1]) if ipv4 else address)
    return found


def test_the_cli_lists_the_scheme(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    entry = next(item for item in listing["schemes"] if item["name"] == "torch_distributed")
    assert entry["builtin"] and entry["class"].endswith("TorchDistributedScheme")


def test_loading_the_plugin_does_not_import_torch() -> None:
    code = "import sys, pycollect.default_plugins.torch_distributed_scheme; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["False"]
