"""Many leases held at once with automatic renewal, in one fresh process per library.

The child acquires ``count`` distinct locks, holds them for ``hold_s`` while sampling its
thread count, then checks on the server (pipelined GETs) which keys still carry its
token, and releases everything. CPU is ``time.process_time()`` of the whole child during
the hold. Only redlease and python-redis-lock renew on their own; redis-py's ``Lock`` and
pottery's ``Redlock`` have a manual ``extend()`` only, so they get ``null``.

* redlease: one ``Locks`` client, ``locks.lock(name, ttl=ttl_s, renew=True)``.
* python-redis-lock: ``Lock(r, name, expire=ttl_s, auto_renewal=True)`` (one thread per
  lock, renewing every ``expire * 2/3``), twice: over the default client (redis-py's pool
  allows 100 connections; a renewal thread that finds none free dies with
  ``MaxConnectionsError``), and over a pool big enough for one connection per lock
  (``max_connections = count + 100``), reported as ``python-redis-lock:big-pool``.
  A ``BlockingConnectionPool`` is not used: in a trial with 2,000 locks and 500
  connections its waiting threads burned about 58 s of system CPU in 6 s and every
  lock was lost. The big pool is skipped (:func:`skip_reason`) where it would need more
  connections than the server's ``maxclients`` allows.

The parent runs every library at each held-lease count of the plan (100, 1,000, 10,000
in the full run), so the figures show how renewal cost grows with the leases held.
"""

from __future__ import annotations

import multiprocessing
import queue
import resource
import threading
import time
from collections import Counter
from typing import Any

import redis

from counting import delta, get_while_alive, server_commands

RENEWING_LIBRARIES = ("redlease", "python-redis-lock", "python-redis-lock:big-pool")
BIG_POOL_MARGIN = 100
ACQUIRE_BUDGET_S = 180.0
RELEASE_BUDGET_S = 120.0
SAMPLE_EVERY_S = 0.25
CHECK_CHUNK = 1000


def renewal_child(library: str, url: str, count: int, ttl_s: int, hold_s: float, out: Any) -> None:
    thread_errors: Counter[str] = Counter()

    def record(args: threading.ExceptHookArgs) -> None:
        thread_errors[f"{args.exc_type.__module__}.{args.exc_type.__name__}"] += 1

    threading.excepthook = record
    admin = redis.Redis.from_url(url)
    names = [f"rlbench:renew:{library}:{index}" for index in range(count)]
    threads_before = threading.active_count()
    holder = _Holder.open(library, url, ttl_s, count)
    started = time.monotonic()
    acquire_errors: Counter[str] = Counter()
    for name in names:
        if time.monotonic() - started > ACQUIRE_BUDGET_S:
            break
        try:
            holder.acquire(name)
        except Exception as exc:  # e.g. the pool ran dry while renewals were in flight
            acquire_errors[f"{type(exc).__name__}: {str(exc)[:80]}"] += 1
    acquire_s = time.monotonic() - started

    peak_threads = threading.active_count()
    before = server_commands(admin)
    cpu_start, wall_start = time.process_time(), time.monotonic()
    while time.monotonic() - wall_start < hold_s:
        time.sleep(SAMPLE_EVERY_S)
        peak_threads = max(peak_threads, threading.active_count())
    cpu_s, wall_s = time.process_time() - cpu_start, time.monotonic() - wall_start
    ran = delta(before, server_commands(admin))
    connections = admin.info("clients").get("connected_clients")

    still_ours = holder.still_ours(admin)
    started = time.monotonic()
    release_errors = holder.release_all(RELEASE_BUDGET_S)
    release_s = time.monotonic() - started
    extra = holder.details()
    holder.close()
    out.put(
        {
            "renew_threads": peak_threads - threads_before,
            "renew_cpu_pct": 100.0 * cpu_s / wall_s,
            "renew_lost": len(holder.held) - still_ours,
            "renew_locks": len(holder.held),
            "renew_acquire_errors": dict(acquire_errors),
            "renew_release_errors": release_errors,
            "renew_server_connections": connections,
            "renew_thread_errors": dict(thread_errors),
            "renew_server_commands": dict(sorted(ran.items())),
            "renew_evalsha_per_s": ran.get("evalsha", 0) / wall_s,
            "renew_acquire_all_s": acquire_s,
            "renew_release_all_s": release_s,
            "renew_max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "renew_hold_s": wall_s,
        }
        | extra
    )


