"""Connections the server closed or stopped answering must not cost the user a lock call.

A client keeps the connections its lock commands used, to reuse them. After a server
restart or a ``CLIENT KILL`` every one of them is dead at once: the first call to find
that out must not leave the others for the next calls to find one by one.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
import redis.asyncio

import redlease
from conftest import measure_round_trip, renewing_ttl, token_in
from redlease import ReleaseOutcome
from redlease.aio.background import CLOSE_GRACE_S
from redlease.aio.engine import INLINE_WITHDRAWAL_S
from redlease.chaos.proxy import ProxyHub
from redlease.core.withdrawal import (
    KEEP_TRYING_S,
    LATE_COMMAND_S,
    LONGEST_PAUSE_S,
    withdrawal_pauses,
)
from redlease.server import EmbeddedServer

CONNECTIONS = 16
WARM_UPS = 5
SCHEDULING_SLACK_S = 0.5
"""How late a task may be woken on a loaded 2-core machine."""


def our_connections(server: redis.Redis, client_name: str) -> list[int]:
    return [int(c["id"]) for c in server.client_list() if c.get("name") == client_name]


def settles(admin: redis.Redis, key: str, client_name: str, within: float) -> bool:
    """Whether ``key`` is gone and the named client has no connection, within ``within``."""
    deadline = time.monotonic() + within
    while admin.exists(key) or our_connections(admin, client_name):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def named_url(url: str, name: str, socket_timeout: float) -> str:
    return (
        f"{url}?client_name={name}&socket_timeout={socket_timeout}"
        f"&socket_connect_timeout={socket_timeout}"
    )


def kill(server: redis.Redis, ids: list[int]) -> None:
    for client_id in ids:
        server.client_kill_filter(_id=client_id)


def warm_sync(locks: redlease.Locks, count: int) -> None:
    """Hold ``count`` locks at once from as many threads, so each used its own connection."""
    together = threading.Barrier(count)

    def hold(index: int) -> None:
        with locks.lock(f"warm-{index}", ttl=10):
            together.wait(timeout=10)

    with ThreadPoolExecutor(count) as pool:
        list(pool.map(hold, range(count)))


async def warm_async(locks: redlease.AsyncLocks, count: int) -> None:
    held = asyncio.Event()
    entered = 0

    async def hold(index: int) -> None:
        nonlocal entered
        async with locks.lock(f"warm-{index}", ttl=10):
            entered += 1
            if entered == count:
                held.set()
            await asyncio.wait_for(held.wait(), 10)

    await asyncio.gather(*(hold(index) for index in range(count)))


@pytest.mark.parametrize("flavor", ["sync", "async"])
def test_after_every_connection_was_killed_each_next_lock_call_succeeds(
    redlease_url, server, prefix, flavor
):
    client_name = f"dead-{uuid.uuid4().hex[:8]}"
    outcomes: list[Any] = []
    if flavor == "sync":
        client = redis.Redis.from_url(redlease_url, client_name=client_name)
        with redlease.Locks(client, prefix=prefix) as locks:
            for _ in range(WARM_UPS):  # on a loaded machine calls may overlap less
                warm_sync(locks, CONNECTIONS)
                kept = our_connections(server, client_name)
                if len(kept) >= CONNECTIONS // 2:
                    break
            kill(server, kept)
            for index in range(CONNECTIONS):
                try:
                    with locks.lock(f"after-{index}", ttl=5):
                        outcomes.append("held")
                except redlease.LockError as error:
                    outcomes.append(repr(error))
        client.close()
    else:

        async def scenario() -> list[int]:
            client = redis.asyncio.Redis.from_url(redlease_url, client_name=client_name)
            async with redlease.AsyncLocks(client, prefix=prefix) as locks:
                for _ in range(WARM_UPS):
                    await warm_async(locks, CONNECTIONS)
                    kept = our_connections(server, client_name)
                    if len(kept) >= CONNECTIONS // 2:
                        break
                kill(server, kept)
                for index in range(CONNECTIONS):
                    try:
                        async with locks.lock(f"after-{index}", ttl=5):
                            outcomes.append("held")
                    except redlease.LockError as error:
                        outcomes.append(repr(error))
            await client.aclose()
            return kept

        kept = asyncio.run(scenario())
    assert len(kept) >= 2, "the warm-up should leave several connections kept"
    assert outcomes == ["held"] * CONNECTIONS


SOCKET_TIMEOUT_S = 2.0
WAIT_S = 1.0


@pytest.fixture
def unix_server(tmp_path) -> Iterator[tuple[EmbeddedServer, str]]:
    path = str(tmp_path / "redis.sock")
    with EmbeddedServer(args=("--unixsocket", path, "--unixsocketperm", "700")) as server:
        yield server, path


def client_of(kind: str, server: EmbeddedServer, path: str) -> redis.asyncio.Redis:
    if kind == "no socket timeout":
        return redis.asyncio.Redis.from_url(server.url, socket_timeout=None)
    return redis.asyncio.Redis(
        unix_socket_path=path,
        socket_timeout=SOCKET_TIMEOUT_S,
        socket_connect_timeout=SOCKET_TIMEOUT_S,
    )


@pytest.mark.parametrize("what", ["lock", "multi-lock of 3"])
@pytest.mark.parametrize("kind", ["no socket timeout", "unix socket"])
async def test_a_cancelled_acquire_on_a_stopped_server_returns_soon(
    unix_server, prefix, kind, what
):
    """The withdrawal a cancelled acquire sends waits for the server only briefly (then goes
    on in the background): a time limit must get the caller out, whatever the client's
    socket settings (a new unix-socket connection to a stopped server is accepted and then
    never answers its handshake), and however many parts a multi-lock has."""
    server, path = unix_server
    client = client_of(kind, server, path)
    locks = redlease.AsyncLocks(client, prefix=prefix)
    async with locks.lock("warm"):
        pass
    if what == "lock":
        stopped = locks.lock("stopped")
    else:
        stopped = locks.multi_lock(["stopped-1", "stopped-2", "stopped-3"])
    server.pause()
    started = time.monotonic()
    try:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(stopped.acquire(), WAIT_S)
        took = time.monotonic() - started
    finally:
        server.resume()
    await locks.aclose()
    await client.aclose()
    assert took < WAIT_S + INLINE_WITHDRAWAL_S + SCHEDULING_SLACK_S, took


@pytest.mark.timeout(60)
@pytest.mark.parametrize("socket_timeout", [None, 10.0], ids=["no socket timeout", "10 s"])
def test_a_sync_acquire_interrupted_by_ctrl_c_on_a_stopped_server_returns_soon(
    prefix, socket_timeout
):
    """Ctrl-C must end a wait promptly: the withdrawal it sends inline waits for a stopped
    server as briefly as an asyncio cancellation's does, then goes on in the background
    (withdrawn within about a second of the resume)."""
    with EmbeddedServer() as server:
        client = redis.Redis.from_url(server.url, socket_timeout=socket_timeout)
        holder = redlease.Locks(server.url, prefix=prefix)
        waiter = redlease.Locks(client, prefix=prefix)
        held = holder.lock("stopped").acquire()
        interrupted_at: list[float] = []

        def stop_then_interrupt() -> None:
            time.sleep(0.5)  # the waiter is queued by now
            server.pause()
            interrupted_at.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGINT)

        interrupt = threading.Thread(target=stop_then_interrupt)
        interrupt.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                waiter.lock("stopped").acquire(timeout=30)
            took = time.monotonic() - interrupted_at[0]
        finally:
            interrupt.join()
            server.resume()
        try:
            assert took < INLINE_WITHDRAWAL_S + SCHEDULING_SLACK_S, took
            with redis.Redis.from_url(server.url, decode_responses=True) as admin:
                queue = f"{prefix}:{{stopped}}:queue"
                deadline = time.monotonic() + 2 * LONGEST_PAUSE_S + SCHEDULING_SLACK_S
                while admin.exists(queue) and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert not admin.exists(queue), "the withdrawal did not land after the resume"
                assert token_in(admin.get(f"{prefix}:{{stopped}}")) == held.token
        finally:
            waiter.close()
            holder.close()
            client.close()


@pytest.mark.parametrize("flavor", ["sync", "async"])
def test_an_acquire_the_server_does_not_answer_fails_after_one_socket_timeout(prefix, flavor):
    """An unreachable server is reported once: the withdrawal of the attempt goes on in the
    background instead of waiting out a second socket timeout before the error."""
    with EmbeddedServer() as server:
        options = {"socket_timeout": SOCKET_TIMEOUT_S, "socket_connect_timeout": SOCKET_TIMEOUT_S}
        if flavor == "sync":
            locks: Any = redlease.Locks(redis.Redis.from_url(server.url, **options), prefix=prefix)
            locks.lock("warm").try_acquire()
            server.pause()
            started = time.monotonic()
            try:
                with pytest.raises(redlease.ServerUnavailable):
                    locks.lock("stopped").acquire(timeout=WAIT_S)
                took = time.monotonic() - started
            finally:
                server.resume()
            locks.close()
        else:

            async def scenario() -> float:
                client = redis.asyncio.Redis.from_url(server.url, **options)
                locks = redlease.AsyncLocks(client, prefix=prefix)
                await locks.lock("warm").try_acquire()
                server.pause()
                started = time.monotonic()
                try:
                    with pytest.raises(redlease.ServerUnavailable):
                        await locks.lock("stopped").acquire(timeout=WAIT_S)
                    return time.monotonic() - started
                finally:
                    server.resume()
                    await locks.aclose()
                    await client.aclose()

            took = asyncio.run(scenario())
    assert took < 2 * SOCKET_TIMEOUT_S, took


CYCLES_UNDER_FLUSHES = 1000


async def test_lock_calls_go_through_while_the_server_keeps_flushing_its_scripts(make_locks):
    """``SCRIPT FLUSH`` (or a failover to a server that never saw the scripts) between a
    call's script load and its run must not surface as an error, nor cost a renewed lease:
    a script the server does not know is sent whole."""
    with EmbeddedServer() as server, redis.Redis.from_url(server.url) as admin:
        ttl = renewing_ttl(measure_round_trip(server.url), quiet=0.6)
        stop = threading.Event()

        def flush() -> None:
            while not stop.is_set():
                admin.script_flush()

        flusher = threading.Thread(target=flush)
        errors: list[str] = []
        locks = await make_locks(server.url)
        renewed = locks.lock("renewed", ttl=ttl, renew=True)
        lease = await renewed.acquire()
        flusher.start()
        try:
            for index in range(CYCLES_UNDER_FLUSHES):
                try:
                    async with locks.lock(f"flushed-{index % 7}", ttl=5):
                        pass
                except redlease.LockError as error:
                    errors.append(repr(error))
        finally:
            stop.set()
            flusher.join()
        lost = lease.lost_reason
        released = await renewed.release()
    assert errors == []
    assert lost is None
    assert released is ReleaseOutcome.RELEASED


GHOST_TTL_S = 30.0
"""Long enough that a grant left behind would outlast the test by far."""


@pytest.mark.parametrize("closed", ["open", "closed", "closed, made from a URL"])
@pytest.mark.parametrize("flavor", ["sync", "async"])
def test_an_attempt_a_stopped_server_runs_when_it_resumes_is_withdrawn(prefix, flavor, closed):
    """An acquire given up on a stopped server (cancelled, or failed at the socket timeout)
    is still in the server's socket and runs when it resumes, granting the lock to nobody.
    Withdrawals go on from the background until the server answers, even once the client
    is closed, so the lock is free soon after the resume, not a whole TTL later; on a
    client made from a URL, the connection the withdrawal opened after ``close()`` is
    closed again when it is done."""
    socket_timeout = 0.3
    stopped_for = 8 * socket_timeout  # every withdrawal sent meanwhile fails
    options = {"socket_timeout": socket_timeout, "socket_connect_timeout": socket_timeout}
    name = f"ghost-{uuid.uuid4().hex[:8]}"
    with EmbeddedServer() as server, redis.Redis.from_url(server.url) as admin:
        owned = closed == "closed, made from a URL"
        url = named_url(server.url, name, socket_timeout)

        def free_soon(key: str) -> float:
            resumed = time.monotonic()
            while admin.exists(key) and time.monotonic() - resumed < GHOST_TTL_S / 3:
                time.sleep(0.05)
            freed_after = time.monotonic() - resumed
            if owned:  # the withdrawal's second try comes LATE_COMMAND_S after the first
                assert settles(admin, key, name, 2 * LATE_COMMAND_S + SCHEDULING_SLACK_S)
            return freed_after

        if flavor == "sync":
            client = url if owned else redis.Redis.from_url(server.url, **options)
            locks = redlease.Locks(client, prefix=prefix)
            lock = locks.lock("ghost", ttl=GHOST_TTL_S)
            locks.lock("warm").try_acquire()
            server.pause()
            try:
                with pytest.raises(redlease.ServerUnavailable):
                    lock.acquire(timeout=0.1)
                if closed != "open":
                    locks.close()
                time.sleep(stopped_for)
            finally:
                server.resume()
            freed_after = free_soon(lock.keys.lease)
            locks.close()
        else:

            async def scenario() -> float:
                client = url if owned else redis.asyncio.Redis.from_url(server.url, **options)
                locks = redlease.AsyncLocks(client, prefix=prefix)
                lock = locks.lock("ghost", ttl=GHOST_TTL_S)
                await locks.lock("warm").try_acquire()
                server.pause()
                try:
                    with pytest.raises(asyncio.TimeoutError):
                        await asyncio.wait_for(lock.acquire(), 0.1)
                    if closed != "open":
                        await locks.aclose()
                    await asyncio.sleep(stopped_for)
                finally:
                    server.resume()
                # the withdrawal is a task of this loop: keep the loop running meanwhile
                freed_after = await asyncio.to_thread(free_soon, lock.keys.lease)
                await locks.aclose()
                return freed_after

            freed_after = asyncio.run(scenario())
    assert freed_after < 3.0, f"the lock stayed taken {freed_after:.1f} s after the resume"


def test_background_withdrawals_stop_after_a_second_answer_or_the_keep_trying_time():
    def pauses(answers: list[bool], ttl_ms: int) -> list[float]:
        schedule = withdrawal_pauses(ttl_ms)
        taken = [next(schedule)]
        for answered in answers:
            try:
                taken.append(schedule.send(answered))
            except StopIteration:
                break
        return taken

    assert pauses([True, True, True], 5_000) == [LATE_COMMAND_S, LATE_COMMAND_S]
    silent = pauses([False] * 1_000, 5_000)
    assert sum(silent) <= KEEP_TRYING_S
    assert max(silent) == LONGEST_PAUSE_S
    assert sum(pauses([False] * 1_000, 90_000)) <= 90.0
    assert sum(pauses([False] * 1_000, 90_000)) > KEEP_TRYING_S


@pytest.mark.parametrize("flavor", ["sync", "async"])
def test_close_waits_for_a_release_sent_to_the_background(prefix, flavor):
    """A lease found lost when released is released from the background; ``close()`` right
    after lets that release land first (here over a link of 100 ms each way), and then no
    connection of the client stays open."""
    name = f"bg-{uuid.uuid4().hex[:8]}"
    ttl = 0.2
    with (
        EmbeddedServer() as server,
        redis.Redis.from_url(server.url) as admin,
        ProxyHub() as hub,
    ):
        link = hub.link("127.0.0.1", server.port)
        url = named_url(link.url, name, socket_timeout=5.0)
        if flavor == "sync":
            locks: Any = redlease.Locks(url, prefix=prefix)
            lock = locks.lock("short", ttl=ttl, renew=False)
            lock.acquire()
            assert admin.pexpire(lock.keys.lease, 10_000)  # kept on the server...
            link.set(delay=0.1)
            time.sleep(ttl * 1.2)  # ...and lost here
            assert lock.release() is ReleaseOutcome.EXPIRED
            locks.close()
        else:

            async def scenario() -> Any:
                locks = redlease.AsyncLocks(url, prefix=prefix)
                lock = locks.lock("short", ttl=ttl, renew=False)
                await lock.acquire()
                assert admin.pexpire(lock.keys.lease, 10_000)
                link.set(delay=0.1)
                await asyncio.sleep(ttl * 1.2)
                assert await lock.release() is ReleaseOutcome.EXPIRED
                await locks.aclose()
                return lock

            lock = asyncio.run(scenario())
        assert not admin.exists(lock.keys.lease), "close() returned before the release landed"
        # the proxy passes the close on after its delay
        assert settles(admin, lock.keys.lease, name, 0.1 + SCHEDULING_SLACK_S)
        assert our_connections(admin, name) == []


@pytest.mark.parametrize("flavor", ["sync", "async"])
def test_a_second_close_does_not_wait_for_the_background_again(prefix, flavor):
    """``close()`` gives background work up to a second once; closing again (a ``with``
    block around an explicit ``close()``) returns at once."""
    socket_timeout = 0.3
    with EmbeddedServer() as server:
        url = named_url(server.url, f"twice-{uuid.uuid4().hex[:8]}", socket_timeout)
        if flavor == "sync":
            locks: Any = redlease.Locks(url, prefix=prefix)
            locks.lock("warm").try_acquire()
            server.pause()
            try:
                with pytest.raises(redlease.ServerUnavailable):
                    locks.lock("stuck").acquire(timeout=0.1)
                locks.close()
                started = time.monotonic()
                locks.close()
                again = time.monotonic() - started
            finally:
                server.resume()
        else:

            async def scenario() -> float:
                locks = redlease.AsyncLocks(url, prefix=prefix)
                await locks.lock("warm").try_acquire()
                server.pause()
                try:
                    with pytest.raises(asyncio.TimeoutError):
                        await asyncio.wait_for(locks.lock("stuck").acquire(), 0.1)
                    await locks.aclose()
                    started = time.monotonic()
                    await locks.aclose()
                    return time.monotonic() - started
                finally:
                    server.resume()

            again = asyncio.run(scenario())
    assert again < CLOSE_GRACE_S / 2, again


@pytest.mark.parametrize("flavor", ["sync", "async"])
def test_a_wait_that_ends_on_a_stopped_server_logs_its_withdrawal(prefix, flavor, caplog):
    """observability.md: the DEBUG line "could not withdraw [...] at once" says a failed
    acquisition's queue entry is withdrawn from the background; a waiter whose time runs
    out while the server is stopped is one (it raises ServerUnavailable)."""
    with EmbeddedServer() as server:
        holder = redlease.Locks(server.url, prefix=prefix)
        holder.lock("busy", ttl=30).acquire()
        url = f"{server.url}?socket_timeout={SOCKET_TIMEOUT_S}"

        async def wait_with(locks: Any) -> None:
            acquire = locks.lock("busy").acquire
            if flavor == "sync":
                await asyncio.to_thread(acquire, timeout=WAIT_S)
            else:
                await acquire(timeout=WAIT_S)

        async def scenario() -> None:
            locks: Any = (redlease.Locks if flavor == "sync" else redlease.AsyncLocks)(
                url, prefix=prefix
            )
            waiting = asyncio.create_task(wait_with(locks))
            await asyncio.sleep(WAIT_S / 3)  # queued and waiting
            server.pause()
            try:
                with pytest.raises(redlease.ServerUnavailable, match="leaves the queue"):
                    await waiting
            finally:
                server.resume()
            await (asyncio.to_thread(locks.close) if flavor == "sync" else locks.aclose())

        with caplog.at_level(logging.DEBUG, logger="redlease"):
            asyncio.run(scenario())
        holder.close()
    assert "could not withdraw ['busy'] at once" in caplog.text


@pytest.mark.timeout(60)
def test_an_asyncio_run_that_returns_ends_the_background_on_a_stopped_server(prefix):
    """guide.md: an ``asyncio.run()`` that returns ends the background work (a command of it
    still waiting for the stopped server first waits out the socket timeout). A cancelled
    waiter's withdrawal kept it from returning until the server came back: redis-py's
    timeouts swallowed the shutdown's cancellation, and the retries went on."""
    with EmbeddedServer() as server, redis.Redis.from_url(server.url) as admin:
        admin.set(f"{prefix}:{{busy}}", "someone else", px=60_000)
        url = f"{server.url}?socket_timeout={SOCKET_TIMEOUT_S}"

        async def main() -> None:
            locks = redlease.AsyncLocks(url, prefix=prefix)
            waiter = asyncio.create_task(locks.lock("busy").acquire(timeout=30))
            await asyncio.sleep(0.5)
            server.pause()
            await asyncio.sleep(0.2)
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            await locks.aclose()

        returned = threading.Event()
        thread = threading.Thread(
            target=lambda: (asyncio.run(asyncio.wait_for(main(), 30)), returned.set()),
            daemon=True,
        )
        try:
            thread.start()
            assert returned.wait(CLOSE_GRACE_S + 2 * SOCKET_TIMEOUT_S + 5), "still running"
        finally:
            server.resume()
            thread.join(30)
