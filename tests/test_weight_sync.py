"""The shared-memory weight-sync path: in place on both sides, never torn, never stuck.

The trainer writes each tensor once, straight into a reserved buffer of the store; a worker in
``copy`` mode (the default) copies it once into its own tensors, in ``view`` mode it makes its
parameters views of the pinned buffer (no copy at all). Every worker holds at most one pin, so
with ``num_workers + 2`` buffers a publish always finds a free buffer, and a worker killed
while it holds one gives it back when it is reaped. What view mode refuses (a policy writing
or keeping its parameters' storage) is in ``test_view_weights.py``.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from pycollect import Collector, ConfigError, PolicyError, SharedMemoryScheme, TransportError, _core
from pycollect.testing import check_scheme, wait_until
from pycollect.testing.envs import CountingEnv
from pycollect.weights.layout import WeightsLayout, module_weights


def _store(buffers: int, readers: int, nbytes: int = 4096) -> _core.Segment:
    return _core.Segment.create(
        [("x", "uint8", ())],
        n_workers=readers,
        envs_per_worker=1,
        steps=1,
        slots_per_worker=2,
        weights_capacity=nbytes,
        weights_buffers=buffers,
        backing="auto",
    )


def _publish_in_place(writer: Any, value: int, nbytes: int = 4096) -> int:
    view = np.asarray(writer.reserve(nbytes, timeout_s=1.0))
    view[:] = value
    del view
    return int(writer.commit())


# -- the store's in-place API ------------------------------------------------------------


def test_reserve_commit_and_pin_read_the_same_bytes_in_place() -> None:
    segment = _store(3, 1)
    writer, reader = segment.weights_writer(), segment.weights_reader(0)
    assert reader.pin_latest() is None  # nothing published yet
    assert _publish_in_place(writer, 7) == 1
    version, view = reader.pin_latest()
    data = np.asarray(view)
    assert version == 1 and reader.pinned_version == 1
    assert data.shape == (4096,) and not data.flags.writeable and (data == 7).all()
    reader.unpin()
    assert reader.pinned_version is None


def test_a_pinned_buffer_is_never_written_and_n_plus_2_buffers_never_run_out() -> None:
    readers = 3
    segment = _store(readers + 2, readers)
    writer = segment.weights_writer()
    pinned = []
    for r in range(readers):  # every reader pins another version, as view-mode workers do
        _publish_in_place(writer, r + 1)
        reader = segment.weights_reader(r)
        version, view = reader.pin_latest()
        pinned.append((reader, version, np.asarray(view)))
    for value in range(10, 30):  # the writer always finds the one free buffer
        _publish_in_place(writer, value)
    for _, version, data in pinned:
        assert (data == version).all()  # untouched while pinned


def test_publishing_when_readers_pin_every_spare_buffer_is_a_named_error() -> None:
    segment = _store(3, 2)
    writer = segment.weights_writer()
    for r in range(2):
        _publish_in_place(writer, r + 1)
        segment.weights_reader(r).pin_latest()
    _publish_in_place(writer, 3)  # the latest: the only buffer left is neither pinned nor latest
    with pytest.raises(TransportError, match="every weights buffer is held by a reader"):
        writer.reserve(4096, timeout_s=0.05)


def test_reserve_misuse_is_a_config_error() -> None:
    writer = _store(3, 1).weights_writer()
    with pytest.raises(ConfigError, match="no weights buffer is reserved"):
        writer.commit()
    writer.reserve(16, timeout_s=1.0)
    with pytest.raises(ConfigError, match="already reserved"):
        writer.reserve(16, timeout_s=1.0)
    with pytest.raises(ConfigError, match="before publish"):
        writer.publish(b"abc", timeout_s=1.0)
    writer.abandon()
    assert writer.latest_version == 0  # abandoned: nothing published
    with pytest.raises(ConfigError, match="4097"):
        writer.reserve(4097, timeout_s=1.0)


def test_populate_only_before_the_first_publish() -> None:
    writer = _store(3, 1).weights_writer()
    writer.populate()
    _publish_in_place(writer, 1)
    with pytest.raises(ConfigError, match="populate"):
        writer.populate()


def test_a_reader_holding_a_pin_cannot_copy_out() -> None:
    segment = _store(3, 1)
    _publish_in_place(segment.weights_writer(), 1)
    reader = segment.weights_reader(0)
    reader.pin_latest()
    with pytest.raises(ConfigError, match="unpin"):
        reader.read_into(bytearray(4096))


# -- the layout: what travels, and how a worker takes it ---------------------------------


class _Normed(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 2)
        self.norm = torch.nn.BatchNorm1d(2)
        self.tied = self.linear  # the same parameters under a second name
        self.register_buffer("scratch", torch.zeros(4), persistent=False)


def test_the_weights_are_parameters_and_buffers_non_persistent_ones_included() -> None:
    names = list(module_weights(_Normed()))
    assert names == [
        "linear.weight",
        "linear.bias",
        "norm.weight",
        "norm.bias",
        "scratch",
        "norm.running_mean",
        "norm.running_var",
        "norm.num_batches_tracked",
    ]
    # tensordict's set too, which names a tied parameter twice
    assert set(names) | {"tied.weight", "tied.bias"} == set(TensorDict.from_module(_Normed()).flatten_keys(".").keys())
    layout = WeightsLayout.from_module(_Normed())
    assert [entry.parameter for entry in layout.entries] == [True] * 4 + [False] * 4


def _packed(module: torch.nn.Module, version: int) -> tuple[WeightsLayout, np.ndarray]:
    layout = WeightsLayout.from_module(module)
    out = np.zeros(layout.nbytes, np.uint8)
    layout.pack(module_weights(module), out, version)
    return layout, out


def test_share_makes_parameters_views_and_copies_buffers() -> None:
    source = _Normed()
    with torch.no_grad():
        for tensor in module_weights(source).values():
            tensor.fill_(3)
    layout, data = _packed(source, 9)
    data.flags.writeable = False  # as a pinned view of shared memory is
    worker = _Normed()
    weight = worker.linear.weight
    assert layout.share(data, worker) == 9
    assert worker.linear.weight is weight  # the same Parameter, now over the shared bytes
    start, end = data.ctypes.data, data.ctypes.data + data.nbytes
    assert start <= weight.data_ptr() < end and worker.tied.weight.data_ptr() == weight.data_ptr()
    assert not start <= worker.norm.running_mean.data_ptr() < end  # buffers are the worker's own
    for name, tensor in module_weights(worker).items():
        assert (tensor == 3).all(), name


def test_unpack_copies_into_the_modules_own_tensors() -> None:
    source = _Normed()
    with torch.no_grad():
        source.linear.weight.fill_(5)
    layout, data = _packed(source, 4)
    worker = _Normed()
    before = worker.linear.weight.data_ptr()
    assert layout.unpack(data, worker) == 4
    assert worker.linear.weight.data_ptr() == before and (worker.linear.weight == 5).all()


def test_weights_that_do_not_match_name_the_first_mismatch() -> None:
    layout = WeightsLayout.from_module(_Normed())
    weights = module_weights(_Normed())
    with pytest.raises(PolicyError, match="they lack 'scratch'"):
        layout.check({k: v for k, v in weights.items() if k != "scratch"})
    with pytest.raises(PolicyError, match=r"'linear.bias' is \(3,\) torch.float32, not \(2,\) torch.float32"):
        layout.check(weights | {"linear.bias": torch.zeros(3)})
    with pytest.raises(PolicyError, match="unexpected entry 'extra'"):
        layout.check(weights | {"extra": torch.zeros(4)})


# -- with workers ---------------------------------------------------------------------------


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", ["view", "copy"])
def test_the_shared_memory_scheme_passes_the_conformance_check_in_both_modes(mode: str) -> None:
    check_scheme(SharedMemoryScheme(mode=mode))  # type: ignore[arg-type]


def test_an_unknown_mode_is_named() -> None:
    with pytest.raises(ConfigError, match="'mmap'"):
        SharedMemoryScheme(mode="mmap")  # type: ignore[arg-type]


def test_the_store_has_a_buffer_per_worker_in_view_mode() -> None:
    assert SharedMemoryScheme(mode="view").store_buffers(6) == 8
    assert SharedMemoryScheme(mode="copy").store_buffers(6) == 3
    assert SharedMemoryScheme(mode="copy").store_buffers(254) == 3
    with pytest.raises(ConfigError, match="num_workers=254 is too many"):
        SharedMemoryScheme(mode="view").store_buffers(254)


class _ActsItsValue(torch.nn.Module):
    """Action = the value of a big parameter (every element equal), checked per frame."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.bank = torch.nn.Parameter(torch.zeros(size))

    def forward(self, observation: torch.Tensor) -> dict[str, torch.Tensor]:
        n = observation.shape[0]
        bank = self.bank.detach()
        sample = torch.stack([bank[0], bank[bank.numel() // 2], bank[-1]])
        torn = (sample != sample[0]).any()
        return {"action": sample[0].long().expand(n).clone(), "torn": torn.expand(n).clone()}

    def set(self, version: int) -> None:
        with torch.no_grad():
            self.bank.fill_(version % 4)


def _policy(size: int) -> tuple[_ActsItsValue, TensorDictModule]:
    net = _ActsItsValue(size)
    return net, TensorDictModule(net, in_keys=["observation"], out_keys=["action", "torn"])


def _collector(policy: TensorDictModule, steps: int, **settings: Any) -> Collector:
    """Two workers of one endless counting env each, ``steps`` per rollout."""
    return Collector(
        CountingEnv,
        policy,
        frames_per_batch=2 * steps,
        envs_per_worker=1,
        num_workers=2,
        env_kwargs={"length": 10**9, "n_actions": 4},
        seed=0,
        **settings,
    )


def _check_frames(batch: Any) -> None:
    assert not batch["torn"].any()
    assert torch.equal(batch["action"], batch["policy_version"] % 4)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", ["view", "copy"])
def test_apply_weights_between_steps_switches_mid_rollout_with_every_frame_stamped(mode: str) -> None:
    net, policy = _policy(1000)
    scheme = SharedMemoryScheme(mode=mode)  # type: ignore[arg-type]
    with _collector(policy, 200, apply_weights="between_steps", weight_sync=scheme) as collector:
        mixed = False
        for batch in collector:
            _check_frames(batch)
            versions = batch["policy_version"]
            mixed = mixed or bool((versions.amin(-1) != versions.amax(-1)).any())
            if mixed or collector.policy_version > 40:
                break
            net.set(collector.policy_version + 1)
            collector.update_policy_weights_()
    assert mixed, "no rollout ever switched weights part-way"


def test_apply_weights_is_checked() -> None:
    with pytest.raises(ConfigError, match="apply_weights must be one of 'between_rollouts', 'between_steps'"):
        Collector("CartPole-v1", frames_per_batch=8, apply_weights="sometimes")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["view", "copy"])
def test_workers_killed_while_taking_large_weights_never_block_a_publish(mode: str) -> None:
    net, policy = _policy(4 << 20)  # 16 MiB: a copy-mode read takes milliseconds
    with _collector(
        policy, 8, weight_sync=SharedMemoryScheme(mode=mode), weight_sync_timeout_s=2.0, max_restarts=100
    ) as collector:
        for round_ in range(6):
            victim = round_ % 2
            net.set(collector.policy_version + 1)
            collector.update_policy_weights_()
            pid = collector.stats().workers[victim].pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)  # most likely while it takes the new version
            net.set(collector.policy_version + 1)
            collector.update_policy_weights_()  # must not wait on the dead reader's pin
            latest = collector.policy_version

            def every_worker_on(version: int = latest) -> bool:
                batch = collector.next_batch()
                _check_frames(batch)
                return bool((batch["policy_version"][:, -1] == version).all())

            wait_until(every_worker_on, timeout_s=60, what=f"both workers acting with version {latest}")
        assert collector.stats().restarts >= 6


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda state: {k: v for k, v in state.items() if k != "bias"}, "they lack 'bias'"),
        (lambda state: state | {"extra": torch.zeros(1)}, "have the unexpected entry 'extra'"),
        (
            lambda state: state | {"weight": torch.zeros(3, 3)},
            r"'weight' is \(3, 3\) torch.float32, not \(2, 4\)",
        ),
        (lambda state: TensorDict(state | {"bias": torch.zeros(5)}), r"'bias' is \(5,\)"),
    ],
)
def test_update_policy_weights_refuses_weights_that_do_not_fit_naming_the_first_mismatch(
    make: Any, message: str
) -> None:
    net = torch.nn.Linear(4, 2)
    policy = TensorDictModule(net, in_keys=["observation"], out_keys=["logits"])
    with Collector(
        "CartPole-v1", lambda td: policy(td)["logits"].argmax(-1), weights_from=net, frames_per_batch=8
    ) as c:
        with pytest.raises(PolicyError, match=message):
            c.update_policy_weights_(make(dict(net.state_dict())))
        assert c.policy_version == 0  # refused before anything changed
