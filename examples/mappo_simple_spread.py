"""MAPPO on PettingZoo's simple_spread_v3 (mpe2), collected by pycollect with two worker processes.

What it does: three agents must cover three landmarks without colliding. pycollect's
``pettingzoo`` backend (``pip install ./plugins/pycollect-pettingzoo mpe2``) steps the Parallel
env in two workers (4 envs each) and hands out batches in TorchRL's multi-agent layout:
``("agents", "observation")`` of shape ``[8, T, 3, 18]`` in a group sub-TensorDict of batch size
``[8, T, 3]``, per-agent ``("next", "agents", "reward")`` and done flags. The policy is
TorchRL's: a ``MultiAgentMLP`` actor (shared parameters, each agent sees its own observation)
with a ``Categorical`` over its five moves, and a centralised ``MultiAgentMLP`` critic (every
agent's value from all observations: MAPPO; ``--ippo`` makes it decentralised). TorchRL's GAE
runs over the per-agent rewards and done flags, and ``ClipPPOLoss`` trains both networks on
each batch for a few epochs of minibatches.

PPO learns from the policy that collected the data, so the collector runs the policy here, in
the trainer (``engine="central"``): the workers only step the envs, and every batch comes from
the latest weights. With ``--engine workers`` the policy runs in the workers, which run up to
two rollouts ahead of the trainer, so a batch is one or two updates old (``policy_version``
says which): it learns too, more slowly per frame. ``--num-workers 0`` steps the envs in this
process.

It first measures a random policy's mean episode return (the team reward, the sum of the agents'
rewards, over 25-step episodes) on the same envs; the last line is machine readable:
``RESULT {"frames": ..., "random_return": ..., "start_return": ..., "final_return": ...}``.

How to run it::

    python examples/mappo_simple_spread.py                        # 300,000 frames
    python examples/mappo_simple_spread.py --total-frames 120000  # the CI test's budget
    python examples/mappo_simple_spread.py --help                 # every hyperparameter

Measured: see docs/multi-agent.md ("Learning").
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from dataclasses import dataclass

import torch
from pycollect_pettingzoo import PettingZoo
from tensordict.nn import TensorDictModule
from torch.distributions import Categorical
from torchrl.modules import MultiAgentMLP, ProbabilisticActor
from torchrl.objectives import ClipPPOLoss, ValueEstimators

from pycollect import Collector


@dataclass
class Args:
    """The hyperparameters (each one is a command-line option)."""

    total_frames: int = 300_000
    frames_per_batch: int = 3_000  # 8 envs x 375 steps: 120 episodes of 25 steps
    num_workers: int = 2
    envs_per_worker: int = 4
    engine: str = "central"  # the policy in the trainer: every batch from the latest weights
    epochs: int = 6
    minibatch_size: int = 500
    lr: float = 3e-3
    gamma: float = 0.9
    lmbda: float = 0.9
    clip_epsilon: float = 0.2
    entropy_coef: float = 0.0
    num_cells: int = 128
    ippo: bool = False  # a decentralised critic (IPPO) instead of MAPPO's centralised one
    torch_threads: int = 1  # the networks are small, and the workers need the other cores
    seed: int = 1


def parse_args() -> Args:
    """:class:`Args` from the command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for field in dataclasses.fields(Args):
        default = field.default
        if isinstance(default, bool):
            parser.add_argument(f"--{field.name.replace('_', '-')}", action="store_true", default=default)
        else:
            parser.add_argument(f"--{field.name.replace('_', '-')}", type=type(default), default=default)
    return Args(**vars(parser.parse_args()))


def make_env() -> PettingZoo:
    """simple_spread_v3's Parallel env, every agent in group "agents" (their spaces agree: also the default)."""
    from mpe2 import simple_spread_v3

    return PettingZoo(simple_spread_v3.parallel_env, group_map="all_in_one_group")


ENV_KWARGS = {"N": 3, "max_cycles": 25, "continuous_actions": False}


def mean_return(collector: Collector) -> float:
    """The mean return (team reward) of the last 100 finished episodes (a batch finishes 120)."""
    recent = collector.episodes.recent_returns
    return sum(recent) / len(recent) if recent else float("nan")


