"""``redlease run NAME [--] CMD [ARGS...]`` (or ``-c 'shell command'``): a distributed flock(1).

Take the lock, run the command as a child process while the lease is renewed, release
the lock when the command exits, and exit with the command's status. Exit codes follow
flock(1): the child's status (128+N when a signal N killed it), 1 (or
``--conflict-exit-code``) when the lock could not be had, and sysexits.h otherwise; a
lease lost while the command ran gives 75 (EX_TEMPFAIL) after the command was stopped
the way ``consul lock`` stops it: SIGTERM, then SIGKILL once ``--grace`` has passed.

Like ``flock -n`` in a crontab, a conflict is silent (only the exit status tells), so
cron mails nothing; ``--verbose`` says why, and how long the lock took.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from redlease.commands.common import (
    ExitCode,
    UsageError,
    add_connection_options,
    exit_code,
    lease_ttl,
    non_negative_float,
    reach,
    required_url,
)
from redlease.commands.supervise import Interrupted, Relay, Supervisor, release_quietly, say
from redlease.errors import LockTimeout
from redlease.sync.lock import Locks

__all__ = ["Interrupted", "register"]

USAGE = (
    "redlease run NAME [-w SECONDS | -n] [--ttl S] [-E N] [--grace S] [-v] [--url URL] "
    "[--] CMD [ARGS...]\n       redlease run NAME [options] -c 'SHELL COMMAND'"
)
SHELL = "/bin/sh"
DEFAULT_GRACE = 5.0
RUN_OWNER = "redlease-run"
"""The lease belongs to the run, not to a thread: a helper thread may give it back."""


def register(commands: Any) -> argparse.ArgumentParser:
    run: argparse.ArgumentParser = commands.add_parser(
        "run",
        usage=USAGE,
        help="run a command while holding a lock (a distributed flock)",
        description="Acquire the lock NAME, run CMD while the lease is renewed, release "
        "the lock when CMD exits and exit with its status. CMD starts at the first word "
        "after NAME that is not an option (or after --), and is run directly, without a "
        "shell; -c runs a shell command instead. CMD gets REDLEASE_NAME, REDLEASE_FENCE "
        "and REDLEASE_TOKEN in its environment. A conflict prints nothing (as flock -n): "
        "only the exit status tells, unless --verbose.",
        epilog="exit status: CMD's own (128+N if signal N killed it); 1 or -E N when the "
        "lock is held elsewhere (or --wait ran out); 64 usage; 69 server unreachable; 75 "
        "the lease was lost while CMD ran (CMD got SIGTERM, then SIGKILL after --grace); "
        "126/127 CMD could not be executed / was not found.",
    )
    run.add_argument("name", metavar="NAME", help="the lock's name")
    wait = run.add_mutually_exclusive_group()
    wait.add_argument(
        "-w",
        "--wait",
        "--timeout",
        type=non_negative_float,
        metavar="SECONDS",
        help="wait at most this long for the lock (default: as long as it takes; 0: one try)",
    )
    wait.add_argument("-n", "--nonblock", action="store_true", help="one try: fail at once if held")
    run.add_argument(
        "-c",
        "--command",
        dest="shell_command",
        metavar="'SHELL COMMAND'",
        help=f"run this through {SHELL} -c instead of a CMD (as flock -c)",
    )
    run.add_argument(
        "--ttl",
        type=lease_ttl,
        metavar="SECONDS",
        help="lease length, renewed while CMD runs (default: 30, renewed)",
    )
    run.add_argument(
        "-E",
        "--conflict-exit-code",
        type=exit_code,
        default=ExitCode.CONFLICT,
        metavar="N",
        help="exit status when the lock cannot be had (default: 1)",
    )
    run.add_argument(
        "--grace",
        type=non_negative_float,
        default=DEFAULT_GRACE,
        metavar="SECONDS",
        help="after SIGTERM (lease lost) or a forwarded signal, SIGKILL CMD if it is still "
        f"running this much later (default: {DEFAULT_GRACE:g})",
    )
    run.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="say on stderr why the lock could not be had, or when it was had",
    )
    add_connection_options(run)
    run.set_defaults(handler=run_locked, takes_command=True)
    return run


def run_locked(args: argparse.Namespace) -> int:
    command = _command(args)
    reached = reach(required_url(args.url), cluster=args.cluster)
    timeout = 0.0 if args.nonblock else (-1.0 if args.wait is None else args.wait)
    renew = True if args.ttl is not None else None
    try:
        with (
            Relay() as relay,
            Locks(reached.url, prefix=args.prefix, cluster=reached.cluster) as locks,
        ):
            lock = locks.lock(args.name, ttl=args.ttl, renew=renew, owner=RUN_OWNER)
            started = time.monotonic()
            try:
                lease = lock.acquire(timeout=timeout)
                relay.forwarding = True
            except LockTimeout as error:
                if args.verbose:
                    say(str(error))
                return int(args.conflict_exit_code)
            except Interrupted:
                release_quietly(lock)
                raise
            if args.verbose:
                say(
                    f"got the lock {lock.name!r} (fence {lease.fence}) after "
                    f"{time.monotonic() - started:.3f} s; running {' '.join(command)}"
                )
            try:
                return Supervisor(args, lock, lease, relay).run(command)
            finally:
                relay.forwarding = True  # a late signal must not cut the release short
    except Interrupted as interrupted:  # stopped before the command started
        return 128 + interrupted.signum


def _command(args: argparse.Namespace) -> list[str]:
    command: list[str] = list(args.child_command or ())
    if args.shell_command is not None:
        if command:
            raise UsageError(
                f"give either -c 'SHELL COMMAND' or a command ({command[0]!r}), not both"
            )
        return [SHELL, "-c", args.shell_command]
    if not command:
        raise UsageError(f"no command to run; usage: {USAGE}")
    return command
