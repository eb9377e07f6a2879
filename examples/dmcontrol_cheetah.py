"""dm_control's cheetah-run through the pycollect-dmcontrol plugin, with a TanhNormal actor.

What it does: ``Collector("dm_control:cheetah-run", ...)`` (the env backend the
``pycollect-dmcontrol`` plugin registers) steps the task in two worker processes with 4
environments each. The policy is a TorchRL ``ProbabilisticActor``: an MLP (random init) over
the observation dict flattened into one vector (``("observation", "position")`` and
``("observation", "velocity")``, float64 in dm_control, cast to float32), whose output is
split into the ``loc`` and ``scale`` of a ``TanhNormal`` over the 6 actions in [-1, 1]. The
actor samples (pycollect's default exploration type is RANDOM, as TorchRL's) and writes
``action_log_prob``, ``loc`` and ``scale`` next to the action: they all land in the batch.
It prints the first batch's keys and shapes, frames/s per batch and overall (timed from the
first batch on, start-up apart), and a machine-readable last line
``RESULT {"frames": ..., "frames_per_s": ..., "mean_reward": ...}``.

Needs the plugin (``pip install ./plugins/pycollect-dmcontrol``); no display is needed:
``MUJOCO_GL`` is set to ``disable`` unless you set it yourself.

Measured (2026-12-01, the 2-core development machine shared with other work, default flags):
about 1,500 frames/s after the first batch (batches of 4,000 frames, 1,360-1,730 frames/s
each), about 20 s of start-up and first batch (workers import torch and dm_control), mean
reward per step 0.0035 (an untrained policy). dm_control logs a ``settotalmass`` deprecation
warning per environment built (from MuJoCo, harmless).

How to run it::

    python examples/dmcontrol_cheetah.py
    python examples/dmcontrol_cheetah.py --total-frames 4000 --frames-per-batch 2000
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("MUJOCO_GL", "disable")  # before dm_control is imported (workers inherit it)

import torch
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torchrl.modules import ProbabilisticActor, TanhNormal

from pycollect import Collector

OBS_KEYS = [("observation", "position"), ("observation", "velocity")]  # cheetah-run: 8 + 9 values
OBS_DIM, ACTION_DIM = 17, 6


class FlatMLP(torch.nn.Module):
    """Concatenate the observation fields (as float32); an MLP; split into ``loc`` and positive ``scale``."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(OBS_DIM, hidden),
            torch.nn.Tanh(),
            torch.nn.Linear(hidden, hidden),
            torch.nn.Tanh(),
            torch.nn.Linear(hidden, 2 * ACTION_DIM),
            NormalParamExtractor(),  # [..., 12] -> loc [..., 6], scale [..., 6] (softplus)
        )

    def forward(self, *fields: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One tensor per observation field, ``[..., n_i]`` each."""
        return self.net(torch.cat([f.to(torch.float32) for f in fields], dim=-1))


def make_actor(hidden: int) -> ProbabilisticActor:
    """The actor: observation dict -> (loc, scale) -> TanhNormal sample in [-1, 1] and its log-probability."""
    module = TensorDictModule(FlatMLP(hidden), in_keys=OBS_KEYS, out_keys=["loc", "scale"])
    return ProbabilisticActor(
        module,
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        distribution_kwargs={"low": -1.0, "high": 1.0},
        return_log_prob=True,
    )


def main() -> dict[str, float | int]:
    """Collect, print keys and throughput."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="dm_control:cheetah-run")
    parser.add_argument("--total-frames", type=int, default=40_000)
    parser.add_argument("--frames-per-batch", type=int, default=4_000)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--envs-per-worker", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    actor = make_actor(args.hidden)
    started = time.perf_counter()
    collector = Collector(
        args.env,
        actor,
        frames_per_batch=args.frames_per_batch,
        total_frames=args.total_frames,
        envs_per_worker=args.envs_per_worker,
        num_workers=args.num_workers,
        seed=args.seed,
    )
    frames = 0
    reward_sum = 0.0
    with collector:
        t_first = t_prev = time.perf_counter()
        for i, batch in enumerate(collector):
            now = time.perf_counter()
            if i == 0:
                t_first = now
                print(f"start-up and first batch: {now - started:.1f} s")
                print(f"batch {list(batch.shape)} (dims {batch.names}), keys:")
                for key in sorted(batch.keys(include_nested=True, leaves_only=True), key=str):
                    print(f"  {key}: {list(batch[key].shape)} {batch[key].dtype}")
            else:
                frames += batch.numel()  # steady state: counted from the second batch on
                print(f"batch {i:>3}: {batch.numel() / (now - t_prev):8,.0f} frames/s", flush=True)
            reward_sum += batch["next", "reward"].sum().item()
            t_prev = now
            collector.update_policy_weights_()  # a trainer would do this after each training step
        total = collector.stats().frames
    steady = frames / (t_prev - t_first) if frames else float("nan")
    mean_reward = reward_sum / total
    print(f"done: {total:,} frames, {steady:,.0f} frames/s after the first batch, mean reward {mean_reward:.4f}")
    result = {"frames": total, "frames_per_s": round(steady), "mean_reward": round(mean_reward, 4)}
    print("RESULT " + json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
