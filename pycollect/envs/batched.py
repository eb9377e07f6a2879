"""Batched environments: one object that steps ``N`` sub-envs per call, stepped by pycollect as ``N`` envs.

A gymnasium ``VectorEnv`` (``SyncVectorEnv``, ``AsyncVectorEnv``, a vector entry point such as
``CartPoleVectorEnv``, any user's), an EnvPool env, or a JAX simulator steps a whole batch in one
call. pycollect steps its envs one after another (the native stepper of a worker's group, the
rollout loop of the ``workers`` engine) and checks and stores what each returns. A batched env
joins that machinery as ``N`` :class:`SubEnv` views of one :class:`BatchedEnv`:

* the group (or runner) that steps the views first steps the batch once with every view's action
  (:meth:`BatchedEnv.step_all`), which splits the batch's results into one row per sub-env;
* each view's ``step`` then hands back its row (a view of the batch's arrays, so the group's
  store of it is the one copy), and its ``reset`` the row of the batch's last reset, or a reset
  of the sub-envs that ended (:meth:`BatchedEnv.reset_rows`).

So a batched env's batches, autoreset modes, final observations, trajectory limits, checks and
infos are exactly those of ``N`` envs stepped one by one, through the same code.

:class:`BatchedEnv` is the one interface pycollect steps: :class:`VectorEnvAdapter` wraps a
gymnasium ``VectorEnv`` (EnvPool's gymnasium API included, through :class:`EnvPoolAdapter`), and a
plugin or a user may subclass it for any other batched simulator (see
``pycollect_jax.env.GymnaxBatchedEnv`` in ``plugins/pycollect-jax`` for a JAX one). What a batched env must offer:

* ``step_batch(actions)``: every sub-env steps (or, in ``NEXT_STEP`` mode, resets where it ended
  at the step before) and returns ``(observations, rewards, terminated, truncated, infos)``;
* ``reset_batch(seeds, mask)``: the sub-envs of ``mask`` (all with ``None``) start an episode;
  ``mask`` is only given where :attr:`BatchedEnv.partial_reset` is true;
* :attr:`BatchedEnv.autoreset_mode`: what its ``step_batch`` does with a sub-env whose episode
  ended, in gymnasium's terms (``SAME_STEP``: the final observation in
  ``infos["final_obs"]``, the final info in ``infos["final_info"]``).

Which of pycollect's modes a batched env can serve (:meth:`BatchedEnv.refusal`): its own mode as it
is, and ``SAME_STEP`` (what every collector needs) wherever it resets sub-envs by mask. A
``NEXT_STEP`` env without partial resets (gymnasium's ``CartPoleVectorEnv``) serves ``make_vec`` in
``NEXT_STEP`` mode only, and is refused elsewhere by name: its step after an episode's end ignores
that sub-env's action, which no transition can hold.

Env states (snapshots: checkpoints with env states, crash replay) are saved sub-env by sub-env,
as each :class:`SubEnv` view's own (the :class:`~pycollect.envs.state.SnapshotEnv` protocol):
a batched env that can save one sub-env apart from the others implements
:meth:`BatchedEnv.sub_env_state` and :meth:`BatchedEnv.set_sub_env_state`. gymnasium's
``SyncVectorEnv`` of single envs pycollect can save does; any other (EnvPool, a vector entry
point, ``AsyncVectorEnv``, whose sub-envs live in processes of their own) is refused by name
(:meth:`BatchedEnv.sub_env_refusal`) before a feature that needs snapshots starts.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from pycollect.envs import state as env_state
from pycollect.envs._vector_infos import info_row
from pycollect.exceptions import ConfigError, EnvOutputError, EnvStateError

__all__ = [
    "BatchedEnv",
    "EnvPoolAdapter",
    "SubEnv",
    "VectorEnvAdapter",
    "as_batched",
    "batch_items",
    "batch_of",
    "check_probe",
    "is_batched",
    "is_view",
    "sub_env_count_error",
]


class BatchedEnv(abc.ABC):
    """``num_envs`` sub-envs stepped in one call, and their :class:`SubEnv` views.

    Subclasses implement :meth:`step_batch`, :meth:`reset_batch`, :meth:`close_batch` and set
    :attr:`num_envs`, :attr:`single_observation_space`, :attr:`single_action_space`,
    :attr:`autoreset_mode` and :attr:`partial_reset`.

    Observations come as gymnasium batches them (``batch_space``): one ``[N, *shape]`` array for a
    Box, a dict or tuple of them for a Dict or Tuple space. Rewards, ``terminated`` and
    ``truncated`` are ``[N]`` arrays; ``infos`` a gymnasium vector info dict (``{key: values,
    "_key": mask}``).
    """

    num_envs: int
    single_observation_space: Any
    single_action_space: Any
    autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP
    partial_reset: bool = False
    """Whether :meth:`reset_batch` takes a ``mask`` (resets some sub-envs, the others untouched)."""
    metadata: Mapping[str, Any] = {}
    render_mode: str | None = None
    infos_wanted: bool = True
    """Whether the views' infos are built (a group that keeps none sets it ``False``: no per-env dicts)."""
    solo: bool = False
    """A probe: its first view steps and resets the whole batch itself (every sub-env with that view's action)."""

    def __init__(self) -> None:
        self._rows: list[tuple[Any, float, bool, bool, dict[str, Any]] | None] = []
        self._resets: list[tuple[Any, dict[str, Any]] | None] = []
        self._ended: np.ndarray = np.zeros(0, bool)  # ended at the last step, not reset since (by anyone)
        self._views: list[SubEnv] = []
        self._closed = False

    # -- what a batched simulator implements ---------------------------------------------

    @abc.abstractmethod
    def step_batch(self, actions: Any) -> tuple[Any, Any, Any, Any, Mapping[str, Any]]:
        """Step every sub-env with its row of ``actions``: ``(obs, rewards, terminated, truncated, infos)``."""

    @abc.abstractmethod
    def reset_batch(
        self, seeds: Sequence[int | None] | None, mask: np.ndarray | None, options: Mapping[str, Any] | None = None
    ) -> tuple[Any, Mapping[str, Any]]:
        """Reset the sub-envs of ``mask`` (all: ``None``), with ``seeds`` (one per sub-env) where given.

        ``options`` are passed only where a caller gives some (``make_vec``'s ``reset(options=...)``);
        an env that takes none may leave the argument out, and such a reset is then refused by name.

        Returns:
            ``(observations, infos)``: of every sub-env (those not reset as they were) or of the
            reset ones only, in sub-env order; either is read by :meth:`reset_rows`.
        """

    @abc.abstractmethod
    def close_batch(self) -> None:
        """Release the simulator."""

    # -- what pycollect calls ------------------------------------------------------------

    def refusal(self, mode: AutoresetMode, what: str) -> str | None:
        """Why this env cannot serve autoreset ``mode`` for ``what`` (``None``: it can).

        Its own mode it serves as it is; ``SAME_STEP`` also where it resets sub-envs by mask (it
        resets each sub-env that ended right after the step). Any other pairing would step a
        sub-env the caller thinks is resetting, or the other way round.
        """
        own = self.autoreset_mode
        if mode is own or (mode is AutoresetMode.SAME_STEP and self.partial_reset):
            return None
        wanted, has = mode.name.lower(), own.name.lower()
        if self.partial_reset:  # it serves same_step too, but its sub-envs cannot sit a step out
            cannot = "sit out the step after its episode ends" if mode is AutoresetMode.NEXT_STEP else "wait"
            return (
                f"{what} needs autoreset mode {wanted}, but batched env {self.describe()} autoresets in {has} mode "
                f"(and serves same_step by resetting sub-envs by mask); its sub-envs all step together, so none can "
                f"{cannot}: use autoreset_mode='same_step'"
            )
        return (
            f"{what} needs autoreset mode {wanted}, but batched env {self.describe()} autoresets in {has} mode only "
            "and cannot reset some sub-envs without the others; give it an env that resets sub-envs by mask "
            "(gymnasium's SyncVectorEnv or AsyncVectorEnv of the single envs, EnvPool) or one that autoresets in "
            "the mode needed"
        )

    def check(self, mode: AutoresetMode, limit: int | None, what: str) -> None:
        """Refuse to serve ``what`` if this env cannot autoreset in ``mode`` (or cut episodes at ``limit``).

        Raises:
            ConfigError: Naming the env, the mode and what it can do instead (see :meth:`refusal`).
        """
        refusal = self.refusal(mode, what)
        if refusal is not None:
            raise ConfigError(refusal)
        if limit is not None and not self.partial_reset:
            raise ConfigError(
                f"{what} cuts episodes at {limit} steps, which resets a sub-env apart from the others; batched env "
                f"{self.describe()} cannot (it resets all its sub-envs or none)"
            )

    def attribute(self, name: str) -> Any:
        """What ``get_attr(name)`` reads for each sub-env: the batched env's own attribute."""
        return getattr(self, name)

    # -- env states, sub-env by sub-env (a subclass that can save them overrides these) ----

    def sub_env_refusal(self, index: int) -> str | None:
        """Why sub-env ``index``'s state cannot be saved (``None``: it can), asked before snapshots start.

        The default: ``None`` where the subclass implements :meth:`sub_env_state`, a refusal naming
        this batched env otherwise. Cheap: it is asked of each sub-env at each snapshot.
        """
        if type(self).sub_env_state is BatchedEnv.sub_env_state:
            return self._unsaved()
        return None

    def _unsaved(self) -> str:
        return (
            f"batched env {self.describe()} cannot save its sub-envs' states one by one (pycollect saves "
            "those of gymnasium's SyncVectorEnv of single envs it can save, and of a BatchedEnv implementing "
            "sub_env_state(i) and set_sub_env_state(i, state))"
        )

    def sub_env_state(self, index: int) -> Any:
        """Everything sub-env ``index``'s future depends on, picklable and not shared with the env.

        Raises:
            EnvStateError: This batched env cannot save its sub-envs (:meth:`sub_env_refusal` says why).
        """
        raise EnvStateError(self._unsaved())

    def set_sub_env_state(self, index: int, state: Any) -> None:
        """Put sub-env ``index`` back where :meth:`sub_env_state` found it; the other sub-envs are untouched.

        Raises:
            EnvStateError: This batched env cannot restore its sub-envs, or ``state`` does not fit.
        """
        raise EnvStateError(self._unsaved())

    def describe(self) -> str:
        """A short name: the batched env's class and size."""
        return f"{type(self).__name__} of {self.num_envs} sub-envs"

    def views(self) -> list[SubEnv]:
        """The ``num_envs`` views pycollect steps as envs (the same list every call)."""
        if not self._views:
            count = self.num_envs
            self._rows, self._resets = [None] * count, [None] * count
            self._ended = np.zeros(count, bool)
            self._views = [SubEnv(self, i) for i in range(count)]
        return self._views

    def step_all(self, actions: Any) -> None:
        """Step the batch with every sub-env's action; each view's next ``step`` returns its row.

        Raises:
            EnvOutputError: The batch's results do not have one row per sub-env.
        """
        self.split(self.step_batch(actions))

    def split(self, result: tuple[Any, Any, Any, Any, Mapping[str, Any]]) -> None:
        """Split a :meth:`step_batch` result into each view's row (see :meth:`step_all`)."""
        observations, rewards, terminated, truncated, infos = result
        count = self.num_envs
        rewards, terminated, truncated = (
            self._column(rewards, "rewards"),
            self._column(terminated, "terminated"),
            self._column(truncated, "truncated"),
        )
        rows = _rows(observations, count, self.describe())
        own = self.autoreset_mode
        reset_at = self._ended if own is AutoresetMode.NEXT_STEP else None  # reset by this step (their action ignored)
        finals = infos.get("final_obs") if own is AutoresetMode.SAME_STEP else None
        final_infos = infos.get("final_info") if own is AutoresetMode.SAME_STEP else None
        wanted = self.infos_wanted and bool(infos)
        ended = np.logical_or(terminated, truncated)
        for i in range(count):
            info = info_row(infos, i) if wanted else {}
            if reset_at is not None and reset_at[i]:
                # NEXT_STEP: the sub-env reset instead of stepping; its view's reset() hands this over
                self._resets[i] = (rows[i], info)
                self._rows[i] = None
                continue
            if own is AutoresetMode.SAME_STEP and ended[i]:
                # Reset by the env in this step: the step's row is the final one, its view's reset() the rest
                self._resets[i] = (rows[i], info)
                final_info = info_row(final_infos, i) if wanted and final_infos is not None else {}
                row = finals[i] if finals is not None else rows[i]
                self._rows[i] = (row, float(rewards[i]), bool(terminated[i]), bool(truncated[i]), final_info)
                continue
            self._resets[i] = None
            self._rows[i] = (rows[i], float(rewards[i]), bool(terminated[i]), bool(truncated[i]), info)
        # A SAME_STEP env reset them already; others wait for a reset (theirs at the next step in NEXT_STEP mode)
        self._ended = np.zeros(count, bool) if own is AutoresetMode.SAME_STEP else ended.copy()

    def reset_rows(
        self,
        seeds: Sequence[int | None] | None = None,
        options: Mapping[str, Any] | None = None,
        mask: Sequence[bool] | np.ndarray | None = None,
    ) -> None:
        """Reset the batch (the sub-envs of ``mask``); each reset view's next ``reset`` returns its row.

        Raises:
            ConfigError: ``mask`` leaves some sub-envs out and the env resets none but all, or
                ``options`` are given (a batched env's reset takes seeds only).
        """
        count = self.num_envs
        chosen = None if mask is None else np.asarray(mask, bool)
        if chosen is not None and chosen.all():
            chosen = None
        if chosen is not None and not chosen.any():
            return
        if chosen is not None and not self.partial_reset:
            raise ConfigError(
                f"batched env {self.describe()} cannot reset sub-envs {np.flatnonzero(~chosen).tolist()} apart from "
                "the others"
            )
        if seeds is not None and all(seed is None for seed in seeds):
            seeds = None
        given = None if seeds is None else list(seeds)
        if options:
            try:
                observations, infos = self.reset_batch(given, chosen, options=dict(options))
            except TypeError as exc:
                if "options" not in str(exc):
                    raise
                raise ConfigError(f"batched env {self.describe()} takes no reset options ({dict(options)!r})") from None
        else:
            observations, infos = self.reset_batch(given, chosen)
        wanted = self.infos_wanted and bool(infos)
        which = range(count) if chosen is None else np.flatnonzero(chosen).tolist()
        rows, every = self.rows_of(observations, which)  # every sub-env's observation, or the reset ones only
        for n, i in enumerate(which):
            self._resets[i] = (rows[n], info_row(infos, i if every else n) if wanted else {})
            self._ended[i] = False

    def rows_of(self, observations: Any, which: Sequence[int]) -> tuple[list[Any], bool]:
        """Sub-envs ``which``'s observations from a :meth:`reset_batch` result; whether it held every sub-env's.

        Raises:
            EnvOutputError: The result holds neither every sub-env's observation nor theirs only.
        """
        rows = _rows(observations, None, self.describe())
        if len(rows) == self.num_envs:
            return [rows[i] for i in which], True
        if len(rows) != len(which):
            raise EnvOutputError(
                f"batched env {self.describe()} reset {len(which)} sub-envs and returned {len(rows)} observations"
            )
        return rows, False

    @property
    def resets_pending(self) -> bool:
        """Whether a sub-env ended and waits for its reset (its next row would be a reset's, not a step's)."""
        return bool(self._ended.any()) or self._resets.count(None) != len(self._resets)

    def settle(self, ended: np.ndarray) -> None:
        """After a step stored whole by the caller: the sub-envs whose episode ended and are not reset yet."""
        self._ended = ended.copy()

    def take_step(self, i: int) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """View ``i``'s row of the last :meth:`step_all`."""
        row = self._rows[i]
        if row is None:
            raise ConfigError(
                f"sub-env {i} of batched env {self.describe()} was stepped without its batch: pycollect steps a "
                "batched env's sub-envs together, all of them at every step"
            )
        self._rows[i] = None
        return row

    def take_reset(self, i: int) -> tuple[Any, dict[str, Any]]:
        """View ``i``'s reset row: of the batch's last reset, or of the step that reset it.

        A sub-env that has none (its episode ended, or a trajectory limit cut it) is reset here,
        with every other sub-env that ended and waits for its reset, in one call.
        """
        row = self._resets[i]
        if row is None:
            waiting = self._ended.copy()
            waiting[i] = True
            self.reset_rows(mask=waiting)
            row = self._resets[i]
            assert row is not None
        self._resets[i] = None
        return row

    def close(self) -> None:
        """Close the simulator (once, whichever view asks first)."""
        if not self._closed:
            self._closed = True
            self.close_batch()

    def _column(self, values: Any, name: str) -> np.ndarray:
        array = np.asarray(values)
        if array.shape != (self.num_envs,):
            raise EnvOutputError(
                f"batched env {self.describe()} returned {name} of shape {array.shape}, not ({self.num_envs},)"
            )
        return array


