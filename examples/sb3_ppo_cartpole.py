"""Stable-Baselines3's PPO on CartPole-v1, stepping the envs through ``pycollect.vector.SB3VecEnv``.

What it shows: an SB3 script adopts pycollect by swapping one line, the one that makes the
vector env (see ``make_vec_envs``). ``--vec pycollect`` (the default) builds
``SB3VecEnv("CartPole-v1", 8, num_workers=2)``: SB3's ``VecEnv`` with the envs in pycollect's
supervised worker processes, observations and rewards through shared memory. ``--vec subproc``
builds SB3's own ``SubprocVecEnv`` and ``--vec dummy`` its ``DummyVecEnv`` (every env in this
process), for the same script on SB3's vector envs. Everything else is plain SB3: ``VecMonitor``
records episode returns, ``PPO("MlpPolicy", vec_env)`` with RL Zoo's CartPole
hyperparameters learns, ``evaluate_policy`` plays deterministic episodes at the end. Every
few rollouts it prints the steps taken and the mean return of the last 100 training episodes;
the last line is machine readable: ``RESULT {"steps": ..., "mean_return": ..., ...}``.

How to run it::

    python examples/sb3_ppo_cartpole.py                          # 50,000 steps, pycollect, 2 workers
    python examples/sb3_ppo_cartpole.py --vec subproc            # the same script on SubprocVecEnv
    python examples/sb3_ppo_cartpole.py --total-timesteps 16384  # a short run
    python examples/sb3_ppo_cartpole.py --help                   # every flag

Measured (2026-12-02, the 2-core development machine, shared with other work at a load of 2 to
5, so times vary by tens of percent; ``--total-timesteps 50000``, seed 0, 8 envs): with each of
the three vector envs the run is the same, step for step: 50,176 steps, 239 episodes, a mean
return of the last 100 of 396.0 and a deterministic evaluation of 500.0 (the step limit) over 16
episodes. Wall time of training (with the vector env's start): ``pycollect`` (2 workers) 47.6
and 50.8 s, ``subproc`` 92.0 to 102.6 s in three runs (each of its 8 processes imports SB3 and torch),
``dummy`` 45.9 s. PPO's 20 epochs of updates take most of the time; CartPole's steps are cheap.
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
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv, VecMonitor

from pycollect.vector import SB3VecEnv


@dataclass
class Args:
    """Settings (each one is a ``--flag``); PPO's are RL Zoo's for CartPole-v1."""

    vec: str = "pycollect"  # or "subproc" (SB3's SubprocVecEnv), "dummy" (SB3's DummyVecEnv)
    env_id: str = "CartPole-v1"
    seed: int = 0
    total_timesteps: int = 50_000
    num_envs: int = 8
    num_workers: int = 2  # pycollect only: worker processes, num_envs / num_workers envs each
    n_steps: int = 32  # steps of every env per rollout
    batch_size: int = 256
    n_epochs: int = 20
    learning_rate: float = 1e-3
    gamma: float = 0.98
    gae_lambda: float = 0.8
    eval_episodes: int = 16


def parse_args() -> Args:
    """Build an ``Args`` from the command line, one ``--flag`` per field."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for f in dataclasses.fields(Args):
        parser.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default)
    return Args(**vars(parser.parse_args()))


def make_vec_envs(args: Args) -> VecEnv:
    """The vector env: the one line an SB3 user changes to adopt pycollect."""
    env_fns = [lambda: gym.make(args.env_id) for _ in range(args.num_envs)]  # SB3's vector envs take these
    if args.vec == "pycollect":
        venv: VecEnv = SB3VecEnv(args.env_id, args.num_envs, num_workers=args.num_workers)
    elif args.vec == "subproc":
        venv = SubprocVecEnv(env_fns)
    elif args.vec == "dummy":
        venv = DummyVecEnv(env_fns)
    else:
        raise SystemExit(f"--vec must be 'pycollect', 'subproc' or 'dummy', not {args.vec!r}")
    return VecMonitor(venv)  # episode returns in infos["episode"], for SB3's logs and evaluate_policy


class Progress(BaseCallback):
    """Counts finished episodes; prints the steps taken and the mean return of the last 100 every ``every`` rollouts."""

    def __init__(self, every: int) -> None:
        super().__init__()
        self.every, self.rollouts, self.episodes, self.started = every, 0, 0, time.perf_counter()

    def _on_step(self) -> bool:
        self.episodes += int(np.sum(self.locals["dones"]))
        return True

    def _on_rollout_end(self) -> None:
        self.rollouts += 1
        if self.rollouts % self.every == 0:
            returns = [episode["r"] for episode in self.model.ep_info_buffer]
            mean = float(np.mean(returns)) if returns else float("nan")
            steps = self.num_timesteps
            print(
                f"steps {steps:>7,}  mean return (last 100) {mean:6.1f}  "
                f"steps/s {steps / (time.perf_counter() - self.started):,.0f}",
                flush=True,
            )


def main(args: Args) -> dict[str, Any]:
    """Train, evaluate, and return the figures."""
    torch.set_num_threads(1)  # small networks; the other core steps envs
    started = time.perf_counter()
    venv = make_vec_envs(args)
    try:
        model = PPO(
            "MlpPolicy",
            venv,
            n_steps=args.n_steps,
            batch_size=args.batch_size,
            n_epochs=args.n_epochs,
            learning_rate=args.learning_rate,
            gamma=args.gamma,
            gae_lambda=args.gae_lambda,
            ent_coef=0.0,
            seed=args.seed,
            device="cpu",
        )
        progress = Progress(every=20)
        model.learn(args.total_timesteps, callback=progress)
        trained = time.perf_counter() - started
        returns = [episode["r"] for episode in model.ep_info_buffer]
        evaluation, _ = evaluate_policy(model, venv, n_eval_episodes=args.eval_episodes, deterministic=True)
    finally:
        venv.close()
    return {
        "vec": args.vec,
        "steps": model.num_timesteps,
        "episodes": progress.episodes,
        "mean_return": float(np.mean(returns)) if returns else None,
        "eval_return": float(evaluation),
        "seconds": round(trained, 1),
    }


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(parse_args())))
