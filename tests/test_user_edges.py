"""Rough edges a new user meets first: options that mean what the docs say."""

from __future__ import annotations

from typing import Any

import pytest

import redlease
from redlease import ReleaseOutcome


@pytest.mark.parametrize("timeout", [None, -1])
async def test_timeout_none_on_the_lock_means_wait_as_long_as_it_takes(make_locks, timeout):
    locks = await make_locks()
    async with locks.lock("patient", timeout=timeout) as lease:
        assert lease.fence == 1


def test_the_decorator_takes_timeout_none_too(redlease_url, prefix):
    with redlease.Locks(redlease_url, prefix=prefix) as locks:

        @locks.locked("job:{number}", timeout=None)
        def job(number: int) -> int:
            return number * 2

        assert job(21) == 42


def test_a_write_block_that_downgraded_ends_the_read_hold_at_its_exit(redlease_url, prefix):
    with redlease.Locks(redlease_url, prefix=prefix) as locks:
        rw = locks.rw_lock("report")
        with rw.write:
            read = rw.write.downgrade()
            assert rw.read.lease is read
        assert rw.read.lease is None
        assert rw.read.readers() == 0
        with rw.write as again:
            assert again.fence > read.fence


async def test_an_async_write_block_that_downgraded_ends_the_read_hold(redlease_url, prefix):
    async with redlease.AsyncLocks(redlease_url, prefix=prefix) as locks:
        rw = locks.rw_lock("report")
        async with rw.write:
            await rw.write.downgrade()
        assert rw.read.lease is None
        assert await rw.read.readers() == 0


def test_releasing_the_write_side_after_a_downgrade_releases_the_read_hold(redlease_url, prefix):
    with redlease.Locks(redlease_url, prefix=prefix) as locks:
        rw = locks.rw_lock("doc")
        rw.write.acquire()
        rw.write.downgrade()
        assert rw.write.release() is ReleaseOutcome.RELEASED
        with pytest.raises(redlease.NotOwned):
            rw.read.release()


def test_a_client_of_the_wrong_flavour_is_refused_when_the_locks_are_made(redlease_url):
    valkey = pytest.importorskip("valkey")
    import redis  # noqa: PLC0415

    for wrong in (redis.asyncio.Redis.from_url(redlease_url), valkey.asyncio.Valkey()):
        with pytest.raises(redlease.InvalidArgument, match="AsyncLocks"):
            redlease.Locks(wrong)
    for wrong in (redis.Redis.from_url(redlease_url), valkey.Valkey()):
        with pytest.raises(redlease.InvalidArgument, match=r"use redlease\.Locks"):
            redlease.AsyncLocks(wrong)
    with pytest.raises(redlease.InvalidArgument, match="RedisGuard"):
        redlease.RedisGuard(redis.asyncio.Redis.from_url(redlease_url))
    with pytest.raises(redlease.InvalidArgument):
        redlease.Locks(object())  # type: ignore[arg-type]


def valkey_client(url: str, asyncio: bool) -> object:
    valkey = pytest.importorskip("valkey")
    return (valkey.asyncio.Valkey if asyncio else valkey.Valkey).from_url(url)


def test_valkey_py_sync_clients_lock_wait_and_fence(redlease_url, prefix):
    holder = redlease.Locks(valkey_client(redlease_url, False), prefix=prefix)
    waiter = redlease.Locks(valkey_client(redlease_url, False), prefix=prefix)
    try:
        lease = holder.lock("v", ttl=5).acquire()
        import threading  # noqa: PLC0415

        got: list[redlease.Lease] = []
        waiting = waiter.lock("v", owner="w")
        thread = threading.Thread(target=lambda: got.append(waiting.acquire(timeout=5)))
        thread.start()
        holder.lock("v").release()
        thread.join(10)
        assert got
        assert got[0].fence == lease.fence + 1
        guard = redlease.RedisGuard(valkey_client(redlease_url, False))
        guard.set(got[0], f"{prefix}:{{v}}:resource", "written")
        with pytest.raises(redlease.FenceRejected):
            guard.set(lease, f"{prefix}:{{v}}:resource", "stale")
        waiting.release()
    finally:
        holder.close()
        waiter.close()


