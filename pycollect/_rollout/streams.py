"""The central engine's random streams: torch's per group, and each worker's random actions.

They sit beside :mod:`pycollect._rollout.seeding`, which derives every stream from the user's
seed: the central engine steps the workers' envs from the trainer, and these give it the
streams each worker's own loop would have drawn from. A seeded run repeats: a stochastic
policy's calls for a group draw from a torch stream of the group's own
(:class:`TorchStreams`), and random actions (``init_random_frames``, ``policy=None``) from
each worker's own stream, as that worker's loop would draw them (:class:`WorkerDraws`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from pycollect._rollout.actions import RandomActions
from pycollect._rollout.seeding import action_rng
from pycollect.exceptions import ConfigError

if TYPE_CHECKING:
    from pycollect.envs.specs import FieldSpec

__all__ = ["TorchStreams", "WorkerDraws"]


class TorchStreams:
    """One torch random stream per group, so a stochastic policy samples the same for the same seed.

    torch has one global generator, and the groups' calls take turns with it: each group's
    policy calls run with the global generator set to the group's own state, which is kept for
    its next call, so a group's samples do not depend on how many groups there are or on where
    the other groups' calls fall. Group ``g``'s stream starts as ``torch_seed(seed, g)`` (and
    the policy's dry run for the group's envs). The trainer's own generator state is put back
    after every use (:meth:`keep_trainers`).

    Args:
        device: Where the policy runs; a CUDA device's generator is streamed too.
    """

    def __init__(self, device: torch.device | None) -> None:
        self._cuda = device if device is not None and device.type == "cuda" else None
        self._states: list[tuple[torch.Tensor, torch.Tensor | None]] = []

    def _get(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        cuda = torch.cuda.get_rng_state(self._cuda) if self._cuda is not None else None
        return torch.get_rng_state(), cuda

    def _set(self, state: tuple[torch.Tensor, torch.Tensor | None]) -> None:
        torch.set_rng_state(state[0])
        if self._cuda is not None and state[1] is not None:
            torch.cuda.set_rng_state(state[1], self._cuda)

    @contextlib.contextmanager
    def keep_trainers(self) -> Iterator[None]:
        """Put the trainer's generator state back afterwards."""
        trainers = self._get()
        try:
            yield
        finally:
            self._set(trainers)

    def start(self, seed: int) -> int:
        """A new stream from ``seed`` (call within :meth:`keep_trainers`); its index.

        The global generator is left seeded with it, so what runs next (the group's policy dry
        run) draws from it; :meth:`take` then keeps where that left the stream.
        """
        torch.manual_seed(seed)
        self._states.append(self._get())
        return len(self._states) - 1

    def take(self, stream: int) -> bool:
        """Keep the global generator's state as ``stream``'s (after its dry run); whether it drew from it."""
        seeded, now = self._states[stream], self._get()
        self._states[stream] = now
        cpu_drew = not torch.equal(seeded[0], now[0])
        cuda_drew = seeded[1] is not None and now[1] is not None and not torch.equal(seeded[1], now[1])
        return cpu_drew or cuda_drew

    def state(self) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        """Every stream's generator state, to continue them after :meth:`load_state`."""
        return [(cpu.clone(), None if cuda is None else cuda.clone()) for cpu, cuda in self._states]

    def load_state(self, states: Sequence[tuple[torch.Tensor, torch.Tensor | None]]) -> None:
        """Continue every stream from :meth:`state` (one per stream)."""
        if len(states) != len(self._states):
            raise ConfigError(f"{len(states)} saved torch streams for {len(self._states)} groups")
        self._states = [(cpu.clone(), None if cuda is None else cuda.clone()) for cpu, cuda in states]

    @contextlib.contextmanager
    def drawing(self, stream: int) -> Iterator[None]:
        """Run the block (a policy call) on ``stream``."""
        self._set(self._states[stream])
        try:
            yield
        finally:
            self._states[stream] = self._get()


class WorkerDraws:
    """Each worker's random actions, drawn as its own stepping loop would, shared by the groups.

    Worker ``w`` of the ``workers`` engine draws ``[T, K, ...]`` random actions per rollout from
    ``action_rng(seed, w, generation)``; here that draw is made once per round, and each group
    takes its envs' columns of every worker's draw.

    Args:
        action: The action field, or every action leaf.
        envs_per_worker: ``K``.
        num_workers: ``N``.
        seed: The collector's seed.
    """

    def __init__(
        self, action: FieldSpec | Sequence[FieldSpec], envs_per_worker: int, num_workers: int, seed: int | None
    ) -> None:
        self._action, self._k, self._seed = action, envs_per_worker, seed
        self._sources = [RandomActions(action, envs_per_worker, action_rng(seed, w)) for w in range(num_workers)]
        self._generations = [1] * num_workers
        self._round = 0
        self._drawn: tuple[int, int, list[Any]] | None = None  # (round, steps, each worker's draw)

    def begin_round(self) -> None:
        """Draw anew for the next round."""
        self._round += 1

    def state(self) -> list[dict[str, Any]]:
        """Each worker's stream, between rounds (a round's draw is made anew at the next)."""
        return [source.random_state() for source in self._sources]

    def load_state(self, states: Sequence[Mapping[str, Any]]) -> None:
        """Continue each worker's stream from :meth:`state`; the workers' generations start again at 1."""
        if len(states) != len(self._sources):
            raise ConfigError(f"{len(states)} saved random action streams for {len(self._sources)} workers")
        for source, state in zip(self._sources, states, strict=True):
            source.load_random_state(state)
        self._generations = [1] * len(self._sources)
        self._drawn = None

    def restart(self, worker: int, generation: int) -> None:
        """Worker ``worker``'s new generation draws from its own stream, as its process would (once a generation)."""
        if generation > self._generations[worker]:
            self._generations[worker] = generation
            self._sources[worker] = RandomActions(self._action, self._k, action_rng(self._seed, worker, generation))

    def columns(self, steps: int, envs: range) -> Any:
        """``[steps, N * len(envs), ...]``: envs ``envs`` of each worker's draw of this round, in worker order."""
        if self._drawn is None or self._drawn[:2] != (self._round, steps):
            self._drawn = (self._round, steps, [source.random_actions(steps) for source in self._sources])
        drawn = self._drawn[2]
        if isinstance(drawn[0], tuple):
            return tuple(
                np.concatenate([leaf[:, envs] for leaf in leaves], axis=1) for leaves in zip(*drawn, strict=True)
            )
        return np.concatenate([draw[:, envs] for draw in drawn], axis=1)
