"""One pub/sub connection per client, shared by every waiter of that client.

A reader worker owns the connection's input; subscribers send (under a guard) and wait
for the server's confirmation, so a hand-off published after ``subscribe`` returns
cannot be missed. If the connection drops, the reader reconnects, resubscribes and
wakes every waiter so each tries again (a message may have been lost meanwhile).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio import Redis

from redlease.aio._flavor import Flag, Guard, Wakeup, Worker, prepare_pubsub, read_push, sleep
from redlease.core.protocol import NETWORK_ERRORS, Clock, Handoff
from redlease.core.subscriptions import ChannelBook, PubSubCommands, classify, handoff_of
from redlease.errors import ServerUnavailable

logger = logging.getLogger("redlease")
CONFIRM_TIMEOUT_S = 10.0
RECONNECT_DELAYS = (0.05, 0.1, 0.2, 0.5) + (1.0,) * 60
"""About a minute of attempts before the notifier gives up (waiters still wake on TTL)."""


class AsyncWaiter:
    def __init__(self, notifier: AsyncNotifier, channel: str) -> None:
        self.notifier = notifier
        self.channel = channel
        self.wakeup = Wakeup()
        self.handoff: Handoff | None = None

    async def wait(self, seconds: float) -> Handoff | None:
        """Sleep until a hand-off arrives or ``seconds`` pass; the hand-off, if any."""
        await self.wakeup.wait(seconds)
        return self.handoff

    async def close(self) -> None:
        await self.notifier.leave(self)


class AsyncNotifier:
    def __init__(
        self,
        client: Redis,
        commands: Callable[[], Awaitable[PubSubCommands]],
        clock: Clock = time.monotonic,
    ) -> None:
        self._client = client
        self._clock = clock
        self._commands = commands
        self._book: ChannelBook[AsyncWaiter] = ChannelBook()
        self._confirmed: dict[str, Flag] = {}
        self._connection: Any = None  # redis-py's connection classes are untyped
        self._reader: Worker | None = None
        self._closing = False
        self._guard = Guard()

    def channels(self) -> list[str]:
        return self._book.channels()

    async def subscribe(self, channel: str) -> AsyncWaiter:
        waiter = AsyncWaiter(self, channel)
        commands = await self._commands()
        async with self._guard:
            connection = await self._connected()
            if self._book.add(channel, waiter):
                self._confirmed[channel] = Flag()
                try:
                    await connection.send_command(commands.subscribe, channel)
                except NETWORK_ERRORS:
                    self._book.remove(channel, waiter)
                    raise
            confirmed = self._confirmed[channel]
        try:
            ok = await confirmed.wait(CONFIRM_TIMEOUT_S)
        except BaseException:
            await self.leave(waiter)
            raise
        if not ok:
            await self.leave(waiter)
            raise ServerUnavailable(f"subscription to {channel!r} was not confirmed")
        return waiter

    async def leave(self, waiter: AsyncWaiter) -> None:
        commands = await self._commands()
        async with self._guard:
            if not self._book.remove(waiter.channel, waiter):
                return
            self._confirmed.pop(waiter.channel, None)
            if self._connection is not None:
                try:
                    await self._connection.send_command(commands.unsubscribe, waiter.channel)
                except NETWORK_ERRORS:
                    logger.debug("unsubscribe from %r failed; reconnecting", waiter.channel)

    async def aclose(self) -> None:
        self._closing = True
        if self._reader is not None:
            await self._reader.stop()
            self._reader = None
        async with self._guard:
            if self._connection is not None:
                await self._connection.disconnect()
                self._connection = None
        self._closing = False

    async def _connected(self) -> Any:
        if self._connection is None:
            pool: Any = self._client.connection_pool
            connection = pool.make_connection()
            prepare_pubsub(connection)
            await connection.connect()
            self._connection = connection
        if self._reader is None or not self._reader.alive():
            self._reader = Worker(self._read, "redlease-notifier")
        return self._connection

    async def _read(self) -> None:
        while not self._closing:
            connection = self._connection
            if connection is None:
                return
            try:
                reply = await read_push(connection)
            except NETWORK_ERRORS:
                if self._closing or not await self._reconnect():
                    return
                continue
            if reply is not None:
                await self._dispatch(reply)

    async def _dispatch(self, reply: object) -> None:
        push = classify(reply)
        if push is None:
            return
        async with self._guard:
            if push.kind == "message":
                for waiter in self._book.waiters(push.channel):
                    waiter.handoff = handoff_of(push, self._clock())
                    waiter.wakeup.set()
            elif (flag := self._confirmed.get(push.channel)) is not None:
                flag.set()

    async def _reconnect(self) -> bool:
        """Reconnect with bounded backoff, resubscribe, and wake everyone to try again."""
        commands = await self._commands()
        for delay in RECONNECT_DELAYS:
            async with self._guard:
                connection = self._connection
                if connection is None or self._closing:
                    return False
                try:
                    await connection.disconnect()
                    await connection.connect()
                    for channel in self._book.channels():
                        await connection.send_command(commands.subscribe, channel)
                except NETWORK_ERRORS:
                    logger.debug("notifier reconnect failed; retrying in %.2f s", delay)
                else:
                    for waiter in self._book.everyone():
                        waiter.wakeup.set()
                    return True
            await sleep(delay)
        async with self._guard:
            self._connection = None
            for waiter in self._book.everyone():
                waiter.wakeup.set()
        return False
