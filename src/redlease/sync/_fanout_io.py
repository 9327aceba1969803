"""The sync flavour's reads for a fan-out round (the asyncio twin awaits tasks where this
polls sockets): connections opened in the background, replies read as they come, a round
that waits for stragglers only as long as they deserve."""

from __future__ import annotations

import select
import threading
import time
from collections.abc import Callable, Iterator, Sequence, Set
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as wait_futures
from contextlib import suppress
from typing import Any

from redis.exceptions import TimeoutError as RedisTimeoutError

from redlease.compat import ResponseErrors
from redlease.core.redlock import NOT_AWAITED, straggler_deadline


def start_opening(pool: Any, within: float) -> Future[tuple[Any, float]]:
    """A new connection to ``pool``'s server, opened in the background within ``within``
    seconds (its timeouts are lowered to that while it connects), on a daemon thread of
    its own so that a silent server holds up neither a shared pool nor the interpreter's
    exit: the future's result is the connection (the caller's, outside the pool) and the
    seconds it took. See :func:`opened` and :func:`abandon_opening`."""
    opening: Future[tuple[Any, float]] = Future()

    def run() -> None:
        try:
            opening.set_result(_open(pool, within))
        except BaseException as exc:
            opening.set_exception(exc)

    threading.Thread(target=run, name="redlease-connect", daemon=True).start()
    return opening


def _open(pool: Any, within: float) -> tuple[Any, float]:
    started = time.monotonic()
    connection = pool.connection_class(**pool.connection_kwargs)
    bound = max(within, 0.001)
    kept = connection.socket_timeout, connection.socket_connect_timeout
    connection.socket_timeout, connection.socket_connect_timeout = (
        bound if value is None else min(value, bound) for value in kept
    )
    try:
        connection.connect()
    finally:
        connection.socket_timeout, connection.socket_connect_timeout = kept
    connection._sock.settimeout(kept[0])
    return connection, time.monotonic() - started


def is_open(connection: Any) -> bool:
    """Whether ``connection`` is still connected (redis-py closes one whose read failed;
    sending on it would reconnect inline, with no bound)."""
    return connection._sock is not None


def abandon(connection: Any) -> None:
    """Close ``connection`` (from a round that was interrupted)."""
    with suppress(Exception):
        connection.disconnect()


def opened(opening: Future[tuple[Any, float]]) -> tuple[Any, float] | BaseException | None:
    """``None`` while the connection is being opened; then it (and the seconds it took), or
    the error that ended the opening."""
    if not opening.done():
        return None
    return opening.exception() or opening.result()


def abandon_opening(opening: Future[tuple[Any, float]]) -> None:
    """An opening no one will use: its connection is closed once it is open."""
    opening.add_done_callback(_close_opened)


def _close_opened(opening: Future[tuple[Any, float]]) -> None:
    if opening.exception() is None:
        opening.result()[0].disconnect()


def await_openings(
    openings: Sequence[Future[Any]], enough: int, within: float, patience: float
) -> None:
    """Wait for openings as :func:`read_replies` waits for replies."""
    started = time.monotonic()
    until = deadline = started + max(within, 0.0)
    pending = {opening for opening in openings if not opening.done()}
    while True:
        if len(openings) - len(pending) >= enough:
            until = min(until, straggler_deadline(started, time.monotonic(), deadline, patience))
        remaining = until - time.monotonic()
        if not pending or remaining <= 0:
            return
        _, pending = wait_futures(pending, remaining, return_when=FIRST_COMPLETED)


NOTHING_OWED = 0
"""A connection's debt when no reply of an earlier round is left unread on it (a debt is
how many are: see :func:`read_replies`)."""


def owing(debt: int) -> int:
    """How many earlier replies a connection with ``debt`` still owes."""
    return debt


def forgive(debt: int) -> None:
    """A dropped connection's debt: nothing is left to read (see the asyncio twin)."""


def pay(
    connections: Sequence[Any], debts: Sequence[int]
) -> tuple[list[int | BaseException], dict[int, BaseException]]:
    """Each debt less the earlier replies already there to read (read, and dropped),
    without waiting (one poll for them all), or the error for a connection that reading
    broke; and the error replies among those read (a script flushed, a server out of
    memory), by connection."""
    left: list[int | BaseException] = list(debts)
    erred: dict[int, BaseException] = {}
    for index in _Readiness(connections).wait(0):
        left[index], error = _pay(connections[index], debts[index])
        if error is not None:
            erred[index] = error
    return left, erred


