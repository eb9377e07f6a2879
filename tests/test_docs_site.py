"""The built documentation site: its links resolve, and its API reference names every public name.

Marked ``docs`` (deselected from the normal run): it needs the ``docs`` extra. ``.ci/run`` builds
the site with ``mkdocs build --strict`` and runs ``python -m pytest -m docs tests/test_docs_site.py``
with ``PYCOLLECT_DOCS_SITE`` naming the built folder; without it, the fixture builds the site.

The link checker works offline on the built HTML: every ``href`` and ``src`` that stays inside the
site must name a file of the site, and its ``#fragment`` an ``id`` in that file. Links that leave
the site (the forge, PyPI, other projects' docs) are not fetched.
"""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
import zlib
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

pytestmark = pytest.mark.docs

ROOT = Path(__file__).resolve().parents[1]
CORE = ["pycollect", *(f"pycollect.{name}" for name in ("envs", "weights", "devices", "engines", "inference"))]
CORE += [f"pycollect.{name}" for name in ("testing", "vector", "torchrl", "metrics")]
PLUGIN_PACKAGES = {
    "pycollect_torchrl": "plugins/pycollect-torchrl/src/pycollect_torchrl/__init__.py",
    "pycollect_pettingzoo": "plugins/pycollect-pettingzoo/src/pycollect_pettingzoo/__init__.py",
    "pycollect_ray": "plugins/pycollect-ray/src/pycollect_ray/__init__.py",
    "pycollect_dmcontrol": "plugins/pycollect-dmcontrol/src/pycollect_dmcontrol/__init__.py",
    "pycollect_jax": "plugins/pycollect-jax/src/pycollect_jax/__init__.py",
}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built site: ``PYCOLLECT_DOCS_SITE``, or a strict build into a temporary folder."""
    if given := os.environ.get("PYCOLLECT_DOCS_SITE"):
        return Path(given).resolve()
    folder = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(folder)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=True,
        timeout=300,
    )
    return folder


_LOADED = {"link", "img", "script", "source", "iframe"}  # what a browser fetches to show a page


class _Page(HTMLParser):
    """The ids of an HTML page, and the URLs it links to."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.urls: list[tuple[str, str]] = []  # (tag, URL)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for name in ("id", "name") if tag == "a" else ("id",):
            if values.get(name):
                self.ids.add(str(values[name]))
        for name in ("href", "src"):
            if values.get(name) is not None and tag in {"a", *_LOADED}:
                self.urls.append((tag, str(values[name])))


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def _target(site: Path, page: Path, url: str) -> tuple[Path, str] | None:
    """The file of the site ``url`` names, and its fragment; ``None`` for a link out of the site."""
    parts = urlsplit(url)
    if parts.scheme or parts.netloc:
        return None  # http(s):, mailto:, data:, //host/...
    if not parts.path:
        return page, unquote(parts.fragment)
    base = site if parts.path.startswith("/") else page.parent
    target = (base / unquote(parts.path).lstrip("/")).resolve()
    if parts.path.endswith("/") or target.is_dir():
        target = target / "index.html"
    return target, unquote(parts.fragment)


def _html_pages(site: Path) -> Iterator[Path]:
    yield from sorted(site.rglob("*.html"))


def test_every_internal_link_and_anchor_resolves(site: Path) -> None:
    pages = {path: _parse(path) for path in _html_pages(site)}
    assert len(pages) >= 30, f"only {len(pages)} pages in {site}"
    broken = []
    checked = 0
    for path, page in pages.items():
        for _, url in page.urls:
            target = _target(site, path, url)
            if target is None:
                continue
            file, fragment = target
            checked += 1
            where = f"{path.relative_to(site)}: {url}"
            if not file.is_relative_to(site.resolve()) or not file.is_file():
                broken.append(f"{where} (no file {file})")
            elif fragment and file.suffix == ".html":
                ids = pages[file].ids if file in pages else _parse(file).ids
                if fragment not in ids:
                    broken.append(f"{where} (no id {fragment!r} in {file.relative_to(site)})")
    assert checked > 1000, f"only {checked} internal links checked"
    assert not broken, f"{len(broken)} broken links:\n" + "\n".join(broken[:50])


def _inventory(site: Path) -> set[str]:
    """The names in the site's objects.inv (Sphinx's format, which mkdocstrings writes)."""
    data = (site / "objects.inv").read_bytes()
    for _ in range(4):  # four header lines, then zlib
        data = data[data.index(b"\n") + 1 :]
    return {line.split(" ", 1)[0] for line in zlib.decompress(data).decode().splitlines()}


def _static_all(path: Path) -> list[str]:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"{path} has no __all__")


def test_the_api_reference_names_every_public_name(site: Path) -> None:
    documented = _inventory(site)
    missing = []
    for module_name in CORE:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            if f"{module_name}.{name}" in documented:
                continue
            value = getattr(module, name)  # a lazy export (pycollect.torchrl.ParallelEnv: the plugin's)
            canonical = f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}"
            if canonical not in documented:
                missing.append(f"{module_name}.{name}")
    for package, init in PLUGIN_PACKAGES.items():  # read, not imported: Ray need not be installed
        for name in _static_all(ROOT / init):
            if f"{package}.{name}" not in documented and not any(
                entry.startswith(f"{package}.") and entry.endswith(f".{name}") for entry in documented
            ):
                missing.append(f"{package}.{name}")
    assert not missing, f"public names missing from the API reference (docs/reference/): {missing}"


def test_the_cli_reference_is_the_commands_help(site: Path) -> None:
    from pycollect.cli import build_parser

    page = (site / "cli" / "index.html").read_text()
    parser = build_parser()
    subcommands = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices
    assert "usage: pycollect [-h]" in page
    for name in subcommands:
        assert f"usage: pycollect {name} [-h]" in page, name


def test_the_site_fetches_nothing_when_viewed(site: Path) -> None:
    # No web fonts, scripts, styles or images from elsewhere: the pages work offline.
    fetched = [
        f"{path.relative_to(site)}: <{tag}> {url}"
        for path in _html_pages(site)
        for tag, url in _parse(path).urls
        if tag in _LOADED and (urlsplit(url).scheme in {"http", "https"} or url.startswith("//"))
    ]
    assert not fetched, "\n".join(fetched[:20])
