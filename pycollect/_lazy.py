"""Package attributes imported on first use, so that importing a package stays cheap."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: dict[str, Any], moved: Mapping[str, str] | None = None
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module ``__getattr__`` and ``__dir__`` that import ``exports`` (name -> module) on first use.

    Args:
        package: The package's ``__name__``, for the error message.
        exports: Which module each lazily exported name comes from.
        namespace: The package's ``globals()``, where an imported name is cached.
        moved: Names this package no longer exports, with where they are now: asking for one
            is an ``AttributeError`` that says so (and imports nothing).
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            if moved and name in moved:
                raise AttributeError(
                    f"module {package!r} has no attribute {name!r}: it moved to {moved[name]} "
                    f"(from {moved[name]} import {name})"
                )
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
