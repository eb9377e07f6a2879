"""Device arguments and placement policies, with CUDA mocked (this machine has none; the checks must still be right)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import torch

import pycollect.testing
from pycollect import Collector, ConfigError, ExplicitPolicy, RoundRobinPolicy
from pycollect._batch import device as device_module
from pycollect._batch.device import DeviceCopier, staging_memory
from pycollect._batch.recycle import RecycledMemory
from pycollect._engines import inprocess
from pycollect._engines.workers import place_workers, storing_devices
from pycollect._rollout.policy import parameters_device as policy_device
from pycollect.cli import main
from pycollect.config import CollectorConfig, resolve_device
from pycollect.default_plugins.cpu_devices import CpuPolicy
from pycollect.devices import Placement, available_devices, placement
from pycollect.testing import check_device_policy
from pycollect.testing.envs import CountingEnv


def test_cpu_and_bad_values() -> None:
    assert resolve_device("cpu", "device") == torch.device("cpu")
    with pytest.raises(ConfigError, match="device='gpu0' is not a torch device"):
        resolve_device("gpu0", "device")
    with pytest.raises(ConfigError, match="only 'cpu' and 'cuda'"):
        resolve_device("meta", "storing_device")


def test_cuda_index_is_checked_against_the_devices_present(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda:1", "device") == torch.device("cuda", 1)
    assert resolve_device("cuda", "device") == torch.device("cuda")
    with pytest.raises(ConfigError, match="storing_device='cuda:2': this machine has 2 CUDA device"):
        resolve_device("cuda:2", "storing_device")


def test_no_cuda_means_every_cuda_device_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="has 0 CUDA device"):
        resolve_device("cuda:0", "device")


def test_policy_device_is_where_its_parameters_are() -> None:
    assert policy_device(torch.nn.Linear(2, 2)) == torch.device("cpu")
    assert policy_device(torch.nn.Linear(2, 2, device="meta")) == torch.device("meta")
    assert policy_device(lambda td: td) is None
    assert policy_device(torch.nn.ReLU()) is None


def test_available_devices_lists_the_cpu_then_each_cuda_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert available_devices() == ["cpu"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert available_devices() == ["cpu", "cuda:0", "cuda:1"]


def test_the_cpu_policy_places_everything_on_the_cpu_with_cuda_hidden() -> None:
    placement = CpuPolicy().place(1, 2, ["cpu", "cuda:0"])
    assert placement == Placement("cpu", "cpu", "cpu", cuda=False)
    assert placement.devices() == ("cpu", "cpu", "cpu")


# -- helpers ---------------------------------------------------------------------------------


def _machine(monkeypatch: pytest.MonkeyPatch, gpus: int) -> list[str]:
    """Pretend this machine has ``gpus`` CUDA devices (for placement and for argument checks)."""
    devices = ["cpu", *(f"cuda:{i}" for i in range(gpus))]
    monkeypatch.setattr(placement, "available_devices", lambda: list(devices))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    return devices


def _config(num_workers: int, **kwargs: Any) -> CollectorConfig:
    return CollectorConfig(frames_per_batch=8 * num_workers, num_workers=num_workers, **kwargs)


# -- round_robin -----------------------------------------------------------------------------


@pytest.mark.parametrize("gpus", [0, 1, 2, 3])
@pytest.mark.parametrize("workers", [2, 3, 4, 5])
def test_round_robin_puts_worker_i_on_gpu_i_mod_n(monkeypatch: pytest.MonkeyPatch, gpus: int, workers: int) -> None:
    _machine(monkeypatch, gpus)
    placements = place_workers(RoundRobinPolicy(), _config(workers))
    assert len(placements) == workers
    for worker, where in enumerate(placements):
        if gpus == 0:
            assert where == Placement("cpu", "cpu", "cpu", cuda=False)
        else:
            device = f"cuda:{worker % gpus}"
            assert where == Placement("cpu", device, device, cuda=True)
    used = {where.policy_device for where in placements}
    assert used == ({"cpu"} if gpus == 0 else {f"cuda:{i}" for i in range(min(gpus, workers))})


def test_round_robin_without_cuda_runs_workers_with_cuda_hidden() -> None:
    check_device_policy("round_robin")  # on this machine's devices: real workers
    check_device_policy(RoundRobinPolicy, devices=["cpu", "cuda:0", "cuda:1"], num_workers=3)


# -- explicit --------------------------------------------------------------------------------


def test_explicit_list_mapping_placements_and_torch_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    _machine(monkeypatch, 2)
    gpu1 = Placement(policy_device="cuda:1", storing_device="cpu", cuda=True)
    cases: list[tuple[Any, list[Placement]]] = [
        (
            ["cuda:1", "cpu", "cuda"],
            [Placement("cpu", "cuda:1", "cuda:1", True), Placement(), Placement("cpu", "cuda:0", "cuda:0", True)],
        ),
        (
            {2: "cpu", 0: gpu1, 1: torch.device("cuda", 0)},
            [gpu1, Placement("cpu", "cuda:0", "cuda:0", True), Placement()],
        ),
        (
            [torch.device("cpu"), torch.device("cuda:1"), " cpu "],
            [Placement(), Placement("cpu", "cuda:1", "cuda:1", True), Placement()],
        ),
    ]
    for where, expected in cases:
        assert place_workers(ExplicitPolicy(where), _config(3)) == expected, where


@pytest.mark.parametrize(
    ("where", "match"),
    [
        (None, r"device_policy='explicit' needs .*device_policy=ExplicitPolicy\(\["),
        ("cuda:0", "expected a list with one device per worker"),
        ([], "no worker is placed"),
        (["cuda:0", "gpu"], "entry 1 is 'gpu'; expected 'cpu', 'cuda:<index>' or a Placement"),
        ({"0": "cpu"}, "keys are worker indices, got '0'"),
        ({-1: "cpu"}, "keys are worker indices, got -1"),
    ],
)
def test_explicit_refuses_bad_arguments(where: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        ExplicitPolicy(where)


@pytest.mark.parametrize(
    ("where", "workers", "match"),
    [
        (["cpu", "cpu", "cpu"], 2, "ExplicitPolicy has 3 device.s. but num_workers=2"),
        (["cpu"], 2, "ExplicitPolicy has 1 device.s. but num_workers=2"),
        ({0: "cpu"}, 3, r"no device for worker.s. \[1, 2\] of num_workers=3"),
        ({0: "cpu", 1: "cpu", 4: "cpu"}, 2, r"places worker.s. \[4\], but num_workers=2"),
    ],
)
def test_explicit_must_fit_num_workers(where: Any, workers: int, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        place_workers(ExplicitPolicy(where), _config(workers))


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("policy", "gpus", "match"),
    [
        (
            ExplicitPolicy(["cuda:0", "cuda:3"]),
            1,
            r"placed worker 1 on 'cuda:3', which this machine does not have \(it has cpu, cuda:0\)",
        ),
        (
            ExplicitPolicy(["cuda:0", "cpu"]),
            0,
            r"placed worker 0 on 'cuda:0', which this machine does not have \(it has cpu\)",
        ),
        (ExplicitPolicy(["cpu", "cpu", "cpu"]), 1, "has 3 device.s. but num_workers=2"),
        ("explicit", 1, "needs to be told where each worker goes"),
        (ExplicitPolicy({0: Placement(policy_device="cuda:0"), 1: "cpu"}), 1, "worker 0 on 'cuda:0' but hides CUDA"),
    ],
)
def test_bad_placements_fail_before_any_worker_starts(
    monkeypatch: pytest.MonkeyPatch, policy: Any, gpus: int, match: str
) -> None:
    _machine(monkeypatch, gpus)
    before = pycollect.testing.snapshot()
    with pytest.raises(ConfigError, match=match):
        Collector(CountingEnv, frames_per_batch=16, num_workers=2, device_policy=policy)
    assert not pycollect.testing.leftovers(before, timeout_s=0)


@pytest.mark.timeout(120)
def test_the_placement_reaches_each_worker() -> None:
    """Worker 0 starts with CUDA hidden, worker 1 (cuda=True) does not; both run their policy on the CPU."""
    check_device_policy(ExplicitPolicy({0: Placement(), 1: Placement(cuda=True)}))
    check_device_policy(ExplicitPolicy(["cpu", "cpu", "cpu"]), num_workers=3)
    check_device_policy(ExplicitPolicy(["cuda:1", "cpu"]), devices=["cpu", "cuda:0", "cuda:1"])


def test_the_builtin_policies_conform() -> None:
    check_device_policy("cpu")
    check_device_policy(CpuPolicy, devices=["cpu", "cuda:0"], num_workers=3)


def test_cli_lists_the_builtin_device_policies(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    policies = {item["name"]: item for item in listing["device_policies"]}
    assert set(policies) >= {"cpu", "round_robin", "explicit"}
    assert policies["round_robin"]["class"] == "pycollect.default_plugins.round_robin_devices.RoundRobinPolicy"
    assert policies["explicit"]["builtin"] is True
    assert main(["plugins"]) == 0
    text = capsys.readouterr().out
    assert "round_robin" in text and "explicit" in text


# -- storing devices -------------------------------------------------------------------------


def test_storing_device_given_overrides_every_placement(monkeypatch: pytest.MonkeyPatch) -> None:
    _machine(monkeypatch, 2)
    placements = place_workers(RoundRobinPolicy(), _config(3))
    assert storing_devices(_config(3), placements) == [torch.device(d) for d in ("cuda:0", "cuda:1", "cuda:0")]
    assert storing_devices(_config(3, storing_device="cpu"), placements) == [torch.device("cpu")] * 3


@pytest.mark.timeout(120)
def test_storing_device_cpu_with_workers_delivers_cpu_tensors() -> None:
    with Collector(
        CountingEnv,
        frames_per_batch=16,
        envs_per_worker=2,
        num_workers=2,
        storing_device="cpu",
        device_policy="round_robin",
    ) as collector:
        batch = collector.next_batch()
    assert {tensor.device.type for tensor in batch.values(True, True)} == {"cpu"}


def test_cuda_staging_memory_is_pinned(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[int] = []

    def fake_pinned(nbytes: int) -> np.ndarray:
        made.append(nbytes)
        return np.empty(nbytes, np.uint8)

    monkeypatch.setattr(device_module, "pinned_empty", fake_pinned)
    staging_memory(torch.device("cpu")).buffer(64)
    assert made == []
    staging_memory(torch.device("cuda", 0)).buffer(64)
    assert made == [64]


class _FakeEvent:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def record(self, stream: Any) -> None:
        self.log.append(f"record on {stream}")

    def synchronize(self) -> None:
        self.log.append("synchronize")


class _Host:
    """Stands in for a pinned host TensorDict: records how it is copied."""

    def __init__(self, memory: np.ndarray, log: list[str]) -> None:
        self.memory, self.log = memory, log

    def to(self, device: torch.device, *, non_blocking: bool = False) -> str:
        self.log.append(f"to {device} non_blocking={non_blocking}")
        return f"on {device}"


def test_the_copy_is_non_blocking_and_staging_memory_waits_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[str] = []
    monkeypatch.setattr(torch.cuda, "Event", lambda: _FakeEvent(log))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: f"stream of {device}")
    memory, copier, gpu = RecycledMemory(), DeviceCopier(), torch.device("cuda", 1)
    first = memory.buffer(256)
    assert copier.copy(_Host(first[:128], log), gpu) == "on cuda:1"
    assert log == ["to cuda:1 non_blocking=True", "record on stream of cuda:1"]
    del first
    assert copier.pending == 1
    second = memory.buffer(256)  # the copy may still read the first buffer: not handed out again
    assert second is not memory._buffers[0] if len(memory._buffers) > 1 else True
    assert len(memory._buffers) == 2
    del second
    copier.settle()
    assert log[-1] == "synchronize" and copier.pending == 0
    assert memory.buffer(256) is memory._buffers[0]  # released by the copy: reused


def test_in_process_cuda_storing_uses_pinned_memory_and_the_copier(monkeypatch: pytest.MonkeyPatch) -> None:
    _machine(monkeypatch, 1)
    pinned: list[int] = []
    copies: list[torch.device] = []

    def fake_pinned(nbytes: int) -> np.ndarray:
        pinned.append(nbytes)
        return np.empty(nbytes, np.uint8)

    def fake_copy(self: DeviceCopier, host: Any, device: torch.device) -> Any:
        copies.append(device)
        return host

    monkeypatch.setattr(device_module, "pinned_empty", fake_pinned)
    monkeypatch.setattr(DeviceCopier, "copy", fake_copy)
    with Collector(CountingEnv, frames_per_batch=8, device="cuda") as collector:
        collector.next_batch()
    assert pinned and copies == [torch.device("cuda", 0)]


# -- in-process: TorchRL's device arguments ----------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "policy", "storing"),
    [
        ({}, None, None),
        ({"device": "cuda"}, "cuda:1", "cuda:1"),
        ({"device": "cuda:0", "policy_device": "cpu"}, "cpu", "cuda:0"),
        ({"policy_device": "cuda:1"}, "cuda:1", None),
        ({"device": "cpu", "storing_device": "cuda:0"}, "cpu", "cuda:0"),
        ({"storing_device": "cuda"}, None, "cuda:1"),
        ({"policy_device": "cuda:0", "storing_device": "cpu"}, "cuda:0", "cpu"),
    ],
)
def test_in_process_resolution_matches_torchrl(
    monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, str], policy: str | None, storing: str | None
) -> None:
    _machine(monkeypatch, 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)  # TorchRL: "cuda" is the current device
    from torchrl.modules.inference_server._config import _resolve_device_config

    config = CollectorConfig(frames_per_batch=8, **kwargs)  # type: ignore[arg-type]
    as_device = lambda name: None if name is None else torch.device(name)  # noqa: E731
    assert (config.requested_policy_device, config.resolved_storing_device) == (as_device(policy), as_device(storing))
    theirs = _resolve_device_config(**kwargs, collector_defaults=True)  # type: ignore[arg-type]
    assert (theirs.policy_device, theirs.storing_device) == (as_device(policy), as_device(storing))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"env_device": "cuda:0"}, "env_device='cuda:0': gymnasium-style environments step on the CPU"),
        ({"num_workers": 2, "policy_device": "cuda:0"}, "policy_device='cuda:0': with workers a device_policy places"),
        ({"num_workers": 2, "device": "cuda:0"}, "device='cuda:0': with workers"),
        ({"num_workers": 2, "device": "cpu", "device_policy": "round_robin"}, "device='cpu': with workers"),
        ({"policy_device": "cuda:2"}, "policy_device='cuda:2': this machine has 1 CUDA device"),
    ],
)
def test_device_arguments_that_cannot_work_are_refused(
    monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, Any], match: str
) -> None:
    _machine(monkeypatch, 1)
    with pytest.raises(ConfigError, match=match):
        CollectorConfig(frames_per_batch=8, **kwargs)


def test_env_device_cpu_and_device_cpu_with_the_cpu_policy_are_accepted() -> None:
    CollectorConfig(frames_per_batch=8, env_device="cpu")
    CollectorConfig(frames_per_batch=8, num_workers=2, device="cpu", policy_device="cpu")


class _Greedy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(2))

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return (observation[:, :1] * 0 + self.bias).argmax(-1)


@pytest.mark.parametrize("function", [False, True])
def test_a_policy_elsewhere_than_policy_device_is_copied_there_and_updated(
    monkeypatch: pytest.MonkeyPatch, function: bool
) -> None:
    """TorchRL's rule, on the CPU: pretend the parameters are elsewhere so that the copy path runs."""
    monkeypatch.setattr(inprocess, "_same", lambda a, b: False)
    net = _Greedy()
    policy: Any = (lambda td: net(td["observation"])) if function else net
    with Collector(
        CountingEnv, policy, weights_from=net if function else None, frames_per_batch=8, policy_device="cpu"
    ) as collector:
        engine = collector._engine
        assert isinstance(engine, inprocess.InProcessEngine) and engine.device_copy is not None
        assert engine.device_copy is not net
        assert (collector.next_batch()["action"] == 0).all()
        with torch.no_grad():
            net.bias.copy_(torch.tensor([0.0, 1.0]))
        assert (collector.next_batch()["action"] == 0).all()  # the copy keeps its weights...
        collector.update_policy_weights_()
        assert (collector.next_batch()["action"] == 1).all()  # ...until they are published
        assert torch.equal(engine.device_copy.bias, net.bias)


