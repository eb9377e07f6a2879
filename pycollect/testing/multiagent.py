"""Small PettingZoo Parallel envs with known behaviour, for tests of multi-agent backends.

They live in the installed package, not in a test folder, so that spawned worker processes can
import them (``env=DyingAgentsEnv`` pickles the class by reference). Importing this module
imports PettingZoo (which pycollect itself does not depend on): ``pycollect.testing`` does not
import it.

* :class:`DyingAgentsEnv`: agents that die (terminate) at seeded steps, the survivors truncated
  at ``max_steps``, so episodes end at varied lengths; homogeneous (``walker_0``, ...) or
  heterogeneous (``scout_0``, ``scout_1`` with Discrete actions, ``tank_0`` with Box actions and
  a longer observation); with ``infos=True`` each agent reports per-agent info entries.
* :class:`CrashingParallelEnv`: raises at a given step (a crashing simulator), to check that a
  worker's restart cuts every agent's trajectory.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo.utils.env import ParallelEnv

__all__ = ["CrashingParallelEnv", "DyingAgentsEnv", "make_dying_agents"]


class DyingAgentsEnv(ParallelEnv[str, np.ndarray, Any]):  # type: ignore[misc]  # PettingZoo is untyped here
    """A Parallel env whose agents leave the episode at different, seeded steps.

    At each reset every agent draws a lifetime in ``[min_life, max_steps + 4)`` from the reset
    seed's stream; an agent whose lifetime is below ``max_steps`` terminates at that step (it is
    in the step's dicts one last time, then leaves ``agents``), the others are truncated at
    ``max_steps``. With every agent gone the episode is over.

    Observations are deterministic given the seed and the actions: ``[t / max_steps, index,
    last action's value, a seeded offset]`` (and one more ``[lifetime / max_steps]`` for tanks).
    Rewards: a Discrete agent earns 1 when its action equals ``t % n_actions``; a tank earns
    ``-sum(action**2)``. With ``infos``, each agent's reset and step infos hold ``"left"`` (an
    int: steps to its lifetime), ``"offset"`` (float32 ``[2]``: its seeded offset, the step),
    ``"lucky"`` (a bool: its action scored), and ``"fuel"`` (a float64) for tanks, an
    ``"action_mask"`` (int8 ``[3]``, rolling with the step, not enforced) for Discrete agents.

    Args:
        n_agents: Homogeneous agents (``walker_i``); ignored when ``heterogeneous``.
        max_steps: The step at which survivors are truncated.
        min_life: The shortest lifetime.
        heterogeneous: Two ``scout`` agents (Box(4) observations, Discrete(3) actions) and a
            ``tank`` (Box(5) observations, Box(-1, 1, (2,)) actions).
        infos: Report per-agent info entries (above); otherwise the infos are empty dicts.
    """

    metadata: dict[str, Any] = {"name": "dying_agents_v0", "render_modes": []}  # noqa: RUF012 - PettingZoo's

    def __init__(
        self,
        n_agents: int = 3,
        max_steps: int = 12,
        min_life: int = 2,
        heterogeneous: bool = False,
        infos: bool = False,
    ) -> None:
        self.max_steps, self.min_life, self.infos = max_steps, min_life, infos
        if heterogeneous:
            self.possible_agents = ["scout_0", "scout_1", "tank_0"]
        else:
            self.possible_agents = [f"walker_{i}" for i in range(n_agents)]
        self.observation_spaces = {
            agent: gym.spaces.Box(-np.inf, np.inf, (5 if agent.startswith("tank") else 4,), np.float32)
            for agent in self.possible_agents
        }
        self.action_spaces: dict[str, gym.Space[Any]] = {
            agent: gym.spaces.Box(-1.0, 1.0, (2,), np.float32) if agent.startswith("tank") else gym.spaces.Discrete(3)
            for agent in self.possible_agents
        }
        self.agents: list[str] = []
        self._rng = np.random.default_rng()
        self._t = 0
        self._lifetime: dict[str, int] = {}
        self._offset: dict[str, float] = {}

    def observation_space(self, agent: str) -> gym.Space[Any]:
        """The agent's observation space."""
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> gym.Space[Any]:
        """The agent's action space."""
        return self.action_spaces[agent]

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict[str, Any]]]:
        """Start an episode: every agent alive, lifetimes drawn."""
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self._t = 0
        self._lifetime = {a: int(self._rng.integers(self.min_life, self.max_steps + 4)) for a in self.agents}
        self._offset = {a: float(self._rng.uniform(-1, 1)) for a in self.agents}
        return {a: self._observe(a, 0.0) for a in self.agents}, {a: self._info(a, False) for a in self.agents}

    def step(
        self, actions: dict[str, Any]
    ) -> tuple[dict[str, np.ndarray], dict[str, float], dict[str, bool], dict[str, bool], dict[str, dict[str, Any]]]:
        """Step every live agent (actions of agents that left are ignored)."""
        self._t += 1
        observations: dict[str, np.ndarray] = {}
        rewards: dict[str, float] = {}
        terminations: dict[str, bool] = {}
        truncations: dict[str, bool] = {}
        infos: dict[str, dict[str, Any]] = {}
        for agent in self.agents:
            action = actions[agent]
            if agent.startswith("tank"):
                value = float(np.asarray(action, np.float32).sum())
                rewards[agent] = -float(np.square(np.asarray(action, np.float64)).sum())
            else:
                value = float(int(action))
                rewards[agent] = 1.0 if int(action) == self._t % 3 else 0.0
            observations[agent] = self._observe(agent, value)
            terminations[agent] = self._t == self._lifetime[agent] and self._t < self.max_steps
            truncations[agent] = self._t >= self.max_steps and not terminations[agent]
            infos[agent] = self._info(agent, rewards[agent] > 0)
        self.agents = [a for a in self.agents if not (terminations[a] or truncations[a])]
        return observations, rewards, terminations, truncations, infos

    def _info(self, agent: str, lucky: bool) -> dict[str, Any]:
        if not self.infos:
            return {}
        info = {
            "left": self._lifetime[agent] - self._t,
            "offset": np.asarray([self._offset[agent], self._t], np.float32),
            "lucky": lucky,
        }
        if agent.startswith("tank"):
            info["fuel"] = np.float64(1.0 - self._t / self.max_steps)
        else:  # a Discrete agent: which of its 3 actions it may take (not enforced)
            info["action_mask"] = np.roll(np.asarray([1, 1, 0], np.int8), self._t)
        return info

    def _observe(self, agent: str, value: float) -> np.ndarray:
        index = float(self.possible_agents.index(agent))
        base = [self._t / self.max_steps, index, value, self._offset[agent]]
        if agent.startswith("tank"):
            base.append(self._lifetime[agent] / self.max_steps)
        return np.asarray(base, np.float32)

    def state(self) -> np.ndarray:
        """Every agent's lifetime and offset, and the step."""
        values = [self._t / self.max_steps]
        for agent in self.possible_agents:
            values += [self._lifetime.get(agent, 0) / self.max_steps, self._offset.get(agent, 0.0)]
        return np.asarray(values, np.float32)

    def close(self) -> None:
        """Nothing to release."""