class _Holder:
    """Acquire, check and release many locks of one library."""

    def __init__(self) -> None:
        self.held: list[tuple[Any, str, str]] = []  # (handle, key on the server, token)

    @staticmethod
    def open(library: str, url: str, ttl_s: int, count: int) -> _Holder:
        if library == "redlease":
            return _RedleaseHolder(url, ttl_s)
        pool_size = count + BIG_POOL_MARGIN if library.endswith(":big-pool") else None
        return _PrlHolder(url, ttl_s, pool_size)

    def acquire(self, name: str) -> None:
        raise NotImplementedError

    def still_ours(self, admin: redis.Redis) -> int:
        ours = 0
        for start in range(0, len(self.held), CHECK_CHUNK):
            chunk = self.held[start : start + CHECK_CHUNK]
            pipe = admin.pipeline(transaction=False)
            for _, key, _ in chunk:
                pipe.get(key)
            for (_, _, token), value in zip(chunk, pipe.execute(), strict=True):
                ours += value is not None and value.decode() == token
        return ours

    def release_all(self, budget_s: float) -> int:
        errors = 0
        deadline = time.monotonic() + budget_s
        for handle, _, _ in self.held:
            if time.monotonic() > deadline:
                break
            errors += self.release(handle)
        return errors

    def release(self, handle: Any) -> int:
        raise NotImplementedError

    def details(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        pass


class _RedleaseHolder(_Holder):
    def __init__(self, url: str, ttl_s: int) -> None:
        import redlease  # noqa: PLC0415

        super().__init__()
        self.module = redlease
        self.client = redis.Redis.from_url(url)
        self.locks = redlease.Locks(self.client)
        self.ttl_s = ttl_s

    def acquire(self, name: str) -> None:
        lock = self.locks.lock(name, ttl=self.ttl_s, renew=True)
        lease = lock.acquire()
        # the lease key holds "<fence>:<token>" (the fence travels with the lease)
        self.held.append(((lock, lease), lock.keys.lease, f"{lease.fence}:{lease.token}"))

    def release(self, handle: Any) -> int:
        lock, _ = handle
        try:
            outcome = lock.release()
        except self.module.LockError:
            return 1
        return int(outcome is not self.module.ReleaseOutcome.RELEASED)

    def details(self) -> dict[str, Any]:
        leases = [lease for (_, lease), _, _ in self.held]
        return {
            "renew_round_trips": self.locks._renewer.round_trips,
            "renew_leases_renewed": sum(lease.renewals for lease in leases),
            "renew_marked_lost": sum(bool(lease.lost) for lease in leases),
        }

    def close(self) -> None:
        self.locks.close()
        self.client.close()


class _PrlHolder(_Holder):
    def __init__(self, url: str, ttl_s: int, pool_size: int | None) -> None:
        import redis_lock  # noqa: PLC0415

        super().__init__()
        self.module = redis_lock
        self.client = redis.Redis.from_url(url, max_connections=pool_size)
        self.ttl_s = ttl_s

    def acquire(self, name: str) -> None:
        lock = self.module.Lock(self.client, name, expire=self.ttl_s, auto_renewal=True)
        lock.acquire(blocking=True, timeout=self.ttl_s)
        self.held.append((lock, f"lock:{name}", lock.id))

    def release(self, handle: Any) -> int:
        try:
            handle.release()
        except (self.module.NotAcquired, redis.RedisError):
            return 1
        return 0

    def close(self) -> None:
        self.client.close()


def skip_reason(admin: redis.Redis, library: str, count: int) -> str | None:
    """Why a run cannot be meaningful on this server, or None.

    The big-pool variant opens up to one connection per lock; past the server's
    ``maxclients`` the server refuses them and the run only measures that refusal.
    """
    if not library.endswith(":big-pool"):
        return None
    try:
        allowed = int(admin.config_get("maxclients").get("maxclients", 0))
    except (redis.RedisError, ValueError):
        return None
    needed = count + BIG_POOL_MARGIN
    if allowed and needed > allowed:
        return f"needs up to {needed:,} connections; the server allows {allowed:,} (maxclients)"
    return None


def run_renewal(url: str, library: str, count: int, ttl_s: int, hold_s: float) -> dict[str, Any]:
    """Run the child for one library; its figures, or an ``error`` entry."""
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    process = context.Process(
        target=renewal_child, args=(library, url, count, ttl_s, hold_s, out), daemon=True
    )
    process.start()
    try:
        return get_while_alive(out, [process], ACQUIRE_BUDGET_S + hold_s + RELEASE_BUDGET_S + 60)
    except queue.Empty:
        return {"error": f"{library}: renewal child died or did not report in time"}
    finally:
        process.join(30.0)
        if process.is_alive():
            process.terminate()
            process.join(5.0)
