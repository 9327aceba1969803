"""One AsyncLocks over several event loops, one after the other (asyncio.run twice, a test
client): it moves to the new loop, and nothing is left held by the loop that is gone."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import redis

import redlease
from conftest import PRIVATE_SERVERS_ONLY


def fences_over_three_loops(locks: redlease.AsyncLocks) -> list[int]:
    """Take and release "job" on three event loops in turn, then close: the fences."""
    fences = []

    async def take() -> None:
        async with locks.lock("job", ttl=5) as lease:
            fences.append(lease.fence)

    for _ in range(3):
        asyncio.run(take())
    asyncio.run(locks.aclose())
    return fences


def test_an_async_client_moves_to_the_next_event_loop(redlease_url, prefix):
    fences = fences_over_three_loops(redlease.AsyncLocks(redlease_url, prefix=prefix))
    assert fences == [1, 2, 3]
    with redis.Redis.from_url(redlease_url) as plain:
        assert not plain.exists(f"{prefix}:{{job}}")


@pytest.mark.cluster
@PRIVATE_SERVERS_ONLY
def test_an_async_cluster_client_moves_to_the_next_event_loop(redlease_cluster, prefix):
    """A cluster client keeps connections per node, not in one pool: the move dropped only
    a pool's, and the next loop met the old loop's connections (an AttributeError on the
    nodes, then "Event loop is closed" at aclose())."""
    locks = redlease.AsyncLocks(redlease_cluster.url, cluster=True, prefix=prefix)
    fences = fences_over_three_loops(locks)
    assert fences == sorted(set(fences)), fences
    assert len(fences) == 3


def test_a_lease_left_held_by_a_loop_that_is_gone_is_given_back(redlease_url, prefix):
    locks = redlease.AsyncLocks(redlease_url, prefix=prefix)
    held: list[redlease.Lease] = []

    async def take_and_forget() -> None:
        held.append(await locks.lock("orphan", ttl=30).acquire())

    async def take_again() -> int:
        lease = await locks.lock("orphan", ttl=30).acquire(timeout=1)
        await locks.lock("orphan").release()
        return lease.fence

    asyncio.run(take_and_forget())
    assert asyncio.run(take_again()) == 2, "the first loop's lease was left for its TTL"
    assert held[0].lost
    asyncio.run(locks.aclose())


def test_a_client_busy_on_a_running_loop_refuses_another_one(redlease_url, prefix):
    """The refusal leaves nothing behind on the client: its own loop goes on using it and
    closes it (a background withdrawal the refused call started on the other loop made
    that close fail with "Event loop is closed")."""
    locks = redlease.AsyncLocks(redlease_url, prefix=prefix)
    started, finish = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    async def hold_the_loop() -> None:
        try:
            async with locks.lock("busy", ttl=5):
                started.set()
                while not finish.is_set():  # noqa: ASYNC110 - set from another thread
                    await asyncio.sleep(0.01)
            async with locks.lock("busy", ttl=5):
                pass
            await locks.aclose()
        except Exception as exc:
            errors.append(exc)

    thread = threading.Thread(target=lambda: asyncio.run(hold_the_loop()))
    thread.start()
    try:
        assert started.wait(5)

        async def elsewhere() -> None:
            await locks.lock("other", ttl=5).acquire(timeout=0)

        with pytest.raises(
            redlease.InvalidArgument, match="another event loop that is still running"
        ):
            asyncio.run(elsewhere())
    finally:
        finish.set()
        thread.join(10)
    assert errors == []


def test_a_fastapi_test_client_without_with_serves_every_request(redlease_url, prefix):
    fastapi = pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient  # noqa: PLC0415

    from redlease.integrations.fastapi import lock_dependency  # noqa: PLC0415

    locks = redlease.AsyncLocks(redlease_url, prefix=prefix)
    app = fastapi.FastAPI()

    @app.post("/orders/{user_id}", dependencies=[lock_dependency(locks, "order:{user_id}")])
    async def create_order(user_id: str) -> dict[str, str]:
        return {"user": user_id}

    client = TestClient(app)
    statuses = [client.post("/orders/7").status_code for _ in range(3)]
    assert statuses == [200, 200, 200]
    with redis.Redis.from_url(redlease_url) as plain:
        assert not plain.exists(f"{prefix}:{{order:7}}")


@pytest.mark.parametrize("client", ["locks", "redlock"])
def test_a_second_running_loop_is_refused_before_anything_is_counted(
    redlease_url, redlease_servers_factory, prefix, client
):
    """guide.md: used from a second loop while the first still runs, an ``AsyncLocks``
    raises ``InvalidArgument`` before writing anything. With an explicit ``owner=``, a
    release there took the lease off the client's books first (the owner's own release
    then said ``NotOwned``), an ``extend`` said ``NotOwned``, and a re-entry counted."""
    if client == "redlock":
        locks: Any = redlease.AsyncRedlock(
            [server.url for server in redlease_servers_factory(3)], prefix=prefix
        )
    else:
        locks = redlease.AsyncLocks(redlease_url, prefix=prefix)
    started, finish = threading.Event(), threading.Event()
    outcome: list[Any] = []

    async def hold_the_loop() -> None:
        await locks.lock("job", ttl=30, owner="job").acquire()
        started.set()
        while not finish.is_set():  # noqa: ASYNC110 - set from another thread
            await asyncio.sleep(0.01)
        outcome.append(await locks.lock("job", owner="job").release())
        await locks.aclose()

    thread = threading.Thread(target=lambda: asyncio.run(hold_the_loop()))
    thread.start()
    try:
        assert started.wait(5)
        lock = locks.lock("job", owner="job")
        for call in (lock.release, lambda: lock.extend(10), lock.acquire):
            with pytest.raises(redlease.InvalidArgument, match="another event loop"):
                asyncio.run(call())
    finally:
        finish.set()
        thread.join(10)
    assert outcome == [redlease.ReleaseOutcome.RELEASED], "the hold was counted once, as taken"
