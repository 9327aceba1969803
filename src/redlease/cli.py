"""The ``redlease`` command (also ``python -m redlease``).

This module only parses and dispatches: each subcommand is registered by a small
``register`` function, and the work lives elsewhere (the lock tools in
:mod:`redlease.commands`, demos in :mod:`redlease.demos`). Failures become sysexits codes
and one line on stderr, never a traceback: 64 for a usage mistake, 69 when no server can
be reached or started, 70 when a run cannot finish, 141 when the reader of stdout went
away. ``redlease run`` adds flock(1)'s codes: the command's own status, 1 for a conflict
and 75 for a lease lost meanwhile. Library warnings print as one ``redlease: …`` line.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

import redis

from redlease import __version__
from redlease.commands import chaos, ls, output, release, run, server, top
from redlease.commands.command_line import split_command
from redlease.commands.common import ExitCode, UsageError
from redlease.demos import DEMOS
from redlease.demos.base import DemoFailed
from redlease.errors import (
    InvalidArgument,
    InvalidName,
    LockError,
    ServerNotFound,
    ServerRefused,
    ServerUnavailable,
)
from redlease.server import resolve_url
from redlease.urls import redacted

__all__ = ["build_parser", "main"]

PROG = "redlease"
SERVER_REFUSALS = (
    redis.exceptions.NoPermissionError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.OutOfMemoryError,
)
"""What the server answers a command of the tools themselves (``ls``'s SCAN) that it
will not run: exit 77, as the library's :class:`~redlease.errors.ServerRefused`."""


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose usage errors exit with EX_USAGE (64) instead of 2."""

    def error(self, message: str) -> NoReturn:
        """argparse quotes the word it refused: a URL there (``redlease --url URL ls``,
        the option before the command) shows without its password."""
        self.print_usage(sys.stderr)
        message = _URL_IN_TEXT.sub(lambda url: redacted(url[0]), message)
        self.exit(ExitCode.USAGE, f"{self.prog}: error: {message}\n")


_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s']+")


def build_parser() -> argparse.ArgumentParser:
    return _build()[0]


def _build() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The command's parser, and ``run``'s, which decides where a command line starts."""
    parser = _Parser(
        prog=PROG,
        description="Distributed locks on Redis and Valkey: demos and tools.",
        epilog="exit status: 64 usage, 69 server unreachable, 70 internal failure, 141 the "
        "reader of stdout went away; `redlease run` also passes its command's status "
        "through, exits 1 on a conflict and 75 when the lease was lost",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    connection = _Parser(add_help=False)
    connection.add_argument(
        "--url",
        help="Redis/Valkey URL (default: $REDIS_URL, else a private server for this run)",
    )
    run_parser = run.register(commands)
    for command in (ls, top, release, server, chaos):
        command.register(commands)
    _add_demo(commands, connection)
    return parser, run_parser


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
    """Run the command line ``argv`` (default: ``sys.argv[1:]``) and return the exit code.

    A reader of stdout that went away (``redlease ls | head -1``) ends any command the way
    it ends coreutils: quietly, with 141 (128 + SIGPIPE), never a traceback; an output that
    cannot be written (a full disk) ends it with one line and 74 (EX_IOERR).
    """
    stdout_before = output.stdout_identity()
    try:
        code = _main(sys.argv[1:] if argv is None else list(argv))
        sys.stdout.flush()
    except BrokenPipeError:
        return output.quiet_broken_pipe()
    except OSError as error:
        if error.errno not in output.OUTPUT_ERRNOS:
            raise
        return output.output_failed(error)
    except SystemExit:
        if output.rich_gave_up_on_stdout(stdout_before):
            return output.BROKEN_PIPE_EXIT
        raise
    return code


def _main(argv: list[str]) -> int:
    parser, run_parser = _build()
    options, command = _split_command(argv, run_parser)
    try:
        args = parser.parse_args(options)
        if command is not None and not getattr(args, "takes_command", False):
            parser.error("unexpected arguments after --")
    except SystemExit as exit_:
        if exit_.code not in (0, None):
            return exit_.code if isinstance(exit_.code, int) else ExitCode.USAGE
        sys.stdout.flush()  # --help into a closed pipe must fail here, inside main
        return ExitCode.OK
    args.child_command = command
    handler = getattr(args, "handler", None)
    if handler is None:
        (getattr(args, "parser", None) or parser).print_help(sys.stderr)
        return ExitCode.USAGE
    with output.log_handler_installed():
        return _dispatch(handler, args)


def _dispatch(handler: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run a subcommand, turning the failures it may meet into an exit code and one line."""
    try:
        return int(handler(args))
    except KeyboardInterrupt:
        return _fail(ExitCode.INTERRUPTED, "interrupted")
    except (UsageError, DemoFailed, LockError, redis.RedisError) as error:
        code, message = _failure(error, args)
        return _fail(code, message)


def _failure(error: Exception, args: argparse.Namespace) -> tuple[ExitCode, str]:
    if isinstance(error, (UsageError, InvalidName, InvalidArgument)):
        return ExitCode.USAGE, str(error)
    if isinstance(error, (ServerUnavailable, ServerNotFound)):
        return ExitCode.UNAVAILABLE, f"server unavailable: {error}"
    if isinstance(error, (redis.ConnectionError, redis.TimeoutError)):  # stopped answering
        return ExitCode.UNAVAILABLE, f"server unavailable{_named(args)}: {error}"
    if isinstance(error, ServerRefused):
        return ExitCode.REFUSED, str(error)
    if isinstance(error, SERVER_REFUSALS):
        return ExitCode.REFUSED, f"the server refused{_named(args)}: {error}"
    return ExitCode.SOFTWARE, str(error)


def _named(args: argparse.Namespace) -> str:
    """`` at URL`` (password masked) for a command that talks to one server, else nothing."""
    url = resolve_url(getattr(args, "url", None)) if hasattr(args, "url") else None
    return f" at {redacted(url)}" if url else ""


def _split_command(
    argv: list[str], run_parser: argparse.ArgumentParser
) -> tuple[list[str], list[str] | None]:
    """The options to parse, and the command to run (None when there is none).

    ``redlease run`` follows flock(1): the command starts at ``--`` or at the first word
    after NAME that is not an option (see :func:`redlease.commands.command_line.split_command`).
    Other subcommands take no command; one after ``--`` is a usage mistake. argparse's
    REMAINDER is quirky with subcommands, so the command is cut off here and never parsed.
    """
    first_word = next((index for index, word in enumerate(argv) if not word.startswith("-")), None)
    if first_word is not None and argv[first_word] == "run" and "--" not in argv[:first_word]:
        options, command = split_command(argv[first_word + 1 :], run_parser)
        return argv[: first_word + 1] + options, command
    if "--" not in argv:
        return argv, None
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1 :]


def _fail(code: ExitCode, message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return code
