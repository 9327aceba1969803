"""tools/house.py fails on an import circle (lazy and TYPE_CHECKING imports count) and on a
module over 400 lines, leaves a generated module to its source, and passes the real tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOUSE = ROOT / "tools" / "house.py"


def house(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(HOUSE), *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def fake_package(root: Path) -> Path:
    """``shop``: a line (orders -> stock -> money), plus whatever a test adds."""
    package = root / "shop"
    write(package / "__init__.py", '"""A tiny package."""\n')
    write(package / "orders.py", "from shop.stock import take\n")
    write(package / "stock.py", "from shop import money\n\ndef take() -> None: ...\n")
    write(package / "money.py", "import decimal\n")
    return package


def test_a_package_without_circles_or_long_modules_passes(tmp_path: Path) -> None:
    package = fake_package(tmp_path)

    result = house("--check", "--package", package, "--lines", tmp_path)

    assert result.returncode == 0, result.stderr
    assert "0 circles" in result.stdout


def test_a_lazy_import_that_closes_a_circle_fails(tmp_path: Path) -> None:
    package = fake_package(tmp_path)
    write(package / "money.py", "def refund() -> None:\n    from shop.orders import take\n")

    result = house("--check", "--package", package, "--lines", tmp_path)

    assert result.returncode == 1
    assert "import circle among shop.money, shop.orders, shop.stock" in result.stderr
    assert "shop.money -> shop.orders -> shop.stock -> shop.money" in result.stderr


def test_a_type_checking_import_that_closes_a_circle_fails(tmp_path: Path) -> None:
    package = fake_package(tmp_path)
    write(
        package / "money.py",
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from . import stock\n",
    )

    result = house("--check", "--package", package, "--lines", tmp_path)

    assert result.returncode == 1
    assert "import circle among shop.money, shop.stock" in result.stderr


def test_a_module_over_400_lines_fails_and_a_generated_one_is_left_to_its_source(
    tmp_path: Path,
) -> None:
    package = fake_package(tmp_path)
    write(package / "long.py", "x = 1\n" * 401)
    write(package / "twin.py", "# Generated from shop/long.py by a tool.\n" + "x = 1\n" * 450)
    write(tmp_path / "bench" / "fine.py", "x = 1\n" * 400)

    result = house("--check", "--package", package, "--lines", tmp_path)

    assert result.returncode == 1
    assert "long.py: 401 lines (at most 400" in result.stderr
    assert "twin.py" not in result.stderr
    assert "fine.py" not in result.stderr


def test_the_real_tree_passes() -> None:
    result = house("--check")

    assert result.returncode == 0, result.stderr
    assert "0 circles; 0 modules over 400 lines" in result.stdout
