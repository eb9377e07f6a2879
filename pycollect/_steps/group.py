"""A group of environments stepped with gymnasium's autoreset semantics, into arrays it is given.

:class:`EnvGroup` is what steps the envs of a vector env: all of them in the trainer
(``num_workers=0``), or the ``K`` envs of one worker process, whose arrays are then views of
shared memory. Per env it does exactly what ``gymnasium.vector.SyncVectorEnv`` does in each
:class:`~gymnasium.vector.AutoresetMode`:

* ``NEXT_STEP``: an env whose episode ended at the last step is reset instead of stepped (its
  action ignored, reward 0, flags False, its info the reset's info).
* ``SAME_STEP``: an env whose episode ends is reset in the same step; its final observation
  goes into the final-observation arrays and its final info into the returned material.
* ``DISABLED``: never reset here; stepping an env that ended and was not reset (``reset`` with
  a mask) is an :class:`~pycollect.ActionError`.

Observations are written leaf by leaf (see :class:`~pycollect._steps.spaces.SpaceLayout`),
rewards as float64, flags as bools. A value that is not exactly what its array holds goes
through pycollect's output checks, which convert what fits and raise
:class:`~pycollect.EnvOutputError` (naming the env and the step) for what does not.

What gymnasium's vector infos need is returned, not built here (the trainer builds them, see
:mod:`pycollect._steps.infos`): ``None`` when no env returned a non-empty info and none ended in
``SAME_STEP`` mode (the common case; it costs one truth test per env), else one
:data:`InfoEntry` per env that has something, in env order. It is plain data (dicts, lists,
numpy values as the envs returned them), to be pickled across a process boundary; the final
observations are not in it (they are in the arrays).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeAlias

import numpy as np
from gymnasium.vector import AutoresetMode

from pycollect import _core
from pycollect._rollout.checks import OutputChecks
from pycollect._steps.spaces import SpaceLayout
from pycollect.config import parse_autoreset_mode as autoreset_mode  # its old home's name, still importable here
from pycollect.envs.backend import GymLikeEnv
from pycollect.exceptions import ActionError, ConfigError, EnvOutputError

__all__ = ["EnvGroup", "InfoEntry", "Material", "autoreset_mode", "disabled_message"]

InfoEntry: TypeAlias = tuple[int, dict[str, Any], dict[str, Any] | None]
"""One env's info material: ``(env index in its group, info, final info)``.

``info`` is the env's step or reset info. ``final info`` is ``None`` unless the env's episode
ended at this step in ``SAME_STEP`` mode; then it is the info of the ending step (possibly
empty) and ``info`` the info of the reset that followed.
"""

Material: TypeAlias = list[InfoEntry]
"""The info material of one group's step or reset, in env order."""

# How one observation leaf is stored: (path in the raw observation, field index, dtype, shape, array).
_Out: TypeAlias = list[tuple[Any, int, np.dtype[Any], tuple[int, ...], np.ndarray]]


class _GroupChecks(OutputChecks):
    """The output checks, with messages in a vector env's terms.

    ``step`` is the group's step count: 0 for a ``reset()``, ``n > 0`` for the n-th ``step()``
    since the group started, and ``-n`` for a reset at the n-th step (an autoreset).
    """

    def __init__(self, layout: SpaceLayout, env: str, offset: int, worker: int | None) -> None:
        super().__init__(layout.fields, env, worker)
        self.offset = offset

    def _where(self, env_index: int, step: int) -> str:
        place = f"env {self.offset + env_index}" + (f", in worker {self.worker}" if self.worker is not None else "")
        if step == 0:
            when = "on reset"
        elif step < 0:
            when = f"on its automatic reset at step {-step}"
        else:
            when = f"at step {step}"
        return f"env {self.env!r} ({place}) {when}"


