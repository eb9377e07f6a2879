"""Agents grouped as TorchRL groups them: one group's tensors stacked along an agent dimension.

:func:`group_map` turns the user's ``group_map`` (``None``, a TorchRL ``MarlGroupMapType``, its
name, ``"one_group_per_type"`` or an explicit ``{group: [agents]}``) into the groups of one env,
and refuses, with a :class:`pycollect.ConfigError` naming the agents, a requested group whose
agents' spaces differ (their values could not be stacked). The default puts every agent in one
group ``"agents"`` when all their spaces agree (TorchRL's ``ALL_IN_ONE_GROUP``), else one group
per agent type (TorchRL's default for PettingZoo: ``"adversary_0"`` in group ``"adversary"``),
else one group per agent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym

from pycollect import ConfigError

__all__ = ["GROUP_MAP_NAMES", "by_type", "group_map"]

GROUP_MAP_NAMES = ("all_in_one_group", "one_group_per_agent", "one_group_per_type")
"""The named group maps: TorchRL's ``MarlGroupMapType`` members (lower case) and grouping by agent type."""

RESERVED_GROUPS = frozenset(
    {"next", "collector", "action", "reward", "done", "terminated", "truncated", "policy_version", "is_init", "state"}
)
"""Root keys of a batch (or of TorchRL's multi-agent layout) a group may not take."""


def by_type(agents: Sequence[str]) -> dict[str, list[str]]:
    """TorchRL's default grouping of PettingZoo agents: ``"name_<int>"`` in group ``"name"``, others alone."""
    groups: dict[str, list[str]] = {}
    for agent in agents:
        head, sep, tail = agent.rpartition("_")
        groups.setdefault(head if sep and head and tail.isdigit() else agent, []).append(agent)
    return groups


def _named(name: str, agents: Sequence[str]) -> dict[str, list[str]]:
    if name == "all_in_one_group":
        return {"agents": list(agents)}
    if name == "one_group_per_agent":
        return {agent: [agent] for agent in agents}
    return by_type(agents)


def _differing(
    members: Sequence[str], spaces: Callable[[str], tuple[gym.Space[Any], gym.Space[Any]]]
) -> tuple[str, str, str] | None:
    """Two agents of ``members`` whose spaces differ and which (observation or action), if any."""
    first = members[0]
    observation, action = spaces(first)
    for agent in members[1:]:
        other_observation, other_action = spaces(agent)
        if other_observation != observation:
            return first, agent, "observation"
        if other_action != action:
            return first, agent, "action"
    return None


def group_map(
    requested: Any, agents: Sequence[str], spaces: Callable[[str], tuple[gym.Space[Any], gym.Space[Any]]], env: str
) -> dict[str, list[str]]:
    """The groups of an env's agents, checked.

    Args:
        requested: ``None`` (the default grouping), a TorchRL ``MarlGroupMapType`` or the name of
            one of :data:`GROUP_MAP_NAMES`, or a mapping ``{group: [agent, ...]}``.
        agents: The env's ``possible_agents``, in order.
        spaces: An agent's (observation space, action space).
        env: The env's name, for messages.

    Raises:
        ConfigError: An unknown name; a mapping that misses an agent, names one twice or names
            one the env lacks; a group name the batch holds itself; agents whose spaces differ
            inside one requested group (the message names both agents and the space).
    """
    if not agents:
        raise ConfigError(f"PettingZoo env {env!r} has no possible_agents")
    if requested is None:
        for candidate in ("all_in_one_group", "one_group_per_type", "one_group_per_agent"):
            groups = _named(candidate, agents)
            if all(_differing(members, spaces) is None for members in groups.values()):
                return _checked(groups, agents, env)
    if type(requested).__name__ == "MarlGroupMapType":  # TorchRL's enum, recognised without importing TorchRL
        requested = str(requested.name).lower()
    if isinstance(requested, str):
        name = requested.lower()
        if name not in GROUP_MAP_NAMES:
            raise ConfigError(f"group_map={requested!r} is not one of {', '.join(GROUP_MAP_NAMES)} (or a mapping)")
        groups = _named(name, agents)
    elif isinstance(requested, Mapping):
        groups = {str(group): list(members) for group, members in requested.items()}
    else:
        raise ConfigError(
            f"group_map must be None, a MarlGroupMapType, one of {', '.join(GROUP_MAP_NAMES)} or a mapping "
            f"{{group: [agents]}}, got {requested!r}"
        )
    groups = _checked(groups, agents, env)
    for group, members in groups.items():
        differing = _differing(members, spaces)
        if differing is not None:
            first, other, which = differing
            raise ConfigError(
                f"group {group!r} of PettingZoo env {env!r}: agents {first!r} and {other!r} have different {which} "
                f"spaces ({spaces(first)[which == 'action']} and {spaces(other)[which == 'action']}), so their values "
                "cannot be stacked in one group; put them in separate groups (group_map='one_group_per_type' or "
                "'one_group_per_agent', or a mapping)"
            )
    return groups


def _checked(groups: dict[str, list[str]], agents: Sequence[str], env: str) -> dict[str, list[str]]:
    seen: dict[str, str] = {}
    for group, members in groups.items():
        if group in RESERVED_GROUPS or not group:
            raise ConfigError(f"group name {group!r} of PettingZoo env {env!r} is a key the batch holds itself")
        if not members:
            raise ConfigError(f"group {group!r} of PettingZoo env {env!r} is empty")
        for agent in members:
            if agent not in agents:
                raise ConfigError(f"group {group!r} names agent {agent!r}, which PettingZoo env {env!r} lacks")
            if agent in seen:
                raise ConfigError(f"agent {agent!r} is in groups {seen[agent]!r} and {group!r}: one group per agent")
            seen[agent] = group
    missing = [agent for agent in agents if agent not in seen]
    if missing:
        raise ConfigError(f"group_map leaves out agents {missing} of PettingZoo env {env!r}: every agent needs a group")
    return groups
