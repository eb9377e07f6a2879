"""Collecting from one device env in the trainer: the engine of ``Collector(..., engine="device")``.

A :class:`~pycollect.envs.DeviceBatchedEnv` steps ``envs_per_worker`` sub-envs in one call on its
device (a GPU, for a JAX or CUDA simulator). This engine builds one, in this process, and
collects each rollout on that device into ``[N, T, ...]`` tensors with the keys, dtypes, shapes
and (contiguous) layout of the other engines' batches. Per step: one policy call on the
observation tensors as the env returned them, one env step, and a few tensor writes; nothing is
converted to numpy, copied to the host or read there (no ``.item()``, no ``bool(tensor)``, no
boolean-mask index, no Python loop over sub-envs), so on CUDA the loop queues work and never
waits for the device.

Time-major steps, ``[N, T]`` batches: the engine's own rollout tensors are ``[T, N, ...]``, kept
from batch to batch, so that each step's write is one contiguous ``[N, ...]`` block (a column
``t`` of a row-major ``[N, T, ...]`` tensor is ``N`` strided pieces: for 4,096 CartPoles on a CPU,
15 us per observation copy instead of 2). Once per batch, each field is copied into the batch's
``[N, T, ...]`` tensor, its frames moved as a few wide elements (a 16-byte CartPole observation as
one): about 2 us per step and field. Batches are the caller's own contiguous tensors, as the other
engines' are (``batch.view(-1)`` works); on a CPU their memory is that of an earlier batch the
caller has let go of entirely, when there is one (the in-process engine's rule), since fresh
memory costs the page faults of its first writes.

What the host engines work out per env and per step is done here on whole tensors:

* episode ends: the env resets a sub-env whose episode ended in the same step (``SAME_STEP``);
  ``("next", "observation")`` takes its ``final_observation`` there (all of it, one copy, from an
  env whose :attr:`~pycollect.envs.DeviceBatchedEnv.final_observation_complete` says every row is
  the step's own observation);
* ``max_frames_per_traj``: a step counter per sub-env, and :meth:`~pycollect.envs.DeviceBatchedEnv.reset_envs`
  with the mask of the sub-envs it cuts, called at every step once a cut is possible (which
  sub-envs, if any, is known only on the device);
* trajectory ids: computed once per rollout from its done flags (a new id where an episode
  starts, handed out in step order and, within a step, in sub-env order, as the in-process
  engine hands them out), in a few whole-rollout ops on tensors kept from batch to batch;
* random actions (``policy=None``, ``init_random_frames``): drawn on the device from a
  ``torch.Generator`` seeded from the collector's seed, for the whole rollout at once, straight
  into the rollout's action tensor (integers with ``random_``, floats for a Box). Where the env
  overrides :meth:`~pycollect.envs.DeviceBatchedEnv.rollout` and no trajectory limit may cut an
  episode within the batch, those ``[T, N]`` actions go to the env in one call (a JAX env's
  ``lax.scan``: one dispatch per batch instead of ``T``), and each field is moved from the env's
  ``[T, N]`` outputs into the batch once (:meth:`DeviceEngine._rollout_whole`): the same batch,
  value for value.

Values are never checked here (that would read them on the host): what the env and the policy
return is checked by shape, dtype and device at every step, which costs no device time.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import InteractionType, TensorDictModuleBase, set_interaction_type

from pycollect._batch.recycle import RecycledMemory
from pycollect._batch.tensordict import allocate
from pycollect._engines.resources import (
    BATCHES_HELD,
    batch_bytes,
    check_fits,
    check_fits_before_env,
    format_bytes,
)
from pycollect._keys import (
    IS_INIT,
    NEXT_DONE,
    NEXT_OBS_PREFIX,
    NEXT_TERMINATED,
    NEXT_TRUNCATED,
    POLICY_VERSION,
    REWARD,
    TRAJ_IDS,
    Key,
)
from pycollect._messages import first_line
from pycollect._rollout.action_source import action_source
from pycollect._rollout.fields import NEVER_WRITTEN, batch_fields
from pycollect._rollout.policy import add_group_dims, parameters_device
from pycollect._rollout.seeding import action_rng, env_seeds
from pycollect.config import CollectorConfig, ordinal_device
from pycollect.engines import Engine, EnvCalls, RolloutPlan
from pycollect.envs.device import DeviceBatchedEnv, has_rollout, has_state, is_device_env
from pycollect.envs.source import EnvSource, foreign_env
from pycollect.envs.specs import EnvSpecs, FieldSpec, specs_from_spaces
from pycollect.exceptions import (
    ConfigError,
    EnvCreationError,
    EnvOutputError,
    EnvStateError,
    PolicyError,
    PyCollectError,
)

__all__ = ["DeviceEngine", "build_device_env", "env_device"]

_TAKES = (
    "engine='device' takes a factory returning a DeviceBatchedEnv (pycollect.envs.DeviceBatchedEnv) or an env "
    "backend that builds one (EnvBackend.make_device)"
)


class DeviceEngine(Engine):
    """Steps one device env here, one rollout per batch, into fresh tensors on the env's device.

    The policy is the very object the user passed, called where the env's tensors are: weights
    trained in place are live at once, and :meth:`publish_weights` has nothing to move.

    Args:
        plan: What every rollout holds.
        env: The device env, already built and checked (:func:`build_device_env`).
        config: The collector's settings.
        env_name: The env's name, for messages.
        policy: The policy (``None``: random actions only).
    """

    def __init__(
        self, plan: RolloutPlan, env: DeviceBatchedEnv, config: CollectorConfig, env_name: str, policy: Any
    ) -> None:
        self.plan = plan
        self.env = env
        self.env_name = env_name
        self.device = env_device(env)
        self.num_envs = env.num_envs
        self.steps = config.steps_per_batch
        self.reset_at_each_iter = config.reset_at_each_iter
        self.max_frames_per_traj = config.max_frames_per_traj
        device, count, steps = self.device, self.num_envs, self.steps
        specs = plan.specs
        self._fields = [(field.key, (count, steps, *field.shape), _torch_dtype(field.dtype)) for field in plan.fields]
        self._leaves = [
            _Leaf.of(spec, path, count)
            for spec, (_, path) in zip(specs.observation, specs.observation_paths(), strict=True)
        ]
        self._action = specs.action
        self._action_dtype = _torch_dtype(specs.action.dtype)
        self._final_complete = bool(getattr(env, "final_observation_complete", False))
        # Random actions are known before a batch's first step: an env with a rollout takes them all at
        # once, unless a trajectory limit may cut an episode within it (reset_envs between steps)
        self._whole = has_rollout(env) and self.max_frames_per_traj is None
        self._checks = _OutputChecks(env_name, count, device)
        self._seeds = env_seeds(config.seed, count)
        generator = torch.Generator(device=device)
        generator.manual_seed(int(action_rng(config.seed).integers(0, 2**63 - 1)))
        self._random = _RandomActions(specs.action, device, generator)
        self._policy = None if policy is None else _DevicePolicy(policy, plan, config, count, device)
        carried = plan.actions.carried
        self._carried = {
            c.key: torch.zeros((count, *c.shape), dtype=_torch_dtype(c.dtype), device=device) for c in carried
        }
        # The rollout, time-major: what the loop writes at step t is row t of these [T, N, ...] tensors.
        self._stepped = _stepped_keys(plan, [leaf.key for leaf in self._leaves])
        extras = () if self._policy is None else self._policy.extra_keys
        layout = {key: (shape, dtype) for key, shape, dtype in self._fields}
        self._rows = {
            key: torch.empty((steps, count, *layout[key][0][2:]), dtype=layout[key][1], device=device)
            for key in dict.fromkeys((*self._stepped, *extras))
            if key in layout
        }
        self._numbering = _Numbering(count, steps, device)
        self._memory = RecycledMemory() if device.type == "cpu" else None
        # Device-side state between batches: what the policy reads next, trajectory ids, step counts.
        self._current: list[torch.Tensor] = []
        self._traj_ids = torch.zeros(count, dtype=torch.int64, device=device)
        self._next_traj_id = torch.zeros((), dtype=torch.int64, device=device)
        self._lengths = torch.zeros(count, dtype=torch.int64, device=device)
        self._clock = 0  # steps since the last full reset: no trajectory limit can cut before it reaches the limit
        self._started = False
        self._batches = 0
        self._closed = False

    @classmethod
    def start(
        cls, config: CollectorConfig, env_source: EnvSource, policy: Any, weights_module: torch.nn.Module | None = None
    ) -> DeviceEngine:
        """Build the device env, check it, the settings and the policy; nothing steps yet.

        Raises:
            ConfigError: (subclasses naming the kind) what :func:`build_device_env` refuses, a
                device setting or a policy on another device than the env's, a policy that does
                not fit the action space, rollouts that do not fit the device's memory.
        """
        frames = config.envs_per_worker * config.steps_per_batch
        check_fits_before_env(config, "the device batches", BATCHES_HELD * frames)
        env = build_device_env(config, env_source)
        name = env_source.describe()
        try:
            _check_devices(config, env, name, policy, weights_module)
            specs = specs_from_spaces(env.single_observation_space, env.single_action_space)
            actions = action_source(
                policy,
                specs,
                env.num_envs,
                env_device(env),
                action_rng(config.seed),
                config.exploration_type,
                None,  # the dry run calls the policy itself; the runner is prepared at the first step
            )
            plan = RolloutPlan(specs, actions, batch_fields(specs, actions.outputs, actions.carried))
            _check_memory(config, plan, env)
            if config.takes_snapshots and not has_state(env):
                raise EnvStateError(
                    f"snapshots=True (or a checkpoint_dir) saves every env's state, but env {name!r} cannot: "
                    f"{env.describe()} does not implement get_state() and set_state(state) "
                    "(pycollect.envs.DeviceBatchedEnv); snapshots=False keeps checkpoints without env states"
                )
            return cls(plan, env, config, name, policy)
        except BaseException:
            env.close()
            raise

    # -- a batch -------------------------------------------------------------------------

    def next_batch(self, *, random_actions: bool, policy_version: int) -> TensorDict:
        """Collect one ``[N, T]`` batch on the env's device with the policy as it is now (``policy_version``)."""
        if not self._started:
            self._reset(self._seeds)
        elif self.reset_at_each_iter and self._batches > 0:
            self._reset(None)  # each sub-env goes on with its own stream
        use_policy = not random_actions and self._policy is not None
        # The batch: [N, T] tensors the caller owns, each field written into them once
        out = self._new_batch()
        out[POLICY_VERSION].fill_(policy_version)
        if not use_policy and self._policy is not None:
            for key in self._policy.extra_keys:
                if key in out:
                    out[key].zero_()  # no policy call: its outputs are zeros, as the host engines store them
        if not use_policy and self._whole:
            terminated, truncated = self._rollout_whole(out)
        else:
            for key in self._rollout(use_policy):
                _move_steps(out[key], self._rows[key], self.device)
            terminated, truncated = self._rows[NEXT_TERMINATED][..., 0], self._rows[NEXT_TRUNCATED][..., 0]
        done = out[NEXT_DONE]
        torch.logical_or(out[NEXT_TERMINATED], out[NEXT_TRUNCATED], out=done)
        self._number_trajectories(done[..., 0], out[TRAJ_IDS], terminated, truncated)
        self._batches += 1
        return _tensordict(out, self.num_envs, self.steps, self.device)

    def _new_batch(self) -> dict[Key, torch.Tensor]:
        """A batch's ``[N, T]`` tensors, the never-written flags zeroed, the others to be written.

        On a CPU, from memory reused once the caller has let go of an earlier batch (the
        in-process engine's :class:`~pycollect._batch.recycle.RecycledMemory`: every tensor of a
        batch, and every view of one, holds its buffer, so a buffer is handed out again only when
        nothing of that batch is left): fresh memory costs the page faults of its first writes
        there, more than the writes. Elsewhere fresh tensors, which CUDA's caching allocator
        serves from memory it holds.
        """
        if self._memory is not None:
            arrays = allocate(self.plan.fields, self.num_envs, self.steps, self._memory)
            return {key: torch.from_numpy(array) for key, array in arrays.items()}
        out = {key: torch.empty(shape, dtype=dtype, device=self.device) for key, shape, dtype in self._fields}
        for key in NEVER_WRITTEN:
            if key in out:
                out[key].zero_()
        return out

    def _reset(self, seeds: Sequence[int] | None) -> None:
        """Every sub-env starts an episode (and a trajectory); ``seeds`` only at the first reset."""
        raw = self.env.reset(seeds)
        self._current = self._checks.observation(self._leaves, raw, "on reset")
        self._traj_ids = self._next_traj_id + torch.arange(self.num_envs, dtype=torch.int64, device=self.device)
        self._next_traj_id = self._next_traj_id + self.num_envs
        self._lengths.zero_()
        self._clock = 0
        for key, value in self._carried.items():
            value.fill_(key == IS_INIT)  # a first step: is_init True, recurrent states zero
        self._started = True

    def _rollout(self, use_policy: bool) -> list[Key]:
        """Step ``T`` times, writing step ``t`` into row ``t`` of the time-major rollout; the keys written."""
        env, checks, steps, count = self.env, self._checks, self.steps, self.num_envs
        leaves, rows = self._leaves, self._rows
        obs_rows = [rows[leaf.key].unbind(0) for leaf in leaves]
        next_rows = [rows[leaf.next_key].unbind(0) for leaf in leaves]
        actions = rows[self._action.key]
        action_rows = actions.unbind(0)
        reward_rows = rows[REWARD][..., 0].unbind(0)
        term_rows = rows[NEXT_TERMINATED][..., 0].unbind(0)
        trunc_rows = rows[NEXT_TRUNCATED][..., 0].unbind(0)
        carried_rows = [(rows[key].unbind(0), value) for key, value in self._carried.items()]
        policy = self._policy if use_policy else None
        written = list(self._stepped)
        extras_rows: list[tuple[Key, tuple[torch.Tensor, ...]]] = []
        if policy is not None:
            extras_rows = [(key, rows[key].unbind(0)) for key in policy.extra_keys if key in rows]
            written += [key for key, _ in extras_rows if key not in written]
        else:
            self._random.draw(actions)  # the whole rollout's actions, in place: no copy per step
        complete = self._final_complete
        limit = self.max_frames_per_traj
        is_init = self._carried.get(IS_INIT)
        states = [(key, value) for key, value in self._carried.items() if key != IS_INIT]
        track_ends = not complete or limit is not None or is_init is not None  # who needs each step's ends
        for t in range(steps):
            current = self._current
            for cols, value in zip(obs_rows, current, strict=True):
                cols[t].copy_(value)
            for cols, value in carried_rows:
                cols[t].copy_(value)
            if policy is None:
                action = action_rows[t]
                for _, value in states:
                    value.zero_()  # no policy call: the state stays a start
            else:
                action, extras = policy.act(current, self._carried, t)
                for key, cols in extras_rows:
                    cols[t].copy_(extras[key])
                for key, value in states:
                    value.copy_(extras[(*NEXT_OBS_PREFIX, *key)])
                action_rows[t].copy_(action)
            # In the action space's dtype, as the env takes it (a no-op for a policy that returns it so)
            raw, reward, terminated, truncated, final = env.step(action.to(self._action_dtype))
            step = t + 1
            observation = checks.observation(leaves, raw, f"at step {step}")
            reward, terminated, truncated = checks.step(reward, terminated, truncated, f"at step {step}")
            reward_rows[t].copy_(reward)
            term_rows[t].copy_(terminated)
            ended = terminated | truncated if track_ends else terminated  # (then unused)
            finals = checks.observation(leaves, final, f"at step {step} (final_observation)")
            for leaf, cols, value, last in zip(leaves, next_rows, observation, finals, strict=True):
                if complete:
                    cols[t].copy_(last)
                else:
                    torch.where(ended.view(leaf.mask_shape), last, value, out=cols[t])
            self._clock += 1
            if limit is None:
                trunc_rows[t].copy_(truncated)
                self._current = observation
            else:
                self._lengths += 1
                if self._clock >= limit:  # from here on some sub-env may reach the limit: which, only the device knows
                    reached = self._lengths >= limit
                    torch.logical_or(truncated, reached, out=trunc_rows[t])
                    cut = reached & ~ended
                    ended = ended | reached
                    self._current = checks.observation(
                        leaves, env.reset_envs(cut), f"after step {step} (reset_envs, max_frames_per_traj)"
                    )
                else:
                    trunc_rows[t].copy_(truncated)
                    self._current = observation
                self._lengths.masked_fill_(ended, 0)
            if is_init is not None:
                is_init.copy_(ended.view(count, 1))
                for _, value in states:
                    value.masked_fill_(ended.view(count, *([1] * (value.dim() - 1))), 0)
        return written

    def _rollout_whole(self, out: dict[Key, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Random actions, ``T`` steps in one :meth:`~pycollect.envs.DeviceBatchedEnv.rollout` call, into ``out``.

        The batch :meth:`_rollout` and its per-step writes would give, value for value: the same
        draws (the whole rollout's actions drawn at once, as there), the env's ``T`` steps in one
        call, and each field moved from the env's ``[T, N]`` tensors into the batch's ``[N, T]``
        ones once. The carried inputs follow from the done flags: a recurrent state is zero after
        the first step (no policy call), ``is_init`` is the previous step's end.

        Returns:
            The rollout's time-major ``[T, N]`` terminated and truncated flags.
        """
        env, checks, leaves, device = self.env, self._checks, self._leaves, self.device
        steps, count = self.steps, self.num_envs
        actions = self._rows[self._action.key]
        self._random.draw(actions)
        raw, reward, terminated, truncated, final = env.rollout(actions)
        when = f"from a rollout of T={steps} steps"
        observation = checks.observation(leaves, raw, when, steps)
        reward, terminated, truncated = checks.step(reward, terminated, truncated, when, steps)
        finals = checks.observation(leaves, final, f"{when} (final_observation)", steps)
        _move_steps(out[self._action.key], actions, device)
        complete, is_init = self._final_complete, self._carried.get(IS_INIT)
        ended = terminated | truncated if not complete or is_init is not None else terminated  # (then unused)
        for leaf, current, now, last in zip(leaves, self._current, observation, finals, strict=True):
            first = out[leaf.key]
            first[:, 0].copy_(current)
            _move_steps(first[:, 1:], now[:-1], device)
            if complete:
                _move_steps(out[leaf.next_key], last, device)
            else:
                mask = ended.view(steps, *leaf.mask_shape).transpose(0, 1)
                torch.where(mask, last.transpose(0, 1), now.transpose(0, 1), out=out[leaf.next_key])
        out[REWARD][..., 0].copy_(reward.t())
        out[NEXT_TERMINATED][..., 0].copy_(terminated.t())
        out[NEXT_TRUNCATED][..., 0].copy_(truncated.t())
        for key, value in self._carried.items():
            written = out[key]
            written[:, 0].copy_(value)  # what the first step started with
            if value is is_init:
                written[:, 1:, 0].copy_(ended[:-1].t())
                value.copy_(ended[-1].view(count, 1))
            else:
                written[:, 1:].zero_()  # no policy call: the state stays a start
                value.zero_()
        self._current = [now[-1] for now in observation]
        self._clock += steps
        return terminated, truncated

    def _number_trajectories(
        self, done: torch.Tensor, traj_out: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor
    ) -> None:
        """Write each frame's trajectory id from the batch's ``[N, T]`` done flags, and carry the ids on.

        A trajectory starts after each done frame. Its id is the next one handed out, in the
        order the in-process engine hands them out: step by step, and within a step by sub-env.
        So the ``k``-th done of the rollout (``k`` from 1), counted step-major, starts id
        ``next + k - 1`` at the following step; each frame takes the id started by the last done
        before it (a running maximum over time of the dones' ranks), or, before any, the id its
        sub-env came in with.

        Args:
            done: The batch's ``[N, T]`` done flags.
            traj_out: The batch's ``[N, T]`` trajectory ids, written.
            terminated: The rollout's time-major ``[T, N]`` terminated flags.
            truncated: The same, truncated.
        """
        work = self._numbering
        rank, tagged, last, mask = work.rank, work.tagged, work.last, work.mask
        # Step-major ranks: the rollout's own time-major done flags, flat (done is their [N, T] copy),
        # as int64 (a bool operand would be converted into a fresh temporary first)
        torch.logical_or(terminated, truncated, out=work.done)
        torch.cumsum(work.done.view(-1), 0, out=rank.view(-1))
        torch.where(done, rank.t(), work.zero, out=tagged)  # [N, T]: a done's rank, 0 elsewhere
        torch.cummax(tagged, 1, out=(last, work.index))  # the last done at or before each frame
        torch.gt(last, 0, out=mask)
        last.add_(self._next_traj_id - 1)  # its id (where mask says there is one)
        carried = self._traj_ids
        traj_out[:, 0].copy_(carried)
        torch.where(mask[:, :-1], last[:, :-1], carried[:, None], out=traj_out[:, 1:])
        self._traj_ids = torch.where(mask[:, -1], last[:, -1], carried)  # the next batch's first frames
        self._next_traj_id = self._next_traj_id + rank[-1, -1]

    # -- the rest of the engine interface ------------------------------------------------

    def publish_weights(self, weights: Any, version: int) -> None:
        """Nothing to move: the env steps with the very policy object being trained."""

    def state(self) -> dict[str, Any]:
        """Trajectory numbering and, where the env saves its state (:func:`has_state`), what the next batch needs.

        The env snapshot (pickled) holds the env's state, what the policy reads next (the
        observations, ``is_init`` and recurrent states), each sub-env's trajectory id and
        episode length, the random actions' generator and torch's streams: a collector that
        loads it makes the batch this one would make next. Read between batches: it waits for
        the device once.
        """
        state: dict[str, Any] = {"runner": {"next_traj_id": int(self._next_traj_id.item())}}
        if has_state(self.env):
            snapshot: dict[str, Any] = {
                "started": self._started,
                "batches": self._batches,
                "random": self._random.generator.get_state(),
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None,
            }
            if self._started:
                snapshot |= {
                    "env": self.env.get_state(),
                    "current": [value.clone() for value in self._current],
                    "carried": {key: value.clone() for key, value in self._carried.items()},
                    "traj_ids": self._traj_ids.clone(),
                    "lengths": self._lengths.clone(),
                    "clock": self._clock,
                }
            state["env_snapshot"] = pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL)
        return state

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state` (the env too, if it holds its snapshot; an in-process engine's numbering loads too)."""
        if "runner" in state:
            value = int(state["runner"]["next_traj_id"])
            self._next_traj_id = torch.tensor(value, dtype=torch.int64, device=self.device)
        if "env_snapshot" not in state:
            return
        snapshot = pickle.loads(state["env_snapshot"])
        device = self.device
        if snapshot["started"]:
            self.env.set_state(snapshot["env"])  # first: an env that refuses the state leaves the engine as it was
            self._current = [value.to(device) for value in snapshot["current"]]
            for key, value in snapshot["carried"].items():
                self._carried[key].copy_(value)
            self._traj_ids = snapshot["traj_ids"].to(device)
            self._lengths = snapshot["lengths"].to(device)
            self._clock = int(snapshot["clock"])
            self._started = True
        self._batches = int(snapshot["batches"])
        self._random.generator.set_state(snapshot["random"])
        torch.set_rng_state(snapshot["torch"])
        if snapshot["cuda"] is not None and device.type == "cuda":
            torch.cuda.set_rng_state(snapshot["cuda"], device)

    def env_calls(self) -> EnvCalls:
        """Refused: the device engine's env is one batched env, whose sub-envs are rows of its arrays.

        Raises:
            ConfigError: Always, naming the engine and what to do instead.
        """
        raise ConfigError(
            f"engine='device' steps one batched env ({self.env_name}) whose sub-envs are rows of its arrays, "
            "not envs with attributes of their own: env_call, env_get_attr, env_set_attr and env_apply reach "
            "gymnasium-like envs (engine='inprocess', 'workers' or 'central'); change a device env through the "
            "object you built it from"
        )

    def close(self) -> None:
        """Close the env (once)."""
        if not self._closed:
            self._closed = True
            self.env.close()


# -- building and checking the env ------------------------------------------------------


def build_device_env(config: CollectorConfig, env_source: EnvSource) -> DeviceBatchedEnv:
    """Build the one device env of ``engine="device"``, checked against ``envs_per_worker``.

    Through the backend's :meth:`~pycollect.envs.EnvBackend.make_device` where it builds device
    envs (:attr:`~pycollect.envs.EnvBackend.device_env`), with ``env_device`` (else ``device``) as the
    device asked for; otherwise through its ``make``, which for the ``callable`` backend is
    ``factory(**env_kwargs)``, and what that builds must be a device env.

    Raises:
        EnvCreationError: The backend (the env's constructor) raised.
        ConfigError: The backend builds no device env (the message names the env and the engines
            that step it), or the env has another number of sub-envs than ``envs_per_worker``,
            or is malformed (no ``torch.device``).
    """
    backend, name = env_source.backend, env_source.describe()
    if not backend.device_env and backend.batched:
        raise ConfigError(
            f"engine='device' cannot step env {name!r}: env backend {backend.name!r} builds numpy batched envs, "
            f"not device envs; {_TAKES}. Env {name!r} steps with engine='inprocess' (num_workers=0), 'workers' "
            "or 'central' (num_workers >= 1)"
        )
    asked = ordinal_device(config.env_device if config.env_device is not None else config.device)
    try:
        if backend.device_env:
            env: Any = backend.make_device(env_source.target, env_source.env_kwargs, config.envs_per_worker, asked)
        else:
            env = backend.make(env_source.target, env_source.env_kwargs)
    except PyCollectError:
        raise
    except Exception as exc:
        raise EnvCreationError(
            f"building env {name!r} with env_kwargs={dict(env_source.env_kwargs)!r} raised "
            f"{type(exc).__name__}: {first_line(exc)}"
        ) from exc
    if not is_device_env(env):
        built = foreign_env(env) or f"a {type(env).__name__}"
        if callable(getattr(env, "close", None)):
            env.close()
        raise ConfigError(
            f"engine='device' cannot step env {name!r}: it built {built}, not a device env; {_TAKES}. Env "
            f"{name!r} steps with engine='inprocess' (num_workers=0), 'workers' or 'central' (num_workers >= 1)"
        )
    device_env = cast(DeviceBatchedEnv, env)
    try:
        device = getattr(device_env, "device", None)
        if not isinstance(device, torch.device):
            raise ConfigError(
                f"device env {name!r} ({type(device_env).__name__}) has device={device!r}: a DeviceBatchedEnv's "
                "device must be a torch.device"
            )
        if device_env.num_envs != config.envs_per_worker:
            raise ConfigError(
                f"env {name!r} built a device env of {device_env.num_envs} sub-envs ({device_env.describe()}), but "
                f"envs_per_worker is {config.envs_per_worker}: the device env is the collector's envs; set "
                f"envs_per_worker={device_env.num_envs}"
            )
    except BaseException:
        device_env.close()
        raise
    return device_env


def _check_devices(
    config: CollectorConfig, env: DeviceBatchedEnv, name: str, policy: Any, weights_module: torch.nn.Module | None
) -> None:
    """Every device setting, and the policy's parameters, where the env's tensors are.

    Raises:
        ConfigError: A setting names another device (the batch would be copied per step or per
            batch, which this engine exists to avoid).
        PolicyError: The policy's parameters are on another device.
    """
    here = env_device(env)
    for setting in ("env_device", "device", "policy_device", "storing_device"):
        value = ordinal_device(getattr(config, setting))
        if value is not None and value != here:
            raise ConfigError(
                f"{setting}={str(value)!r}, but device env {name!r} is on {here}: engine='device' steps the env, runs "
                f"the policy and stores the batches where the env's tensors are, with no copy; leave {setting} unset "
                f"(or set it to {str(here)!r}) and move what you need elsewhere yourself (batch.to('cpu'))"
            )
    own = parameters_device(weights_module if weights_module is not None else policy)
    if own is not None and ordinal_device(own) != here:
        raise PolicyError(
            f"the policy's parameters are on {own}, but device env {name!r} is on {here}: engine='device' calls the "
            f"policy on the env's observations where they are; move the policy there first (policy.to({str(here)!r}))"
        )


def _check_memory(config: CollectorConfig, plan: RolloutPlan, env: DeviceBatchedEnv) -> None:
    """The batches held at once and the engine's own rollout tensors fit the env's device.

    Host memory for the CPU, free device memory for CUDA.
    """
    count, steps = env.num_envs, config.steps_per_batch
    stepped = set(_stepped_keys(plan, [spec.key for spec in plan.specs.observation]))
    stepped |= {output.key for output in plan.actions.outputs}
    rollout = batch_bytes([field for field in plan.fields if field.key in stepped], count, steps)
    needed = BATCHES_HELD * batch_bytes(plan.fields, count, steps) + rollout + _Numbering.nbytes(count, steps)
    device = env_device(env)
    if device.type == "cpu":
        check_fits("the device batches", needed, config)
        return
    if not config.check_resources or device.type != "cuda":
        return
    free, _ = torch.cuda.mem_get_info(device)
    if needed > free:
        raise ConfigError(
            f"the device batches would take {format_bytes(needed)}, but only {format_bytes(free)} of {device}'s "
            f"memory is free (frames_per_batch={config.frames_per_batch}, envs_per_worker={config.envs_per_worker}); "
            "lower frames_per_batch, or pass check_resources=False if you know the memory will be there"
        )


def env_device(env: DeviceBatchedEnv) -> torch.device:
    """The env's device, with an index for CUDA (``cuda``: the current CUDA device), as its tensors report theirs."""
    device = ordinal_device(env.device)
    assert device is not None  # checked by build_device_env
    return device


def _torch_dtype(dtype: np.dtype[Any]) -> torch.dtype:
    return torch.from_numpy(np.empty(0, dtype)).dtype


# -- per step: observations, env outputs, the policy, random actions ----------------------


@dataclass(frozen=True)
class _Leaf:
    """One observation leaf: where it sits in the batch and in the env's observation, what it must be."""

    key: Key
    next_key: Key
    path: Key
    shape: tuple[int, ...]  # of the batch: [N, *shape]
    floating: bool
    mask_shape: tuple[int, ...]  # a [N] mask broadcast over one step of the leaf
    space: str

    @classmethod
    def of(cls, spec: FieldSpec, path: Key, count: int) -> _Leaf:
        return cls(
            spec.key,
            (*NEXT_OBS_PREFIX, *spec.key),
            path,
            (count, *spec.shape),
            spec.dtype.kind == "f",
            (count, *([1] * len(spec.shape))),
            spec.space,
        )


class _OutputChecks:
    """What the env returns, checked by shape, dtype and device (metadata: no device time, no copy)."""

    def __init__(self, env: str, count: int, device: torch.device) -> None:
        self.env = env
        self.count = count
        self.device = device

    def observation(self, leaves: Sequence[_Leaf], raw: Any, when: str, steps: int | None = None) -> list[torch.Tensor]:
        """The leaves of ``raw``, in field order, each checked (``[steps, N, ...]`` from a rollout of ``steps``).

        Raises:
            EnvOutputError: A leaf is missing, not a tensor, or of another shape, kind of dtype or device.
        """
        lead = () if steps is None else (steps,)
        values = []
        for leaf in leaves:
            shape = (*lead, *leaf.shape)
            value = raw
            for name in leaf.path:
                if not isinstance(value, Mapping) or name not in value:
                    raise EnvOutputError(
                        f"device env {self.env!r} {when} returned an observation without {'/'.join(leaf.key)!r} "
                        f"({type(raw).__name__}); its observation space is a Dict with that key"
                    )
                value = value[name]
            if (
                not isinstance(value, torch.Tensor)
                or value.device != self.device
                or value.shape != shape
                or value.is_floating_point() != leaf.floating
                or value.is_complex()
            ):
                raise EnvOutputError(
                    f"device env {self.env!r} {when} returned observation {'/'.join(leaf.key)!r} {_describe(value)}; "
                    f"its observation space {leaf.space} says a tensor of shape {shape} on {self.device} "
                    f"({'a floating-point' if leaf.floating else 'an integer'} dtype)"
                )
            values.append(value)
        return values

    def step(
        self, reward: Any, terminated: Any, truncated: Any, when: str, steps: int | None = None
    ) -> tuple[torch.Tensor, ...]:
        """The reward (real, ``[N]``) and the flags (bool, ``[N]``) of a step, checked (``[steps, N]`` from a rollout).

        Raises:
            EnvOutputError: One is not a tensor of that shape and kind of dtype on the device.
        """
        expected = (self.count,) if steps is None else (steps, self.count)
        if (
            not isinstance(reward, torch.Tensor)
            or reward.device != self.device
            or reward.shape != expected
            or reward.is_complex()
            or reward.dtype == torch.bool
        ):
            raise EnvOutputError(
                f"device env {self.env!r} {when} returned reward {_describe(reward)}; rewards are a real "
                f"tensor of shape {expected} on {self.device}"
            )
        for name, value in (("terminated", terminated), ("truncated", truncated)):
            if (
                not isinstance(value, torch.Tensor)
                or value.device != self.device
                or value.shape != expected
                or value.dtype != torch.bool
            ):
                raise EnvOutputError(
                    f"device env {self.env!r} {when} returned {name} {_describe(value)}; it must be a bool "
                    f"tensor of shape {expected} on {self.device}"
                )
        return reward, terminated, truncated


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"of shape {tuple(value.shape)} and dtype {value.dtype} on {value.device}"
    return f"of type {type(value).__name__}"


class _DevicePolicy:
    """The user's policy, called on device tensors once per step; its outputs checked, never copied.

    How it is called is the host engines' rule (:class:`~pycollect._rollout.policy.PolicyRunner`,
    whose dry run at the engine's start found the extra outputs and carried state): a plain
    ``torch.nn.Module`` gets one tensor per observation leaf, anything else a ``TensorDict`` of the
    observation (and ``is_init``, a recurrent state), under ``torch.no_grad()`` and the exploration
    type; the inference runner, if any, is prepared at the first call.
    """

    def __init__(
        self, policy: Any, plan: RolloutPlan, config: CollectorConfig, count: int, device: torch.device
    ) -> None:
        self.policy = policy
        self.count = count
        self.device = device
        self._call: Callable[..., Any] = policy
        runner = config.inference_runner
        self._runner = None if isinstance(runner, str) else runner
        self._exploration = InteractionType(config.exploration_type)
        self._takes_tensordict = not (
            isinstance(policy, torch.nn.Module) and not isinstance(policy, TensorDictModuleBase)
        )
        specs: EnvSpecs = plan.specs
        self._specs = specs
        self._obs_keys = [spec.key for spec in specs.observation]
        action = specs.action
        self._action_key = action.key
        self._action_shape = (count, *action.shape)
        self._discrete = action.discrete
        self._action_space = action.space
        self.extra_keys: tuple[Key, ...] = tuple(o.key for o in plan.actions.outputs)
        self._extras = {o.key: (torch.Size((count, *o.shape)), _torch_dtype(o.dtype)) for o in plan.actions.outputs}

    def act(
        self, observation: Sequence[torch.Tensor], carried: Mapping[Key, torch.Tensor], step: int
    ) -> tuple[torch.Tensor, dict[Key, torch.Tensor]]:
        """The actions of step ``step`` and the extra outputs, checked (shape, dtype, device).

        Raises:
            PolicyError: The actions or an extra output differ from the dry run's (shape, kind of
                dtype) or are not tensors on the env's device.
        """
        if self._runner is not None:
            self._call, self._runner = self._runner.prepare(self.policy, self.device), None
        with torch.no_grad(), set_interaction_type(self._exploration):
            if self._takes_tensordict:
                td = TensorDict(batch_size=[self.count], device=self.device)
                for key, value in zip(self._obs_keys, observation, strict=True):
                    td.set(key, value)
                for key, value in carried.items():
                    td.set(key, value)
                add_group_dims(td, self._specs.group_sizes)
                raw = self._call(td)
            else:
                raw = self._call(*observation)
        extras: dict[Key, torch.Tensor] = {}
        if isinstance(raw, TensorDictBase | Mapping):
            action = _get(raw, self._action_key)
            for key in self.extra_keys:
                extras[key] = _get(raw, key)
        else:
            action = raw
        self._check_action(action, step)
        for key, value in extras.items():
            shape, dtype = self._extras[key]
            if (
                not isinstance(value, torch.Tensor)
                or value.shape != shape
                or value.dtype != dtype
                or value.device != self.device
            ):
                raise PolicyError(
                    f"policy {_name(self.policy)} returned {'/'.join(key)!r} {_describe(value)} at step {step + 1}, "
                    f"but of shape {tuple(shape)} and dtype {dtype} when the collector was built (on {self.device}); "
                    "an extra output is stored as it first came: return the same shape, dtype and device on every call"
                )
        return action, extras

    def _check_action(self, action: Any, step: int) -> None:
        if (
            isinstance(action, torch.Tensor)
            and action.device == self.device
            and action.shape == self._action_shape
            and (action.is_floating_point() != self._discrete)
            and not action.is_complex()
        ):
            return
        kind = "an integer" if self._discrete else "a floating-point"
        raise PolicyError(
            f"policy {_name(self.policy)} returned actions {_describe(action)} at step {step + 1}; the action space "
            f"{self._action_space} needs {kind} tensor of shape {self._action_shape} on {self.device} (the device "
            "env's device: engine='device' moves nothing)"
        )


def _get(raw: TensorDictBase | Mapping[Any, Any], key: Key) -> Any:
    """``raw[key]`` for a nested key, or a :class:`PolicyError` naming it."""
    value: Any = raw
    for part in key:
        try:
            value = value[part]
        except (KeyError, TypeError):
            raise PolicyError(
                f"policy output has no {'/'.join(key)!r} key, which it had when the collector was built"
            ) from None
    return value


def _name(policy: Any) -> str:
    return getattr(policy, "__qualname__", None) or type(policy).__name__


class _RandomActions:
    """Uniform random actions from the action space, drawn on the device (normal where a Box is unbounded).

    The rules of :meth:`~pycollect.envs.FieldSpec.sample`, with a ``torch.Generator`` on the env's
    device instead of numpy's: integers (Discrete, MultiDiscrete, MultiBinary, an integer Box)
    uniform within the bounds, drawn as integers in the action's own dtype (``random_``: no float
    draw, no cast); floats uniform between finite bounds, normal without, and exponential off the
    one finite bound of a half-bounded Box.
    """

    def __init__(self, spec: FieldSpec, device: torch.device, generator: torch.Generator) -> None:
        self.generator = generator
        self.dtype = _torch_dtype(spec.dtype)
        self.discrete = spec.discrete
        low, high = np.asarray(spec.low, np.float64), np.asarray(spec.high, np.float64)
        # Integers: one range for every element (a single random_), or per element
        self._range: tuple[int, int | None] | None = None  # (from, to): to None up to the dtype's largest
        self._shifts: torch.Tensor | None = None  # a power-of-two range: its values cut out of 64-bit words
        self._work: torch.Tensor | None = None
        self._span: torch.Tensor | None = None  # per element, with _low: draw % span + low
        self._groups: list[tuple[int, int | None, torch.Tensor]] = []  # per range: the elements it bounds
        if spec.discrete:
            smallest, largest = (0, 1) if self.dtype == torch.bool else _limits(self.dtype)
            lows = [min(max(int(value), smallest), largest) for value in np.clip(low, smallest, largest).flat]
            highs = [min(max(int(value), smallest), largest) for value in np.clip(high, smallest, largest).flat]
            ranges = [(a, None if b >= largest else b + 1) for a, b in zip(lows, highs, strict=True)]
            if len(set(ranges)) == 1:
                self._range = ranges[0]
                start, stop = self._range
                span = 0 if stop is None else stop - start
                if 2 <= span <= 2**16 and span & (span - 1) == 0:  # Discrete(2), MultiBinary: whole bits
                    width = span.bit_length() - 1
                    self._shifts = torch.arange(0, 64 // width * width, width, dtype=torch.int64, device=device)
            elif max(b - a + 1 for a, b in zip(lows, highs, strict=True)) <= 2**32:
                # Few enough values that the remainder of a 62-bit draw is uniform to within 2**-30
                self._low = torch.tensor(lows, dtype=torch.int64, device=device).view(spec.shape)
                self._span = torch.tensor(
                    [b - a + 1 for a, b in zip(lows, highs, strict=True)], dtype=torch.int64, device=device
                ).view(spec.shape)
            else:
                for bounds in dict.fromkeys(ranges):
                    where = [i for i, other in enumerate(ranges) if other == bounds]
                    self._groups.append((*bounds, torch.tensor(where, dtype=torch.int64, device=device)))
            return
        bounded = np.isfinite(low) & np.isfinite(high)
        lower, upper = np.isfinite(low) & ~np.isfinite(high), ~np.isfinite(low) & np.isfinite(high)
        # Which draws are needed is known on the host, once: no draw is made for nothing
        self._uniform = bool(bounded.any())
        self._normal = not bool(bounded.all())
        self._exponential = bool((lower | upper).any())
        self._bounded, self._lower, self._upper = (torch.as_tensor(a, device=device) for a in (bounded, lower, upper))
        self._low = torch.as_tensor(np.where(bounded | lower, low, 0.0), device=device)
        self._high = torch.as_tensor(np.where(bounded | upper, high, 1.0), device=device)

    def draw(self, out: torch.Tensor) -> None:
        """Fill ``out``, ``[steps, N, *shape]`` of the action's dtype (each step's ``[N, *shape]`` contiguous)."""
        g = self.generator
        size, device = out.shape, out.device
        if self._shifts is not None and self._range is not None:
            # k random bits per value, 64 // k values per 64-bit draw (a generator call per value costs more)
            shifts, (start, stop) = self._shifts, self._range
            count = out.numel()
            words = torch.empty(-(-count // len(shifts)), dtype=torch.int64, device=device)
            words.random_(-(2**63), None, generator=g)
            if self._work is None or self._work.shape[0] != words.shape[0]:
                self._work = torch.empty((words.shape[0], len(shifts)), dtype=torch.int64, device=device)
            values = torch.bitwise_right_shift(words[:, None], shifts, out=self._work)
            values.bitwise_and_(cast(int, stop) - start - 1)
            if start:
                values.add_(start)
            out.view(-1).copy_(values.view(-1)[:count])
            return
        if self._range is not None:
            out.random_(*self._range, generator=g)
            return
        if self._span is not None:
            values = torch.empty(size, dtype=torch.int64, device=device).random_(0, 2**62, generator=g)
            out.copy_(values.remainder_(self._span).add_(self._low))
            return
        if self.discrete:
            flat = out.view(*size[:2], -1)
            for low, high, where in self._groups:
                part = torch.empty((*size[:2], len(where)), dtype=out.dtype, device=device)
                flat.index_copy_(2, where, part.random_(low, high, generator=g))
            return
        values = torch.zeros(size, dtype=torch.float64, device=device)
        if self._normal:
            values = torch.randn(size, generator=g, dtype=torch.float64, device=device)
        if self._uniform:
            uniform = torch.rand(size, generator=g, dtype=torch.float64, device=device)
            values = torch.where(self._bounded, self._low + uniform * (self._high - self._low), values)
        if self._exponential:
            exponential = torch.empty(size, dtype=torch.float64, device=device).exponential_(generator=g)
            values = torch.where(self._lower, self._low + exponential, values)
            values = torch.where(self._upper, self._high - exponential, values)
        out.copy_(values)


def _limits(dtype: torch.dtype) -> tuple[int, int]:
    """The smallest and largest values of an integer dtype that an int64 holds too."""
    info = torch.iinfo(dtype)
    return max(int(info.min), -(2**63)), min(int(info.max), 2**63 - 1)


# -- the rollout's own tensors ----------------------------------------------------------


def _stepped_keys(plan: RolloutPlan, observed: Sequence[Key]) -> tuple[Key, ...]:
    """The fields the loop writes at every step, whatever the policy.

    The observation leaves and their next values, the action, the reward and next flags, the
    carried inputs; a policy's extra outputs come on top when it is called.
    """
    keys = [
        *observed,
        *((*NEXT_OBS_PREFIX, *key) for key in observed),
        plan.specs.action.key,
        REWARD,
        NEXT_TERMINATED,
        NEXT_TRUNCATED,
        *(c.key for c in plan.actions.carried),
    ]
    return tuple(dict.fromkeys(keys))


_WIDE = (torch.complex128, torch.int64, torch.int32, torch.int16)
"""The element types a frame's bytes are moved as, widest first (complex128: 16 bytes)."""


def _frames(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A contiguous ``[A, B, *frame]`` tensor as ``[A, B, k]`` over its memory, in the widest elements a frame holds.

    A copy between tensors of one dtype moves bits, not values (NaN payloads included): a float32
    CartPole observation moved as one 16-byte element is the same bytes in a quarter of the
    elements, which halves the once-per-batch ``[T, N] -> [N, T]`` copy on a CPU (4,096 envs: 2.6 us
    a step instead of 5.2). 16-byte elements only on the CPU and CUDA, where complex128 exists.
    """
    a, b = tensor.shape[:2]
    frame = math.prod(tensor.shape[2:]) * tensor.element_size()
    if frame == 0:
        return tensor
    flat = tensor.view(a, b, -1)
    for wide in _WIDE:
        if wide == torch.complex128 and device.type not in ("cpu", "cuda"):
            continue
        if wide.itemsize > tensor.element_size() and frame % wide.itemsize == 0:
            return flat.view(wide)
    return flat


def _move_steps(out: torch.Tensor, rows: torch.Tensor, device: torch.device) -> None:
    """Copy time-major ``[T, N, ...]`` rows into ``[N, T, ...]`` ``out``, frames moved as wide elements if they can be.

    ``out`` may be a slice along time of a batch tensor (``batch[:, 1:]``), ``rows`` anything of
    its shape: rows of another dtype (an env's observation in another float type) are cast by a
    plain copy, and where either's memory cannot be seen in wider elements (a non-contiguous
    frame, an odd offset) the plain copy moves the same bytes.
    """
    if out.dtype == rows.dtype:
        try:
            _frames(out, device).copy_(_frames(rows, device).transpose(0, 1))
            return
        except RuntimeError:  # no wide view of this memory
            pass
    out.copy_(rows.transpose(0, 1))


class _Numbering:
    """The trajectory numbering's tensors, kept from batch to batch (:meth:`DeviceEngine._number_trajectories`).

    On a CPU, fresh ``[N, T]`` temporaries at every batch can cost more than the arithmetic: the
    page faults of their first writes, whenever the allocator has handed the last ones back.
    """

    def __init__(self, count: int, steps: int, device: torch.device) -> None:
        self.done = torch.empty((steps, count), dtype=torch.int64, device=device)  # time-major, for the ranks
        self.rank = torch.empty((steps, count), dtype=torch.int64, device=device)
        self.tagged = torch.empty((count, steps), dtype=torch.int64, device=device)
        self.last = torch.empty_like(self.tagged)
        self.index = torch.empty_like(self.tagged)
        self.mask = torch.empty((count, steps), dtype=torch.bool, device=device)
        self.zero = torch.zeros((), dtype=torch.int64, device=device)

    @staticmethod
    def nbytes(count: int, steps: int) -> int:
        return count * steps * (5 * 8 + 1)


def _tensordict(out: Mapping[Key, torch.Tensor], count: int, steps: int, device: torch.device) -> TensorDict:
    """The rollout's tensors as a ``[N, T]`` TensorDict on ``device`` (time named), without per-leaf checks.

    Every tensor is ours and fits by construction (see :func:`pycollect._batch.tensordict.to_tensordict`,
    which does the same for the host engines' arrays).
    """
    nested: dict[str, Any] = {}
    for key, tensor in out.items():
        level = nested
        for part in key[:-1]:
            level = level.setdefault(part, {})
        level[key[-1]] = tensor
    size = torch.Size((count, steps))

    def build(node: dict[str, Any]) -> TensorDict:
        for name, value in node.items():
            if isinstance(value, dict):
                node[name] = build(value)
        return TensorDict._new_unsafe(node, batch_size=size, device=device, names=[None, "time"])

    return build(nested)
