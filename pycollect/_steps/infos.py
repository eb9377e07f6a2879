"""Gymnasium's vector infos, rebuilt in the trainer from the info fields and what each group returned.

A step's infos come from two places (see :mod:`pycollect._steps.info_fields`): the info fields
(entries of a fixed kind, one value and one mask bit per env, in arrays) and the info material
of each :class:`~pycollect._steps.group.EnvGroup` (see :data:`~pycollect._steps.group.Material`):
the entries that fit no field. :class:`InfoMerger` turns both into the one ``infos`` dict a
gymnasium vector env returns, exactly as gymnasium's own ``VectorEnv._add_info`` would have
built it env by env: keys, dtypes (an array's dtype is that of the first env that has the key),
nesting and the ``_key`` masks. Each key's array depends only on that key's values, so the
fields' arrays are gymnasium's as they are; where an entry reached the trainer both ways in
one step (a value of another kind than its field's), that key is rebuilt env by env.

A batched env's group may keep its infos whole instead (a
:class:`~pycollect.envs._vector_infos.WholeInfos`: vector info dicts over its envs, as
gymnasium would have merged them); when every group did and the fields hold nothing of this
step, the groups' dicts are joined with array operations
(:func:`~pycollect.envs._vector_infos.combine`), else read env by env as any material.

In ``SAME_STEP`` mode an env whose episode ended adds, as ``SyncVectorEnv`` does,
``infos["final_obs"]`` (an object array of observations in the single observation space's
structure) and ``infos["final_info"]`` (a nested info dict), each with its mask, and then the
info of the reset that followed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from pycollect._steps.group import Material, material_entries
from pycollect._steps.info_fields import InfoArrays
from pycollect.envs._vector_infos import WholeInfos, combine

__all__ = ["InfoMerger"]


class InfoMerger(gym.vector.VectorEnv[Any, Any, np.ndarray]):
    """Holds ``num_envs`` for gymnasium's ``VectorEnv._add_info``, the one merge of infos used.

    It is a gymnasium ``VectorEnv`` only to call that method as gymnasium defines it; it
    steps nothing.

    Args:
        num_envs: Envs of the vector env (the length of every info array).
    """

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs

    def merge(
        self,
        parts: Sequence[tuple[int, Material]],
        final_obs: Callable[[int], Any] | None = None,
        fields: InfoArrays | None = None,
        ended: np.ndarray | None = None,
        rows: np.ndarray | slice | None = None,
    ) -> dict[str, Any]:
        """The vector infos of one step or reset.

        Args:
            parts: ``(index of the group's first env, its material)`` for each group that
                returned material, in env order.
            final_obs: Env ``n``'s final observation (``SAME_STEP`` mode).
            fields: The info fields (``None``: every entry is in the material).
            ended: ``SAME_STEP`` mode: which envs' episodes ended at this step (they get
                ``final_obs`` and ``final_info``, to which a material entry's final info adds);
                ``None``: the material says it (an entry whose final info is not ``None`` ended).
            rows: The rows of ``fields`` that are these ``num_envs`` envs (``None``: all).
        """
        if not parts and ended is None and (fields is None or not fields.fields):
            return {}  # no material, no field, no final observation: the common step of an env without infos
        if any(isinstance(material, WholeInfos) for _, material in parts):
            whole = self._whole(parts, final_obs, fields, ended, rows)
            if whole is not None:
                return whole
            parts = [(offset, material_entries(material)) for offset, material in parts]
        infos: dict[str, Any] = fields.infos(rows=rows) if fields is not None else {}
        from_fields = {False: set(infos), True: set()}
        if ended is not None and ended.any():
            finals: dict[str, Any] = fields.infos(final=True, rows=rows) if fields is not None else {}
            from_fields[True] = set(finals)
            self._add_finals(infos, finals, final_obs, ended)
        # Entries that reached the trainer both ways, by (final, key): env -> value.
        both: dict[tuple[bool, str], dict[int, Any]] = {}
        for offset, material in parts:
            for index, info, final in material_entries(material):
                env = offset + index
                if final is not None and ended is None:  # the material alone says the episode ended
                    if final_obs is None:
                        raise ValueError("an env's episode ended in SAME_STEP mode but there are no final observations")
                    infos = self._add_info(infos, {"final_obs": final_obs(env), "final_info": final}, env)
                elif final:
                    self._add(infos["final_info"], final, env, from_fields[True], True, both)
                if info:
                    self._add(infos, info, env, from_fields[False], False, both)
        for (of_final, key), values in both.items():
            assert fields is not None  # a key reaches the trainer both ways only where there are fields
            target = infos["final_info"] if of_final else infos
            self._rebuild(target, key, values, fields)
        return infos

    def _whole(
        self,
        parts: Sequence[tuple[int, Material]],
        final_obs: Callable[[int], Any] | None,
        fields: InfoArrays | None,
        ended: np.ndarray | None,
        rows: np.ndarray | slice | None,
    ) -> dict[str, Any] | None:
        """The infos of groups that all kept theirs whole, joined with array operations; ``None`` where they cannot be.

        They cannot where a group returned per-env entries, the info fields hold entries of
        this step (other groups' envs), the parts do not join (see
        :func:`~pycollect.envs._vector_infos.combine`), or a final info comes with no ``ended``:
        then every part is read env by env, with the same result.
        """
        wholes = [(offset, material) for offset, material in parts if isinstance(material, WholeInfos)]
        if len(wholes) != len(parts):
            return None
        if fields is not None and (fields.infos(rows=rows) or fields.infos(final=True, rows=rows)):
            return None
        infos = combine([(offset, part) for offset, whole in wholes for part in whole.parts], self.num_envs)
        if infos is None:
            return None
        if ended is None:
            return None if any(whole.finals for _, whole in wholes) else infos
        if ended.any():
            finals = combine([(offset, part) for offset, whole in wholes for part in whole.finals or ()], self.num_envs)
            if finals is None:
                return None
            self._add_finals(infos, finals, final_obs, ended)
        return infos

    def _add_finals(
        self, infos: dict[str, Any], finals: dict[str, Any], final_obs: Callable[[int], Any] | None, ended: np.ndarray
    ) -> None:
        """Add ``SAME_STEP``'s ``final_obs`` (each ended env's) and ``final_info`` (``finals``), with their masks."""
        if final_obs is None:
            raise ValueError("an env's episode ended in SAME_STEP mode but there are no final observations")
        observations = np.full(self.num_envs, None, dtype=object)
        for env in np.flatnonzero(ended).tolist():
            observations[env] = final_obs(env)
        infos["final_obs"], infos["_final_obs"] = observations, ended.copy()
        infos["final_info"], infos["_final_info"] = finals, ended.copy()

    def _add(
        self,
        target: dict[str, Any],
        entries: dict[str, Any],
        env: int,
        field_keys: set[str],
        final: bool,
        both: dict[tuple[bool, str], dict[int, Any]],
    ) -> None:
        """Gymnasium's ``_add_info`` of ``entries`` as env ``env``'s, but for keys some field filled."""
        plain = {}
        for key, value in entries.items():
            if key in field_keys:
                both.setdefault((final, key), {})[env] = value
            else:
                plain[key] = value
        if plain:
            merged = self._add_info(target, plain, env)
            if merged is not target:  # _add_info fills the dict it is given; keep the caller's object
                target.update(merged)

    def _rebuild(self, target: dict[str, Any], key: str, values: dict[int, Any], fields: InfoArrays) -> None:
        """Rebuild ``target[key]`` env by env from its field's values and the material's ``values``."""
        field = fields.field(key)
        assert field is not None
        stored, mask = target[key], target[f"_{key}"]
        everyone = {env: field.python_value(stored[env]) for env in np.flatnonzero(mask).tolist()}
        everyone.update(values)
        rebuilt: dict[str, Any] = {}
        for env in sorted(everyone):
            rebuilt = self._add_info(rebuilt, {key: everyone[env]}, env)
        target[key], target[f"_{key}"] = rebuilt[key], rebuilt[f"_{key}"]