class SubEnv:
    """Sub-env ``index`` of a :class:`BatchedEnv`, a gymnasium-style env to pycollect's steppers.

    Its ``step`` and ``reset`` hand back its row of the batch's last step or reset (see the
    module's docstring). Attributes it lacks are the batched env's (``get_attr`` of a batched
    env's sub-env reads the batched env).
    """

    def __init__(self, batch: BatchedEnv, index: int) -> None:
        self.batch = batch
        self.index = index
        self.observation_space = batch.single_observation_space
        self.action_space = batch.single_action_space
        self.metadata = dict(batch.metadata)
        self.render_mode = batch.render_mode

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """This sub-env's row of the batch's step (``action`` went into it with the others).

        A probe's view (:attr:`BatchedEnv.solo`) steps the batch itself, every sub-env with ``action``.
        """
        if self.batch.solo:
            self.batch.step_all(_repeated(self.action_space, action, self.batch.num_envs))
        return self.batch.take_step(self.index)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """This sub-env's row of the batch's last reset (the batch's reset got ``seed``).

        A probe's view (:attr:`BatchedEnv.solo`) resets the whole batch itself.
        """
        if self.batch.solo:
            self.batch.reset_rows(None if seed is None else [seed] + [None] * (self.batch.num_envs - 1), options)
        return self.batch.take_reset(self.index)

    def close(self) -> None:
        """Close the batched env (once for all its sub-envs)."""
        self.batch.close()

    def get_state(self) -> Any:
        """This sub-env's state (:meth:`BatchedEnv.sub_env_state`): the SnapshotEnv protocol."""
        return self.batch.sub_env_state(self.index)

    def set_state(self, state: Any) -> None:
        """Restore this sub-env's state (:meth:`BatchedEnv.set_sub_env_state`)."""
        self.batch.set_sub_env_state(self.index, state)

    def snapshot_refusal(self) -> str | None:
        """Why this sub-env cannot be saved (:meth:`BatchedEnv.sub_env_refusal`), or ``None``."""
        return self.batch.sub_env_refusal(self.index)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("batch", "index"):
            raise AttributeError(name)
        return self.batch.attribute(name)

    def __repr__(self) -> str:
        return f"<SubEnv {self.index} of {self.batch.describe()}>"


