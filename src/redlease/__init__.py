"""redlease: distributed locks on Redis and Valkey.

    import redis, redlease

    locks = redlease.Locks(redis.Redis())
    with locks.lock("orders:42") as lease:
        write_order(fence=lease.fence)

The asyncio twin is :class:`AsyncLocks` (``async with alocks.lock(...)``).
"""

from __future__ import annotations

import logging

from redlease.aio.family import (
    AsyncCountDownLatch,
    AsyncMultiLock,
    AsyncReadLock,
    AsyncReadWriteLock,
    AsyncSemaphore,
    AsyncWriteLock,
)
from redlease.aio.lock import AsyncFairLock, AsyncLock, AsyncLocks
from redlease.aio.redlock import AsyncRedlock, AsyncRedlockLock
from redlease.core.base import DEFAULT_TTL
from redlease.core.lease import Lease, MultiLease, ReleaseOutcome
from redlease.errors import (
    AuthenticationFailed,
    FenceExhausted,
    FenceRejected,
    InvalidArgument,
    InvalidName,
    LeaseLost,
    LockError,
    LockTimeout,
    NotOwned,
    NotReplicated,
    RowNotFound,
    ServerNotFound,
    ServerRefused,
    ServerUnavailable,
    WrongKeyType,
)
from redlease.fencing import AsyncRedisGuard, RedisGuard, SqlGuard
from redlease.sync.family import (
    CountDownLatch,
    MultiLock,
    ReadLock,
    ReadWriteLock,
    Semaphore,
    WriteLock,
)
from redlease.sync.lock import FairLock, Lock, Locks
from redlease.sync.redlock import Redlock, RedlockLock

__version__ = "0.1.0"

logging.getLogger("redlease").addHandler(logging.NullHandler())
"""A library speaks only when the application configured logging (lost leases, expired
releases and eviction warnings then go where the application sends warnings)."""

__all__ = [
    "DEFAULT_TTL",
    "AsyncCountDownLatch",
    "AsyncFairLock",
    "AsyncLock",
    "AsyncLocks",
    "AsyncMultiLock",
    "AsyncReadLock",
    "AsyncReadWriteLock",
    "AsyncRedisGuard",
    "AsyncRedlock",
    "AsyncRedlockLock",
    "AsyncSemaphore",
    "AsyncWriteLock",
    "AuthenticationFailed",
    "CountDownLatch",
    "FairLock",
    "FenceExhausted",
    "FenceRejected",
    "InvalidArgument",
    "InvalidName",
    "Lease",
    "LeaseLost",
    "Lock",
    "LockError",
    "LockTimeout",
    "Locks",
    "MultiLease",
    "MultiLock",
    "NotOwned",
    "NotReplicated",
    "ReadLock",
    "ReadWriteLock",
    "RedisGuard",
    "Redlock",
    "RedlockLock",
    "ReleaseOutcome",
    "RowNotFound",
    "Semaphore",
    "ServerNotFound",
    "ServerRefused",
    "ServerUnavailable",
    "SqlGuard",
    "WriteLock",
    "WrongKeyType",
    "__version__",
]
