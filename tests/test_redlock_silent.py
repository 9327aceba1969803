"""Redlock with masters that do not answer: a majority is enough, and no step waits on the rest.

A master is made silent by the project's proxy black-holing its link: connections open,
nothing comes back, nothing is closed, as with a host gone behind a firewall. The clients
are built as users build them; their socket timeout (5 s here; none at all with
``redis.Redis()``'s defaults) is far longer than any bound asserted, so only the round's
own deadline can keep a step short.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import redlease
from conftest import SyncLocksAdapter, measure_round_trip
from redlease.chaos.proxy import Link, Mode, ProxyHub

pytestmark = [pytest.mark.redlock, pytest.mark.timeout(120)]

TTL_S = 2.0
SOCKET_TIMEOUT_S = 5.0


def redlock_over(flavor: str, links: list[Link], prefix: str) -> Any:
    urls = [link.url for link in links]
    if flavor == "async":
        clients: list[Any] = [
            redis.asyncio.Redis.from_url(url, socket_timeout=SOCKET_TIMEOUT_S) for url in urls
        ]
        return redlease.AsyncRedlock(clients, prefix=prefix)
    sync_clients: list[Any] = [
        redis.Redis.from_url(url, socket_timeout=SOCKET_TIMEOUT_S) for url in urls
    ]
    return SyncLocksAdapter(redlease.Redlock(sync_clients, prefix=prefix))


@pytest.fixture
def links(redlease_servers_factory: Any) -> Iterator[list[Link]]:
    masters = redlease_servers_factory(3)
    with ProxyHub() as hub:
        yield [hub.link("127.0.0.1", server.port) for server in masters]


def step_bound(links: list[Link]) -> float:
    """What one step may take with a silent master: a quarter of the lease, well above the
    healthy masters' round trips (measured now) yet far below the socket timeout."""
    round_trip = max(measure_round_trip(link.url) for link in links[1:])
    return max(TTL_S / 4, 50 * round_trip)


async def timed(step: Any) -> tuple[Any, float]:
    started = time.monotonic()
    result = await step
    return result, time.monotonic() - started


async def test_one_silent_master_holds_up_no_step(links, flavor, prefix):
    bound = step_bound(links)
    links[0].set(mode=Mode.BLACKHOLE)
    redlock = redlock_over(flavor, links, prefix)
    try:
        lock = redlock.lock("job", ttl=TTL_S, renew=True)
        lease, took = await timed(lock.acquire(timeout=10))
        assert took < bound, f"acquire took {took:.2f} s with one master silent"
        await asyncio.sleep(1.5 * TTL_S)  # renewals run with one master silent
        assert not lease.lost, f"a lease two of three masters renewed was lost: {lease}"
        _, took = await timed(lock.extend(TTL_S))
        assert took < bound, f"extend took {took:.2f} s with one master silent"
        outcome, took = await timed(lock.release())
        assert took < bound, f"release took {took:.2f} s with one master silent"
        assert outcome is redlease.ReleaseOutcome.RELEASED
        assert not lease.lost
    finally:
        links[0].set()
        await redlock.aclose()


async def test_a_silent_majority_is_unavailable_within_the_timeout(links, flavor, prefix):
    for link in links[:2]:
        link.set(mode=Mode.BLACKHOLE)
    redlock = redlock_over(flavor, links, prefix)
    try:
        started = time.monotonic()
        with pytest.raises(redlease.ServerUnavailable, match="1 of 3 masters answered"):
            await redlock.lock("job", ttl=TTL_S).acquire(timeout=1)
        took = time.monotonic() - started
        assert took < 1 + TTL_S, f"acquire(timeout=1) gave up after {took:.2f} s"
    finally:
        for link in links:
            link.set()
        await redlock.aclose()


async def test_a_round_slower_than_the_lease_says_so_not_held_by_another(links, flavor, prefix):
    for link in links:
        link.set(delay=0.3)  # every answer comes after the 0.2 s lease is over
    redlock = redlock_over(flavor, links, prefix)
    try:
        with pytest.raises(redlease.LockError) as raised:
            await redlock.lock("slow", ttl=0.2).acquire(timeout=1)
        assert "another owner" not in str(raised.value), str(raised.value)
        assert "in time" in str(raised.value), str(raised.value)
    finally:
        for link in links:
            link.set()
        await redlock.aclose()


async def test_a_lock_held_elsewhere_still_says_so(links, flavor, prefix):
    holder = redlock_over(flavor, links, prefix)
    redlock = redlock_over(flavor, links, prefix)
    try:
        await holder.lock("taken", ttl=TTL_S).acquire()
        for timeout in (0, 0.2):
            with pytest.raises(redlease.LockTimeout, match="held by another owner"):
                await redlock.lock("taken", ttl=TTL_S).acquire(timeout=timeout)
    finally:
        await holder.aclose()
        await redlock.aclose()