class VectorEnvAdapter(BatchedEnv):
    """A gymnasium 1.x ``VectorEnv`` as a :class:`BatchedEnv`, in whichever autoreset mode it declares.

    Partial resets (``reset(options={"reset_mask": mask})``) are used where the env takes them:
    gymnasium's ``SyncVectorEnv`` and ``AsyncVectorEnv``, a ``DISABLED``-mode env (gymnasium's
    rule), and any env whose ``metadata`` says ``"pycollect.partial_reset": True``. Others (a vector
    entry point like ``CartPoleVectorEnv``, which ignores a mask and resets every sub-env) are
    never handed one.

    Seeds: a list, one per sub-env, where the env takes one (the gymnasium wrappers of single
    envs); otherwise the first sub-env's seed seeds the batch (one stream for all its sub-envs).
    """

    declares_batch_spaces = True
    """Whether ``observation_space`` and ``action_space`` are the batch's (gymnasium's rule), checked as such."""

    def __init__(self, env: Any) -> None:
        super().__init__()
        self.env = env
        self.num_envs = int(env.num_envs)
        self._check_spaces()
        self.single_observation_space = env.single_observation_space
        self.single_action_space = env.single_action_space
        self.metadata = dict(getattr(env, "metadata", {}) or {})
        self.render_mode = getattr(env, "render_mode", None)
        self.autoreset_mode = _mode(self.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP), self.describe())
        self.partial_reset = (
            _wraps_single_envs(env)
            or self.autoreset_mode is AutoresetMode.DISABLED
            or bool(self.metadata.get("pycollect.partial_reset", False))
        )
        self._seed_list = _wraps_single_envs(env)

    def describe(self) -> str:
        """The vector env's class and size."""
        return f"{type(self.env).__name__} of {self.env.num_envs} sub-envs"

    def _check_spaces(self) -> None:
        """Refuse a vector env whose spaces are not a sub-env's and the batch's as gymnasium's are.

        Raises:
            ConfigError: A ``single_*_space`` is missing, or (where the env declares its batch's
                spaces) ``observation_space`` or ``action_space`` is not the single space batched
                over the sub-envs (``gymnasium.vector.utils.batch_space``); both are named.
        """
        from gymnasium.vector.utils import batch_space

        for kind in ("observation", "action"):
            single = getattr(self.env, f"single_{kind}_space", None)
            if single is None:
                raise ConfigError(
                    f"batched env {self.describe()} has no single_{kind}_space: a gymnasium VectorEnv declares one "
                    f"sub-env's space there (and the batch's as {kind}_space)"
                )
            declared = getattr(self.env, f"{kind}_space", None)
            if not self.declares_batch_spaces or declared is None:
                continue
            try:
                expected = batch_space(single, self.num_envs)
            except (TypeError, ValueError):
                continue  # a space gymnasium cannot batch: the field checks refuse it by name
            if declared != expected:
                raise ConfigError(
                    f"batched env {self.describe()} declares {kind}_space {declared}, not its single_{kind}_space "
                    f"batched over its {self.num_envs} sub-envs as gymnasium batches it "
                    f"(gymnasium.vector.utils.batch_space): {expected}"
                )

    def attribute(self, name: str) -> Any:
        """The vector env's attribute ``name`` (through its wrappers)."""
        env = self.env
        return env.get_wrapper_attr(name) if hasattr(env, "get_wrapper_attr") else getattr(env, name)

    def step_batch(self, actions: Any) -> tuple[Any, Any, Any, Any, Mapping[str, Any]]:
        """``env.step(actions)``."""
        observations, rewards, terminated, truncated, infos = self.env.step(actions)
        return observations, rewards, terminated, truncated, infos

    def reset_batch(
        self, seeds: Sequence[int | None] | None, mask: np.ndarray | None, options: Mapping[str, Any] | None = None
    ) -> tuple[Any, Mapping[str, Any]]:
        """``env.reset(seed=..., options={**options, "reset_mask": mask})``: every sub-env's observation comes back."""
        seed: Any = seeds
        if seeds is not None and not self._seed_list:
            seed = seeds[0] if mask is None else None  # one stream for the batch, seeded once
        given = dict(options or {})
        if mask is not None:
            given["reset_mask"] = mask
        observations, infos = self.env.reset(seed=seed, options=given or None)
        return observations, infos

    def close_batch(self) -> None:
        """``env.close()``."""
        self.env.close()

    def sub_env_refusal(self, index: int) -> str | None:
        """Why sub-env ``index`` cannot be saved: ``None`` for a ``SyncVectorEnv``'s that pycollect can save."""
        if not self._saves_sub_envs():
            return self._unsaved()
        why = env_state.snapshot_refusal(self.env.envs[index])
        return None if why is None else f"sub-env {index} of batched env {self.describe()} cannot be saved: {why}"

    def sub_env_state(self, index: int) -> Any:
        """A ``SyncVectorEnv``'s sub-env ``index``: its env's state and whether it autoresets at the next step."""
        if not self._saves_sub_envs():
            raise EnvStateError(self._unsaved())
        autoreset = getattr(self.env, "_autoreset_envs", None)  # NEXT_STEP mode's: gymnasium 1.x
        return {
            "env": env_state.get_env_state(self.env.envs[index]),  # raises, naming the part, for one it cannot
            "autoreset": None if autoreset is None else bool(autoreset[index]),
        }

    def set_sub_env_state(self, index: int, state: Any) -> None:
        """Restore a ``SyncVectorEnv``'s sub-env ``index`` (its env, and its pending autoreset)."""
        if not self._saves_sub_envs():
            raise EnvStateError(self._unsaved())
        if not isinstance(state, dict) or set(state) != {"env", "autoreset"}:
            raise EnvStateError(f"not a sub-env state of batched env {self.describe()}: got {type(state).__name__}")
        env_state.set_env_state(self.env.envs[index], state["env"])
        autoreset = getattr(self.env, "_autoreset_envs", None)
        if autoreset is not None and state["autoreset"] is not None:
            autoreset[index] = state["autoreset"]

    def _saves_sub_envs(self) -> bool:
        """Whether the env is gymnasium's ``SyncVectorEnv``, whose sub-envs are envs of this process."""
        from gymnasium.vector import SyncVectorEnv

        return isinstance(self.env, SyncVectorEnv)


