"""What every demo shares: its registration and its options; exit codes and reaching a
server come from :mod:`redlease.commands.common`, shared with the lock tools.

A demo is one module under :mod:`redlease.demos` that builds a :class:`Demo`; the CLI only
lists the registered demos and dispatches to one, so adding a demo touches no CLI code.
A demo's settings are a dataclass whose fields declare its options (:func:`option`,
:func:`switch`): the options and the settings built from them cannot drift apart.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

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
    "add_options",
    "at_least",
    "at_most",
    "finish",
    "non_negative_float",
    "option",
    "positive_float",
    "positive_int",
    "reachable_server",
    "settings_from",
    "switch",
    "worker_count",
    "workers_option",
]

MAX_WORKERS = 256
T = TypeVar("T")
N = TypeVar("N", bound=float)


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


def at_most(kind: Callable[[str], N], limit: N, unit: str) -> Callable[[str], N]:
    """The ``argparse`` type ``kind``, refusing values over ``limit`` (counted in ``unit``)."""

    def parse(text: str) -> N:
        value = kind(text)
        if value > limit:
            raise argparse.ArgumentTypeError(f"at most {limit:g} {unit}, got {text}")
        return value

    return parse


def at_least(kind: Callable[[str], N], floor: N, unit: str) -> Callable[[str], N]:
    """The ``argparse`` type ``kind``, refusing values under ``floor`` (counted in ``unit``)."""

    def parse(text: str) -> N:
        value = kind(text)
        if value < floor:
            raise argparse.ArgumentTypeError(f"at least {floor:g} {unit}, got {text}")
        return value

    return parse


worker_count = at_most(positive_int, MAX_WORKERS, "processes")
"""``argparse`` type for a number of worker processes: 1 to :data:`MAX_WORKERS`."""


def workers_option(default: int, who: str) -> int:
    """The settings field ``workers``: how many processes, named by ``who``."""
    help = f"{who}, at most {MAX_WORKERS} (default: %(default)s)"
    return option(default, worker_count, "N", help)


def option(default: T, kind: Callable[[str], Any], metavar: str, help: str, *aliases: str) -> T:
    """A settings field that is also the option ``--field-name`` (plus ``aliases``).

    ``help`` is argparse's, so it may say ``%(default)s``.
    """
    spec = {"kind": kind, "metavar": metavar, "help": help, "aliases": aliases}
    return dataclasses.field(default=default, metadata=spec)


def switch(flag: str, help: str) -> bool:
    """A settings field, True by default, that the option ``flag`` (``--no-lock``) turns off."""
    return dataclasses.field(default=True, metadata={"flag": flag, "help": help})


def add_options(parser: argparse.ArgumentParser, settings: type[Any]) -> None:
    """One option per field of ``settings`` declared with :func:`option` or :func:`switch`."""
    for spec in dataclasses.fields(settings):
        meta = spec.metadata
        if "flag" in meta:
            parser.add_argument(
                meta["flag"], dest=spec.name, action="store_false", help=meta["help"]
            )
        elif meta:
            flags = (f"--{spec.name.replace('_', '-')}", *meta["aliases"])
            parser.add_argument(
                *flags,
                dest=spec.name,
                type=meta["kind"],
                default=spec.default,
                metavar=meta["metavar"],
                help=meta["help"],
            )


def settings_from(args: argparse.Namespace, settings: type[T]) -> T:
    """The ``settings`` the command line asked for (see :func:`add_options`)."""
    declared = dataclasses.fields(settings)  # type: ignore[arg-type]
    return settings(**{spec.name: getattr(args, spec.name) for spec in declared if spec.metadata})


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
