"""One pub/sub connection per asyncio client, shared by every waiting acquirer.

A reader task owns the connection's input; subscribers send (under a lock) and wait
for the server's confirmation, so a wake-up published after ``subscribe`` returns
cannot be missed. If the connection drops, the reader reconnects, resubscribes and
wakes every waiter so each tries again (a message may have been lost meanwhile).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio import Redis

from redlease.aio._flavor import Wakeup, Worker
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
        self._confirmed: dict[str, asyncio.Event] = {}
        self._connection: Any = None  # redis-py's connection classes are untyped
        self._reader: Worker | None = None
        self._guard = asyncio.Lock()

    def channels(self) -> list[str]:
        return self._book.channels()

    async def subscribe(self, channel: str) -> AsyncWaiter:
        waiter = AsyncWaiter(self, channel)
        async with self._guard:
            commands = await self._commands()
            connection = await self._connected()
            if self._book.add(channel, waiter):
                self._confirmed[channel] = asyncio.Event()
                try:
                    await connection.send_command(commands.subscribe, channel)
                except NETWORK_ERRORS:
                    self._book.remove(channel, waiter)
                    raise
            confirmed = self._confirmed[channel]
        try:
            await asyncio.wait_for(confirmed.wait(), CONFIRM_TIMEOUT_S)
        except asyncio.TimeoutError:
            await self.leave(waiter)
            raise ServerUnavailable(f"subscription to {channel!r} was not confirmed") from None
        except BaseException:
            await self.leave(waiter)
            raise
        return waiter

    async def leave(self, waiter: AsyncWaiter) -> None:
        async with self._guard:
            if not self._book.remove(waiter.channel, waiter):
                return
            self._confirmed.pop(waiter.channel, None)
            commands = await self._commands()
            if self._connection is not None:
                try:
                    await self._connection.send_command(commands.unsubscribe, waiter.channel)
                except NETWORK_ERRORS:
                    logger.debug("unsubscribe from %r failed; reconnecting", waiter.channel)

    async def aclose(self) -> None:
        if self._reader is not None:
            await self._reader.stop()
            self._reader = None
        if self._connection is not None:
            await self._connection.disconnect()
            self._connection = None

    async def _connected(self) -> Any:
        if self._connection is None:
            pool: Any = self._client.connection_pool
            connection = pool.make_connection()
            connection.socket_timeout = None
            connection.protocol = 2
            await connection.connect()
            self._connection = connection
        if self._reader is None or not self._reader.alive():
            self._reader = Worker(self._read, "redlease-notifier")
        return self._connection

    async def _read(self) -> None:
        while True:
            connection = self._connection
            assert connection is not None
            try:
                reply = await connection.read_response()
            except NETWORK_ERRORS:
                await self._reconnect()
                continue
            self._dispatch(reply)

    def _dispatch(self, reply: object) -> None:
        push = classify(reply)
        if push is None:
            return
        if push.kind == "message":
            for waiter in self._book.waiters(push.channel):
                waiter.handoff = handoff_of(push, self._clock())
                waiter.wakeup.set()
        elif (event := self._confirmed.get(push.channel)) is not None:
            event.set()

    async def _reconnect(self) -> None:
        """Reconnect with bounded backoff, resubscribe, and wake everyone to try again."""
        for delay in RECONNECT_DELAYS:
            async with self._guard:
                connection = self._connection
                assert connection is not None
                try:
                    await connection.disconnect()
                    await connection.connect()
                    commands = await self._commands()
                    for channel in self._book.channels():
                        await connection.send_command(commands.subscribe, channel)
                except NETWORK_ERRORS:
                    logger.debug("notifier reconnect failed; retrying in %.2f s", delay)
                else:
                    for waiter in self._book.everyone():
                        waiter.wakeup.set()
                    return
            await asyncio.sleep(delay)
        async with self._guard:
            self._connection = None
            for waiter in self._book.everyone():
                waiter.wakeup.set()
        raise ServerUnavailable("the wake-up connection could not be re-established")
