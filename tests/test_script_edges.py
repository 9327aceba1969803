"""What the server-side scripts answer at the edges: exact fences, foreign keys, permissions.

Each scenario puts the server in an unusual but reachable state (a fence counter near
2^63, another program's value at a lock key, an ACL user without pub/sub) and checks
that the answer is exact or a typed error, and that nothing the user relies on (a
waiter's place in the queue, a lease a holder gave back) is lost on the way.
"""

from __future__ import annotations

import asyncio
import functools
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import redis

import redlease
from conftest import fence_key, measure_round_trip
from redlease import ReleaseOutcome
from redlease.core.subscriptions import has_sharded_pubsub
from redlease.server import EmbeddedServer

BEYOND_DOUBLES = 2**53 + 2
"""A counter whose next token, 2^53 + 3, is the first a Lua number (a double) rounds."""
TOP = 2**63 - 1
WAITER = str(Path(__file__).with_name("proc_waiter.py"))


async def test_fences_past_two_to_the_53_are_exact_and_strictly_increasing(
    make_locks, server, prefix
):
    server.set(fence_key(prefix, "big"), BEYOND_DOUBLES)
    locks = await make_locks()
    fences = []
    for _ in range(3):
        async with locks.lock("big") as lease:
            fences.append(lease.fence)
    assert fences == [BEYOND_DOUBLES + 1, BEYOND_DOUBLES + 2, BEYOND_DOUBLES + 3]


async def test_a_handed_over_fence_past_two_to_the_53_is_exact(make_locks, server, prefix):
    server.set(fence_key(prefix, "handed"), BEYOND_DOUBLES)
    holder, waiter = await make_locks(), await make_locks()
    first = await holder.lock("handed", ttl=10).acquire()
    waiting = waiter.lock("handed", ttl=10, owner="waiter")
    pending = asyncio.create_task(waiting.acquire(timeout=10))
    await queued_waiters(server, f"{prefix}:{{handed}}:queue", 1)
    await holder.lock("handed", ttl=10).release()
    second = await pending
    assert (first.fence, second.fence) == (BEYOND_DOUBLES + 1, BEYOND_DOUBLES + 2)
    await waiting.release()


async def test_fences_near_two_to_the_63_stay_positive_then_run_out_cleanly(
    make_locks, server, prefix
):
    server.set(fence_key(prefix, "top"), TOP - 2)
    locks = await make_locks()
    lock = locks.lock("top", ttl=10)
    seen = []
    for _ in range(2):
        async with lock as lease:
            seen.append(lease.fence)
    assert seen == [TOP - 1, TOP]
    with pytest.raises(redlease.FenceExhausted):
        await lock.acquire(timeout=0)
    assert not server.exists(f"{prefix}:{{top}}"), "the half-made grant was not undone"


async def test_family_fences_past_two_to_the_53_are_exact(make_family_locks, server, prefix):
    locks = await make_family_locks()
    server.set(fence_key(prefix, "doc"), BEYOND_DOUBLES)
    write = locks.rw_lock("doc").write
    lease = await locks.run(write.acquire)
    await locks.run(write.release)
    server.set(fence_key(prefix, "slots"), BEYOND_DOUBLES)
    semaphore = locks.semaphore("slots", permits=2)
    permit = await locks.run(semaphore.acquire)
    await locks.run(semaphore.release, permit)
    server.set(fence_key(prefix, "a"), BEYOND_DOUBLES)
    multi = locks.multi_lock(["a", "b"])
    held = await locks.run(multi.acquire)
    await locks.run(multi.release)
    assert lease.fence == BEYOND_DOUBLES + 1
    assert permit.fence == BEYOND_DOUBLES + 1
    assert held.fences["a"] == BEYOND_DOUBLES + 1


@pytest.mark.parametrize("kind", ["hash", "list", "set", "zset", "stream"])
async def test_a_foreign_key_with_a_ttl_is_wrong_key_type_not_a_busy_lock(
    make_locks, server, prefix, kind
):
    key = f"{prefix}:{{foreign}}"
    {
        "hash": lambda: server.hset(key, "field", "value"),
        "list": lambda: server.rpush(key, "item"),
        "set": lambda: server.sadd(key, "member"),
        "zset": lambda: server.zadd(key, {"member": 1}),
        "stream": lambda: server.xadd(key, {"field": "value"}),
    }[kind]()
    server.pexpire(key, 60_000)
    locks = await make_locks()
    lock = locks.lock("foreign")
    with pytest.raises(redlease.WrongKeyType) as raised:
        await lock.try_acquire()
    assert raised.value.key == key
    assert raised.value.found == kind
    with pytest.raises(redlease.WrongKeyType):
        await lock.acquire(timeout=1)
    assert server.type(key) == kind


