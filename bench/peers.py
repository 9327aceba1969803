"""One adapter per library, so every measurement drives them the same way.

Each session wraps one ``redis.Redis`` client (pooled, hiredis parser when installed) and
offers the three shapes the benchmark needs:

* ``cycle(key)``: the idiomatic ``with`` block, a fresh lock object per call, no body;
* ``acquire(key)`` / ``release(handle)``: the same, split so a worker can time both ends;
* ``close()``.

Settings (also stated in docs/benchmarks.md):

* redlease: ``locks.lock(key)`` (default 30 s lease, renewed while held); contended
  acquires pass ``timeout=HANG_GUARD_S``, which never fires in a healthy run.
* redis-py: ``r.lock(key, timeout=10)``; contended ``acquire(blocking=True)`` with the
  default ``sleep=0.1`` and ``blocking_timeout=HANG_GUARD_S``.
* python-redis-lock: ``redis_lock.Lock(r, key, expire=10)``; contended
  ``acquire(blocking=True, timeout=10)`` (its BLPOP wait is ``expire`` long either way).
* pottery: ``Redlock(key=key, masters={r}, auto_release_time=10)`` (one master);
  contended ``acquire(blocking=True, timeout=HANG_GUARD_S)``.

redlease's other primitives get sessions of their own for the ``fair`` and ``rw`` parts
(not compared with the peers): ``redlease-fair`` (``locks.fair_lock``), ``redlease-read``
and ``redlease-write`` (``locks.rw_lock(key).read`` / ``.write``), all with the same
defaults and hang guard as ``redlease``.
"""

from __future__ import annotations

import os
from contextlib import suppress
from typing import Any

import redis

LIBRARIES = ("redlease", "redis-py", "python-redis-lock", "pottery")
LEASE_S = 10
HANG_GUARD_S = 10.0
"""Longest single acquire in a contended run before it counts as an error (never hit)."""


class AcquireFailed(RuntimeError):
    """A blocking acquire gave up (its hang guard fired)."""


class Session:
    name = ""

    def __init__(self, url: str, client_name: str | None = None) -> None:
        self.client = redis.Redis.from_url(url, client_name=client_name)

    def cycle(self, key: str) -> None:
        raise NotImplementedError

    def warm_up(self, key: str) -> None:
        """Before a contended run on ``key``: load the scripts, open the connections."""
        self.cycle(f"{key}:warmup:{os.getpid()}")

    def acquire(self, key: str) -> Any:
        raise NotImplementedError

    def release(self, handle: Any) -> None:
        handle.release()

    def close(self) -> None:
        self.client.close()


class RedleaseSession(Session):
    name = "redlease"

    def __init__(self, url: str, client_name: str | None = None) -> None:
        import redlease  # noqa: PLC0415 - each worker imports only its own library

        super().__init__(url, client_name)
        self.locks = redlease.Locks(self.client)

    def cycle(self, key: str) -> None:
        with self.locks.lock(key):
            pass

    def warm_up(self, key: str) -> None:
        """Also wait once on ``key`` (this session holding it): that opens the client's
        wake-up connection and subscribes its channel in the key's slot, as a client that
        has waited before has done; a peer's client has no such connection to open."""
        import redlease  # noqa: PLC0415

        super().warm_up(key)
        with self.locks.lock(key, timeout=HANG_GUARD_S), suppress(redlease.LockTimeout):
            self.locks.lock(key, owner="warm-up").acquire(timeout=0.05)

    def acquire(self, key: str) -> Any:
        lock = self.locks.lock(key, timeout=HANG_GUARD_S)
        lock.acquire()
        return lock

    def close(self) -> None:
        self.locks.close()
        super().close()


