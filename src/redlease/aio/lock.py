"""The asyncio client: :class:`AsyncLocks` makes every primitive of the flavour."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any, TypeVar

from redlease.aio._flavor import wrap_locked
from redlease.aio.engine import AsyncEngine
from redlease.aio.family import (
    AsyncCountDownLatch,
    AsyncMultiLock,
    AsyncReadWriteLock,
    AsyncSemaphore,
)
from redlease.aio.handle import AsyncFairLock, AsyncLock
from redlease.core.templates import KeyTemplate

__all__ = ["AsyncFairLock", "AsyncLock", "AsyncLocks"]

F = TypeVar("F", bound=Callable[..., Any])


class AsyncLocks(AsyncEngine):
    """A redlease client over one ``redis.asyncio.Redis`` (or ``RedisCluster``, or a URL:
    ``cluster=True`` makes a cluster client of it): makes locks, owns the workers.

    One pub/sub connection and one renewal task serve every lock of the client. Create
    it once per process (per event loop) and close it with ``aclose()`` or ``async with``.
    """

    def lock(
        self,
        name: str,
        *,
        ttl: float | None = None,
        renew: bool | None = None,
        timeout: float | None = -1,
        blocking: bool = True,
        owner: Hashable | None = None,
        replicas: int | None = None,
    ) -> AsyncLock:
        """A handle on the lock ``name``; see :class:`AsyncLock` for the options."""
        return AsyncLock(
            self,
            name,
            ttl=ttl,
            renew=renew,
            timeout=timeout,
            blocking=blocking,
            owner=owner,
            replicas=replicas,
        )

    def fair_lock(self, name: str, **options: Any) -> AsyncFairLock:
        """A lock served in arrival order; options as for :meth:`lock`."""
        return AsyncFairLock(self, name, **options)

    def rw_lock(self, name: str, **options: Any) -> AsyncReadWriteLock:
        """A read-write lock: ``rw.read`` and ``rw.write``; options as for :meth:`lock`."""

        return AsyncReadWriteLock(self, name, **options)

    def semaphore(self, name: str, permits: int, **options: Any) -> AsyncSemaphore:
        """``permits`` leased places; every client must pass the same ``permits``."""

        return AsyncSemaphore(self, name, permits, **options)

    def latch(self, name: str) -> AsyncCountDownLatch:
        """A count-down latch: ``try_set_count``, ``count_down``, ``wait``."""

        return AsyncCountDownLatch(self, name)

    def multi_lock(self, names: Iterable[str], **options: Any) -> AsyncMultiLock:
        """Several locks taken all or none; options as for :meth:`lock`."""

        return AsyncMultiLock(self, names, **options)

    def locked(
        self,
        template: str,
        *,
        ttl: float | None = None,
        timeout: float | None = -1,
        blocking: bool = True,
    ) -> Callable[[F], F]:
        """Decorate a function so each call runs under the lock named by ``template``.

        ``template`` is a ``str.format`` pattern over the function's parameters, e.g.
        ``"order:{user_id}"``; a call that cannot get the lock raises :class:`LockTimeout`.
        """

        def decorate(function: F) -> F:
            key = KeyTemplate(template, function)

            def lock_for(
                args: tuple[Any, ...], kwargs: dict[str, Any], owner: Hashable | None = None
            ) -> AsyncLock:
                name = key.render(args, kwargs)
                return self.lock(name, ttl=ttl, timeout=timeout, blocking=blocking, owner=owner)

            return wrap_locked(function, lock_for)

        return decorate