async def test_valkey_py_asyncio_clients_lock_wait_and_survive_a_dead_server(redlease_url, prefix):
    holder = redlease.AsyncLocks(valkey_client(redlease_url, True), prefix=prefix)
    waiter = redlease.AsyncLocks(valkey_client(redlease_url, True), prefix=prefix)
    try:
        lease = await holder.lock("va", ttl=5).acquire()
        import asyncio  # noqa: PLC0415

        pending = asyncio.create_task(waiter.lock("va", owner="w").acquire(timeout=5))
        await asyncio.sleep(0.2)
        await holder.lock("va").release()
        assert (await pending).fence == lease.fence + 1
        await waiter.lock("va", owner="w").release()
    finally:
        await holder.aclose()
        await waiter.aclose()
    valkey = pytest.importorskip("valkey")
    nowhere = redlease.AsyncLocks(valkey.asyncio.Valkey(port=1), prefix=prefix)
    with pytest.raises(redlease.ServerUnavailable):
        await nowhere.lock("x").acquire(timeout=0)


def test_a_closed_client_takes_no_new_lease_but_releases_what_it_holds(redlease_url, prefix):
    locks = redlease.Locks(redlease_url, prefix=prefix)
    lock = locks.lock("closing")
    lock.acquire()
    locks.close()
    with pytest.raises(redlease.InvalidArgument, match="closed"):
        locks.lock("another").acquire()
    assert lock.release() is ReleaseOutcome.RELEASED


def test_an_expired_release_is_silent_without_logging_configuration(redlease_url, prefix):
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    program = (
        "import time, redlease\n"
        f"locks = redlease.Locks({redlease_url!r}, prefix={prefix!r})\n"
        "lock = locks.lock('quiet', ttl=0.05)\n"
        "lock.acquire()\n"
        "time.sleep(0.2)\n"
        "assert lock.release() is redlease.ReleaseOutcome.EXPIRED\n"
        "locks.close()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], check=False, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", "a library printed on the application's stderr"


def test_threads_taking_a_clients_first_leases_at_once_start_one_renewal_worker(
    redlease_url, prefix
):
    import threading  # noqa: PLC0415
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    with redlease.Locks(redlease_url, prefix=prefix) as locks:

        def take(number: int) -> None:
            locks.lock(f"n{number}", owner="o", ttl=5, renew=True).acquire()

        with ThreadPoolExecutor(20) as pool:
            list(pool.map(take, range(200)))
        renewers = [t for t in threading.enumerate() if t.name == "redlease-renewer"]
        assert len(renewers) == 1


@pytest.mark.parametrize("flavor", ["sync", "async"])
def test_a_client_that_does_not_encode_utf8_refuses_names_its_keys_would_differ_by(
    redlease_url, prefix, flavor
):
    """redis-py packs a str by the client's encoding in one place and as UTF-8 in another
    (the sync client with hiredis): a non-ASCII name would get other key bytes, and so
    another lock, depending on the flavour. ASCII names are the same bytes either way."""
    import asyncio  # noqa: PLC0415

    import redis  # noqa: PLC0415
    import redis.asyncio  # noqa: PLC0415

    if flavor == "sync":
        client: Any = redis.Redis.from_url(redlease_url, encoding="latin-1")
        with redlease.Locks(client, prefix=prefix) as locks:
            with pytest.raises(redlease.InvalidName, match="latin-1"):
                locks.lock("caf\xe9").try_acquire()
            with locks.lock("plain", ttl=5) as lease:
                assert lease.fence >= 1
        client.close()
        return

    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(redlease_url, encoding="latin-1")
        async with redlease.AsyncLocks(client, prefix=prefix) as locks:
            with pytest.raises(redlease.InvalidName, match="latin-1"):
                await locks.lock("caf\xe9").try_acquire()
            async with locks.lock("plain", ttl=5) as lease:
                assert lease.fence >= 1
        await client.aclose()

    asyncio.run(scenario())


def test_a_prefix_a_non_utf8_client_would_encode_differently_is_refused(redlease_url):
    import redis  # noqa: PLC0415

    client = redis.Redis.from_url(redlease_url, encoding="latin-1")
    with pytest.raises(redlease.InvalidArgument, match="latin-1"):
        redlease.Locks(client, prefix="pr\xe9fixe")
    client.close()
