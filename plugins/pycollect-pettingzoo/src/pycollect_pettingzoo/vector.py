"""Parameter sharing: every agent of every env a slot of one gymnasium ``VectorEnv``, as SuperSuit makes it.

``make_agent_vec(make_env, num_envs)`` returns what SuperSuit's
``concat_vec_envs_v1(pettingzoo_env_to_vec_env_v1(make_env()), num_envs)`` returns, step for step,
with the envs stepped by :func:`pycollect.make_vec` (worker processes, shared memory, supervision):

* ``num_envs * n_agents`` slots, env ``e``'s agent ``i`` in slot ``e * n_agents + i``
  (``possible_agents`` order); the single spaces are one agent's (all agents' must be equal);
* ``reset(seed=s)`` seeds env ``e`` with ``s + e``;
* ``step(actions)`` gives each live agent its slot's action; rewards are float32, terminations
  and truncations uint8 (SuperSuit's dtypes), per agent;
* an env whose returned agents are all done resets in the same step: the observation is the
  reset one, and the ended agents' infos hold ``"terminal_observation"``;
* an env whose worker was restarted (it crashed or hung) reports every agent cut, as
  ``make_vec`` reports the env: truncated, reward 0, ``"worker_restarted"`` and
  ``"terminal_observation"`` (the last observation) in each agent's info;
* actions that are not one per slot (``(num_envs * n_agents, *action_shape)``) raise
  :class:`pycollect.ActionError` before anything is sent;
* ``infos`` is a list of one dict per slot (SuperSuit's, which CleanRL's loops iterate);
* an agent that leaves before its env's episode ends is an error (SuperSuit asserts): wrap the
  env in SuperSuit's ``black_death_v3`` in the factory, or use the ``Collector`` with
  ``use_mask=True``.

Underneath, :class:`StackedAgentsEnv` presents one Parallel env to ``make_vec`` as one gymnasium
env whose observation is a Dict of the agents' stacked observations, rewards and flags (all of
it crosses the process boundary as fixed-size shared-memory arrays, no info dicts), and
:class:`AgentVecEnv` reshapes the ``num_envs`` envs into agent slots.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space

from pycollect import ActionError, ConfigError, EnvOutputError
from pycollect.envs import import_factory

__all__ = ["AgentVecEnv", "StackedAgentsEnv", "make_agent_vec"]

RESTARTED_KEY = "worker_restarted"
"""The info entry (True) of each agent whose episode a worker restart cut, as ``make_vec`` names it."""


class StackedAgentsEnv(gym.Env[dict[str, np.ndarray], np.ndarray]):
    """One PettingZoo Parallel env as one gymnasium env: the agents stacked along the first dimension.

    The observation is ``{"observation": [n, ...], "reward": float32 [n], "terminated": bool [n],
    "truncated": bool [n]}``; the action ``[n, ...]`` (one row per agent, ``possible_agents`` order);
    the gymnasium reward is 0 and ``terminated`` says that every agent the step returned is done
    (SuperSuit's end of an env's episode).

    Args:
        factory: Builds one PettingZoo env (Parallel, or AEC that PettingZoo can convert).
        **env_kwargs: The factory's arguments.

    Raises:
        ConfigError: Agents whose observation or action spaces differ (parameter sharing needs
            one space for all), or not a PettingZoo env.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - gymnasium's class attribute

    def __init__(self, factory: Callable[..., Any] | str, **env_kwargs: Any) -> None:
        from pycollect_pettingzoo.backend import _describe
        from pycollect_pettingzoo.env import to_parallel

        name = _describe(factory)
        built = import_factory(factory, "pettingzoo", "PettingZoo env factory")(**env_kwargs)
        self.env = env = to_parallel(built, name)
        self.agents = list(env.possible_agents)
        first = self.agents[0]
        self.agent_observation_space = env.observation_space(first)
        self.agent_action_space = env.action_space(first)
        for agent in self.agents[1:]:
            for which, mine, theirs in (
                ("observation", self.agent_observation_space, env.observation_space(agent)),
                ("action", self.agent_action_space, env.action_space(agent)),
            ):
                if mine != theirs:
                    env.close()
                    raise ConfigError(
                        f"PettingZoo env {name!r}: agents {first!r} and {agent!r} have different {which} spaces "
                        f"({mine} and {theirs}); agents as vector-env slots share one space (pad them with SuperSuit's "
                        "pad_observations_v0 / pad_action_space_v0 in the factory, or use the Collector's groups)"
                    )
        n = len(self.agents)
        self.observation_space = gym.spaces.Dict(
            [
                ("observation", batch_space(self.agent_observation_space, n)),
                ("reward", gym.spaces.Box(-np.inf, np.inf, (n,), np.float32)),
                ("terminated", gym.spaces.MultiBinary(n)),
                ("truncated", gym.spaces.MultiBinary(n)),
            ]
        )
        self.action_space = batch_space(self.agent_action_space, n)
        self._name = name
        self._zeros = np.zeros(n, np.float32)
        self._false = np.zeros(n, np.int8)

    def _stack(self, observations: Mapping[str, Any]) -> np.ndarray:
        try:
            return np.stack([np.asarray(observations[agent]) for agent in self.agents])
        except KeyError as missing:
            raise EnvOutputError(
                f"agent {missing} of PettingZoo env {self._name!r} left the episode before its end; agents as "
                "vector-env slots need every agent in every step (SuperSuit refuses it too): wrap the env in "
                "supersuit.black_death_v3 in the factory, or use pycollect's Collector with use_mask=True"
            ) from None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Reset the PettingZoo env."""
        observations, _ = self.env.reset(seed=seed, options=options)
        return {
            "observation": self._stack(observations),
            "reward": self._zeros,
            "terminated": self._false,
            "truncated": self._false,
        }, {}

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """Step every live agent with its row of ``action``."""
        agents, env = self.agents, self.env
        if len(env.agents) == len(agents):  # every agent live: each takes its row
            actions = dict(zip(agents, action, strict=True))
        else:
            live = set(env.agents)
            actions = {agent: action[i] for i, agent in enumerate(agents) if agent in live}
        observations, rewards, terminations, truncations, _ = env.step(actions)
        get_reward, get_terminated, get_truncated = rewards.get, terminations.get, truncations.get
        reward = np.array([get_reward(agent, 0) for agent in agents], np.float32)
        terminated = np.array([get_terminated(agent, False) for agent in agents], np.int8)
        truncated = np.array([get_truncated(agent, False) for agent in agents], np.int8)
        ended = all(terminations[a] or truncations[a] for a in terminations)
        observation = {
            "observation": self._stack(observations),
            "reward": reward,
            "terminated": terminated,
            "truncated": truncated,
        }
        return observation, 0.0, ended, False, {}

    def close(self) -> None:
        """Close the PettingZoo env."""
        self.env.close()


class AgentVecEnv(gym.vector.VectorEnv[np.ndarray, np.ndarray, np.ndarray]):
    """The agents of ``num_envs`` envs as the slots of one vector env (see :func:`make_agent_vec`).

    Args:
        vec: A :func:`pycollect.make_vec` of :class:`StackedAgentsEnv` s in ``"same_step"`` autoreset mode.
        n_agents: Agents per env.
        observation_space: One agent's observation space.
        action_space: One agent's action space.
    """

    def __init__(
        self, vec: Any, n_agents: int, observation_space: gym.Space[Any], action_space: gym.Space[Any]
    ) -> None:
        self.vec = vec
        self.n_agents = n_agents
        self.num_envs = vec.num_envs * n_agents
        self.single_observation_space = observation_space
        self.single_action_space = action_space
        self.observation_space = batch_space(observation_space, self.num_envs)
        self.action_space = batch_space(action_space, self.num_envs)
        self.metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
        self._agent_shape = tuple(np.asarray(action_space.sample()).shape)
        self._observation_shape: tuple[int, ...] = tuple(observation_space.shape or ())

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, Any]:
        """Reset every env (env ``e`` with ``seed + e``); one empty info dict per slot."""
        observation, _ = self.vec.reset(seed=seed, options=options)
        flat = np.asarray(observation["observation"]).reshape(self.num_envs, *self._observation_shape)
        return flat.copy(), [{} for _ in range(self.num_envs)]

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, Any]:
        """Step every env; per-agent observations, rewards (float32), terminations and truncations (uint8), infos.

        An env whose worker was restarted (it crashed or hung) reports every agent of its cut
        episode as ``make_vec`` reports the env: truncated, reward 0, ``"worker_restarted"``
        True and the last observation as ``"terminal_observation"``; the observation is the
        new episode's first.

        Raises:
            ActionError: ``actions`` is not one action per agent slot (checked before anything is
                reshaped or sent); what ``make_vec``'s ``step`` raises otherwise.
        """
        n = self.n_agents
        flat = np.asarray(actions)
        expected = (self.num_envs, *self._agent_shape)
        if flat.shape != expected:
            raise ActionError(
                f"actions of shape {flat.shape}: this vector env has {self.num_envs} agent slots ({self.vec.num_envs} "
                f"envs x {n} agents), each taking an action of shape {self._agent_shape} from "
                f"{self.single_action_space}; give an array of shape {expected}"
            )
        observation, _, ended, cut, infos = self.vec.step(flat.reshape(self.vec.num_envs, n, *self._agent_shape))
        observations = np.array(observation["observation"]).reshape(self.num_envs, *self._observation_shape)
        rewards = np.array(observation["reward"], np.float32).reshape(-1)
        terminated = np.array(observation["terminated"], np.uint8).reshape(-1)
        truncated = np.array(observation["truncated"], np.uint8).reshape(-1)
        slot_infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        if ended.any() or cut.any():
            final = infos["final_obs"]
            # SAME_STEP mode: the cut episode's info (with the flag) is its final info
            restarted = infos.get("final_info", {}).get(RESTARTED_KEY, np.zeros(self.vec.num_envs, bool))
            for e in np.flatnonzero(ended | cut):
                last = final[e]
                rows = slice(e * n, (e + 1) * n)
                if restarted[e]:  # the episode was cut where the worker died: no step of it happened
                    rewards[rows], terminated[rows], truncated[rows] = 0.0, 0, 1
                else:
                    rewards[rows] = last["reward"]
                    terminated[rows] = last["terminated"]
                    truncated[rows] = last["truncated"]
                terminal = np.array(last["observation"])
                for i in range(n):
                    slot_infos[e * n + i]["terminal_observation"] = terminal[i]
                    if restarted[e]:
                        slot_infos[e * n + i][RESTARTED_KEY] = True
        return observations, rewards, terminated, truncated, slot_infos

    def close_extras(self, **kwargs: Any) -> None:
        """Close the underlying vector env (its workers)."""
        self.vec.close()


def make_agent_vec(
    env: Callable[..., Any] | str,
    num_envs: int,
    *,
    num_workers: int | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    **make_vec_options: Any,
) -> AgentVecEnv:
    """A gymnasium vector env whose slots are the agents of ``num_envs`` PettingZoo envs (parameter sharing).

    What SuperSuit's ``concat_vec_envs_v1(pettingzoo_env_to_vec_env_v1(env), num_envs)`` returns, step
    for step (see the module's docstring), stepped by :func:`pycollect.make_vec`.

    Args:
        env: A factory of one PettingZoo env (Parallel, or AEC PettingZoo can convert), or
            ``"package.module:factory"`` (``"mpe2.simple_spread_v3:parallel_env"``).
        num_envs: How many PettingZoo envs (the vector env has ``num_envs * n_agents`` slots).
        num_workers: Worker processes (``0``: this process; ``None``: :func:`pycollect.make_vec`'s
            default); it must split ``num_envs`` evenly.
        env_kwargs: The factory's arguments.
        **make_vec_options: Other :func:`pycollect.make_vec` arguments (supervision settings).

    Raises:
        ConfigError: ``num_envs`` that ``num_workers`` does not split, agents whose spaces
            differ, not a PettingZoo env; before any worker starts.
    """
    import pycollect

    if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs < 1:
        raise ConfigError(f"num_envs must be a positive number of PettingZoo envs, got {num_envs!r}")
    if num_workers is not None and num_workers > 0 and num_envs % num_workers:
        raise ConfigError(
            f"num_envs={num_envs} does not split over num_workers={num_workers}: each worker steps the same number of "
            "PettingZoo envs (their agents are num_envs * n_agents slots)"
        )
    for option in ("autoreset_mode", "copy", "batch_size", "info_keys"):
        if option in make_vec_options:
            raise ConfigError(f"make_agent_vec sets {option} itself (SuperSuit's semantics)")
    kwargs = dict(env_kwargs or {})
    probe = StackedAgentsEnv(env, **kwargs)  # refuses what cannot be stacked, in this process
    n_agents = len(probe.agents)
    observation_space, action_space = probe.agent_observation_space, probe.agent_action_space
    probe.close()
    vec = pycollect.make_vec(
        StackedAgentsEnv,
        num_envs,
        num_workers=num_workers,
        autoreset_mode="same_step",
        copy=False,
        env_kwargs={"factory": env, **kwargs},
        info_keys=(),
        **make_vec_options,
    )
    return AgentVecEnv(vec, n_agents, observation_space, action_space)
