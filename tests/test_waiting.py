"""Waiting for a held lock: woken at once, silent while blocked, and leaving nothing behind.

A waiter subscribes to its lock's wake-up channel, so a release wakes it within a round
trip and an expiry (which publishes nothing) wakes it when the holder's TTL runs out.
While it waits it sends the server nothing, however many waiters one client has: they
share one pub/sub connection. A wait that ends without the lock (timeout, cancellation,
Ctrl-C) unsubscribes and leaves no key behind.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import redis

import redlease
from conftest import allowing, eventually, subscribed_channels, token_in
from redlease import Lease, ReleaseOutcome
from redlease.keys import LockKeys

TESTS = Path(__file__).resolve().parent
INTERRUPTED_WAITER = TESTS / "proc_interrupted_waiter.py"
WAITER = TESTS / "proc_waiter.py"


def listening(server: redis.Redis, prefix: str) -> list[str]:
    """The channels under ``prefix`` someone is subscribed to (sharded or classic)."""
    return subscribed_channels(server, f"{prefix}*")


def subscriber_connections(server: redis.Redis) -> list[dict[str, Any]]:
    """The server's connections that have any subscription, from ``CLIENT LIST``."""
    return [
        client
        for client in server.client_list()
        if "P" in client["flags"]
        or any(int(client.get(field, 0)) > 0 for field in ("sub", "psub", "ssub"))
    ]


def commands_served(server: redis.Redis) -> dict[str, int]:
    """Calls per command so far, leaving out the INFO that asks."""
    stats = server.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): int(stat["calls"])
        for name, stat in stats.items()
        if name != "cmdstat_info"
    }


def keys_under(server: redis.Redis, prefix: str) -> set[str]:
    return set(server.scan_iter(match=f"{prefix}*"))


async def take_in_turn(locks: Any, names: list[str], hold: float) -> list[Lease]:
    """Take each name in ``names`` with an owner of its own (a task, or a thread for the
    sync flavour), hold it for ``hold`` seconds and release it; all at the same time."""
    if isinstance(locks, redlease.AsyncLocks):

        async def one_task(name: str) -> Lease:
            async with locks.lock(name, timeout=15) as lease:
                await asyncio.sleep(hold)
            return lease

        return list(await asyncio.gather(*(one_task(name) for name in names)))

    def one_thread(name: str) -> Lease:
        with locks.locks.lock(name, timeout=15) as lease:
            time.sleep(hold)
        return lease

    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(len(names), thread_name_prefix="waiter") as pool:
        return list(
            await asyncio.gather(*(loop.run_in_executor(pool, one_thread, n) for n in names))
        )


@pytest.mark.timeout(30)
async def test_waiter_wakes_as_soon_as_the_holder_releases(make_locks, server, prefix, round_trip):
    holder = (await make_locks()).lock("monthly-report", ttl=20)
    waiter = (await make_locks()).lock("monthly-report", ttl=20, owner="report-worker")
    await holder.acquire()

    started = time.monotonic()
    waiting = asyncio.create_task(waiter.acquire(timeout=10))
    assert await eventually(lambda: listening(server, prefix), within=3)
    await asyncio.sleep(max(0.0, started + 0.3 - time.monotonic()))
    released_at = time.monotonic()
    assert await holder.release() is ReleaseOutcome.RELEASED
    lease = await asyncio.wait_for(waiting, 5)
    acquired_at = time.monotonic()

    at_once = allowing(round_trip, quiet=0.3)
    assert acquired_at - released_at < at_once, "the release should wake the waiter at once"
    assert acquired_at - started < allowing(round_trip, quiet=1.0, round_trips=30), (
        "far sooner than the holder's 20 s lease"
    )
    assert await waiter.owned()
    assert await waiter.release() is ReleaseOutcome.RELEASED
    assert lease.fence == 2


@pytest.mark.timeout(30)
async def test_waiter_takes_an_abandoned_lock_right_after_it_expires(
    make_locks, server, round_trip
):
    holder = (await make_locks()).lock("nightly-import", ttl=1, renew=False)
    waiter = (await make_locks()).lock("nightly-import", ttl=5)
    before_grant = time.monotonic()
    crashed = await holder.acquire()  # and never released: its process "crashed"
    granted = time.monotonic()

    lease = await waiter.acquire(timeout=5)
    waited = time.monotonic()

    assert waited - before_grant >= 0.95, "the abandoned lease must run out first"
    assert waited - granted < 1 + allowing(round_trip, quiet=0.5), (
        "the waiter should get the lock soon after the expiry"
    )
    assert lease.fence > crashed.fence
    assert await waiter.release() is ReleaseOutcome.RELEASED


