"""A group of environments stepped with gymnasium's autoreset semantics, into arrays it is given.

:class:`EnvGroup` is the one object that steps ``K`` envs, wherever they step: the envs of a
vector env (all of them in the trainer for ``num_workers=0``, or the ``K`` envs of one step
worker, the central engine's too, whose arrays are then views of shared memory), one row per
env; and the envs of a collector's rollout (:class:`pycollect._rollout.runner.EnvRunner`, in
the trainer or in a rollout worker), built by :meth:`EnvGroup.for_rollout`, which writes step
``t`` into column ``t`` of the rollout's ``[K, T]`` arrays (:meth:`EnvGroup.step_column`) in
``DISABLED`` mode and leaves the episode ends, the trajectory limit and the resets to the
runner. Per env it does exactly what ``gymnasium.vector.SyncVectorEnv`` does in each
:class:`~gymnasium.vector.AutoresetMode`:

* ``NEXT_STEP``: an env whose episode ended at the last step is reset instead of stepped (its
  action ignored, reward 0, flags False, its info the reset's info).
* ``SAME_STEP``: an env whose episode ends is reset in the same step; its final observation
  goes into the final-observation arrays and its final info into the final info fields (what
  fits none, into the returned material).
* ``DISABLED``: never reset here; stepping an env that ended and was not reset (``reset`` with
  a mask) is an :class:`~pycollect.ActionError`.

Observations are written leaf by leaf (see :class:`~pycollect._steps.spaces.SpaceLayout`),
rewards as float64, flags as bools. A value that is not exactly what its array holds goes
through pycollect's output checks, which convert what fits and raise
:class:`~pycollect.EnvOutputError` (naming the env and the step) for what does not.

What gymnasium's vector infos need is written, not built here (the trainer builds them, see
:mod:`pycollect._steps.infos`): info entries of a fixed kind into the info fields
(:mod:`pycollect._steps.info_fields`), the rest returned as material: ``None`` when there is
none (the common case), else one :data:`InfoEntry` per env that has something, in env order.
It is plain data (dicts, lists, numpy values as the envs returned them), to be pickled across a
process boundary; the final observations are not in it (they are in the arrays).

The common case of every env's step and reset is done natively (``_core.GroupStepper``, the
same per-env logic in Rust); the envs it hands back are finished here. A batched env's sub-envs
are stepped as the group's envs, the batch first (:mod:`pycollect.envs.batched`).

A rollout's group differs in what it is told, not in how it steps: its output checks are the
runner's (messages count steps within the rollout), its kept info entries go into the
rollout's ``[K, T]`` info fields as the runner keeps them (a missing entry: the field's
default; no material), and it makes no vector env's space checks (an env backend's fields need
not be its space's leaves).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, TypeAlias

import numpy as np
from gymnasium.vector import AutoresetMode

from pycollect._native import _core
from pycollect._steps.checks import OutputChecks
from pycollect._steps.info_fields import InfoArrays
from pycollect._steps.spaces import SpaceLayout
from pycollect._steps.stepper import StepperSpec, native_stepper
from pycollect.config import parse_autoreset_mode as autoreset_mode  # its old home's name, still importable here
from pycollect.envs._vector_infos import WholeInfos, gather, info_row
from pycollect.envs.backend import GymLikeEnv
from pycollect.envs.batched import batch_of
from pycollect.exceptions import ActionError, ConfigError, EnvOutputError

__all__ = [
    "LEFT_ENDED_RESET",
    "LEFT_RESET",
    "LEFT_STEPPED",
    "EnvGroup",
    "EnvSlotState",
    "InfoEntry",
    "Material",
    "autoreset_mode",
    "disabled_message",
    "material_entries",
]

InfoEntry: TypeAlias = tuple[int, dict[str, Any], dict[str, Any] | None]
"""One env's info material: ``(env index in its group, info, final info)``, the entries that fit no info field.

``info`` is what of the env's step or reset info fits no field. ``final info`` is ``None`` unless
the env's episode ended at this step in ``SAME_STEP`` mode with final info entries that fit no
field; then ``info`` is what of the info of the reset that followed fits none. (Which episodes
ended the flags say: an ended episode whose final info fit the fields has no entry here.)
"""

Material: TypeAlias = "list[InfoEntry] | WholeInfos"
"""The info material of one group's step or reset: its entries in env order, or its infos kept whole.

A batched env's step whose infos are numeric arrays (EnvPool's, a gymnasium vector env's) keeps
them whole (:class:`~pycollect.envs._vector_infos.WholeInfos`, no Python per env); read either
kind env by env with :func:`material_entries`.
"""


def material_entries(material: Material) -> list[InfoEntry]:
    """``material``'s entries, one per env with something, in env order (whole infos read row by row)."""
    return material.entries() if isinstance(material, WholeInfos) else material


EnvSlotState: TypeAlias = tuple[Any, int, bool]
"""One env of a group, saved between steps: ``(the env's state, steps of its episode, whether it ended)``."""

# How one observation leaf is stored: (path in the raw observation, field index, dtype, shape, array).
_Out: TypeAlias = list[tuple[Any, int, np.dtype[Any], tuple[int, ...], np.ndarray]]

LEFT_STEPPED, LEFT_RESET, LEFT_ENDED_RESET = 0, 1, 2
"""How an env handed back by the native stepper stands (``_core.GroupStepper``'s numbers).

``LEFT_STEPPED``: stepped, nothing stored (its raw ``step`` result); ``LEFT_RESET``: reset
instead of stepped (``NEXT_STEP``), reward and flags written, its raw ``reset`` result;
``LEFT_ENDED_RESET``: its episode ended (``SAME_STEP``), that step stored, then reset: its raw
``reset`` result.
"""

