# Generated from redlease/aio/lock.py by tools/unasync.py; edit that file instead.
"""The sync client: :class:`Locks` makes every primitive of the flavour."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any, TypeVar

from redlease.core.templates import KeyTemplate
from redlease.sync._flavor import wrap_locked
from redlease.sync.engine import Engine
from redlease.sync.family import (
    CountDownLatch,
    MultiLock,
    ReadWriteLock,
    Semaphore,
)
from redlease.sync.handle import FairLock, Lock

__all__ = ["FairLock", "Lock", "Locks"]

F = TypeVar("F", bound=Callable[..., Any])


class Locks(Engine):
    """A redlease client over one ``redis.Redis`` (or ``RedisCluster``, or a URL:
    ``cluster=True`` makes a cluster client of it): makes locks, owns the workers.

    One pub/sub connection and one renewal thread serve every lock of the client. Create
    it once per process (and share it between threads) and close it with ``close()`` or ``with``.
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
    ) -> Lock:
        """A handle on the lock ``name``; see :class:`Lock` for the options."""
        return Lock(
            self,
            name,
            ttl=ttl,
            renew=renew,
            timeout=timeout,
            blocking=blocking,
            owner=owner,
            replicas=replicas,
        )

    def fair_lock(self, name: str, **options: Any) -> FairLock:
        """A lock served in arrival order; options as for :meth:`lock`."""
        return FairLock(self, name, **options)

    def rw_lock(self, name: str, **options: Any) -> ReadWriteLock:
        """A read-write lock: ``rw.read`` and ``rw.write``; options as for :meth:`lock`."""

        return ReadWriteLock(self, name, **options)

    def semaphore(self, name: str, permits: int, **options: Any) -> Semaphore:
        """``permits`` leased places; every client must pass the same ``permits``."""

        return Semaphore(self, name, permits, **options)

    def latch(self, name: str) -> CountDownLatch:
        """A count-down latch: ``try_set_count``, ``count_down``, ``wait``."""

        return CountDownLatch(self, name)

    def multi_lock(self, names: Iterable[str], **options: Any) -> MultiLock:
        """Several locks taken all or none; options as for :meth:`lock`."""

        return MultiLock(self, names, **options)

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
            ) -> Lock:
                name = key.render(args, kwargs)
                return self.lock(name, ttl=ttl, timeout=timeout, blocking=blocking, owner=owner)

            return wrap_locked(function, lock_for)

        return decorate
