"""What every demo shares: its registration; exit codes and reaching a server come from
:mod:`redlease.commands.common`, shared with the lock tools.

A demo is one module under :mod:`redlease.demos` that builds a :class:`Demo`; the CLI only
lists the registered demos and dispatches to one, so adding a demo touches no CLI code.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from redlease.commands.common import (
    ExitCode,
    non_negative_float,
    positive_float,
    positive_int,
    reachable_server,
)

__all__ = [
    "MAX_WORKERS",
    "Demo",
    "DemoFailed",
    "ExitCode",
    "finish",
    "non_negative_float",
    "positive_float",
    "positive_int",
    "reachable_server",
    "worker_count",
]

MAX_WORKERS = 256


class DemoFailed(Exception):
    """A demo could not finish (a worker crashed, the time ran out); the message says why."""


@dataclass(frozen=True)
class Demo:
    """A runnable scenario: ``configure`` adds its options, ``run`` returns an exit code.

    The CLI adds ``--url`` itself, so ``run`` always finds ``args.url`` (None if not given).
    """

    name: str
    summary: str
    description: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def worker_count(text: str) -> int:
    """``argparse`` type for a number of worker processes: 1 to :data:`MAX_WORKERS`."""
    count = positive_int(text)
    if count > MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"at most {MAX_WORKERS} processes, got {count}")
    return count


def finish(result: Any, as_json: bool, show: Callable[[Any], None], violation: str | None) -> int:
    """Print a demo's result (one JSON object, or its table) and its exit code.

    ``violation`` says what went wrong although the lock was on (e.g. "oversold 3 items"):
    a guarantee broken, reported as a bug with exit code 70.
    """
    if as_json:
        print(json.dumps(asdict(result)))
    else:
        show(result)
    if violation:
        print(f"redlease: {violation}: this is a bug, please report it", file=sys.stderr)
        return ExitCode.SOFTWARE
    return ExitCode.OK