class EnvPoolAdapter(VectorEnvAdapter):
    """An EnvPool env (its gymnasium API, sync mode) as a :class:`BatchedEnv`.

    EnvPool autoresets in ``NEXT_STEP`` mode and resets sub-envs by id (``reset(env_ids)``, which
    returns theirs only), so it serves ``SAME_STEP`` too. Its sub-envs are seeded when the pool is
    built (sub-env ``i`` with ``seed + i``, EnvPool's rule): with ``remake`` (the envpool backend
    gives one), a full reset whose first seed is not the pool's rebuilds the pool with that seed;
    without, a reset's seeds are not passed on. ``task``: the EnvPool task id, for messages (an
    EnvPool object does not say it; its class name is used without one).
    """

    declares_batch_spaces = False  # EnvPool's observation_space and action_space are a sub-env's

    def __init__(
        self, env: Any, remake: Callable[[int], Any] | None = None, seed: int | None = None, task: str | None = None
    ) -> None:
        self.task = task or getattr(getattr(env, "spec", None), "id", None) or type(env).__name__
        super().__init__(env)
        self.autoreset_mode = AutoresetMode.NEXT_STEP
        self.partial_reset = True
        self._seed_list = False
        self._remake, self._seed = remake, seed

    def describe(self) -> str:
        """EnvPool's task and size: ``EnvPool Pong-v5 of 4 sub-envs``."""
        return f"EnvPool {self.task} of {self.num_envs} sub-envs"

    def reset_batch(
        self, seeds: Sequence[int | None] | None, mask: np.ndarray | None, options: Mapping[str, Any] | None = None
    ) -> tuple[Any, Mapping[str, Any]]:
        """``env.reset()`` or ``env.reset(env_ids)``: the observations of the reset sub-envs, in id order.

        A full reset with a first seed other than the pool's rebuilds the pool with it (where the
        backend gave a way to), since EnvPool takes seeds only when a pool is built.
        """
        if options:
            raise ConfigError(f"batched env {self.describe()} takes no reset options ({dict(options)!r})")
        first = None if seeds is None else seeds[0]
        if mask is None and first is not None and self._remake is not None and first != self._seed:
            self.env.close()
            self.env, self._seed = self._remake(first), first
        if mask is None:
            observations, infos = self.env.reset()
        else:
            observations, infos = self.env.reset(np.flatnonzero(mask).astype(np.int32))
        return observations, infos