def _pay(connection: Any, debt: int) -> tuple[int | BaseException, BaseException | None]:
    """``debt`` less the replies already there, on a connection that has data to read, and
    the last of them that was an error reply."""
    erred = None
    while True:
        try:
            connection.read_response()
        except ResponseErrors as exc:
            erred = exc
        except Exception as exc:
            return exc, erred
        debt -= 1
        try:
            if not debt or not connection.can_read(0):
                return debt, erred
        except Exception as exc:
            return exc, erred


def read_replies(
    connections: Sequence[Any],
    debts: Sequence[int],
    enough: int,
    within: float,
    patience: float,
    *,
    decided: Callable[[object], bool] | None = None,
    behind: Set[int] = frozenset(),
) -> tuple[list[object], list[float | None], list[int]]:
    """The next reply on each connection (or the error met reading it), read as they come,
    the seconds each took (``None`` for none), and each connection's debt after the round.

    A connection's debt is how many replies of earlier rounds it still owes: they are read
    first, and dropped. The wait ends ``within`` seconds from now at the latest, and once
    ``enough`` replies are in, at :func:`~redlease.core.redlock.straggler_deadline`
    (``patience``: what the slowest usually takes). It ends at once when ``enough``
    replies passed ``decided`` and the connections at the indexes ``behind`` (late with
    what they owe) were read: a connection not read then has
    :data:`~redlease.core.redlock.NOT_AWAITED` as its reply, and owes it. A connection
    still silent at the deadline has a :class:`redis.exceptions.TimeoutError` instead
    (its reply may still come: drop it).
    """
    started = time.monotonic()
    until = deadline = started + max(within, 0.0)
    if enough <= 0:
        until = straggler_deadline(started, started, deadline, patience)
    replies: list[object] = [None] * len(connections)
    took: list[float | None] = [None] * len(connections)
    owed = list(debts)
    behind = set(behind)
    waiting = _Readiness(connections)
    answered = settled = 0
    while waiting and not (decided is not None and settled >= enough and not behind):
        remaining = until - time.monotonic()
        if remaining <= 0:
            break
        for index in waiting.wait(remaining):
            reply, owed[index] = _next_reply(connections[index], owed[index])
            if reply is _NOT_YET:
                waiting.add(index)
                continue
            replies[index] = reply
            took[index] = now = time.monotonic() - started
            behind.discard(index)
            answered += 1
            settled += decided is not None and decided(reply)
            if answered == enough:
                until = min(until, straggler_deadline(started, started + now, deadline, patience))
    silent = RedisTimeoutError(f"no reply within {within:.3f} s")
    for index in waiting:
        if decided is not None and settled >= enough and index not in behind:
            replies[index], owed[index] = NOT_AWAITED, owed[index] + 1
        else:
            replies[index] = silent
    return replies, took, owed


_NOT_YET = object()
"""What :func:`_next_reply` gives when it only read what was owed."""


def _next_reply(connection: Any, debt: int) -> tuple[object, int]:
    """This round's reply on a connection that has data to read, after its ``debt``
    earlier replies (dropped); ``_NOT_YET`` (and the debt left) when it runs out of data
    before this round's reply. An error that breaks the connection is the reply."""
    if debt:
        left, _ = _pay(connection, debt)
        if isinstance(left, BaseException):
            return left, 0
        try:
            if left or not connection.can_read(0):
                return _NOT_YET, left
        except Exception as exc:
            return exc, 0
    try:
        return connection.read_response(), 0
    except Exception as exc:
        return exc, 0


class _Readiness:
    """Which of a round's connections have something to read: one poll set for the round
    (``select`` where there is no ``poll``), a connection leaving it once it was ready."""

    def __init__(self, connections: Sequence[Any]) -> None:
        self._fds = [connection._sock.fileno() for connection in connections]
        self._index_of = {fd: index for index, fd in enumerate(self._fds)}
        self._poller = select.poll() if hasattr(select, "poll") else None
        if self._poller is not None:
            for fd in self._fds:
                self._poller.register(fd, select.POLLIN | select.POLLPRI)

    def __bool__(self) -> bool:
        return bool(self._index_of)

    def __iter__(self) -> Iterator[int]:
        return iter(list(self._index_of.values()))

    def add(self, index: int) -> None:
        """Wait for the connection at ``index`` again."""
        fd = self._fds[index]
        self._index_of[fd] = index
        if self._poller is not None:
            self._poller.register(fd, select.POLLIN | select.POLLPRI)

    def wait(self, timeout: float) -> list[int]:
        """The connections that became ready within ``timeout`` seconds (they leave the set)."""
        if self._poller is None:
            fds, _, _ = select.select(list(self._index_of), [], [], timeout)
        else:
            fds = [fd for fd, _ in self._poller.poll(timeout * 1000)]
            for fd in fds:
                self._poller.unregister(fd)
        return [self._index_of.pop(fd) for fd in fds]
