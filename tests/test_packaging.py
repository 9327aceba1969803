"""The wheel a user installs carries the whole package: every module, the Lua scripts the
locks run on the server, ``py.typed``, the ``redlease`` command, the pytest plugin, the
licence and the metadata PyPI shows.

The wheel is built for real with pip and hatchling (the project's build backend), without
network access when hatchling is installed (it is in the ``dev`` group).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from email.parser import HeaderParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "redlease"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zipfile.ZipFile]:
    out = tmp_path_factory.mktemp("wheel")
    command = [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(out)]
    if importlib.util.find_spec("hatchling") is not None:
        command.append("--no-build-isolation")
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    (built,) = out.glob("redlease-*.whl")
    with zipfile.ZipFile(built) as archive:
        yield archive


def dist_info(wheel: zipfile.ZipFile, name: str) -> str:
    (path,) = [item for item in wheel.namelist() if item.endswith(f".dist-info/{name}")]
    return wheel.read(path).decode()


def test_the_wheel_holds_every_file_of_the_package(wheel: zipfile.ZipFile) -> None:
    source = {
        path.relative_to(PACKAGE.parent).as_posix()
        for path in PACKAGE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }
    packaged = {name for name in wheel.namelist() if name.startswith("redlease/")}
    assert packaged == source
    lua = {f"redlease/scripts/{path.name}" for path in (PACKAGE / "scripts").glob("*.lua")}
    assert lua
    assert lua <= packaged
    assert "redlease/py.typed" in packaged


def test_the_wheel_registers_the_command_and_the_pytest_plugin(wheel: zipfile.ZipFile) -> None:
    lines = [line.replace(" ", "") for line in dist_info(wheel, "entry_points.txt").splitlines()]
    assert lines.index("[pytest11]") < lines.index("redlease=redlease.testing")
    assert lines.index("[console_scripts]") < lines.index("redlease=redlease.cli:main")


def test_the_wheel_carries_the_licence_and_the_metadata(wheel: zipfile.ZipFile) -> None:
    licences = [name for name in wheel.namelist() if name.endswith(".dist-info/licenses/LICENSE")]
    assert len(licences) == 1
    assert wheel.read(licences[0]) == (ROOT / "LICENSE").read_bytes()
    assert "MIT License" in (ROOT / "LICENSE").read_text()
    metadata = HeaderParser().parsestr(dist_info(wheel, "METADATA"))
    assert metadata["License-Expression"] == "MIT"
    assert metadata["Requires-Python"] == ">=3.10"
    classifiers = metadata.get_all("Classifier") or []
    for version in ("3.10", "3.11", "3.12", "3.13"):
        assert f"Programming Language :: Python :: {version}" in classifiers
    urls = dict(url.split(", ", 1) for url in metadata.get_all("Project-URL") or [])
    assert {"Homepage", "Documentation", "Source", "Issues"} <= set(urls)
    assert all(url.startswith("https://") for url in urls.values())
