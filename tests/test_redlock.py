"""Redlock over five real, independent masters: what it survives and what it cannot.

The docs promise: a grant needs a majority; one or two of five masters down still works,
three down is refused with ``ServerUnavailable``; tokens grow across holders (the winner
lifts every master's counter to the largest it drew); renewal keeps a lease while a
majority holds it and reports it lost once a majority does not. They also name the
failure Redlock cannot see: a master that restarts empty during a hold forgets the lock,
and a second client can then win a majority. Keeping a crashed master down for the TTL
(the "delayed restart" rule) prevents that.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio
import redis

import redlease
from conftest import (
    PRIVATE_SERVERS_ONLY,
    RENEWAL_ROUND_TRIPS,
    SyncLocksAdapter,
    allowing,
    eventually,
    fence_key,
    renewing_ttl,
    token_in,
)
from redlease import ReleaseOutcome, ServerUnavailable
from redlease.core.redlock import RECONNECT_PAUSES_S, reconnect_pause
from redlease.server import EmbeddedServer

pytestmark = [pytest.mark.redlock, pytest.mark.timeout(60), PRIVATE_SERVERS_ONLY]


@pytest.fixture
def masters(redlease_servers_factory) -> list[EmbeddedServer]:
    """Five fresh masters for this test (it may kill and restart them)."""
    return redlease_servers_factory(5)


@pytest_asyncio.fixture
async def make_redlock(flavor: str, prefix: str) -> AsyncIterator[Callable[..., Any]]:
    """``make_redlock(masters)``: a Redlock client of the test's flavour, closed after."""
    made: list[Any] = []

    def make(servers: list[EmbeddedServer]) -> Any:
        urls = [server.url for server in servers]
        if flavor == "async":
            client: Any = redlease.AsyncRedlock(urls, prefix=prefix)
        else:
            client = SyncLocksAdapter(redlease.Redlock(urls, prefix=prefix))
        made.append(client)
        return client

    yield make
    for client in made:
        await client.aclose()


def values(servers: list[EmbeddedServer], key: str) -> list[str | None]:
    """``key`` on each running master (``"down"`` for one that is not running)."""
    found: list[str | None] = []
    for server in servers:
        if server.pid is None:
            found.append("down")
            continue
        with redis.Redis(port=server.port, decode_responses=True) as client:
            found.append(token_in(client.get(key)))
    return found


async def test_lease_is_granted_on_every_master_and_released_from_all(
    make_redlock, masters, prefix
):
    redlock = make_redlock(masters)
    key = f"{prefix}:{{payout}}"

    lease = await redlock.lock("payout", ttl=10).acquire()

    assert values(masters, key) == [lease.token] * 5
    assert await redlock.lock("payout").release() is ReleaseOutcome.RELEASED
    assert values(masters, key) == [None] * 5


@pytest.mark.parametrize("down", [1, 2])
async def test_a_minority_of_masters_down_still_grants(make_redlock, masters, prefix, down):
    for server in masters[:down]:
        server.kill()
    redlock = make_redlock(masters)
    rival = make_redlock(masters)

    lease = await redlock.lock("payout", ttl=10).acquire(timeout=2)

    held = values(masters, f"{prefix}:{{payout}}")
    assert held == ["down"] * down + [lease.token] * (5 - down)
    assert await rival.lock("payout", ttl=10).try_acquire() is None
    assert await redlock.lock("payout").release() is ReleaseOutcome.RELEASED
    assert await rival.lock("payout", ttl=10).try_acquire() is not None


async def test_three_masters_down_refuse_with_server_unavailable(make_redlock, masters, prefix):
    for server in masters[:3]:
        server.kill()
    redlock = make_redlock(masters)

    with pytest.raises(ServerUnavailable, match="2 of 5"):
        await redlock.lock("payout", ttl=10).acquire(timeout=2)

    assert values(masters, f"{prefix}:{{payout}}") == ["down"] * 3 + [None] * 2


async def test_tokens_increase_across_holders_and_a_majority_is_lifted_to_each(
    make_redlock, masters, prefix
):
    payout_fence = fence_key(prefix, "payout")
    for server in masters[2:]:  # a majority's counters ran ahead: every majority has one
        with redis.Redis(port=server.port) as behind_our_back:
            behind_our_back.set(payout_fence, 41)
    fences = []
    for _ in range(3):
        client = make_redlock(masters)
        lease = await client.lock("payout", ttl=10).acquire(timeout=2)
        fences.append(lease.fence)
        lifted = [int(value or 0) >= lease.fence for value in values(masters, payout_fence)]
        assert sum(lifted) >= 3, f"a majority must hold the fence {lease.fence}: {lifted}"
        assert await client.lock("payout").release() is ReleaseOutcome.RELEASED

    assert fences[0] >= 42, "the largest counter of the quorum wins"
    assert fences == sorted(set(fences)), f"tokens must strictly increase: {fences}"


