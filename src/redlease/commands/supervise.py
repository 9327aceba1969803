"""How ``redlease run`` runs its command: the child under the lease, signals, the release.

:class:`Relay` turns stop signals, the child's exit and a lost lease into wake-ups of one
pipe; :class:`Supervisor` starts the child, forwards signals to it, stops it when the lease
is lost (SIGTERM, then SIGKILL after ``--grace``) and decides how ``run`` exits.

Outside a terminal's foreground (cron, systemd, a script, a background job) the child gets
a process group of its own, and every signal ``run`` sends goes to that whole group, as
``timeout(1)`` does: a shell command's or a script's own children are stopped with it, not
left running unprotected once the lock is released. In a terminal's foreground the child
stays in the terminal's group (it may read the terminal, and Ctrl-C reaches it directly),
so ``run`` signals the child alone.
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

from redlease.commands.common import ExitCode
from redlease.commands.output import mute_log
from redlease.core.lease import Lease, ReleaseOutcome
from redlease.errors import LockError
from redlease.sync.lock import Lock

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
TERMINAL_SIGNALS = (signal.SIGINT, signal.SIGHUP)
"""Signals a terminal sends to its whole foreground process group, the child included."""
IDLE_CHECK = 1.0
KILL_WAIT = 10.0
GROUP_POLL = 0.05
RELEASE_AFTER_LOSS = 1.0
"""How long `run` tries to give back a lease already lost before exiting anyway: the lease
has ended (or ends within the drift allowance), so the release saves nothing."""
OWN_GROUP: dict[str, Any] = (
    {"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}
)
"""``Popen`` options for a child in a process group of its own (before 3.11, a session)."""


class Interrupted(KeyboardInterrupt):
    """A stop signal arrived while waiting for the lock; the library gives the claim back."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Relay:
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

    def __enter__(self) -> Relay:
        for signum in STOP_SIGNALS:
            if signal.getsignal(signum) is signal.SIG_IGN:
                continue  # ignored by whoever started us (nohup, a script's `&`): so for the child
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


class Supervisor:
    """Runs the child under the lease and decides how ``redlease run`` exits."""

    def __init__(self, args: argparse.Namespace, lock: Lock, lease: Lease, relay: Relay) -> None:
        self.args = args
        self.lock = lock
        self.lease = lease
        self.relay = relay
        self.lost = threading.Event()
        self.reaped = threading.Event()
        self.loss_told = False
        self.own_group = False
        """Whether the child leads a process group of its own (signals go to the group)."""
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
                say(
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
        self.own_group = not terminal_reached_child()
        try:
            child = subprocess.Popen(
                list(command), env=environment, **(OWN_GROUP if self.own_group else {})
            )
        except OSError as error:
            say(f"cannot run {command[0]!r}: {error.strerror}")
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
                self._signal(child, signal.SIGKILL)
                say(f"the command is still running after {self.args.grace:g} s; sent SIGKILL")
                if not self.reaped.wait(KILL_WAIT):
                    say(f"the command (pid {child.pid}) survived SIGKILL; giving up on it")
                    return ExitCode.SOFTWARE
                break
            self.relay.wait(IDLE_CHECK if kill_at is None else kill_at - now)
            for signum in self.relay.take_signals():
                if self.reaped.is_set():
                    break
                terminal_did = not self.own_group and signum in TERMINAL_SIGNALS
                if not (terminal_did and terminal_reached_child()):
                    self._signal(child, signum)
                if kill_at is None:
                    kill_at = time.monotonic() + self.args.grace
            if self.lost.is_set() and not self.loss_told and not self.reaped.is_set():
                self.loss_told = True
                self._signal(child, signal.SIGTERM)
                say(
                    f"lost the lease on {self.lock.name!r} ({self.lease.lost_reason}); sent "
                    f"SIGTERM to the command (SIGKILL in {self.args.grace:g} s); exiting "
                    f"{ExitCode.TEMPFAIL}"
                )
                deadline = time.monotonic() + self.args.grace
                kill_at = deadline if kill_at is None else min(kill_at, deadline)
        if self.own_group and kill_at is not None:
            self._end_group(child.pid, kill_at)
        code = child.returncode
        return 128 - code if code < 0 else code

    def _end_group(self, group: int, kill_at: float) -> None:
        """Once run has signalled the job, the rest of its group (a grandchild deaf to the
        signal, or a shell's ``&`` job) has until the SIGKILL too: the lock is not given up
        while any of it runs."""
        while _group_alive(group) and time.monotonic() < kill_at:
            time.sleep(GROUP_POLL)
        if not _group_alive(group):
            return
        with suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
        say(f"part of the command still ran after {self.args.grace:g} s; sent it SIGKILL")
        deadline = time.monotonic() + KILL_WAIT
        while _group_alive(group) and time.monotonic() < deadline:
            time.sleep(GROUP_POLL)

    def _signal(self, child: subprocess.Popen[bytes], signum: int) -> None:
        """To the child's process group when it has its own (its children too), else to it."""
        with suppress(ProcessLookupError):
            if self.own_group:
                os.killpg(child.pid, signum)
            else:
                child.send_signal(signum)

    def _release(self) -> ReleaseOutcome | None:
        """Release; a lease already lost gets :data:`RELEASE_AFTER_LOSS` to be given back."""
        outcome: list[ReleaseOutcome | LockError] = []

        def release() -> None:
            try:
                outcome.append(self.lock.release())
            except LockError as error:
                outcome.append(error)

        if self.lost.is_set():
            giving_back = threading.Thread(target=release, name="redlease-release", daemon=True)
            giving_back.start()
            giving_back.join(RELEASE_AFTER_LOSS)
        else:
            release()
        if outcome and not isinstance(outcome[0], LockError):
            return outcome[0]
        why = f"{outcome[0]}" if outcome else f"no answer within {RELEASE_AFTER_LOSS:g} s"
        say(f"could not release {self.lock.name!r} ({why}); the lease runs out by itself")
        return None


def _group_alive(group: int) -> bool:
    """Whether a member of ``group`` still runs: zombies do not (a container's PID 1 that
    never reaps keeps the group's orphans as zombies, which ``killpg`` still finds)."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member that changed its user: still there
        return True
    return _runs_in(group)


def _runs_in(group: int) -> bool:
    """From ``/proc``: a member of ``group`` that is not a zombie (True where no ``/proc``)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rpartition(b")")[2].split()
        except OSError:  # ended meanwhile
            continue
        if len(fields) > 2 and int(fields[2]) == group and fields[0] != b"Z":
            return True
    return False


def release_quietly(lock: Lock) -> None:
    """Give back a lease granted just as a signal cut the acquire short."""
    if lock.lease is None:
        return
    with suppress(LockError):  # else the lease expires by itself
        lock.release()


def terminal_reached_child() -> bool:
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


def say(message: str) -> None:
    """One line on stderr; a stderr that cannot take it (a reader gone, a full disk) must
    not stop the supervision."""
    with suppress(OSError):
        print(f"redlease: {message}", file=sys.stderr, flush=True)
