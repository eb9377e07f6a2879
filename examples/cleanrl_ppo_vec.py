"""PPO on CartPole-v1 in the style of CleanRL's ``ppo.py``, stepping a pycollect vector env.

What it shows: a training loop written for gymnasium's vector API runs unchanged on
``pycollect.make_vec``. The one line that differs is where the vector env is made (see
``make_envs``): ``--vec gymnasium`` builds ``gymnasium.vector.SyncVectorEnv``, ``--vec
pycollect`` (the default) builds ``pycollect.make_vec`` with the envs in ``--num-workers``
supervised worker processes. Everything else is CleanRL's PPO: a rollout of ``--num-steps``
steps of every env, GAE, ``--update-epochs`` passes of clipped PPO over minibatches, episode
returns from gymnasium's ``RecordEpisodeStatistics`` vector wrapper.

The vector env resets an env in the step that ends its episode (``autoreset_mode="same_step"``),
as gym 0.26 did and CleanRL's loop expects; with gymnasium's default (``next_step``) the step
after an episode's end is a reset whose action is ignored, which this loop would learn from.

How to run it::

    python examples/cleanrl_ppo_vec.py                        # 100,000 steps, pycollect, 2 workers
    python examples/cleanrl_ppo_vec.py --vec gymnasium        # the same loop on SyncVectorEnv
    python examples/cleanrl_ppo_vec.py --total-timesteps 8192 # a short run
    python examples/cleanrl_ppo_vec.py --help                 # every hyperparameter

The last line is machine readable: ``RESULT {"steps": ..., "mean_return": ..., ...}``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical

import pycollect


@dataclass
class Args:
    """Hyperparameters: CleanRL's defaults for CartPole (each one is a ``--flag``)."""

    vec: str = "pycollect"  # or "gymnasium": the same loop on gymnasium's SyncVectorEnv
    env_id: str = "CartPole-v1"
    seed: int = 1
    total_timesteps: int = 100_000
    num_envs: int = 8
    num_workers: int = 2  # pycollect only: worker processes, num_envs / num_workers envs each
    num_steps: int = 128  # steps of every env per rollout
    learning_rate: float = 2.5e-4  # falls linearly to 0 over the run
    gamma: float = 0.99
    gae_lambda: float = 0.95
    num_minibatches: int = 4
    update_epochs: int = 4
    clip_coef: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5


def parse_args() -> Args:
    """Build an ``Args`` from the command line, one ``--flag`` per field."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for f in dataclasses.fields(Args):
        parser.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default)
    return Args(**vars(parser.parse_args()))


def make_envs(args: Args) -> gym.vector.VectorEnv:
    """The vector env: the one line a gymnasium user changes to adopt pycollect."""
    if args.vec == "gymnasium":
        envs: gym.vector.VectorEnv = gym.vector.SyncVectorEnv(
            [lambda: gym.make(args.env_id) for _ in range(args.num_envs)],
            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
        )
    elif args.vec == "pycollect":
        envs = pycollect.make_vec(args.env_id, args.num_envs, num_workers=args.num_workers, autoreset_mode="same_step")
    else:
        raise SystemExit(f"--vec must be 'pycollect' or 'gymnasium', not {args.vec!r}")
    return gym.wrappers.vector.RecordEpisodeStatistics(envs)


def layer(n_in: int, n_out: int, std: float = np.sqrt(2)) -> nn.Linear:
    """A linear layer with CleanRL's orthogonal initialisation."""
    linear = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(linear.weight, std)
    nn.init.constant_(linear.bias, 0.0)
    return linear


