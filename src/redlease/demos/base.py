"""What every demo shares: its registration; exit codes and reaching a server come from
:mod:`redlease.commands.common`, shared with the lock tools.

A demo is one module under :mod:`redlease.demos` that builds a :class:`Demo`; the CLI only
lists the registered demos and dispatches to one, so adding a demo touches no CLI code.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from redlease.commands.common import (
    ExitCode,
    non_negative_float,
    positive_float,
    positive_int,
    reachable_server,
)

__all__ = [
    "Demo",
    "DemoFailed",
    "ExitCode",
    "non_negative_float",
    "positive_float",
    "positive_int",
    "reachable_server",
]


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