def make_dying_agents(**kwargs: Any) -> DyingAgentsEnv:
    """A :class:`DyingAgentsEnv`: ``env="pettingzoo:pycollect.testing.multiagent:make_dying_agents"``."""
    return DyingAgentsEnv(**kwargs)


class CrashingParallelEnv(DyingAgentsEnv):
    """A :class:`DyingAgentsEnv` whose process dies at a given step of its first episode.

    Args:
        crash_at: The step of the first episode at which it happens (later episodes never crash,
            so a restarted worker goes on).
        how: ``"raise"`` (a ``RuntimeError``) or ``"kill"`` (SIGKILL to its own process).
        marker: A path; when given, the crash happens only while that file exists, and the env
            deletes it as it crashes (so the restarted worker's env does not crash again).
        **kwargs: :class:`DyingAgentsEnv`'s arguments.
    """

    def __init__(self, crash_at: int = 5, how: str = "kill", marker: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.crash_at, self.how, self.marker = crash_at, how, marker
        self._episodes = 0

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict[str, Any]]]:
        """Start an episode, counting them."""
        self._episodes += 1
        return super().reset(seed, options)

    def step(
        self, actions: dict[str, Any]
    ) -> tuple[dict[str, np.ndarray], dict[str, float], dict[str, bool], dict[str, bool], dict[str, dict[str, Any]]]:
        """Step, or crash at ``crash_at`` of the first episode."""
        armed = self.marker is None or os.path.exists(self.marker)
        if self._episodes == 1 and self._t + 1 == self.crash_at and armed:
            if self.marker is not None:
                os.unlink(self.marker)
            if self.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"CrashingParallelEnv: crash at step {self.crash_at}")
        return super().step(actions)
