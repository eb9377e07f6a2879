"""The native module, :mod:`pycollect._core`, for every module of the package that uses it.

Its users import it from here (``from pycollect._native import _core``), not with
``from pycollect import _core``: that line names the package root, which exports names from every
layer, so tools that draw imports (``lint-imports``, ``grimp``) would draw an arrow from each
native user up to the whole package, and a circle through it. Here that line is written once,
and pyproject.toml's ``[tool.importlinter]`` ignores it by name: what it imports is the
extension module, a leaf that imports nothing of ours, which those tools cannot see (they read
``.py`` files).

Importing this module costs nothing: the package root has already imported ``_core``.
"""

from __future__ import annotations

from pycollect import _core

__all__ = ["_core"]
