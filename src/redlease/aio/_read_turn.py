"""Who reads a pub/sub connection of the asyncio flavour: always its reader task.

The sync twin lets a waiting thread read its connection itself, which saves a thread
switch per hand-off. A task woken by the reader task costs no thread switch, so here the
turn is never taken and the reader never parks.
"""

from __future__ import annotations

from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError


class ReadTurn:
    def begin_read(self) -> bool:
        return True

    def end_read(self) -> None:
        pass

    def generation(self) -> int:
        return 0

    def park(self, generation: int) -> None:
        pass

    def wake(self) -> None:
        pass

    def take(self) -> bool:
        return False

    def give(self) -> None:
        pass

    def direct_readers(self) -> int:
        return 0

    def close(self) -> None:
        pass


async def read_push(connection: Any, turn: ReadTurn) -> object:
    try:
        return await connection.read_response()
    except (OSError, AttributeError) as exc:
        raise RedisConnectionError(f"pub/sub connection closed: {exc}") from exc


async def read_within(connection: Any, seconds: float) -> object:
    """Never called: the asyncio turn is never taken (see :meth:`ReadTurn.take`). It is not
    written as a timed read, since cancelling a read half-way would garble the connection."""
    raise RuntimeError("the asyncio flavour's reader task reads every pub/sub connection")
