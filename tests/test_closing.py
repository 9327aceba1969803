"""What ``close()`` / ``aclose()`` does to the work a client has under way: its waiters end
(a closed client takes no new lease), and it does not wait out a renewal round that a
silent server holds up (guide.md: it waits up to 1 s for background work)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis

import redlease
from conftest import allowing, eventually
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