async def test_a_foreign_value_at_the_queue_is_named_when_a_waiter_must_queue(
    make_locks, server, prefix
):
    holder, waiter = await make_locks(), await make_locks()
    async with holder.lock("queued", ttl=10):
        server.set(f"{prefix}:{{queued}}:queue", "not a list")
        with pytest.raises(redlease.WrongKeyType) as raised:
            await waiter.lock("queued").acquire(timeout=2)
    assert raised.value.key == f"{prefix}:{{queued}}:queue"


async def test_a_holder_frees_its_lease_even_when_the_queue_key_is_foreign(
    make_locks, server, prefix
):
    locks = await make_locks()
    lock = locks.lock("freed", ttl=30)
    await lock.acquire()
    server.set(f"{prefix}:{{freed}}:queue", "not a list")
    assert await lock.release() is ReleaseOutcome.RELEASED
    assert not server.exists(f"{prefix}:{{freed}}")


@pytest.mark.parametrize("kind", ["lock", "fair_lock", "semaphore"])
async def test_a_holder_frees_its_lease_past_queue_entries_it_cannot_read(
    make_family_locks, server, prefix, kind
):
    """Another program's strings in a waiter queue are nobody to hand the lock to: the
    release frees the lease and leaves them as found."""
    locks = await make_family_locks()
    queue = f"{prefix}:{{odd}}:queue"
    if kind == "semaphore":
        semaphore = locks.semaphore("odd", permits=1)
        permit = await locks.run(semaphore.acquire)
        server.rpush(queue, "not an entry", "12")
        assert await locks.run(semaphore.release, permit) is ReleaseOutcome.RELEASED
        assert not server.zcard(f"{prefix}:{{odd}}:holders")
        with pytest.raises(redlease.WrongKeyType) as raised:
            await locks.run(functools.partial(semaphore.acquire, timeout=0.5))
        assert raised.value.key == queue
    else:
        lock = getattr(locks, kind)("odd", ttl=30)
        await locks.run(lock.acquire)
        server.rpush(queue, "not an entry", "12")
        assert await locks.run(lock.release) is ReleaseOutcome.RELEASED
        assert not server.exists(f"{prefix}:{{odd}}")
    assert server.lrange(queue, 0, -1) == ["not an entry", "12"]


async def queued_waiters(server: redis.Redis, queue: str, count: int) -> list[str]:
    deadline = time.monotonic() + 5
    while server.llen(queue) < count:
        assert time.monotonic() < deadline, "the waiters did not queue"
        await asyncio.sleep(0.02)
    return list(server.lrange(queue, 0, -1))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["lock", "fair_lock"])
async def test_a_fence_error_on_release_keeps_every_waiter_in_the_queue(
    make_locks, server, prefix, kind, flavor, redlease_url
):
    """The waiter is a process stopped while the release runs: once woken it meets the
    fence error itself and withdraws, which must not be taken for the release's doing."""
    queue = f"{prefix}:{{kept}}:queue"
    held = getattr(await make_locks(), kind)("kept", ttl=30)
    await held.acquire()
    fair = ["--fair"] if kind == "fair_lock" else []
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(WAITER), redlease_url, prefix, "kept", "--flavor", flavor,
        "--ttl", "30", *fair, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert await asyncio.wait_for(process.stdout.readline(), 10) == b"WAITING\n"
        before = await queued_waiters(server, queue, 1)
        process.send_signal(signal.SIGSTOP)
        server.set(fence_key(prefix, "kept"), "not a number")
        assert await held.release() is ReleaseOutcome.RELEASED
        assert server.lrange(queue, 0, -1) == before, "the waiter's entry was popped and lost"
        process.send_signal(signal.SIGCONT)
        _, errors = await asyncio.wait_for(process.communicate(), 15)
        assert process.returncode not in (0, 2), errors.decode()
        assert b"WrongKeyType" in errors
        assert fence_key(prefix, "kept").encode() in errors
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGCONT)
            process.kill()
            await process.wait()


async def test_the_fair_path_of_acquire_keeps_the_queue_when_no_fence_can_be_drawn(
    make_locks, server, prefix
):
    holder, waiter, newcomer = await make_locks(), await make_locks(), await make_locks()
    queue = f"{prefix}:{{fair}}:queue"
    await holder.fair_lock("fair", ttl=30).acquire()
    waiting = waiter.fair_lock("fair", ttl=30, owner="waiter")
    pending = asyncio.create_task(waiting.acquire(timeout=3))
    before = await queued_waiters(server, queue, 1)
    server.set(fence_key(prefix, "fair"), "not a number")
    server.delete(f"{prefix}:{{fair}}")  # the holder's lease ends: the lock is free
    with pytest.raises(redlease.WrongKeyType):
        await newcomer.fair_lock("fair", ttl=30).try_acquire()
    assert server.lrange(queue, 0, -1) == before
    with pytest.raises(redlease.LockError):
        await pending


