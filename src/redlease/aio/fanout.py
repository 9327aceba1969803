"""One script on several independent servers in one round trip, from one thread or task.

A Redlock round sends the same script to every master and counts the answers. Here it is
sent to every master first and the answers are read as they come, so a round costs about
one round trip, not one per master, with no thread pool; a master that does not answer
holds the round up only until the others did (or the round's time is up). Each master
gets a connection of its own, kept between rounds (the pool's bookkeeping per command
costs more than the send itself), and rounds take turns on them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import suppress
from typing import Any

from redlease.aio._flavor import Guard, current_loop, open_connections, read_replies
from redlease.aio.scripts import Scripts
from redlease.compat import NoScriptErrors
from redlease.core.ops import RunScript
from redlease.core.redlock import STRAGGLER_GRACE_S


class AsyncFanout:
    def __init__(self, targets: Sequence[Scripts]) -> None:
        self._targets = list(targets)
        self._connections: list[Any] = [None] * len(self._targets)
        self._guard = Guard()
        self._loop: Any = None

    async def run(
        self, op: RunScript, only: Sequence[int] | None = None, *, enough: int, within: float
    ) -> list[Any]:
        """The reply of every target (or those at the indexes ``only``), in order; a target
        that failed, or did not answer in time, has the exception instead.

        Nothing waits past ``within`` seconds, nor much past the moment ``enough`` targets
        answered (see :func:`~redlease.aio._flavor.read_replies`), connecting included: a
        silent server costs a round nothing more, and its connection is dropped.
        """
        indexes = list(range(len(self._targets))) if only is None else list(only)
        ends = time.monotonic() + within
        async with self._guard:
            self._follow_loop()
            replies: list[Any] = [None] * len(indexes)
            for at, index in enumerate(indexes):
                if self._targets[index].cluster:  # it routes by itself
                    replies[at] = await _alone(self._targets[index], op)
            await self._connect(indexes, replies, enough, ends - time.monotonic())
            for at, index in enumerate(indexes):
                if replies[at] is None:
                    replies[at] = await self._send(index, op)
            reading = [at for at, reply in enumerate(replies) if reply is None]
            connections = [self._connections[indexes[at]] for at in reading]
            within = max(ends - time.monotonic(), STRAGGLER_GRACE_S)  # for replies under way
            answers = await read_replies(connections, min(enough, len(reading)), within)
            for at, answer in zip(reading, answers, strict=True):
                replies[at] = await self._answer(indexes[at], op, answer)
            return replies

    async def _connect(
        self, indexes: list[int], replies: list[Any], enough: int, within: float
    ) -> None:
        """Open the connections the targets at ``indexes`` lack, at once; a target whose
        connection could not be had in time gets the error as its reply."""
        missing = [
            at
            for at, index in enumerate(indexes)
            if replies[at] is None and self._connections[index] is None
        ]
        if not missing:
            return
        ready = sum(1 for reply in replies if reply is None) - len(missing)
        clients: list[Any] = [self._targets[indexes[at]].client for at in missing]
        pools = [client.connection_pool for client in clients]
        opened = await open_connections(pools, max(enough - ready, 0), within)
        for at, connection in zip(missing, opened, strict=True):
            if isinstance(connection, Exception):
                replies[at] = connection
            else:
                self._connections[indexes[at]] = connection

    async def close(self) -> None:
        async with self._guard:
            for index in range(len(self._connections)):
                await self._drop(index)

    def _follow_loop(self) -> None:
        """Connections of an event loop that is over are dropped (not closed: they belong
        to that loop)."""
        loop = current_loop()
        if loop is not self._loop:
            self._loop = loop
            self._connections = [None] * len(self._targets)

    async def _send(self, index: int, op: RunScript) -> Any:
        """``None`` once sent on the target's connection; otherwise the error."""
        try:
            connection = self._connections[index]
            keys = op.keys
            command = connection.pack_command("EVALSHA", op.script.sha, len(keys), *keys, *op.args)
            await connection.send_packed_command(command)
        except Exception as exc:
            await self._drop(index)
            return exc
        return None

    async def _answer(self, index: int, op: RunScript, answer: object) -> Any:
        if isinstance(answer, NoScriptErrors):
            return await _alone(self._targets[index], op)
        if isinstance(answer, Exception):
            await self._drop(index)
        return answer

    async def _drop(self, index: int) -> None:
        connection, self._connections[index] = self._connections[index], None
        if connection is not None:
            with suppress(Exception):  # a broken connection is dropped anyway
                await connection.disconnect()


async def _alone(scripts: Scripts, op: RunScript) -> Any:
    """The script on one server by the usual path (it loads a script the server lacks)."""
    try:
        return await scripts.run(op)
    except Exception as exc:
        return exc
