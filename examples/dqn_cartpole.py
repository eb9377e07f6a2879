"""DQN on CartPole-v1: TorchRL's DQNLoss, a target network, epsilon-greedy, a replay buffer.

What it does: a TorchRL ``QValueActor`` (an MLP giving one Q-value per action, greedy over
them) followed by an ``EGreedyModule`` (a uniform random action with probability epsilon)
is the policy of a ``pycollect.Collector`` with one worker process and 4 environments. The
first frames are random (``init_random_frames``). The collector itself extends a TorchRL
``ReplayBuffer`` with every batch (``replay_buffer=``, after ``postproc=`` flattens the
``[envs, time]`` batch into frames), so iterating yields ``None``, as TorchRL's collectors do;
after each batch, a few ``DQNLoss`` gradient steps on sampled minibatches
(one-step TD targets from a delayed copy of the Q-network), a ``HardUpdate`` of the target
network every few hundred steps, epsilon annealed linearly, and
``collector.update_policy_weights_()`` sends the Q-network's weights and epsilon (a buffer
of the ``EGreedyModule``) to the worker. It prints the frames, epsilon and the mean return of
the last 100 finished episodes as it goes, and a machine-readable last line
``RESULT {"frames": ..., "mean_return": ..., "greedy_return": ...}``, where
``greedy_return`` is the mean return of 8 episodes played greedily
(``exploration_type="deterministic"``: the ``EGreedyModule`` then never explores) at the end.

It is not tuned to solve CartPole: it shows the off-policy loop with pycollect.

How to run it::

    python examples/dqn_cartpole.py                       # the default budget, 51,200 frames
    python examples/dqn_cartpole.py --total-frames 5000   # a short run
    python examples/dqn_cartpole.py --help

Measured (2026-12-01, the 2-core development machine shared with other work;
``python examples/dqn_cartpole.py``, seed 1, three runs): after 51,200 frames (32-52 s) the
mean return of the last 100 training episodes (epsilon 0.05) was 240.7, 239.9 and 240.7 (it
peaks around 270 near 45k frames), and the greedy evaluation returned 149.6, 184.1 and 149.6
(8 episodes). Random play gets ~22. The runs differ slightly because when a weight update
reaches the worker (this batch or the next) depends on timing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from dataclasses import dataclass

import torch
from tensordict.nn import TensorDictSequential
from torchrl.data import Categorical, LazyTensorStorage, ReplayBuffer
from torchrl.modules import EGreedyModule, QValueActor
from torchrl.objectives import DQNLoss, HardUpdate

from pycollect import Collector


@dataclass
class Args:
    """Hyperparameters (each one is a command-line flag: ``--total-frames``, ``--lr``, ...)."""

    env_id: str = "CartPole-v1"
    seed: int = 1
    total_frames: int = 51_200  # 800 batches
    num_workers: int = 1
    envs_per_worker: int = 4
    frames_per_batch: int = 64
    init_random_frames: int = 1_000  # uniform random actions first
    buffer_size: int = 20_000
    batch_size: int = 128
    updates_per_batch: int = 8  # gradient steps after each batch
    lr: float = 1e-3
    gamma: float = 0.99
    target_update_interval: int = 250  # gradient steps between hard target-network updates
    eps_init: float = 1.0
    eps_end: float = 0.05
    exploration_fraction: float = 0.4  # of total_frames over which epsilon falls to eps_end
    hidden: int = 128
    eval_episodes: int = 8
    torch_threads: int = 1  # the trainer's intra-op threads
    log_every: int = 100  # batches between progress lines


def parse_args() -> Args:
    """Build an ``Args`` from the command line, one ``--flag`` per field."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for f in dataclasses.fields(Args):
        parser.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default)
    return Args(**vars(parser.parse_args()))