def main(args: Args) -> dict[str, object]:
    """Measure a random policy, then train MAPPO; return the figures (also printed as the RESULT line)."""
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.torch_threads)
    settings = {
        "env_kwargs": ENV_KWARGS,
        "num_workers": args.num_workers,
        "envs_per_worker": args.envs_per_worker,
        "seed": args.seed,
    }
    if args.num_workers:
        settings["engine"] = args.engine

    # 1. A random policy's mean return on the same envs: what learning has to beat.
    with Collector(make_env(), None, frames_per_batch=args.frames_per_batch, **settings) as collector:
        for _ in range(2):
            collector.next_batch()
        random_return = mean_return(collector)
    print(f"random policy: mean episode return {random_return:.1f}", flush=True)

    # 2. The actor: one MLP shared by the agents, each on its own observation; a Categorical over 5 moves.
    n_agents, n_obs, n_actions = 3, 18, 5
    actor_net = TensorDictModule(
        MultiAgentMLP(
            n_obs, n_actions, n_agents, centralised=False, share_params=True, depth=2, num_cells=args.num_cells
        ),
        in_keys=[("agents", "observation")],
        out_keys=[("agents", "logits")],
    )
    actor = ProbabilisticActor(
        actor_net,
        in_keys={"logits": ("agents", "logits")},
        out_keys=[("agents", "action")],
        distribution_class=Categorical,
        return_log_prob=True,
        log_prob_key=("agents", "action_log_prob"),
    )
    # The critic: every agent's value from all agents' observations (MAPPO), or from its own (IPPO).
    critic = TensorDictModule(
        MultiAgentMLP(
            n_obs, 1, n_agents, centralised=not args.ippo, share_params=True, depth=2, num_cells=args.num_cells
        ),
        in_keys=[("agents", "observation")],
        out_keys=[("agents", "state_value")],
    )
    loss = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=args.clip_epsilon,
        entropy_coeff=args.entropy_coef,
        normalize_advantage=True,
        normalize_advantage_exclude_dims=(-2,),  # each agent's advantages normalised on their own
    )
    # Where the per-agent values are: GAE runs over each agent's reward and done flags.
    loss.set_keys(
        reward=("agents", "reward"),
        action=("agents", "action"),
        sample_log_prob=("agents", "action_log_prob"),
        value=("agents", "state_value"),
        done=("agents", "done"),
        terminated=("agents", "terminated"),
    )
    loss.make_value_estimator(ValueEstimators.GAE, gamma=args.gamma, lmbda=args.lmbda)
    optimizer = torch.optim.Adam(loss.parameters(), args.lr)

    # 3. Collect with the actor, train on each batch, make the new weights the collector's.
    start = time.perf_counter()
    returns: list[float] = []
    frames = 0
    with Collector(
        make_env(), actor, frames_per_batch=args.frames_per_batch, total_frames=args.total_frames, **settings
    ) as collector:
        for batch in collector:  # [8, 375]; batch["agents"] is [8, 375, 3], as TorchRL's PettingZooEnv gives it
            frames += batch.numel()
            with torch.no_grad():
                loss.value_estimator(
                    batch, params=loss.critic_network_params, target_params=loss.target_critic_network_params
                )
            data = batch.reshape(-1)
            for _ in range(args.epochs):
                for index in torch.randperm(len(data)).split(args.minibatch_size):
                    terms = loss(data[index])
                    total = terms["loss_objective"] + terms["loss_critic"] + terms["loss_entropy"]
                    optimizer.zero_grad()
                    total.backward()
                    torch.nn.utils.clip_grad_norm_(loss.parameters(), 1.0)
                    optimizer.step()
            collector.update_policy_weights_()
            returns.append(mean_return(collector))
            if len(returns) % 5 == 0:
                wall = time.perf_counter() - start
                print(f"frames {frames:>7,}  mean episode return {returns[-1]:7.1f}  {wall:6.1f} s", flush=True)
    wall = time.perf_counter() - start
    result = {
        "frames": frames,
        "random_return": round(random_return, 2),
        "start_return": round(returns[0], 2),
        "final_return": round(sum(returns[-2:]) / len(returns[-2:]), 2),
        "wall_s": round(wall, 1),
    }
    print(f"done: {frames:,} frames in {wall:.1f} s; mean return {random_return:.1f} (random) -> {returns[-1]:.1f}")
    print("RESULT " + json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main(parse_args())
