"""Set up and run redlease's two everyday jobs with nothing but Python 3.10+.

    python3 dev.py demo    # the flash-sale demo on an embedded server
    python3 dev.py test    # static checks and the whole test suite
    python3 dev.py test --url redis://127.0.0.1:6379/0   # the suite against another server

The first run creates ``.venv`` and installs the package with its ``server``, ``hiredis``
and ``cli`` extras and the ``dev`` group; later runs reuse it (reinstalling when
``pyproject.toml`` changed). Every argument after the job goes to the command, the
demo or pytest, except the test job's own ``--url``; after a ``--`` everything goes
through as it is, ``--url`` included:

    python3 dev.py demo --no-lock             # redlease demo flash-sale --no-lock
    python3 dev.py demo --help                # the demo's options
    python3 dev.py test -x -k fencing         # pytest -x -k fencing
    python3 dev.py test --url URL -- -x tests/test_lock.py
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path
from typing import NamedTuple

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
    run(PYTHON, "tools/slot_tags.py", "--check")
    run(PYTHON, "tools/house.py", "--check")
    run(PYTHON, "-m", "ruff", "check", ".")
    run(PYTHON, "-m", "ruff", "format", "--check", ".")
    run(PYTHON, "-m", "mypy")
    env = dict(os.environ)
    if url:
        env["REDIS_URL"] = url
    run(PYTHON, "-m", "pytest", *extra, env=env)


class Options(NamedTuple):
    job: str
    url: str | None
    extra: list[str]


def parse_arguments(argv: list[str]) -> Options:
    """The job, the test job's ``--url``, and everything else for the command, in order.

    The arguments after the job are not parsed here (the demo's ``--help`` is the demo's),
    so no option of the demo or of pytest is ever refused as unrecognized.
    """
    parser = argparse.ArgumentParser(
        prog="dev.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("job", choices=["setup", "demo", "test"])
    if not argv or argv[0].startswith("-"):
        parser.parse_args(argv)  # dev.py's own --help, or its usage error
    job: str = parser.parse_args(argv[:1]).job
    rest = argv[1:]
    if job == "setup" and rest:
        parser.error(f"setup takes no arguments, got {' '.join(rest)}")
    if job != "test":
        return Options(job, None, _after_separator(rest))
    url_parser = argparse.ArgumentParser(prog="dev.py test", add_help=False, allow_abbrev=False)
    url_parser.add_argument("--url", help="run the tests against this server")
    cut = rest.index("--") if "--" in rest else len(rest)
    known, others = url_parser.parse_known_args(rest[:cut])
    return Options(job, known.url, others + rest[cut + 1 :])


def _after_separator(rest: list[str]) -> list[str]:
    """Drop the first ``--``: it only marks where the command's arguments begin."""
    if "--" not in rest:
        return rest
    cut = rest.index("--")
    return rest[:cut] + rest[cut + 1 :]


def main(argv: list[str] | None = None) -> int:
    options = parse_arguments(sys.argv[1:] if argv is None else argv)
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
