"""Waiters wake in time after faults: a lost queue entry, a stopped holder, a slow subscription.

A blocked waiter sends nothing while it waits; these scenarios break what it relies on
(its queue entry, the holder it waits behind, its subscription) and check that it still
gets the lock within about a round trip of the next release, or within the lease of the
holder that stopped.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

import redlease
from redlease.chaos.proxy import Mode, ProxyHub
from redlease.core.subscriptions import has_sharded_pubsub

WAITER = str(Path(__file__).with_name("proc_waiter.py"))


async def until(condition, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "the condition never came true"
        await asyncio.sleep(0.01)


def round_trip(client: redis.Redis) -> float:
    started = time.monotonic()
    for _ in range(5):
        client.ping()
    return (time.monotonic() - started) / 5


async def test_a_waiter_whose_queue_entry_was_lost_rejoins_on_its_next_try(
    make_locks, server, prefix
):
    holder, waiter = await make_locks(), await make_locks()
    queue = f"{prefix}:{{rejoin}}:queue"
    lock = holder.lock("rejoin", ttl=20)
    await lock.acquire()
    waiting = waiter.lock("rejoin", ttl=20, owner="waiter")
    pending = asyncio.create_task(waiting.acquire(timeout=15))
    await until(lambda: server.llen(queue) == 1)

    server.delete(queue)  # a failover or a failed hand-off lost the entry
    server.client_kill_filter(_type="pubsub")  # the waiter's link drops: it tries again
    await until(lambda: server.llen(queue) == 1)

    released = time.monotonic()
    await lock.release()
    await pending
    waited = time.monotonic() - released
    assert waited < 1.0 + 20 * round_trip(server), f"granted {waited:.2f} s after the release"
    await waiting.release()


async def test_a_waiter_survives_a_restart_and_is_handed_the_lock_at_the_next_release(
    make_locks, redlease_servers_factory
):
    (private,) = redlease_servers_factory(1)
    holder, waiter = await make_locks(private.url), await make_locks(private.url)
    waiting = waiter.lock("restart", ttl=20, owner="waiter")
    await holder.lock("restart", ttl=20).acquire()
    pending = asyncio.create_task(waiting.acquire(timeout=20))
    plain = redis.Redis(port=private.port)
    await until(lambda: plain.llen(f"{waiting.keys.queue}") == 1)
    plain.close()

    private.restart()  # empty: the lease and the queue are gone
    newcomer = await make_locks(private.url)
    other = newcomer.lock("restart", ttl=20, owner="newcomer")
    # the waiter gets the free lock, or queues behind a newcomer that was faster
    taken = await other.try_acquire()
    if taken is not None:
        plain = redis.Redis(port=private.port)
        await until(lambda: plain.llen(f"{waiting.keys.queue}") == 1, within=10)
        plain.close()
        released = time.monotonic()
        await other.release()
        await pending
        assert time.monotonic() - released < 2.0
    else:
        await pending
    await waiting.release()


def start_waiter(url: str, prefix: str, name: str, flavor: str, *args: str) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, WAITER, url, prefix, name, "--flavor", flavor, *args],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "WAITING"
    return process


@pytest.mark.parametrize("kind", ["lock", "fair_lock"])
async def test_a_stopped_waiter_handed_the_lock_keeps_it_only_for_its_own_ttl(
    make_locks, server, redlease_url, prefix, flavor, kind
):
    holder, behind = await make_locks(), await make_locks()
    make = holder.lock if kind == "lock" else holder.fair_lock
    first = make("stopped")  # the default 30 s lease, renewed
    await first.acquire()
    queue = f"{prefix}:{{stopped}}:queue"
    extra = ["--fair"] if kind == "fair_lock" else []
    stopped = start_waiter(redlease_url, prefix, "stopped", flavor, "--ttl", "1", *extra)
    try:
        await until(lambda: server.llen(queue) == 1)
        make_behind = behind.lock if kind == "lock" else behind.fair_lock
        later = make_behind("stopped", ttl=10, owner="behind")
        pending = asyncio.create_task(later.acquire(timeout=20))
        await until(lambda: server.llen(queue) == 2)
        stopped.send_signal(signal.SIGSTOP)

        released = time.monotonic()
        await first.release()  # handed to the stopped waiter, with its 1 s lease
        await pending
        waited = time.monotonic() - released
        assert 0.8 < waited < 1.0 + 1.0 + 20 * round_trip(server), (
            f"granted {waited:.2f} s after the hand-off to a waiter with a 1 s lease"
        )
        await later.release()
    finally:
        stopped.kill()
        stopped.wait()


async def test_waiting_for_a_subscription_confirmation_ends_with_the_callers_timeout(
    redlease_url, prefix, flavor
):
    hub = ProxyHub()
    with hub:
        target = redis.Redis.from_url(redlease_url).connection_pool.connection_kwargs
        link = hub.link(target["host"], target["port"])
        client_options = {"socket_timeout": 30, "socket_connect_timeout": 30}
        if flavor == "async":
            locks = redlease.AsyncLocks(
                redis.asyncio.Redis(host="127.0.0.1", port=link.port, **client_options),
                prefix=prefix,
            )
        else:
            locks = redlease.Locks(
                redis.Redis(host="127.0.0.1", port=link.port, **client_options), prefix=prefix
            )
        other = redlease.AsyncLocks(redlease_url, prefix=prefix)
        try:
            await _slow_subscription_times_out(locks, other, link, flavor)
        finally:
            link.set()
            await other.aclose()
            if flavor == "async":
                await locks.aclose()
            else:
                locks.close()


async def _slow_subscription_times_out(locks, other, link, flavor) -> None:
    async def call(function, *args, **kwargs):
        if flavor == "async":
            return await function(*args, **kwargs)
        return await asyncio.to_thread(function, *args, **kwargs)

    warm, slow = "warm-up", "slow-sub"
    assert locks.lock(warm).keys.wake_prefix != locks.lock(slow).keys.wake_prefix
    theirs = other.lock(warm, ttl=10, owner="them")
    await theirs.acquire()
    pending = asyncio.create_task(call(locks.lock(warm, ttl=10, owner="me").acquire, timeout=10))
    await asyncio.sleep(0.3)  # our pub/sub link is made here, on another slot's channel
    await theirs.release()
    await pending
    await call(locks.lock(warm, ttl=10, owner="me").release)

    mine = locks.lock(slow, ttl=10, owner="me")
    theirs = other.lock(slow, ttl=10, owner="them")
    await call(mine.acquire)
    pending = asyncio.create_task(theirs.acquire(timeout=10))
    await asyncio.sleep(0.3)
    await call(mine.release)  # handed to them: this client queues at once next time
    await pending
    link.set(mode=Mode.BLACKHOLE)  # the subscription to this slot's channel is never confirmed

    started = time.monotonic()
    with pytest.raises(redlease.LockTimeout):
        await call(mine.acquire, timeout=0.5)
    assert time.monotonic() - started < 2.0
    link.set()
    await theirs.release()


@pytest.mark.timeout(90)
async def test_a_waiter_whose_channel_permission_is_revoked_is_told_and_heals(
    make_locks, redlease_servers_factory
):
    """Revoking a user's channel permission makes the server drop its pub/sub connection.
    The reconnect subscribes again and the server refuses: the waiter must hear of it
    (``ServerRefused`` naming the permission), not wait out the holder's lease deaf; and
    once the permission is back, the client's next wait is woken by the release again
    (its channel was believed subscribed, so nothing subscribed it again)."""
    (server,) = redlease_servers_factory(1)
    admin = redis.Redis(port=server.port)
    if not has_sharded_pubsub(admin.info("server")):
        admin.close()
        pytest.skip("Redis before 7.0 keeps a subscription whose permission was revoked")
    admin.execute_command("ACL", "SETUSER", "waiter", "on", ">pw", "~*", "&*", "+@all")
    holder = await make_locks(server.url)
    waiting = await make_locks(f"redis://waiter:pw@127.0.0.1:{server.port}/0")
    held = holder.lock("job", ttl=30, owner="holder")
    await held.acquire()
    waiter = asyncio.create_task(waiting.lock("job", owner="w").acquire(timeout=60))
    await until(lambda: len(waiting._notifier.channels()) == 1)
    admin.execute_command("ACL", "SETUSER", "waiter", "resetchannels")
    with pytest.raises(redlease.ServerRefused, match="permission"):
        await asyncio.wait_for(waiter, 20)

    admin.execute_command("ACL", "SETUSER", "waiter", "&*")
    waiter = asyncio.create_task(waiting.lock("job", owner="w").acquire(timeout=60))
    await until(lambda: admin.llen(held.keys.queue) == 1)
    await held.release()
    released_at = time.monotonic()
    lease = await asyncio.wait_for(waiter, 40)
    waited = time.monotonic() - released_at
    assert waited < max(2.0, 50 * round_trip(admin)), f"woken {waited:.2f} s after the release"
    await waiting.lock("job", owner="w").release()
    assert lease.fence > 0
    admin.close()


@pytest.mark.timeout(60)
async def test_a_subscription_to_a_stopped_server_ends_with_the_callers_timeout(
    make_locks, redlease_servers_factory
):
    """A waiter's client opens its wake-up connection on its first wait; to a stopped
    server (SIGSTOP: the TCP connection opens, the handshake never answers) that must end
    with the caller's timeout, as waiting for the subscription's confirmation does. The
    asyncio client opened it with no timeout at all (a waiter hung until the server came
    back), the sync one within the socket timeout (5 s)."""
    (server,) = redlease_servers_factory(1)
    locks = await make_locks(server.url)
    lock = locks.lock("quiet", owner="o")
    await lock.acquire()  # the client knows the server's pub/sub commands from now on
    await lock.release()
    locks._note_contention(lock.keys.lease)  # its next acquire listens before it tries
    server.pause()
    try:
        started = time.monotonic()
        with pytest.raises((redlease.ServerUnavailable, redlease.LockTimeout)):
            await asyncio.wait_for(lock.acquire(timeout=1.5), 30)
        took = time.monotonic() - started
    finally:
        server.resume()
    assert took < 1.5 + 1.0, f"the acquire ended after {took:.2f} s"
