"""Probe leases: how soon a worker is told that a fault took its lease away.

A worker started with ``--probe-url`` keeps two renewing leases of its own for its whole
life, one per flavour: ``probe-<worker>-sync`` through a :class:`~redlease.Locks` and
``probe-<worker>-asyncio`` through an :class:`~redlease.AsyncLocks` (in a thread with its
own event loop). Each is built the way the README builds a client, on redis-py's defaults
(no socket timeout, the default retry), and reaches the lock server the way the worker's
lock traffic does (the same proxy or network namespace), so a fault aimed at the worker
hits them too.

Each probe logs ``probe`` when it gets its lease and ``lost`` the moment the library marks
the lease lost (from its ``on_lost`` callback), with the lease's local deadline; then it
takes a lease again. The worker's own lock is not renewed and its sections are short, so
the probes are what a long-held, renewed lease of the README looks like under the fault.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from contextlib import suppress

import redis
import redis.asyncio

from redlease.aio.lock import AsyncLocks
from redlease.chaos.eventlog import EventLog
from redlease.core.lease import Lease
from redlease.errors import LockError
from redlease.sync.lock import Locks

PROBE_PAUSE = 0.01
STOP_TIMEOUT = 5.0
FLAVOURS = ("sync", "asyncio")


def probe_name(worker: str, flavour: str) -> str:
    return f"probe-{worker}-{flavour}"


class Probes:
    """The two probe threads of one worker."""

    def __init__(self, url: str, prefix: str, worker: str, ttl: float, log: EventLog) -> None:
        self.url = url
        self.prefix = prefix
        self.worker = worker
        self.ttl = ttl
        self.log = log
        self.stopping = threading.Event()
        self.threads = [
            threading.Thread(target=self._sync, name="probe-sync", daemon=True),
            threading.Thread(target=self._asyncio, name="probe-asyncio", daemon=True),
        ]

    def __enter__(self) -> Probes:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(STOP_TIMEOUT)

    def _took(self, flavour: str, lease: Lease | None) -> Lease | None:
        if lease is not None:
            self.log.event("probe", 0, probe=flavour, fence=lease.fence, deadline=lease.expires_at)
            lease.on_lost(self._reporter(flavour))
        return lease

    def _reporter(self, flavour: str) -> Callable[[Lease], None]:
        def lost(lease: Lease) -> None:
            self.log.event(
                "lost", 0, probe=flavour, reason=lease.lost_reason, deadline=lease.expires_at
            )

        return lost

    def _failed(self, flavour: str, error: Exception) -> None:
        self.log.event("error", 0, where=f"probe-{flavour}", error=str(error)[:200])

    def _sync(self) -> None:
        client = redis.Redis.from_url(self.url)
        with Locks(client, prefix=self.prefix) as locks:
            lock = locks.lock(probe_name(self.worker, "sync"), ttl=self.ttl, renew=True)
            lease: Lease | None = None
            while not self.stopping.is_set():
                if lease is None or lease.lost:
                    try:
                        lease = self._took("sync", lock.try_acquire())
                    except (LockError, redis.RedisError) as error:
                        self._failed("sync", error)
                self.stopping.wait(PROBE_PAUSE)
            if lease is not None and not lease.lost:
                with suppress(LockError, redis.RedisError):
                    lock.release()
        client.close()

    def _asyncio(self) -> None:
        asyncio.run(self._asyncio_probe())

    async def _asyncio_probe(self) -> None:
        client = redis.asyncio.Redis.from_url(self.url)
        async with AsyncLocks(client, prefix=self.prefix) as locks:
            lock = locks.lock(probe_name(self.worker, "asyncio"), ttl=self.ttl, renew=True)
            lease: Lease | None = None
            while not self.stopping.is_set():
                if lease is None or lease.lost:
                    try:
                        lease = self._took("asyncio", await lock.try_acquire())
                    except (LockError, redis.RedisError) as error:
                        self._failed("asyncio", error)
                await asyncio.sleep(PROBE_PAUSE)
            if lease is not None and not lease.lost:
                with suppress(LockError, redis.RedisError):
                    await lock.release()
        await client.aclose()
