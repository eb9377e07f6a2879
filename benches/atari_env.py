"""Atari Pong for the throughput bench: ALE through gymnasium, and EnvPool's equivalent.

:func:`make_env` is ``ALE/Pong-v5`` with ``frameskip=1`` and ``obs_type="grayscale"`` under gymnasium's
``AtariPreprocessing(frame_skip=4, screen_size=84, grayscale_obs=True, noop_max=30)`` and
``FrameStackObservation(stack_size=4)``: ``Box(0, 255, (4, 84, 84), uint8)`` observations,
``Discrete(6)`` actions. ``obs_type="grayscale"`` changes no observation (``AtariPreprocessing``
reads ALE's grayscale screen itself): it only spares ALE the RGB screen it would otherwise build
after every emulator frame, which nothing reads (a third of a step in a native profile; 20 %
less CPU per step measured, observations and rewards identical over 300 steps). The raw loop and
every gymnasium contender use this same env, so ratios to the raw loop are unaffected; EnvPool
renders only what it keeps, too. pycollect's workers are fresh interpreters that build it by import
path (``"callable:atari_env:make_env"``), which works because the bench puts this directory on
``sys.path`` and workers inherit the trainer's ``sys.path``.

:func:`make_envpool` is EnvPool's ``Pong-v5`` with the same preprocessing done in C++. Where the
two differ:

* ``ALE/Pong-v5`` keeps ALE's sticky actions (``repeat_action_probability=0.25``); EnvPool is
  given the same 0.25 (its own default is 0);
* EnvPool presses FIRE on reset by default (``use_fire_reset``); gymnasium's wrapper does not,
  so it is turned off;
* both max-pool the last two raw frames of each skip, grayscale, and resize to 84x84 with
  OpenCV's ``INTER_AREA``; EnvPool grayscales the max-pooled RGB frame, gymnasium asks ALE for
  grayscale frames and max-pools those (the same up to rounding);
* episodes are capped at 108,000 emulator frames in both (27,000 steps), no life-loss
  termination, no reward clipping (``episodic_life=False``, ``reward_clip=False``).

:func:`make_saveable_env` is :func:`make_env` with its sticky actions made by gymnasium's
``StickyAction`` (same probability, per emulator frame) instead of ALE's, whose repeated action
ALE keeps outside the state it saves: the env of the snapshot benchmarks (``benches/faults.py``).

Needs ``ale-py`` and ``opencv-python(-headless)`` (and ``envpool`` for :func:`make_envpool`).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

OBS_SHAPE = (4, 84, 84)


def make_env(saveable: bool = False) -> gym.Env:
    """``ALE/Pong-v5`` (frameskip 1, grayscale screen) + ``AtariPreprocessing`` + ``FrameStackObservation(4)``.

    Args:
        saveable: Sticky actions from gymnasium's ``StickyAction`` rather than ALE's (see
            :func:`make_saveable_env`).
    """
    import ale_py

    gym.register_envs(ale_py)
    if saveable:
        env = gym.make("ALE/Pong-v5", frameskip=1, obs_type="grayscale", repeat_action_probability=0.0)
        env = gym.wrappers.StickyAction(env, repeat_action_probability=0.25)
    else:
        env = gym.make("ALE/Pong-v5", frameskip=1, obs_type="grayscale")
    env = gym.wrappers.AtariPreprocessing(env, frame_skip=4, screen_size=84, grayscale_obs=True, noop_max=30)
    return gym.wrappers.FrameStackObservation(env, stack_size=4)


def make_saveable_env() -> gym.Env:
    """:func:`make_env` whose state pycollect can save: sticky actions by gymnasium's wrapper, not ALE."""
    return make_env(saveable=True)


def make_envpool(num_envs: int, num_threads: int, seed: int = 0, batch_size: int | None = None) -> Any:
    """EnvPool's ``Pong-v5`` as a gymnasium vector env, preprocessing matched to :func:`make_env`.

    ``batch_size`` below ``num_envs`` makes EnvPool's async pool (``async_reset``/``recv``/``send``).
    """
    import envpool

    return envpool.make_gymnasium(
        "Pong-v5",
        num_envs=num_envs,
        batch_size=batch_size or num_envs,
        num_threads=num_threads,
        seed=seed,
        img_height=84,
        img_width=84,
        stack_num=4,
        gray_scale=True,
        frame_skip=4,
        noop_max=30,
        episodic_life=False,
        reward_clip=False,
        repeat_action_probability=0.25,
        use_fire_reset=False,
        max_episode_steps=27_000,
    )
