"""The conformance checkers pass pycollect's own plugins and catch plugins that break their contract."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from pycollect import ConformanceError
from pycollect.config import CollectorConfig
from pycollect.default_plugins.builtin_engines import InProcess
from pycollect.default_plugins.cpu_devices import CpuPolicy
from pycollect.default_plugins.shared_memory_scheme import SharedMemoryScheme
from pycollect.devices import DevicePolicy, Placement
from pycollect.engines import Engine, Supervision
from pycollect.envs import EnvBackend
from pycollect.envs.source import EnvSource
from pycollect.testing import check_device_policy, check_engine, check_env_backend, check_scheme
from pycollect.testing.envs import CountingEnv
from pycollect.weights import WeightReceiver, WeightSender, WeightSyncScheme

pytestmark = pytest.mark.timeout(300)


def test_the_builtin_env_backends_conform() -> None:
    check_env_backend("gymnasium", "CartPole-v1", unknown_target="NoSuchEnv-v0")
    check_env_backend("callable", "pycollect.testing.envs:make_counting", {"length": 3})


def test_the_builtin_schemes_conform() -> None:
    check_scheme("shared_memory")
    check_scheme("no_sync", syncs=False)


def test_the_builtin_device_policy_conforms() -> None:
    check_device_policy("cpu")
    check_device_policy(CpuPolicy, devices=["cpu", "cuda:0", "cuda:1"])


@pytest.mark.parametrize(("engine", "num_workers"), [("inprocess", 0), ("workers", 2), ("central", 2)])
def test_the_builtin_engines_conform(engine: str, num_workers: int) -> None:
    check_engine(engine, num_workers=num_workers)


# -- the checkers catch broken plugins ---------------------------------------------------------


class _WideObservationEnv(CountingEnv):
    """Its space says (2,), it returns (3,): pycollect would broadcast or fail later."""

    def _obs(self) -> np.ndarray:
        return np.zeros(3, np.float32)


class _LyingBackend(EnvBackend):
    name = "lying"

    def make(self, target: Any, env_kwargs: Mapping[str, Any]) -> gym.Env:
        return _WideObservationEnv()


class _UnseededEnv(CountingEnv):
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        return super().reset(seed=None)  # ignores the seed


class _UnseededBackend(EnvBackend):
    name = "unseeded"

    def make(self, target: Any, env_kwargs: Mapping[str, Any]) -> gym.Env:
        return _UnseededEnv()


def test_an_observation_that_does_not_fit_its_space_is_caught() -> None:
    with pytest.raises(ConformanceError, match="observation 'observation' has shape \\(3,\\), the spec says \\(2,\\)"):
        check_env_backend(_LyingBackend, "any")


def test_an_env_that_ignores_its_seed_is_caught() -> None:
    with pytest.raises(ConformanceError, match="two envs reset with seed 0 .* disagree"):
        check_env_backend(_UnseededBackend, "any")


class _TamperingScheme(SharedMemoryScheme):
    """The shared-memory scheme, with what it sends changed by :meth:`tamper`."""

    def tamper(self, state: dict[str, torch.Tensor], version: int) -> tuple[dict[str, torch.Tensor], int]:
        raise NotImplementedError

    def sender(self, context: Any) -> WeightSender:
        inner, tamper = super().sender(context), self.tamper

        class Sender(WeightSender):
            def receiver(self) -> WeightReceiver:
                return inner.receiver()

            def send(self, state: Mapping[str, torch.Tensor], version: int, *, timeout_s: float) -> None:
                inner.send(*tamper(dict(state), version), timeout_s=timeout_s)

        return Sender()


class _OffByOneScheme(_TamperingScheme):
    """Stamps frames with a version one higher than the weights it delivers."""

    name = "off_by_one"

    def tamper(self, state: dict[str, torch.Tensor], version: int) -> tuple[dict[str, torch.Tensor], int]:
        return state, version + 1


class _ParametersOnlyScheme(_TamperingScheme):
    """Forgets the module's buffers."""

    name = "parameters_only"

    def tamper(self, state: dict[str, torch.Tensor], version: int) -> tuple[dict[str, torch.Tensor], int]:
        return {**state, "echo": torch.zeros_like(state["echo"])}, version


class _SilentScheme(WeightSyncScheme):
    """Claims to sync, delivers nothing."""

    name = "silent"

    def sender(self, context: Any) -> WeightSender:
        from pycollect.default_plugins.no_sync_scheme import NoSyncScheme

        return NoSyncScheme().sender(context)


