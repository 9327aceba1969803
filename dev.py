"""Set up and run redlease's two everyday jobs with nothing but Python 3.10+.

    python3 dev.py demo    # the flash-sale demo on an embedded server
    python3 dev.py test    # static checks and the whole test suite
    python3 dev.py test --url redis://127.0.0.1:6379/0   # the suite against another server

The first run creates ``.venv`` and installs the package with its ``server``, ``hiredis``
and ``cli`` extras and the ``dev`` group; later runs reuse it (reinstalling when
``pyproject.toml`` changed). Extra arguments after ``--`` go to the command (pytest or the demo).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")
STAMP = VENV / ".installed"


def run(*command: str | Path, env: dict[str, str] | None = None) -> None:
    print("+", " ".join(str(part) for part in command), flush=True)
    subprocess.run([str(part) for part in command], cwd=ROOT, check=True, env=env)


def setup() -> None:
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == wanted:
        return
    if not PYTHON.exists():
        venv.create(VENV, with_pip=True)
    run(PYTHON, "-m", "pip", "install", "-q", "--upgrade", "pip")
    run(PYTHON, "-m", "pip", "install", "-q", "-e", ".[server,hiredis,cli]", "--group", "dev")
    STAMP.write_text(wanted)


def demo(extra: list[str]) -> None:
    run(PYTHON, "-m", "redlease", "demo", "flash-sale", *extra)


def test(extra: list[str], url: str | None) -> None:
    run(PYTHON, "tools/unasync.py", "--check")
    run(PYTHON, "-m", "ruff", "check", ".")
    run(PYTHON, "-m", "ruff", "format", "--check", ".")
    run(PYTHON, "-m", "mypy")
    env = dict(os.environ)
    if url:
        env["REDIS_URL"] = url
    run(PYTHON, "-m", "pytest", *extra, env=env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("job", choices=["setup", "demo", "test"])
    parser.add_argument("--url", help="run the tests against this server instead of a private one")
    parser.add_argument("extra", nargs="*", help="arguments passed on (after --)")
    options = parser.parse_args()
    try:
        setup()
        if options.job == "demo":
            demo(options.extra)
        elif options.job == "test":
            test(options.extra, options.url)
    except subprocess.CalledProcessError as failed:
        return failed.returncode or 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