@pytest.mark.parametrize(
    ("stored", "found"),
    [
        ("-5", "negative or zero fence counter (-5)"),
        ("-1", "negative or zero fence counter (-1)"),
        ("not a number", "string that is not an integer"),
    ],
)
async def test_a_fence_counter_that_cannot_give_a_positive_token_is_named_and_left_as_found(
    make_locks, server, prefix, stored, found
):
    server.set(fence_key(prefix, "odd"), stored)
    locks = await make_locks()
    with pytest.raises(redlease.WrongKeyType) as raised:
        await locks.lock("odd").try_acquire()
    assert raised.value.found == found
    assert "ERR" not in str(raised.value)
    assert server.get(fence_key(prefix, "odd")) == stored
    assert not server.exists(f"{prefix}:{{odd}}")


async def test_a_fence_counter_of_another_type_is_named_by_its_type(make_locks, server, prefix):
    server.hset(fence_key(prefix, "typed"), "field", "value")
    locks = await make_locks()
    with pytest.raises(redlease.WrongKeyType) as raised:
        await locks.lock("typed").try_acquire()
    assert raised.value.found == "hash"


async def test_a_name_that_cannot_be_encoded_is_an_invalid_name(make_locks, server, prefix):
    locks = await make_locks()
    with pytest.raises(redlease.InvalidName):
        await locks.lock("bad\udc80name").acquire(timeout=0)
    assert not list(server.scan_iter(f"{prefix}*"))


def acl_user(port: int, *rules: str) -> str:
    """A user with ``rules``; rules about sharded pub/sub are left out on a server that has
    none (Redis 6.2 refuses to name its commands)."""
    with redis.Redis(port=port) as admin:
        if not has_sharded_pubsub(admin.info("server")):
            rules = tuple(rule for rule in rules if rule not in ("-spublish", "-ssubscribe"))
        admin.execute_command("ACL", "SETUSER", "locker", "on", ">pw", "~*", *rules)
    return f"redis://locker:pw@127.0.0.1:{port}/0"


async def test_a_waiter_without_pubsub_permission_gets_a_permission_error_in_time(
    make_locks, redlease_servers_factory
):
    (private,) = redlease_servers_factory(1)
    url = acl_user(private.port, "&*", "+@all", "-subscribe", "-ssubscribe")
    holder = await make_locks(private.url)
    locks = await make_locks(url)
    await holder.lock("guarded", ttl=10).acquire()

    started = time.monotonic()
    with pytest.raises(redlease.ServerRefused) as raised:
        await locks.lock("guarded").acquire(timeout=2)
    assert time.monotonic() - started < 2.5
    assert "subscribe" in str(raised.value).lower()
    assert "permission" in str(raised.value).lower()

    await holder.lock("guarded", ttl=10).release()
    async with locks.lock("guarded", ttl=5) as lease:  # the client still works
        assert lease.fence == 2


async def test_a_holder_without_publish_permission_still_frees_its_lease(
    make_locks, redlease_servers_factory, prefix
):
    (private,) = redlease_servers_factory(1)
    url = acl_user(private.port, "&*", "+@all", "-publish", "-spublish")
    holder = await make_locks(url)
    waiter = await make_locks(private.url)
    lock = holder.lock("quiet", ttl=3)
    held = await lock.acquire()
    waiting = waiter.lock("quiet", ttl=30, owner="waiter")
    pending = asyncio.create_task(waiting.acquire(timeout=10))
    with redis.Redis(port=private.port) as admin:
        await queued_waiters(admin, f"{prefix}:{{quiet}}:queue", 1)
        assert await lock.release() is ReleaseOutcome.RELEASED
        assert not admin.exists(f"{prefix}:{{quiet}}"), "the lease was left until its TTL"
    lease = await pending
    granted = time.monotonic()
    slack = 20 * measure_round_trip(private.url) + 0.5
    assert granted <= held.acquired_at + 3 + slack, (
        f"the waiter got the lock {granted - held.acquired_at:.2f} s after a 3 s lease was "
        "taken: its wait outlasted the lease it waited on"
    )
    assert lease.fence > 1
    await waiting.release()


