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
from functools import partial

import redis
import redis.asyncio

from redlease.aio.lock import AsyncLocks
from redlease.chaos.eventlog import EventLog
from redlease.core.lease import Lease
from redlease.errors import LockError
from redlease.sync.lock import Locks

PROBE_PAUSE = 0.01
ERROR_PAUSE = 0.1
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

    def _took(self, flavour: str, lease: Lease | None, told: threading.Event) -> Lease | None:
        if lease is not None:
            self.log.event("probe", 0, probe=flavour, fence=lease.fence, deadline=lease.expires_at)
            told.clear()
            lease.on_lost(self._reporter(flavour, told))
        return lease

    def _reporter(self, flavour: str, told: threading.Event) -> Callable[[Lease], None]:
        def lost(lease: Lease) -> None:
            self.log.event(
                "lost", 0, probe=flavour, reason=lease.lost_reason, deadline=lease.expires_at
            )
            told.set()

        return lost

    def _failed(self, flavour: str, error: Exception) -> None:
        self.log.event("error", 0, where=f"probe-{flavour}", error=str(error)[:200])
        self.stopping.wait(ERROR_PAUSE)

    def _keep(
        self,
        flavour: str,
        release: Callable[[], object],
        try_acquire: Callable[[], Lease | None],
        pause: Callable[[], object],
    ) -> Lease | None:
        """Hold a lease until told to stop; once ``on_lost`` reported a loss, release the
        lease and take a new one.

        The callback is the signal, not ``lease.lost``: a release sent the moment the flag
        turns (at the lease's deadline) would take the lease off the renewer's books before
        the renewer reports it, and the report would wait for the release's reply.
        """
        lease: Lease | None = None
        told = threading.Event()
        while not self.stopping.is_set():
            try:
                if lease is not None and told.is_set():
                    lease = None
                    release()  # a lost lease still counts for its owner until released
                if lease is None:
                    lease = self._took(flavour, try_acquire(), told)
            except (LockError, redis.RedisError) as error:
                self._failed(flavour, error)
            pause()
        return lease

    def _sync(self) -> None:
        client = redis.Redis.from_url(self.url)
        with Locks(client, prefix=self.prefix) as locks:
            lock = locks.lock(probe_name(self.worker, "sync"), ttl=self.ttl, renew=True)
            pause = partial(self.stopping.wait, PROBE_PAUSE)
            lease = self._keep("sync", lock.release, lock.try_acquire, pause)
            if lease is not None and not lease.lost:
                with suppress(LockError, redis.RedisError):
                    lock.release()
        client.close()

    def _asyncio(self) -> None:
        """The same loop, each step run on this thread's event loop (which also runs the
        client's renewal task, during the steps and the pauses between them)."""
        loop = asyncio.new_event_loop()
        run = loop.run_until_complete
        client = redis.asyncio.Redis.from_url(self.url)
        locks = AsyncLocks(client, prefix=self.prefix)
        name = probe_name(self.worker, "asyncio")
        lock = locks.lock(name, ttl=self.ttl, renew=True, owner="probe")
        try:
            lease = self._keep(
                "asyncio",
                lambda: run(lock.release()),
                lambda: run(lock.try_acquire()),
                lambda: run(asyncio.sleep(PROBE_PAUSE)),
            )
            if lease is not None and not lease.lost:
                with suppress(LockError, redis.RedisError):
                    run(lock.release())
        finally:
            run(locks.aclose())
            run(client.aclose())
            loop.close()
