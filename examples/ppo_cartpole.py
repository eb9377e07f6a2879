"""PPO on CartPole-v1, collected by pycollect with two worker processes.

What it does: a TorchRL ``ProbabilisticActor`` (an MLP over the observation, a ``Categorical``
over its logits) collects ``[8, 32]`` batches (2 workers x 4 environments x 32 steps) through
``pycollect.Collector(num_workers=2)``; TorchRL's ``GAE`` computes advantages along the batch's
``"time"`` dimension, the batch goes into a TorchRL ``ReplayBuffer`` whose
``SamplerWithoutReplacement`` hands out minibatches, ``ClipPPOLoss`` trains the actor and a
separate critic for a few epochs, and ``collector.update_policy_weights_()`` sends the new
actor weights to the workers after each training step. The learning rate and the clip range
fall linearly to zero over the run. Every few batches it prints the frames collected and the
mean return of the last 100 finished episodes; the last line is machine readable:
``RESULT {"frames": ..., "mean_return": ..., "solved_at_frames": ..., ...}``.

How to run it::

    python examples/ppo_cartpole.py                       # the full run, 149,760 frames
    python examples/ppo_cartpole.py --total-frames 20000  # a short one
    python examples/ppo_cartpole.py --help                # every hyperparameter

Measured (2026-12-01, the 2-core development machine shared with other work, so times vary
by tens of percent; ``python examples/ppo_cartpole.py``, seed 1): the mean return of the last
100 finished episodes reached 475 at 64,000 frames, 65.9 s after start, and was 500.0 (every
episode of the last 100 hit the 500-step limit) at the end, 149,760 frames in 120.2 s (128 s
with interpreter start-up). Seeds 2 and 3 reached 475 at 59,392 and 57,600 frames and also
ended at 500.0. With ``--total-frames 25600`` (the CI test's budget, ~30 s) seeds 1, 2, 3 end
at 219.9, 201.1 and 202.7, where random play gets ~22. With a seed, runs repeat exactly here.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from dataclasses import dataclass

import torch
from tensordict.nn import TensorDictModule
from torch.distributions import Categorical
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.data.replay_buffers import SamplerWithoutReplacement
from torchrl.modules import ProbabilisticActor, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

from pycollect import Collector


@dataclass
class Args:
    """Hyperparameters (each one is a command-line flag: ``--total-frames``, ``--lr``, ...)."""

    env_id: str = "CartPole-v1"
    seed: int = 1
    total_frames: int = 149_760  # 585 batches of 256 frames
    num_workers: int = 2
    envs_per_worker: int = 4
    steps_per_env: int = 32  # a batch is num_workers * envs_per_worker * steps_per_env frames
    epochs: int = 20  # passes over each batch
    minibatch_size: int = 256
    lr: float = 1e-3  # falls linearly to 0 over the run
    clip_epsilon: float = 0.2  # falls linearly to 0 over the run
    gamma: float = 0.98
    gae_lambda: float = 0.8
    entropy_coeff: float = 0.0
    critic_coeff: float = 0.5
    max_grad_norm: float = 0.5
    hidden: int = 64
    target_return: float = 475.0  # reported: the first frame count where the mean return reaches it
    torch_threads: int = 1  # the trainer's intra-op threads
    log_every: int = 20  # batches between progress lines


def parse_args() -> Args:
    """Build an ``Args`` from the command line, one ``--flag`` per field."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for f in dataclasses.fields(Args):
        parser.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default)
    return Args(**vars(parser.parse_args()))