def is_view(env: Any) -> bool:
    """Whether ``env`` is a sub-env of a batched env (:class:`SubEnv`)."""
    return isinstance(env, SubEnv)


def check_probe(probe: Any, envs_per_worker: int, mode: AutoresetMode, limit: int | None, what: str) -> None:
    """In the trainer, before any worker starts: a batched probe env fits ``envs_per_worker`` and ``mode``.

    Nothing to check for a single env.

    Raises:
        ConfigError: The batched env has another number of sub-envs than ``envs_per_worker``, or
            cannot serve ``mode`` (or the trajectory limit ``limit``) for ``what``.
    """
    if not isinstance(probe, SubEnv):
        return
    batch = probe.batch
    if batch.num_envs != envs_per_worker:
        raise ConfigError(sub_env_count_error(batch, envs_per_worker))
    batch.check(mode, limit, what)


def sub_env_count_error(batch: BatchedEnv, envs_per_worker: int) -> str:
    """Why ``batch`` cannot be a worker's ``envs_per_worker`` envs."""
    return (
        f"the env built a batched env of {batch.num_envs} sub-envs ({batch.describe()}), but envs_per_worker is "
        f"{envs_per_worker}: one batched env is a worker's envs; set envs_per_worker={batch.num_envs}"
    )


def is_batched(obj: Any) -> bool:
    """Whether ``obj`` is a batched env pycollect steps: a :class:`BatchedEnv`, a gymnasium ``VectorEnv``, EnvPool."""
    return isinstance(obj, BatchedEnv) or _is_vector_env(obj) or _is_envpool(obj)


