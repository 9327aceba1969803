"""What ``close()`` / ``aclose()`` does to the work a client has under way: its waiters end
(a closed client takes no new lease), and it does not wait out a renewal round that a
silent server holds up (guide.md: it waits up to 1 s for background work)."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import pytest
import redis

import redlease
from conftest import PRIVATE_SERVERS_ONLY, SyncLocksAdapter, allowing, eventually
from redlease import ReleaseOutcome
from redlease.server import EmbeddedServer


async def close(locks: Any) -> float:
    """Close a client of either flavour from outside its own thread; the seconds it took."""
    started = time.monotonic()
    if isinstance(locks, redlease.AsyncLocks):
        await locks.aclose()
    else:  # the adapter's one thread may be busy waiting: close from another
        await asyncio.to_thread(locks.locks.close)
    return time.monotonic() - started


async def test_close_ends_a_wait_and_a_release_then_leaves_the_lock_free(
    make_locks, server: redis.Redis, round_trip
):
    """A waiter of a client that closes raises ``InvalidArgument`` at once and leaves the
    queue: the holder's release then frees the lock for anyone, where it used to skip the
    closed client's entry, leave the lock free and let the waiter time out with "still
    held by another owner" (or grant the closed client a lease nobody renews)."""
    holder, waiting = await make_locks(), await make_locks()
    keys = holder.lock("gate").keys
    await holder.lock("gate", ttl=30).acquire()
    waiter = asyncio.create_task(waiting.lock("gate", owner="w").acquire(timeout=30))
    assert await eventually(lambda: server.llen(keys.queue) == 1, 5)

    took = await close(waiting)
    with pytest.raises(redlease.InvalidArgument, match="closed"):
        await asyncio.wait_for(waiter, allowing(round_trip, quiet=2.0))
    assert took < 1 + allowing(round_trip, quiet=1.0), f"close() took {took:.2f} s"
    assert await eventually(lambda: server.llen(keys.queue) == 0, 5), "the entry stayed"

    assert await holder.lock("gate").release() is ReleaseOutcome.RELEASED
    assert server.get(keys.lease) is None
    assert await (await make_locks()).lock("gate").try_acquire() is not None


@pytest.mark.timeout(60)
async def test_close_does_not_wait_out_a_renewal_a_silent_server_holds_up(
    flavor, prefix, round_trip
):
    """A renewal round sent to a stopped server waits up to the lease's deadline (the
    socket timeout here is a minute): ``close()`` leaves it behind after a second."""
    ttl = 9.0
    with EmbeddedServer() as stopped:
        url = f"{stopped.url}?socket_timeout=60"
        locks: Any = redlease.Locks(url, prefix=prefix)
        if flavor == "async":
            locks = redlease.AsyncLocks(url, prefix=prefix)
            await locks.lock("kept", ttl=ttl, renew=True).acquire()
        else:
            await asyncio.to_thread(locks.lock("kept", ttl=ttl, renew=True).acquire)
        stopped.pause()
        try:
            await asyncio.sleep(ttl / 3 + 0.5)  # the renewal is on its way, unanswered
            if flavor == "async":
                took = await close(locks)
            else:
                started = time.monotonic()
                await asyncio.to_thread(locks.close)
                took = time.monotonic() - started
        finally:
            stopped.resume()
    assert took < 1 + allowing(round_trip, quiet=1.0), f"close() took {took:.2f} s"


async def test_an_acquire_that_starts_as_the_client_closes_says_closed(
    make_locks, flavor, prefix, redlease_url, round_trip
):
    """One that starts waiting as ``close()`` runs ends like a waiter: ``InvalidArgument``,
    at once. It used to meet the connections close() cut (``ServerUnavailable`` on a
    healthy server), or wait 10 s for a subscription the closed link never confirmed."""
    holder = await make_locks()
    await holder.lock("gate", ttl=30, renew=True).acquire()
    ended: list[BaseException | str] = []
    for _ in range(20):
        closing: Any = (redlease.AsyncLocks if flavor == "async" else redlease.Locks)(
            redlease_url, prefix=prefix
        )
        if flavor == "async":
            waiter = asyncio.create_task(closing.lock("gate").acquire(timeout=30))
        else:
            waiter = asyncio.create_task(
                asyncio.to_thread(closing.lock("gate").acquire, timeout=30)
            )
        await asyncio.sleep(random.uniform(0, 0.01))
        await (closing.aclose() if flavor == "async" else asyncio.to_thread(closing.close))
        started = time.monotonic()
        try:
            await asyncio.wait_for(waiter, 15)
            ended.append("a lease")
        except Exception as exc:
            ended.append(exc)
        took = time.monotonic() - started
        assert took < allowing(round_trip, quiet=2.0), f"it ended {took:.2f} s after close()"
    assert [end for end in ended if not isinstance(end, redlease.InvalidArgument)] == []