@pytest.mark.parametrize(
    ("scheme", "match"),
    [
        (_OffByOneScheme, "stamped with policy version v must be collected with the weights of version v"),
        (_ParametersOnlyScheme, "every parameter and module buffer must travel, unchanged"),
        (_SilentScheme, "after update 1, workers still collect with versions \\[0\\]"),
    ],
)
def test_a_scheme_that_breaks_its_contract_is_caught(scheme: type[WeightSyncScheme], match: str) -> None:
    with pytest.raises(ConformanceError, match=match):
        check_scheme(scheme, updates=1, check_restart=False)


class _ImaginaryGpuPolicy(DevicePolicy):
    name = "imaginary_gpu"

    def place(self, worker: int, num_workers: int, devices: Sequence[str]) -> Placement:
        return Placement(policy_device="cuda:7", cuda=True)


class _HiddenGpuPolicy(DevicePolicy):
    name = "hidden_gpu"

    def place(self, worker: int, num_workers: int, devices: Sequence[str]) -> Placement:
        return Placement(policy_device=devices[-1])  # a CUDA device with CUDA hidden


@pytest.mark.parametrize(
    ("policy", "match"),
    [
        (_ImaginaryGpuPolicy, "device 'cuda:7' is not among the devices offered"),
        (_HiddenGpuPolicy, "'cuda:0' is a CUDA device but the placement hides CUDA"),
    ],
)
def test_a_device_policy_that_breaks_its_contract_is_caught(policy: type[DevicePolicy], match: str) -> None:
    with pytest.raises(ConformanceError, match=match):
        check_device_policy(policy, devices=["cpu", "cuda:0"])


class _ChangedEngine(Engine):
    """The in-process engine, with what it does changed by its factory."""

    def __init__(self, inner: Engine, factory: _ChangedInProcess) -> None:
        self.inner, self.factory, self.plan, self.batches = inner, factory, inner.plan, 0

    def next_batch(self, *, random_actions: bool, policy_version: int) -> Any:
        try:
            batch = self.inner.next_batch(random_actions=random_actions, policy_version=policy_version)
        except Exception:
            if self.factory.hide_errors:
                raise RuntimeError("the collection failed") from None
            raise
        self.batches += 1
        return self.factory.change(batch, self.batches)

    def publish_weights(self, weights: Any, version: int) -> None:
        self.inner.publish_weights(weights, version)

    def supervision(self) -> Supervision:
        return self.inner.supervision()

    def close(self) -> None:
        self.inner.close()


class _ChangedInProcess(InProcess):
    name = "changed"
    hide_errors = False

    def change(self, batch: Any, count: int) -> Any:
        return batch

    def start(self, config: CollectorConfig, env_source: EnvSource, policy: Any, weights_module: Any) -> Engine:
        return _ChangedEngine(super().start(config, env_source, policy, weights_module), self)


class _RowSwappingEngine(_ChangedInProcess):
    """Hands out the rows of every other batch in the other order."""

    def change(self, batch: Any, count: int) -> Any:
        return batch[torch.tensor([1, 0])] if count % 2 == 0 else batch


class _KeyDroppingEngine(_ChangedInProcess):
    """Leaves the policy's extra outputs out of its batches."""

    def change(self, batch: Any, count: int) -> Any:
        return batch.exclude("check_echo")


class _ErrorHidingEngine(_ChangedInProcess):
    """Raises its own error for an env's, without naming it."""

    hide_errors = True


class _LeakingEngine(_ChangedInProcess):
    """Starts a helper process that outlives it."""

    def start(self, config: CollectorConfig, env_source: EnvSource, policy: Any, weights_module: Any) -> Engine:
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        return super().start(config, env_source, policy, weights_module)


@pytest.mark.parametrize(
    ("engine", "match"),
    [
        (_RowSwappingEngine, "each row must go on with the env it stepped in the batch before"),
        (_KeyDroppingEngine, "are not the in-process engine's"),
        (_ErrorHidingEngine, "must name it, got:\nRuntimeError: the collection failed"),
        (_LeakingEngine, "closing the collector left behind .*\nprocess [0-9]+: .*time.sleep\\(120\\)"),
    ],
)
def test_an_engine_that_breaks_its_contract_is_caught(engine: Callable[[], Engine], match: str) -> None:
    with pytest.raises(ConformanceError, match=match):
        check_engine(engine, num_workers=0, close_timeout_s=1)
