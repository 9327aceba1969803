"""Renewal: a held lease outlives its TTL, and a lease that ends anyway is reported lost.

While a renewing lease is held, the client's one renewal worker keeps it alive, so a
critical section may run for many TTLs and nobody else gets in. When the lease ends
behind the holder's back (deleted, taken over, or its holder paused past the TTL), the
holder learns it: ``on_lost`` fires and the ``with`` block raises ``LeaseLost`` once the
body is done. Renewal never brings a lease back, and a client holding a thousand leases
still renews them with one worker and a handful of round trips.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio

import redlease
from conftest import (
    RENEWAL_ROUND_TRIPS,
    allowing,
    eventually,
    release_all,
    renewed_or_lost,
    renewing_ttl,
    take_together,
    token_in,
)
from redlease import Lease, ReleaseOutcome
from redlease.scripts import ScriptName

TESTS = Path(__file__).resolve().parent
HOLDER = TESTS / "holder.py"


def delete(server: redis.Redis, key: str) -> None:
    server.delete(key)


def steal(server: redis.Redis, key: str) -> None:
    server.set(key, "intruder", px=10_000)


def renewal_workers(flavor: str) -> list[object]:
    if flavor == "async":
        return [task for task in asyncio.all_tasks() if task.get_name() == "redlease-renewer"]
    return [
        thread
        for thread in threading.enumerate()
        if thread.name.startswith("redlease-renewer") and thread.is_alive()
    ]


@pytest.mark.timeout(30)
async def test_critical_section_three_times_the_ttl_keeps_its_lease(make_locks, server, round_trip):
    ttl = renewing_ttl(round_trip, quiet=0.5)
    lock = (await make_locks()).lock("rebuild-index", ttl=ttl, renew=True)
    rival = (await make_locks()).lock("rebuild-index", ttl=ttl)
    rival_attempts = 0

    async with lock as lease:
        until = time.monotonic() + 3 * ttl
        while time.monotonic() < until:
            assert await rival.try_acquire() is None, "nobody else may enter meanwhile"
            rival_attempts += 1
            assert token_in(server.get(lock.keys.lease)) == lease.token
            await asyncio.sleep(0.1)
        assert not lease.lost

    assert rival_attempts >= 10
    assert lease.renewals >= 3
    assert not lease.lost
    assert not await lock.locked()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("tamper", [delete, steal], ids=["deleted", "stolen"])
async def test_lease_ended_behind_the_holders_back_is_reported_lost(
    make_locks, server, tamper, round_trip
):
    ttl = renewing_ttl(round_trip, quiet=0.6)
    lock = (await make_locks()).lock("settlement", ttl=ttl, renew=True)
    lost: list[Lease] = []
    leases: list[Lease] = []
    body_finished = False

    async def settle() -> None:
        nonlocal body_finished
        async with lock as lease:
            leases.append(lease)
            lease.on_lost(lost.append)
            tamper(server, lock.keys.lease)
            # The next renewal, a third of the TTL away, finds the lease gone.
            noticed = ttl + allowing(round_trip, quiet=1.4, round_trips=RENEWAL_ROUND_TRIPS)
            assert await eventually(lambda: lost, within=noticed), "renewal should notice it"
            body_finished = True

    with pytest.raises(redlease.LeaseLost) as raised:
        await settle()

    assert body_finished, "LeaseLost comes after the body, not in the middle of it"
    (lease,) = leases
    assert lost == [lease]
    assert lease.lost
    assert raised.value.name == "settlement"
    if tamper is steal:
        assert token_in(server.get(lock.keys.lease)) == "intruder", (
            "the new owner's key is left alone"
        )
    else:
        assert not server.exists(lock.keys.lease)


@pytest.mark.timeout(30)
async def test_lease_deleted_between_renewals_is_reported_at_exit(make_locks, server):
    lock = (await make_locks()).lock("settlement")  # 30 s lease: no renewal due in the body
    lost: list[Lease] = []
    leases: list[Lease] = []

    async def settle() -> None:
        async with lock as lease:
            leases.append(lease)
            lease.on_lost(lost.append)
            server.delete(lock.keys.lease)
            assert not lost

    with pytest.raises(redlease.LeaseLost):
        await settle()

    assert lost == leases


@pytest.mark.timeout(30)
async def test_renewal_never_resurrects_a_deleted_lease(make_locks, server, round_trip):
    ttl = renewing_ttl(round_trip, quiet=0.3)
    lock = (await make_locks()).lock("quota", ttl=ttl, renew=True)
    lease = await lock.acquire()
    first_renewal = ttl + allowing(round_trip, quiet=1.7, round_trips=RENEWAL_ROUND_TRIPS)
    assert await eventually(lambda: lease.renewals >= 1, within=first_renewal)

    server.delete(lock.keys.lease)
    seen_again = False
    until = time.monotonic() + 10 * ttl / 3  # ten renewal periods
    while time.monotonic() < until:
        seen_again = seen_again or bool(server.exists(lock.keys.lease))
        await asyncio.sleep(0.02)

    assert not seen_again, "a renewal recreated a deleted lease"
    assert lease.lost
    assert await lock.release() is ReleaseOutcome.EXPIRED


@pytest.mark.timeout(40)
async def test_paused_holder_learns_it_lost_the_lease(
    make_locks, flavor, redlease_url, prefix, round_trip
):
    ttl = renewing_ttl(round_trip, quiet=1.0)
    runs_out = ttl + allowing(round_trip, quiet=1.0)  # its lease, then the successor's grant
    told = allowing(round_trip, quiet=1.0, round_trips=RENEWAL_ROUND_TRIPS)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HOLDER),
        redlease_url,
        prefix,
        "backup",
        "--flavor",
        flavor,
        "--ttl",
        str(ttl),
        "--renew",
        "--hold",
        str(runs_out + told + 0.5),  # still inside its section when it is told
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        first = await asyncio.wait_for(process.stdout.readline(), 10)
        assert first.startswith(b"ACQUIRED "), first
        process.send_signal(signal.SIGSTOP)  # a long GC pause, a frozen VM...
        paused_at = time.monotonic()

        successor = (await make_locks()).lock("backup", ttl=10)
        lease = await successor.acquire(timeout=runs_out + 5)
        assert time.monotonic() - paused_at < runs_out, "the paused holder's lease runs out"
        assert lease.fence > int(first.split()[1])
        await asyncio.sleep(max(0.0, paused_at + runs_out - time.monotonic()))

        process.send_signal(signal.SIGCONT)
        resumed_at = time.monotonic()
        learned = await asyncio.wait_for(process.stdout.readline(), told + 5)
        assert learned.startswith(b"LOST "), learned
        assert time.monotonic() - resumed_at < told, "its renewal should tell it at once"

        output, errors = await asyncio.wait_for(process.communicate(), told + 10)
        assert output.decode().split() == ["RELEASED", "expired"], errors.decode()
        assert process.returncode == 3
        assert await successor.owned(), "the paused holder must not touch its successor's lease"
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGCONT)
            process.kill()
            await process.wait()


@pytest.mark.timeout(90)
async def test_thousand_leases_are_renewed_by_one_worker_in_batches(make_locks, flavor, round_trip):
    already_running = renewal_workers(flavor)  # left by other clients, if any
    locks = await make_locks()
    shards = [f"shard-{number}" for number in range(1000)]
    ttl = renewing_ttl(round_trip, quiet=1.5)
    # Taken within one TTL: at most seven batches of renewals for a thousand leases.
    leases = await take_together(locks, shards, owner="shards", ttl=ttl, within=1.0)
    ttl = leases[0].ttl  # longer than asked if the machine was too busy to take them together
    assert await eventually(
        lambda: renewed_or_lost(leases, 1),
        within=ttl + allowing(round_trip, quiet=1.0, round_trips=RENEWAL_ROUND_TRIPS),
    )

    workers = [worker for worker in renewal_workers(flavor) if worker not in already_running]
    assert len(workers) == 1, f"one renewal worker per client, found {workers}"
    assert not [lease.name for lease in leases if lease.lost]
    assert min(lease.renewals for lease in leases) >= 1
    renewed = sum(lease.renewals for lease in leases)
    round_trips = locks._renewer.round_trips
    assert 0 < round_trips <= renewed / 50, f"{renewed} renewals took {round_trips} round trips"
    outcomes = await release_all(locks, shards, owner="shards")
    assert set(outcomes) == {ReleaseOutcome.RELEASED}


def lose_first_release_reply(
    monkeypatch: pytest.MonkeyPatch, locks: Any, meanwhile: Callable[[], Any]
) -> list[object]:
    """Make the client's first release run on the server but its reply never arrive.

    ``meanwhile`` runs between the lost reply and the client's retry; the list returned
    collects what the server answered to each release attempt.
    """
    scripts = getattr(locks, "locks", locks)._scripts
    run, answers = scripts.run, []

    def lost(reply: object) -> object:
        answers.append(reply)
        if len(answers) == 1:
            raise redis.exceptions.ConnectionError("connection reset before the reply arrived")
        return reply

    if isinstance(locks, redlease.AsyncLocks):

        async def run_async(operation: Any) -> object:
            reply = await run(operation)
            if operation.script is not ScriptName.RELEASE:
                return reply
            if not answers:
                await meanwhile()
            return lost(reply)

        monkeypatch.setattr(scripts, "run", run_async)
    else:

        def run_sync(operation: Any) -> object:
            reply = run(operation)
            if operation.script is not ScriptName.RELEASE:
                return reply
            if not answers:
                meanwhile()
            return lost(reply)

        monkeypatch.setattr(scripts, "run", run_sync)
    return answers


@pytest.mark.timeout(30)
async def test_release_retried_after_a_lost_reply_gets_the_same_answer(
    make_locks, server, monkeypatch
):
    locks, successor_locks = await make_locks(), await make_locks()
    lock = locks.lock("ledger", ttl=10)
    successor = successor_locks.lock("ledger", ttl=10, owner="successor")
    taken_over: list[Lease] = []

    def take_over_sync() -> None:
        again = successor_locks.locks.lock("ledger", ttl=10, owner="successor")
        taken_over.append(again.acquire(timeout=0))

    async def take_over_async() -> None:
        taken_over.append(await successor.acquire(timeout=0))

    async_flavour = isinstance(locks, redlease.AsyncLocks)
    answers = lose_first_release_reply(
        monkeypatch, locks, take_over_async if async_flavour else take_over_sync
    )
    await lock.acquire()

    assert await lock.release() is ReleaseOutcome.RELEASED
    assert len(answers) == 2, "the lost reply should have been retried once"
    assert answers[0] == answers[1], "the retry should get the first answer"
    (lease,) = taken_over
    assert token_in(server.get(lock.keys.lease)) == lease.token, (
        "the retry must not free the new lease"
    )
    assert await successor.owned()


@pytest.mark.timeout(30)
async def test_an_async_on_lost_callback_that_raises_is_logged_like_a_sync_one(
    redlease_url, prefix, caplog
):
    """observability.md: a callback given to ``on_lost`` that raises is logged at ERROR with
    its traceback; an ``async def`` one runs on the loop later, and is logged the same way."""

    async def failing(lease: Lease) -> None:
        await asyncio.sleep(0)
        raise ValueError("the async callback failed")

    def failing_sync(lease: Lease) -> None:
        raise ValueError("the sync callback failed")

    caplog.set_level(logging.ERROR, logger="redlease")
    async with redlease.AsyncLocks(redlease_url, prefix=prefix) as locks:
        lock = locks.lock("callbacks")
        with pytest.raises(redlease.LeaseLost):
            async with lock as lease:
                lease.on_lost(failing)
                lease.on_lost(failing_sync)
                async with redis.asyncio.Redis.from_url(redlease_url) as admin:
                    await admin.delete(lock.keys.lease)
        await asyncio.sleep(0.1)
    logged = [
        record
        for record in caplog.records
        if record.name == "redlease"
        and "on_lost callback of lock 'callbacks' raised" in record.message
    ]
    assert sorted(str(record.exc_info[1]) for record in logged if record.exc_info) == [
        "the async callback failed",
        "the sync callback failed",
    ]


async def test_an_async_on_lost_callback_given_to_a_lease_already_lost_runs(redlease_url, prefix):
    """``on_lost`` runs a callback "at once if it is" lost: an ``async def`` one too,
    scheduled on the loop (its coroutine was made and dropped, never awaited)."""
    ran = asyncio.Event()

    async def told(lease: Lease) -> None:
        await asyncio.sleep(0)
        ran.set()

    async with redlease.AsyncLocks(redlease_url, prefix=prefix) as locks:
        lease = await locks.lock("late", ttl=0.05).acquire()
        await asyncio.sleep(0.1)
        assert lease.lost
        lease.on_lost(told)
        await asyncio.wait_for(ran.wait(), 2)


def test_an_async_on_lost_callback_on_a_sync_lease_is_refused(redlease_url, prefix):
    """The sync ``Locks`` runs plain functions: an ``async def`` callback would be called,
    its coroutine dropped, and the holder never told. It is refused when registered."""

    async def told(lease: Lease) -> None:
        raise AssertionError("never awaited")

    class Alert:
        async def __call__(self, lease: Lease) -> None:
            raise AssertionError("never awaited")

    async def generated(lease: Lease) -> Any:
        yield lease

    with redlease.Locks(redlease_url, prefix=prefix) as locks:
        with locks.lock("sync-told") as lease:
            for callback in (told, Alert(), functools.partial(told), generated):
                with pytest.raises(redlease.InvalidArgument, match="async def"):
                    lease.on_lost(callback)
            lease.on_lost(lambda lost: None)


def test_a_sync_lease_callback_returning_a_coroutine_is_reported_not_dropped(
    redlease_url, prefix, caplog
):
    """A plain function around an ``async def`` passes ``on_lost``'s check; the coroutine
    it returns cannot be awaited by the sync flavour, and the holder must hear of that."""

    async def told(lease: Lease) -> None:
        raise AssertionError("never awaited")

    with redlease.Locks(redlease_url, prefix=prefix) as locks:
        lease = locks.lock("wrapped", ttl=0.05, renew=False).acquire()
        lease.on_lost(lambda lost: told(lost))  # noqa: PLW0108 - the point of the test
        time.sleep(0.1)
        with caplog.at_level(logging.ERROR, logger="redlease"):
            assert locks.lock("wrapped").release() is ReleaseOutcome.EXPIRED
    assert any("cannot await" in record.getMessage() for record in caplog.records)


def test_an_async_on_lost_callback_with_no_running_loop_is_refused(redlease_url, prefix):
    """An async lease already lost runs an ``async def`` callback as a task of the running
    loop; registered from outside any loop, it is refused (``InvalidArgument``), not left
    to a ``RuntimeError`` and a coroutine never awaited."""

    async def take() -> Lease:
        async with redlease.AsyncLocks(redlease_url, prefix=prefix) as locks:
            lease = await locks.lock("loopless", ttl=0.05).acquire()
            await asyncio.sleep(0.1)
            return lease

    lease = asyncio.run(take())
    assert lease.lost

    async def told(lost: Lease) -> None:
        raise AssertionError("no loop to run it")

    with pytest.raises(redlease.InvalidArgument, match="event loop"):
        lease.on_lost(told)


@pytest.mark.timeout(30)
def test_a_slow_on_lost_callback_holds_up_no_other_lease(redlease_url, prefix, round_trip):
    """A callback that takes seconds (an alert over a slow network) runs beside the renewal
    worker: the client's other leases are still renewed, and told on time."""
    ttl = renewing_ttl(round_trip, quiet=1.0)
    with redlease.Locks(redlease_url, prefix=prefix) as locks:
        doomed = locks.lock("doomed", ttl=ttl / 2).acquire()
        doomed.on_lost(lambda _: time.sleep(3 * ttl))
        kept = locks.lock("kept", ttl=ttl, renew=True).acquire()
        time.sleep(2.5 * ttl)
        assert doomed.lost
        assert not kept.lost, kept.lost_reason
        assert kept.renewals >= 2
        assert locks.lock("kept").release() is ReleaseOutcome.RELEASED


@pytest.mark.timeout(30)
def test_closing_the_client_lets_a_running_on_lost_callback_finish(redlease_url, prefix):
    """A callback the renewal worker started aside (an alert on its way) is not cut off by
    ``close()``: the client waits for it, as it waits for its renewal worker."""
    finished: list[bool] = []
    started = threading.Event()

    def alert(_: Lease) -> None:
        started.set()
        time.sleep(0.5)
        finished.append(True)

    with redlease.Locks(redlease_url, prefix=prefix) as locks:
        lease = locks.lock("alerting", ttl=0.2).acquire()
        lease.on_lost(alert)
        assert started.wait(5), "the lease was not found lost"
    assert finished == [True]


@pytest.mark.timeout(30)
def test_a_client_closed_from_its_own_on_lost_callback_closes(redlease_url, prefix):
    closed = threading.Event()
    locks = redlease.Locks(redlease_url, prefix=prefix)

    def close_the_client(_: Lease) -> None:
        locks.close()
        closed.set()

    lease = locks.lock("closing", ttl=0.2).acquire()
    lease.on_lost(close_the_client)
    assert closed.wait(10), "close() from the callback raised or hung"
    with pytest.raises(redlease.LockError, match="closed"):
        locks.lock("again").acquire(timeout=0)
