"""Re-entry and block exits at the edges of a lease: never a second holder, always told.

A held lease may be entered again by its owner without a round trip; these scenarios
check that such a shortcut is only taken while the lease is alive by its local deadline,
and that every exit of a block whose lease ended says so with ``LeaseLost``.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

import redlease
from redlease import LeaseLost, ReleaseOutcome


async def test_reentry_past_the_local_deadline_raises_instead_of_running_beside_a_new_holder(
    make_locks,
):
    first, second = await make_locks(), await make_locks()
    lock = first.lock("job", ttl=0.5)
    outer = await lock.acquire()
    await asyncio.sleep(0.8)
    taker = await second.lock("job", ttl=10).acquire(timeout=0)

    with pytest.raises(LeaseLost):
        async with first.lock("job", ttl=0.5):
            pytest.fail("the body ran while another client held the lock")

    assert outer.lost
    assert outer._count == 1, "a refused re-entry must not count"
    assert await lock.release() is ReleaseOutcome.EXPIRED
    assert taker.fence > outer.fence


async def test_inner_block_exit_raises_when_the_lease_ended_under_it(make_locks):
    locks = await make_locks()
    lock = locks.lock("nested", ttl=0.4)
    outer = await lock.acquire()
    with pytest.raises(LeaseLost):
        async with locks.lock("nested", ttl=0.4):
            await asyncio.sleep(0.6)
    assert outer.lost
    assert outer._count == 1
    assert await lock.release() is ReleaseOutcome.EXPIRED


async def test_a_lease_past_its_local_deadline_reads_as_lost_at_once(make_locks):
    locks = await make_locks()
    lease = await locks.lock("deadline", ttl=0.3).acquire()
    assert not lease.lost
    await asyncio.sleep(0.35)
    assert lease.lost, "nobody renews an explicit-ttl lease: past its deadline it is lost"
    assert "deadline" in (lease.lost_reason or "")


async def test_block_exits_with_lease_lost_after_extend_found_the_lease_gone(
    make_locks, server, prefix
):
    locks = await make_locks()
    lock = locks.lock("extended", ttl=10)
    with pytest.raises(LeaseLost):
        async with lock as lease:
            server.delete(f"{prefix}:{{extended}}")
            with pytest.raises(LeaseLost):
                await lock.extend(5)
            assert lease.lost


async def test_plain_release_after_a_failed_extend_returns_expired(make_locks, server, prefix):
    locks = await make_locks()
    lock = locks.lock("extended-release", ttl=10)
    lease = await lock.acquire()
    server.delete(f"{prefix}:{{extended-release}}")
    with pytest.raises(LeaseLost):
        await lock.extend(5)
    assert await lock.release() is ReleaseOutcome.EXPIRED
    assert lease.lost


@pytest.mark.parametrize("kind", ["lock", "fair_lock"])
async def test_an_inner_release_of_a_lease_known_to_have_ended_returns_expired(
    make_locks, server, prefix, kind
):
    """migrating.md: a release after the lease ended returns EXPIRED. An inner release
    (an outer hold remains) used to say STILL_HELD of a lease already known lost; while
    the lease is alive it still says STILL_HELD."""
    locks = await make_locks()
    lock = getattr(locks, kind)("counted", ttl=0.3)
    lease = await lock.acquire()
    await lock.acquire()
    await lock.acquire()
    assert await lock.release() is ReleaseOutcome.STILL_HELD
    await asyncio.sleep(0.4)
    assert lease.lost
    assert await lock.release() is ReleaseOutcome.EXPIRED
    assert await lock.release() is ReleaseOutcome.EXPIRED
    assert server.get(f"{prefix}:{{counted}}") is None


def test_sync_locks_refuse_to_block_an_event_loop_without_an_explicit_owner(redlease_url, prefix):
    locks = redlease.Locks(redlease_url, prefix=prefix)
    entered: list[int] = []

    async def task(number: int) -> None:
        with locks.lock("shared", timeout=2):
            entered.append(number)
            await asyncio.sleep(0.2)

    async def three() -> list[object]:
        return await asyncio.gather(*(task(n) for n in range(3)), return_exceptions=True)

    try:
        results = asyncio.run(three())
    finally:
        locks.close()
    assert entered == [], "a sync lock entered from event-loop tasks counted them as one owner"
    assert all(isinstance(result, redlease.InvalidArgument) for result in results), results
    assert "AsyncLocks" in str(results[0])


def test_sync_locks_in_an_event_loop_work_with_an_explicit_owner(redlease_url, prefix):
    locks = redlease.Locks(redlease_url, prefix=prefix)

    async def main() -> tuple[object, object]:
        first = locks.lock("owned", owner="task-1").try_acquire()
        second = locks.lock("owned", owner="task-2").try_acquire()
        locks.lock("owned", owner="task-1").release()
        return first, second

    try:
        first, second = asyncio.run(main())
    finally:
        locks.close()
    assert first is not None
    assert second is None


def test_a_new_thread_does_not_inherit_a_dead_threads_lease(redlease_url, prefix):
    """Python hands a finished thread's id to the next thread at once: keyed by that id,
    the new thread owned, re-entered and released the lease a crashed thread left."""
    with redlease.Locks(redlease_url, prefix=prefix) as locks:
        for attempt in range(20):
            name, idents, seen = f"report-{attempt}", [], []

            def crash_holding(name: str = name, idents: list[int] = idents) -> None:
                locks.lock(name, ttl=30).acquire()
                idents.append(threading.get_ident())

            def look(name: str = name, idents: list[int] = idents, seen: list = seen) -> None:
                idents.append(threading.get_ident())
                lock = locks.lock(name)
                seen.extend([lock.owned(), lock.try_acquire()])

            for target in (crash_holding, look):
                thread = threading.Thread(target=target)
                thread.start()
                thread.join()
            if idents[0] == idents[1]:
                assert seen == [False, None]
                return
        pytest.skip("Python did not reuse a thread id in 20 tries: nothing to test")


@pytest.mark.parametrize("timeout", ["5", float("nan")])
async def test_a_reentry_checks_its_arguments_as_a_first_acquire_does(make_locks, timeout):
    lock = (await make_locks()).lock("job", ttl=10)
    with pytest.raises(redlease.InvalidArgument):
        await lock.acquire(timeout=timeout)
    lease = await lock.acquire()
    with pytest.raises(redlease.InvalidArgument):
        await lock.acquire(timeout=timeout)
    assert lease._count == 1, "a refused re-entry must not count"
    assert await lock.release() is ReleaseOutcome.RELEASED