def as_batched(obj: Any) -> BatchedEnv:
    """``obj`` as a :class:`BatchedEnv` (itself if it is one).

    Raises:
        ConfigError: ``obj`` is not a batched env.
    """
    if isinstance(obj, BatchedEnv):
        return obj
    if _is_envpool(obj):
        return EnvPoolAdapter(obj)
    if _is_vector_env(obj):
        return VectorEnvAdapter(obj)
    raise ConfigError(f"{type(obj).__name__} is not a batched env (a gymnasium VectorEnv, EnvPool env or BatchedEnv)")


def batch_of(envs: Sequence[Any]) -> BatchedEnv | None:
    """The batched env whose views ``envs`` are, in order, all of them (``None``: single envs).

    Raises:
        ConfigError: Some are views and some not, or views of several batches or out of order.
    """
    if not envs or not isinstance(envs[0], SubEnv):
        if any(isinstance(env, SubEnv) for env in envs):
            raise ConfigError("a group of envs mixes sub-envs of a batched env with single envs")
        return None
    batch = envs[0].batch
    if list(envs) != batch.views():
        raise ConfigError(f"a group of envs must be every sub-env of {batch.describe()}, in order")
    return batch


def _repeated(space: Any, action: Any, count: int) -> Any:
    """``action`` for each of ``count`` sub-envs, batched as gymnasium batches ``space``."""
    return batch_items(space, [action] * count)


