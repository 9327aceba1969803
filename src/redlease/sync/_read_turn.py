"""Who reads a pub/sub connection of the sync flavour: its reader thread, or a waiter.

A waiter woken by the reader thread costs two thread switches between a release and the
next holder running: the reader's (the message), then the waiter's own (the reader's
signal). On a busy machine each is a wait for a core. So a waiter reads the connection
itself while it waits, and the kernel wakes it straight from the message: the reader
thread lets go of the connection (a byte on its poke socket ends its poll) and sleeps
until the waiter gives the connection back. With nobody else to serve (``park``), the
reader sleeps on past that, so a process that takes turns with others on a lock costs no
thread switch but its own. The notifier wakes it (:meth:`ReadTurn.wake`) when it is
needed again: another waiter, a subscription to confirm, a hand-off that may reach a
waiter that left. The asyncio twin of this module does nothing: a task woken by the
reader task costs no thread switch.
"""

from __future__ import annotations

import select
import socket
import threading
from contextlib import suppress
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError

READ_POLL_S = 0.25
"""The reader looks at its stop flag at least this often."""
TAKE_WITHIN_S = 0.05
"""How long a waiter waits for the reader thread to let go (it is reconnecting, if longer:
the waiter then waits to be woken by it instead)."""

_READER, _WAITER = "reader", "waiter"


class ReadTurn:
    def __init__(self) -> None:
        lock = threading.Lock()
        self._reader_may = threading.Condition(lock)
        self._waiter_may = threading.Condition(lock)
        self._reading = ""
        self._wanted = False
        self._parked = False
        self._closed = False
        self._generation = 0
        self._poke_in, self._poke_out = socket.socketpair()
        self._poke_in.setblocking(False)
        self._poke_out.setblocking(False)

    # --- the reader thread ---

    def begin_read(self) -> bool:
        """Wait until the reader thread may read (no waiter reads, it is not parked);
        False once the turn is closed."""
        with self._reader_may:
            while not self._closed and (self._reading or self._wanted or self._parked):
                self._reader_may.wait()
            if self._closed:
                return False
            self._reading = _READER
            return True

    def end_read(self) -> None:
        with self._reader_may:
            self._reading = ""
            self._waiter_may.notify()

    def generation(self) -> int:
        """Taken before the reader judges whether it is needed (see :meth:`park`)."""
        return self._generation

    def park(self, generation: int) -> None:
        """Sleep from the next read on, unless woken since ``generation`` was taken."""
        with self._reader_may:
            if generation == self._generation:
                self._parked = True

    def poked(self) -> bool:
        """Whether a waiter asked for the connection (and forget the ask)."""
        poked = False
        with suppress(BlockingIOError, OSError):
            while self._poke_in.recv(64):
                poked = True
        return poked

    # --- waiters and the notifier ---

    def wake(self) -> None:
        """The reader thread is needed: unpark it."""
        with self._reader_may:
            self._generation += 1
            if self._parked:
                self._parked = False
                self._reader_may.notify()

    def take(self) -> bool:
        """Take the connection to read for oneself; False when another waiter has it, or
        the reader thread did not let go in time."""
        with self._reader_may:
            if self._closed or self._wanted or self._reading == _WAITER:
                return False
            if self._reading == _READER:
                self._wanted = True
                with suppress(BlockingIOError, OSError):
                    self._poke_out.send(b".")
                free = self._waiter_may.wait_for(lambda: not self._reading, TAKE_WITHIN_S)
                self._wanted = False
                if not free:
                    self._reader_may.notify()
                    return False
            self._reading = _WAITER
            return True

    def give(self) -> None:
        """Give the connection back (the reader thread reads on, unless parked)."""
        with self._reader_may:
            self._reading = ""
            if not self._parked:
                self._reader_may.notify()

    def direct_readers(self) -> int:
        """Waiters reading for themselves now (0 or 1)."""
        return 1 if self._reading == _WAITER or self._wanted else 0

    def close(self) -> None:
        with self._reader_may:
            self._closed = True
            self._reader_may.notify_all()
            self._waiter_may.notify_all()


def read_push(connection: Any, turn: ReadTurn) -> object:
    """The reader thread's next push, or ``None`` after a short look or when a waiter asks
    for the connection. Looking at the local socket costs no Redis command."""
    try:
        _check_open(connection)
        if connection.can_read(0):
            return connection.read_response()
        ready = _poll([connection._sock, turn._poke_in], READ_POLL_S)
        if turn._poke_in.fileno() in ready:
            turn.poked()
        if connection._sock is not None and connection._sock.fileno() in ready:
            return connection.read_response()
        return None
    except (OSError, TypeError, AttributeError, ValueError) as exc:
        # another thread closed the socket under the reader (a failover reset)
        raise RedisConnectionError(f"pub/sub connection closed: {exc}") from exc


def read_within(connection: Any, seconds: float) -> object:
    """A waiter's next push, or ``None`` when none came within ``seconds`` (at most a
    short look, so the waiter sees its own wake-up and its deadline)."""
    try:
        _check_open(connection)
        if connection.can_read(max(min(seconds, READ_POLL_S), 0.0)):
            return connection.read_response()
        return None
    except (OSError, TypeError, AttributeError, ValueError) as exc:
        raise RedisConnectionError(f"pub/sub connection closed: {exc}") from exc


def _check_open(connection: Any) -> None:
    """A connection closed under us (a reply broken off half-way) is a link error: redis-py
    would reconnect it without a word, and without our subscriptions."""
    if connection._sock is None:
        raise RedisConnectionError("pub/sub connection closed")


def _poll(sockets: list[Any], timeout: float) -> set[int]:
    """The file numbers of ``sockets`` with something to read, waiting up to ``timeout``."""
    fds = [sock.fileno() for sock in sockets if sock is not None]
    if hasattr(select, "poll"):
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN | select.POLLPRI)
        return {fd for fd, _ in poller.poll(timeout * 1000)}
    ready, _, _ = select.select(fds, [], [], timeout)
    return set(ready)