def greedy_return(policy: torch.nn.Module, args: Args) -> float:
    """Mean return of ``args.eval_episodes`` episodes played without exploration, in-process."""
    returns: list[float] = []
    with Collector(
        args.env_id,
        policy,
        frames_per_batch=args.eval_episodes * 500,  # CartPole-v1 episodes end by step 500
        envs_per_worker=args.eval_episodes,
        seed=args.seed + 1000,
        exploration_type="deterministic",
    ) as evaluator:
        while len(returns) < args.eval_episodes:
            evaluator.next_batch()
            returns = evaluator.episodes.recent_returns
    return sum(returns[: args.eval_episodes]) / args.eval_episodes


def main(args: Args) -> dict[str, float | int]:
    """Train, print progress, and return the final figures."""
    torch.manual_seed(args.seed)
    # Small networks: one thread is fastest, and leaves the other cores to the workers.
    torch.set_num_threads(args.torch_threads)
    obs_dim, n_actions = 4, 2  # CartPole-v1
    action_spec = Categorical(n_actions)  # integer actions, as pycollect's batches hold them

    qnet = torch.nn.Sequential(
        torch.nn.Linear(obs_dim, args.hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(args.hidden, args.hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(args.hidden, n_actions),
    )
    # observation -> action_value -> greedy "action" (an integer index) and chosen_action_value.
    value_actor = QValueActor(qnet, in_keys=["observation"], spec=action_spec)
    annealing_frames = int(args.exploration_fraction * args.total_frames)
    explore = EGreedyModule(
        action_spec,
        eps_init=args.eps_init,
        eps_end=args.eps_end,
        annealing_num_steps=max(1, annealing_frames // args.frames_per_batch),  # one step() per batch
    )
    policy = TensorDictSequential(value_actor, explore)

    loss_module = DQNLoss(value_actor, loss_function="l2", delay_value=True, action_space=action_spec)
    loss_module.make_value_estimator(gamma=args.gamma)
    target_updater = HardUpdate(loss_module, value_network_update_interval=args.target_update_interval)
    optimizer = torch.optim.Adam(loss_module.parameters(), lr=args.lr)
    buffer = ReplayBuffer(storage=LazyTensorStorage(args.buffer_size), batch_size=args.batch_size)

    collector = Collector(
        args.env_id,
        policy,  # an nn.Module: update_policy_weights_() sends its state_dict, epsilon included
        frames_per_batch=args.frames_per_batch,
        total_frames=args.total_frames,
        envs_per_worker=args.envs_per_worker,
        num_workers=args.num_workers,
        init_random_frames=args.init_random_frames,
        seed=args.seed,
        postproc=lambda td: td.reshape(-1),  # [envs, time] -> [frames], applied in this process
        replay_buffer=buffer,  # every batch extends it; iteration yields None
    )
    start = time.perf_counter()
    frames = 0
    mean_return = float("nan")
    with collector:
        for i, _ in enumerate(collector):  # None: the batch is already in the buffer
            frames += args.frames_per_batch
            if frames >= args.init_random_frames:
                for _ in range(args.updates_per_batch):
                    loss = loss_module(buffer.sample())["loss"]
                    optimizer.zero_grad()
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(loss_module.parameters(), 10.0)
                    optimizer.step()
                    target_updater.step()
                explore.step()  # anneal epsilon (one step per batch)
            collector.update_policy_weights_()

            recent = collector.episodes.recent_returns
            mean_return = sum(recent) / len(recent) if recent else float("nan")
            if i % args.log_every == 0:
                print(
                    f"frames {frames:>7,}  epsilon {explore.eps.item():.3f}  mean return {mean_return:6.1f}  "
                    f"episodes {collector.episodes.count:>5}  {time.perf_counter() - start:6.1f} s",
                    flush=True,
                )
    wall = time.perf_counter() - start
    greedy = greedy_return(policy, args)
    result = {
        "frames": frames,
        "mean_return": round(mean_return, 2),
        "greedy_return": round(greedy, 2),
        "episodes": collector.episodes.count,
        "wall_s": round(wall, 1),
    }
    print(
        f"done: {frames:,} frames in {wall:.1f} s, mean return of the last 100 episodes {mean_return:.1f}, "
        f"greedy {greedy:.1f}"
    )
    print("RESULT " + json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main(parse_args())
