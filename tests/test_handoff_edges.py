"""A hand-off is a grant like any other: confirmed by replicas, and alive when returned."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

import redlease
from conftest import fence_key
from redlease import LockTimeout, NotReplicated, ReleaseOutcome
from test_replication import REPLICA_TIMEOUT
from test_wakeups import start_waiter


async def queued(client, queue: str, count: int) -> None:
    deadline = time.monotonic() + 5
    while client.llen(queue) < count:
        assert time.monotonic() < deadline, "the waiter never queued"
        await asyncio.sleep(0.01)


async def test_a_handed_over_lease_is_confirmed_by_the_replicas_or_rolled_back(
    make_locks,
    pair,
    prefix,
):
    holder = await make_locks(pair.master.url)
    waiter = await make_locks(pair.master.url, replicas=1, replica_timeout=REPLICA_TIMEOUT)
    lock = holder.lock("invoice", ttl=30)
    await lock.acquire()
    waiting = waiter.lock("invoice", ttl=30, owner="waiter")
    pending = asyncio.create_task(waiting.acquire(timeout=10))
    await queued(pair.on_master, f"{prefix}:{{invoice}}:queue", 1)
    pair.replica.pause()
    try:
        await lock.release()
        with pytest.raises(NotReplicated):
            await pending
        assert pair.on_master.get(f"{prefix}:{{invoice}}") is None, "not given back"
    finally:
        pair.replica.resume()


async def test_a_queued_attempt_never_raises_not_replicated(make_locks, pair, prefix):
    holder = await make_locks(pair.master.url)
    waiter = await make_locks(pair.master.url, replicas=1, replica_timeout=REPLICA_TIMEOUT)
    lock = holder.lock("busy", ttl=30)
    await lock.acquire()
    pair.replica.pause()
    try:
        with pytest.raises(LockTimeout):
            await waiter.lock("busy", ttl=30).acquire(timeout=1)
    finally:
        pair.replica.resume()
    assert await lock.release() is ReleaseOutcome.RELEASED


async def test_a_waiter_paused_through_its_hand_off_never_gets_a_dead_lease(
    make_locks, server, redlease_url, prefix, flavor
):
    holder = await make_locks()
    lock = holder.lock("paused", ttl=30)
    await lock.acquire()
    process = start_waiter(redlease_url, prefix, "paused", flavor, "--ttl", "1")
    try:
        assert process.stdout is not None
        await queued(server, f"{prefix}:{{paused}}:queue", 1)
        process.send_signal(signal.SIGSTOP)
        await lock.release()  # handed to the paused waiter, with its 1 s lease
        handed = int(server.get(fence_key(prefix, "paused")))
        await asyncio.sleep(1.5)  # the handed lease ends while the waiter sleeps
        process.send_signal(signal.SIGCONT)
        line = await asyncio.to_thread(process.stdout.readline)
        word, fence, local_ms, server_ms = line.split()
        assert word == "ACQUIRED"
        assert int(local_ms) > 0, f"acquire returned a lease past its deadline: {line}"
        assert int(fence) > handed, "the dead hand-off was returned as held"
        assert int(server_ms) > 0
    finally:
        process.kill()
        process.wait()


@pytest.mark.timeout(90)
async def test_a_release_the_server_did_not_answer_frees_the_lock_once_it_answers(
    make_locks, redlease_servers_factory
):
    """A release sent to a server that is stopped raises ``ServerUnavailable`` once the
    socket timeout runs out; the lease is off the holder's books by then, so the release
    goes on in the background, again while the server is silent: the waiter gets the lock
    soon after the server answers again, not when the lease (30 s) runs out."""
    (server,) = redlease_servers_factory(1)
    url = f"{server.url}?socket_timeout=1&socket_connect_timeout=1"
    holder, other = await make_locks(url), await make_locks(server.url)
    lock = holder.lock("report", ttl=30)
    await lock.acquire()
    waiting = asyncio.create_task(other.lock("report", owner="w").acquire(timeout=60))
    await asyncio.sleep(0.5)
    server.pause()
    try:
        started = time.monotonic()
        with pytest.raises(redlease.ServerUnavailable):
            await lock.release()
        took = time.monotonic() - started
        assert took < 1 + 0.9, f"the release raised after {took:.2f} s (socket timeout 1 s)"
        await asyncio.sleep(3)  # the release sent again from the background fails too
    finally:
        server.resume()
    resumed_at = time.monotonic()
    lease = await asyncio.wait_for(waiting, 40)
    waited = time.monotonic() - resumed_at
    assert waited < 5, f"the waiter got the lock {waited:.1f} s after the server came back"
    assert not lease.lost
