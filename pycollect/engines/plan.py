"""What every engine does before it collects: read the env's fields and check the policy.

An engine builds one probe env in the trainer, calls :func:`plan_rollout` on it (so that a bad
env or policy fails before any worker starts) and closes it with :func:`close_within` (so an
env whose ``close()`` hangs cannot hang the collector's constructor).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pycollect._deadline import within
from pycollect.exceptions import ConfigError, PyCollectWarning

if TYPE_CHECKING:
    import torch

    from pycollect._rollout.actions import ActionSource
    from pycollect.config import CollectorConfig
    from pycollect.envs.backend import GymLikeEnv
    from pycollect.envs.source import EnvSource
    from pycollect.envs.specs import EnvSpecs, Field, FieldSpec

__all__ = ["RolloutPlan", "close_within", "plan_rollout", "policy_device"]


@dataclass(frozen=True)
class RolloutPlan:
    """What every rollout holds, decided once in the trainer before anything is collected.

    Attributes:
        specs: The environment's fields.
        actions: The action source, checked against the action space (a policy was called
            once on an example observation).
        fields: Every array of a rollout, policy outputs included.
        info: The entries of the env's step ``info`` kept, as fields: the env's own
            :attr:`~pycollect.envs.EnvSpecs.next_fields` (per-agent rewards), then ``info_keys``.
    """

    specs: EnvSpecs
    actions: ActionSource
    fields: tuple[Field, ...]
    info: tuple[FieldSpec, ...] = ()


def plan_rollout(
    config: CollectorConfig,
    env_source: EnvSource,
    env: GymLikeEnv,
    policy: Any,
    *,
    num_envs: int | None = None,
    policy_here: bool = False,
) -> RolloutPlan:
    """Read the specs of ``env`` and check ``policy`` against them.

    Args:
        config: The collector's settings.
        env_source: What built ``env``.
        env: The probe env.
        policy: The policy (``None``: random actions).
        num_envs: The envs one policy call acts for (default: ``envs_per_worker``); the
            policy is checked on a batch of that many.
        policy_here: The policy runs in this process although there are workers (the
            ``central`` engine), so it may run on any device.

    Raises:
        UnsupportedSpaceError: A space cannot be laid out in a batch.
        PolicyError: The policy fails on an example observation or does not fit the action space.
    """
    from pycollect._rollout.action_source import action_source
    from pycollect._rollout.fields import batch_fields
    from pycollect._rollout.seeding import action_rng

    specs = env_source.specs(env)
    device = policy_device(config, policy, policy_here=policy_here)
    rng = action_rng(config.seed)
    count = config.envs_per_worker if num_envs is None else num_envs
    actions = action_source(policy, specs, count, device, rng, config.exploration_type, config.inference_runner)
    info = specs.next_fields + _info_fields(config, env_source, env, specs)
    return RolloutPlan(specs, actions, batch_fields(specs, actions.outputs, actions.carried, info), info)


def _info_fields(
    config: CollectorConfig, env_source: EnvSource, env: GymLikeEnv, specs: EnvSpecs
) -> tuple[FieldSpec, ...]:
    """The fields of the ``info_keys`` entries, read off one step of ``env`` (reset afterwards by the runner).

    Raises:
        ConfigError: The first step's info lacks a key, or its value is not numeric.
    """
    if not config.info_keys:
        return ()
    import numpy as np

    from pycollect.envs.specs import FieldSpec

    env.reset(seed=config.seed)
    info = env.step(specs.sample_action(np.random.default_rng(config.seed)))[4]
    fields = []
    for name in config.info_keys:
        if not isinstance(info, Mapping) or name not in info:
            have = ", ".join(sorted(map(str, info))) if isinstance(info, Mapping) else "no info dict"
            raise ConfigError(f"info_keys: {env_source.describe()!r}'s step info has no {name!r} (it has: {have})")
        value = np.asarray(info[name])
        if value.dtype.kind not in "biuf":
            raise ConfigError(f"info_keys: info[{name!r}] is {value.dtype}, which cannot be stored in a batch")
        shape = tuple(value.shape)
        bounds = np.full(shape, np.inf)
        fields.append(
            FieldSpec(("next", name), shape, value.dtype, -bounds, bounds, value.dtype.kind in "biu", f"info[{name!r}]")
        )
    return tuple(fields)


def policy_device(config: CollectorConfig, policy: Any, *, policy_here: bool = False) -> torch.device:
    """Where ``policy`` runs: ``policy_device``, else ``device``, else where its parameters are, else the CPU.

    Args:
        config: The collector's settings.
        policy: The policy.
        policy_here: The policy runs in this process even with workers (the ``central`` engine).

    Raises:
        ConfigError: The policy's parameters are on the ``meta`` device (no data to move),
            or (with workers that receive the policy pickled) they are not on the CPU.
    """
    import torch

    from pycollect._rollout.policy import parameters_device

    own = parameters_device(policy)
    requested = config.requested_policy_device
    if requested is None:
        chosen = own or torch.device("cpu")
    else:
        chosen = requested
        if own is not None and own.type == "meta":
            name = "policy_device" if config.policy_device is not None else "device"
            raise ConfigError(
                f"{name}={str(chosen)!r} but the policy's parameters are on {own}, which holds no data to "
                "copy; materialise the policy first (e.g. policy.to_empty(device=...) and load weights)"
            )
    if config.num_workers and not policy_here and chosen.type != "cpu":
        raise ConfigError(
            f"the policy's parameters are on {chosen}; workers receive the policy pickled, so keep it "
            "on the CPU (a device_policy decides where each worker runs it)"
        )
    return chosen


def close_within(env: GymLikeEnv, env_source: EnvSource, timeout_s: float, *, what: str = "env") -> None:
    """Close ``env`` in a daemon thread, waiting at most ``timeout_s`` for it.

    The probe env a trainer builds to read the specs is closed in the constructor: an env
    whose ``close()`` never returns (a stuck simulator, a dead socket) must not make
    ``Collector(...)`` never return, as workers' closes are bounded by the supervisor. If the
    deadline passes, a :class:`~pycollect.PyCollectWarning` names the env and the thread is
    left to finish (or to end with the interpreter).

    Raises:
        Exception: What ``close()`` raised, if it returned within the deadline.
    """
    if not within(env.close, timeout_s, name="pycollect-close-env"):
        warnings.warn(
            f"the {what} {env_source.describe()!r}: close() did not return within {timeout_s:g} s; going on "
            "without it (a daemon thread keeps waiting for it)",
            PyCollectWarning,
            stacklevel=3,
        )