@pytest.mark.timeout(30)
async def test_blocked_waiter_sends_no_commands_while_it_waits(
    make_locks, redlease_servers_factory, prefix, round_trip
):
    (private,) = redlease_servers_factory(1)
    observer = redis.Redis.from_url(private.url, decode_responses=True)
    holder = (await make_locks(url=private.url)).lock("ledger")  # 30 s, renewed
    waiter = (await make_locks(url=private.url)).lock("ledger", owner="ledger-worker")
    await holder.acquire()
    waiting = asyncio.create_task(waiter.acquire(timeout=15))
    assert await eventually(lambda: listening(observer, prefix), within=3)
    # the second try, made once subscribed, has been answered
    await asyncio.sleep(allowing(round_trip, quiet=0.2))

    before = commands_served(observer)
    await asyncio.sleep(1.5)
    after = commands_served(observer)

    assert not waiting.done()
    served = {name: after.get(name, 0) - count for name, count in before.items()}
    served.update({name: count for name, count in after.items() if name not in before})
    assert {name: count for name, count in served.items() if count} == {}, (
        "a blocked waiter should only listen on its subscription"
    )
    assert await holder.release() is ReleaseOutcome.RELEASED
    await asyncio.wait_for(waiting, 5)
    assert await waiter.release() is ReleaseOutcome.RELEASED
    observer.close()


@pytest.mark.timeout(30)
async def test_many_waiters_share_one_subscriber_connection(
    make_locks, redlease_servers_factory, prefix, round_trip
):
    (private,) = redlease_servers_factory(1)
    observer = redis.Redis.from_url(private.url, decode_responses=True)
    holder_locks = await make_locks(url=private.url)
    waiter_locks = await make_locks(url=private.url)
    invoices = [f"invoice-{number}" for number in range(5)]
    held = [holder_locks.lock(name) for name in invoices]
    first_fences = {lock.name: (await lock.acquire()).fence for lock in held}
    slots = {LockKeys(name, prefix).wake_prefix for name in invoices}

    everyone = asyncio.create_task(take_in_turn(waiter_locks, invoices * 4, hold=0.02))
    assert await eventually(lambda: len(listening(observer, prefix)) >= len(slots), within=5)
    await asyncio.sleep(allowing(round_trip, quiet=0.5))  # the other fifteen line up too
    connections = subscriber_connections(observer)
    assert len(connections) == 1, f"20 waiters should share one connection: {connections}"
    (connection,) = connections
    subscriptions = sum(int(connection.get(kind, 0)) for kind in ("sub", "psub", "ssub"))
    assert subscriptions == len(slots), "one channel per client and cluster slot, not per waiter"

    for lock in held:
        assert await lock.release() is ReleaseOutcome.RELEASED
    leases = await asyncio.wait_for(everyone, 10)

    for name, first in first_fences.items():
        fences = sorted(lease.fence for lease in leases if lease.name == name)
        assert len(set(fences)) == 4, f"{name}: fences handed out twice: {fences}"
        assert fences[0] > first, f"{name}: fences went back after {first}: {fences}"
    assert len(subscriber_connections(observer)) == 1, "the client keeps its channels"
    observer.close()


@pytest.mark.timeout(30)
async def test_waiter_that_times_out_leaves_nothing_behind(make_locks, server, prefix, round_trip):
    holder = (await make_locks()).lock("payroll")
    waiter = (await make_locks()).lock("payroll")
    held = await holder.acquire()

    started = time.monotonic()
    with pytest.raises(redlease.LockTimeout) as timed_out:
        await waiter.acquire(timeout=0.5)
    gave_up_after = time.monotonic() - started

    assert isinstance(timed_out.value, TimeoutError)
    assert 0.45 <= gave_up_after < 0.5 + allowing(round_trip, quiet=1.0)
    assert len(listening(server, prefix)) <= 1, "the client's channel stays, nothing more"
    assert keys_under(server, prefix) == {holder.keys.lease, holder.keys.fence}
    assert token_in(server.get(holder.keys.lease)) == held.token
    assert await holder.owned()


