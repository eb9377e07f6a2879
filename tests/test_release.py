"""What users install: the distribution name, and the built wheel and sdist.

The first tests run in the normal suite: the name pycollect is installed under is the one
pyproject.toml declares, the built-in plugins report it, and the plugin packages depend on it.

The tests marked ``release`` check built artifacts: the abi3 manylinux_2_28 wheel and the sdist.
They are deselected from the normal run; ``bash .ci/run`` builds the artifacts as a release does
and runs ``python -m pytest -m release tests/test_release.py`` with ``PYCOLLECT_RELEASE_DIST``
naming the folder that holds them. Without that variable these tests build the artifacts
themselves, with the same commands (maturin and ziglang must be installed). auditwheel's verdict
on the wheel is checked in .ci/run, where the tool is installed.
"""

from __future__ import annotations

import email.message
import email.parser
import importlib.metadata
import os
import re
import shutil
import subprocess
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import pycollect
from pycollect import plugins

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
NAME = PROJECT["name"]
REPOSITORY = "https://github.com/pycollect/pycollect"
PLUGIN_PACKAGES = [
    "plugins/pycollect-dmcontrol",
    "plugins/pycollect-torchrl",
    "plugins/pycollect-jax",
    "tests/plugin_packages/pycollect-example",
]
GLIBC_FLOOR = 28  # torch's own wheels are manylinux_2_28


# -- the name --------------------------------------------------------------------------------


def test_the_distribution_name_is_the_one_pyproject_declares_and_the_installed_one() -> None:
    assert NAME == plugins.DISTRIBUTION == "pycollect-rl"
    assert importlib.metadata.version(NAME) == pycollect.__version__


def test_builtin_plugins_report_the_distribution() -> None:
    builtins = [r for r in plugins.registrations() if r.plugin.builtin]
    assert builtins
    for registration in builtins:
        assert (registration.plugin.distribution, registration.plugin.version) == (NAME, pycollect.__version__)


