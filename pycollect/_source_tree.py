"""A package without its native module: use the installed pycollect in its place, or say what to do.

A clone's ``pycollect/`` is a source tree: its native module (``pycollect._core``) is built by an
install and is not part of the tree, except after an editable install (``pip install -e .``),
which builds it into the tree. Python puts the working directory (``python``, ``python -c``,
``python -m``) or the script's directory first on ``sys.path``, so in the clone's root
``import pycollect`` finds the tree, not the package that ``pip install .`` installed.

``pycollect/__init__.py`` calls :func:`use_installed_package` when ``pycollect._core`` is missing.
If the first pycollect further along ``sys.path`` that has a native module also has the same
Python files as the tree (it was installed from it), the package switches over to it before
anything else of it is imported: every module of pycollect, the native one included, then comes
from the installed package, and ``pycollect.__file__`` and ``__path__`` name it. Only the tree's
``__init__.py`` and this module have run, byte for byte the installed ones. Otherwise the import
fails with an :class:`ImportError` that names the tree, the installed package (if any) and the
files that differ, and says what to do; a tree's Python files are never run with a native module
built from other sources.

Only Python files are compared: a native module built from other Rust sources than the tree's
goes unnoticed, as it does from any other directory (and after an editable install, until the
next build).

Standard library only: this runs before the package can import anything of its own.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType

__all__ = ["use_installed_package"]

_NATIVE = "_core"
_SHOWN_DIFFERENCES = 3


def use_installed_package(package: ModuleType) -> None:
    """Switch ``package``, whose native module is missing, over to an identical installed copy, or raise.

    Called by the package's ``__init__`` while it is being imported, before it imports anything
    else of its own (module docs).

    Args:
        package: The package being imported (``sys.modules["pycollect"]``).

    Raises:
        ImportError: No installed copy with a native module was found further along
            ``sys.path``, or the first one found has other Python files. The message names
            the package's directory, the installed copy and the files that differ, and what
            to do.
    """
    sys.modules.pop(__name__, None)  # a later import of this module gets the installed copy, not the tree's
    own_spec = package.__spec__
    if own_spec is None or not own_spec.submodule_search_locations:
        raise ImportError(f"{package.__name__} has no location to look for its native module in")
    tree = os.path.abspath(own_spec.submodule_search_locations[0])
    installed = _installed_copy(package.__name__, tree)
    location = None if installed is None else _location(installed)
    differences = [] if location is None else _differences(tree, location)
    if installed is not None and not differences:
        _switch(own_spec, package, installed)
        return
    raise ImportError(
        _message(package.__name__, tree, location, differences),
        name=f"{package.__name__}.{_NATIVE}",
        path=tree,
    ) from None


def _location(spec: ModuleSpec) -> str:
    """The directory of a package found by :func:`_installed_copy`."""
    assert spec.submodule_search_locations  # checked there
    return os.path.abspath(spec.submodule_search_locations[0])


def _installed_copy(name: str, tree: str) -> ModuleSpec | None:
    """The first package ``name`` on ``sys.path`` outside ``tree`` that has a native module.

    That is the package Python imports from a directory that does not hold ``tree``.
    """
    for entry in sys.path:
        spec = importlib.machinery.PathFinder.find_spec(name, [entry])
        if spec is None or spec.origin is None or not spec.submodule_search_locations:
            continue  # not found there, or a namespace package
        location = _location(spec)
        if not _same_directory(location, tree) and _has_native_module(location):
            return spec
    return None


def _same_directory(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _has_native_module(directory: str) -> bool:
    return any(os.path.isfile(os.path.join(directory, _NATIVE + suffix)) for suffix in _native_suffixes())


def _native_suffixes() -> list[str]:
    return importlib.machinery.EXTENSION_SUFFIXES


def _python_files(root: str) -> set[str]:
    """The ``.py`` files under ``root``, relative to it (``__pycache__`` left out)."""
    files: set[str] = set()
    for directory, subdirectories, names in os.walk(root):
        subdirectories[:] = [sub for sub in subdirectories if sub != "__pycache__"]
        files.update(os.path.relpath(os.path.join(directory, name), root) for name in names if name.endswith(".py"))
    return files


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError:
        return None


def _differences(tree: str, installed: str) -> list[str]:
    """The Python files that are not the same in both packages (in one only, or other bytes), sorted."""
    ours, theirs = _python_files(tree), _python_files(installed)
    differences = []
    for relative in sorted(ours | theirs):
        if relative not in ours or relative not in theirs:
            differences.append(relative)
            continue
        text = _read(os.path.join(tree, relative))
        if text is None or text != _read(os.path.join(installed, relative)):
            differences.append(relative)
    return differences


def _switch(own_spec: ModuleSpec, package: ModuleType, installed: ModuleSpec) -> None:
    """Make the package being imported the installed copy: its submodules are looked up there.

    The spec is changed in place, not replaced: the import system marks it as initialising,
    which makes another thread that imports the package meanwhile wait for it.
    """
    locations = own_spec.submodule_search_locations
    assert locations is not None and installed.submodule_search_locations is not None
    locations[:] = installed.submodule_search_locations  # the list that is also the package's __path__
    own_spec.origin = installed.origin
    own_spec.loader = installed.loader
    own_spec.cached = installed.cached
    package.__path__ = locations
    package.__file__ = installed.origin
    package.__loader__ = installed.loader
    vars(package)["__cached__"] = installed.cached


def _message(name: str, tree: str, installed: str | None, differences: list[str]) -> str:
    """What happened and what to do (the :class:`ImportError` of :func:`use_installed_package`)."""
    root = os.path.dirname(tree)
    source_tree = os.path.isfile(os.path.join(root, "pyproject.toml"))
    where = "a source tree without its native module" if source_tree else "a package without its native module"
    lines = [f"{name} was imported from {tree}, {where} ({name}.{_NATIVE})."]
    foreign = _foreign_builds(tree)
    if foreign:
        lines.append(
            f"It holds {', '.join(foreign)}, which this Python ({sys.implementation.cache_tag}) does not load: "
            f"a build for another Python (this one loads {_NATIVE} with the suffix {', '.join(_native_suffixes())})."
        )
    if source_tree:
        lines.append(
            "Only an install builds the native module; Python found this tree first on sys.path "
            "(the working directory, or the script's directory, comes first)."
        )
    if installed is None:
        lines.append(f"No installed {name} was found elsewhere on sys.path.")
    else:
        shown = ", ".join(differences[:_SHOWN_DIFFERENCES])
        if len(differences) > _SHOWN_DIFFERENCES:
            shown += f" and {len(differences) - _SHOWN_DIFFERENCES} more"
        lines.append(
            f"The {name} installed at {installed} was not used in its place: its Python files differ from "
            f"this tree's ({shown}): it was installed from other sources, or the tree changed since."
        )
    if source_tree:
        lines.append(
            f"To work on this tree, install it in editable mode, which builds the native module into it "
            f"(in {root}): pip install -e ."
        )
        if installed is None:
            lines.append(
                "Or install it (pip install .): while their Python files are the same, the installed "
                "package is then used in this tree's place."
            )
        else:
            lines.append(
                "Or install it again from this tree (pip install .), or run from another directory to use "
                "the installed package as it is."
            )
    else:
        lines.append("Reinstall it: pip install --force-reinstall --no-deps pycollect-rl")
    return "\n".join(lines)


def _foreign_builds(tree: str) -> list[str]:
    """Native modules in ``tree`` that this interpreter does not load (built for another Python), sorted."""
    loadable = {_NATIVE + suffix for suffix in _native_suffixes()}
    try:
        names = os.listdir(tree)
    except OSError:
        return []
    return sorted(
        name
        for name in names
        if name.startswith(_NATIVE + ".") and name.endswith((".so", ".pyd")) and name not in loadable
    )
