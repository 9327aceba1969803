"""The asyncio flavour's reads for a fan-out round (the sync twin is hand-written: it
polls sockets where this awaits tasks): connections opened in the background, replies read
as they come, a round that waits for stragglers only as long as they deserve."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from redis.exceptions import TimeoutError as RedisTimeoutError

from redlease.core.redlock import straggler_deadline

_hiredis_pack: Any
try:
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # hiredis is optional
    _hiredis_pack = None


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


def pack(connection: Any, args: tuple[object, ...]) -> Any:
    """``args`` packed as ``connection`` would, by hiredis where it packs the same bytes (a
    tenth of the time redis-py's asyncio packer takes; the sync client packs by hiredis
    itself): plain strings, bytes and integers, encoded as UTF-8."""
    encoder = connection.encoder
    if (
        _hiredis_pack is not None
        and encoder.encoding.lower().replace("-", "") == "utf8"
        and encoder.encoding_errors == "strict"
        and all(type(arg) in _PLAIN for arg in args)
    ):
        return [_hiredis_pack(args)]
    return connection.pack_command(*args)


_PLAIN = (str, bytes, int)


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


async def await_openings(
    openings: Sequence[asyncio.Task[Any]], enough: int, within: float, patience: float
) -> None:
    """Wait for openings as :func:`read_replies` waits for replies; none is cancelled."""
    await _await_some(openings, enough, within, patience)


async def read_replies(
    connections: Sequence[Any], enough: int, within: float, patience: float
) -> tuple[list[object], list[float | None]]:
    """The next reply on each connection (or the error met reading it), read as they come,
    and the seconds each took (``None`` for none).

    The wait ends ``within`` seconds from now at the latest, and once ``enough`` replies
    are in, at :func:`~redlease.core.redlock.straggler_deadline` (``patience``: what the
    slowest usually takes); a connection still silent then has a
    :class:`redis.exceptions.TimeoutError` instead (its reader was cancelled: drop it).
    """
    reads = [asyncio.ensure_future(c.read_response()) for c in connections]
    try:
        took = await _await_some(reads, enough, within, patience)
    finally:
        pending = [read for read in reads if not read.done()]
        for read in pending:
            read.cancel()
        if pending:
            await asyncio.wait(pending)
    silent = RedisTimeoutError(f"no reply within {within:.3f} s")
    replies = [_outcome(read) if read in took else silent for read in reads]
    return replies, [took.get(read) for read in reads]


async def _await_some(
    futures: Sequence[asyncio.Future[Any]], enough: int, within: float, patience: float
) -> dict[asyncio.Future[Any], float]:
    """The futures done, with the seconds each took, once ``enough`` are done and the
    stragglers had their time, or ``within`` seconds passed."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    until = deadline = started + max(within, 0.0)
    took = {future: 0.0 for future in futures if future.done()}
    pending = {future for future in futures if not future.done()}
    while True:
        if len(took) >= enough:
            until = min(until, straggler_deadline(started, loop.time(), deadline, patience))
        remaining = until - loop.time()
        if not pending or remaining <= 0:
            return took
        done, pending = await asyncio.wait(
            pending, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
        )
        for future in done:
            took[future] = loop.time() - started


def _outcome(read: asyncio.Future[Any]) -> object:
    return read.exception() or read.result()