class _RedleaseVariant(RedleaseSession):
    """A redlease session whose lock object comes from :meth:`make` (the other primitives,
    other options); the plain session keeps its direct calls, the ones compared with the
    peers."""

    warm_up = Session.warm_up

    def make(self, key: str, **options: Any) -> Any:
        raise NotImplementedError

    def cycle(self, key: str) -> None:
        with self.make(key):
            pass

    def acquire(self, key: str) -> Any:
        lock = self.make(key, timeout=HANG_GUARD_S)
        lock.acquire()
        return lock


class RedleaseFixedTtlSession(_RedleaseVariant):
    """``ttl=10`` and no renewal: isolates what registering a lease for renewal costs."""

    name = "redlease-ttl10"

    def make(self, key: str, **options: Any) -> Any:
        return self.locks.lock(key, ttl=LEASE_S, **options)


class RedleaseFairSession(_RedleaseVariant):
    """``locks.fair_lock(key)``: strict arrival order (the ``fair`` part)."""

    name = "redlease-fair"

    def make(self, key: str, **options: Any) -> Any:
        return self.locks.fair_lock(key, **options)


class RedleaseReadSession(_RedleaseVariant):
    """``locks.rw_lock(key).read``: readers share the lock (the ``rw`` part)."""

    name = "redlease-read"

    def make(self, key: str, **options: Any) -> Any:
        return self.locks.rw_lock(key, **options).read


class RedleaseWriteSession(_RedleaseVariant):
    """``locks.rw_lock(key).write``: one writer at a time (the ``rw`` part)."""

    name = "redlease-write"

    def make(self, key: str, **options: Any) -> Any:
        return self.locks.rw_lock(key, **options).write


class RedisPySession(Session):
    name = "redis-py"

    def cycle(self, key: str) -> None:
        with self.client.lock(key, timeout=LEASE_S):
            pass

    def acquire(self, key: str) -> Any:
        lock = self.client.lock(key, timeout=LEASE_S, blocking_timeout=HANG_GUARD_S)
        if not lock.acquire(blocking=True):
            raise AcquireFailed(key)
        return lock


class PythonRedisLockSession(Session):
    name = "python-redis-lock"

    def __init__(self, url: str, client_name: str | None = None) -> None:
        import redis_lock  # noqa: PLC0415

        super().__init__(url, client_name)
        self.module = redis_lock

    def cycle(self, key: str) -> None:
        with self.module.Lock(self.client, key, expire=LEASE_S):
            pass

    def acquire(self, key: str) -> Any:
        lock = self.module.Lock(self.client, key, expire=LEASE_S)
        if not lock.acquire(blocking=True, timeout=LEASE_S):
            raise AcquireFailed(key)
        return lock


class PotterySession(Session):
    name = "pottery"

    def __init__(self, url: str, client_name: str | None = None) -> None:
        from pottery import Redlock  # noqa: PLC0415

        super().__init__(url, client_name)
        self.redlock = Redlock

    def cycle(self, key: str) -> None:
        with self.redlock(key=key, masters={self.client}, auto_release_time=LEASE_S):
            pass

    def acquire(self, key: str) -> Any:
        lock = self.redlock(key=key, masters={self.client}, auto_release_time=LEASE_S)
        if not lock.acquire(blocking=True, timeout=HANG_GUARD_S):
            raise AcquireFailed(key)
        return lock


SESSIONS: dict[str, type[Session]] = {
    cls.name: cls
    for cls in (
        RedleaseSession,
        RedleaseFixedTtlSession,
        RedleaseFairSession,
        RedleaseReadSession,
        RedleaseWriteSession,
        RedisPySession,
        PythonRedisLockSession,
        PotterySession,
    )
}


def open_session(library: str, url: str, client_name: str | None = None) -> Session:
    return SESSIONS[library](url, client_name)


def versions() -> dict[str, str]:
    """Installed versions of the libraries compared and their client stack."""
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    found = {}
    packages = ("redlease", "redis", "hiredis", "python-redis-lock", "pottery", "aioredlock")
    for package in (*packages, "aioredis"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "not installed"
    return found
