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
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from contextlib import suppress
from types import FrameType
from typing import Any

from redlease.commands.common import (
    ExitCode,
    UsageError,
    add_connection_options,
    exit_code,
    non_negative_float,
    positive_float,
    reach,
    required_url,
)
from redlease.commands.output import mute_log
from redlease.core.lease import Lease, ReleaseOutcome
from redlease.errors import LockError, LockTimeout
from redlease.sync.lock import Lock, Locks

__all__ = ["Interrupted", "register"]

USAGE = (
    "redlease run NAME [-w SECONDS | -n] [--ttl S] [-E N] [--grace S] [-v] [--url URL] "
    "[--] CMD [ARGS...]\n       redlease run NAME [options] -c 'SHELL COMMAND'"
)
SHELL = "/bin/sh"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
TERMINAL_SIGNALS = (signal.SIGINT, signal.SIGHUP)
"""Signals a terminal sends to its whole foreground process group, the child included."""
IDLE_CHECK = 1.0
KILL_WAIT = 10.0
DEFAULT_GRACE = 5.0
RUN_OWNER = "redlease-run"
"""The lease belongs to the run, not to a thread: a helper thread may give it back."""
RELEASE_AFTER_LOSS = 1.0
"""How long `run` tries to give back a lease already lost before exiting anyway: the lease
has ended (or ends within the drift allowance), so the release saves nothing."""


