from __future__ import annotations


async def test_lock_round_trip(make_locks, flavor):
    locks = await make_locks()
    lock = locks.lock("smoke")
    async with lock as lease:
        assert lease.fence >= 1
        assert await lock.owned()
    assert not await lock.locked()
