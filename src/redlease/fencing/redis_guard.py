"""The Redis guards, sync and asyncio: one Lua script checks, writes and records."""

from __future__ import annotations

from collections.abc import Mapping

import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from redlease.compat import AsyncClusterClients, ClusterClients, NoScriptErrors, check_client
from redlease.fencing.holder import Fenced
from redlease.fencing.redis_write import (
    DEFAULT_RECORD_SUFFIX,
    FENCED_WRITE,
    FENCED_WRITE_SHA,
    FencedWrite,
    RedisGuardBase,
    RedisKey,
    RedisValue,
)


class RedisGuard(RedisGuardBase):
    """Fenced writes to Redis keys: accepted only from the newest holder of the lock.

    Next to each key ``k`` lives its fence record ``k:fence`` (a hash ``{fence, owner}``,
    without expiry, so an old token stays refused however long it arrives late). On a
    cluster the key needs a hash tag (``stock:{sale-42}``) so that both share a slot;
    otherwise every call raises :class:`~redlease.InvalidArgument` before any I/O.
    """

    def __init__(
        self, client: redis.Redis | RedisCluster, *, record_suffix: str = DEFAULT_RECORD_SUFFIX
    ) -> None:
        check_client(client, asyncio=False, user="RedisGuard")
        super().__init__(client, isinstance(client, ClusterClients), record_suffix)

    def set(self, holder: Fenced, key: RedisKey, value: RedisValue, px: int | None = None) -> None:
        """``SET key value [PX px]`` if ``holder`` is the newest writer, else raise."""
        self._run(self._set(holder, key, value, px))

    def hset(self, holder: Fenced, key: RedisKey, mapping: Mapping[RedisKey, RedisValue]) -> int:
        """``HSET key field value ...``; returns the number of fields added."""
        return self._run(self._hset(holder, key, mapping))

    def incrby(self, holder: Fenced, key: RedisKey, amount: int = 1) -> int:
        """``INCRBY key amount``; returns the new value."""
        return self._run(self._incrby(holder, key, amount))

    def claim(self, holder: Fenced, key: RedisKey) -> None:
        """Record ``holder``'s token without writing: older holders are refused from now on.

        Call it first in a read-modify-write, before the read, so that a paused older
        holder cannot slip a write in between this holder's read and its write.
        """
        self._run(self._claim(holder, key))

    def _run(self, write: FencedWrite) -> int:
        with write.errors():
            try:
                reply = self.client.evalsha(FENCED_WRITE_SHA, 2, *write.keys, *write.args)
            except NoScriptErrors:
                self.client.script_load(FENCED_WRITE)
                reply = self.client.evalsha(FENCED_WRITE_SHA, 2, *write.keys, *write.args)
        return write.outcome(reply)


class AsyncRedisGuard(RedisGuardBase):
    """The asyncio twin of :class:`RedisGuard`: same keys, same rules, awaitable calls."""

    def __init__(
        self,
        client: redis.asyncio.Redis | AsyncRedisCluster,
        *,
        record_suffix: str = DEFAULT_RECORD_SUFFIX,
    ) -> None:
        check_client(client, asyncio=True, user="AsyncRedisGuard")
        super().__init__(client, isinstance(client, AsyncClusterClients), record_suffix)

    async def set(
        self, holder: Fenced, key: RedisKey, value: RedisValue, px: int | None = None
    ) -> None:
        """``SET key value [PX px]`` if ``holder`` is the newest writer, else raise."""
        await self._run(self._set(holder, key, value, px))

    async def hset(
        self, holder: Fenced, key: RedisKey, mapping: Mapping[RedisKey, RedisValue]
    ) -> int:
        """``HSET key field value ...``; returns the number of fields added."""
        return await self._run(self._hset(holder, key, mapping))

    async def incrby(self, holder: Fenced, key: RedisKey, amount: int = 1) -> int:
        """``INCRBY key amount``; returns the new value."""
        return await self._run(self._incrby(holder, key, amount))

    async def claim(self, holder: Fenced, key: RedisKey) -> None:
        """Record ``holder``'s token without writing; see :meth:`RedisGuard.claim`."""
        await self._run(self._claim(holder, key))

    async def _run(self, write: FencedWrite) -> int:
        with write.errors():
            try:
                reply = await self.client.evalsha(FENCED_WRITE_SHA, 2, *write.keys, *write.args)
            except NoScriptErrors:
                await self.client.script_load(FENCED_WRITE)
                reply = await self.client.evalsha(FENCED_WRITE_SHA, 2, *write.keys, *write.args)
        return write.outcome(reply)