async def test_renewed_lease_stays_held_until_a_majority_loses_it(
    make_redlock, masters, prefix, round_trip
):
    redlock = make_redlock(masters)
    rival = make_redlock(masters)
    lost = asyncio.Event()
    loop = asyncio.get_running_loop()
    ttl = renewing_ttl(round_trip, quiet=0.6)
    lease = await redlock.lock("payout", ttl=ttl, renew=True).acquire()
    lease.on_lost(lambda _: loop.call_soon_threadsafe(lost.set))

    await asyncio.sleep(10 * ttl / 3)  # ten renewal periods
    assert not lease.lost, lease.lost_reason
    assert lease.renewals >= 3
    assert await rival.lock("payout", ttl=5).try_acquire() is None

    for server in masters[:3]:
        with redis.Redis(port=server.port) as client:
            client.delete(f"{prefix}:{{payout}}")
    # the next renewal, a third of the TTL away, finds the majority gone
    await asyncio.wait_for(
        lost.wait(), ttl + allowing(round_trip, quiet=1.4, round_trips=RENEWAL_ROUND_TRIPS)
    )

    assert lease.lost
    assert await redlock.lock("payout").release() is ReleaseOutcome.EXPIRED


async def test_a_master_back_from_a_restart_counts_again_soon(make_redlock, masters, prefix):
    """A master that refused connections while it restarted is tried again soon after, not
    only after the longest pause: a waiter that needs it for its majority gets the lock in
    a fraction of a second (the chaos matrix's Redlock partition relies on this too)."""
    for server in masters[3:]:
        server.kill()
    lock = make_redlock(masters).lock("payout", ttl=10)
    await lock.acquire(timeout=2)
    await lock.release()
    masters[2].kill()
    with pytest.raises(ServerUnavailable, match="2 of 5"):
        await lock.try_acquire()  # one round: master 2 refuses once
    masters[2].restart()

    lease = await lock.acquire(timeout=RECONNECT_PAUSES_S[-1] / 2)

    assert values(masters, f"{prefix}:{{payout}}")[:3] == [lease.token] * 3


def test_a_master_down_for_hours_is_still_tried_every_second():
    """The pause after failed openings stops growing at its longest, however many failed
    (an outside tester's client raised OverflowError after 17 minutes of a master down)."""
    first, longest = RECONNECT_PAUSES_S
    assert reconnect_pause(1) == first
    assert [reconnect_pause(n) for n in (2, 3)] == [2 * first, 4 * first]
    assert reconnect_pause(1025) == reconnect_pause(10**9) == longest


async def hold_on_a_bare_majority(
    make_redlock: Callable[..., Any], masters: list[EmbeddedServer], ttl: float
) -> Any:
    """A lease held on masters 0-2 only: 3 and 4 were down during the grant, then came back
    (empty, as a master without persistence does)."""
    for server in masters[3:]:
        server.kill()
    holder = make_redlock(masters)
    lease = await holder.lock("payout", ttl=ttl).acquire(timeout=2)
    for server in masters[3:]:
        server.restart()
    return lease


async def test_master_restarted_empty_during_a_hold_lets_a_second_client_in(
    make_redlock, masters, prefix
):
    """The documented failure: without a delayed restart, Redlock grants a lock twice."""
    lease = await hold_on_a_bare_majority(make_redlock, masters, ttl=10)
    masters[0].kill()
    masters[0].restart()  # at once and empty: it forgot the lease
    rival = make_redlock(masters)

    second = await rival.lock("payout", ttl=10).acquire(timeout=2)

    assert time.monotonic() < lease.expires_at, "the first lease is still valid"
    assert not lease.lost
    held = values(masters, f"{prefix}:{{payout}}")
    assert held == [second.token, lease.token, lease.token, second.token, second.token]


async def test_delayed_restart_for_the_ttl_keeps_the_lock_single(make_redlock, masters, prefix):
    lease = await hold_on_a_bare_majority(make_redlock, masters, ttl=1.5)
    masters[0].kill()
    rival = make_redlock(masters)

    assert await rival.lock("payout", ttl=10).try_acquire() is None, "only 2 of 5 are free"
    assert await eventually(lambda: time.monotonic() > lease.expires_at, 3)
    masters[0].restart()  # back only once every lease it could have held has ended
    second = await rival.lock("payout", ttl=10).acquire(timeout=2)

    assert second.acquired_at > lease.expires_at, "the second grant came after the first ended"
    assert await rival.lock("payout").release() is ReleaseOutcome.RELEASED