def test_a_policy_on_policy_device_is_called_as_it_is() -> None:
    net = _Greedy()
    with Collector(CountingEnv, net, frames_per_batch=8, device="cpu") as collector:
        assert collector._engine.device_copy is None  # type: ignore[attr-defined]
        with torch.no_grad():
            net.bias.copy_(torch.tensor([0.0, 1.0]))
        assert (collector.next_batch()["action"] == 1).all()  # trained in place: live at once


def test_the_builtins_are_exported_by_pycollect_not_by_their_interface() -> None:
    import pycollect
    import pycollect.default_plugins as default_plugins
    import pycollect.devices as devices

    names = {"CpuPolicy", "RoundRobinPolicy", "ExplicitPolicy"}
    assert names <= set(pycollect.__all__) and names <= set(default_plugins.__all__)
    assert pycollect.ExplicitPolicy is default_plugins.ExplicitPolicy
    assert not names & set(devices.__all__), "an interface package must not export its implementations"
    with pytest.raises(AttributeError, match=r"moved to pycollect \(from pycollect import ExplicitPolicy\)"):
        devices.ExplicitPolicy  # noqa: B018 - the attribute access is the test


def _gpu_check() -> Any:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benches" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_check_skips_without_cuda(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    module = _gpu_check()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert module.main([]) == 0
    assert "gpu_check: skipped:" in capsys.readouterr().out
    assert module.Policy()(torch.zeros(3, 4))["action"].tolist() == [0, 0, 0]  # action 0 until the weights change


@pytest.mark.timeout(120)
def test_gpu_checks_central_comparison_runs_on_the_cpu(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The comparison is measured on a GPU machine only; here its code runs end to end on the CPU.
    module = _gpu_check()
    monkeypatch.setattr(module, "_have", lambda *modules: False)  # the numpy frames env, not ALE
    (row,) = module.compare_central(torch.device("cpu"), [4], workers=2, seconds=0.2)
    assert row["envs"] == 4 and row["central_batch"] == 2 and row["workers_batch"] == 2
    assert row["central"] > 0 and row["workers"] > 0 and row["envs_only"] > 0
    assert row["ratio"] == row["central"] / row["workers"]
    assert "frames_env" in capsys.readouterr().out