_MODE_CODES = {
    AutoresetMode.NEXT_STEP: _core.AUTORESET_NEXT_STEP,
    AutoresetMode.SAME_STEP: _core.AUTORESET_SAME_STEP,
    AutoresetMode.DISABLED: _core.AUTORESET_DISABLED,
}


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

    The common case is stepped natively (``_core.GroupStepper``): an env whose step or reset
    returns exactly what the arrays hold (each observation leaf exactly a numpy array of its
    field's dtype and shape, a ``float`` reward, ``bool`` flags) and an info whose kept entries
    all fit the info fields is written there without Python. Every other env is handed back
    with what it returned and finished here, in Python, with the same result.

    This constructor builds a vector env's group (one row per env); a collector's rollout
    builds its group with :meth:`for_rollout`.

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
            others are dropped here, before anything is pickled; with ``()`` every info is.
        max_episode_steps: ``SAME_STEP`` mode only: an env whose episode has taken this many
            steps since its last reset is truncated (``truncated`` True, also where it
            terminated at that step) and reset in the same step, as a collector's
            ``max_frames_per_traj`` truncates (``None``: never; gymnasium's semantics as they are).
        info: The info fields' arrays (see :mod:`pycollect._steps.info_fields`): entries that
            fit are written there, not into the returned material. ``None``: no fields.

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
        info: InfoArrays | None = None,
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
        if max_episode_steps is not None and (mode is not AutoresetMode.SAME_STEP or max_episode_steps < 1):
            raise ConfigError(
                f"max_episode_steps={max_episode_steps!r}: a positive limit, in autoreset_mode SAME_STEP only"
            )
        self._setup(
            _GroupChecks(observation, env_name, env_offset, worker),
            [(leaf.path, n, leaf.field.dtype, leaf.field.shape) for n, leaf in enumerate(observation.leaves)],
            max_episode_steps,
            info_keys != (),
            (mode, max_episode_steps, "a vector env"),
        )
        if info is not None:
            self.info = info
        self._bind(observations, rewards, terminated, truncated, final_observations, steps=1)

    @classmethod
    def for_rollout(
        cls,
        envs: Sequence[GymLikeEnv],
        leaves: Sequence[tuple[Any, int, np.dtype[Any], tuple[int, ...]]],
        checks: OutputChecks,
        *,
        max_frames_per_traj: int | None,
        keeps_info: bool,
    ) -> EnvGroup:
        """The group a collector's rollout (:class:`pycollect._rollout.runner.EnvRunner`) steps its ``K`` envs with.

        It steps in ``DISABLED`` mode, one step column of the rollout's ``[K, T]`` arrays at a
        time (:meth:`bind_rollout`, :meth:`step_column`), and resets nothing: the runner resets
        an env whose episode ended right after the step (as ``SAME_STEP`` does, which is how a
        batched env's sub-envs are checked here) and tells the group (:meth:`start_episodes`).
        The trajectory limit is the group's, as a vector env's ``max_episode_steps`` is: it
        counts each episode's steps (natively where it steps natively) and truncates one that
        reaches ``max_frames_per_traj``, flagged as ended like any other end. There are no
        vector env spaces to compare the envs with (an env backend's fields need not be its
        space's leaves), nor info material: the kept info entries go into the rollout's info
        fields as the runner keeps them. Such a group is stepped with :meth:`step_column` and
        reset with :meth:`reset_each` only (:meth:`step` and :meth:`reset` are a vector env's).

        Args:
            envs: The environments (the runner closes them).
            leaves: ``(path, field index, dtype, shape)`` per observation field, in ``checks``' order.
            checks: The runner's output checks (their messages count steps within the rollout).
            max_frames_per_traj: The trajectory limit (``None``: none), which a batched env must be able to cut.
            keeps_info: Whether any info entry is kept (else a batched env builds no per-env infos).
        """
        group = cls.__new__(cls)
        group.envs = list(envs)
        group.info_keys = ()
        group.mode = AutoresetMode.DISABLED
        # A batched env's sub-envs reset right after the step that ended them: SAME_STEP to it.
        group._setup(
            checks,
            leaves,
            max_frames_per_traj,
            keeps_info,
            (AutoresetMode.SAME_STEP, max_frames_per_traj, "a collector"),
        )
        return group

    def _setup(
        self,
        checks: OutputChecks,
        leaves: Sequence[tuple[Any, int, np.dtype[Any], tuple[int, ...]]],
        max_episode_steps: int | None,
        infos_wanted: bool,
        batch_check: tuple[AutoresetMode, int | None, str],
    ) -> None:
        """What both kinds of group hold, before any array is bound.

        ``batch_check``: how a batched env's sub-envs are reset and cut, and for whom
        (:meth:`pycollect.envs.batched.BatchedEnv.check`'s arguments).
        """
        count = len(self.envs)
        self._checks = checks
        self._offset = checks.offset if isinstance(checks, _GroupChecks) else 0
        self._leaves = list(leaves)
        self.max_episode_steps = max_episode_steps
        self.info = InfoArrays((), (), (), info_keys=self.info_keys)
        # A rollout's kept info entries (bind_rollout), stored as the runner keeps them:
        # (field index, [K, T] array, name in the info, default).
        self._info_columns: list[tuple[int, np.ndarray, str, Any]] = []
        # The sub-envs of one batched env are stepped as the group's envs, the batch first (see
        # pycollect.envs.batched): one batched step per group step, then each sub-env's row stored.
        self._batch = batch_of(self.envs)
        if self._batch is not None:
            self._batch.check(*batch_check)
            self._batch.infos_wanted = infos_wanted
        # Shared with the native stepper: steps each env's episode has taken since its last
        # reset (counted only with a limit), and whether it ended at its last step
        # (NEXT_STEP resets it at the next step, DISABLED refuses to step it).
        self._lengths = np.zeros(count, np.int64)
        self._ended = np.zeros(count, np.bool_)
        self._steps_taken = 0
        self._native: Any = None
        self._closed = False
        # A whole store's ended sub-envs, for reset_ended: (ended, those the env reset itself, their
        # reset rows per field, those to reset by mask).
        self._resets_due: tuple[np.ndarray, np.ndarray, list[np.ndarray], np.ndarray] | None = None

    def _bind(
        self,
        observations: Sequence[np.ndarray],
        rewards: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        final_observations: Sequence[np.ndarray] | None,
        steps: int,
        native: bool = True,
    ) -> None:
        """Bind the arrays the envs are stepped into (and the native stepper over them, where ``native``)."""
        self.rewards, self.terminated, self.truncated = rewards, terminated, truncated
        self._out: _Out = [(*leaf, array) for leaf, array in zip(self._leaves, observations, strict=True)]
        self._final_out: _Out | None = (
            None
            if final_observations is None
            else [(*leaf, array) for leaf, array in zip(self._leaves, final_observations, strict=True)]
        )
        self._native = self._native_stepper(steps) if native else None

    def _native_stepper(self, steps: int) -> Any:
        """The native stepper over the group's arrays of ``steps`` columns (``None`` where they do not allow one)."""
        arrays = (*(out[4] for out in self._out), *(out[4] for out in self._final_out or ()))
        arrays += (self.rewards, self.terminated, self.truncated, *self.info.values, *self.info.masks)
        arrays += (*(self.info.final_values or ()), *(self.info.final_masks or ()))
        if not all(a.flags.c_contiguous and a.flags.writeable for a in arrays):
            return None
        return native_stepper(
            StepperSpec(
                steps=[env.step for env in self.envs],
                resets=[env.reset for env in self.envs],
                leaves=[(list(path), list(shape), dtype, dtype.itemsize) for path, _, dtype, shape, _ in self._out],
                rows=[out[4] for out in self._out],
                finals=None if self._final_out is None else [out[4] for out in self._final_out],
                rewards=self.rewards,
                terminated=self.terminated,
                truncated=self.truncated,
                ended=self._ended,
                lengths=self._lengths,
                mode=_MODE_CODES[self.mode],
                max_episode_steps=self.max_episode_steps,
                info_keys=None if self.info_keys is None else list(self.info_keys),
                info_fields=self.info.native_args(),
                steps_per_row=steps,
            )
        )

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
        self._ended[:] = True

    # -- a collector's rollout (for_rollout): step t into column t of [K, T] arrays ---------

    @property
    def batched(self) -> bool:
        """Whether the envs are the sub-envs of one batched env (stepped with the batch's actions first)."""
        return self._batch is not None

    def bind_rollout(
        self,
        next_observations: Sequence[np.ndarray],
        rewards: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        info: Sequence[tuple[int, np.ndarray, str, Any]] = (),
        native: bool = True,
    ) -> None:
        """Bind a rollout's arrays: the next observations ``[K, T, *shape]`` per field, ``[T, K]`` rewards and flags.

        ``info``: the kept info entries, ``(field index, [K, T] array, name in the info, default)``
        each, stored on the Python path. The native stepper is bound too where ``native`` and no
        info entry is kept (it keeps none of a rollout's) and every array allows it.
        """
        self._info_columns = list(info)
        self._ended[:] = False  # a rollout starts from reset envs (a step that raised may have left flags)
        self._resets_due = None
        native = native and not self._info_columns and bool(self.envs)
        self._bind(next_observations, rewards, terminated, truncated, None, rewards.shape[0], native)

    @property
    def episode_lengths(self) -> np.ndarray:
        """``[K]`` int64: the steps of each env's episode since its last reset (counted only with a limit).

        Shared with the native stepper: change it in place (a runner's snapshot restores it).
        """
        return self._lengths

    def start_episodes(self, envs: int | Sequence[int]) -> None:
        """``envs`` (one or several) were reset by the rollout's runner: their episodes' steps count from zero again."""
        self._lengths[envs] = 0

    def step_column(self, t: int, actions: Any, batched: Any = None) -> list[int]:
        """Step every env once into column ``t`` of the bound rollout; the envs whose episode ended.

        Args:
            t: The step column.
            actions: One action per env, in env order.
            batched: A batched env's actions, as its ``step_batch`` takes them (see :attr:`batched`).

        Returns:
            The envs whose episode ended at this step, by their own flags or the trajectory
            limit, in env order (the runner resets them: :meth:`reset_ended`, else one by one).
        """
        if self._batch is not None:
            result = self._batch.step_batch(batched)
            stored = self._store_column(result, t)
            if stored is not None:
                return stored
            self._batch.split(result)  # the uncommon step: each sub-env's row stepped as a single env's
        native = self._native
        if native is not None:
            left = native.step(actions, 0, None, t)
            if left:  # the envs it did not store, already stepped
                self.finish(left, t)
            ended: list[int] = native.take_ended()
            return ended
        self.finish(self._step_envs(actions, 0, len(self.envs)), t)
        ended = np.flatnonzero(self._ended).tolist()
        self._ended[ended] = False
        return ended

    def _store_column(self, result: tuple[Any, Any, Any, Any, Mapping[str, Any]], t: int) -> list[int] | None:
        """Store a batched env's step whole as column ``t`` of the bound rollout: the sub-envs whose episode ended.

        The common step of a collector's rollout: arrays that can be stored whole (:meth:`_whole`,
        one copy per array), kept info entries that can be stored whole (:meth:`_info_column`),
        none waiting for a reset. The sub-envs whose episode ends at this step, by their flags
        or the trajectory limit, are handed back for the runner to reset together
        (:meth:`reset_ended`): a ``SAME_STEP`` env's own resets are kept for that (the step's
        rows of them), their final observations (``final_obs``) stored here, checked. Anything
        else (``None``) takes the sub-env by sub-env path, with its checks and a reset per env.
        """
        batch = self._batch
        assert batch is not None
        if self._ended.any() or batch.resets_pending:
            return None
        whole = self._whole(result)
        if whole is None:
            return None
        values, rewards, terminated, truncated = whole
        by_env = terminated | truncated
        env_resets = batch.autoreset_mode is AutoresetMode.SAME_STEP and bool(by_env.any())
        finals = result[4].get("final_obs") if env_resets else None
        if env_resets and finals is None:
            return None  # the sub-env path names what is missing
        infos = result[4]
        final_infos = infos.get("final_info") if env_resets else None  # the step's infos of the envs it reset
        columns = []
        for _, array, name, default in self._info_columns:
            column = self._info_column(infos, name, array, default)
            if column is not None and env_resets:
                final = self._info_column(final_infos, name, array, default)
                column = None if final is None else np.where(_rows_mask(by_env, final.ndim), final, column)
            if column is None:
                return None
            columns.append(column)
        for (*_, array), value in zip(self._out, values, strict=True):
            array[:, t] = value
        for (_, array, _, _), column in zip(self._info_columns, columns, strict=True):
            array[:, t] = column
        self.rewards[t] = rewards
        self.terminated[t] = terminated
        self.truncated[t] = truncated
        ended = by_env
        if (limit := self.max_episode_steps) is not None:
            self._lengths += 1
            cut = self._lengths >= limit
            if cut.any():
                self.truncated[t] |= cut
                ended = by_env | cut
        which = np.flatnonzero(ended)
        if not which.size:
            return []
        reset_by_env = np.flatnonzero(by_env) if env_resets else which[:0]
        for i in reset_by_env.tolist():  # the step's row is the reset observation; the final one is here
            self._store(self._out, i, finals[i], t + 1, t)  # type: ignore[index]
        to_reset = ended.copy()
        to_reset[reset_by_env] = False
        self._resets_due = (which, reset_by_env, [value[reset_by_env] for value in values], to_reset)
        batch.settle(to_reset)
        return which.tolist()

    def _info_column(self, infos: Any, name: str, array: np.ndarray, default: np.ndarray) -> np.ndarray | None:
        """A kept info entry of a batched env's step as one ``[K, *shape]`` column; ``None`` where it cannot be whole.

        What the sub-env by sub-env path stores: the entry's row where the sub-env returned it
        (its ``_name`` mask), the default where not. Whole where the entry is a ``[K, *shape]``
        numpy array of a dtype the column's holds without loss (numpy's safe casts, which the
        row checks pass as they are); any other value takes that path, which checks, converts
        or names it.
        """
        count, shape = len(self.envs), array.shape[2:]
        if not isinstance(infos, Mapping) or name not in infos:
            return np.broadcast_to(default, (count, *shape))
        values, mask = infos[name], infos.get(f"_{name}")
        if type(values) is not np.ndarray or values.shape != (count, *shape):
            return None
        if values.dtype.kind not in "biuf" or not np.can_cast(values.dtype, array.dtype, "safe"):
            return None
        if mask is None:
            return values
        if type(mask) is not np.ndarray or mask.dtype != np.bool_ or mask.shape != (count,):
            return None
        return np.where(_rows_mask(mask, values.ndim), values, default)

    def reset_ended(self, ended: Sequence[int], t: int) -> list[np.ndarray] | None:
        """Reset together the sub-envs a whole store of step ``t`` handed back: their observations, checked.

        One ``[len(ended), *shape]`` array per observation field, in ``ended``'s order: the
        rows a ``SAME_STEP`` env reset in the step itself, and one reset by mask of the others
        (the ``NEXT_STEP`` env's, those the trajectory limit cut). ``None`` where the step was
        not stored whole, or the reset's arrays are not the fields' (dtype, shape): the runner
        then resets each env through its view, as for single envs.
        """
        due, self._resets_due = self._resets_due, None
        if due is None:
            return None
        which, reset_by_env, own_rows, to_reset = due
        assert np.array_equal(which, ended), "reset_ended() of other envs than the step's"
        batch = self._batch
        assert batch is not None
        out = [np.empty((len(which), *shape), dtype) for _, _, dtype, shape, _ in self._out]
        for array, value in zip(out, own_rows, strict=True):
            array[np.searchsorted(which, reset_by_env)] = value
        if not to_reset.any():
            return out
        resets = self._reset_masked(to_reset, t + 1)
        at = np.searchsorted(which, resets.envs)
        for array, value in zip(out, resets.observations, strict=True):
            array[at] = value
        return out

    def _reset_masked(self, to_reset: np.ndarray, when: int) -> _Resets:
        """One reset of the batched env by mask (``to_reset``): the reset sub-envs' observations, checked.

        Each observation leaf that is an array of its field's dtype and shape (every sub-env's
        rows, or the reset ones' only) is taken whole; any other leaf is split into rows and
        checked row by row (``when``: the step the checks' messages name).
        """
        batch = self._batch
        assert batch is not None
        observations, infos = batch.reset_batch(None, to_reset)
        batch.settle(np.zeros(len(self.envs), bool))
        reset = np.flatnonzero(to_reset)
        out: list[np.ndarray] = []
        every = False
        rows: list[Any] | None = None  # per sub-env, only where a leaf is not the field's array
        for path, n, dtype, shape, _ in self._out:
            value = _leaf_of(observations, path)
            if type(value) is np.ndarray and value.dtype == dtype and value.shape[1:] == shape:
                if value.shape[0] == len(self.envs):  # every sub-env's observation came back
                    out.append(value[reset])
                    every = True
                    continue
                if value.shape[0] == reset.size:  # the reset ones' only (each caller copies them at once)
                    out.append(value)
                    continue
            if rows is None:
                rows, every = batch.rows_of(observations, reset.tolist())
            array = np.empty((reset.size, *shape), dtype)
            for m, (i, raw) in enumerate(zip(reset.tolist(), rows, strict=True)):
                leaf = self._checks.leaf(raw, path, n, i, when) if path else raw
                array[m] = self._checks.observation(n, leaf, i, when)
            out.append(array)
        return _Resets(reset, out, infos, every)

    def reset_each(self, seeds: Sequence[int] | None) -> Iterator[tuple[int, Any]]:
        """Reset every env (a batched env's batch first), with ``seeds`` if given: each env's index and raw observation.

        Nothing is stored: a rollout's runner stores the observations it reads next itself.
        """
        if self._batch is not None:  # one batched reset; each sub-env's reset below takes its row
            self._batch.reset_rows(seeds)
        for i, env in enumerate(self.envs):
            obs, _ = env.reset(seed=None if seeds is None else int(seeds[i]))
            yield i, obs

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
            The info material of the reset envs (``None`` if every info fit the info fields).
        """
        count = len(self.envs)
        if seeds is None:
            seeds = [None] * count
        if len(seeds) != count or (mask is not None and len(mask) != count):
            raise ConfigError(f"reset of a group of {count} envs got {len(seeds)} seeds and a mask of {mask!r}")
        material: list[InfoEntry] | None = None
        if self._batch is not None:  # one batched reset; each sub-env's reset below takes its row
            self._batch.reset_rows(seeds, options, mask)
        for i, env in enumerate(self.envs):
            self.info.clear(i)  # an env not reset returns no info
            if mask is not None and not mask[i]:
                continue
            self.terminated[i] = self.truncated[i] = False
            self._ended[i] = False
            self._lengths[i] = 0
            raw, info = env.reset(seed=seeds[i], options=options)
            self._store(self._out, i, raw, 0)
            material = self._add(material, i, info, None, 0)
        return material

    def step(self, actions: Sequence[np.ndarray], start: int = 0, stop: int | None = None) -> Material | None:
        """Step envs ``start..stop`` (default: all) once, each with its action, autoresetting as the mode says.

        Args:
            actions: One ``[stop - start, *shape]`` array per action leaf (checked: see
                :class:`~pycollect._steps.spaces.ActionChecker`).
            start: The first env to step.
            stop: One past the last env to step (``None``: the group's last).

        Returns:
            The info material of the entries that fit no info field (``None``: none).

        Raises:
            ActionError: ``DISABLED`` mode and an env ended without being reset since.
            EnvOutputError: An env returned what its spaces do not allow.
        """
        stop = len(self.envs) if stop is None else stop
        ended = self._ended[start:stop]
        if self.mode is AutoresetMode.DISABLED and ended.any():
            raise ActionError(disabled_message((np.flatnonzero(ended) + start).tolist(), self._offset))
        self._steps_taken += 1
        if self._batch is not None:
            if start != 0 or stop != len(self.envs):
                raise ConfigError(
                    f"envs {start}..{stop - 1} of {self._batch.describe()} stepped alone: a batched env steps all "
                    "its sub-envs at once"
                )
            result = self._batch.step_batch(self.action.batched(actions, copy=False))
            stored, material = self._store_batch(result)
            if stored:
                return material
            self._batch.split(result)  # the uncommon case: each sub-env's row stored as a single env's
        per_env = self.action.per_env(actions)
        if self._native is None:
            left = self._step_envs(per_env, start, stop)
        else:
            left = self._native.step(per_env, start, stop)
        return self.finish(left) if left else None

    def _whole(
        self, result: tuple[Any, Any, Any, Any, Mapping[str, Any]]
    ) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, np.ndarray] | None:
        """A batched env's step as arrays to store whole: the observation leaves, rewards and flags; else ``None``.

        They are, when every observation leaf is exactly a ``[K, *shape]`` array of its field's
        dtype, the rewards numeric and the flags bool, each of shape ``[K]`` (the infos are the
        caller's: a rollout keeping none, :meth:`_whole_step_infos` for a vector env).
        """
        observations, rewards, terminated, truncated, _ = result
        count = len(self.envs)
        values = []
        for path, _, dtype, shape, _ in self._out:
            value = _leaf_of(observations, path)
            if type(value) is not np.ndarray or value.dtype != dtype or value.shape != (count, *shape):
                return None
            values.append(value)
        rewards, terminated, truncated = np.asarray(rewards), np.asarray(terminated), np.asarray(truncated)
        if rewards.shape != (count,) or rewards.dtype.kind not in "fiu":
            return None
        for flags in (terminated, truncated):
            if flags.shape != (count,) or flags.dtype != np.bool_:
                return None
        return values, rewards, terminated, truncated

    def _store_batch(self, result: tuple[Any, Any, Any, Any, Mapping[str, Any]]) -> tuple[bool, Material | None]:
        """Store a batched env's step whole, one copy per array: whether it did, and the info material.

        The common case: arrays that can be stored whole (:meth:`_whole`) and infos that can be
        kept whole (:meth:`_whole_step_infos`; the info fields then hold nothing of this
        group's, the material holds it all). The sub-envs whose episode ends are then handled
        one by one, as few as they are: their final observation stored and, in ``SAME_STEP``
        mode, their reset (by mask, all at once). Anything else is not stored here (``False``)
        and takes the sub-env by sub-env path, with its checks.
        """
        batch = self._batch
        assert batch is not None
        whole = self._whole(result)
        if whole is None:
            return False, None
        values, rewards, terminated, truncated = whole
        infos = result[4] if batch.infos_wanted else {}  # the raw infos hold a same-step env's final_obs, kept or not
        by_env = terminated | truncated
        same_step = self.mode is AutoresetMode.SAME_STEP
        own_resets = by_env if same_step and batch.autoreset_mode is AutoresetMode.SAME_STEP else None
        # SAME_STEP: the sub-envs the trajectory limit cuts at this step (their steps are counted after the store)
        cut = self._lengths + 1 >= self.max_episode_steps if same_step and self.max_episode_steps is not None else None
        step_infos: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None = ([], [])
        if infos and not same_step:
            step_infos = self._whole_step_infos(infos, None, None)
        elif infos:
            ended = by_env if cut is None else by_env | cut
            step_infos = self._whole_step_infos(infos, ended if own_resets is None else ended & ~own_resets, own_resets)
        if step_infos is None:
            return False, None
        for (*_, array), value in zip(self._out, values, strict=True):
            array[...] = value
        self.rewards[...] = rewards
        self.terminated[...] = terminated
        self.truncated[...] = truncated
        if self.info.fields:
            self.info.clear_rows(slice(None))  # the material holds this step's infos whole
        if not same_step:
            self._ended[...] = by_env  # NEXT_STEP: the env resets them at the next step
            batch.settle(self._ended)
            main, _ = step_infos
            return True, self._whole_material(main, None) if main else None
        return True, self._reset_ended_batch(result[4], own_resets, cut, step_infos)

    def _whole_step_infos(
        self, infos: Mapping[str, Any], to_reset: np.ndarray | None, own_resets: np.ndarray | None
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
        """A batched env's step infos kept whole: the parts of the step's infos and of its final infos.

        ``to_reset``: ``SAME_STEP`` mode, the sub-envs whose episode ended and that this group
        resets (their info is that reset's, added by :meth:`_reset_ended_batch`; the step's
        info is their final one); ``None``: no mode that resets here. ``own_resets``: the
        sub-envs a ``SAME_STEP`` env reset itself (their info in ``infos`` is the reset's,
        their final one in ``infos["final_info"]``; ``None``: an env of another mode). ``None``
        where the infos cannot be kept whole (:func:`~pycollect.envs._vector_infos.gather`).
        """
        count, keys = len(self.envs), self.info_keys
        if to_reset is None:
            main = gather(infos, np.ones(count, np.bool_), count, keys=keys)
            return None if main is None else ([main], [])
        parts = (
            gather(infos, ~to_reset, count, keys=keys),
            {} if own_resets is None else gather(infos.get("final_info"), own_resets, count, keys=keys),
            gather(infos, to_reset, count, keys=keys),
        )
        if any(part is None for part in parts):
            return None
        main, own_finals, cut_finals = parts
        assert main is not None and own_finals is not None and cut_finals is not None
        return [main], [own_finals, cut_finals]

    def _whole_material(
        self,
        main: list[dict[str, Any]],
        finals: list[dict[str, Any]] | None,
        rows: dict[int, dict[str, Any]] | None = None,
    ) -> Material | None:
        """The material of infos kept whole, ``None`` if there are none.

        ``main``: parts of the step's infos, of disjoint envs; ``finals``: parts of the ended
        envs' final infos (``None``: none ended); ``rows``: infos of other envs read row by row
        (a reset's that could not be kept whole), which make per-env material of them all.
        """
        count = len(self.envs)
        if not rows:
            parts = tuple(part for part in main if part)
            final_parts = None if finals is None else tuple(part for part in finals if part)
            if not parts and not final_parts:
                return None
            return WholeInfos(count, parts, final_parts)
        entries: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
        for i, row in rows.items():
            entries[i] = (dict(row), {})
        for i, info, final in WholeInfos(count, tuple(main), tuple(finals or ())).entries():
            mine = entries.setdefault(i, ({}, {}))
            mine[0].update(info)
            mine[1].update(final or {})
        material = [(i, info, final or None) for i, (info, final) in sorted(entries.items()) if info or final]
        return material or None

    def _reset_ended_batch(
        self,
        infos: Mapping[str, Any],
        own_resets: np.ndarray | None,
        cut: np.ndarray | None,
        step_infos: tuple[list[dict[str, Any]], list[dict[str, Any]]],
    ) -> Material | None:
        """``SAME_STEP``, after a whole-batch store: the trajectory limit, final observations, resets of ended sub-envs.

        ``own_resets``: the sub-envs a ``SAME_STEP`` batched env reset itself (their final
        observations are in ``infos``; ``None``: an env of another mode); any other ended
        sub-env is reset here. ``cut``: the sub-envs the trajectory limit cuts at this step
        (``None``: no limit). ``step_infos``: the step's infos kept whole
        (:meth:`_whole_step_infos`), to which the resets' are added.
        """
        batch, step = self._batch, self._steps_taken
        assert batch is not None and self._final_out is not None
        lengths = self._lengths
        if cut is not None:
            lengths += 1
            self.truncated |= cut
        ended = self.terminated | self.truncated
        main, finals = step_infos
        rows: dict[int, dict[str, Any]] | None = None
        if not ended.any():
            return self._whole_material(main, None)
        lengths[ended] = 0
        if own_resets is None:
            own_resets = np.zeros_like(ended)
        finals_obs = infos.get("final_obs") if own_resets.any() else None
        for i in np.flatnonzero(ended).tolist():
            if own_resets[i]:
                assert finals_obs is not None, "a same_step batched env reported no final_obs"
                self._store(self._final_out, i, finals_obs[i], step)
            else:  # its final observation is the one just stored
                for (*_, final), (*_, array) in zip(self._final_out, self._out, strict=True):
                    final[i] = array[i]
        to_reset = ended & ~own_resets
        if to_reset.any():
            resets = self._reset_masked(to_reset, -step)
            for (*_, array), value in zip(self._out, resets.observations, strict=True):
                array[resets.envs] = value
            if batch.infos_wanted and resets.infos:
                whole = self._gather_reset_infos(resets)
                if whole is None:  # entries that cannot be kept whole: each reset env's row
                    rows = self._reset_rows_infos(resets)
                else:
                    main = [*main, whole]
        batch.settle(np.zeros(len(self.envs), bool))
        return self._whole_material(main, finals, rows)

    def _gather_reset_infos(self, resets: _Resets) -> dict[str, Any] | None:
        """The infos of a reset by mask kept whole, over the group's envs (``None`` where they cannot be)."""
        count = len(self.envs)
        if resets.every_row:
            take, at = np.zeros(count, np.bool_), None
            take[resets.envs] = True
        else:
            take, at = np.ones(resets.envs.size, np.bool_), resets.envs
        return gather(resets.infos, take, count, at, keys=self.info_keys)

    def _reset_rows_infos(self, resets: _Resets) -> dict[int, dict[str, Any]]:
        """The infos of a reset by mask, each reset env's row (kept to ``info_keys``), by env."""
        return {
            i: self._kept(info_row(resets.infos, i if resets.every_row else n), i, -self._steps_taken)
            for n, i in enumerate(resets.envs.tolist())
        }

    @property
    def native(self) -> Any:
        """The native stepper (``_core.GroupStepper``), or ``None`` where the arrays allow none.

        ``None`` too for a batched env's group: its requests are served from Python, which steps
        the batch before its sub-envs are stored (natively, through :meth:`step`).
        """
        return self._native if self._batch is None else None

    def count_native_steps(self, steps: int) -> None:
        """Count ``steps`` steps served natively (``_core.GroupStepper.serve``) as taken, for messages."""
        self._steps_taken += steps

    def finish_step(self, left: Sequence[tuple[int, int, Any]]) -> Material | None:
        """A step the native request loop took and handed over: count it, and :meth:`finish` ``left``."""
        self._steps_taken += 1
        return self.finish(left)

    def _step_envs(self, actions: Sequence[Any], start: int, stop: int) -> list[tuple[int, int, Any]]:
        """What the native stepper does for every env, with nothing stored: each env's raw result."""
        left: list[tuple[int, int, Any]] = []
        next_step, limit = self.mode is AutoresetMode.NEXT_STEP, self.max_episode_steps
        for i, action in zip(range(start, stop), actions, strict=True):
            self.info.clear(i)
            env = self.envs[i]
            if next_step and self._ended[i]:
                self.rewards[i], self.terminated[i], self.truncated[i] = 0.0, False, False
                self._ended[i], self._lengths[i] = False, 0
                left.append((i, LEFT_RESET, env.reset()))
                continue
            if limit is not None:
                self._lengths[i] += 1
            left.append((i, LEFT_STEPPED, env.step(action)))
        return left

    def finish(self, left: Sequence[tuple[int, int, Any]], t: int | None = None) -> Material | None:
        """Check and store what the envs of ``left`` returned, as ``SyncVectorEnv`` would.

        Args:
            left: ``(env, kind, raw result)`` in env order, as ``_core.GroupStepper.step``
                hands them back: :data:`LEFT_STEPPED` (stepped, nothing stored),
                :data:`LEFT_RESET` (``NEXT_STEP``: reset instead of stepped, reward and flags
                written) or :data:`LEFT_ENDED_RESET` (``SAME_STEP``: the step that ended the
                episode stored, then reset).
            t: A rollout's step column (:meth:`step_column`; its messages say step ``t + 1``
                of the rollout), or ``None``: a vector env's row.

        Returns:
            The info material of their entries that fit no info field (``None``: none).
        """
        step = self._steps_taken if t is None else t + 1
        material: list[InfoEntry] | None = None
        for i, kind, raw in left:
            if kind == LEFT_STEPPED:
                material = self._finish_step(i, raw, step, material, t)
            else:  # reset at this step: the reset's observation and info are the env's
                observation, info = raw
                self._store(self._out, i, observation, -step)
                material = self._add(material, i, info, None, -step)
        return material

    def _finish_step(
        self, i: int, result: Any, step: int, material: list[InfoEntry] | None, t: int | None = None
    ) -> list[InfoEntry] | None:
        """Store env ``i``'s step ``result`` (checked and converted), resetting it in ``SAME_STEP`` mode if it ended.

        ``t``: a rollout's step column (``None``: a vector env's row), where its kept info
        entries go into the rollout's info fields (a missing one: the field's default) and no
        material is made.
        """
        raw, reward, term, trunc, info = result
        for n, array, name, default in self._info_columns:
            value = info.get(name, default) if isinstance(info, Mapping) else default
            array[i, t] = self._checks.info(n, value, i, step)
        if type(reward) is not float or type(term) is not bool or type(trunc) is not bool:
            reward, term, trunc = self._checks.step(reward, term, trunc, i, step)
        if self.max_episode_steps is not None and self._lengths[i] >= self.max_episode_steps:
            trunc = True
        if t is not None:  # a rollout's [T, K] flags; DISABLED mode: the runner resets it
            self.rewards[t, i], self.terminated[t, i], self.truncated[t, i] = reward, term, trunc
            self._ended[i] = term or trunc
            self._store(self._out, i, raw, step, t)
            return material
        self.rewards[i], self.terminated[i], self.truncated[i] = reward, term, trunc
        if self.mode is AutoresetMode.SAME_STEP and (term or trunc):
            self._lengths[i] = 0
            self._store(self._final_out, i, raw, step)  # type: ignore[arg-type]
            final = self._kept(info, i, step)
            raw, info = self.envs[i].reset()
            self._store(self._out, i, raw, -step)
            return self._add(material, i, info, self.info.split(final, i, final=True), -step)
        self._ended[i] = term or trunc
        self._store(self._out, i, raw, step)
        return self._add(material, i, info, None, step)

    def _kept(self, info: Any, i: int, when: int) -> dict[str, Any]:
        """``info`` as a dict, kept to ``info_keys``."""
        entries: dict[str, Any] = info if isinstance(info, dict) else self._info(info, i, when)
        if (keys := self.info_keys) is not None:
            entries = {key: entries[key] for key in keys if key in entries}
        return entries

    def _add(
        self, material: list[InfoEntry] | None, i: int, info: Any, final: dict[str, Any] | None, when: int
    ) -> list[InfoEntry] | None:
        """``material`` with env ``i``'s entry added: what of its info (kept to ``info_keys``) fits no field.

        ``final``: the rest of its final info (``SAME_STEP`` mode, an episode that ended), or
        ``None``. An entry left with nothing is not added: the trainer knows from the flags
        which episodes ended, and the fields hold the rest.
        """
        info = self.info.split(self._kept(info, i, when), i)
        if not info and not final:
            return material
        entry = (i, info, final or None)
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

    def _store(self, out: _Out, i: int, raw: Any, when: int, t: int | None = None) -> None:
        """Store env ``i``'s observation ``raw`` leaf by leaf: at its row, or at column ``t`` of a rollout's."""
        checks, ndarray = self._checks, np.ndarray
        at = i if t is None else (i, t)
        for path, n, dtype, shape, array in out:
            value = checks.leaf(raw, path, n, i, when) if path else raw
            if type(value) is not ndarray or value.dtype is not dtype or value.shape != shape:
                value = checks.observation(n, value, i, when)
            array[at] = value

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

    def env_states(self, get_state: Callable[[Any], Any], indices: Sequence[int] | None = None) -> list[EnvSlotState]:
        """What each env (of ``indices``) continues from after :meth:`load_env_states`, between steps.

        The env's own state (``get_state(env)``: the env backend's, pickled by the caller), the
        steps its episode has taken (the trajectory limit counts them) and whether its last step
        ended it (``NEXT_STEP`` resets it next).
        """
        return [
            (get_state(self.envs[i]), int(self._lengths[i]), bool(self._ended[i])) for i in self._positions(indices)
        ]

    def load_env_states(
        self,
        states: Sequence[EnvSlotState],
        set_state: Callable[[Any, Any], None],
        indices: Sequence[int] | None = None,
    ) -> None:
        """Restore :meth:`env_states` into the envs of ``indices`` (every env: ``None``), in order."""
        positions = self._positions(indices)
        if len(states) != len(positions):
            raise ConfigError(f"{len(states)} env states for {len(positions)} envs")
        for i, (state, length, ended) in zip(positions, states, strict=True):
            set_state(self.envs[i], state)
            self._lengths[i], self._ended[i] = length, ended

    def _targets(self, indices: Sequence[int] | None) -> list[GymLikeEnv]:
        return [self.envs[i] for i in self._positions(indices)]

    def _positions(self, indices: Sequence[int] | None) -> Sequence[int]:
        """``indices``, checked (``None``: every env)."""
        count = len(self.envs)
        if indices is None:
            return range(count)
        if any(not 0 <= i < count for i in indices):
            raise ConfigError(f"env indices {list(indices)} of a group of {count} envs: each must be in 0..{count - 1}")
        return list(indices)

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


class _Resets(NamedTuple):
    """What a reset of a batched env by mask gave (:meth:`EnvGroup._reset_masked`)."""

    envs: np.ndarray  # the reset sub-envs, in order
    observations: list[np.ndarray]  # one [len(envs), *shape] array per observation field, checked
    infos: Mapping[str, Any]  # the reset's infos, as the env returned them
    every_row: bool  # whether the env returned every sub-env's rows (infos indexed by sub-env) or theirs only


def _leaf_of(observations: Any, path: Any) -> Any:
    """The leaf at ``path`` (Dict keys, Tuple indices) of a batched observation (``None``: not there)."""
    value = observations
    for part in path:
        try:
            value = value[part]
        except (KeyError, IndexError, TypeError):
            return None
    return value


def _rows_mask(mask: np.ndarray, ndim: int) -> np.ndarray:
    """A ``[K]`` mask shaped to select whole rows of a ``[K, ...]`` array of ``ndim`` dimensions."""
    return mask.reshape(mask.shape[0], *(1,) * (ndim - 1))


def disabled_message(envs: Sequence[int], offset: int = 0) -> str:
    """Why ``step()`` refuses envs that ended in ``DISABLED`` mode (envs numbered from ``offset``)."""
    names = ", ".join(str(offset + i) for i in envs)
    return (
        f"autoreset_mode is DISABLED and env{'s' if len(envs) > 1 else ''} {names} ended (terminated or truncated) "
        "at the last step without a reset since: reset them first with "
        "reset(options={'reset_mask': mask}), mask a bool array that is True for them"
    )