@pytest.mark.timeout(30)
async def test_cancelled_waiter_leaves_nothing_behind(redlease_url, server, prefix):
    async with (
        redlease.AsyncLocks(redlease_url, prefix=prefix) as holder_locks,
        redlease.AsyncLocks(redlease_url, prefix=prefix) as waiter_locks,
    ):
        holder = holder_locks.lock("payroll")
        waiter = waiter_locks.lock("payroll")
        held = await holder.acquire()
        waiting = asyncio.create_task(waiter.acquire())
        assert await eventually(lambda: listening(server, prefix), within=3)

        waiting.cancel()
        await asyncio.wait({waiting}, timeout=5)
        assert waiting.done(), "the cancelled acquire kept waiting: the cancellation was lost"
        assert waiting.cancelled(), f"the cancelled acquire ended with {waiting}"

        assert waiter_locks._notifier.waiting() == 0
        assert len(listening(server, prefix)) <= 1, "the client's channel stays, nothing more"
        assert keys_under(server, prefix) == {holder.keys.lease, holder.keys.fence}
        assert token_in(server.get(holder.keys.lease)) == held.token
        assert await holder.owned()


@pytest.mark.timeout(30)
def test_waiter_that_an_exception_of_the_caller_ends_leaves_nothing_behind(
    redlease_url, server, prefix
):
    """A signal handler's RuntimeError (or SystemExit) ended the wait but left the queue
    entry: the next release handed the lock to it, and nobody held it for a whole TTL."""

    def give_up(signum: int, frame: Any) -> None:
        raise RuntimeError("the caller's own time limit")

    with (
        redlease.Locks(redlease_url, prefix=prefix) as holder_locks,
        redlease.Locks(redlease_url, prefix=prefix) as waiter_locks,
    ):
        holder = holder_locks.lock("payroll")
        held = holder.acquire()
        previous = signal.signal(signal.SIGALRM, give_up)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.5)
            with pytest.raises(RuntimeError, match="time limit"):
                waiter_locks.lock("payroll").acquire(timeout=10)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

        assert keys_under(server, prefix) == {holder.keys.lease, holder.keys.fence}
        assert token_in(server.get(holder.keys.lease)) == held.token
        assert holder.release() is ReleaseOutcome.RELEASED
        assert holder_locks.lock("payroll", owner="next").acquire(timeout=0).fence > held.fence


@pytest.mark.timeout(30)
async def test_waiter_interrupted_with_ctrl_c_leaves_nothing_behind(
    make_locks, flavor, server, prefix, redlease_url
):
    holder = (await make_locks()).lock("payroll")
    held = await holder.acquire()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(INTERRUPTED_WAITER),
        redlease_url,
        prefix,
        "payroll",
        "--flavor",
        flavor,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert await asyncio.wait_for(process.stdout.readline(), 10) == b"WAITING\n"
        assert await eventually(lambda: listening(server, prefix), within=5)

        process.send_signal(signal.SIGINT)
        try:
            interrupted = await asyncio.wait_for(process.stdout.readline(), 5)
        except asyncio.TimeoutError:
            pytest.fail("Ctrl-C did not end the wait: the interruption was lost")
        assert interrupted == b"INTERRUPTED\n"

        # The interrupted process is still up with its client open: nothing may linger.
        assert len(listening(server, prefix)) <= 1, "the client's channel stays, nothing more"
        assert keys_under(server, prefix) == {holder.keys.lease, holder.keys.fence}
        assert token_in(server.get(holder.keys.lease)) == held.token
        assert await holder.owned()

        process.stdin.close()
        _, errors = await asyncio.wait_for(process.communicate(), 10)
        assert process.returncode == 0, errors.decode()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


@pytest.mark.timeout(60)
async def test_a_waiter_whose_timeout_runs_out_on_a_stopped_server_times_out_on_time(
    make_locks, redlease_servers_factory, round_trip
):
    """Its withdrawal from the queue waited out the socket timeout (5 s); it is bounded as
    a cancellation's is (1 s), and the background withdraws once the server is back. A
    server that did not answer it is reported as such (``ServerUnavailable``), never as a
    lock held by another owner (``LockTimeout``)."""
    (stopped,) = redlease_servers_factory(1)
    holder = (await make_locks(stopped.url)).lock("payroll", ttl=30)
    waiter = (await make_locks(stopped.url)).lock("payroll", ttl=30)
    await holder.acquire()
    waiting = asyncio.create_task(waiter.acquire(timeout=1.0))
    on_server = redis.Redis(port=stopped.port, decode_responses=True)
    assert await eventually(lambda: on_server.llen(waiter.keys.queue) == 1, 5)
    stopped.pause()
    try:
        started = time.monotonic()
        with pytest.raises(redlease.ServerUnavailable, match="payroll"):
            await waiting
        assert time.monotonic() - started < 1.0 + 1.0 + allowing(round_trip, quiet=1.0)
    finally:
        stopped.resume()
    assert await eventually(lambda: on_server.llen(waiter.keys.queue) == 0, 5)
    assert await holder.release() is ReleaseOutcome.RELEASED
    on_server.close()