def batch_items(space: Any, items: Sequence[Any]) -> Any:
    """``items`` of ``space``, one per sub-env, batched as gymnasium batches the space (``batch_space``)."""
    from gymnasium.vector.utils import concatenate, create_empty_array

    out = create_empty_array(space, len(items))
    assert out is not None  # None only for a space gymnasium cannot batch, which no field has
    return concatenate(space, items, out)


def _is_vector_env(obj: Any) -> bool:
    return any(
        klass.__module__.split(".")[0] == "gymnasium" and klass.__name__ == "VectorEnv" for klass in type(obj).__mro__
    )


def _is_envpool(obj: Any) -> bool:
    return any(klass.__module__.split(".")[0] == "envpool" for klass in type(obj).__mro__) or (
        type(obj).__module__ == "abc" and "EnvPool" in type(obj).__name__
    )


def _wraps_single_envs(env: Any) -> bool:
    """Whether ``env`` is gymnasium's ``SyncVectorEnv`` or ``AsyncVectorEnv`` (seeds per sub-env, reset masks)."""
    from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv

    return isinstance(env, SyncVectorEnv | AsyncVectorEnv)


def _mode(value: Any, what: str) -> AutoresetMode:
    try:
        return value if isinstance(value, AutoresetMode) else AutoresetMode(value)
    except ValueError:
        raise ConfigError(f"batched env {what} declares autoreset_mode {value!r}, not one of gymnasium's") from None


def _rows(observations: Any, count: int | None, what: str) -> list[Any]:
    """One observation per sub-env from a batched one (views of its arrays; dicts and tuples rebuilt per row)."""
    if isinstance(observations, Mapping):
        columns = {key: _rows(value, count, what) for key, value in observations.items()}
        size = len(next(iter(columns.values()))) if columns else 0
        return [{key: rows[i] for key, rows in columns.items()} for i in range(size)]
    if isinstance(observations, tuple):
        parts = [_rows(value, count, what) for value in observations]
        size = len(parts[0]) if parts else 0
        return [tuple(rows[i] for rows in parts) for i in range(size)]
    array = observations if isinstance(observations, np.ndarray) else np.asarray(observations)
    if array.ndim == 0 or (count is not None and array.shape[0] != count):
        raise EnvOutputError(
            f"batched env {what} returned observations of shape {array.shape}, not one row per sub-env ({count})"
        )
    return list(array)
