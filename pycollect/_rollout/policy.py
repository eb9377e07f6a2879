"""Calling the user's policy on a batch of observations.

A policy may be ``None`` (uniform random actions), a tensordict ``TensorDictModule``, a plain
``torch.nn.Module`` (called with one tensor per observation leaf) or any callable (called with
the observation ``TensorDict``). Whatever it returns is normalised to an action array plus
"extras": every other output, such as a log-probability, which is kept in the batch.

Recurrent policies follow TorchRL's conventions (``LSTMModule``, ``GRUModule``): a policy that
takes a TensorDict and writes ``("next", name)`` keys (its next recurrent state) gets ``name``
back on the next call (zeros where an episode starts), and ``is_init`` (True on the first step
of an episode) on every call; the stepping loop carries them (:attr:`PolicyRunner.carried`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import InteractionType, TensorDictModuleBase, set_interaction_type
from tensordict.nn.probabilistic import interaction_type

from pycollect._keys import IS_INIT, Key
from pycollect._messages import first_line
from pycollect._rollout.actions import RandomActions
from pycollect._rollout.transfer import HostTransfer, transfer_for
from pycollect.envs.specs import EnvSpecs, Field, FieldSpec
from pycollect.exceptions import PolicyError

__all__ = ["Policy", "PolicyRunner", "add_group_dims", "parameters_device"]

Policy = Callable[..., Any] | torch.nn.Module | None

_ACTION: Key = ("action",)


class PolicyRunner:
    """Turns observation batches into action batches with one policy call per step.

    Args:
        policy: The user's policy (``None`` is served by :class:`RandomActions` instead).
        specs: The environment's fields.
        num_envs: How many environments are stepped together (the batch size of each call).
        device: Where observations go before the policy sees them.
        rng: Random generator for the random actions of ``init_random_frames``.
        exploration: The name of the ``InteractionType`` every call runs under (``"random"``:
            a probabilistic policy samples, as in TorchRL's collectors).
        inference: The :class:`~pycollect.inference.InferenceRunner` whose prepared callable
            is called in the policy's place by :meth:`act` (``None``: the policy itself). It is
            prepared on the first :meth:`act`, so a runner that compiles does so where the
            policy runs, never for the dry run that checks the policy (in the trainer, also for
            workers). How the policy is called (tensors or a TensorDict) is read off the
            policy, not off that callable.

    Raises:
        PolicyError: The policy fails on an example observation, or its output does not fit
            the action space (wrong shape, wrong kind of dtype, no ``"action"`` key).
    """

    def __init__(
        self,
        policy: Policy,
        specs: EnvSpecs,
        num_envs: int,
        device: torch.device,
        rng: np.random.Generator,
        exploration: str = "random",
        inference: Any = None,
    ) -> None:
        if not callable(policy):
            raise PolicyError(f"policy must be callable, an nn.Module or None, got {policy!r}")
        self.policy = policy
        self._inference = inference
        self._call_policy: Callable[..., Any] = policy  # the dry run calls the policy itself
        self.specs = specs
        self.num_envs = num_envs
        self.device = device
        self._transfer = transfer_for(device)
        self._random = RandomActions(specs.action_fields, num_envs, rng)
        self._exploration = InteractionType(exploration)
        self._obs_keys = [spec.key for spec in specs.observation]
        # Each action leaf: its key in the policy's output, the shape of a batch, the dtype kinds it takes.
        self._action_leaves = [
            (spec, (num_envs, *spec.shape), "biu" if spec.discrete else "f") for spec in specs.action_fields
        ]
        self._action_keys = [spec.key for spec in specs.action_fields]
        self._takes_tensordict = not (
            isinstance(policy, torch.nn.Module) and not isinstance(policy, TensorDictModuleBase)
        )
        self._inputs: set[Key] = set(self._obs_keys) | {IS_INIT}
        self.carried: tuple[Field, ...] = ()
        with self._transfer.running():  # the dry run's outputs are read on the stream that made them
            self.outputs: tuple[Field, ...] = self._dry_run()
        # What every later call's extra outputs are checked against (as CPU tensors).
        self._extras = {
            o.key: (torch.Size((num_envs, *o.shape)), torch.from_numpy(np.empty(0, o.dtype)).dtype)
            for o in self.outputs
        }
        # The common case, called without the general path's mappings (see _act_plain): a
        # module called with tensors on the CPU, one action leaf, nothing else returned.
        self._plain = (
            not self._takes_tensordict
            and type(self._transfer) is HostTransfer
            and device.type == "cpu"
            and len(self._action_keys) == 1
            and not self.outputs
        )

    def call_flops(self) -> int | None:
        """The FLOPs of one call on example observations, as torch counts them (matrix products, convolutions).

        A call of the dry run's kind (a recurrent state fed back as zeros); what it draws from
        torch's random stream is the caller's to keep (``torch.random.fork_rng``). ``None``
        where torch's counter cannot follow the call (any error in counting: the count is a
        hint, never a reason to refuse a policy that the dry run accepted).
        """
        from torch.utils.flop_counter import FlopCounterMode

        n = self.num_envs
        example = {spec.key: np.stack([spec.example()] * n) for spec in self.specs.observation}
        carried = {c.key: np.full((n, *c.shape), c.key == IS_INIT, c.dtype) for c in self.carried}
        try:
            counter = FlopCounterMode(display=False)
            counter.mod_tracker = _GlobalCounts()  # type: ignore[assignment]
            with torch.no_grad(), counter, self._transfer.running():
                self._call(example, carried)
            return int(counter.get_total_flops())
        except Exception:
            return None

    def random_actions(self, steps: int) -> Any:
        """Uniform random actions ``[steps, num_envs, *action_shape]`` (``init_random_frames``; one per action leaf)."""
        return self._random.random_actions(steps)

    def random_state(self) -> dict[str, Any]:
        """The random actions' stream; torch's (a stochastic policy's) is the caller's to save."""
        return self._random.random_state()

    def load_random_state(self, state: Mapping[str, Any]) -> None:
        """Continue the random actions' stream from :meth:`random_state`."""
        self._random.load_random_state(state)

    def act(
        self,
        observation: Mapping[Key, np.ndarray],
        carried: Mapping[Key, np.ndarray] | None = None,
        step: int | None = None,
    ) -> tuple[Any, dict[Key, torch.Tensor]]:
        """Call the policy once for all envs.

        Args:
            observation: One ``[num_envs, *shape]`` array per observation leaf key.
            carried: The carried inputs (:attr:`carried`: recurrent state, ``is_init``).
            step: The rollout's step, which an error names (``None``: not in a rollout).

        Returns:
            The actions as a numpy array in the action field's dtype (one per action leaf, in
            order, for an env with several), and the extra outputs as CPU tensors with a leading
            ``num_envs`` dimension, each of the shape and dtype it had at the dry run.

        Raises:
            PolicyError: The actions do not fit the action space, or an extra output is missing,
                new, or of another shape or dtype than at the dry run (it would be broadcast or
                cast into the batch otherwise).
        """
        if self._inference is not None:
            self._call_policy, self._inference = self._inference.prepare(self.policy, self.device), None
        if self._plain:
            return self._act_plain(observation, step)
        with torch.no_grad(), self._transfer.running():
            return self._outputs_of(self._call(observation, carried), step)

    # -- internals -------------------------------------------------------------------------

    def _act_plain(self, observation: Mapping[Key, np.ndarray], step: int | None) -> tuple[Any, dict[Key, Any]]:
        """:meth:`act` for the common case (:attr:`_plain`), in a few microseconds less than the general path.

        A CPU tensor of the action field's shape and kind of dtype is taken as it is; anything
        else goes through the general path's checks, which name what does not fit. Gradients
        and the interaction type are set only where the caller has not set them already (the
        central engine sets both for a whole round).
        """
        inputs = [torch.from_numpy(observation[key]) for key in self._obs_keys]
        if torch.is_grad_enabled() or interaction_type() is not self._exploration:
            with torch.no_grad(), set_interaction_type(self._exploration):
                raw = self._call_policy(*inputs)
        else:
            raw = self._call_policy(*inputs)
        if type(raw) is torch.Tensor and raw.device.type == "cpu" and not raw.requires_grad:
            array = raw.numpy()
            spec, shape, kinds = self._action_leaves[0]
            if array.shape == shape and array.dtype.kind in kinds:
                return array.astype(spec.dtype, copy=False), {}
        return self._outputs_of(raw, step)

    def _outputs_of(self, raw: Any, step: int | None) -> tuple[Any, dict[Key, torch.Tensor]]:
        """The actions and extra outputs of one call's raw output, checked (see :meth:`act`)."""
        actions, extras = self._split(raw)
        host = self._transfer.to_host({**dict(zip(self._action_keys, actions, strict=True)), **extras})
        arrays = tuple(self._action_array(host.pop(key), n) for n, key in enumerate(self._action_keys))
        extras_out = {key: self._on_cpu(key, value) for key, value in host.items()}
        self._check_extras(extras_out, step)
        return (arrays[0] if len(arrays) == 1 else arrays), extras_out

    def _call(self, observation: Mapping[Key, np.ndarray], carried: Mapping[Key, np.ndarray] | None = None) -> Any:
        """The raw output of one policy call (run it in ``self._transfer.running()``)."""
        inputs = {key: observation[key] for key in self._obs_keys}
        if self._takes_tensordict:
            inputs.update(carried or {})
        tensors = self._transfer.to_device(inputs)
        policy = self._call_policy
        with set_interaction_type(self._exploration):
            if not self._takes_tensordict:
                return policy(*tensors.values())
            td = TensorDict(batch_size=[self.num_envs], device=self.device)
            for key, tensor in tensors.items():
                td.set(key, tensor)
            add_group_dims(td, self.specs.group_sizes)
            assert policy is not None
            return policy(td)

    def _split(self, raw: Any) -> tuple[list[Any], dict[Key, torch.Tensor]]:
        """The action leaves (in order) and the other outputs of one policy call."""
        if isinstance(raw, TensorDictBase | Mapping):
            leaves = _leaves(raw)
            missing = [key for key in self._action_keys if key not in leaves]
            if missing:
                raise PolicyError(
                    f"policy output has no {'/'.join(missing[0])!r} key; its keys are "
                    f"{sorted('/'.join(k) for k in leaves)}"
                )
            actions = [leaves.pop(key) for key in self._action_keys]
            extras = {key: value for key, value in leaves.items() if key not in self._inputs}
            return actions, extras
        if len(self._action_keys) > 1:
            raise PolicyError(
                f"policy returned a {type(raw).__name__}; this env's actions are at "
                f"{', '.join(repr('/'.join(k)) for k in self._action_keys)}: return a TensorDict (or a mapping) "
                "with those keys (a TensorDictModule with them as out_keys)"
            )
        if isinstance(raw, tuple):
            raise PolicyError(
                "policy returned a tuple; return the action, or a mapping/TensorDict with an "
                "'action' key and any extra outputs"
            )
        return [raw], {}

    def _action_array(self, action: Any, leaf: int = 0) -> np.ndarray:
        """The actions of one action leaf as an array of its dtype, checked on every call.

        A policy that starts returning floats for a discrete space (or another shape) mid-run
        is refused rather than cast (``0.9`` would become action 0).
        """
        spec, shape, kinds = self._action_leaves[leaf]
        array = np.asarray(self._on_cpu(spec.key, action).numpy() if isinstance(action, torch.Tensor) else action)
        if array.shape != shape or array.dtype.kind not in kinds:
            _check_action(action, spec, self.num_envs, self.policy)  # raises, naming both
        return array.astype(spec.dtype, copy=False)

    def _check_extras(self, extras: Mapping[Key, torch.Tensor], step: int | None) -> None:
        """Each extra output as the dry run found it (shape and dtype: no values are looked at)."""
        expected = self._extras
        fits = len(extras) == len(expected) and all(
            (value := extras.get(key)) is not None and value.shape == shape and value.dtype == dtype
            for key, (shape, dtype) in expected.items()
        )
        if fits:
            return
        where = f"policy {_describe(self.policy)} returned"
        when = "" if step is None else f" at step {step}"
        for key, (shape, dtype) in expected.items():
            value = extras.get(key)
            if value is None:
                raise PolicyError(
                    f"{where} no {'/'.join(key)!r}{when}, but returned it when the collector was built; an extra "
                    "output has a place in every batch: return it on every call"
                )
            if value.shape != shape or value.dtype != dtype:
                raise PolicyError(
                    f"{where} {'/'.join(key)!r} of shape {tuple(value.shape)} and dtype {value.dtype}{when}, but "
                    f"of shape {tuple(shape)} and dtype {dtype} when the collector was built; an extra output is "
                    "stored as it first came (never broadcast or cast): return the same shape and dtype on every call"
                )
        new = sorted("/".join(key) for key in extras if key not in expected)
        raise PolicyError(
            f"{where} {', '.join(map(repr, new))}{when}, which it did not return when the collector was built; the "
            "batch has no place for it: return the same outputs on every call"
        )

    def _on_cpu(self, key: Key, value: torch.Tensor) -> torch.Tensor:
        """``value`` copied to the CPU (where batches are assembled), or a :class:`PolicyError` naming its device.

        A tensor on the ``meta`` device (or any device whose tensors cannot be copied out)
        would otherwise fail with a bare ``NotImplementedError`` at the first batch.
        """
        try:
            return value.detach().cpu()
        except Exception as exc:
            raise PolicyError(
                f"policy {_describe(self.policy)} returned {'/'.join(key)!r} on device {value.device}, which "
                f"cannot be copied to the CPU ({type(exc).__name__}: {first_line(exc)}); return tensors on the "
                "CPU or a CUDA device (a policy on 'meta' must be materialised first: to_empty() and load weights)"
            ) from exc

    def _dry_run(self) -> tuple[Field, ...]:
        """Call the policy on example observations, check what it returns, find its recurrent state.

        A TensorDict policy is called with ``is_init`` (True) as well; if it writes
        ``("next", name)`` keys, it is called once more with those states fed back as ``name``
        (zeros), as every later call will be.
        """
        example = {spec.key: np.stack([spec.example()] * self.num_envs) for spec in self.specs.observation}
        starting = {IS_INIT: np.ones((self.num_envs, 1), np.bool_)} if self._takes_tensordict else {}
        outputs = self._outputs(self._try(example, starting))
        state = tuple(
            Field(o.key[1:], o.shape, o.dtype)
            for o in outputs
            if self._takes_tensordict and o.key[0] == "next" and len(o.key) > 1 and o.key[1:] not in self._inputs
        )
        needs_is_init = "is_init" in getattr(self.policy, "in_keys", ())
        if state or needs_is_init:
            self.carried = (Field(IS_INIT, (1,), np.dtype(np.bool_)), *state)
            self._inputs |= {output.key for output in state}
            zeros = {output.key: np.zeros((self.num_envs, *output.shape), output.dtype) for output in state}
            outputs = self._outputs(self._try(example, {**starting, **zeros}))
        return outputs

    def _try(self, example: Mapping[Key, np.ndarray], carried: Mapping[Key, np.ndarray]) -> Any:
        try:
            with torch.no_grad():
                return self._call(example, carried)
        except Exception as exc:
            raise PolicyError(
                f"policy {_describe(self.policy)} failed on an example observation batch "
                f"({_shapes({**example, **carried})}): {type(exc).__name__}: {exc}"
            ) from exc

    def _outputs(self, raw: Any) -> tuple[Field, ...]:
        actions, extras = self._split(raw)
        for spec, action in zip(self.specs.action_fields, actions, strict=True):
            _check_action(action, spec, self.num_envs, self.policy)
            if isinstance(action, torch.Tensor):
                self._on_cpu(spec.key, action)  # refused here, before any worker starts
        outputs = []
        for key, value in extras.items():
            if not isinstance(value, torch.Tensor | np.ndarray):
                raise PolicyError(f"policy output {'/'.join(key)!r} is a {type(value).__name__}, not a tensor")
            if isinstance(value, torch.Tensor):
                self._on_cpu(key, value)
            tensor = torch.as_tensor(value)
            if tensor.ndim == 0 or tensor.shape[0] != self.num_envs:
                raise PolicyError(
                    f"policy output {'/'.join(key)!r} has shape {tuple(tensor.shape)}; its first "
                    f"dimension must be the number of envs ({self.num_envs})"
                )
            try:
                dtype = np.dtype(torch.empty((), dtype=tensor.dtype).numpy().dtype)
            except TypeError:
                raise PolicyError(
                    f"policy output {'/'.join(key)!r} has dtype {tensor.dtype}, which cannot be "
                    "stored in a batch; cast it to a numpy-compatible dtype"
                ) from None
            outputs.append(Field(key, tuple(tensor.shape[1:]), dtype))
        return tuple(outputs)


class _GlobalCounts:
    """What :meth:`PolicyRunner.call_flops` gives torch's FLOP counter instead of its module tracker.

    The tracker attributes each count to the modules it runs in, and finds them by walking each
    module's attributes, which a TensorDict module refuses (its parameters are a TensorDict,
    which has no truth value); only the total is wanted, which the counter keeps as "Global".
    """

    parents = ("Global",)

    def __enter__(self) -> _GlobalCounts:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def _check_action(action: Any, spec: FieldSpec, num_envs: int, policy: Policy) -> None:
    """Raise :class:`PolicyError` if ``action`` does not fit the action field (shape, kind of dtype)."""
    if isinstance(action, torch.Tensor):
        shape, dtype = tuple(action.shape), str(action.dtype)
        kind = "f" if action.dtype.is_floating_point else "c" if action.dtype.is_complex else "i"
    else:
        array = np.asarray(action)
        shape, dtype, kind = array.shape, str(array.dtype), array.dtype.kind
    expected = (num_envs, *spec.shape)
    what = "actions" if spec.key == _ACTION else f"{'/'.join(spec.key)!r}"
    where = f"policy {_describe(policy)} returned {what} of shape {shape} and dtype {dtype}"
    if shape != expected:
        raise PolicyError(f"{where}, but the action space {spec.space} needs shape {expected} for {num_envs} envs")
    if spec.discrete and kind not in "biu":
        raise PolicyError(f"{where}, but the action space {spec.space} is discrete: return integer actions")
    if not spec.discrete and kind != "f":
        raise PolicyError(f"{where}, but the action space {spec.space} is continuous: return floating-point actions")


def _leaves(raw: TensorDictBase | Mapping[Any, Any], prefix: Key = ()) -> dict[Key, Any]:
    if isinstance(raw, TensorDictBase):
        return {
            (key,) if isinstance(key, str) else tuple(key): value
            for key, value in raw.items(include_nested=True, leaves_only=True)
        }
    out: dict[Key, Any] = {}
    for key, value in raw.items():
        if isinstance(value, TensorDictBase | Mapping):
            out.update(_leaves(value, (*prefix, str(key))))
        else:
            out[(*prefix, str(key))] = value
    return out


def _describe(policy: Policy) -> str:
    name = getattr(policy, "__qualname__", None) or type(policy).__name__
    return name


def _shapes(example: Mapping[Key, np.ndarray]) -> str:
    return ", ".join(f"{'/'.join(key)}: {tuple(value.shape)} {value.dtype}" for key, value in example.items())


def add_group_dims(td: TensorDictBase, group_sizes: Sequence[tuple[Key, int]]) -> None:
    """Give each group's sub-TensorDict its agent dimension, in place, as TorchRL's multi-agent envs do.

    The sub-TensorDict at each ``key`` of ``group_sizes`` (and at ``("next", *key)``) gets batch
    size ``[*td.batch_size, n]`` (:attr:`~pycollect.envs.EnvSpecs.group_sizes`); one that has it
    already, or that ``td`` lacks, is left as it is.
    """
    for key, n in group_sizes:
        for where in (key, ("next", *key)):
            sub = td.get(where, None)
            if isinstance(sub, TensorDictBase) and sub.batch_dims == td.batch_dims:
                sub.batch_size = torch.Size([*td.batch_size, n])


def parameters_device(policy: Any) -> torch.device | None:
    """The device of a module policy's first parameter or buffer, if it has any."""
    if isinstance(policy, torch.nn.Module):
        for tensor in (*policy.parameters(), *policy.buffers()):
            return tensor.device
    return None
