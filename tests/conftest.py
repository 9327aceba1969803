"""Shared fixtures: every scenario runs against a real server, once per flavour.

Scenarios are written once as ``async def`` tests. The ``make_locks`` fixture hands out
either an :class:`~redlease.AsyncLocks` or a sync :class:`~redlease.Locks` behind an
adapter that runs each call on one dedicated thread (so thread ownership behaves as in
a real program) and awaits it. Keys live under a prefix unique to the test, so the
suite can also run against a shared server given by ``REDIS_URL``.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import pytest_asyncio
import redis

import redlease
from redlease.core.base import Owner
from redlease.core.lease import Lease


class SyncLockAdapter:
    """Awaitable face of a sync :class:`~redlease.Lock`, driven on its client's thread."""

    def __init__(self, owner: SyncLocksAdapter, lock: redlease.Lock) -> None:
        self._owner = owner
        self.lock = lock
        self.name = lock.name
        self.keys = lock.keys

    @property
    def lease(self) -> Lease | None:
        return self.lock.locks.held(self.name, self.lock._explicit_owner or self._owner.thread)

    async def acquire(self, *args: Any, **kwargs: Any) -> Lease:
        return await self._owner.run(self.lock.acquire, *args, **kwargs)

    async def try_acquire(self) -> Lease | None:
        return await self._owner.run(self.lock.try_acquire)

    async def release(self) -> redlease.ReleaseOutcome:
        return await self._owner.run(self.lock.release)

    async def extend(self, *args: Any, **kwargs: Any) -> Lease:
        return await self._owner.run(self.lock.extend, *args, **kwargs)

    async def locked(self) -> bool:
        return await self._owner.run(self.lock.locked)

    async def owned(self) -> bool:
        return await self._owner.run(self.lock.owned)

    async def __aenter__(self) -> Lease:
        return await self._owner.run(self.lock.__enter__)

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._owner.run(self.lock.__exit__, *exc_info)


class SyncLocksAdapter:
    """Awaitable face of a sync :class:`~redlease.Locks`; all calls on one thread."""

    def __init__(self, locks: redlease.Locks) -> None:
        self.locks = locks
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="sync-flavour")
        ident = self._executor.submit(threading.get_ident).result()
        self.thread = Owner("thread", ident)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.locks, name)

    async def run(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, functools.partial(function, *args, **kwargs)
        )

    def lock(self, name: str, **options: Any) -> SyncLockAdapter:
        return SyncLockAdapter(self, self.locks.lock(name, **options))

    async def aclose(self) -> None:
        await self.run(self.locks.close)
        self._executor.shutdown(wait=True)


LocksFactory = Callable[..., Awaitable[Any]]


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["sync", "async"])
def flavor(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest_asyncio.fixture
async def make_locks(flavor: str, redlease_url: str, prefix: str) -> AsyncIterator[LocksFactory]:
    """``await make_locks(**options)``: a new client of the test's flavour (closed after)."""
    made: list[Any] = []

    async def make(url: str | None = None, **options: Any) -> Any:
        options.setdefault("prefix", prefix)
        target = url or redlease_url
        if flavor == "async":
            locks: Any = redlease.AsyncLocks(target, **options)
        else:
            locks = SyncLocksAdapter(redlease.Locks(target, **options))
        made.append(locks)
        return locks

    yield make
    for locks in made:
        await locks.aclose()


def subscribed_channels(client: redis.Redis, pattern: str) -> list[Any]:
    """The channels matching ``pattern`` someone listens on, sharded or classic, sorted.

    ``PUBSUB SHARDCHANNELS`` came with Redis 7.0. A server before it (6.2 is our floor)
    has no sharded channels, so its "unknown subcommand" means none, not a failure.
    """
    try:
        sharded = list(client.execute_command("PUBSUB", "SHARDCHANNELS", pattern))
    except redis.ResponseError as error:
        if "unknown subcommand" not in str(error).lower():
            raise
        sharded = []
    return sorted(sharded + list(client.pubsub_channels(pattern)))


@pytest.fixture
def server(redlease_url: str) -> redis.Redis:
    """A plain client on the test server, for looking behind the library's back."""
    client = redis.Redis.from_url(redlease_url, decode_responses=True)
    yield client
    client.close()
