"""What both clients of the asyncio flavour share (the sync twin is generated): a renewal
worker woken by every new or rescheduled lease, closing as a context manager, and the
redis-py client a URL names."""

from __future__ import annotations

from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from redlease.aio._flavor import (
    ASYNCIO,
    current_loop,
    drop_old_master_connections,
    fire,
    loop_is_over,
)
from redlease.aio.renewer import AsyncRenewer
from redlease.compat import check_client
from redlease.core.client_state import LocksBase
from redlease.core.lease import Lease
from redlease.errors import InvalidArgument
from redlease.urls import from_url

ClientT = TypeVar("ClientT", bound="AsyncClient")


class AsyncClient(LocksBase):
    _renewer: AsyncRenewer

    def _adopt(self, lease: Lease, role: str | None) -> bool:
        lease._fire = fire
        lease._asyncio = ASYNCIO
        if super()._adopt(lease, role) or not self._renewer.running():
            self._renewer.wake()
            return True
        return False

    def _reschedule(self, lease: Lease, sent_at: float) -> bool:
        if super()._reschedule(lease, sent_at):
            self._renewer.wake()
            return True
        return False

    def _refuse_a_second_loop(self) -> None:
        for loop in self._loops():
            if loop is not None and loop is not current_loop() and not loop_is_over(loop):
                raise InvalidArgument(
                    f"this {type(self).__name__} works on another event loop that is still "
                    "running; make one for each event loop (or use the sync flavour)"
                )

    def _loops(self) -> list[Any]:
        """The event loops this client works on (its servers', for a Redlock client)."""
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self: ClientT) -> ClientT:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def redis_client(client: Redis | RedisCluster | str, cluster: bool) -> Redis | RedisCluster:
    """``client`` itself once checked, or the client its URL names."""
    if not isinstance(client, str):
        check_client(client, asyncio=ASYNCIO)
        drop_old_master_connections(client)
        return client
    if cluster:
        return from_url(RedisCluster.from_url, client)
    return from_url(Redis.from_url, client)


async def close_owned(client: Redis | RedisCluster) -> None:
    """Close a client made here. redis-py's sync cluster client leaves its nodes' connections
    open at close() (until they are collected); its nodes' pools are closed as well."""
    await client.aclose()
    if isinstance(client, RedisCluster):
        for node in list(client.nodes_manager.nodes_cache.values()):
            pool = getattr(getattr(node, "redis_connection", None), "connection_pool", None)
            if pool is not None:  # a sync node's (an asyncio node closed its own)
                pool.disconnect()
