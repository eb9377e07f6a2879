"""Which :class:`~pycollect._rollout.actions.ActionSource` a rollout gets: random actions or the user's policy.

Above both: :mod:`.actions` (numpy) and :mod:`.policy` (torch, imported only for a real
policy), which uses :class:`~pycollect._rollout.actions.RandomActions` for its warm-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pycollect._rollout.actions import ActionSource, RandomActions
from pycollect.exceptions import ConfigError

if TYPE_CHECKING:
    import numpy as np
    import torch

    from pycollect.envs.specs import EnvSpecs

__all__ = ["action_source"]


def action_source(
    policy: Any,
    specs: EnvSpecs,
    num_envs: int,
    device: torch.device | None,
    rng: np.random.Generator,
    exploration: str = "random",
    inference: Any = None,
) -> ActionSource:
    """Random actions for ``policy=None``, else a :class:`~pycollect._rollout.policy.PolicyRunner`.

    torch is imported only in the second case, which keeps a random-policy worker's start-up
    to numpy and gymnasium. ``inference``: the :class:`~pycollect.inference.InferenceRunner`
    that makes the policy calls (``None``: the policy is called as it is).

    Raises:
        PolicyError: The policy does not fit (see :class:`~pycollect._rollout.policy.PolicyRunner`).
    """
    if policy is None:
        return RandomActions(specs.action_fields, num_envs, rng)
    if inference == "plain":
        inference = None  # the default, from a config no collector resolved (the built-in runner is this)
    elif isinstance(inference, str):
        raise ConfigError(
            f"inference_runner={inference!r} is a name: pycollect.plugins.resolve(config, env) turns it "
            "into the runner (a Collector does)"
        )
    import torch

    from pycollect._rollout.policy import PolicyRunner

    return PolicyRunner(policy, specs, num_envs, device or torch.device("cpu"), rng, exploration, inference)
