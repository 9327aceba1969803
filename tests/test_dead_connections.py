"""Connections the server closed or stopped answering must not cost the user a lock call.

A client keeps the connections its lock commands used, to reuse them. After a server
restart or a ``CLIENT KILL`` every one of them is dead at once: the first call to find
that out must not leave the others for the next calls to find one by one.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
import redis.asyncio

import redlease

CONNECTIONS = 16


def our_connections(server: redis.Redis, client_name: str) -> list[int]:
    return [int(c["id"]) for c in server.client_list() if c.get("name") == client_name]


def kill(server: redis.Redis, ids: list[int]) -> None:
    for client_id in ids:
        server.client_kill_filter(_id=client_id)


def warm_sync(locks: redlease.Locks, count: int) -> None:
    """Hold ``count`` locks at once from as many threads, so each used its own connection."""
    together = threading.Barrier(count)

    def hold(index: int) -> None:
        with locks.lock(f"warm-{index}", ttl=10):
            together.wait(timeout=10)

    with ThreadPoolExecutor(count) as pool:
        list(pool.map(hold, range(count)))


async def warm_async(locks: redlease.AsyncLocks, count: int) -> None:
    held = asyncio.Event()
    entered = 0

    async def hold(index: int) -> None:
        nonlocal entered
        async with locks.lock(f"warm-{index}", ttl=10):
            entered += 1
            if entered == count:
                held.set()
            await asyncio.wait_for(held.wait(), 10)

    await asyncio.gather(*(hold(index) for index in range(count)))


@pytest.mark.parametrize("flavor", ["sync", "async"])
def test_after_every_connection_was_killed_each_next_lock_call_succeeds(
    redlease_url, server, prefix, flavor
):
    client_name = f"dead-{uuid.uuid4().hex[:8]}"
    outcomes: list[Any] = []
    if flavor == "sync":
        client = redis.Redis.from_url(redlease_url, client_name=client_name)
        with redlease.Locks(client, prefix=prefix) as locks:
            warm_sync(locks, CONNECTIONS)
            kept = our_connections(server, client_name)
            kill(server, kept)
            for index in range(CONNECTIONS):
                try:
                    with locks.lock(f"after-{index}", ttl=5):
                        outcomes.append("held")
                except redlease.LockError as error:
                    outcomes.append(repr(error))
        client.close()
    else:

        async def scenario() -> list[int]:
            client = redis.asyncio.Redis.from_url(redlease_url, client_name=client_name)
            async with redlease.AsyncLocks(client, prefix=prefix) as locks:
                await warm_async(locks, CONNECTIONS)
                kept = our_connections(server, client_name)
                kill(server, kept)
                for index in range(CONNECTIONS):
                    try:
                        async with locks.lock(f"after-{index}", ttl=5):
                            outcomes.append("held")
                    except redlease.LockError as error:
                        outcomes.append(repr(error))
            await client.aclose()
            return kept

        kept = asyncio.run(scenario())
    assert len(kept) >= CONNECTIONS // 2, "the warm-up should leave many connections kept"
    assert outcomes == ["held"] * CONNECTIONS
