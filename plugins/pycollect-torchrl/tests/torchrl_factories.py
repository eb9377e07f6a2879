"""Module-level TorchRL env factories and policies (workers import them by name)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, NonTensor, Unbounded
from torchrl.envs import (
    CatFrames,
    Compose,
    EnvBase,
    GymEnv,
    InitTracker,
    ObservationNorm,
    StepCounter,
    TransformedEnv,
)

LOC = torch.tensor([0.1, -0.2, 0.3, -0.4])
SCALE = torch.tensor([2.0, 3.0, 4.0, 5.0])


def cartpole() -> EnvBase:
    """CartPole with one-hot actions (TorchRL's default encoding)."""
    return GymEnv("CartPole-v1")


def cartpole_categorical() -> EnvBase:
    """CartPole with categorical (index) actions."""
    return GymEnv("CartPole-v1", categorical_action_encoding=True)


def pendulum() -> EnvBase:
    """Pendulum: a bounded continuous action."""
    return GymEnv("Pendulum-v1")


def transformed(max_steps: int = 10, loc: torch.Tensor = LOC, scale: torch.Tensor = SCALE) -> EnvBase:
    """CartPole with the four stateful transforms of the issue."""
    return TransformedEnv(
        GymEnv("CartPole-v1"),
        Compose(
            StepCounter(max_steps=max_steps),
            InitTracker(),
            ObservationNorm(in_keys=["observation"], loc=loc.clone(), scale=scale.clone()),
            CatFrames(N=3, dim=-1, in_keys=["observation"]),
        ),
    )


def normalised(state: dict[str, torch.Tensor] | None = None) -> EnvBase:
    """CartPole with an ObservationNorm (standard normal) whose statistics are ``state`` (computed elsewhere)."""
    stats = {} if state is None else {"loc": state["loc"].clone(), "scale": state["scale"].clone()}
    return TransformedEnv(
        GymEnv("CartPole-v1"), ObservationNorm(in_keys=["observation"], standard_normal=True, **stats)
    )


def batched() -> EnvBase:
    """An already batched env (two CartPoles in one GymEnv)."""
    return GymEnv("CartPole-v1", num_envs=2)


class TinyEnv(EnvBase):
    """A counter: observation ``count`` (and whatever ``extra`` adds), episodes of ``length`` steps.

    Args:
        extra: Extra observation specs.
        nested: Put the counter under ``("agent", "count")`` as well.
    """

    def __init__(self, extra: dict[str, Any] | None = None, length: int = 5, nested: bool = False) -> None:
        super().__init__()
        specs: dict[str, Any] = {"count": Unbounded((1,), dtype=torch.float32), **(extra or {})}
        if nested:
            specs["agent"] = Composite(position=Bounded(-1.0, 1.0, (2,)), mode=Categorical(3, shape=(1,)))
        self.observation_spec = Composite(**specs)
        self.action_spec = Bounded(-1.0, 1.0, (2,))
        self.reward_spec = Unbounded((1,))
        self.length = length
        self.nested = nested
        self._count = 0

    def _obs(self) -> TensorDictBase:
        td = TensorDict({"count": torch.tensor([float(self._count)])})
        if self.nested:
            td["agent"] = TensorDict(
                {"position": torch.full((2,), self._count / 10), "mode": torch.tensor([self._count % 3])}
            )
        return td

    def _reset(self, tensordict: TensorDictBase | None, **kwargs: Any) -> TensorDictBase:
        self._count = 0
        td = self._obs()
        td["done"] = torch.zeros(1, dtype=torch.bool)
        td["terminated"] = torch.zeros(1, dtype=torch.bool)
        return td

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self._count += 1
        td = self._obs()
        end = self._count >= self.length
        td["reward"] = tensordict["action"].sum(-1, keepdim=True)
        td["done"] = torch.tensor([end])
        td["terminated"] = torch.tensor([end])
        return td

    def _set_seed(self, seed: int | None) -> None:
        pass


def tiny_nested() -> EnvBase:
    """TinyEnv with a nested observation."""
    return TinyEnv(nested=True)


def tiny_non_tensor() -> EnvBase:
    """TinyEnv with a non-tensor observation leaf."""
    return TinyEnv(extra={"text": NonTensor(shape=())})


def tiny_variable_shape() -> EnvBase:
    """TinyEnv with an observation of variable length."""
    return TinyEnv(extra={"tokens": Unbounded((-1,), dtype=torch.int64)})


class FirstFeature(torch.nn.Module):
    """A deterministic CartPole policy: push right when the first feature is positive (one-hot)."""

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot((observation[..., 0] > 0).long(), 2)


def first_feature_policy() -> Any:
    """:class:`FirstFeature` as a TensorDictModule reading ``observation``."""
    from tensordict.nn import TensorDictModule

    return TensorDictModule(FirstFeature(), in_keys=["observation"], out_keys=["action"])


class StartAware(torch.nn.Module):
    """A policy reading ``is_init`` as well (as recurrent policies do): push right at episode starts."""

    def forward(self, observation: torch.Tensor, is_init: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot((observation[..., 0] > 0).long() | is_init[..., 0].long(), 2)


def start_aware_policy() -> Any:
    """:class:`StartAware` as a TensorDictModule reading ``observation`` and ``is_init``."""
    from tensordict.nn import TensorDictModule

    return TensorDictModule(StartAware(), in_keys=["observation", "is_init"], out_keys=["action"])


class CrashingEnv(TinyEnv):
    """TinyEnv whose step raises once its counter reaches ``at`` (in every worker generation)."""

    def __init__(self, at: int = 3) -> None:
        super().__init__(length=100)
        self.at = at

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._count + 1 >= self.at:
            raise RuntimeError(f"boom at step {self.at}")
        return super()._step(tensordict)


def crashing() -> EnvBase:
    """A :class:`CrashingEnv` crashing at its second step."""
    return CrashingEnv(at=2)


def tiny() -> EnvBase:
    """A plain TinyEnv."""
    return TinyEnv()


def pycollect_parallel_cartpole() -> EnvBase:
    """pycollect's ParallelEnv of one CartPole (what a TorchRL MultiSyncCollector builds per process)."""
    from pycollect_torchrl import ParallelEnv

    return ParallelEnv(1, cartpole)


class Torque(torch.nn.Module):
    """A deterministic Pendulum policy: torque from the first feature."""

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return (observation[..., :1] * 1.5).clamp(-2.0, 2.0)


def torque_policy() -> Any:
    """:class:`Torque` as a TensorDictModule reading ``observation``."""
    from tensordict.nn import TensorDictModule

    return TensorDictModule(Torque(), in_keys=["observation"], out_keys=["action"])


class FirstFeatureIndex(torch.nn.Module):
    """:class:`FirstFeature` as a category index (categorical CartPole)."""

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return (observation[..., 0] > 0).long()


def first_feature_index_policy() -> Any:
    """:class:`FirstFeatureIndex` as a TensorDictModule reading ``observation``."""
    from tensordict.nn import TensorDictModule

    return TensorDictModule(FirstFeatureIndex(), in_keys=["observation"], out_keys=["action"])


def cheetah() -> EnvBase:
    """dm_control cheetah-run as TorchRL builds it."""
    from torchrl.envs import DMControlEnv

    return DMControlEnv("cheetah", "run")


class Squash(torch.nn.Module):
    """A deterministic cheetah policy: the first six position features, squashed."""

    def forward(self, position: torch.Tensor, velocity: torch.Tensor) -> torch.Tensor:
        return torch.tanh(position[..., 1:7] + 0.1 * velocity[..., :6])


def squash_policy() -> Any:
    """:class:`Squash` as a TensorDictModule reading ``position`` and ``velocity``."""
    from tensordict.nn import TensorDictModule

    return TensorDictModule(Squash(), in_keys=["position", "velocity"], out_keys=["action"])
