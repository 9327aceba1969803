"""The asyncio flavour's reads for a fan-out round (the sync twin is hand-written: it
polls sockets where this awaits tasks): connections opened in the background, replies read
as they come, a round that waits for stragglers only as long as they deserve."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence, Set
from contextlib import suppress
from typing import Any

from redis.exceptions import TimeoutError as RedisTimeoutError

from redlease.compat import ResponseErrors
from redlease.core.redlock import NOT_AWAITED, straggler_deadline


def start_opening(pool: Any, within: float) -> asyncio.Task[tuple[Any, float]]:
    """A new connection to ``pool``'s server, opened in the background within ``within``
    seconds: the task's result is the connection (the caller's, outside the pool) and the
    seconds it took. See :func:`opened` and :func:`abandon_opening`."""
    return asyncio.ensure_future(_open(pool, within))


async def _open(pool: Any, within: float) -> tuple[Any, float]:
    loop = asyncio.get_running_loop()
    started = loop.time()
    connection = pool.connection_class(**pool.connection_kwargs)
    try:
        await asyncio.wait_for(connection.connect(), max(within, 0.001))
    except BaseException as exc:
        await connection.disconnect(nowait=True)
        if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
            raise RedisTimeoutError(f"no connection within {within:.3f} s") from None
        raise
    connection.socket_timeout = None  # the round bounds every wait (see read_replies)
    return connection, loop.time() - started


def opened(opening: asyncio.Task[tuple[Any, float]]) -> tuple[Any, float] | BaseException | None:
    """``None`` while the connection is being opened; then it (and the seconds it took), or
    the error that ended the opening."""
    if not opening.done():
        return None
    if opening.cancelled():
        return RedisTimeoutError("the connection was not opened in time")
    return opening.exception() or opening.result()


def abandon_opening(opening: asyncio.Task[tuple[Any, float]]) -> None:
    opening.cancel()


def is_open(connection: Any) -> bool:
    """Whether ``connection`` is still connected (redis-py closes one whose read failed or
    was cancelled; sending on it would reconnect inline, with no bound)."""
    return bool(connection.is_connected)


def abandon(connection: Any) -> None:
    """Close ``connection`` without waiting (from a round that was interrupted)."""
    closing = asyncio.ensure_future(connection.disconnect(nowait=True))
    closing.add_done_callback(_retrieved)


async def await_openings(
    openings: Sequence[asyncio.Task[Any]], enough: int, within: float, patience: float
) -> None:
    """Wait for openings as :func:`read_replies` waits for replies; none is cancelled."""
    await _await_some(openings, enough, within, patience)


Debt = tuple["asyncio.Task[Any]", ...]
"""The reads of a connection's earlier replies that no round waited for, oldest first."""
NOTHING_OWED: Debt = ()
"""A connection's debt when no reply of an earlier round is left unread on it."""


def owing(debt: Debt) -> int:
    """How many earlier replies a connection with ``debt`` still owes."""
    return len(debt)


def forgive(debt: Debt) -> None:
    """A dropped connection's debt: its reads are stopped, their outcomes never reported."""
    for read in debt:
        read.cancel()
        read.add_done_callback(_retrieved)


def pay(
    connections: Sequence[Any], debts: Sequence[Debt]
) -> tuple[list[Debt], dict[int, BaseException]]:
    """Each debt less the earlier replies already read (they are dropped), without
    waiting; and the error replies among those (a script flushed, a server out of memory),
    by connection."""
    left: list[Debt] = []
    erred: dict[int, BaseException] = {}
    for index, debt in enumerate(debts):
        paid = 0
        for read in debt:
            if not read.done():
                break
            error = None if read.cancelled() else read.exception()
            if isinstance(error, ResponseErrors):
                erred[index] = error
            paid += 1
        left.append(debt[paid:])
    return left, erred


async def read_replies(
    connections: Sequence[Any],
    debts: Sequence[Debt],
    enough: int,
    within: float,
    patience: float,
    *,
    decided: Callable[[object], bool] | None = None,
    behind: Set[int] = frozenset(),
) -> tuple[list[object], list[float | None], list[Debt]]:
    """The next reply on each connection (or the error met reading it), read as they come,
    the seconds each took (``None`` for none), and each connection's debt after the round.

    A connection's debt is the reads of earlier rounds' replies that no one waited for:
    they end first, and their replies are dropped. The wait ends ``within`` seconds from
    now at the latest, and once ``enough`` replies are in, at
    :func:`~redlease.core.redlock.straggler_deadline` (``patience``: what the slowest
    usually takes). It ends at once when ``enough`` replies passed ``decided`` and the
    connections at the indexes ``behind`` (late with what they owe) were read: a
    connection not read then has :data:`~redlease.core.redlock.NOT_AWAITED` as its reply,
    and its read goes on, added to its debt. A connection still silent at the deadline has
    a :class:`redis.exceptions.TimeoutError` instead (its reader was cancelled: drop it).
    """
    reads = [
        asyncio.ensure_future(
            _read_after(debt[-1], connection) if debt else connection.read_response()
        )
        for connection, debt in zip(connections, debts, strict=True)
    ]
    late = {reads[index] for index in behind}
    settled = False
    try:
        took, settled = await _await_some(
            reads, enough, within, patience, decided=decided, behind=late
        )
    finally:
        stopped = [read for read in reads if not read.done() and (not settled or read in late)]
        for read in stopped:
            read.cancel()
        if stopped:
            await asyncio.wait(stopped)
    silent = RedisTimeoutError(f"no reply within {within:.3f} s")
    replies = [
        _outcome(read) if read in took else silent if read in stopped else NOT_AWAITED
        for read in reads
    ]
    owed = [
        NOTHING_OWED if read in took or read in stopped else (*debt, read)
        for read, debt in zip(reads, debts, strict=True)
    ]
    return replies, [took.get(read) for read in reads], owed


async def _read_after(debt: asyncio.Task[Any], connection: Any) -> Any:
    with suppress(Exception):  # an earlier round's reply: only its end matters here
        await debt
    return await connection.read_response()


async def _await_some(
    futures: Sequence[asyncio.Future[Any]],
    enough: int,
    within: float,
    patience: float,
    *,
    decided: Callable[[object], bool] | None = None,
    behind: Set[asyncio.Future[Any]] = frozenset(),
) -> tuple[dict[asyncio.Future[Any], float], bool]:
    """The futures done, with the seconds each took, once ``enough`` are done and the
    stragglers had their time, or ``within`` seconds passed; or at once when ``enough``
    done ones passed ``decided`` and those ``behind`` are done (then ``True`` with them)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    until = deadline = started + max(within, 0.0)
    took = {future: 0.0 for future in futures if future.done()}
    pending = {future for future in futures if not future.done()}
    while True:
        settled = decided is not None and sum(1 for f in took if decided(_outcome(f))) >= enough
        if settled and pending.isdisjoint(behind):
            return took, True
        if len(took) >= enough:
            until = min(until, straggler_deadline(started, loop.time(), deadline, patience))
        remaining = until - loop.time()
        if not pending or remaining <= 0:
            return took, settled
        done, pending = await asyncio.wait(
            pending, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
        )
        for future in done:
            took[future] = loop.time() - started


def _retrieved(read: asyncio.Future[Any]) -> None:
    if not read.cancelled():
        read.exception()


def _outcome(read: asyncio.Future[Any]) -> object:
    return read.exception() or read.result()
