"""Sentinel: locks through a Sentinel-managed client, across a failover, and its limits.

The docs promise that clients follow the new master after a failover (redis-py's Sentinel
client for commands, redlease's wake-up connection reconnecting), so a lock granted and
replicated before a graceful failover is still held afterwards and a waiter blocked across
it still gets the lock. They also say what Sentinel cannot do: replication is
asynchronous, so a master that dies before its replicas got a grant loses the lock, and
``replicas=1`` refuses such a grant instead.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio
import redis
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.retry
import redis.sentinel
from redis.backoff import NoBackoff

from conftest import (
    PRIVATE_SERVERS_ONLY,
    allowing,
    eventually,
    held_with_a_waiter,
    renewing_ttl,
    replicas_caught_up,
    token_in,
)
from redlease import NotReplicated, ReleaseOutcome
from redlease.processes import free_port
from redlease.topology import LocalSentinel

pytestmark = [pytest.mark.sentinel, pytest.mark.timeout(60), PRIVATE_SERVERS_ONLY]

SOCKET_TIMEOUT = 1.0
REPLICA_TIMEOUT = 0.3


def master_value(topology: LocalSentinel, key: str) -> str | None:
    """The key on whichever server the sentinels name as master, asked directly."""
    host, port = topology.master_address()
    with redis.Redis(host=host, port=port, decode_responses=True) as client:
        return token_in(client.get(key))


def replicated_everywhere(topology: LocalSentinel) -> None:
    """Wait until every replica has what the master wrote so far: the test is
    about a grant that reached the replicas; one lost to replication lag is another test's
    subject (``replicas=1`` narrows that window, see guarantees.md)."""
    host, port = topology.master_address()
    with redis.Redis(host=host, port=port) as master:
        replicas = int(master.info("replication")["connected_slaves"])
        caught_up = replicas_caught_up(master, "sentinel-test", replicas, 5000)
        assert caught_up >= replicas, "the replicas did not catch up in 5 s"


@pytest_asyncio.fixture
async def make_sentinel_locks(
    redlease_sentinel: LocalSentinel, make_locks, flavor: str
) -> AsyncIterator[Callable[..., Any]]:
    """``await make(**options)``: a client of the test's flavour on ``master_for(service)``.

    Asks for the topology before ``make_locks``, so the clients close while it still runs.
    """
    clients: list[Any] = []

    async def make(topology: LocalSentinel = redlease_sentinel, **options: Any) -> Any:
        if flavor == "async":
            sentinel: Any = redis.asyncio.sentinel.Sentinel(
                topology.sentinel_addresses, socket_timeout=SOCKET_TIMEOUT
            )
        else:
            sentinel = redis.sentinel.Sentinel(
                topology.sentinel_addresses, socket_timeout=SOCKET_TIMEOUT
            )
        client = sentinel.master_for(topology.service_name, socket_timeout=SOCKET_TIMEOUT)
        clients.append(client)
        return await make_locks(client, **options)

    yield make
    for client in clients:
        if isinstance(client, redis.asyncio.Redis):
            await client.aclose()
        else:
            client.close()


async def test_locks_work_through_a_sentinel_managed_client(
    make_sentinel_locks, redlease_sentinel, prefix, round_trip
):
    holder = await make_sentinel_locks()
    waiting = await make_sentinel_locks()
    key = f"{prefix}:{{report}}"

    lease = await holder.lock("report", ttl=30).acquire()
    assert master_value(redlease_sentinel, key) == lease.token
    waiter = asyncio.create_task(waiting.lock("report", owner="w").acquire(timeout=15))
    assert await eventually(lambda: len(waiting._notifier.channels()) == 1, 5)
    released_at = time.monotonic()
    assert await holder.lock("report").release() is ReleaseOutcome.RELEASED
    handed = await asyncio.wait_for(waiter, 10)

    assert time.monotonic() - released_at < allowing(round_trip, quiet=1.0), (
        "hand-off, not the 30 s TTL, woke the waiter"
    )
    assert handed.fence > lease.fence
    assert master_value(redlease_sentinel, key) == handed.token
    assert await waiting.lock("report", owner="w").release() is ReleaseOutcome.RELEASED
    assert master_value(redlease_sentinel, key) is None


@pytest.mark.timeout(180)
async def test_lock_held_across_a_failover_stays_held_and_goes_to_the_waiter(
    make_sentinel_locks, redlease_sentinel, prefix, round_trip
):
    key = f"{prefix}:{{invoice}}"
    # The TTL must outlast the failover itself: a lease whose TTL runs out while the
    # sentinels elect a new master is lost, and reported lost. A rehearsal measures how long
    # one takes on this machine now (about 2 s when it is quiet, much more under load).
    started = time.monotonic()
    await asyncio.to_thread(redlease_sentinel.failover)
    rehearsal = time.monotonic() - started
    ttl = max(renewing_ttl(round_trip, quiet=6), 3 * rehearsal)
    holder, waiting, lease, waiter = await held_with_a_waiter(
        make_sentinel_locks, "invoice", ttl, 2 * ttl + 3 * rehearsal
    )
    try:
        old_address = redlease_sentinel.master_address()
        replicated_everywhere(redlease_sentinel)  # only a replicated grant survives a failover

        new_address = await asyncio.to_thread(redlease_sentinel.failover)

        assert new_address != old_address
        assert not lease.lost, f"the failover outlasted the lease: {lease.lost_reason}"
        assert master_value(redlease_sentinel, key) == lease.token, "the grant was replicated"
        renewals_before = lease.renewals
        await asyncio.sleep(5 * ttl / 6)  # an unrenewed lease would be near its end by now
        assert lease.lost or master_value(redlease_sentinel, key) == lease.token, (
            "the holder believes it holds a lock that the new master no longer has"
        )
        assert not lease.lost, lease.lost_reason
        assert lease.renewals > renewals_before, "renewal continues on the new master"
        assert not waiter.done()

        released_at = time.monotonic()
        assert await holder.lock("invoice").release() is ReleaseOutcome.RELEASED
        handed = await asyncio.wait_for(asyncio.shield(waiter), 10)
        waited = time.monotonic() - released_at

        assert master_value(redlease_sentinel, key) == handed.token
        assert handed.fence > lease.fence
        assert waited < allowing(round_trip, quiet=1.0), (
            f"the waiter took {waited:.2f} s: its wake-up missed the new master"
        )
        assert await waiting.lock("invoice", owner="w").release() is ReleaseOutcome.RELEASED
    finally:
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)


@pytest.mark.timeout(180)
async def test_a_connection_busy_across_a_failover_carries_no_renewal_to_the_old_master(
    make_sentinel_locks, redlease_sentinel, prefix, round_trip, flavor
):
    """Another task's command in flight when the master moves: its connection, to the old
    master, comes back to the pool after the client learned of the new one. The old master
    keeps accepting writes until the sentinels demote it (seconds later), so a renewal sent
    on that connection would be acknowledged there while the lease ran out on the new master
    and another client took it."""
    started = time.monotonic()
    await asyncio.to_thread(redlease_sentinel.failover)
    rehearsal = time.monotonic() - started
    ttl = max(renewing_ttl(round_trip, quiet=6), 3 * rehearsal)
    holder = await make_sentinel_locks()
    pool = holder.client.connection_pool
    lease = await holder.lock("ledger", ttl=ttl, renew=True).acquire()
    replicated_everywhere(redlease_sentinel)

    async def pool_call(method: str, *args: Any) -> Any:
        result = getattr(pool, method)(*args)
        return await result if flavor == "async" else result

    busy = await pool_call("get_connection")
    if flavor == "sync":
        busy.connect()
    else:
        await busy.connect()
    new_address = await asyncio.to_thread(redlease_sentinel.failover)
    assert await eventually(lambda: pool.master_address == new_address, ttl / 2), (
        "the client did not learn of the new master"
    )
    await pool_call("release", busy)

    await asyncio.sleep(ttl + allowing(round_trip, quiet=0.5))  # past the TTL it had
    assert not lease.lost, lease.lost_reason
    assert master_value(redlease_sentinel, f"{prefix}:{{ledger}}") == lease.token, (
        "the renewals went to the old master: the new one let the lease run out"
    )
    assert await holder.lock("ledger").release() is ReleaseOutcome.RELEASED


@pytest.mark.timeout(90)
async def test_master_killed_before_replicas_got_the_grant_lets_a_second_client_in(
    make_sentinel_locks, redlease_sentinel, prefix
):
    """The documented loss: asynchronous replication lets the new master grant it again.

    Pausing the replicas alone is not enough to keep the grant from them: the master's
    write still lands in their sockets' receive buffers and is read after SIGCONT. So the
    master also drops its replica links (as a network cut would) before the grant.
    """
    first = await make_sentinel_locks()
    master = redlease_sentinel.master()
    replicas = [server for server in redlease_sentinel.servers if server is not master]
    for replica in replicas:
        replica.pause()
    try:
        with redis.Redis(port=master.port) as client:
            assert client.client_kill_filter(_type="replica") == len(replicas)
        lease = await first.lock("shipment", ttl=30).acquire()
        assert master_value(redlease_sentinel, f"{prefix}:{{shipment}}") == lease.token
        redlease_sentinel.kill_master()
    finally:
        for replica in replicas:
            replica.resume()
    await asyncio.to_thread(redlease_sentinel.failover)

    second = await make_sentinel_locks()
    rival = await second.lock("shipment", ttl=30).acquire(timeout=0)

    assert master_value(redlease_sentinel, f"{prefix}:{{shipment}}") == rival.token
    assert not lease.lost, "the first holder still believes it holds the lock: two holders"
    # The fence counter's increment was lost with the grant: the new token does not exceed
    # the old one, which is why the docs ask the resource to refuse an equal token too.
    assert rival.fence <= lease.fence


async def test_replicas_1_refuses_a_grant_the_paused_replicas_cannot_confirm(
    make_sentinel_locks, redlease_sentinel, prefix, round_trip
):
    locks = await make_sentinel_locks(replicas=1, replica_timeout=REPLICA_TIMEOUT)
    replicas = redlease_sentinel.servers[1:]
    for replica in replicas:
        replica.pause()
    try:
        started = time.monotonic()
        with pytest.raises(NotReplicated):
            await locks.lock("shipment", ttl=30).acquire(timeout=0)
        elapsed = time.monotonic() - started
        assert master_value(redlease_sentinel, f"{prefix}:{{shipment}}") is None
    finally:
        for replica in replicas:
            replica.resume()

    assert elapsed < REPLICA_TIMEOUT + allowing(round_trip, quiet=0.5), (
        f"NotReplicated took {elapsed:.2f} s with a {REPLICA_TIMEOUT} s replica timeout"
    )
    lease = await locks.lock("shipment", ttl=30).acquire(timeout=5)
    assert master_value(redlease_sentinel, f"{prefix}:{{shipment}}") == lease.token
    assert await locks.lock("shipment").release() is ReleaseOutcome.RELEASED


@pytest.mark.timeout(120)
async def test_failovers_are_followed_when_a_sentinel_is_gone(
    redlease_sentinel, make_locks, flavor, caplog
):
    """A client lists several sentinels so that one may be gone: the listed one that never
    answered, and later the one whose announcements the client was following. That watch
    reconnected to the same dead sentinel for ever, and the client learned of a failover
    only once a command of its own asked the sentinels."""
    addresses = [("127.0.0.1", free_port()), *redlease_sentinel.sentinel_addresses]
    # redis-py retries a sentinel that refuses for seconds (10 times) before it asks the
    # next; a user who lists several says how long a dead one may take, as here
    if flavor == "async":
        once: Any = redis.asyncio.retry.Retry(NoBackoff(), 0)
        sentinel: Any = redis.asyncio.sentinel.Sentinel(
            addresses, socket_timeout=SOCKET_TIMEOUT, sentinel_kwargs={"retry": once}
        )
    else:
        once = redis.retry.Retry(NoBackoff(), 0)
        sentinel = redis.sentinel.Sentinel(
            addresses, socket_timeout=SOCKET_TIMEOUT, sentinel_kwargs={"retry": once}
        )
    client = sentinel.master_for(redlease_sentinel.service_name, socket_timeout=SOCKET_TIMEOUT)
    try:
        locks = await make_locks(client)
        with caplog.at_level(logging.WARNING, logger="redlease"):
            assert await locks.lock("watched", renew=False).acquire()
            assert await locks.lock("watched").release() is ReleaseOutcome.RELEASED
        assert "cannot watch the sentinels" not in caplog.text
        watched = sentinel.sentinels[0].connection_pool.connection_kwargs["port"]
        next(s for s in redlease_sentinel.sentinels if s.port == watched).kill()
        new_address = await asyncio.to_thread(redlease_sentinel.failover)
        assert await eventually(lambda: client.connection_pool.master_address == new_address, 5), (
            "no announcement reached the client: it knows only once a command asks"
        )
    finally:
        if flavor == "async":
            await client.aclose()
        else:
            client.close()
