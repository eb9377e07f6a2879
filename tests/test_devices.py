"""Device arguments, with CUDA mocked (this machine has none; the check must still be right)."""

from __future__ import annotations

import pytest
import torch

from pycollect import ConfigError
from pycollect._rollout.policy import parameters_device as policy_device
from pycollect.config import resolve_device
from pycollect.default_plugins.cpu_devices import CpuPolicy
from pycollect.devices import Placement, available_devices


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
