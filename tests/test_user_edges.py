"""Rough edges a new user meets first: options that mean what the docs say."""

from __future__ import annotations

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
