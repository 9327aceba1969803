"""The sync flavour's reads for a fan-out round (the asyncio twin awaits tasks where this
polls sockets): connections opened in the background, replies read as they come, a round
that waits for stragglers only as long as they deserve."""

from __future__ import annotations

import select
import threading
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as wait_futures
from typing import Any

from redis.exceptions import TimeoutError as RedisTimeoutError

from redlease.core.redlock import straggler_deadline


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


def pack(connection: Any, args: tuple[object, ...]) -> Any:
    """``args`` packed as ``connection`` packs them (by hiredis when it is installed)."""
    return connection.pack_command(*args)


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


def read_replies(
    connections: Sequence[Any], enough: int, within: float, patience: float
) -> tuple[list[object], list[float | None]]:
    """The next reply on each connection (or the error met reading it), read as they come,
    and the seconds each took (``None`` for none).

    The wait ends ``within`` seconds from now at the latest, and once ``enough`` replies
    are in, at :func:`~redlease.core.redlock.straggler_deadline` (``patience``: what the
    slowest usually takes); a connection still silent then has a
    :class:`redis.exceptions.TimeoutError` instead (its reply may still come: drop it).
    """
    started = time.monotonic()
    until = deadline = started + max(within, 0.0)
    replies: dict[int, object] = {}
    took: dict[int, float] = {}
    waiting = dict(enumerate(connections))
    by_fd = {connection._sock.fileno(): index for index, connection in waiting.items()}
    ready = _Readiness(by_fd)
    while True:
        if len(replies) >= enough:
            until = min(until, straggler_deadline(started, time.monotonic(), deadline, patience))
        remaining = until - time.monotonic()
        if not waiting or remaining <= 0:
            break
        for index in ready.wait(remaining):
            try:
                replies[index] = waiting.pop(index).read_response()
            except Exception as exc:
                replies[index] = exc
            took[index] = time.monotonic() - started
            ready.forget(index)
    silent = RedisTimeoutError(f"no reply within {within:.3f} s")
    indexes = range(len(connections))
    return [replies.get(index, silent) for index in indexes], [took.get(i) for i in indexes]


class _Readiness:
    """Which of a round's connections have something to read: one poll set for the round
    (``select`` where there is no ``poll``), a connection leaving it once read."""

    def __init__(self, by_fd: dict[int, int]) -> None:
        self._by_fd = by_fd
        self._fds = {index: fd for fd, index in by_fd.items()}
        self._poller = select.poll() if hasattr(select, "poll") else None
        if self._poller is not None:
            for fd in by_fd:
                self._poller.register(fd, select.POLLIN | select.POLLPRI)

    def wait(self, timeout: float) -> list[int]:
        if self._poller is not None:
            return [self._by_fd[fd] for fd, _ in self._poller.poll(timeout * 1000)]
        ready, _, _ = select.select(list(self._by_fd), [], [], timeout)
        return [self._by_fd[fd] for fd in ready]

    def forget(self, index: int) -> None:
        fd = self._fds.pop(index)
        del self._by_fd[fd]
        if self._poller is not None:
            self._poller.unregister(fd)
