"""The central engine's policy threads on a CPU: its default against 2 threads, and the workers engine.

CartPole, 2 workers x 8 envs, a 2-hidden-layer MLP of each ``--widths``, torch's default of 2
intra-op threads in the trainer. Each contender collects for ``--seconds``, in turn, ``--rounds``
times; the table gives each contender's runs (the machine is shared: compare within a round).

    python benches/central_threads.py
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch
from torch import nn

from pycollect import Collector
from pycollect.default_plugins import Central


class MLP(nn.Module):
    """Argmax over a 2-hidden-layer tanh MLP on CartPole's observation."""

    def __init__(self, width: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        layers = [nn.Linear(4, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh(), nn.Linear(width, 2)]
        self.net = nn.Sequential(*layers)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.net(observation).argmax(-1)


def rate(engine: Any, width: int, seconds: float) -> float:
    """Frames per second of one collector after a batch of warm-up."""
    settings = {"num_workers": 2, "envs_per_worker": 8, "frames_per_batch": 2 * 8 * 64}
    with Collector("CartPole-v1", MLP(width), engine=engine, **settings) as collector:
        collector.next_batch()
        frames, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            frames += collector.next_batch().numel()
        return frames / (time.perf_counter() - start)


def main() -> None:
    """Run the rounds and print each contender's rates."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="64,1024", help="MLP widths, comma-separated")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()
    torch.set_num_threads(2)  # torch's default on the 2-CPU machine the figures in docs/central.md come from
    contenders = {
        "central (default policy_threads)": "central",
        "Central(policy_threads=2)": Central(policy_threads=2),
        "workers": "workers",
    }
    for width in (int(w) for w in args.widths.split(",")):
        runs: dict[str, list[float]] = {name: [] for name in contenders}
        for _ in range(args.rounds):
            for name, engine in contenders.items():
                runs[name].append(rate(engine, width, args.seconds))
        for name, rates in runs.items():
            print(f"width {width:>5}  {name:34} " + ", ".join(f"{r:,.0f}" for r in rates) + " frames/s")


if __name__ == "__main__":
    main()