@pytest.mark.timeout(30)
async def test_lease_handed_to_a_paused_waiter_does_not_overstate_its_time(
    make_locks, flavor, server, prefix, redlease_url
):
    holder = (await make_locks()).lock("archive", ttl=20)
    await holder.acquire()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(WAITER),
        redlease_url,
        prefix,
        "archive",
        "--flavor",
        flavor,
        "--ttl",
        "3",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert await asyncio.wait_for(process.stdout.readline(), 10) == b"WAITING\n"
        assert await eventually(lambda: listening(server, prefix), within=5)
        await asyncio.sleep(0.2)  # queued behind the holder

        process.send_signal(signal.SIGSTOP)  # the waiter stalls (GC, swap, a busy host)...
        assert await holder.release() is ReleaseOutcome.RELEASED
        await asyncio.sleep(0.8)  # ...while its lease, already handed over, runs
        process.send_signal(signal.SIGCONT)

        line = await asyncio.wait_for(process.stdout.readline(), 10)
        assert line.startswith(b"ACQUIRED "), line
        _, _, local_ms, server_ms = line.split()
        assert int(local_ms) <= int(server_ms) + 20, (
            f"the waiter believes its lease lasts {int(local_ms)} ms more; "
            f"the server ends it in {int(server_ms)} ms"
        )
        _, errors = await asyncio.wait_for(process.communicate(), 10)
        assert process.returncode == 0, errors.decode()
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGCONT)
            process.kill()
            await process.wait()


class Interrupted(BaseException):
    """What a signal handler of the caller raises, at any point of ``acquire``."""


def interrupting(function: str) -> Any:
    """A trace function that raises :class:`Interrupted` as redlease calls ``function``: a
    signal that lands there, without the timing."""

    def trace(frame: Any, event: str, arg: Any) -> Any:
        if (
            event == "call"
            and frame.f_code.co_name == function
            and "redlease" in (frame.f_code.co_filename)
        ):
            sys.settrace(None)
            raise Interrupted(function)
        return None

    return trace


@pytest.mark.parametrize("step", ["_lease", "_adopt", "_observe"])
@pytest.mark.parametrize("client", ["locks", "multi", "redlock"])
def test_an_acquire_interrupted_after_the_grant_gives_it_back(
    redlease_url, redlease_servers_factory, prefix, round_trip, step, client
):
    """which-lock.md, guide.md: an acquire cut short (Ctrl-C, a time limit's signal) is given
    back. A signal that landed after the server granted the lock but before ``acquire``
    returned left it held by nobody for its TTL (Redlock, and a plain lock), or held and
    renewed for ever by the client's worker once the lease was on its books (an outside
    tester, SIGALRM 0.1-3 ms into acquire)."""
    if client == "redlock":
        urls = [server.url for server in redlease_servers_factory(3)]
        interrupted, other = (redlease.Redlock(urls, prefix=prefix) for _ in range(2))
    else:
        interrupted, other = (redlease.Locks(redlease_url, prefix=prefix) for _ in range(2))
    if step == "_lease" and client == "multi":
        step = "_adopt_each"  # a multi-lock makes its leases itself
    with interrupted, other:
        lock: Any = (
            interrupted.multi_lock(["report", "stock"], ttl=30)
            if client == "multi"
            else interrupted.lock("report", ttl=30)
        )
        sys.settrace(interrupting(step))
        try:
            with pytest.raises(Interrupted):
                lock.acquire(timeout=5)
        finally:
            sys.settrace(None)
        with pytest.raises(redlease.NotOwned):
            lock.release()  # nothing is left on the books
        within = allowing(round_trip, quiet=3.0)
        for name in ("report", "stock") if client == "multi" else ("report",):
            assert other.lock(name, ttl=5).acquire(timeout=within).fence > 0