@PRIVATE_SERVERS_ONLY
@pytest.mark.timeout(60)
async def test_close_ends_a_redlock_wait(flavor, prefix, redlease_servers_factory, round_trip):
    """A Redlock waiter retries rounds instead of queueing: close() ends it between two
    rounds. It used to be granted the lock after close(), which the sync client then
    renewed for ever."""
    urls = [server.url for server in redlease_servers_factory(3)]
    make = redlease.AsyncRedlock if flavor == "async" else redlease.Redlock
    holder, closing = make(urls, prefix=prefix), make(urls, prefix=prefix)
    face: Any = closing if flavor == "async" else SyncLocksAdapter(closing)
    held = SyncLocksAdapter(holder) if flavor == "sync" else holder
    await held.lock("n", ttl=1.5).acquire()
    waiter = asyncio.create_task(face.lock("n", ttl=2).acquire(timeout=10))
    await asyncio.sleep(0.4)
    await (closing.aclose() if flavor == "async" else asyncio.to_thread(closing.close))
    with pytest.raises(redlease.InvalidArgument, match="closed"):
        await asyncio.wait_for(waiter, allowing(round_trip, quiet=1.0))
    await asyncio.sleep(2.0)  # the holder's lease ran out: nobody holds the lock now
    assert await held.lock("n", owner="next").try_acquire() is not None
    await held.aclose()


async def test_a_redlock_grant_that_lands_as_close_runs_is_given_back(
    flavor, prefix, redlease_servers_factory
):
    """A round sent before ``close()`` and answered by the masters while ``close()`` runs
    (here: paused masters, and a renewal round that keeps ``close()`` busy for its second)
    granted the closed client a lease that nobody renewed, and the lock stayed held for its
    TTL; now the grant is given back on every master and the waiter says the client closed.
    """
    servers = redlease_servers_factory(3)
    make = redlease.AsyncRedlock if flavor == "async" else redlease.Redlock
    holder, closing = (make([s.url for s in servers], prefix=prefix) for _ in range(2))
    face: Any = closing if flavor == "async" else SyncLocksAdapter(closing)
    held: Any = SyncLocksAdapter(holder) if flavor == "sync" else holder
    await held.lock("n", ttl=1.0, renew=False).acquire()
    await face.lock("busy", ttl=1.0, owner="renewed").acquire()
    waiter = asyncio.create_task(face.lock("n", ttl=30).acquire(timeout=20))
    await asyncio.sleep(0.3)
    for server in servers:
        server.pause()
    try:
        await asyncio.sleep(1.0)  # the holder's lease runs out; the waiter's round waits
        closed = asyncio.create_task(
            closing.aclose() if flavor == "async" else asyncio.to_thread(closing.close)
        )
        await asyncio.sleep(0.2)
    finally:
        for server in servers:
            server.resume()
    await closed
    with pytest.raises(redlease.InvalidArgument, match="closed"):
        await asyncio.wait_for(waiter, 20)
    assert await held.lock("n", owner="next").try_acquire() is not None
    await held.aclose()


@pytest.mark.parametrize("waits", ["timed out before close()", "waiting at close()"])
async def test_a_closed_redlock_client_gives_back_what_silent_masters_grant_later(
    flavor, prefix, redlease_servers_factory, round_trip, waits
):
    """Rounds sent to paused masters run when they resume. A single-server client withdraws
    such a grant after ``close()`` too (guide.md); a Redlock client stopped giving back once
    closed, so the lock stayed held for the grant's TTL by nobody; and ``close()`` itself
    took 4.5 s behind its paused masters."""
    servers = redlease_servers_factory(3)
    urls = [server.url for server in servers]
    make = redlease.AsyncRedlock if flavor == "async" else redlease.Redlock
    closing = make(urls, prefix=prefix)
    face: Any = closing if flavor == "async" else SyncLocksAdapter(closing)
    await face.lock("warm", ttl=5).acquire()  # the connections are open before the pause
    await face.lock("warm").release()
    for server in servers:
        server.pause()
    try:
        if waits == "timed out before close()":
            with pytest.raises(redlease.ServerUnavailable):
                await face.lock("job", ttl=8).acquire(timeout=1)
            took = await close_redlock(closing)
        else:
            waiter = asyncio.create_task(face.lock("job", ttl=8).acquire())
            await asyncio.sleep(0.5)
            took = await close_redlock(closing)
        await asyncio.sleep(2.0)  # the round in flight outlives close() and is answered later
    finally:
        for server in servers:
            server.resume()
    assert took < allowing(round_trip, quiet=1.5), f"close() took {took:.2f} s"
    if waits == "waiting at close()":
        with pytest.raises(redlease.InvalidArgument, match="closed"):
            await asyncio.wait_for(waiter, allowing(round_trip, quiet=5.0))
    masters = [redis.Redis.from_url(url) for url in urls]
    assert await eventually(
        lambda: not any(master.exists(f"{prefix}:{{job}}") for master in masters),
        allowing(round_trip, quiet=3.0),
    ), "a grant nobody holds blocks the lock until its TTL runs out"

    def scripts_connected() -> list[str]:
        listed = [master.client_list() for master in masters]
        return [c["addr"] for clients in listed for c in clients if "eval" in c["cmd"]]

    assert await eventually(lambda: not scripts_connected(), allowing(round_trip, quiet=3.0)), (
        f"the closed client left connections on the masters: {scripts_connected()}"
    )
    for master in masters:
        master.close()


async def close_redlock(redlock: Any) -> float:
    started = time.monotonic()
    if isinstance(redlock, redlease.AsyncRedlock):
        await redlock.aclose()
    else:
        await asyncio.to_thread(redlock.close)
    return time.monotonic() - started
