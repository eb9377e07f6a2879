"""Snapshots of PettingZoo envs, for :class:`~pycollect_pettingzoo.env.MultiAgentEnv`.

A PettingZoo env is saved layer by layer from the Parallel env in, each layer saving what is its
own:

* a layer whose class implements pycollect's protocol (``get_state()`` / ``set_state(state)``,
  :class:`pycollect.envs.state.SnapshotEnv`) saves itself and everything inside it: how to make
  any PettingZoo env of your own snapshot-able;
* PettingZoo's ``aec_to_parallel`` wrapper (its live agents), ``OrderEnforcingWrapper`` (its
  flags), ``AssertOutOfBoundsWrapper`` and ``ClipOutOfBoundsWrapper`` (nothing);
* MPE's envs (``mpe2``, the ``SimpleEnv`` family): the world (every entity's position,
  velocity, communication and action), the scenario's attributes, the AEC bookkeeping (agents,
  rewards, flags, infos, the agent selector, the step counter, pending actions) and the random
  stream.

Anything else is refused, naming the class. MPE agents with action or communication noise
(``u_noise``, ``c_noise``) are refused too: MPE draws that noise from numpy's global random
stream, which is the process's, not the env's.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from pycollect import EnvStateError
from pycollect.envs.state import rng_state, set_rng_state

__all__ = ["get_state", "set_state", "snapshot_refusal"]

_PROTOCOL_HINT = (
    "implement get_state() and set_state(state) on it (pycollect's snapshot protocol, "
    "pycollect.envs.state.SnapshotEnv) to make it snapshot-able"
)


@dataclass(frozen=True)
class _Wrapper:
    """A PettingZoo wrapper: the attributes it changes, those it does not, and where the env inside is."""

    inner: str
    state: tuple[str, ...] = ()
    config: tuple[str, ...] = ()


_WRAPPERS = {
    "pettingzoo.utils.conversions.aec_to_parallel_wrapper": _Wrapper(
        "aec_env",
        state=("agents",),
        config=(
            "aec_env",
            "possible_agents",
            "metadata",
            "render_mode",
            "state_space",
            "observation_spaces",
            "action_spaces",
        ),
    ),
    "pettingzoo.utils.wrappers.order_enforcing.OrderEnforcingWrapper": _Wrapper(
        "env", state=("_has_reset", "_has_updated"), config=("env",)
    ),
    "pettingzoo.utils.wrappers.assert_out_of_bounds.AssertOutOfBoundsWrapper": _Wrapper("env", config=("env",)),
    "pettingzoo.utils.wrappers.clip_out_of_bounds.ClipOutOfBoundsWrapper": _Wrapper("env", config=("env",)),
}

_MPE = "mpe2._mpe_utils.simple_env.SimpleEnv"
_MPE_STATE = (
    "agents",
    "rewards",
    "_cumulative_rewards",
    "terminations",
    "truncations",
    "infos",
    "agent_selection",
    "_agent_selector",
    "steps",
    "current_actions",
    "original_cam_range",
    "_skip_agent_selection",  # PettingZoo's AECEnv._was_dead_step keeps it
)
_MPE_CONFIG = frozenset(
    {
        "_ezpickle_args",
        "_ezpickle_kwargs",
        "render_mode",
        "viewer",
        "width",
        "height",
        "screen",
        "max_size",
        "game_font",
        "renderOn",
        "clock",
        "max_cycles",
        "continuous_actions",
        "local_ratio",
        "dynamic_rescaling",
        "benchmark_data",
        "possible_agents",
        "_index_map",
        "action_spaces",
        "observation_spaces",
        "state_space",
        "np_random",
        "scenario",
        "world",
    }
)


def _qualified(klass: type) -> str:
    return f"{klass.__module__}.{klass.__qualname__}"


def _implements_protocol(obj: Any) -> bool:
    # On the class: PettingZoo's wrappers forward unknown attributes to the env inside.
    return callable(getattr(type(obj), "get_state", None)) and callable(getattr(type(obj), "set_state", None))


def _is_mpe(obj: Any) -> bool:
    return any(_qualified(klass) == _MPE for klass in type(obj).__mro__)


def _layers(env: Any) -> list[tuple[Any, str]] | str:
    """Each layer from the Parallel env in, with its kind (``protocol``, ``wrapper``, ``mpe``), or why not."""
    layers: list[tuple[Any, str]] = []
    obj = env
    while True:
        name = type(obj).__qualname__
        if _implements_protocol(obj):
            return [*layers, (obj, "protocol")]
        wrapper = _WRAPPERS.get(_qualified(type(obj)))
        if wrapper is not None:
            unknown = sorted(set(vars(obj)) - set(wrapper.state) - set(wrapper.config))
            if unknown:
                return (
                    f"PettingZoo wrapper {name} keeps attributes pycollect does not know how to save "
                    f"({', '.join(unknown)})"
                )
            layers.append((obj, "wrapper"))
            obj = getattr(obj, wrapper.inner)
            continue
        if _is_mpe(obj):
            why = _mpe_refusal(obj)
            return why if why is not None else [*layers, (obj, "mpe")]
        return (
            f"PettingZoo env {name} ({type(obj).__module__}) is not one pycollect-pettingzoo knows how to save "
            f"(MPE's envs, PettingZoo's own wrappers); {_PROTOCOL_HINT}"
        )


def _mpe_refusal(env: Any) -> str | None:
    name = type(env).__qualname__
    unknown = sorted(set(vars(env)) - _MPE_CONFIG - set(_MPE_STATE))
    if unknown:
        return f"MPE env {name} keeps attributes pycollect does not know how to save ({', '.join(unknown)})"
    for entity in env.world.entities:
        for noise in ("u_noise", "c_noise"):
            if getattr(entity, noise, None):
                return (
                    f"MPE agent {entity.name!r} of {name} has {noise}={getattr(entity, noise)!r}: MPE draws that "
                    "noise from numpy's global random stream, which is not the env's to save"
                )
    return None


def snapshot_refusal(env: Any) -> str | None:
    """Why the PettingZoo Parallel env ``env`` cannot be snapshot (naming the layer), or ``None``."""
    layers = _layers(env)
    return layers if isinstance(layers, str) else None


def _layers_or_raise(env: Any) -> list[tuple[Any, str]]:
    layers = _layers(env)
    if isinstance(layers, str):
        raise EnvStateError(layers)
    return layers


def get_state(env: Any) -> dict[str, Any]:
    """A snapshot of the PettingZoo Parallel env ``env``: ``{"layers": [(class, state), ...]}``.

    Raises:
        EnvStateError: See :func:`snapshot_refusal`.
    """
    parts = []
    for obj, kind in _layers_or_raise(env):
        if kind == "protocol":
            part = obj.get_state()
        elif kind == "wrapper":
            own = vars(obj)
            part = copy.deepcopy({name: own[name] for name in _WRAPPERS[_qualified(type(obj))].state if name in own})
        else:
            part = _mpe_state(obj)
        parts.append((_qualified(type(obj)), part))
    return {"layers": parts}


def set_state(env: Any, state: Any) -> None:
    """Restore :func:`get_state`'s ``state`` into ``env``, a PettingZoo env built the same way.

    Raises:
        EnvStateError: ``state`` is not such a state, or of other classes or agents (both named);
            ``env`` is left as it was.
    """
    layers = _layers_or_raise(env)
    if not isinstance(state, dict) or not isinstance(state.get("layers"), list):
        raise EnvStateError(f"not a state of a PettingZoo env (from MultiAgentEnv.get_state()): {type(state).__name__}")
    saved = [name for name, _ in state["layers"]]
    names = [_qualified(type(obj)) for obj, _ in layers]
    if saved != names:
        raise EnvStateError(
            f"a state of PettingZoo env {' > '.join(saved)} cannot be restored into {' > '.join(names)}"
        )
    for (obj, kind), (_, part) in zip(layers, state["layers"], strict=True):
        if kind == "mpe" and part["possible_agents"] != obj.possible_agents:
            raise EnvStateError(
                f"a state of MPE env {type(obj).__qualname__} with agents {part['possible_agents']} cannot be restored "
                f"into one with agents {obj.possible_agents}"
            )
    for (obj, kind), (_, part) in zip(layers, state["layers"], strict=True):
        if kind == "protocol":
            obj.set_state(copy.deepcopy(part))
        elif kind == "wrapper":
            vars(obj).update(copy.deepcopy(part))
        else:
            _set_mpe_state(obj, part)


def _mpe_state(env: Any) -> dict[str, Any]:
    own = vars(env)
    # One deep copy, so that what these share (the world's entities, which a scenario may hold) stays shared.
    shared = copy.deepcopy(
        {
            "attributes": {name: own[name] for name in _MPE_STATE if name in own},
            "world": vars(env.world),
            "scenario": vars(env.scenario),
        }
    )
    return {**shared, "possible_agents": list(env.possible_agents), "np_random": rng_state(env.np_random)}


def _set_mpe_state(env: Any, part: dict[str, Any]) -> None:
    shared = copy.deepcopy({key: part[key] for key in ("attributes", "world", "scenario")})
    own = vars(env)
    for name in _MPE_STATE:
        if name not in shared["attributes"]:
            own.pop(name, None)  # set at the first reset: a state from before it has none
    own.update(shared["attributes"])
    # The world and scenario objects stay (the env and its helpers hold them); what they hold is restored.
    vars(env.world).clear()
    vars(env.world).update(shared["world"])
    vars(env.scenario).clear()
    vars(env.scenario).update(shared["scenario"])
    env.np_random = set_rng_state(env.np_random, part["np_random"])