@pytest.mark.parametrize("package", PLUGIN_PACKAGES, ids=lambda p: p.split("/")[-1])
def test_plugin_packages_depend_on_the_distribution(package: str) -> None:
    dependencies = tomllib.loads((ROOT / package / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {canonicalize_name(Requirement(d).name) for d in dependencies}
    assert NAME in names and "pycollect" not in names


def test_license_and_urls_are_declared() -> None:
    assert PROJECT["license"] == "Apache-2.0" and PROJECT["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text().split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert not any(c.startswith("License ::") for c in PROJECT["classifiers"])  # PEP 639: the expression only
    urls = PROJECT["urls"]
    assert set(urls) == {"Homepage", "Repository", "Documentation", "Changelog", "Issues"}
    assert all(url.startswith(REPOSITORY) for url in urls.values())
    cargo = tomllib.loads((ROOT / "Cargo.toml").read_text())
    assert cargo["workspace"]["package"]["repository"] == urls["Repository"]


# -- the built artifacts ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("PYCOLLECT_RELEASE_DIST")
    if given:
        return Path(given)
    maturin = shutil.which("maturin")
    assert maturin, "maturin is not installed: pip install 'maturin>=1.9.2,<2' ziglang"
    out = tmp_path_factory.mktemp("dist")
    for command in (
        [maturin, "build", "--release", "--locked", "--zig", "--compatibility", "manylinux_2_28", "--out", str(out)],
        [maturin, "sdist", "--out", str(out)],
    ):
        subprocess.run(command, cwd=ROOT, check=True, timeout=900)
    return out


@pytest.fixture(scope="module")
def wheels(dist: Path) -> list[Path]:
    found = sorted(dist.glob("pycollect_rl-*.whl"))  # one per platform (the release has two)
    assert found, f"no pycollect_rl wheel in {dist}"
    return found


@pytest.fixture(scope="module")
def sdist(dist: Path) -> Path:
    found = sorted(dist.glob("pycollect_rl-*.tar.gz"))
    assert len(found) == 1, f"expected one sdist in {dist}, found {[p.name for p in found]}"
    return found[0]


def _metadata(text: str) -> email.message.Message:
    return email.parser.Parser().parsestr(text)


def _wheel_metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        return _metadata(archive.read(f"pycollect_rl-{pycollect.__version__}.dist-info/METADATA").decode())


def _sdist_member(sdist: Path, name: str) -> bytes:
    with tarfile.open(sdist) as archive:
        member = archive.extractfile(f"pycollect_rl-{pycollect.__version__}/{name}")
        assert member is not None, name
        return member.read()


@pytest.mark.release
def test_the_wheels_are_abi3_for_the_oldest_python_and_manylinux_2_28_or_older(wheels: list[Path]) -> None:
    assert PROJECT["requires-python"] == ">=3.11"
    platforms = []
    for wheel in wheels:
        name, version, python, abi, platform = wheel.name.removesuffix(".whl").split("-")
        assert (name, version, python, abi) == ("pycollect_rl", pycollect.__version__, "cp311", "abi3"), wheel.name
        glibc = re.fullmatch(r"manylinux_2_(\d+)_(x86_64|aarch64)", platform)
        assert glibc, f"{platform} is not a manylinux_2_X tag"
        assert int(glibc.group(1)) <= GLIBC_FLOOR, platform
        platforms.append(glibc.group(2))
        with zipfile.ZipFile(wheel) as archive:
            wheel_file = _metadata(archive.read(f"pycollect_rl-{version}.dist-info/WHEEL").decode())
            names = archive.namelist()
        assert wheel_file.get_all("Tag") == [f"cp311-abi3-{platform}"]
        assert wheel_file["Root-Is-Purelib"] == "false"
        assert "pycollect/_core.abi3.so" in names
        assert {"pycollect/py.typed", "pycollect/_core.pyi", "pycollect/__init__.py"} <= set(names)
        assert not [n for n in names if n.startswith(("tests/", "benches/", "rust/"))]
    assert len(platforms) == len(set(platforms)), "two wheels for one platform"


@pytest.mark.release
def test_license_is_in_the_wheels_and_the_sdist(wheels: list[Path], sdist: Path) -> None:
    license_text = (ROOT / "LICENSE").read_bytes()
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            assert archive.read(f"pycollect_rl-{pycollect.__version__}.dist-info/licenses/LICENSE") == license_text
    assert _sdist_member(sdist, "LICENSE") == license_text


def _check_metadata(metadata: email.message.Message) -> None:
    assert metadata["Name"] == NAME
    assert metadata["Version"] == pycollect.__version__
    assert tuple(int(p) for p in metadata["Metadata-Version"].split(".")) >= (2, 4)
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert metadata["Requires-Python"] == PROJECT["requires-python"]
    urls = dict(url.split(", ", 1) for url in metadata.get_all("Project-URL") or [])
    assert urls == PROJECT["urls"]


@pytest.mark.release
def test_wheel_metadata_names_the_distribution_its_license_urls_and_dependencies(wheels: list[Path]) -> None:
    for wheel in wheels:
        metadata = _wheel_metadata(wheel)
        _check_metadata(metadata)
        required = {str(Requirement(r)) for r in metadata.get_all("Requires-Dist") or [] if "extra ==" not in r}
        assert required == {str(Requirement(r)) for r in PROJECT["dependencies"]}


@pytest.mark.release
def test_sdist_metadata_names_the_distribution_its_license_and_urls(sdist: Path) -> None:
    _check_metadata(_metadata(_sdist_member(sdist, "PKG-INFO").decode()))


@pytest.mark.release
def test_the_sdist_holds_what_a_build_needs(sdist: Path) -> None:
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"pyproject.toml", "Cargo.toml", "Cargo.lock", "README.md", "LICENSE"} <= names
    assert {"rust/pycollect-core/Cargo.toml", "rust/pycollect-py/Cargo.toml", "pycollect/__init__.py"} <= names
    assert "pycollect/_core.abi3.so" not in names and not any(n.endswith(".so") for n in names)
