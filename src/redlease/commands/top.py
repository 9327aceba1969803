"""``redlease top``: the locks under a prefix, live, the way top(1) shows processes.

Once a second (``--interval``) it lists the names under the prefix with SCAN (every master
of a cluster) and reads them all in one pipelined round trip; between two such readings
it also reads the few leases about to run out, to tell an expiry from a release (see
:mod:`~redlease.commands.top_model` for what each column means and cannot see). ``s``
changes the order (name, contention, rate, lost), ``q`` quits. Without a terminal, or
with ``--once``, it prints one table and exits; the table then covers two readings one
interval apart, so that ``ACQ/S`` has a value.
"""

from __future__ import annotations

import argparse
import logging
import os
import select
import sys
import termios
import time
import tty
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis

from redlease.commands.common import (
    ExitCode,
    UsageError,
    add_connection_options,
    connect,
    positive_float,
    required_url,
)
from redlease.commands.output import divert_log
from redlease.commands.state import LockState, names, snapshots
from redlease.commands.top_model import SORTS, Tracker, next_sort
from redlease.commands.top_view import Frame, LiveScreen, print_table
from redlease.errors import ServerRefused
from redlease.keys import LockKeys, validate_prefix
from redlease.urls import redacted

__all__ = ["register"]

DEFAULT_INTERVAL = 1.0
READ_TIMEOUT = 2.0
"""A reading that takes longer fails (and is retried next interval): ``q`` must still work."""
logger = logging.getLogger("redlease")
READ_ERRORS = (redis.RedisError, ServerRefused, UsageError)
"""What a live reading meets and shows as a warning line, trying again (a permission revoked
while top runs, a failover)."""


def register(commands: Any) -> None:
    top = commands.add_parser(
        "top",
        help="a live view of the locks under a prefix: holder, fence, TTL, waiters, rates",
        description="Show the locks under --prefix whose names match PATTERN, refreshed "
        "every --interval seconds: holder, fence, TTL left, waiters, acquisitions per "
        "second and leases lost since start. Keys: s changes the sort order, q quits. "
        "Without a terminal (or with --once) print one table and exit.",
    )
    top.add_argument("pattern", nargs="?", default="*", metavar="PATTERN")
    top.add_argument(
        "--interval",
        type=positive_float,
        default=DEFAULT_INTERVAL,
        metavar="SECONDS",
        help=f"time between readings (default: {DEFAULT_INTERVAL:g})",
    )
    top.add_argument(
        "--sort", choices=SORTS, default=SORTS[0], help="initial order (the s key changes it)"
    )
    top.add_argument(
        "--once", action="store_true", help="print one table (two readings apart) and exit"
    )
    add_connection_options(top)
    top.set_defaults(handler=show_top)


def show_top(args: argparse.Namespace) -> int:
    """``top`` quits with 0 on Ctrl-C, whenever it comes (while connecting too)."""
    prefix = validate_prefix(args.prefix)
    try:
        with connect(args, timeout=READ_TIMEOUT) as client:
            reader = _Reader(client, prefix, args.pattern)
            if args.once or not sys.stdout.isatty():
                return _print_once(reader, args)
            return _Screen(reader, args).run()
    except KeyboardInterrupt:
        return ExitCode.OK


def _print_once(reader: _Reader, args: argparse.Namespace) -> int:
    """Two readings ``--interval`` apart, with the leases about to run out read again in
    between (as the live view does), then the table."""
    tracker = Tracker()
    tracker.record(reader.read_all(), time.monotonic(), complete=True)
    end = time.monotonic() + args.interval
    while (now := time.monotonic()) < end:
        time.sleep(max(min(end, tracker.next_check() or end) - now, 0.0))
        _check_due(reader, tracker)
    tracker.record(reader.read_all(), time.monotonic(), complete=True)
    print_table(tracker.rows(args.sort), sys.stdout)
    return ExitCode.OK