def mlp(n_in: int, n_out: int, hidden: int) -> torch.nn.Sequential:
    """Two tanh hidden layers."""
    return torch.nn.Sequential(
        torch.nn.Linear(n_in, hidden),
        torch.nn.Tanh(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.Tanh(),
        torch.nn.Linear(hidden, n_out),
    )


def main(args: Args) -> dict[str, float | int | None]:
    """Train, print progress, and return the final figures."""
    torch.manual_seed(args.seed)
    # Small networks: one thread is fastest, and leaves the other cores to the workers.
    torch.set_num_threads(args.torch_threads)
    obs_dim, n_actions = 4, 2  # CartPole-v1

    # The actor: observation -> logits -> Categorical; it writes "action" and "action_log_prob".
    actor = ProbabilisticActor(
        TensorDictModule(mlp(obs_dim, n_actions, args.hidden), in_keys=["observation"], out_keys=["logits"]),
        in_keys=["logits"],
        distribution_class=Categorical,
        return_log_prob=True,
    )
    # The critic: observation -> "state_value". It stays in the trainer; only the actor collects.
    critic = ValueOperator(mlp(obs_dim, 1, args.hidden), in_keys=["observation"])

    loss_module = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=args.clip_epsilon,
        entropy_bonus=args.entropy_coeff > 0,
        entropy_coeff=args.entropy_coeff,
        critic_coeff=args.critic_coeff,
        loss_critic_type="l2",
        normalize_advantage=True,
    )
    advantage = GAE(gamma=args.gamma, lmbda=args.gae_lambda, value_network=critic, average_gae=False)
    optimizer = torch.optim.Adam(loss_module.parameters(), lr=args.lr)

    frames_per_batch = args.num_workers * args.envs_per_worker * args.steps_per_env
    buffer = ReplayBuffer(
        storage=LazyTensorStorage(frames_per_batch),
        sampler=SamplerWithoutReplacement(),
        batch_size=args.minibatch_size,
    )
    minibatches_per_epoch = max(1, frames_per_batch // args.minibatch_size)

    collector = Collector(
        args.env_id,
        actor,  # an nn.Module policy: update_policy_weights_() sends its state_dict
        frames_per_batch=frames_per_batch,
        total_frames=args.total_frames,
        envs_per_worker=args.envs_per_worker,
        num_workers=args.num_workers,
        sync=True,
        seed=args.seed,
    )
    start = time.perf_counter()
    frames, solved_at, solved_at_s = 0, None, None
    mean_return = float("nan")
    with collector:
        for i, batch in enumerate(collector):
            frames += batch.numel()
            progress = 1.0 - frames / args.total_frames  # linear annealing of lr and clip range
            for group in optimizer.param_groups:
                group["lr"] = args.lr * max(progress, 0.0)
            loss_module.clip_epsilon.fill_(max(args.clip_epsilon * progress, 1e-3))

            # Advantages over the [envs, time] batch, then a flat buffer of frames for minibatches.
            with torch.no_grad():
                advantage(batch, time_dim=batch.names.index("time"))
            buffer.empty()
            buffer.extend(batch.reshape(-1))
            for _ in range(args.epochs):
                for _ in range(minibatches_per_epoch):
                    losses = loss_module(buffer.sample())
                    loss = sum(value for key, value in losses.items() if key.startswith("loss_"))
                    optimizer.zero_grad()
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(loss_module.parameters(), args.max_grad_norm)
                    optimizer.step()
            collector.update_policy_weights_()  # the workers pick the new weights up between rollouts

            recent = collector.episodes.recent_returns
            mean_return = sum(recent) / len(recent) if recent else float("nan")
            if solved_at is None and len(recent) == 100 and mean_return >= args.target_return:
                solved_at, solved_at_s = frames, time.perf_counter() - start
                print(
                    f"frames {frames:>7,}  mean return {mean_return:6.1f}  reached {args.target_return:g} "
                    f"after {solved_at_s:.1f} s",
                    flush=True,
                )
            if i % args.log_every == 0:
                elapsed = time.perf_counter() - start
                print(
                    f"frames {frames:>7,}  mean return {mean_return:6.1f}  "
                    f"episodes {collector.episodes.count:>5}  {elapsed:6.1f} s",
                    flush=True,
                )
    wall = time.perf_counter() - start
    result = {
        "frames": frames,
        "mean_return": round(mean_return, 2),
        "episodes": collector.episodes.count,
        "solved_at_frames": solved_at,
        "solved_at_s": None if solved_at_s is None else round(solved_at_s, 1),
        "wall_s": round(wall, 1),
    }
    print(f"done: {frames:,} frames in {wall:.1f} s, mean return of the last 100 episodes {mean_return:.1f}")
    print("RESULT " + json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main(parse_args())