class EnvGroup:
    """``K`` environments stepped one after another, results written into arrays given.

    Args:
        envs: The environments, built (the group closes them in :meth:`close`).
        mode: The autoreset mode (see :func:`pycollect.config.parse_autoreset_mode`).
        observation: The observation space's leaves; every env's space must equal its space.
        action: The action space's leaves; every env's space must equal its space.
        observations: One ``[K, *shape]`` array per observation leaf, of its dtype.
        rewards: ``[K]`` float64.
        terminated: ``[K]`` bool.
        truncated: ``[K]`` bool.
        final_observations: One ``[K, *shape]`` array per observation leaf, where an env's
            final observation goes when its episode ends (``SAME_STEP`` mode; required there).
        env_name: The env's name, for messages.
        env_offset: The index of the group's first env in the vector env, for messages.
        worker: The worker the group steps in (``None``: the trainer), for messages.
        info_keys: The entries of the envs' infos to return (``None``: all of them). The
            others are dropped here, before anything is pickled; with ``()`` a step whose
            observation, reward and flags are exactly what the arrays hold is stored natively
            whatever its info.
        max_episode_steps: ``SAME_STEP`` mode only: an env whose episode has taken this many
            steps since its last reset is truncated (``truncated`` True, also where it
            terminated at that step) and reset in the same step, as a collector's
            ``max_frames_per_traj`` truncates (``None``: never; gymnasium's semantics as they are).

    Raises:
        ConfigError: An env's spaces differ from the layouts', or an array does not fit, or
            ``max_episode_steps`` is given outside ``SAME_STEP`` mode.
    """

    def __init__(
        self,
        envs: Sequence[GymLikeEnv],
        mode: AutoresetMode,
        observation: SpaceLayout,
        action: SpaceLayout,
        observations: Sequence[np.ndarray],
        rewards: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        final_observations: Sequence[np.ndarray] | None = None,
        *,
        env_name: str = "env",
        env_offset: int = 0,
        worker: int | None = None,
        info_keys: tuple[str, ...] | None = None,
        max_episode_steps: int | None = None,
    ) -> None:
        self.envs = list(envs)
        self.info_keys = info_keys
        self.mode = mode
        self.observation = observation
        self.action = action
        count = len(self.envs)
        for i, env in enumerate(self.envs):
            for what, layout in (("observation", observation), ("action", action)):
                space = getattr(env, f"{what}_space")
                if space != layout.space:
                    raise ConfigError(
                        f"env {env_name!r} (env {env_offset + i}) has {what}_space {space}, but the vector env's "
                        f"single_{what}_space is {layout.space}: every env of a vector env must have the same spaces"
                    )
        observation.check_arrays(observations, count, "observations")
        if mode is AutoresetMode.SAME_STEP:
            if final_observations is None:
                raise ConfigError("autoreset_mode SAME_STEP needs arrays for the final observations")
            observation.check_arrays(final_observations, count, "final observations")
        for name, array, dtype in (("rewards", rewards, np.float64), ("terminated", terminated, np.bool_)):
            if array.shape != (count,) or array.dtype != dtype:
                raise ConfigError(
                    f"{name}: shape {array.shape} and dtype {array.dtype}, not ({count},) {np.dtype(dtype)}"
                )
        if truncated.shape != (count,) or truncated.dtype != np.bool_:
            raise ConfigError(f"truncated: shape {truncated.shape} and dtype {truncated.dtype}, not ({count},) bool")
        self.rewards, self.terminated, self.truncated = rewards, terminated, truncated
        self._checks = _GroupChecks(observation, env_name, env_offset, worker)
        self._out: _Out = [
            (leaf.path, n, leaf.field.dtype, leaf.field.shape, array)
            for n, (leaf, array) in enumerate(zip(observation.leaves, observations, strict=True))
        ]
        self._final_out: _Out | None = (
            None
            if final_observations is None
            else [
                (path, n, dtype, shape, array)
                for (path, n, dtype, shape, _), array in zip(self._out, final_observations, strict=True)
            ]
        )
        if max_episode_steps is not None and (mode is not AutoresetMode.SAME_STEP or max_episode_steps < 1):
            raise ConfigError(
                f"max_episode_steps={max_episode_steps!r}: a positive limit, in autoreset_mode SAME_STEP only"
            )
        self.max_episode_steps = max_episode_steps
        # Steps each env's episode has taken since its last reset (counted only with a limit).
        self._lengths = np.zeros(count, np.int64)
        self._steps_taken = 0
        # An env's episode ended at its last step (terminated or truncated): NEXT_STEP resets it at
        # the next step, DISABLED refuses to step it.
        self._ended = [False] * count
        self._native = self._native_stepper()
        self._closed = False

    def _native_stepper(self) -> Callable[..., tuple[list[int], list[tuple[int, Any]]]] | None:
        """The native stepper's ``step`` over the group's arrays, every observation leaf included.

        It stores what it can of a step exactly as :meth:`_finish` would (each observation leaf
        exactly an array of its dtype and shape, found where :meth:`_store` looks for it, a
        ``float`` reward, ``bool`` flags, an empty info or, with ``info_keys=()``, any info) and
        hands back the rest.
        """
        count = len(self.envs)
        flags = (self.rewards, self.terminated, self.truncated)
        if not all(a.flags.c_contiguous and a.flags.writeable for a in (*(out[4] for out in self._out), *flags)):
            return None
        try:
            stepper = _core.EnvStepper(
                [env.step for env in self.envs],
                [  # each leaf's array as one step of K envs (a view)
                    (list(path), array.reshape(count, 1, *shape), list(shape), dtype, dtype.itemsize)
                    for path, _, dtype, shape, array in self._out
                ],
                1,
                np.ndarray,
                *(a.reshape(1, count) for a in flags),
                empty_infos_only=self.info_keys != (),  # with info_keys=() no info is returned
            )
        except ConfigError:
            return None
        return stepper.step

    @property
    def num_envs(self) -> int:
        """How many envs the group steps."""
        return len(self.envs)

    def end_every_episode(self) -> None:
        """Count every env's episode as ended, as if its last step had ended it.

        What a restarted worker's group starts with: the trainer reported the envs of the dead
        generation truncated, so in ``NEXT_STEP`` mode the next step resets them (action
        ignored, reward 0), and in ``DISABLED`` mode they must be reset before they are stepped.
        """
        self._ended[:] = [True] * len(self.envs)

    def reset(
        self,
        seeds: Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
        mask: Sequence[bool] | np.ndarray | None = None,
    ) -> Material | None:
        """Reset every env, or the envs of ``mask``, as gymnasium's ``SyncVectorEnv.reset`` does.

        Args:
            seeds: One seed per env (``None`` for an env: its own stream goes on), or ``None``.
            options: Passed to every reset env's ``reset`` as it is.
            mask: Which envs to reset (``None``: all); the others keep their observation.

        Returns:
            The info material of the reset envs (``None`` if every info was empty).
        """
        count = len(self.envs)
        if seeds is None:
            seeds = [None] * count
        if len(seeds) != count or (mask is not None and len(mask) != count):
            raise ConfigError(f"reset of a group of {count} envs got {len(seeds)} seeds and a mask of {mask!r}")
        material: Material | None = None
        for i, env in enumerate(self.envs):
            if mask is not None and not mask[i]:
                continue
            self.terminated[i] = self.truncated[i] = False
            self._ended[i] = False
            self._lengths[i] = 0
            raw, info = env.reset(seed=seeds[i], options=options)
            self._store(self._out, i, raw, 0)
            if info:
                material = self._add(material, i, info, None, 0)
        return material

    def step(self, actions: Sequence[np.ndarray]) -> Material | None:
        """Step every env once with its action, in env order, autoresetting as the mode says.

        Args:
            actions: One ``[K, *shape]`` array per action leaf (checked: see
                :class:`~pycollect._steps.spaces.ActionChecker`).

        Returns:
            The info material (``None``: nothing to add to gymnasium's infos).

        Raises:
            ActionError: ``DISABLED`` mode and an env ended without being reset since.
            EnvOutputError: An env returned what its spaces do not allow.
        """
        mode, ended = self.mode, self._ended
        if mode is AutoresetMode.DISABLED and True in ended:
            raise ActionError(disabled_message([i for i, done in enumerate(ended) if done], self._checks.offset))
        self._steps_taken += 1
        per_env = self.action.per_env(actions)
        due = self._due()
        if self._native is None:
            return self._finish(range(len(self.envs)), per_env, {}, (), due)
        # The common case natively: every env not due for a reset is stepped, and a result that
        # is exactly what the arrays hold (and an empty info) is stored there; the rest is
        # finished below, in env order, as the loop above would.
        resets = [i for i, done in enumerate(ended) if done] if mode is AutoresetMode.NEXT_STEP else []
        stored_ended, left = self._native(0, per_env, ended if resets else None)
        if due:  # the limit truncates the envs stored natively too (the others are truncated in _finish)
            unstored = {i for i, _ in left}
            for i in due:
                if i not in unstored:
                    self.truncated[i] = True
            stored_ended = sorted({*stored_ended, *(i for i in due if i not in unstored)})
        for i in stored_ended:
            # The others stored natively were not due for a reset, so their flag is False already
            # (NEXT_STEP, DISABLED); SAME_STEP mode never reads it.
            ended[i] = True
        if mode is not AutoresetMode.SAME_STEP:
            stored_ended = []
        if not (resets or left or stored_ended):
            return None
        results = dict(left)
        return self._finish(sorted({*resets, *results, *stored_ended}), per_env, results, stored_ended, due)

    def _due(self) -> list[int]:
        """The envs whose episode reaches ``max_episode_steps`` at this step (none without a limit)."""
        if self.max_episode_steps is None:
            return []
        self._lengths += 1
        return np.flatnonzero(self._lengths >= self.max_episode_steps).tolist()

    def _finish(
        self,
        envs: Iterable[int],
        actions: Sequence[Any],
        results: Mapping[int, Any],
        stored: Iterable[int],
        due: Sequence[int] = (),
    ) -> Material | None:
        """Step (or reset) each of ``envs`` in order and store what it returns, as ``SyncVectorEnv`` would.

        Args:
            envs: The envs to finish, in env order.
            actions: Every env's action.
            results: Envs already stepped (by the native stepper), with their unchecked results.
            stored: Envs whose step the native stepper stored and whose episode it ended
                (``SAME_STEP`` mode: the final observation is in the observation arrays, the
                info was empty; the env is reset here).
            due: Envs whose episode ``max_episode_steps`` truncates at this step.
        """
        step, checks = self._steps_taken, self._checks
        rewards, terminated, truncated, ended = self.rewards, self.terminated, self.truncated, self._ended
        next_step, same_step = self.mode is AutoresetMode.NEXT_STEP, self.mode is AutoresetMode.SAME_STEP
        stored, truncating = set(stored), set(due)
        lengths = self._lengths
        material: Material | None = None
        for i in envs:
            env, final = self.envs[i], None
            if i in stored:  # stepped and stored natively, its episode ended: reset it (SAME_STEP)
                lengths[i] = 0
                assert self._final_out is not None
                for final_out, out in zip(self._final_out, self._out, strict=True):
                    final_out[4][i] = out[4][i]  # the final observation, stored where the next one goes
                raw, info = env.reset()
                self._store(self._out, i, raw, -step)
                material = self._add(material, i, info, {}, -step)  # its info was empty: final_info {}
                continue
            if next_step and ended[i]:
                raw, info = env.reset()
                reward, term, trunc, when = 0.0, False, False, -step
            else:
                raw, reward, term, trunc, info = results[i] if i in results else env.step(actions[i])
                when = step
                if type(reward) is not float or type(term) is not bool or type(trunc) is not bool:
                    reward, term, trunc = checks.step(reward, term, trunc, i, step)
                if i in truncating:
                    trunc = True
                if same_step and (term or trunc):
                    lengths[i] = 0
                    self._store(self._final_out, i, raw, step)  # type: ignore[arg-type]
                    final = info if isinstance(info, dict) else self._info(info, i, step)
                    raw, info = env.reset()
                    when = -step
            rewards[i], terminated[i], truncated[i] = reward, term, trunc
            ended[i] = term or trunc
            self._store(self._out, i, raw, when)
            if info or final is not None:
                material = self._add(material, i, info, final, when)
        return material

    def _add(
        self, material: Material | None, i: int, info: Any, final: dict[str, Any] | None, when: int
    ) -> Material | None:
        """``material`` with env ``i``'s entry added: its info and final info, kept to ``info_keys``.

        An entry left with nothing (an empty info and no final info) is not added.
        """
        info = info if isinstance(info, dict) else self._info(info, i, when)
        if (keys := self.info_keys) is not None:
            info = {key: info[key] for key in keys if key in info}
            if final is not None:
                final = {key: final[key] for key in keys if key in final}
            if not info and final is None:
                return material
        entry = (i, info, final)
        if material is None:
            return [entry]
        material.append(entry)
        return material

    def _info(self, info: Any, i: int, when: int) -> dict[str, Any]:
        """A non-empty info that is not a dict: a Mapping's items, or an error."""
        if isinstance(info, Mapping):
            return dict(info)
        if not info:
            return {}
        raise EnvOutputError(f"{self._checks._where(i, when)} returned info {info!r}; an info is a dict")

    def _store(self, out: _Out, i: int, raw: Any, when: int) -> None:
        checks, ndarray = self._checks, np.ndarray
        for path, n, dtype, shape, array in out:
            value = checks.leaf(raw, path, n, i, when) if path else raw
            if type(value) is not ndarray or value.dtype is not dtype or value.shape != shape:
                value = checks.observation(n, value, i, when)
            array[i] = value

    def call(
        self,
        name: str,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        indices: Sequence[int] | None = None,
    ) -> list[Any]:
        """Each env's ``name``: called with the arguments if it is callable, else its value (gymnasium's ``call``).

        The attribute is looked up through wrappers (``get_wrapper_attr``) where the env has them.
        ``indices``: the envs (indices in the group, in that order) to call; ``None``: every env.
        """
        kwargs = kwargs or {}
        results = []
        for env in self._targets(indices):
            attribute = _get(env, name)
            results.append(attribute(*args, **kwargs) if callable(attribute) else attribute)
        return results

    def get_attr(self, name: str, indices: Sequence[int] | None = None) -> list[Any]:
        """Each env's ``name``, as gymnasium's ``SyncVectorEnv.get_attr`` gives it (through :meth:`call`)."""
        return self.call(name, indices=indices)

    def set_attr(self, name: str, values: Sequence[Any], indices: Sequence[int] | None = None) -> None:
        """Set ``name`` on each env (of ``indices``) to its value (through wrappers: ``set_wrapper_attr``)."""
        targets = self._targets(indices)
        if len(values) != len(targets):
            raise ConfigError(f"set_attr({name!r}): {len(values)} values for {len(targets)} envs")
        for env, value in zip(targets, values, strict=True):
            if hasattr(env, "set_wrapper_attr"):
                env.set_wrapper_attr(name, value)
            else:
                setattr(env, name, value)

    def apply(self, function: Callable[[Any], Any], indices: Sequence[int] | None = None) -> list[Any]:
        """``function(env)`` for each env (of ``indices``, in that order), the env itself as built."""
        return [function(env) for env in self._targets(indices)]

    def _targets(self, indices: Sequence[int] | None) -> list[GymLikeEnv]:
        if indices is None:
            return self.envs
        count = len(self.envs)
        if any(not 0 <= i < count for i in indices):
            raise ConfigError(f"env indices {list(indices)} of a group of {count} envs: each must be in 0..{count - 1}")
        return [self.envs[i] for i in indices]

    def close(self) -> None:
        """Close every env (once; every env even if one raises, the first error raised after)."""
        if self._closed:
            return
        self._closed = True
        error: BaseException | None = None
        for env in self.envs:
            try:
                env.close()
            except Exception as exc:
                error = error or exc
        if error is not None:
            raise error


def _get(env: Any, name: str) -> Any:
    return env.get_wrapper_attr(name) if hasattr(env, "get_wrapper_attr") else getattr(env, name)


def disabled_message(envs: Sequence[int], offset: int = 0) -> str:
    """Why ``step()`` refuses envs that ended in ``DISABLED`` mode (envs numbered from ``offset``)."""
    names = ", ".join(str(offset + i) for i in envs)
    return (
        f"autoreset_mode is DISABLED and env{'s' if len(envs) > 1 else ''} {names} ended (terminated or truncated) "
        "at the last step without a reset since: reset them first with "
        "reset(options={'reset_mask': mask}), mask a bool array that is True for them"
    )
