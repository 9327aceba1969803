"""The five classic holes of a Redis lock, each closed, told as the user meets them."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis

import redlease
from conftest import eventually, fence_key, held_with_a_waiter, subscribed_channels, token_in
from redlease import ReleaseOutcome
from redlease.core.claims import ExclusiveClaim
from redlease.core.waiters import WaiterBook
from redlease.keys import LockKeys

HOLDER = str(Path(__file__).with_name("holder.py"))


def start_holder(
    url: str, prefix: str, name: str, flavor: str, *args: str
) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, HOLDER, url, prefix, name, "--flavor", flavor, *args],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("ACQUIRED"), line
    return process


async def test_crashed_holder_frees_the_lock_after_its_ttl_and_not_before(
    make_locks, flavor, redlease_url, prefix
):
    holder = start_holder(redlease_url, prefix, "crash", flavor, "--ttl", "2")
    killed_at = time.monotonic()
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    lock = (await make_locks()).lock("crash")

    assert await lock.try_acquire() is None
    await asyncio.sleep(1.0)
    assert await lock.try_acquire() is None, "the lock was free before the TTL ran out"

    lease = await lock.acquire(timeout=5)
    waited = time.monotonic() - killed_at
    assert 1.5 < waited < 3.5
    assert lease.fence == 2
    await lock.release()


async def test_lock_and_ttl_are_set_together(make_locks, server, prefix):
    locks = await make_locks()
    async with locks.lock("orders", ttl=7.5) as lease:
        key = f"{prefix}:{{orders}}"
        assert 0 < server.pttl(key) <= 7500
        assert token_in(server.get(key)) == lease.token
    async with locks.lock("default") as lease:
        assert 25_000 < server.pttl(f"{prefix}:{{default}}") <= 30_000
        assert lease.ttl == redlease.DEFAULT_TTL


async def test_an_expired_holder_cannot_delete_the_next_holders_lock(make_locks, server, prefix):
    first, second = await make_locks(), await make_locks()
    slow = first.lock("report", ttl=0.3)
    fast = second.lock("report", ttl=10)
    stale = await slow.acquire()
    await asyncio.sleep(0.5)
    current = await fast.acquire(timeout=0)

    assert await slow.release() is ReleaseOutcome.EXPIRED
    assert stale.lost
    # told at once by its deadline; the release's answer then names the cause
    assert await eventually(lambda: "taken over" in (stale.lost_reason or ""), 5)
    assert await fast.owned()
    assert token_in(server.get(f"{prefix}:{{report}}")) == current.token
    await fast.release()


def monitor_commands(url: str, stop: threading.Event, seen: list[str]) -> threading.Thread:
    ready = threading.Event()

    def watch() -> None:
        client = redis.Redis.from_url(url, decode_responses=True)
        with client.monitor() as monitor:
            ready.set()
            for event in monitor.listen():
                seen.append(event["command"] if "lua" not in event["client_type"] else "lua")
                if stop.is_set() and "PING" in event["command"]:
                    return

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    ready.wait(5)
    return thread


async def test_release_is_one_atomic_step_without_a_get_then_del_window(
    make_locks, redlease_servers_factory
):
    (private,) = redlease_servers_factory(1)
    locks = await make_locks(private.url)
    lock = locks.lock("atomic")
    async with lock:
        pass
    await lock.acquire()
    stop, seen = threading.Event(), []
    watcher = monitor_commands(private.url, stop, seen)
    await lock.release()
    stop.set()
    redis.Redis.from_url(private.url).ping()
    watcher.join(5)

    sent_by_client = [command.split()[0].upper() for command in seen if command != "lua"]
    assert sent_by_client.count("EVALSHA") == 1
    assert not {"GET", "DEL", "UNLINK"} & set(sent_by_client)
    assert "lua" in seen, "the compare-and-delete runs inside the script"


async def test_a_second_owner_is_refused_while_the_first_holds(make_locks, server, prefix):
    first, second = await make_locks(), await make_locks()
    held = await first.lock("invoice").acquire()
    other = second.lock("invoice")

    assert await other.try_acquire() is None
    with pytest.raises(redlease.LockTimeout) as raised:
        await other.acquire(timeout=0.2)
    assert isinstance(raised.value, TimeoutError)
    with pytest.raises(redlease.NotOwned):
        await other.release()
    assert token_in(server.get(f"{prefix}:{{invoice}}")) == held.token
    assert await first.lock("invoice").owned()
    await first.lock("invoice").release()


async def test_the_body_never_runs_without_the_lock(make_locks):
    first, second = await make_locks(), await make_locks()
    await first.lock("job").acquire()
    ran = False
    with pytest.raises(redlease.LockTimeout):
        async with second.lock("job", timeout=0.1):
            ran = True
    assert not ran


async def test_reentrancy_counts_and_frees_at_zero(make_locks):
    locks, other = await make_locks(), await make_locks()
    lock = locks.lock("tree")
    outer = await lock.acquire()
    inner = await lock.acquire()
    assert inner is outer
    assert outer._count == 2

    assert await lock.release() is ReleaseOutcome.STILL_HELD
    assert await other.lock("tree").try_acquire() is None
    assert await lock.release() is ReleaseOutcome.RELEASED
    assert not await lock.locked()
    with pytest.raises(redlease.NotOwned):
        await lock.release()


async def test_fencing_tokens_strictly_increase_across_holders(make_locks):
    clients = [await make_locks() for _ in range(3)]
    fences = []
    for round_ in range(12):
        lock = clients[round_ % 3].lock("fence")
        async with lock as lease:
            fences.append(lease.fence)
    assert fences == sorted(set(fences))
    assert fences[0] >= 1


def test_fencing_tokens_increase_across_processes(redlease_url, prefix, tmp_path):
    log = tmp_path / "sections.log"
    holders = [
        subprocess.Popen(
            [
                sys.executable,
                HOLDER,
                redlease_url,
                prefix,
                "shared",
                "--hold",
                "0.01",
                "--loops",
                "15",
                "--log",
                str(log),
            ],
            stdout=subprocess.DEVNULL,
        )
        for _ in range(4)
    ]
    assert [holder.wait(60) for holder in holders] == [0, 0, 0, 0]
    sections = sorted(
        (float(enter), float(exit_), int(fence))
        for _, fence, enter, exit_ in (line.split() for line in log.read_text().splitlines())
    )
    assert len(sections) == 60
    fences = [fence for _, _, fence in sections]
    assert fences == sorted(fences)
    assert len(set(fences)) == 60
    for (_, previous_exit, _), (enter, _, _) in itertools.pairwise(sections):
        assert enter >= previous_exit - 0.001, "two processes were inside at once"


async def test_the_decorator_fills_the_lock_name_from_arguments(
    flavor, redlease_url, server, prefix
):
    seen: list[bool] = []
    key = f"{prefix}:{{order:42}}"

    if flavor == "sync":
        locks = redlease.Locks(redlease_url, prefix=prefix)

        @locks.locked("order:{user_id}")
        def create_order(user_id: int, item: str = "book") -> str:
            seen.append(server.exists(key) == 1)
            return f"{user_id}:{item}"

        @locks.locked("order:{user_id}")
        async def create_order_async(user_id: int) -> int:
            seen.append(server.exists(key) == 1)
            return user_id

        assert await asyncio.to_thread(create_order, 42) == "42:book"
        assert await create_order_async(user_id=42) == 42
        locks.close()
    else:
        async with redlease.AsyncLocks(redlease_url, prefix=prefix) as alocks:

            @alocks.locked("order:{user_id}")
            async def create_order_coroutine(user_id: int) -> int:
                seen.append(server.exists(key) == 1)
                return user_id

            assert await create_order_coroutine(42) == 42
            with pytest.raises(redlease.InvalidArgument, match="not an async def"):
                alocks.locked("order:{user_id}")(lambda user_id: user_id)
    assert seen
    assert all(seen)
    assert server.exists(key) == 0


def test_a_template_field_that_is_not_a_parameter_is_refused(redlease_url):
    locks = redlease.Locks(redlease_url)
    with pytest.raises(redlease.InvalidArgument, match="user"):

        @locks.locked("order:{user}")
        def create_order(user_id: int) -> None: ...

    locks.close()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "empty"),
        ("x" * 1025, "1025 bytes"),
        (b"bytes", "must be a str"),
        (42, "must be a str"),
        (None, "must be a str"),
        ("a{b}", "brace"),
    ],
)
async def test_bad_names_are_refused_before_anything_is_written(
    make_locks, server, prefix, name, message
):
    locks = await make_locks()
    with pytest.raises(redlease.InvalidName, match=message):
        locks.lock(name)
    assert not list(server.scan_iter(f"{prefix}*"))


@pytest.mark.parametrize(
    "ttl", [0, -1, 0.0001, float("nan"), float("inf"), "10", True, Decimal("sNaN"), 10**400]
)
async def test_bad_ttls_are_refused(make_locks, ttl):
    locks = await make_locks()
    with pytest.raises(redlease.InvalidArgument, match="ttl"):
        locks.lock("x", ttl=ttl)


@pytest.mark.parametrize("ttl", [0.001, 0.002, 0.009, 0.0095, 0.00999])
async def test_a_ttl_too_short_to_outlive_its_own_round_trip_is_refused(make_locks, ttl):
    locks = await make_locks()
    with pytest.raises(redlease.InvalidArgument, match="at least 10 ms"):
        locks.lock("x", ttl=ttl)
    lock = locks.lock("x", ttl=1)
    async with lock:
        with pytest.raises(redlease.InvalidArgument, match="at least 10 ms"):
            await lock.extend(ttl)
    with pytest.raises(redlease.InvalidArgument, match="at least 10 ms"):
        locks.semaphore("x", 2, ttl=ttl)


async def test_the_shortest_ttl_gives_a_lease(make_locks):
    locks = await make_locks()
    lock = locks.lock("x", ttl=0.01)
    assert await lock.acquire(timeout=1)
    await lock.release()


@pytest.mark.parametrize("seconds", [Decimal("60"), Fraction(60, 1), 60, 60.0])
async def test_any_real_number_of_seconds_is_a_ttl_and_a_timeout(
    make_locks, server, prefix, seconds
):
    """migrating.md: ``ttl`` takes any number of seconds, as the peers' ``timeout=`` and
    ``expire=`` do (a ``Decimal`` or a ``Fraction`` from a configuration was refused)."""
    locks = await make_locks()
    lock = locks.lock("x", ttl=seconds, timeout=seconds / 20)
    async with lock:
        assert 59_000 < server.pttl(f"{prefix}:{{x}}") <= 60_000
        await lock.extend(seconds / 2)
        assert 29_000 < server.pttl(f"{prefix}:{{x}}") <= 30_000
    assert await locks.lock("x").acquire(timeout=seconds / 60)
    await locks.lock("x").release()


async def test_a_bad_timeout_is_refused(make_locks):
    locks = await make_locks()
    with pytest.raises(redlease.InvalidArgument, match="timeout"):
        locks.lock("x", timeout="soon")
    with pytest.raises(redlease.InvalidArgument, match="timeout"):
        await locks.lock("x").acquire(timeout=Decimal("sNaN"))


@pytest.mark.parametrize(
    ("setup", "found"),
    [(lambda r, k: r.rpush(k, "job"), "list"), (lambda r, k: r.set(k, "forever"), "string")],
)
async def test_a_foreign_value_at_the_lock_key_is_named_and_left_alone(
    make_locks, server, prefix, setup, found
):
    key = f"{prefix}:{{taken}}"
    setup(server, key)
    lock = (await make_locks()).lock("taken")
    with pytest.raises(redlease.WrongKeyType, match="taken") as raised:
        await lock.acquire(timeout=1)
    assert raised.value.key == key
    assert raised.value.found == found
    assert server.type(key) == found
    assert not server.exists(fence_key(prefix, "taken"))


async def test_a_foreign_value_at_the_fence_key_leaves_no_lease_behind(make_locks, server, prefix):
    server.set(fence_key(prefix, "audit"), "not-a-number")
    lock = (await make_locks()).lock("audit")
    with pytest.raises(redlease.WrongKeyType, match="fence"):
        await lock.acquire()
    assert not server.exists(f"{prefix}:{{audit}}")


async def test_a_maxed_fence_counter_refuses_new_grants(make_locks, server, prefix):
    server.set(fence_key(prefix, "old"), str(2**63 - 1))
    lock = (await make_locks()).lock("old")
    with pytest.raises(redlease.FenceExhausted):
        await lock.acquire()
    assert not server.exists(f"{prefix}:{{old}}")


async def test_a_server_that_is_down_gives_a_typed_error(make_locks):
    locks = await make_locks("redis://127.0.0.1:1/0")
    lock = locks.lock("anything")
    with pytest.raises(redlease.ServerUnavailable) as raised:
        await lock.acquire(timeout=1)
    assert isinstance(raised.value, ConnectionError)
    assert "anything" in str(raised.value)


async def test_a_lease_that_ends_during_the_body_raises_at_exit(make_locks, server, prefix):
    locks = await make_locks()
    ran_to_end = False
    with pytest.raises(redlease.LeaseLost) as raised:
        async with locks.lock("short", ttl=0.2) as lease:
            await asyncio.sleep(0.4)
            ran_to_end = True
    assert ran_to_end
    assert lease.lost
    assert raised.value.name == "short"


async def test_extend_replaces_the_remaining_time(make_locks, server, prefix):
    locks = await make_locks()
    lock = locks.lock("stretch", ttl=1)
    await lock.acquire()
    await lock.extend(20)
    assert server.pttl(f"{prefix}:{{stretch}}") > 15_000
    server.delete(f"{prefix}:{{stretch}}")
    with pytest.raises(redlease.LeaseLost):
        await lock.extend()
    assert await lock.release() is ReleaseOutcome.EXPIRED


def test_explicit_owner_lets_another_thread_release(redlease_url, prefix):
    with redlease.Locks(redlease_url, prefix=prefix) as locks:
        lock = locks.lock("handover", owner="job-7")
        lease = lock.acquire()
        outcome: list[ReleaseOutcome] = []
        thread = threading.Thread(target=lambda: outcome.append(lock.release()))
        thread.start()
        thread.join(5)
        assert outcome == [ReleaseOutcome.RELEASED]
        assert not lease.lost
        with pytest.raises(redlease.NotOwned):
            locks.lock("handover").release()


def test_errors_form_one_tree():
    for error in (
        redlease.LockTimeout,
        redlease.NotOwned,
        redlease.LeaseLost,
        redlease.InvalidName,
        redlease.WrongKeyType,
        redlease.ServerUnavailable,
    ):
        assert issubclass(error, redlease.LockError)
    assert issubclass(redlease.LockTimeout, TimeoutError)
    assert os.environ.get("REDLEASE_NEVER_SET") is None


async def test_a_hand_off_delivered_twice_never_frees_the_lease_it_granted(
    make_locks, server, prefix
):
    """A failover can deliver a hand-off twice (a replica relays what its master published).
    The copy that comes after the waiter took the lock names a token that holds it: the
    client must not take it for a hand-off to a waiter that left and give the lease back."""
    holder, waiting, _, waiter = await held_with_a_waiter(make_locks, "twice", 10, 10)
    await holder.lock("twice").release()
    handed = await asyncio.wait_for(waiter, 10)
    (channel,) = subscribed_channels(server, f"{prefix}:*")
    copy = f"{handed.fence}:{int(time.time() * 1000)}:{handed.token}"
    for command in ("PUBLISH", "SPUBLISH"):
        with contextlib.suppress(redis.ResponseError):  # SPUBLISH came with Redis 7
            server.execute_command(command, channel, copy)
    async with holder.lock("other"):  # a wait on the same client reads the copy
        with pytest.raises(redlease.LockTimeout):
            await waiting.lock("other", owner="w").acquire(timeout=0.3)
    await asyncio.sleep(0.1)
    assert token_in(server.get(f"{prefix}:{{twice}}")) == handed.token, "the lease was given back"
    assert not handed.lost
    assert await waiting.lock("twice", owner="w").release() is ReleaseOutcome.RELEASED


def test_a_copy_of_the_hand_off_a_waiter_took_is_no_stray():
    """The book of waiters behind the test above: a waiter that left with the lock is not
    remembered as gone, so a copy of its hand-off (however late, and whatever the client's
    threads are doing) is given back by nobody; one that left without it is."""
    keys = LockKeys("twice", "p")
    book: WaiterBook[Any] = WaiterBook()
    took, gave_up = (
        SimpleNamespace(channel="c", claim=ExclusiveClaim(keys, token, 1000, "publish"))
        for token in ("took", "gave-up")
    )
    for waiter in (took, gave_up):
        book.add(waiter)
    book.remove(took, settled=True)
    book.remove(gave_up)
    assert book.deliver("c", "7:0:took", 0.0).stray is None
    assert book.deliver("c", "8:0:gave-up", 0.0).stray is gave_up.claim
