"""What the test processes (holder.py, proc_*.py) share: their first arguments and output."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable, Coroutine
from typing import Any


def say(line: str) -> None:
    """One line of the process's report, flushed at once for the test reading it."""
    print(line, flush=True)


def lock_arguments(*first: str) -> argparse.ArgumentParser:
    """A parser of ``[FIRST...] URL PREFIX NAME [--flavor sync|async]``."""
    parser = argparse.ArgumentParser()
    for name in first:
        parser.add_argument(name)
    parser.add_argument("url")
    parser.add_argument("prefix")
    parser.add_argument("name")
    parser.add_argument("--flavor", choices=["sync", "async"], default="sync")
    return parser


def run_flavour(
    options: argparse.Namespace,
    run_sync: Callable[[argparse.Namespace], int],
    run_async: Callable[[argparse.Namespace], Coroutine[Any, Any, int]],
) -> int:
    """The process's exit status, from the run of the flavour ``--flavor`` names."""
    if options.flavor == "async":
        return asyncio.run(run_async(options))
    return run_sync(options)