async def test_a_denied_sharded_pubsub_probe_is_not_taken_for_an_old_server(
    redlease_servers_factory, prefix
):
    (private,) = redlease_servers_factory(1)
    with redis.Redis(port=private.port) as admin:
        version = admin.info("server")
    if not has_sharded_pubsub(version):
        pytest.skip("this server has no sharded pub/sub")
    url = acl_user(private.port, "&*", "+@all", "-spublish")
    async with redlease.AsyncLocks(url, prefix=prefix) as locks:
        commands = await locks._commands()
    assert commands.sharded


@pytest.fixture
def make_family_locks(make_locks, flavor) -> Any:
    """``await make_family_locks()``: a client whose calls run in its flavour's way."""

    class Runner:
        def __init__(self, locks: Any) -> None:
            self.locks = locks

        def __getattr__(self, name: str) -> Any:
            target = self.locks.locks if flavor == "sync" else self.locks
            return getattr(target, name)

        async def run(self, function: Any, *args: Any) -> Any:
            if flavor == "sync":
                return await self.locks.run(function, *args)
            return await function(*args)

    async def make() -> Runner:
        return Runner(await make_locks())

    return make


@pytest.mark.parametrize("found", ["string", "hash"])
async def test_the_family_inspections_name_a_foreign_value(
    make_family_locks, server, prefix, found
):
    """Every call of a semaphore or a latch, the ones that only look included, answers a
    foreign value at one of its keys with WrongKeyType, and leaves the value as found."""
    locks = await make_family_locks()
    holders, count = f"{prefix}:{{slots}}:holders", f"{prefix}:{{done}}:count"
    for key in (holders, count):
        if found == "string":
            server.set(key, "abc")
        else:
            server.hset(key, "field", "value")
    semaphore, latch = locks.semaphore("slots", permits=2), locks.latch("done")
    calls = [
        (semaphore.available, ()),
        (latch.count, ()),
        (latch.wait, (0.2,)),
        (latch.count_down, ()),
        (latch.try_set_count, (3,)),
    ]
    for call, args in calls:
        with pytest.raises(redlease.WrongKeyType) as raised:
            await locks.run(call, *args)
        assert raised.value.key in (holders, count), call
    assert server.type(holders) == server.type(count) == found
    if found == "string":
        assert server.get(count) == "abc"


async def test_a_multi_lock_names_a_bad_name_before_it_sorts_them(make_family_locks):
    locks = await make_family_locks()
    with pytest.raises(redlease.InvalidName):
        locks.multi_lock(["ok", 123])


@pytest.mark.parametrize(
    "count",
    ["9223372036854775807", "9007199254740993", "12345678901234567890123", "007", "-0", "-5"],
)
async def test_a_latch_count_redis_cannot_read_as_an_integer_is_named(
    make_family_locks, server, prefix, count
):
    locks = await make_family_locks()
    server.set(f"{prefix}:{{done}}:count", count)
    latch = locks.latch("done")
    for call, args in ((latch.count, ()), (latch.wait, (0.1,)), (latch.count_down, ())):
        with pytest.raises(redlease.WrongKeyType):
            await locks.run(call, *args)
    assert server.get(f"{prefix}:{{done}}:count") == count


@pytest.mark.parametrize("found", ["hash", "string without expiry"])
async def test_looking_at_a_lock_names_a_foreign_value(make_family_locks, server, prefix, found):
    """``locked()`` and ``owned()`` answer another program's value with WrongKeyType, as an
    acquire does, instead of taking it for a holder (or failing on WRONGTYPE)."""
    locks = await make_family_locks()
    for key in (f"{prefix}:{{plain}}", f"{prefix}:{{doc}}:writer"):
        if found == "hash":
            server.hset(key, "field", "value")
        else:
            server.set(key, "not ours")
    write = locks.rw_lock("doc").write
    calls = [write.acquire]
    if found == "hash":  # a string is read as a lease by these: its expiry is not looked at
        calls += [write.locked, write.owned, locks.lock("plain").locked, locks.lock("plain").owned]
    for call in calls:
        with pytest.raises(redlease.WrongKeyType):
            await locks.run(call)
    with pytest.raises(redlease.WrongKeyType):
        await locks.run(locks.rw_lock("doc").read.acquire, False)


async def test_a_readers_owned_names_a_foreign_value_at_the_holders(
    make_family_locks, server, prefix
):
    locks = await make_family_locks()
    read = locks.rw_lock("doc").read
    await locks.run(read.acquire)
    holders = f"{prefix}:{{doc}}:holders"
    server.delete(holders)
    server.set(holders, "not ours")
    with pytest.raises(redlease.WrongKeyType) as raised:
        await locks.run(read.owned)
    assert raised.value.key == holders
    assert server.get(holders) == "not ours"


