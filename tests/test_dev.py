"""dev.py hands every argument after the job to the demo or to pytest, as its docstring says.

The parsing is checked through dev.py's own ``parse_arguments``, and once end to end:
``python3 dev.py demo --help`` must print the demo's options, not dev.py's.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def load_dev() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dev", ROOT / "dev.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


dev = load_dev()


@pytest.mark.parametrize(
    ("argv", "url", "extra"),
    [
        (["demo", "--no-lock"], None, ["--no-lock"]),
        (["demo", "--no-lock", "--stock", "5"], None, ["--no-lock", "--stock", "5"]),
        (["demo", "--", "--no-lock"], None, ["--no-lock"]),
        (["demo", "--url", "redis://h:1/0"], None, ["--url", "redis://h:1/0"]),
        (["test"], None, []),
        (["test", "-x", "-k", "fencing"], None, ["-x", "-k", "fencing"]),
        (
            ["test", "--url", "redis://h:1/0", "--", "-x", "tests/t.py"],
            "redis://h:1/0",
            ["-x", "tests/t.py"],
        ),
        (["test", "-k", "a b", "--url=redis://h:1/0"], "redis://h:1/0", ["-k", "a b"]),
        (["test", "--", "--url", "x"], None, ["--url", "x"]),
        (["test", "--urls", "x"], None, ["--urls", "x"]),
    ],
)
def test_arguments_after_the_job_go_to_the_command(
    argv: list[str], url: str | None, extra: list[str]
) -> None:
    options = dev.parse_arguments(argv)
    assert (options.job, options.url, options.extra) == (argv[0], url, extra)


@pytest.mark.parametrize("argv", [[], ["bogus"], ["setup", "x"], ["test", "--url"]])
def test_bad_arguments_stop_with_the_usage(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        dev.parse_arguments(argv)
    assert stopped.value.code == 2
    assert "usage: dev.py" in capsys.readouterr().err


def test_demo_help_is_the_demos_help() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "dev.py"), "demo", "--help"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "usage: redlease demo flash-sale" in done.stdout
    assert "--no-lock" in done.stdout
