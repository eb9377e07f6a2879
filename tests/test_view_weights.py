"""A frame never claims weights it did not act with, in either mode of the shared_memory scheme.

Two policies that go wrong silently when a worker's parameters are views of the buffer every
worker shares (issue 16, items 6 and 7):

- one whose ``forward`` writes a parameter in place (``self.p.add_(1)``): in ``view`` mode it
  would write into the published buffer, so every worker (and a restarted one) acts with the
  drift; in ``copy`` mode each worker has its own copy, overwritten at the next update;
- one that keeps a tensor sharing its parameter's storage (``w.detach()``, ``w.t()``,
  ``w.detach().numpy()``): in ``view`` mode new weights rebind the parameter to other memory
  and the kept tensor acts on the old one; in ``copy`` mode new weights are written into the
  parameter's own storage, which the kept tensor sees.

``copy`` (the default) must deliver only frames that ran with the weights they are stamped
with; ``view`` must refuse, loudly and naming the parameter, instead of acting.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest
import torch
from tensordict.nn import TensorDictModule

from pycollect import Collector, PolicyError, SharedMemoryScheme, WorkerCrashedError, _core
from pycollect.testing import wait_until
from pycollect.testing.envs import CountingEnv
from pycollect.weights.layout import WeightsLayout, module_weights

STEPS = 10  # steps per rollout
SPACING = 1_000_000.0  # version v publishes the value v * SPACING


def _collector(net: torch.nn.Module, mode: str, **settings: Any) -> Collector:
    """Two workers of one endless counting env each; batch rows are workers."""
    policy = TensorDictModule(net, in_keys=["observation"], out_keys=["action", "seen"])
    return Collector(
        CountingEnv,
        policy,
        frames_per_batch=2 * STEPS,
        envs_per_worker=1,
        num_workers=2,
        env_kwargs={"length": 10**9, "n_actions": 2},
        weight_sync=SharedMemoryScheme(mode=mode),  # type: ignore[arg-type]
        seed=0,
        **settings,
    )


def _action(n: int, seen: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"action": torch.zeros(n, dtype=torch.long), "seen": seen.to(torch.float64).expand(n).clone()}


# -- item 6: a forward that writes its parameter in place -----------------------------------


class _AddsInForward(torch.nn.Module):
    """Reports the value it acts with (``seen``), then adds 1 to its parameter in place."""

    def __init__(self) -> None:
        super().__init__()
        self.p = torch.nn.Parameter(torch.zeros((), dtype=torch.float64), requires_grad=False)

    def forward(self, observation: torch.Tensor) -> dict[str, torch.Tensor]:
        seen = self.p.detach().clone()
        self.p.add_(1)
        return _action(observation.shape[0], seen)


class _OwnIncrements:
    """Checks that each worker only ever sees the published value plus its own increments.

    Worker ``w``'s frames stamped with version ``v >= 1`` must read ``v * SPACING``, then
    ``+1``, ``+2``, ... one per step of that worker, from the first frame it collects with
    ``v`` on; a restarted worker starts from the published ``v * SPACING`` again.
    """

    def __init__(self) -> None:
        self.expected: dict[tuple[int, int], float] = {}  # (worker, version) -> the value of its next step

    def check(self, batch: Any) -> None:
        versions, seen = batch["policy_version"], batch["seen"]
        for w in range(2):
            for t in range(STEPS):
                version, value = int(versions[w, t]), float(seen[w, t])
                if version == 0:
                    continue  # the starting weights: whatever the trainer's dry run left
                published = version * SPACING
                want = self.expected.get((w, version), published)
                assert value in (want, published), (
                    f"worker {w} acted with {value} in a frame stamped version {version}: expected {want} "
                    f"(the published {published} plus its own {want - published:g} increments) or, after a "
                    "restart, the published value; another process's writes reached it"
                )
                self.expected[(w, version)] = value + 1


def _take_until(collector: Collector, checker: _OwnIncrements, done: Any, what: str) -> None:
    def step() -> bool:
        batch = collector.next_batch()
        checker.check(batch)
        return bool(done(batch))

    wait_until(step, timeout_s=120, what=what)


def _run_writer(collector: Collector, net: _AddsInForward) -> None:
    checker = _OwnIncrements()
    for version in range(1, 4):
        with torch.no_grad():
            net.p.fill_(version * SPACING)
        collector.update_policy_weights_()
        _take_until(
            collector,
            checker,
            lambda batch, v=version: bool((batch["policy_version"][:, -1] == v).all()),
            f"both workers acting with version {version}",
        )
        for _ in range(2):  # a few more rollouts of both workers with the same weights
            _take_until(collector, checker, lambda batch: True, "a batch")
    # A restarted worker starts from the published weights, not from what the others made of them.
    pid = collector.stats().workers[1].pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    _take_until(collector, checker, lambda batch: collector.stats().workers[1].generation == 2, "worker 1's restart")
    for _ in range(3):  # a sync batch has a rollout of every worker: the restarted one's first ones
        _take_until(collector, checker, lambda batch: True, "a batch")
    assert checker.expected[(1, 3)] >= 3 * SPACING + STEPS


@pytest.mark.timeout(240)
def test_copy_mode_a_forward_writing_its_parameter_changes_only_its_own_worker_until_the_next_update() -> None:
    net = _AddsInForward()
    with _collector(net, "copy") as collector:
        _run_writer(collector, net)


@pytest.mark.timeout(240)
def test_view_mode_a_forward_writing_its_parameter_kills_the_worker_naming_the_parameter() -> None:
    net = _AddsInForward()
    with (
        pytest.raises(WorkerCrashedError, match=r"(?s)signal 11.*in place into its parameter 'module.p'") as caught,
        _collector(net, "view", max_restarts=0) as collector,
    ):
        _run_writer(collector, net)
    assert "SharedMemoryScheme(mode='copy')" in str(caught.value)


# -- item 7: a policy that keeps a tensor sharing its parameter's storage --------------------


class _KeepsADerivedTensor(torch.nn.Module):
    """Acts with a tensor made from its parameter on its first call and kept (``how``).

    ``seen`` is that tensor's first element: the value of the weights it really acts with.
    The kept tensor is a cache, not state: it is not pickled, so each worker makes its own on
    its first call (the trainer's dry run makes one in the trainer).
    """

    def __init__(self, how: str) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(2, 3, dtype=torch.float64), requires_grad=False)
        self.how = how
        self.kept: Any = None

    def forward(self, observation: torch.Tensor) -> dict[str, torch.Tensor]:
        if self.kept is None:
            if self.how == "detach":
                self.kept = self.w.detach()
            elif self.how == "t":
                self.kept = self.w.t()  # what code does for speed: the transposed weight, once
            else:
                self.kept = self.w.detach().numpy()
        return _action(observation.shape[0], torch.as_tensor(self.kept[0, 0]))

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "kept": None}


def _run_keeper(collector: Collector, net: _KeepsADerivedTensor) -> None:
    for version in range(1, 4):
        with torch.no_grad():
            net.w.fill_(version * SPACING)

        collector.update_policy_weights_()

        def acted(v: int = version) -> bool:
            batch = collector.next_batch()
            versions, seen = batch["policy_version"], batch["seen"]
            claimed = versions.to(torch.float64) * SPACING
            bad = seen != claimed
            assert not bad.any(), (
                f"frames stamped with versions {versions[bad].unique().tolist()} acted with the weights "
                f"{seen[bad].unique().tolist()} (expected {claimed[bad].unique().tolist()})"
            )
            return bool((versions[:, -1] == v).all())

        wait_until(acted, timeout_s=120, what=f"both workers acting with version {version}")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("how", ["detach", "t", "numpy"])
def test_copy_mode_a_kept_tensor_sharing_a_parameter_sees_every_update(how: str) -> None:
    net = _KeepsADerivedTensor(how)
    with _collector(net, "copy") as collector:
        _run_keeper(collector, net)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("how", ["detach", "t", "numpy"])
def test_view_mode_a_kept_tensor_sharing_a_parameter_is_a_named_error_not_stale_frames(how: str) -> None:
    net = _KeepsADerivedTensor(how)
    with (
        pytest.raises(WorkerCrashedError, match=r"(?s)PolicyError: .*'module.w'.*SharedMemoryScheme\(mode='copy'\)"),
        _collector(net, "view", max_restarts=0) as collector,
    ):
        _run_keeper(collector, net)


class _KeepsItsCacheWhenPickled(_KeepsADerivedTensor):
    """The same, but the tensor made on its first call (the trainer's dry run) is pickled too."""

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("how", ["detach", "t"])
def test_a_kept_tensor_made_in_the_trainer_before_the_policy_is_shipped_sees_every_update(how: str) -> None:
    net = _KeepsItsCacheWhenPickled(how)
    with _collector(net, "copy") as collector:
        _run_keeper(collector, net)


def test_copy_is_the_default_mode() -> None:
    assert SharedMemoryScheme().mode == "copy"
    assert SharedMemoryScheme().store_buffers(6) == 3


# -- the checks themselves, in this process ----------------------------------------------


class _Two(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 2)
        self.norm = torch.nn.BatchNorm1d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.linear(x))


def _packed(module: torch.nn.Module, value: float, version: int) -> tuple[WeightsLayout, np.ndarray]:
    layout = WeightsLayout.from_module(module)
    with torch.no_grad():
        for tensor in module_weights(module).values():
            tensor.fill_(value)
    out = np.zeros(layout.nbytes, np.uint8)
    layout.pack(module_weights(module), out, version)
    out.flags.writeable = False  # as a pinned view of shared memory is
    return layout, out


@pytest.mark.parametrize(
    ("keep", "name"),
    [
        (lambda m: m.linear.weight.detach(), "linear.weight"),
        (lambda m: m.linear.weight.t(), "linear.weight"),
        (lambda m: m.linear.bias[:1], "linear.bias"),
        (lambda m: m.linear.bias.detach().numpy(), "linear.bias"),
        (lambda m: [m.norm.weight.detach()], "norm.weight"),
    ],
)
def test_share_refuses_when_anything_else_keeps_the_old_storage_of_a_parameter(keep: Any, name: str) -> None:
    worker = _Two()
    layout, first = _packed(_Two(), 1.0, 1)
    _, second = _packed(_Two(), 2.0, 2)
    assert layout.share(first, worker) == 1  # the module's own storage, nothing else keeps it
    kept = keep(worker)  # now a tensor over the first buffer
    with pytest.raises(PolicyError, match=rf"parameter '{name}'.*SharedMemoryScheme\(mode='copy'\)"):
        layout.share(second, worker)
    del kept
    assert layout.share(second, worker) == 2  # once nothing keeps it, new weights go through
    assert (worker.linear.weight == 2).all()


def test_share_refuses_a_module_that_keeps_its_own_initial_storage_too() -> None:
    worker = _Two()
    worker.cached = worker.linear.weight.t()  # a plain attribute, made before any weights arrived
    layout, data = _packed(_Two(), 1.0, 1)
    with pytest.raises(PolicyError, match="parameter 'linear.weight'"):
        layout.share(data, worker)


def test_share_forgets_references_that_only_garbage_keeps() -> None:
    worker = _Two()
    layout, first = _packed(_Two(), 1.0, 1)
    _, second = _packed(_Two(), 2.0, 2)
    layout.share(first, worker)
    cycle: list[Any] = [worker.linear.weight.detach()]
    cycle.append(cycle)  # unreachable once dropped, but only the cycle collector frees it
    del cycle
    assert layout.share(second, worker) == 2


@pytest.mark.timeout(300)
def test_a_compiled_policy_acts_with_shared_weights_and_is_not_refused() -> None:
    # torch.compile passes a module's parameters to its graph at each call (it keeps none):
    # repointing them is seen, and nothing is left on the old storage to refuse.
    worker = _Two().eval()
    compiled = torch.compile(worker, backend="aot_eager")
    x = torch.ones(2, 3)
    with torch.no_grad():
        compiled(x)
        for version, value in ((1, 1.0), (2, 2.0)):
            layout, data = _packed(_Two(), value, version)
            assert layout.share(data, worker) == version
            out = compiled(x)
            assert torch.equal(out, worker(x)) and bool((out == out[0, 0]).all())


def test_unpack_writes_into_the_storage_every_derived_tensor_sees() -> None:
    worker = _Two()
    kept = [worker.linear.weight.detach(), worker.linear.weight.t(), worker.linear.bias.detach().numpy()]
    layout, data = _packed(_Two(), 7.0, 3)
    assert layout.unpack(data, worker) == 3
    assert (kept[0] == 7).all() and (kept[1] == 7).all() and (kept[2] == 7).all()


# -- the read-only mapping of the weights buffers ------------------------------------------

_CHILD = textwrap.dedent(
    """
    import ctypes, sys
    import numpy as np
    from pycollect import _core

    segment = _core.Segment.attach(int(sys.argv[1]), timeout_s=10.0)
    if sys.argv[2] == "traced":
        import faulthandler
        faulthandler.enable()
    reader = segment.weights_reader(0)
    reader.protect([(64, 128, "the first entry")], "the header")
    version, view = reader.pin_latest()
    address = np.asarray(view).ctypes.data
    assert np.asarray(view)[100] == 7  # reading is fine
    what = sys.argv[2]
    if what in ("entry", "traced"):
        ctypes.memset(address + 100, 1, 1)
    elif what == "header":
        ctypes.memset(address + 8, 1, 1)
    elif what == "elsewhere":
        ctypes.string_at(8)  # a fault that has nothing to do with the weights
    print("survived", flush=True)
    """
)


def _protected_store() -> _core.Segment:
    segment = _core.Segment.create(
        [("x", "uint8", ())],
        n_workers=1,
        envs_per_worker=1,
        steps=1,
        slots_per_worker=2,
        weights_capacity=4096,
        weights_buffers=3,
        backing="auto",
    )
    segment.weights_writer().publish(np.full(4096, 7, np.uint8), timeout_s=1.0)
    return segment


def _run_child(segment: Any, what: str) -> subprocess.CompletedProcess[str]:
    """Run ``_CHILD`` on ``segment`` (it protects the weights, then does ``what``)."""
    return subprocess.run(
        [sys.executable, "-c", _CHILD, str(segment.fd), what],
        pass_fds=[segment.fd],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("what", "message"), [("entry", "the first entry"), ("header", "the header"), ("traced", "the first entry")]
)
def test_a_write_into_protected_weights_is_a_segfault_that_names_what_was_written(what: str, message: str) -> None:
    segment = _protected_store()
    child = _run_child(segment, what)
    assert child.returncode == -signal.SIGSEGV, child
    assert "survived" not in child.stdout
    assert segment.worker_control(0).read_error() == message
    assert message in child.stderr
    if what == "traced":  # Python's faulthandler still runs after ours, with where it happened
        assert "Segmentation fault" in child.stderr and 'File "<string>"' in child.stderr
    # the writer's own mapping is not protected
    segment.weights_writer().publish(np.full(4096, 8, np.uint8), timeout_s=1.0)


@pytest.mark.timeout(120)
def test_other_faults_and_reads_are_left_alone() -> None:
    segment = _protected_store()
    for what, code in (("read", 0), ("elsewhere", -signal.SIGSEGV)):
        child = _run_child(segment, what)
        assert child.returncode == code, child
        assert segment.worker_control(0).read_error() is None