async def test_a_readers_owned_asks_the_server_also_when_it_holds_nothing(
    make_family_locks, server, prefix
):
    """guide.md: a key of another type at ``owned()`` is a WrongKeyType, the value left as
    found; an owner with no read lease asks too (it used to answer False unasked)."""
    locks = await make_family_locks()
    holders = f"{prefix}:{{page}}:holders"
    server.set(holders, "not ours")
    with pytest.raises(redlease.WrongKeyType) as raised:
        await locks.run(locks.rw_lock("page").read.owned)
    assert raised.value.key == holders
    assert server.get(holders) == "not ours"
    server.delete(holders)
    assert await locks.run(locks.rw_lock("page").read.owned) is False


async def test_the_family_says_server_unavailable_when_its_server_is_gone(make_locks, flavor):
    """A reader's ``owned()`` and a latch's ``wait()`` too, as every other call."""
    with EmbeddedServer() as gone, ThreadPoolExecutor(1) as one_thread:
        locks = await make_locks(gone.url)
        family = locks.locks if flavor == "sync" else locks
        read, latch = family.rw_lock("doc").read, family.latch("gate")

        async def run(call: Any) -> Any:
            # one owner: owned() of a thread that holds nothing answers False with no I/O
            loop = asyncio.get_running_loop()
            return await (loop.run_in_executor(one_thread, call) if flavor == "sync" else call())

        for call in (read.acquire, functools.partial(latch.try_set_count, 1)):
            await run(call)
        gone.kill()
        for call in (read.owned, functools.partial(latch.wait, 1)):
            with pytest.raises(redlease.ServerUnavailable):
                await run(call)


async def test_a_latch_takes_every_count_it_can_keep_exactly_and_no_larger(make_family_locks):
    """Counts travel through Lua numbers: up to 2^53 - 1 they stay exact; a larger one is
    refused before anything is written, rather than read back wrong (2^63 - 1 as -2^63, so
    that ``wait()`` found the latch open)."""
    locks = await make_family_locks()
    top, over = locks.latch("top"), locks.latch("over")
    assert await locks.run(top.try_set_count, 2**53 - 1) is True
    assert await locks.run(top.count) == 2**53 - 1
    assert await locks.run(top.count_down) == 2**53 - 2
    assert await locks.run(top.wait, 0) is False
    with pytest.raises(redlease.InvalidArgument):
        await locks.run(over.try_set_count, 2**53)
    assert await locks.run(over.count) == 0


def lease_left_ms(server: redis.Redis, operation: Any, token: str) -> int:
    """How long the server keeps a shared claim's grant: the writer key's TTL, or the
    holder's score (its end, in server ms) in the holders set."""
    holders, writer = operation.keys[:2]
    if server.get(writer) == token:
        return int(server.pttl(writer))
    seconds, micros = server.time()
    return int(server.zscore(holders, token)) - (seconds * 1000 + micros // 1000)


@pytest.mark.parametrize("side", ["write", "permit", "read"])
@pytest.mark.parametrize("queued", ["0", "1"])
def test_a_shared_acquire_sent_again_finds_its_own_grant(
    redlease_url, server, prefix, side, queued
):
    """redis-py sends a command again after a lost reply, and a waiter whose hand-off message
    was lost asks again: the second call must answer the grant the first one made, not
    refuse it (a writer, or the permit that filled a semaphore, would wait out its own TTL)."""
    with redlease.Locks(redlease_url, prefix=prefix) as locks:
        if side == "permit":
            handle = locks.semaphore("pool", 1, ttl=30)
            claim = handle._claim(handle._owner(), "publish")
        else:
            handle = getattr(locks.rw_lock("pool", ttl=30), side)
            claim = handle._claim("sent-again", "publish")
        operation = claim.acquire_op(queued)
    script = (operation.script.source, len(operation.keys), *operation.keys, *operation.args)
    first = server.eval(*script)
    assert int(first[0]) == 1
    holders, writer = operation.keys[:2]
    if side == "write":
        server.pexpire(writer, 10_000)  # time has passed since the first grant
    else:
        server.zadd(holders, {claim.token: int(server.zscore(holders, claim.token)) - 20_000})
    again = server.eval(*script)
    assert int(again[0]) == 1, f"the resent acquire was refused: {again}"
    assert int(again[1]) > int(first[1]), "a new grant draws a new, greater fence"
    assert lease_left_ms(server, operation, claim.token) > 20_000, "the lease is written again"
    assert not server.exists(operation.keys[2]), "no queue entry is left behind"