class Interrupted(KeyboardInterrupt):
    """A stop signal arrived while waiting for the lock; the library gives the claim back."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


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
        type=positive_float,
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
            _Relay() as relay,
            Locks(reached.url, prefix=args.prefix, cluster=reached.cluster) as locks,
        ):
            lock = locks.lock(args.name, ttl=args.ttl, renew=renew, owner=RUN_OWNER)
            started = time.monotonic()
            try:
                lease = lock.acquire(timeout=timeout)
                relay.forwarding = True
            except LockTimeout as error:
                if args.verbose:
                    _say(str(error))
                return int(args.conflict_exit_code)
            except Interrupted:
                _release_quietly(lock)
                raise
            if args.verbose:
                _say(
                    f"got the lock {lock.name!r} (fence {lease.fence}) after "
                    f"{time.monotonic() - started:.3f} s; running {' '.join(command)}"
                )
            try:
                return _Supervisor(args, lock, lease, relay).run(command)
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


class _Relay:
    """Signals, the child's exit and a lost lease wake the supervisor through one pipe.

    A signal handler must not take locks (it runs between two bytecodes of the main
    thread, which may hold the very lock), so it only appends to a list and writes a byte.
    Until ``forwarding`` is set, a stop signal raises :class:`Interrupted` instead, which
    cuts a wait for the lock short.
    """

    def __init__(self) -> None:
        self.forwarding = False
        self.pending: list[int] = []
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Relay:
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        os.close(self._read)
        os.close(self._write)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if not self.forwarding:
            raise Interrupted(signum)
        self.pending.append(signum)
        self.poke()

    def poke(self) -> None:
        """Wake :meth:`wait`; safe from any thread and from a signal handler."""
        # A full pipe means a wake-up is pending anyway; a closed one, that nobody waits.
        with suppress(OSError):
            os.write(self._write, b".")

    def wait(self, timeout: float) -> None:
        select.select([self._read], [], [], max(timeout, 0.0))
        try:
            while os.read(self._read, 512):
                pass
        except BlockingIOError:
            pass

    def take_signals(self) -> list[int]:
        taken = []
        while self.pending:
            taken.append(self.pending.pop(0))
        return taken


class _Supervisor:
    """Runs the child under the lease and decides how ``redlease run`` exits."""

    def __init__(self, args: argparse.Namespace, lock: Lock, lease: Lease, relay: _Relay) -> None:
        self.args = args
        self.lock = lock
        self.lease = lease
        self.relay = relay
        self.lost = threading.Event()
        self.reaped = threading.Event()
        self.loss_told = False
        lease.on_lost(self._on_lost)

    def run(self, command: Sequence[str]) -> int:
        with mute_log(self._is_our_loss):
            try:
                if self.relay.pending:  # stopped between the grant and here: do not start
                    return 128 + self.relay.take_signals()[0]
                status: int = ExitCode.TEMPFAIL  # lost before the command could start
                if not self.lost.is_set():
                    child = self._start(command)
                    status = child if isinstance(child, int) else self._supervise(child)
            finally:
                outcome = self._release()
        if self.lost.is_set() or outcome is ReleaseOutcome.EXPIRED:
            if not self.loss_told:
                reason = self.lease.lost_reason or "the lease had ended"
                _say(
                    f"the lease on {self.lock.name!r} was lost while the command ran "
                    f"({reason}); exiting {ExitCode.TEMPFAIL}"
                )
            return ExitCode.TEMPFAIL
        return status

    def _is_our_loss(self, record: logging.LogRecord) -> bool:
        """The library's warning about this very lease: the one line we print says it all."""
        return record.getMessage().startswith(f"lease on lock {self.lock.name!r} lost")

    def _start(self, command: Sequence[str]) -> subprocess.Popen[bytes] | int:
        """The running child, or the shell's status for a command that cannot start."""
        environment = dict(
            os.environ,
            REDLEASE_NAME=self.lock.name,
            REDLEASE_FENCE=str(self.lease.fence),
            REDLEASE_TOKEN=self.lease.token,
        )
        try:
            child = subprocess.Popen(list(command), env=environment)
        except OSError as error:
            _say(f"cannot run {command[0]!r}: {error.strerror}")
            if isinstance(error, FileNotFoundError):
                return ExitCode.NOT_FOUND
            return ExitCode.CANNOT_EXECUTE
        threading.Thread(
            target=self._reap, args=(child,), name="redlease-reaper", daemon=True
        ).start()
        return child

    def _reap(self, child: subprocess.Popen[bytes]) -> None:
        child.wait()
        self.reaped.set()
        self.relay.poke()

    def _on_lost(self, lease: Lease) -> None:
        self.lost.set()
        self.relay.poke()

    def _supervise(self, child: subprocess.Popen[bytes]) -> int:
        """Wait for the child; forward stop signals; stop it when the lease is lost."""
        kill_at: float | None = None
        while not self.reaped.is_set():
            now = time.monotonic()
            if kill_at is not None and now >= kill_at:
                _say(f"the command is still running after {self.args.grace:g} s; sending SIGKILL")
                child.kill()
                if not self.reaped.wait(KILL_WAIT):
                    _say(f"the command (pid {child.pid}) survived SIGKILL; giving up on it")
                    return ExitCode.SOFTWARE
                break
            self.relay.wait(IDLE_CHECK if kill_at is None else kill_at - now)
            for signum in self.relay.take_signals():
                if self.reaped.is_set():
                    break
                if not (signum in TERMINAL_SIGNALS and _terminal_reached_child()):
                    child.send_signal(signum)
                if kill_at is None:
                    kill_at = time.monotonic() + self.args.grace
            if self.lost.is_set() and not self.loss_told and not self.reaped.is_set():
                self.loss_told = True
                _say(
                    f"lost the lease on {self.lock.name!r} ({self.lease.lost_reason}); sending "
                    f"SIGTERM to the command (SIGKILL in {self.args.grace:g} s) and exiting "
                    f"{ExitCode.TEMPFAIL}"
                )
                child.terminate()
                deadline = time.monotonic() + self.args.grace
                kill_at = deadline if kill_at is None else min(kill_at, deadline)
        code = child.returncode
        return 128 - code if code < 0 else code

    def _release(self) -> ReleaseOutcome | None:
        if not self.lost.is_set():
            return self._release_now()
        outcome: list[ReleaseOutcome | None] = []
        giving_back = threading.Thread(
            target=lambda: outcome.append(self._release_now()),
            name="redlease-release",
            daemon=True,
        )
        giving_back.start()
        giving_back.join(RELEASE_AFTER_LOSS)
        return outcome[0] if outcome else None

    def _release_now(self) -> ReleaseOutcome | None:
        try:
            return self.lock.release()
        except LockError as error:
            _say(f"could not release {self.lock.name!r} ({error}); the lease runs out by itself")
            return None


def _release_quietly(lock: Lock) -> None:
    """Give back a lease granted just as a signal cut the acquire short."""
    if lock.lease is None:
        return
    with suppress(LockError):  # else the lease expires by itself
        lock.release()


def _terminal_reached_child() -> bool:
    """Whether we are in the terminal's foreground process group (so the child is too).

    A Ctrl-C typed at the terminal goes to the whole foreground group: the child has it
    already, and forwarding it would deliver it twice.
    """
    try:
        terminal = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False
    try:
        return os.tcgetpgrp(terminal) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(terminal)


def _say(message: str) -> None:
    """One line on stderr; a reader of stderr that went away must not stop the supervision."""
    with suppress(BrokenPipeError):
        print(f"redlease: {message}", file=sys.stderr, flush=True)
