"""One PettingZoo Parallel env as one gymnasium-style env with TorchRL's multi-agent keys.

:class:`MultiAgentEnv` is what pycollect's stepping loop steps (in the trainer, in workers, in
the central engine's step workers): its observation is a nested mapping whose leaves sit at
TorchRL's keys, one array per group stacked along the agent dimension, and its action a mapping
``{group: [n_agents, ...]}``. What TorchRL's ``PettingZooEnv(..., group_map=...)`` puts in a
batch maps onto pycollect's fields as follows (``g`` is a group):

* ``(g, "observation")`` (or ``(g, "observation", name)`` for a Dict observation),
  ``(g, "action_mask")``, ``(g, "mask")`` (with ``use_mask``), and the per-agent flags
  ``(g, "done")``, ``(g, "terminated")``, ``(g, "truncated")``: observation leaves, at the root
  and under ``"next"``, as TorchRL has them (the root ones are the previous step's, or the
  reset's: False flags, every agent alive in the mask).
* ``(g, "info", name)``: each per-agent info entry, as TorchRL adds it: the entries of the
  agents' infos at a reset of the env when it is built (numbers and numeric arrays that every
  agent of the group reports with one shape), float32, observation leaves at the root and under
  ``"next"`` (zero for an agent that reports none at a step); an ``"action_mask"`` entry is the
  group's ``(g, "action_mask")`` instead.
* ``(g, "action")``: one action leaf per group (:attr:`pycollect.envs.EnvSpecs.actions`).
* ``("next", g, "reward")``: a next-only field the env reports in its step info
  (:attr:`pycollect.envs.EnvSpecs.next_fields`).
* The root ``done``, ``terminated`` and ``truncated``: the step's flags, aggregated over every
  agent as TorchRL aggregates them (``any`` by default, ``all`` with ``done_on_any=False``).
  pycollect keeps ``done == terminated | truncated``: an end where all agents are done but
  neither all terminated nor all truncated (TorchRL's ``done`` without either) counts as
  truncated.
* The root ``("next", "reward")`` (pycollect's own, TorchRL's layout has none): the step's
  team reward, the sum of the live agents' rewards; episode returns in ``collector.stats()``
  add it up.

Agents that left the episode (not in the step's observations) get TorchRL's padding with
``use_mask=True``: zero observation and reward, ``terminated`` and ``truncated`` as the step's
dicts say or True, mask False; without ``use_mask`` they are an error, as in TorchRL.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from pycollect import ConfigError, EnvOutputError, UnsupportedSpaceError
from pycollect.envs.specs import EnvSpecs, FieldSpec, spaces_from_specs
from pycollect_pettingzoo.groups import group_map

__all__ = ["MultiAgentEnv", "Options", "reward_name", "to_parallel"]

Key = tuple[str, ...]
_FLAGS = ("done", "terminated", "truncated")


@dataclass(frozen=True)
class Options:
    """How a PettingZoo env is laid out (TorchRL's ``PettingZooWrapper`` arguments of the same names).

    Attributes:
        group_map: ``None`` (every agent in group ``"agents"`` when their spaces agree, else one
            group per agent type, else per agent), a TorchRL ``MarlGroupMapType``, one of
            ``"all_in_one_group"``, ``"one_group_per_agent"``, ``"one_group_per_type"``, or a
            mapping ``{group: [agents]}``.
        use_mask: Add ``(group, "mask")`` (True for agents still in the episode) and pad agents
            that left it; without it an agent leaving before the episode ends is an error.
        done_on_any: The episode ends when any agent is done (``True``, ``None``: TorchRL's
            default for Parallel envs) or when all are (``False``).
        return_state: Add the env's global ``state()`` at the root key ``"state"``.
    """

    group_map: Any = None
    use_mask: bool = False
    done_on_any: bool | None = None
    return_state: bool = False


def reward_name(group: str) -> str:
    """The name under which a group's per-agent rewards travel in a step's info."""
    return f"pettingzoo/{group}/reward"


def to_parallel(env: Any, name: str) -> Any:
    """``env`` as a PettingZoo ``ParallelEnv``: itself, or an AEC env through PettingZoo's ``aec_to_parallel``.

    Raises:
        ConfigError: ``env`` is neither, or an AEC env PettingZoo cannot convert (its metadata
            lacks ``is_parallelizable``: a turn-based game); the message names the env.
    """
    from pettingzoo.utils.env import AECEnv, ParallelEnv

    if isinstance(env, ParallelEnv):
        return env
    if isinstance(env, AECEnv):
        metadata = getattr(env, "metadata", None) or {}
        if not metadata.get("is_parallelizable", False):
            raise ConfigError(
                f"PettingZoo env {name!r} ({type(env).__name__}, {metadata.get('name', 'unnamed')}) is an AEC env "
                "whose metadata does not say is_parallelizable, so PettingZoo's aec_to_parallel cannot convert it (its "
                "agents take turns: each step's result depends on the actions before it in the cycle); pycollect steps "
                "Parallel envs, where every live agent acts at each step"
            )
        from pettingzoo.utils.conversions import aec_to_parallel

        return aec_to_parallel(env)
    raise ConfigError(
        f"{name!r} built a {type(env).__name__}, not a PettingZoo ParallelEnv or AECEnv; the pettingzoo backend steps "
        "PettingZoo envs (a gymnasium env needs no plugin: pass it to pycollect directly)"
    )


@dataclass
class _Group:
    """One group: its agents and where its values sit."""

    name: str
    agents: list[str]
    observation: list[tuple[Key, FieldSpec]]  # (path in one agent's observation, field), TorchRL's order
    action: FieldSpec
    action_mask: FieldSpec | None = None
    mask: FieldSpec | None = None
    flags: list[FieldSpec] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)
    info: list[tuple[str, FieldSpec]] = field(default_factory=list)  # (name in an agent's info, field)


def _stack_bounds(spaces: list[gym.spaces.Box]) -> tuple[np.ndarray, np.ndarray]:
    low = np.stack([np.broadcast_to(np.asarray(s.low, np.float64), s.shape) for s in spaces])
    high = np.stack([np.broadcast_to(np.asarray(s.high, np.float64), s.shape) for s in spaces])
    return low, high


def _observation_leaves(space: gym.Space[Any], path: Key, agent: str) -> list[tuple[Key, gym.Space[Any]]]:
    if isinstance(space, gym.spaces.Dict):
        out = []
        for key, sub in space.spaces.items():
            out += _observation_leaves(sub, (*path, str(key)), agent)
        return out
    if isinstance(space, gym.spaces.Box | gym.spaces.MultiBinary):
        return [(path, space)]
    raise UnsupportedSpaceError(
        f"agent {agent!r}'s observation space {space} at {'/'.join(path) or 'its root'}: pycollect-pettingzoo lays out "
        "Box and MultiBinary observations (and Dicts of them)"
    )


def _flag(key: Key, n: int, shape: tuple[int, ...]) -> FieldSpec:
    full = (n, *shape)
    return FieldSpec(key, full, np.dtype(np.bool_), np.zeros(full), np.ones(full), True, f"bool{list(full)}", key)


def _stacked_action(space: gym.Space[Any], n: int, agent: str) -> gym.Space[Any]:
    if isinstance(space, gym.spaces.Discrete):
        if int(space.start) != 0:
            raise UnsupportedSpaceError(f"agent {agent!r}'s Discrete action space starts at {space.start}, not 0")
        return gym.spaces.MultiDiscrete(np.full(n, int(space.n), np.int64))
    if isinstance(space, gym.spaces.MultiDiscrete):
        return gym.spaces.MultiDiscrete(np.stack([space.nvec] * n))
    if isinstance(space, gym.spaces.MultiBinary):
        return gym.spaces.MultiBinary([n, *space.shape])
    if isinstance(space, gym.spaces.Box):
        low, high = _stack_bounds([space] * n)
        dtype: Any = space.dtype  # a Box's dtype is always set; gymnasium types it loosely
        return gym.spaces.Box(low.astype(dtype), high.astype(dtype), (n, *space.shape), dtype)
    raise UnsupportedSpaceError(
        f"agent {agent!r}'s action space {space}: pycollect-pettingzoo takes Discrete, MultiDiscrete, MultiBinary "
        "and Box actions"
    )


def _info_fields(group: str, agent_infos: list[Mapping[str, Any]]) -> list[tuple[str, FieldSpec]]:
    """The group's info entries: those every agent reports, as numbers or numeric arrays of one shape.

    TorchRL's ``PettingZooWrapper`` stores them as float32 (its ``Unbounded`` spec's dtype);
    others (strings, dicts, entries some agents lack or report with another shape) it cannot
    stack into one group's tensor, so they are left out (``"action_mask"`` is the group's action
    mask).
    """
    out: list[tuple[str, FieldSpec]] = []
    n = len(agent_infos)
    for name in agent_infos[0] if agent_infos else ():
        if name == "action_mask" or not isinstance(name, str) or not all(name in info for info in agent_infos):
            continue
        values = [np.asarray(info[name]) for info in agent_infos]
        if any(v.dtype.kind not in "biuf" for v in values) or len({v.shape for v in values}) > 1:
            continue
        shape = (n, *values[0].shape)
        key: Key = (group, "info", name)
        low, high = np.full(shape, -np.inf), np.full(shape, np.inf)
        out.append((name, FieldSpec(key, shape, np.dtype(np.float32), low, high, False, "info entry", key)))
    return out


class MultiAgentEnv:
    """A PettingZoo Parallel env behind gymnasium's ``reset``/``step``/``close``, TorchRL's keys in its fields.

    Args:
        env: A PettingZoo ``ParallelEnv`` (an AEC env: convert it with :func:`to_parallel` first).
        options: How it is laid out.
        name: The env's name, for messages.

    Attributes:
        groups: ``{group: [agents]}``.
        observation_space: A nested ``Dict`` whose leaves sit at the fields' keys.
        action_space: ``Dict({group: the stacked action space})``.

    Raises:
        ConfigError: A bad ``group_map``, or agents whose spaces differ inside a requested group.
        UnsupportedSpaceError: An agent's space pycollect cannot lay out.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - gymnasium's class attribute
    render_mode: None = None

    def __init__(self, env: Any, options: Options | None = None, name: str = "pettingzoo env") -> None:
        self.env = env
        self.options = options = options or Options()
        self.name = name
        agents = list(env.possible_agents)

        def spaces(agent: str) -> tuple[gym.Space[Any], gym.Space[Any]]:
            return env.observation_space(agent), env.action_space(agent)

        self.groups = group_map(options.group_map, agents, spaces, name)
        self._any = True if options.done_on_any is None else bool(options.done_on_any)
        self._action_space: dict[str, gym.Space[Any]] = {}
        # TorchRL's PettingZooWrapper learns the info entries from a reset's infos: so does this.
        _, infos = env.reset()
        self._groups = [self._layout(group, members, infos or {}) for group, members in self.groups.items()]
        fields: list[FieldSpec] = []
        for g in self._groups:
            fields += [spec for _, spec in g.observation]
            fields += [spec for spec in (g.action_mask, g.mask) if spec is not None]
            fields += g.flags
            fields += [spec for _, spec in g.info]
        self._state: FieldSpec | None = None
        if options.return_state:
            self._state = self._state_field()
            fields.append(self._state)
        self.fields = tuple(fields)
        self.observation_space, _ = spaces_from_specs(fields)  # every field sits at its path, in this order
        self.action_space = gym.spaces.Dict([(g.name, self._action_space[g.name]) for g in self._groups])
        self.rewards = tuple(
            FieldSpec(
                ("next", g.name, "reward"),
                (len(g.agents), 1),
                np.dtype(np.float32),
                np.full((len(g.agents), 1), -np.inf),
                np.full((len(g.agents), 1), np.inf),
                False,
                "per-agent reward",
                (reward_name(g.name),),
            )
            for g in self._groups
        )

    # -- layout -----------------------------------------------------------------------------

    def _layout(self, group: str, agents: list[str], infos: Mapping[str, Any]) -> _Group:
        env, n = self.env, len(agents)
        observation_space, action_space = env.observation_space(agents[0]), env.action_space(agents[0])
        leaves = _observation_leaves(observation_space, (), agents[0])
        observation: list[tuple[Key, FieldSpec]] = []
        action_mask = None
        stacked = _stacked_action(action_space, n, agents[0])
        self._action_space[group] = stacked
        from pycollect.envs.specs import _leaf

        action = _leaf((group, "action"), stacked)
        action = FieldSpec(
            action.key, action.shape, action.dtype, action.low, action.high, action.discrete, action.space, (group,)
        )
        for path, space in leaves:
            if path == ("action_mask",) and isinstance(space, gym.spaces.Box | gym.spaces.MultiBinary):
                shape = (n, *space.shape)
                mask_key: Key = (group, "action_mask")
                action_mask = FieldSpec(
                    mask_key, shape, np.dtype(np.bool_), np.zeros(shape), np.ones(shape), True, "action mask", mask_key
                )
                continue
            key: Key = (group, "observation", *path)
            if isinstance(space, gym.spaces.MultiBinary):
                shape = (n, *space.shape)
                low, high, discrete = np.zeros(shape), np.ones(shape), True
                dtype: np.dtype[Any] = np.dtype(np.int8)
            else:
                assert isinstance(space, gym.spaces.Box)
                shape = (n, *space.shape)
                low, high = _stack_bounds([space] * n)
                dtype = np.dtype(space.dtype)
                discrete = bool(np.issubdtype(dtype, np.integer) or dtype == np.bool_)
            observation.append((path, FieldSpec(key, shape, dtype, low, high, discrete, f"{space} x {n}", key)))
        agent_infos = [infos.get(agent) or {} for agent in agents]
        if action_mask is None and any("action_mask" in info for info in agent_infos):
            example = next(np.asarray(info["action_mask"]) for info in agent_infos if "action_mask" in info)
            shape = (n, *example.shape)
            mask_key = (group, "action_mask")
            action_mask = FieldSpec(
                mask_key, shape, np.dtype(np.bool_), np.zeros(shape), np.ones(shape), True, "action mask", mask_key
            )
        mask = _flag((group, "mask"), n, ()) if self.options.use_mask else None
        flags = [_flag((group, flag), n, (1,)) for flag in _FLAGS]
        index = {a: i for i, a in enumerate(agents)}
        info = _info_fields(group, agent_infos)
        return _Group(group, agents, observation, action, action_mask, mask, flags, index, info)

    def _state_field(self) -> FieldSpec:
        space = getattr(self.env, "state_space", None)
        if isinstance(space, gym.spaces.Box):
            low, high = _stack_bounds([space])
            dtype = np.dtype(space.dtype)
            shape = tuple(space.shape)
            return FieldSpec(("state",), shape, dtype, low[0], high[0], False, str(space), ("state",))
        example = np.asarray(self.env.state())  # after the reset that found the info entries
        shape, dtype = tuple(example.shape), example.dtype
        return FieldSpec(
            ("state",), shape, dtype, np.full(shape, -np.inf), np.full(shape, np.inf), False, "state()", ("state",)
        )

    def specs(self) -> EnvSpecs:
        """The fields pycollect lays its batches out from (see the module's docstring)."""
        actions = tuple(g.action for g in self._groups)
        return EnvSpecs(
            self.fields,
            actions[0],
            self.observation_space,
            self.action_space,
            actions=actions,
            next_fields=self.rewards,
            done_groups=tuple((g.name,) for g in self._groups),
            group_sizes=tuple(((g.name,), len(g.agents)) for g in self._groups),
        )

    # -- stepping ---------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset the PettingZoo env (with ``seed``, if given).

        Returns:
            The observation (every agent alive in the mask, flags False) and an empty info dict.
        """
        observations, infos = self.env.reset(seed=seed, options=options)
        alive = set(self.env.agents)
        out: dict[str, Any] = {}
        for g in self._groups:
            node = self._observe(g, observations, alive, infos or {})
            for spec in g.flags:
                node[spec.key[-1]] = np.zeros(spec.shape, np.bool_)
            out[g.name] = node
        if self._state is not None:
            out["state"] = np.asarray(self.env.state(), self._state.dtype)
        return out, {}

    def step(self, action: Mapping[str, Any]) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Step every live agent with its row of its group's action.

        Returns:
            ``(observation, team reward, terminated, truncated, info)``, the root flags aggregated
            over every agent, the per-agent rewards in ``info`` (see :func:`reward_name`).

        Raises:
            EnvOutputError: An agent left the episode before its end without ``use_mask``.
        """
        live = self.env.agents
        actions: dict[str, Any] = {}
        for g in self._groups:
            rows = action[g.name]
            for agent in g.agents:
                if agent in live:
                    actions[agent] = rows[g.index[agent]]
        observations, rewards, terminations, truncations, infos = self.env.step(actions)
        alive = set(self.env.agents)
        out: dict[str, Any] = {}
        info: dict[str, Any] = {}
        team = 0.0
        any_mode = self._any
        done_all = term_all = trunc_all = not any_mode
        for g in self._groups:
            n = len(g.agents)
            node = self._observe(g, observations, alive, infos or {})
            reward = np.zeros((n, 1), np.float32)
            terminated = np.zeros((n, 1), np.bool_)
            truncated = np.zeros((n, 1), np.bool_)
            for i, agent in enumerate(g.agents):
                if agent in observations:
                    value = rewards.get(agent, 0.0)
                    reward[i, 0] = value
                    team += float(value)
                    terminated[i, 0] = bool(terminations.get(agent, False))
                    truncated[i, 0] = bool(truncations.get(agent, False))
                elif self.options.use_mask:
                    terminated[i, 0] = bool(terminations.get(agent, True))
                    truncated[i, 0] = bool(truncations.get(agent, True))
                else:
                    raise EnvOutputError(
                        f"agent {agent!r} of PettingZoo env {self.name!r} left the episode before its end (it is not "
                        "in the step's observations); pass use_mask=True (PettingZoo(make_env, use_mask=True)) to pad "
                        "agents that left and mark them in (group, 'mask'), as TorchRL's PettingZooEnv needs too"
                    )
            done = terminated | truncated
            node["done"], node["terminated"], node["truncated"] = done, terminated, truncated
            out[g.name] = node
            info[reward_name(g.name)] = reward
            if any_mode:
                done_all |= bool(done.any())
                term_all |= bool(terminated.any())
                trunc_all |= bool(truncated.any())
            else:
                done_all &= bool(done.all())
                term_all &= bool(terminated.all())
                trunc_all &= bool(truncated.all())
        if self._state is not None:
            out["state"] = np.asarray(self.env.state(), self._state.dtype)
        # pycollect keeps done == terminated | truncated: a done without either counts as truncated
        return out, team, term_all, trunc_all or (done_all and not term_all), info

    def _observe(
        self, g: _Group, observations: Mapping[str, Any], alive: set[str], infos: Mapping[str, Any]
    ) -> dict[str, Any]:
        """A group's observation leaves, action mask, mask and info entries (zeros for agents without an observation).

        Raises:
            EnvOutputError: An info entry that does not fit its field (another shape, not a number).
        """
        node: dict[str, Any] = {}
        agents = g.agents
        present = [agent in observations for agent in agents]
        for path, spec in g.observation:
            if all(present) and not path:
                value = np.stack([np.asarray(observations[agent], spec.dtype) for agent in agents])
            else:
                value = np.zeros(spec.shape, spec.dtype)
                for i, agent in enumerate(agents):
                    if present[i]:
                        raw = observations[agent]
                        for part in path:
                            raw = raw[part]
                        value[i] = raw
            target = node.setdefault("observation", {}) if path else node
            if path:
                for part in path[:-1]:
                    target = target.setdefault(part, {})
                target[path[-1]] = value
            else:
                node["observation"] = value
        if g.action_mask is not None:
            # TorchRL's order: the observation's mask, else the info's, for agents still acting; else all True
            action_mask = np.ones(g.action_mask.shape, np.bool_)
            for i, agent in enumerate(agents):
                if present[i] and agent in alive:
                    raw, info = observations[agent], infos.get(agent) or {}
                    if isinstance(raw, Mapping) and "action_mask" in raw:
                        action_mask[i] = np.asarray(raw["action_mask"], np.bool_)
                    elif "action_mask" in info:
                        action_mask[i] = np.asarray(info["action_mask"], np.bool_)
            node["action_mask"] = action_mask
        if g.mask is not None:
            node["mask"] = np.fromiter((agent in alive for agent in agents), np.bool_, len(agents))
        if g.info:
            entries: dict[str, np.ndarray] = {}
            for name, spec in g.info:
                value = np.zeros(spec.shape, np.float32)
                for i, agent in enumerate(agents):
                    info = infos.get(agent) if present[i] else None
                    if info and name in info:
                        value[i] = self._info_value(agent, name, info[name], spec.shape[1:])
                entries[name] = value
            node["info"] = entries
        return node

    def _info_value(self, agent: str, name: str, raw: Any, shape: tuple[int, ...]) -> np.ndarray:
        try:
            value = np.asarray(raw, np.float32)
        except (TypeError, ValueError):
            value = None
        if value is None or value.shape != shape:
            raise EnvOutputError(
                f"agent {agent!r} of PettingZoo env {self.name!r} reported info entry {name!r} as {raw!r}; the "
                f"batch holds it as float32 of shape {shape}, as the agents reported it at the first reset"
            )
        return value

    # -- snapshots --------------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        """A snapshot of the PettingZoo env (pycollect's snapshot protocol, :mod:`pycollect_pettingzoo.state`).

        Raises:
            EnvStateError: The PettingZoo env cannot be snapshot (see :meth:`snapshot_refusal`).
        """
        from pycollect_pettingzoo import state

        return state.get_state(self.env)

    def set_state(self, snapshot: dict[str, Any]) -> None:
        """Continue from a :meth:`get_state` snapshot of a PettingZoo env built the same way.

        Raises:
            EnvStateError: Not such a snapshot, or one of other classes or agents (both named).
        """
        from pycollect_pettingzoo import state

        state.set_state(self.env, snapshot)

    def snapshot_refusal(self) -> str | None:
        """Why the PettingZoo env cannot be snapshot (naming the layer that cannot), or ``None``."""
        from pycollect_pettingzoo import state

        return state.snapshot_refusal(self.env)

    def close(self) -> None:
        """Close the PettingZoo env."""
        self.env.close()

    def __repr__(self) -> str:
        return f"MultiAgentEnv({self.name!r}, groups={self.groups})"
