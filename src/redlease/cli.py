"""The ``redlease`` command (also ``python -m redlease``).

This module only parses and dispatches: each subcommand is registered by a small
``_add_*`` function, and the work lives elsewhere (demos in :mod:`redlease.demos`).
Failures become sysexits codes and one line on stderr, never a traceback: 64 for a usage
mistake, 69 when no server can be reached or started, 70 when a run cannot finish.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

import redis

from redlease import __version__
from redlease.demos import DEMOS
from redlease.demos.base import DemoFailed, ExitCode
from redlease.errors import ServerNotFound, ServerUnavailable

__all__ = ["build_parser", "main"]

PROG = "redlease"


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose usage errors exit with EX_USAGE (64) instead of 2."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(ExitCode.USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Distributed locks on Redis and Valkey: demos and tools.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    connection = _Parser(add_help=False)
    connection.add_argument(
        "--url",
        help="Redis/Valkey URL (default: $REDIS_URL, else a private server for this run)",
    )
    _add_demo(commands, connection)
    return parser


def _add_demo(commands: argparse._SubParsersAction[_Parser], connection: _Parser) -> None:
    demo = commands.add_parser("demo", help="run a scenario that shows what the lock is for")
    demo.set_defaults(handler=None, parser=demo)
    names = demo.add_subparsers(dest="demo", metavar="NAME")
    for scenario in DEMOS:
        sub = names.add_parser(
            scenario.name,
            parents=[connection],
            help=scenario.summary,
            description=scenario.description,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        scenario.configure(sub)
        sub.set_defaults(handler=scenario.run)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``) and return the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else ExitCode.USAGE
    handler = getattr(args, "handler", None)
    if handler is None:
        (getattr(args, "parser", None) or parser).print_help(sys.stderr)
        return ExitCode.USAGE
    try:
        return int(handler(args))
    except (ServerUnavailable, ServerNotFound, redis.ConnectionError) as error:
        return _fail(ExitCode.UNAVAILABLE, f"server unavailable: {error}")
    except DemoFailed as error:
        return _fail(ExitCode.SOFTWARE, str(error))
    except KeyboardInterrupt:
        return _fail(ExitCode.INTERRUPTED, "interrupted")


def _fail(code: ExitCode, message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return code