class Agent(nn.Module):
    """CleanRL's CartPole agent: separate tanh MLPs for the value and the action logits."""

    def __init__(self, obs_dim: int, n_actions: int) -> None:
        super().__init__()
        self.critic = nn.Sequential(layer(obs_dim, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, 1, std=1.0))
        self.actor = nn.Sequential(
            layer(obs_dim, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, n_actions, std=0.01)
        )

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """The critic's estimate of each observation's value."""
        return self.critic(obs)  # type: ignore[no-any-return]

    def act(
        self, obs: torch.Tensor, action: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """A sampled (or the given) action, its log-probability, the entropy and the value."""
        dist = Categorical(logits=self.actor(obs))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.critic(obs)


def main(args: Args) -> dict[str, Any]:
    """Train, print progress, and return the final figures."""
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # small networks; the other core steps envs
    envs = make_envs(args)
    n, t = args.num_envs, args.num_steps
    agent = Agent(int(np.prod(envs.single_observation_space.shape)), int(envs.single_action_space.n))
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    obs_buf = torch.zeros((t, n, *envs.single_observation_space.shape))
    actions = torch.zeros((t, n), dtype=torch.long)
    logprobs, rewards, dones, values = (torch.zeros((t, n)) for _ in range(4))

    batch_size = n * t
    minibatch_size = batch_size // args.num_minibatches
    iterations = args.total_timesteps // batch_size
    returns: list[float] = []
    started = time.perf_counter()
    obs, _ = envs.reset(seed=args.seed)
    next_obs, next_done = torch.as_tensor(obs, dtype=torch.float32), torch.zeros(n)
    for iteration in range(1, iterations + 1):
        for group in optimizer.param_groups:  # the learning rate falls linearly to 0
            group["lr"] = (1.0 - (iteration - 1.0) / iterations) * args.learning_rate

        for step in range(t):
            obs_buf[step], dones[step] = next_obs, next_done
            with torch.no_grad():
                action, logprob, _, value = agent.act(next_obs)
            actions[step], logprobs[step], values[step] = action, logprob, value.flatten()
            obs, reward, terminated, truncated, infos = envs.step(action.numpy())
            rewards[step] = torch.as_tensor(reward, dtype=torch.float32)
            next_obs = torch.as_tensor(obs, dtype=torch.float32)
            next_done = torch.as_tensor(np.logical_or(terminated, truncated), dtype=torch.float32)
            if "episode" in infos:
                returns.extend(infos["episode"]["r"][infos["_episode"]].tolist())

        with torch.no_grad():  # GAE over the rollout, bootstrapped from the value of the next observation
            advantages = torch.zeros_like(rewards)
            last = torch.zeros(n)
            next_value = agent.value(next_obs).flatten()
            for step in reversed(range(t)):
                not_done = 1.0 - (next_done if step == t - 1 else dones[step + 1])
                following = next_value if step == t - 1 else values[step + 1]
                delta = rewards[step] + args.gamma * following * not_done - values[step]
                advantages[step] = last = delta + args.gamma * args.gae_lambda * not_done * last
            targets = advantages + values

        b_obs, b_actions = obs_buf.reshape(batch_size, -1), actions.reshape(-1)
        b_logprobs, b_advantages, b_targets = logprobs.reshape(-1), advantages.reshape(-1), targets.reshape(-1)
        for _ in range(args.update_epochs):
            order = torch.randperm(batch_size)
            for start in range(0, batch_size, minibatch_size):
                mb = order[start : start + minibatch_size]
                _, new_logprob, entropy, new_value = agent.act(b_obs[mb], b_actions[mb])
                ratio = (new_logprob - b_logprobs[mb]).exp()
                adv = b_advantages[mb]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                policy_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)).mean()
                value_loss = 0.5 * ((new_value.flatten() - b_targets[mb]) ** 2).mean()
                loss = policy_loss - args.ent_coef * entropy.mean() + args.vf_coef * value_loss
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()

        if iteration % 10 == 0 or iteration == iterations:
            recent = returns[-100:]
            mean = float(np.mean(recent)) if recent else float("nan")
            steps = iteration * batch_size
            print(
                f"steps {steps:>7,}  episodes {len(returns):>5}  mean return (last 100) {mean:6.1f}  "
                f"steps/s {steps / (time.perf_counter() - started):,.0f}"
            )
    envs.close()
    recent = returns[-100:]
    return {
        "vec": args.vec,
        "steps": iterations * batch_size,
        "episodes": len(returns),
        "mean_return": float(np.mean(recent)) if recent else None,
        "seconds": round(time.perf_counter() - started, 1),
    }


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(parse_args())))