def _check_due(reader: _Reader, tracker: Tracker) -> None:
    """Read again the leases about to run out, to tell an expiry from a release."""
    due = tracker.checks_due(time.monotonic())
    if not due:
        return
    try:
        states = reader.read(due)
    except READ_ERRORS:
        return  # the next full reading says what is wrong
    tracker.record(states, time.monotonic(), complete=False)


class _Reader:
    """Reads the names under the prefix: a full scan, or a few names by hand."""

    def __init__(self, client: Any, prefix: str, pattern: str) -> None:
        self.client = client
        self.prefix = prefix
        self.pattern = pattern

    def read_all(self) -> list[LockState]:
        found = names(self.client, self.prefix, self.pattern)
        return self.read(found)

    def read(self, some: list[str]) -> list[LockState]:
        return snapshots(self.client, [LockKeys(name, self.prefix) for name in some])

    def describe(self, url: str) -> str:
        masters = ""
        if hasattr(self.client, "get_primaries"):
            masters = f" (cluster, {len(self.client.get_primaries())} masters)"
        return f"{redacted(url)}{masters}  prefix {self.prefix}"  # no password on a screen


class _Screen:
    """The live loop: read, draw, wait for a key or the next reading."""

    def __init__(self, reader: _Reader, args: argparse.Namespace) -> None:
        self.reader = reader
        self.interval: float = args.interval
        self.sort: str = args.sort
        self.title = f"redlease top  {reader.describe(required_url(args.url))}"
        self.tracker = Tracker()
        self.warning = ""
        self.started = time.monotonic()

    def run(self) -> int:
        try:
            with _keys() as keys, LiveScreen() as screen, divert_log(self._warn):
                next_reading = time.monotonic()
                while True:
                    now = time.monotonic()
                    if now >= next_reading:
                        self._read_all()
                        next_reading = now + self.interval
                        screen.show(self._frame())
                    else:
                        _check_due(self.reader, self.tracker)
                    wake = min(next_reading, self.tracker.next_check() or next_reading)
                    for key in keys.wait(max(wake - time.monotonic(), 0.0)):
                        if key in "qQ":
                            return ExitCode.OK
                        if key in "sS":
                            self.sort = next_sort(self.sort)
                            screen.show(self._frame())
        except KeyboardInterrupt:
            return ExitCode.OK

    def _read_all(self) -> None:
        try:
            states = self.reader.read_all()
        except READ_ERRORS as error:
            logger.warning("cannot read the locks (%s); trying again", error)
            return
        self.warning = ""
        self.tracker.record(states, time.monotonic(), complete=True)

    def _warn(self, line: str) -> None:
        self.warning = line

    def _frame(self) -> Frame:
        rows = self.tracker.rows(self.sort)
        held = sum(row.held for row in rows)
        waiting = sum(row.waiters for row in rows)
        lost = sum(row.lost for row in rows)
        status = (
            f"{len(rows)} names, {held} held, {waiting} waiting, {lost} lost in "
            f"{time.monotonic() - self.started:.0f} s  every {self.interval:g} s  "
            f"sort: {self.sort}  (s: sort, q: quit)"
        )
        return Frame(self.title, status, rows, self.warning)


class _Keys:
    """Single key presses from a terminal stdin (nothing, and plain sleeps, otherwise)."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd

    def wait(self, timeout: float) -> str:
        if self.fd is None:
            time.sleep(timeout)
            return ""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return ""
        data = os.read(self.fd, 64)
        if not data:  # the terminal went away
            raise KeyboardInterrupt
        return data.decode("utf-8", "replace")


@contextmanager
def _keys() -> Iterator[_Keys]:
    """Keys without Enter: the terminal in cbreak mode for the block, restored after."""
    stdin = sys.stdin
    if stdin is None or not stdin.isatty():
        yield _Keys(None)
        return
    fd = stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)
    try:
        yield _Keys(fd)
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
